/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The batch's image memory (image_pool.h). A spare block serves a request
 * of its own size (photos of a shoot share one). When a new block is made,
 * the spares that could not serve are freed, so the pool holds no more than
 * the files in flight at once (the pipeline's window, a few dozen: the
 * lists are scanned). Blocks are made plain, in 2 MB pages
 * (cudafx_host_alloc_plain), and pinned
 * when the engine first takes them to the device (cli_image_pool_pin, on
 * the engine worker between its calls): only blocks the GPU uses are
 * pinned, never while CUDA starts, and the pages are there by then, which
 * makes pinning quick. Pinned memory cannot be swapped out: at most
 * 1/PINNED_SHARE of the machine's memory is pinned, blocks beyond it stay
 * plain (the engine stages those). Making, pinning and freeing blocks
 * happen outside the lock: freeing a pinned block takes a millisecond. */
#include "image_pool.h"
#include "batch.h"

#include "../core/cudafx.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define PINNED_SHARE 8

typedef struct {
  void  *data;
  size_t bytes;
  int    pinned;
  int    spare; /* given back */
} block;

static pthread_mutex_t      lock = PTHREAD_MUTEX_INITIALIZER;
static block               *blocks; /* every block made and not freed */
static int                  n_blocks, n_allocated;
static size_t               pinned_bytes; /* in pinned blocks, held or spare, or being pinned */
static cli_image_pool_stats stats;        /* under the lock */
static __thread double      thread_ms;

static size_t
pinned_cap (void)
{
  long pages = sysconf (_SC_PHYS_PAGES), size = sysconf (_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? (size_t) pages * (size_t) size / PINNED_SHARE : 0;
}

/* With the lock held: takes the spares out of the pool into *out (an array
 * for free_blocks, called after unlocking); the held blocks move down. */
static int
detach_spares (block **out)
{
  int kept = 0, n = 0;
  *out = malloc ((size_t) (n_blocks ? n_blocks : 1) * sizeof **out);
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i].spare && *out)
      {
        pinned_bytes -= blocks[i].pinned ? blocks[i].bytes : 0;
        (*out)[n++] = blocks[i];
      }
    else
      blocks[kept++] = blocks[i];
  n_blocks = kept;
  return n;
}

static void
free_blocks (block *doomed, int n)
{
  double start = cli_now_ms ();
  for (int i = 0; i < n; i++)
    cudafx_host_free (doomed[i].data);
  free (doomed);
  pthread_mutex_lock (&lock);
  stats.freed += n;
  stats.free_ms += n ? cli_now_ms () - start : 0;
  pthread_mutex_unlock (&lock);
}

/* With the lock held: room for one more block; 0 if none could be made. */
static int
room_for_one (void)
{
  if (n_blocks < n_allocated)
    return 1;
  int n = n_allocated ? 2 * n_allocated : 16;
  block *more = realloc (blocks, (size_t) n * sizeof *blocks);
  if (!more)
    return 0;
  blocks = more;
  n_allocated = n;
  return 1;
}

void *
cli_image_pool_take (size_t bytes)
{
  void *data = NULL;
  block *doomed = NULL;
  int n_doomed = 0;
  double start = cli_now_ms ();

  pthread_mutex_lock (&lock);
  for (int i = 0; i < n_blocks && !data; i++)
    if (blocks[i].spare && blocks[i].bytes == bytes)
      {
        blocks[i].spare = 0;
        data = blocks[i].data;
      }
  if (!data)
    n_doomed = detach_spares (&doomed);
  pthread_mutex_unlock (&lock);
  if (doomed)
    free_blocks (doomed, n_doomed);

  if (!data)
    {
      double made = cli_now_ms ();
      void *p = cudafx_host_alloc_plain (bytes);
      double took = cli_now_ms () - made;
      pthread_mutex_lock (&lock);
      if (p && room_for_one ())
        {
          blocks[n_blocks++] = (block) { p, bytes, 0, 0 };
          stats.plain++;
          stats.plain_ms += took;
          data = p;
        }
      pthread_mutex_unlock (&lock);
      if (p && !data)
        free (p);
    }
  thread_ms += cli_now_ms () - start;
  return data;
}

void
cli_image_pool_pin (const void *data)
{
  void *p = NULL;
  size_t bytes = 0;
  double start = cli_now_ms ();

  if (!data || !cudafx_host_pinnable ())
    return;
  /* Only the block's holder pins it (one file's stage at a time), so no
   * other thread pins or frees it meanwhile; its bytes are reserved. */
  pthread_mutex_lock (&lock);
  for (int i = 0; i < n_blocks && !p; i++)
    if (blocks[i].data == data && !blocks[i].pinned && pinned_bytes + blocks[i].bytes <= pinned_cap ())
      {
        p = blocks[i].data;
        bytes = blocks[i].bytes;
        pinned_bytes += bytes;
      }
  pthread_mutex_unlock (&lock);
  if (!p)
    return;
  int pinned = cudafx_host_pin (p, bytes);
  double took = cli_now_ms () - start;
  pthread_mutex_lock (&lock);
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i].data == p)
      blocks[i].pinned = pinned;
  pinned_bytes -= pinned ? 0 : bytes;
  stats.pinned += pinned;
  stats.pin_ms += took;
  pthread_mutex_unlock (&lock);
  thread_ms += took;
}

void
cli_image_pool_give (void *data)
{
  pthread_mutex_lock (&lock);
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i].data == data)
      blocks[i].spare = 1;
  pthread_mutex_unlock (&lock);
}

void
cli_image_pool_clear (void)
{
  block *doomed;
  pthread_mutex_lock (&lock);
  int n = detach_spares (&doomed);
  if (!n_blocks)
    {
      free (blocks);
      blocks = NULL;
      n_allocated = 0;
    }
  pthread_mutex_unlock (&lock);
  free_blocks (doomed, n);
}

void
cli_image_pool_get_stats (cli_image_pool_stats *out)
{
  pthread_mutex_lock (&lock);
  *out = stats;
  pthread_mutex_unlock (&lock);
}

double
cli_image_pool_thread_ms (void)
{
  return thread_ms;
}
