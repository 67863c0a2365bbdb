/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's pipeline (see batch.h). One lock and one condition variable
 * guard the whole state: a stage takes milliseconds to seconds, so the
 * scheduling itself never contends. Codec threads prefer encoding over
 * decoding (a finished item frees its pixels sooner), and decode only while
 * fewer than `window` items are in flight, so memory stays bounded whatever
 * the number of files. Items are decoded in input order; they finish in
 * whatever order their stages end. The codec threads start first; the
 * engine workers once the stages' engine callback has said how many (CUDA
 * counting its devices takes about 0.1 s, which the first decodes overlap:
 * docs/BENCHMARKS.md, "Batch pipeline"). */
#include "batch.h"

#include "../core/i18n.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

enum { QUEUED, DECODED, COMPUTED, FINISHED };

typedef struct {
  const cli_stages          *stages;
  const cli_pipeline_config *config;
  int                        items, window;
  pthread_mutex_t            lock;
  pthread_cond_t             changed;
  int                        next_decode;  /* first item not yet taken for decoding */
  int                        in_flight;    /* taken for decoding, finish not yet called */
  int                       *state;        /* per item */
  int                       *status;       /* per item, the failing stage's status */
  int                       *finished;     /* items in the order they finished */
  int                        n_finished;
  int                        stop;         /* a thread could not be created: nothing runs */
  int                        workers;      /* workers that may compute; 0 until the engine answered */
  int                        codec_nice;   /* the codec threads' priority drop, once workers > 0 */
  long                      *codec_tid;    /* the codec threads' ids (Linux), as they begin */
  int                        n_codec_tids;
} pipeline;

/* ---- stderr shared with the progress line ---------------------------------- *
 * Process-wide, as stderr is: every thread's messages and the progress line
 * take this lock. */

static pthread_mutex_t stderr_lock = PTHREAD_MUTEX_INITIALIZER;
static int             progress_shown; /* a progress line is on the terminal, under stderr_lock */

FILE *
cli_message_begin (void)
{
  pthread_mutex_lock (&stderr_lock);
  if (progress_shown)
    fputs ("\r\033[K", stderr);
  progress_shown = 0;
  return stderr;
}

void
cli_message_end (void)
{
  fflush (stderr);
  pthread_mutex_unlock (&stderr_lock);
}

double
cli_now_ms (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* "[12/64] 2 failed, about 35 s left": the estimate is the mean time per
 * finished item so far, which the overlap of stages already includes. */
static void
show_progress (int done, int total, int failed, double elapsed)
{
  pthread_mutex_lock (&stderr_lock);
  fprintf (stderr, "\r\033[K[%d/%d]", done, total);
  if (failed)
    fprintf (stderr, _(" %d failed,"), failed);
  if (done < total)
    fprintf (stderr, _(" about %.0f s left"), elapsed / done * (total - done));
  else
    fputc ('\n', stderr);
  progress_shown = done < total;
  fflush (stderr);
  pthread_mutex_unlock (&stderr_lock);
}

/* ---- the threads ------------------------------------------------------------ */

/* Called with the lock held: the item's stage ended with status s. */
static void
stage_ended (pipeline *p, int item, int next_state, int s)
{
  if (s)
    {
      p->status[item] = s;
      next_state = FINISHED;
    }
  p->state[item] = next_state;
  if (next_state == FINISHED)
    p->finished[p->n_finished++] = item;
  pthread_cond_broadcast (&p->changed);
}

/* Index of the first item in state `want`, or -1. Linear: a stage lasts far
 * longer than a scan of the in-flight items, and only they can match. */
static int
find_item (const pipeline *p, int want)
{
  for (int i = 0; i < p->next_decode; i++)
    if (p->state[i] == want)
      return i;
  return -1;
}

typedef struct {
  pipeline *p;
  int       worker; /* engine worker's index, or -1 for a codec thread */
} thread_arg;

/* With the lock held: the item this thread takes next and the state its
 * stage leads to, or -1. Codec threads encode first, then decode; a worker
 * computes once the engine has answered. */
static int
take_item (pipeline *p, int worker, int *next_state)
{
  if (worker >= p->workers)
    return -1;
  int item = find_item (p, worker < 0 ? COMPUTED : DECODED);
  *next_state = worker < 0 ? FINISHED : COMPUTED;
  if (item < 0 && worker < 0 && p->next_decode < p->items && p->in_flight < p->window)
    {
      item = p->next_decode++;
      p->in_flight++;
      *next_state = DECODED;
    }
  if (item >= 0)
    p->state[item] = -1; /* taken */
  return item;
}

/* The calling thread's id, for lower_priority; 0 where threads have none
 * of their own. */
static long
thread_id (void)
{
#ifdef __linux__
  return (long) syscall (SYS_gettid);
#else
  return 0;
#endif
}

/* Thread tid's priority lowered by `by` nice levels. Linux keeps a nice
 * value per thread (setpriority on its thread id); elsewhere the call would
 * lower the whole process, so it does nothing there. */
static void
lower_priority (long tid, int by)
{
#ifdef __linux__
  if (!tid || by <= 0)
    return;
  errno = 0;
  int nice = getpriority (PRIO_PROCESS, (id_t) tid);
  if (errno == 0)
    setpriority (PRIO_PROCESS, (id_t) tid, nice + by); /* best effort: only the order of waking changes */
#else
  (void) tid;
  (void) by;
#endif
}

static void *
pipeline_thread (void *arg)
{
  thread_arg a = *(thread_arg *) arg;
  pipeline *p = a.p;
  int worker = a.worker;
  const cli_stages *st = p->stages;

  free (arg);
  pthread_mutex_lock (&p->lock);
  /* A codec thread's priority drops as soon as it is known: here if the
   * engine answered already, else when it does (engine_answered). */
  if (worker < 0)
    {
      long tid = thread_id ();
      p->codec_tid[p->n_codec_tids++] = tid;
      if (p->workers > 0)
        lower_priority (tid, p->codec_nice);
    }
  while (!p->stop)
    {
      int next_state, item = take_item (p, worker, &next_state);
      if (item < 0)
        {
          if (p->n_finished == p->items)
            break;
          pthread_cond_wait (&p->changed, &p->lock);
          continue;
        }
      pthread_mutex_unlock (&p->lock);
      int s = next_state == DECODED    ? st->decode (st->ctx, item)
              : next_state == COMPUTED ? st->compute (st->ctx, item, worker)
                                       : st->encode (st->ctx, item);
      pthread_mutex_lock (&p->lock);
      stage_ended (p, item, next_state, s);
    }
  pthread_mutex_unlock (&p->lock);
  return NULL;
}

/* A pipeline thread for engine worker `worker`, or a codec thread (-1);
 * 0 when it runs. */
static int
start_thread (pipeline *p, pthread_t *thread, int worker)
{
  thread_arg *arg = malloc (sizeof *arg); /* the thread's, which frees it */
  if (!arg)
    return -1;
  *arg = (thread_arg) { p, worker };
  if (pthread_create (thread, NULL, pipeline_thread, arg))
    {
      free (arg);
      return -1;
    }
  return 0;
}

static int
window_of (const cli_pipeline_config *config, int codecs, int workers)
{
  return config->window > 0 ? config->window : codecs + 2 * workers;
}

/* With the lock held: the engine's answer, `workers` workers (the first
 * already runs; threads holds room for the others) and the codec threads'
 * priority drop. A worker that cannot be started leaves the batch to
 * fewer. Returns the threads started. */
static int
engine_answered (pipeline *p, pthread_t *threads, int codecs, int workers, int nice)
{
  int started = 0;
  p->codec_nice = nice;
  for (int i = 0; i < p->n_codec_tids; i++)
    lower_priority (p->codec_tid[i], nice);
  p->workers = 1;
  for (int w = 1; w < workers && !start_thread (p, &threads[codecs + w], w); w++)
    {
      p->workers++;
      started++;
    }
  p->window = window_of (p->config, codecs, p->workers);
  pthread_cond_broadcast (&p->changed);
  return started;
}

int
cli_pipeline_run (const cli_stages *stages, int items, const cli_pipeline_config *config)
{
  pipeline p = { .stages = stages, .config = config, .items = items };
  int codecs = config->codec_threads < 1 ? 1 : config->codec_threads;
  int workers = config->workers < 1 ? 1 : config->workers;
  pthread_t *threads = NULL;
  int started = 0, failed = 0, reported = 0;
  double start = cli_now_ms ();

  /* No more threads than items can use. */
  if (codecs > items)
    codecs = items;
  if (workers > items)
    workers = items;
  p.workers = stages->engine ? 0 : workers;
  p.codec_nice = config->codec_nice;
  p.window = window_of (config, codecs, p.workers ? p.workers : 1);
  threads = calloc ((size_t) (codecs + workers + 1), sizeof *threads);
  p.codec_tid = calloc ((size_t) codecs + 1, sizeof *p.codec_tid);
  p.state = calloc ((size_t) items + 1, sizeof *p.state);
  p.status = calloc ((size_t) items + 1, sizeof *p.status);
  p.finished = calloc ((size_t) items + 1, sizeof *p.finished);
  if (!threads || !p.codec_tid || !p.state || !p.status || !p.finished)
    {
      failed = -1;
      goto done;
    }
  pthread_mutex_init (&p.lock, NULL);
  pthread_cond_init (&p.changed, NULL);

  /* The codec threads and the first worker (all of them when no engine
   * callback is to answer) are created under the lock, so none starts work
   * before all exist: if one cannot be created, the others stop untouched. */
  int first = items > 0 ? codecs + (p.workers ? p.workers : 1) : 0;
  pthread_mutex_lock (&p.lock);
  for (int i = 0; i < first; i++)
    {
      if (start_thread (&p, &threads[i], i < codecs ? -1 : i - codecs))
        {
          p.stop = 1;
          break;
        }
      started++;
    }
  pthread_mutex_unlock (&p.lock);
  if (p.stop)
    {
      failed = -1;
      goto join;
    }
  if (items > 0 && stages->engine)
    {
      int nice = 0;
      int answer = stages->engine (stages->ctx, &nice);
      answer = answer < 1 ? 1 : answer > items ? items : answer;
      pthread_t *more = realloc (threads, (size_t) (codecs + answer) * sizeof *threads);
      if (more)
        threads = more;
      pthread_mutex_lock (&p.lock);
      started += engine_answered (&p, threads, codecs, more ? answer : 1, nice);
      pthread_mutex_unlock (&p.lock);
    }

  pthread_mutex_lock (&p.lock);
  while (reported < p.items)
    {
      while (reported == p.n_finished)
        pthread_cond_wait (&p.changed, &p.lock);
      int item = p.finished[reported++];
      int s = p.status[item];
      pthread_mutex_unlock (&p.lock);
      failed += s != 0;
      if (stages->finish)
        stages->finish (stages->ctx, item, s);
      if (config->progress)
        show_progress (reported, items, failed, (cli_now_ms () - start) / 1e3);
      pthread_mutex_lock (&p.lock);
      p.in_flight--; /* its memory is free now: another may decode */
      pthread_cond_broadcast (&p.changed);
    }
  pthread_mutex_unlock (&p.lock);
join:
  for (int i = 0; i < started; i++)
    pthread_join (threads[i], NULL);
  pthread_cond_destroy (&p.changed);
  pthread_mutex_destroy (&p.lock);

done:
  free (p.finished);
  free (p.status);
  free (p.state);
  free (p.codec_tid);
  free (threads);
  return failed;
}
