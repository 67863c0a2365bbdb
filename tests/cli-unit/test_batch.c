/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's pipeline scheduler (cli/batch.c) with stages that only record
 * what ran where: every item passes decode, compute and encode once and in
 * that order; a failing stage skips the item's later stages and is the
 * status it finishes with; N workers share the items (three workers on one
 * device, as several GPUs would); no more items are in flight than the
 * window allows; an engine callback that answers late (CUDA counting its
 * devices) lets the decodes begin and keeps the computes back. */
#include "../unit/harness.h"

#include "../../cli/batch.h"
#include "../../cli/image_pool.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#define ITEMS 40

typedef struct {
  pthread_mutex_t lock;
  int             stage[ITEMS];      /* last stage run: 0 none, 1 decode, 2 compute, 3 encode */
  int             out_of_order;
  int             runs[ITEMS][3];
  int             by_worker[8];
  int             computing, most_computing;
  int             in_flight, most_in_flight;
  int             finished[ITEMS], finish_status[ITEMS];
  int             fail_item, fail_stage;  /* the item and stage (1..3) that fail */
  int             decoded, computed;      /* stages ended */
  int             answered;               /* the engine callback returned */
  int             decoded_by_answer, computed_by_answer;
} record;

static void
pause_us (long us)
{
  struct timespec t = { 0, us * 1000 };
  nanosleep (&t, NULL);
}

static int
step (record *r, int item, int stage)
{
  pthread_mutex_lock (&r->lock);
  if (r->stage[item] != stage - 1)
    r->out_of_order++;
  r->stage[item] = stage;
  r->runs[item][stage - 1]++;
  r->decoded += stage == 1;
  r->computed += stage == 2;
  if (stage == 1 && ++r->in_flight > r->most_in_flight)
    r->most_in_flight = r->in_flight;
  pthread_mutex_unlock (&r->lock);
  return item == r->fail_item && stage == r->fail_stage ? 7 : 0;
}

static int
fake_decode (void *ctx, int item)
{
  pause_us (200);
  return step (ctx, item, 1);
}

static int
fake_compute (void *ctx, int item, int worker)
{
  record *r = ctx;
  pthread_mutex_lock (&r->lock);
  if (worker >= 0 && worker < 8)
    r->by_worker[worker]++;
  if (++r->computing > r->most_computing)
    r->most_computing = r->computing;
  pthread_mutex_unlock (&r->lock);
  pause_us (2000); /* long enough that the workers' turns overlap */
  pthread_mutex_lock (&r->lock);
  r->computing--;
  pthread_mutex_unlock (&r->lock);
  return step (r, item, 2);
}

static int
fake_encode (void *ctx, int item)
{
  pause_us (200);
  return step (ctx, item, 3);
}

static void
fake_finish (void *ctx, int item, int status)
{
  record *r = ctx;
  pthread_mutex_lock (&r->lock);
  r->finished[item]++;
  r->finish_status[item] = status;
  r->in_flight--;
  pthread_mutex_unlock (&r->lock);
}

static int
run (record *r, int codecs, int workers, int window)
{
  cli_stages stages = { fake_decode, fake_compute, fake_encode, fake_finish, NULL, r };
  /* The codec threads' lower priority changes only who runs first. */
  cli_pipeline_config config = { .codec_threads = codecs, .workers = workers, .window = window,
                                 .codec_nice = 1 };
  pthread_mutex_init (&r->lock, NULL);
  return cli_pipeline_run (&stages, ITEMS, &config);
}

/* Each of the first `workers` workers computed some items, together each
 * item once, and no other worker computed any. */
static void
check_workers_share (const record *r, int workers)
{
  int total = 0;
  for (int w = 0; w < workers; w++)
    {
      CHECK (r->by_worker[w] > 0, "worker %d of %d computed nothing", w, workers);
      total += r->by_worker[w];
    }
  CHECK (total == ITEMS && r->by_worker[workers] == 0, "%d computations by workers 0..%d of %d items", total,
         workers - 1, ITEMS);
}

TEST (batch_every_item_once_in_order)
{
  static const int shapes[][3] = { { 1, 1, 0 }, { 4, 1, 0 }, { 2, 3, 0 }, { 5, 3, 4 } };
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    {
      record r;
      memset (&r, 0, sizeof r);
      r.fail_item = -1;
      int failed = run (&r, shapes[k][0], shapes[k][1], shapes[k][2]);
      CHECK (failed == 0, "codecs %d workers %d: %d failed", shapes[k][0], shapes[k][1], failed);
      CHECK (r.out_of_order == 0, "a stage ran out of order %d times", r.out_of_order);
      for (int i = 0; i < ITEMS; i++)
        CHECK (r.runs[i][0] == 1 && r.runs[i][1] == 1 && r.runs[i][2] == 1 && r.finished[i] == 1 &&
                 r.finish_status[i] == 0,
               "item %d: decode %d, compute %d, encode %d, finish %d times", i, r.runs[i][0],
               r.runs[i][1], r.runs[i][2], r.finished[i]);
      int window = shapes[k][2] ? shapes[k][2] : shapes[k][0] + 2 * shapes[k][1];
      CHECK (r.most_in_flight <= window, "%d items in flight, window %d", r.most_in_flight, window);
    }
}

TEST (batch_three_workers_share_the_items)
{
  record r;
  memset (&r, 0, sizeof r);
  r.fail_item = -1;
  CHECK (run (&r, 4, 3, 0) == 0, "items failed");
  check_workers_share (&r, 3);
  CHECK (r.most_computing >= 2 && r.most_computing <= 3, "at most %d computed at once, 3 workers",
         r.most_computing);
}

TEST (batch_failure_skips_the_items_later_stages)
{
  for (int stage = 1; stage <= 3; stage++)
    {
      record r;
      memset (&r, 0, sizeof r);
      r.fail_item = 17;
      r.fail_stage = stage;
      CHECK (run (&r, 3, 2, 0) == 1, "stage %d: not one failure", stage);
      CHECK (r.finish_status[17] == 7 && r.finished[17] == 1, "stage %d: item 17 finished %d times "
             "with %d", stage, r.finished[17], r.finish_status[17]);
      for (int s = stage; s < 3; s++)
        CHECK (r.runs[17][s] == 0, "stage %d failed, stage %d still ran", stage, s + 1);
      for (int i = 0; i < ITEMS; i++)
        if (i != 17)
          CHECK (r.runs[i][2] == 1 && r.finish_status[i] == 0, "item %d did not complete", i);
    }
}

TEST (batch_no_items)
{
  record r;
  memset (&r, 0, sizeof r);
  cli_stages stages = { fake_decode, fake_compute, fake_encode, fake_finish, NULL, &r };
  cli_pipeline_config config = { .codec_threads = 2, .workers = 3 };
  CHECK (cli_pipeline_run (&stages, 0, &config) == 0, "an empty batch failed");
}

/* Answers 3 workers once 5 items are decoded (or after 2 s, which the
 * test then reports), as CUDA's device count comes while files decode. */
static int
late_engine (void *ctx, int *codec_nice)
{
  record *r = ctx;
  for (int waited = 0; waited < 2000; waited++)
    {
      pthread_mutex_lock (&r->lock);
      int decoded = r->decoded;
      pthread_mutex_unlock (&r->lock);
      if (decoded >= 5)
        break;
      pause_us (1000);
    }
  pthread_mutex_lock (&r->lock);
  r->answered = 1;
  r->decoded_by_answer = r->decoded;
  r->computed_by_answer = r->computed + r->computing;
  pthread_mutex_unlock (&r->lock);
  *codec_nice = 1;
  return 3;
}

TEST (batch_engine_answers_while_items_decode)
{
  record r;
  memset (&r, 0, sizeof r);
  r.fail_item = -1;
  pthread_mutex_init (&r.lock, NULL);
  cli_stages stages = { fake_decode, fake_compute, fake_encode, fake_finish, late_engine, &r };
  cli_pipeline_config config = { .codec_threads = 4, .workers = 1 }; /* workers: the engine's answer wins */
  CHECK (cli_pipeline_run (&stages, ITEMS, &config) == 0, "items failed");
  CHECK (r.answered, "the engine callback was not called");
  CHECK (r.decoded_by_answer >= 5, "%d items decoded before the engine answered: the decodes waited "
         "for it", r.decoded_by_answer);
  CHECK (r.computed_by_answer == 0, "%d items computed before the engine answered", r.computed_by_answer);
  CHECK (r.out_of_order == 0, "a stage ran out of order %d times", r.out_of_order);
  check_workers_share (&r, 3);
  CHECK (r.most_in_flight <= 4 + 2 * 3, "%d items in flight, window %d", r.most_in_flight, 4 + 2 * 3);
}

/* The batch's image memory (cli/image_pool.c): a block given back serves
 * the next request of its size; a request of another size frees the spares
 * that cannot serve it, so the pool holds only what is in flight. Without
 * CUDA (the CPU tests) nothing is pinned. */
TEST (image_pool_reuses_blocks_of_a_size)
{
  void *a = cli_image_pool_take (4096), *b = cli_image_pool_take (4096);
  CHECK (a && b && a != b, "two blocks held at once are distinct");
  memset (a, 1, 4096);
  memset (b, 2, 4096);
  cli_image_pool_give (a);
  CHECK (cli_image_pool_take (4096) == a, "the spare block of that size is not reused");
  cli_image_pool_give (b);
  void *c = cli_image_pool_take (8192);
  CHECK (c && c != a, "a larger request got a held block");
  memset (c, 3, 8192);
  cli_image_pool_give (a);
  cli_image_pool_give (c);
  CHECK (cli_image_pool_take (8192) == c, "the spare block of the larger size is not reused");
  cli_image_pool_give (c);
  cli_image_pool_clear ();
}
