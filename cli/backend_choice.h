/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's choice of backend: CUDA started on its own thread while the
 * first file decodes, and the rule --backend auto follows (backend_choice.c
 * says it, docs/BENCHMARKS.md, "The CLI's backend rule", the measurements
 * behind it). */
#ifndef CUDAFX_CLI_BACKEND_CHOICE_H
#define CUDAFX_CLI_BACKEND_CHOICE_H

#include "../core/cudafx.h"

/* Starts CUDA on a thread of its own (a small run of the filter forced to
 * CUDA: context, kernels, device buffers) when p's backend is cuda, or auto
 * and the job is worth it: megapixels in all (an estimate) over that many
 * files, the CPU threads the engine would use. With several files, every
 * device is readied, for the batch's workers. Call once, before the first
 * file is decoded. */
void cli_cuda_start (int filter, const cudafx_filter_params *p, double megapixels, int files, int threads);

/* The CUDA devices a batch's workers can take in turn: 0 when CUDA was not
 * started (cli_cuda_start) or has none, else how many CUDA lists. Waits for
 * the start-up thread to have counted them (the driver's start, well before
 * the first kernel). */
int cli_cuda_devices (void);

/* When CUDA's start reached each step, CLOCK_MONOTONIC ms as
 * cli_now_ms's, 0 where it did not (CUDAFX_BATCH_TIMELINE): the
 * thread began, the devices were counted (the driver's start), the default
 * device was ready (its context, the filter's kernels), every device was. */
typedef struct {
  double start, counted, ready, all_ready;
} cli_cuda_times;
void cli_cuda_get_times (cli_cuda_times *times);

/* Runs the filter as cudafx_run_filter does, applying the rule when p's
 * backend is auto; why receives the reason for the backend that ran. */
cudafx_status cli_run_engine (int filter, const cudafx_filter_params *p, const cudafx_image *src,
                              cudafx_image *dst, const cudafx_options *o, cudafx_run_result *result,
                              char *why, size_t why_size);

/* At exit: 0 when CUDA's start-up thread has ended (it is joined), 1 while it
 * is still starting CUDA, which nothing waits for: the caller then ends the
 * process with _exit, without CUDA's teardown. */
int cli_cuda_stop (void);

#endif /* CUDAFX_CLI_BACKEND_CHOICE_H */
