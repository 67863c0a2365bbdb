/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Engine internals the engine and the CPU filters share: validation against
 * the argument table and the striped multithreaded row loop with progress
 * and cancel, over the services every backend may use (services.h). The
 * backends' interface is core/backend.h. Not for hosts (they include
 * cudafx.h only) nor for cuda/ (it reaches services.h alone). */
#ifndef CUDAFX_ENGINE_H
#define CUDAFX_ENGINE_H

#include "services.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks one image view; `what` is "source" or "destination". */
cudafx_status cudafx_check_image (const char *filter, const char *what, const cudafx_image *img);
/* Checks both views and that dst has src's size, channels, alpha flag and type,
 * and that they do not overlap. */
cudafx_status cudafx_check_pair (const char *filter, const cudafx_image *src, const cudafx_image *dst);

/* The argument table over a filter's own parameter struct (params points at a
 * cudafx_median_params, ...), by the fields the table binds (core/params.c):
 * the defaults, and every value checked against its range, the message naming
 * both, e.g. "median: radius 101 is out of range 1..100". */
void          cudafx_params_defaults (int filter, void *params);
cudafx_status cudafx_params_check (int filter, const void *params);
/* One bound field's value as a double, and set from one. */
double cudafx_field_get (const cudafx_arg *a, const void *field);
void   cudafx_field_set (const cudafx_arg *a, void *field, double value);

/* The CPU filters' hot loops are compiled three times, for x86-64's baseline,
 * AVX2 (x86-64-v3) and AVX-512 (x86-64-v4), and the best the processor runs
 * is chosen when the library loads (GCC's function multi-versioning), so a
 * packaged binary runs on any x86-64 without giving up the vector units
 * (docs/BENCHMARKS.md, "CPU vector paths", has what each path is worth).
 * Every path computes the
 * same values: -ffp-contract=off keeps fused multiply-adds out and nothing
 * reassociates floating-point sums. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define CUDAFX_CPU_CLONES __attribute__ ((target_clones ("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CUDAFX_CPU_CLONES
#endif

/* Runs fn over rows [0, height) in chunks of rows shared dynamically among
 * threads; reports progress from `from` to `to` as chunks finish and stops
 * early on cancel. fn must be safe to call concurrently on disjoint rows. */
typedef void (*cudafx_rows_fn) (void *ctx, int y0, int y1);
cudafx_status cudafx_parallel_rows (int height, cudafx_rows_fn fn, void *ctx,
                                    const cudafx_options *o, double from, double to);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_ENGINE_H */
