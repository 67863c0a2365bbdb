/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's pipeline (see batch.h). One lock and one condition variable
 * guard the whole state: a stage takes milliseconds to seconds, so the
 * scheduling itself never contends. Codec threads prefer encoding over
 * decoding (a finished item frees its pixels sooner), and decode only while
 * fewer than `window` items are in flight, so memory stays bounded whatever
 * the number of files. Items are decoded in input order; they finish in
 * whatever order their stages end. */
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
 * stage leads to, or -1. Codec threads encode first, then decode. */
static int
take_item (pipeline *p, int worker, int *next_state)
{
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

/* The calling thread's priority lowered by `by` nice levels. Linux keeps a
 * nice value per thread (setpriority on its thread id); elsewhere the call
 * would lower the whole process, so it does nothing there. */
static void
lower_thread_priority (int by)
{
#ifdef __linux__
  id_t tid = (id_t) syscall (SYS_gettid);
  errno = 0;
  int nice = getpriority (PRIO_PROCESS, tid);
  if (errno == 0)
    setpriority (PRIO_PROCESS, tid, nice + by); /* best effort: only the order of waking changes */
#else
  (void) by;
#endif
}

static void *
pipeline_thread (void *arg)
{
  pipeline *p = ((thread_arg *) arg)->p;
  int worker = ((thread_arg *) arg)->worker;
  const cli_stages *st = p->stages;

  if (worker < 0 && p->config->codec_nice > 0)
    lower_thread_priority (p->config->codec_nice);

  pthread_mutex_lock (&p->lock);
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

int
cli_pipeline_run (const cli_stages *stages, int items, const cli_pipeline_config *config)
{
  pipeline p = { .stages = stages, .config = config, .items = items };
  int codecs = config->codec_threads < 1 ? 1 : config->codec_threads;
  int workers = config->workers < 1 ? 1 : config->workers;
  pthread_t *threads = calloc ((size_t) (codecs + workers), sizeof *threads);
  thread_arg *args = calloc ((size_t) (codecs + workers), sizeof *args);
  int started = 0, failed = 0, reported = 0;
  double start = cli_now_ms ();

  p.window = config->window > 0 ? config->window : codecs + 2 * workers;
  p.state = calloc ((size_t) items + 1, sizeof *p.state);
  p.status = calloc ((size_t) items + 1, sizeof *p.status);
  p.finished = calloc ((size_t) items + 1, sizeof *p.finished);
  if (!threads || !args || !p.state || !p.status || !p.finished)
    {
      failed = -1;
      goto done;
    }
  pthread_mutex_init (&p.lock, NULL);
  pthread_cond_init (&p.changed, NULL);

  /* No more threads than items can use. The threads are created under the
   * lock, so none starts work before all exist: if one cannot be created,
   * the others stop untouched. */
  if (codecs > items)
    codecs = items;
  if (workers > items)
    workers = items;
  pthread_mutex_lock (&p.lock);
  for (int i = 0; i < codecs + workers; i++)
    {
      args[i] = (thread_arg) { &p, i < codecs ? -1 : i - codecs };
      if (pthread_create (&threads[i], NULL, pipeline_thread, &args[i]))
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
  free (args);
  free (threads);
  return failed;
}
