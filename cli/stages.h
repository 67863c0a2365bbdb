/* SPDX-License-Identifier: GPL-3.0-or-later */
/* One file's load, filter and save: the three stages that the pipeline
 * (batch.h) overlaps across files, load and save on codec threads, the
 * engine on a worker; one file alone is a batch of one. A failing stage
 * has reported its error (runtime_error) and the file's later stages are
 * skipped; cli_file_finish releases what the file holds. */
#ifndef CUDAFX_CLI_STAGES_H
#define CUDAFX_CLI_STAGES_H

#include "../core/cudafx.h"
#include "image_io.h"
#include "options.h"

/* One input file on its way through the pipeline. */
typedef struct {
  const char        *in;
  char              *out;
  cfx_picture        pic;
  cudafx_image       dst;
  cfx_output        *out_file, *palette_file; /* NULL: not open */
  cudafx_run_result *result;
  char               why[256]; /* why the engine ran on its backend */
  char               error[512];
  double             ms;       /* engine time */
  /* CUDAFX_BATCH_TIMELINE: each stage's start and end (cli_now_ms),
   * the ms the decode spent taking image memory from the pool and the ms
   * the compute spent pinning it. */
  double             decode[2], compute[2], encode[2];
  double             pool_ms, pin_ms;
} cli_file;

typedef struct {
  const cli_command   *c;
  cudafx_filter_params params;
  cli_file            *files;
  int                  n;        /* files */
  int                  codecs_only;
  int                  devices;  /* CUDA devices the workers take in turn; 0: the default one alone */
} cli_batch;

/* The stages, as cli_stages' callbacks: ctx is the cli_batch, index the
 * file's in its files. */
int cli_file_load (void *ctx, int index);
int cli_file_filter (void *ctx, int index, int worker);
int cli_file_save (void *ctx, int index);
void cli_file_finish (void *ctx, int index, int status);

#endif /* CUDAFX_CLI_STAGES_H */
