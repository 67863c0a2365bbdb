/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The batch's image memory (image_pool.h). A spare block serves a request
 * of its own size (photos of a shoot share one), and a plain spare is not
 * used once pinning is possible: the first files decode while CUDA starts,
 * into plain memory. When a new block is made, the spares that could not
 * serve are freed, so the pool holds no more than the files in flight at
 * once (the pipeline's window, a few dozen: the lists are scanned).
 * Pinned memory cannot be swapped out: at most 1/PINNED_SHARE of the
 * machine's memory is pinned, blocks beyond it are plain (the engine
 * stages those as before). */
#include "image_pool.h"

#include "../core/cudafx.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PINNED_SHARE 8

typedef struct {
  void  *data;
  size_t bytes;
  int    pinned;
  int    spare; /* given back */
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block          *blocks; /* every block made and not freed */
static int             n_blocks, n_allocated;
static size_t          pinned_bytes; /* in pinned blocks, held or spare */
static cli_image_pool_stats stats;   /* under the lock */
static __thread double thread_ms;

/* CLOCK_MONOTONIC ms, as timeline.c's (this file is also linked into the
 * tests, without the rest of the CLI). */
static double
now_ms (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static size_t
pinned_cap (void)
{
  long pages = sysconf (_SC_PHYS_PAGES), size = sysconf (_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? (size_t) pages * (size_t) size / PINNED_SHARE : 0;
}

/* With the lock held: frees the spares; the held blocks move down. */
static void
free_spares (void)
{
  int kept = 0;
  double start = now_ms ();
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i].spare)
      {
        pinned_bytes -= blocks[i].pinned ? blocks[i].bytes : 0;
        cudafx_host_free (blocks[i].data);
        stats.freed++;
      }
    else
      blocks[kept++] = blocks[i];
  n_blocks = kept;
  stats.free_ms += now_ms () - start;
}

void *
cli_image_pool_take (size_t bytes)
{
  const int pinnable = cudafx_host_pinnable ();
  void *data = NULL;
  double start = now_ms ();

  pthread_mutex_lock (&lock);
  for (int i = 0; i < n_blocks && !data; i++)
    if (blocks[i].spare && blocks[i].bytes == bytes && (blocks[i].pinned || !pinnable))
      {
        blocks[i].spare = 0;
        data = blocks[i].data;
      }
  if (!data)
    {
      free_spares ();
      if (n_blocks == n_allocated)
        {
          int n = n_allocated ? 2 * n_allocated : 16;
          block *more = realloc (blocks, (size_t) n * sizeof *blocks);
          if (!more)
            goto out;
          blocks = more;
          n_allocated = n;
        }
      int pin = pinnable && pinned_bytes + bytes <= pinned_cap ();
      double made = now_ms ();
      data = pin ? cudafx_host_alloc (bytes) : malloc (bytes ? bytes : 1);
      if (data)
        {
          pin = pin && cudafx_host_pinned (data, bytes);
          pinned_bytes += pin ? bytes : 0;
          blocks[n_blocks++] = (block) { data, bytes, pin, 0 };
          *(pin ? &stats.pin_ms : &stats.plain_ms) += now_ms () - made;
          *(pin ? &stats.pinned : &stats.plain) += 1;
        }
    }
out:
  pthread_mutex_unlock (&lock);
  thread_ms += now_ms () - start;
  return data;
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
  pthread_mutex_lock (&lock);
  free_spares ();
  if (!n_blocks)
    {
      free (blocks);
      blocks = NULL;
      n_allocated = 0;
    }
  pthread_mutex_unlock (&lock);
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
