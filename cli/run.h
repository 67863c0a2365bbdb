/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A filter's run: every input through the pipeline (batch.h) of load,
 * filter and save (stages.h), CUDA started meanwhile if the job is worth it
 * (backend_choice.h). */
#ifndef CUDAFX_CLI_RUN_H
#define CUDAFX_CLI_RUN_H

#include "options.h"

/* Runs c (parsed, cli_parse_command); returns the exit status. */
int cli_run_filter (const cli_command *c);

/* What the benchmarks' build of the CLI changes of a run: cudafx-bench, these
 * objects linked with bench/cli_bench.c, which sets it from
 * CUDAFX_BENCH_CODECS_ONLY and CUDAFX_BENCH_CODEC_NICE before main. The
 * shipped cudafx never sets it, so no variable makes it skip the filter or
 * change its threads' priority. */
typedef struct {
  /* The files decoded and written back unfiltered, by the same codecs and
   * threads, CUDA never started: the baseline a batch is measured by. */
  int codecs_only;
  /* A batch's codec threads at nice level codec_nice instead of the CLI's
   * own choice, to compare priorities. */
  int codec_nice_given, codec_nice;
} cli_bench_settings;
extern cli_bench_settings cli_bench;

#endif /* CUDAFX_CLI_RUN_H */
