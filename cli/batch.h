/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's pipeline: many files through decode → compute → encode, the
 * stages of different files overlapping. Codec threads decode and encode;
 * engine workers (one per device; N is a parameter, so the scheduler is
 * tested with more workers than devices) compute. Knows nothing of images,
 * GEGL or the engine: a stage is a callback on an item index. */
#ifndef CUDAFX_CLI_BATCH_H
#define CUDAFX_CLI_BATCH_H

#include <stdio.h>

typedef struct {
  /* Each returns 0, or nonzero when the item failed (its later stages are
   * skipped). decode and encode run on codec threads, compute on engine
   * worker `worker` (0..workers-1); one item's stages never overlap. */
  int  (*decode) (void *ctx, int item);
  int  (*compute) (void *ctx, int item, int worker);
  int  (*encode) (void *ctx, int item);
  /* On the calling thread, once per item, in the order items finish, with
   * the status of the stage that failed (0: all ran); frees what the item
   * holds. May be NULL. */
  void (*finish) (void *ctx, int item, int status);
  /* May be NULL. Called once, on the thread that runs cli_pipeline_run,
   * while the codec threads already decode: returns how many engine workers
   * compute (config's workers is then unused) and sets the codec threads'
   * priority drop (config's codec_nice is then unused). For an answer that
   * is slow to come (the CUDA devices counted, about 0.1 s): the first
   * decodes overlap it, and no item is computed before it returns. */
  int  (*engine) (void *ctx, int *codec_nice);
  void  *ctx;
} cli_stages;

typedef struct {
  int codec_threads; /* >= 1 */
  int workers;       /* >= 1 */
  int window;        /* most items decoded and not yet finished; 0: codec_threads + 2 * workers
                      * (one worker until the stages' engine has answered) */
  int progress;      /* show "[done/total] ... left" on stderr, redrawn as items finish */
  int codec_nice;    /* codec threads lower their priority by this much (Linux; 0: not) */
} cli_pipeline_config;

/* Runs every item through the stages; returns how many failed, or -1 when
 * its threads could not be started (then no stage ran). */
int cli_pipeline_run (const cli_stages *stages, int items, const cli_pipeline_config *config);

/* Now, CLOCK_MONOTONIC in ms: the CLI's one clock (the progress line, the
 * stages' times, the timeline's stamps). */
double cli_now_ms (void);

/* Messages on stderr while a progress line may be showing: begin takes the
 * lock and clears the line, end releases it (the line comes back at the next
 * update). Safe from any thread, also when no pipeline runs. */
FILE *cli_message_begin (void);
void  cli_message_end (void);

#endif /* CUDAFX_CLI_BATCH_H */
