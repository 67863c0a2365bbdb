/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The context's copy threads: rows between pageable images and the pinned
 * staging buffers, copied with streaming stores by a pool of threads that
 * the caller joins (cfx_host_copy). See context.cuh. */
#include "context.cuh"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <stdint.h>
#include <string.h>
#include <thread>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* memcpy with streaming stores: neither side of a staging copy is read
 * again by this core (the copy engine reads the pinned rows, the host the
 * result much later), so the destination need not be read into the cache
 * first, which saves a third of the copy's memory traffic. */
static void
stream_copy (unsigned char *dst, const unsigned char *src, size_t n)
{
#ifdef __SSE2__
  size_t head = (16 - (uintptr_t) dst % 16) % 16;
  head = head < n ? head : n;
  memcpy (dst, src, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64)
    {
      __m128i v[4];
      for (int j = 0; j < 4; j++)
        v[j] = _mm_loadu_si128 ((const __m128i *) (src + i + 16 * j));
      for (int j = 0; j < 4; j++)
        _mm_stream_si128 ((__m128i *) (dst + i + 16 * j), v[j]);
    }
  memcpy (dst + i, src + i, n - i);
#else
  memcpy (dst, src, n);
#endif
}

void
cfx_copy_host_rows (void *ctx, int i0, int i1)
{
  const cfx_host_rows *h = (const cfx_host_rows *) ctx;
  for (int i = i0; i < i1; i++)
    {
      unsigned char *p = h->pinned + (size_t) i * h->row_bytes;
      int y = h->v0 + i;
      if (!h->to_pinned)
        stream_copy (cudafx_row (h->img, y), p, h->row_bytes);
      else
        {
          int r = cudafx_border_index (y, h->img->height, h->border);
          if (r < 0)
            memset (p, 0, h->row_bytes);
          else
            stream_copy (p, cudafx_row (h->img, r), h->row_bytes);
        }
    }
#ifdef __SSE2__
  _mm_sfence (); /* the streamed rows visible before the copy engine or another thread reads them */
#endif
}

/* Threads for those copies: one alone moves a fraction of what the two copy
 * engines move at once (docs/BENCHMARKS.md, "Host copies on the context's
 * threads"). */
constexpr int CFX_COPY_THREADS = 16;

/* The context's copy threads. Not an OpenMP team: its threads spin after
 * each parallel region (libgomp's active wait) and the region's end waits
 * for every one of them, so in a CLI batch, whose codec threads keep every
 * core busy, each of a call's copy rounds waited for descheduled team
 * members and the copies took most of the call (docs/BENCHMARKS.md,
 * "Host copies on the context's threads"). These
 * watch briefly for the next round, then sleep on a condition variable
 * (CFX_COPY_SPIN); the caller copies too and
 * waits only for the rows a helper has taken, never for a helper that has
 * not woken up. A round's chunks are handed out by one atomic counter
 * tagged with the round, so a helper that wakes late takes nothing of a
 * later round. */
struct cfx_copy_pool
{
  std::mutex               lock;
  std::condition_variable  wake;     /* a new round */
  std::condition_variable  finished; /* the round's last chunk copied */
  std::vector<std::thread> helpers;
  /* the round, under lock */
  unsigned                 round = 0;
  const cfx_host_rows     *job = nullptr;
  int                      rows = 0, chunk = 0, chunks = 0, done = 0;
  std::atomic<uint64_t>    next{ 0 }; /* round << 32 | the next chunk to take */
};

/* Copies chunks of the round until none is left; counts them done. */
static void
copy_chunks (cfx_copy_pool *p, unsigned round, const cfx_host_rows *job, int rows, int chunk, int chunks)
{
  int copied = 0;
  uint64_t v = p->next.load ();
  for (;;)
    {
      if ((unsigned) (v >> 32) != round || (int) (uint32_t) v >= chunks)
        break;
      if (!p->next.compare_exchange_weak (v, v + 1))
        continue;
      const int i0 = (int) (uint32_t) v * chunk;
      cfx_copy_host_rows ((void *) job, i0, i0 + chunk < rows ? i0 + chunk : rows);
      copied++;
      v = p->next.load ();
    }
  if (copied)
    {
      std::lock_guard<std::mutex> g (p->lock);
      p->done += copied;
      if (p->done == p->chunks)
        p->finished.notify_one ();
    }
}

/* How long a helper watches for the next round before it sleeps: the
 * rounds of one call follow each other within a chunk's time on the copy
 * engine, and waking a sleeping helper costs about as long as a u8 round's
 * copying (docs/BENCHMARKS.md, "Host copies on the context's threads", has
 * the figures and what helpers that always slept cost a lone call). */
constexpr auto CFX_COPY_SPIN = std::chrono::microseconds (100);

static void
copy_helper (cfx_copy_pool *p)
{
  std::unique_lock<std::mutex> g (p->lock);
  unsigned seen = p->round;
  for (;;)
    {
      p->wake.wait (g, [&] { return p->round != seen; });
      while (p->round != seen)
        {
          seen = p->round;
          const cfx_host_rows *job = p->job;
          const int rows = p->rows, chunk = p->chunk, chunks = p->chunks;
          g.unlock ();
          copy_chunks (p, seen, job, rows, chunk, chunks);
          const auto until = std::chrono::steady_clock::now () + CFX_COPY_SPIN;
          for (int i = 0; (unsigned) (p->next.load (std::memory_order_relaxed) >> 32) == seen; i++)
            {
#ifdef __SSE2__
              _mm_pause ();
#endif
              if (i % 64 == 63 && std::chrono::steady_clock::now () > until)
                break;
            }
          g.lock ();
        }
    }
}

/* The context's pool, started on first use with one helper less than the
 * copy threads (the caller is one); NULL when no helper could be started. */
static cfx_copy_pool *
copy_pool (cfx_context *cx)
{
  if (cx->copies)
    return cx->copies->helpers.empty () ? NULL : cx->copies;
  cx->copies = new (std::nothrow) cfx_copy_pool ();
  if (!cx->copies)
    return NULL;
  unsigned cores = std::thread::hardware_concurrency ();
  int helpers = (cores > 1 ? (int) cores : 1) - 1;
  helpers = helpers < CFX_COPY_THREADS - 1 ? helpers : CFX_COPY_THREADS - 1;
  try
    {
      /* They live as long as the process, asleep between calls. */
      for (int i = 0; i < helpers; i++)
        cx->copies->helpers.emplace_back (copy_helper, cx->copies).detach ();
    }
  catch (...)
    {
      /* the threads started still help */
    }
  return cx->copies->helpers.empty () ? NULL : cx->copies;
}

void
cfx_host_copy (cfx_context *cx, const cfx_host_rows *h, int rows, const cudafx_options *o)
{
  int threads = cudafx_thread_count (o);
  threads = threads < CFX_COPY_THREADS ? threads : CFX_COPY_THREADS;
  cfx_copy_pool *p = threads > 1 && rows > 1 ? copy_pool (cx) : NULL;
  if (!p)
    {
      cfx_copy_host_rows ((void *) h, 0, rows);
      return;
    }
  /* A few chunks a thread: the ones that run take more. */
  const int chunk = rows / (threads * 4) > 1 ? rows / (threads * 4) : 1, chunks = (rows + chunk - 1) / chunk;
  unsigned round;
  {
    std::lock_guard<std::mutex> g (p->lock);
    round = ++p->round;
    p->job = h;
    p->rows = rows;
    p->chunk = chunk;
    p->chunks = chunks;
    p->done = 0;
    p->next.store ((uint64_t) round << 32);
  }
  /* One system call wakes them all when all are wanted. */
  if (threads - 1 >= (int) p->helpers.size ())
    p->wake.notify_all ();
  else
    for (int i = 0; i < threads - 1; i++)
      p->wake.notify_one ();
  copy_chunks (p, round, h, rows, chunk, chunks);
  std::unique_lock<std::mutex> g (p->lock);
  p->finished.wait (g, [&] { return p->done == p->chunks; });
}
