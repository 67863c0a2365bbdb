/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The engine's plan headers, as one: what a backend gets and what it must do.
 *
 * The engine (core/) validates a call's parameters and turns them into a
 * plan per filter: the validated parameters plus what follows from them (the
 * median's window and rank, the convolution's taps, the nl-means weights,
 * the k-means passes' palette). A backend is a table of operations on those
 * plans; the CPU filters (core/cpu.c's table) and the CUDA launchers
 * (cuda/backend.cu's table) are its two implementations, and
 * cudafx_dispatch (core/engine.c) chooses one per call. Multi-step filters
 * (nl-means: estimate, then denoise; quantize: seed, then Lloyd passes, then
 * the mapping) are driven by the engine through a backend session opened
 * on the image, so a backend never calls back into the engine.
 *
 * cuda/ includes this header (and the plan headers it includes) and nothing
 * else from core/: its kernels compute with the plans' shared arithmetic
 * (convolve.h, nlmeans.h, quantize.h, median_plan), and it calls only the
 * services below engine and backends (services.h: errors, progress, the
 * host's rows, threads). Host memory the device copies directly is the
 * backends' too: the engine's cudafx_host_* go through the table's
 * host_* operations. tools/check-layers.sh keeps this so. */
#ifndef CUDAFX_BACKEND_H
#define CUDAFX_BACKEND_H

#include "convolve.h"
#include "nlbayes.h"
#include "nlmeans.h"
#include "quantize.h"
#include "services.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- median --------------------------------------------------------------- */

/* The argument table's largest radius. */
#define MEDIAN_MAX_RADIUS 100

/* The window: column dx in -radius..radius spans rows |dy| <= half[dx +
 * radius] (the square: all radius; the disc: floor (sqrt (r² − dx²))); n
 * values in all, the output the one of rank `rank` (0 = smallest). */
/* Order-preserving unsigned key of a float (negative floats reversed,
 * positives above them) and back: both backends rank f32 values by it. */
static inline CUDAFX_HOST_DEVICE uint32_t
median_float_key (float f)
{
  uint32_t u = cudafx_float_bits (f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static inline CUDAFX_HOST_DEVICE float
median_key_float (uint32_t k)
{
  return cudafx_bits_float (k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

/* Non-finite f32 values: left as they are in the output, and kept out of
 * their neighbours' windows, whose rank is then taken among the finite
 * values (median_window_rank of their number): a NaN has no place in the
 * order, and an infinity, ranked, would make a dark or bright spot of the
 * window's size from one bad value. Both backends rank by
 * median_known_key, which gives every non-finite value the one key above
 * all finite ones (a NaN's own key), MEDIAN_UNKNOWN_KEY. */
#define MEDIAN_UNKNOWN_KEY 0xffffffffu

static inline CUDAFX_HOST_DEVICE uint32_t
median_known_key (float f)
{
  return isfinite (f) ? median_float_key (f) : MEDIAN_UNKNOWN_KEY;
}

/* The rank round(p/100 (n - 1)) of the value a window of n takes. */
static inline CUDAFX_HOST_DEVICE int
median_window_rank (double percentile, int n)
{
  return (int) lround (percentile / 100.0 * (n - 1));
}

typedef struct {
  int          radius;
  cudafx_shape shape;
  double       percentile;
  int          n, rank;
  int          half[2 * MEDIAN_MAX_RADIUS + 1];
} median_plan;

/* ---- the operations --------------------------------------------------------
 *
 * Every operation returns a status and sets the message (cudafx_fail) on
 * failure; a CUDA failure is CUDAFX_ERR_CUDA (the engine may then fall back
 * to the CPU). Images are validated; plans are complete. Sessions are
 * opaque to the engine and closed by it, also after a failure. */

typedef struct nlmeans_session nlmeans_session;
typedef struct quantize_session quantize_session;

typedef struct {
  /* 1 when the device (options.device: 0 the default, k the k-th) is usable;
   * name: the device, why: the reason it is not. */
  int (*probe) (int device, char *name, size_t name_size, char *why, size_t why_size);
  /* How many devices options.device may choose from (the CPU: none). */
  int (*device_count) (void);

  /* Host memory the backend's device copies without staging: the blocks
   * cudafx_host_pin registered (the CPU: none). pinnable: 1 when register
   * would now pin; register: 1 when p's bytes are now pinned and listed;
   * pinned: 1 when bytes at p lie in one listed block; free: 0 when p is
   * not such a block, else unlists, unpins and frees it. */
  int (*host_pinnable) (void);
  int (*host_register) (void *p, size_t bytes);
  int (*host_pinned) (const void *p, size_t bytes);
  int (*host_free) (void *p);

  cudafx_status (*median) (const cudafx_image *src, cudafx_image *dst, const median_plan *plan,
                           const cudafx_options *o);
  cudafx_status (*convolve) (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                             const cudafx_options *o);

  /* nl-means on src (colours colour channels). max_halo: the largest S + P a
   * later denoise may use (0: no denoise follows), so that the backend can
   * keep the image where all steps find it; transformed: that denoise may
   * run behind the plan's variance-stabilising transform (plan.vst). */
  cudafx_status (*nlmeans_open) (const cudafx_image *src, int colours, int max_halo, int transformed,
                                 const cudafx_options *o, nlmeans_session **out);
  /* colours x NLMEANS_NOISE_BINS counts of nlmeans_noise_bin over the image. */
  cudafx_status (*nlmeans_count) (nlmeans_session *s, uint64_t *hist);
  /* The noise-model fit's: colours x NLMEANS_FIT_BINS counts of
   * nlmeans_fit_bin over the interior pixels of rows 1, 1 + stride, ...
   * (all zero for an image narrower or shorter than 3). */
  cudafx_status (*nlmeans_count_levels) (nlmeans_session *s, int stride, uint64_t *hist);
  cudafx_status (*nlmeans_denoise) (nlmeans_session *s, const nlmeans_plan *plan, cudafx_image *dst);
  void (*nlmeans_close) (nlmeans_session *s);

  /* NL-Bayes, both steps, of src's colour channels (plan->colours; the rest
   * copied): src and dst as the engine gives them, or the f32 images of
   * the variance-stabilising transform, without alpha. */
  cudafx_status (*nlbayes) (const cudafx_image *src, cudafx_image *dst, const nlbayes_plan *plan,
                            const cudafx_options *o);

  /* k-means passes over plan->src (see core/quantize.c's header). For a
   * u8 image without alpha, src's rows may hold their values only once
   * handed over by quantize_rows. */
  cudafx_status (*quantize_open) (const quantize_plan *plan, const cudafx_options *o,
                                  quantize_session **out);
  /* A u8 image without alpha: rows [y0, y1) of src hold their values now;
   * called in row order over every row (in one call or in pieces as the
   * host provides them), before quantize_seed. The backend may start on
   * them (the CUDA one uploads them, counts their colours and takes their
   * entries of the seeding sample) while the host provides the next.
   * *sampled: the backend took the sample's entries in these rows, to seed
   * from them (quantize_seed then gets a sample without planes). */
  cudafx_status (*quantize_rows) (quantize_session *s, int y0, int y1, int *sampled);
  /* The seeding attempts on the sample: centres[a], found[a], error[a] for
   * a < job->attempts (smp->codes: the features of the sample's values
   * first). *seeded 0 (nothing written): the backend leaves the seeding to
   * the engine's reference. */
  cudafx_status (*quantize_seed) (quantize_session *s, const sample_set *smp, const quantize_seeding *job,
                                  int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found, int64_t *error,
                                  int *seeded);
  /* Integer sums and counts of the voting pixels by nearest of centre[0..k). */
  cudafx_status (*quantize_assign) (quantize_session *s, const float (*centre)[3], int k,
                                    quantize_sums *sums, double from, double to);
  /* Lloyd from centres[0..k) as core/quantize.c's kmeans runs it (passes of
   * quantize_assign, each followed by the centres' update, until none moves
   * or max_iterations passes), every pass without the host: writes the
   * final centres and the passes run. *ran 0 (nothing written): the engine
   * runs the passes itself. */
  cudafx_status (*quantize_lloyd) (quantize_session *s, int32_t (*centres)[3], int k, int max_iterations,
                                   int *iterations, double from, double to, int *ran);
  /* dst from the mapping: nearest entries, or Floyd–Steinberg when m->dither. */
  cudafx_status (*quantize_map) (quantize_session *s, const quantize_mapping *m, cudafx_image *dst);
  void (*quantize_close) (quantize_session *s);
} cudafx_backend_ops;

/* The operations of backend b (cpu, cuda), named cudafx_FILTER_b[_STEP]:
 * one declaration for both, so their signatures cannot drift apart. */
#define CUDAFX_BACKEND_DECLARE(b)                                                                   \
  int cudafx_##b##_probe (int device, char *name, size_t name_size, char *why, size_t why_size);    \
  int cudafx_##b##_device_count (void);                                                             \
  int cudafx_##b##_host_pinnable (void);                                                            \
  int cudafx_##b##_host_register (void *p, size_t bytes);                                           \
  int cudafx_##b##_host_pinned (const void *p, size_t bytes);                                       \
  int cudafx_##b##_host_free (void *p);                                                             \
  cudafx_status cudafx_median_##b (const cudafx_image *src, cudafx_image *dst,                      \
                                   const median_plan *plan, const cudafx_options *o);               \
  cudafx_status cudafx_convolve_##b (const cudafx_image *src, cudafx_image *dst,                    \
                                     const convolve_plan *plan, const cudafx_options *o);           \
  cudafx_status cudafx_nlmeans_##b##_open (const cudafx_image *src, int colours, int max_halo,      \
                                           int transformed, const cudafx_options *o,                \
                                           nlmeans_session **out);                                  \
  cudafx_status cudafx_nlmeans_##b##_count (nlmeans_session *s, uint64_t *hist);                    \
  cudafx_status cudafx_nlmeans_##b##_count_levels (nlmeans_session *s, int stride, uint64_t *hist); \
  cudafx_status cudafx_nlmeans_##b##_denoise (nlmeans_session *s, const nlmeans_plan *plan,         \
                                              cudafx_image *dst);                                   \
  void cudafx_nlmeans_##b##_close (nlmeans_session *s);                                             \
  cudafx_status cudafx_nlbayes_##b (const cudafx_image *src, cudafx_image *dst,                     \
                                    const nlbayes_plan *plan, const cudafx_options *o);             \
  cudafx_status cudafx_quantize_##b##_open (const quantize_plan *plan, const cudafx_options *o,     \
                                            quantize_session **out);                                \
  cudafx_status cudafx_quantize_##b##_rows (quantize_session *s, int y0, int y1, int *sampled);     \
  cudafx_status cudafx_quantize_##b##_seed (quantize_session *s, const sample_set *smp,             \
                                            const quantize_seeding *job,                            \
                                            int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found,   \
                                            int64_t *error, int *seeded);                           \
  cudafx_status cudafx_quantize_##b##_assign (quantize_session *s, const float (*centre)[3], int k, \
                                              quantize_sums *sums, double from, double to);         \
  cudafx_status cudafx_quantize_##b##_lloyd (quantize_session *s, int32_t (*centres)[3], int k,     \
                                             int max_iterations, int *iterations, double from,      \
                                             double to, int *ran);                                  \
  cudafx_status cudafx_quantize_##b##_map (quantize_session *s, const quantize_mapping *m,          \
                                           cudafx_image *dst);                                      \
  void cudafx_quantize_##b##_close (quantize_session *s);

/* Backend b's table, from the operations CUDAFX_BACKEND_DECLARE names. */
#define CUDAFX_BACKEND_TABLE(b)                                                                     \
  {                                                                                                 \
    cudafx_##b##_probe, cudafx_##b##_device_count,                                                  \
    cudafx_##b##_host_pinnable, cudafx_##b##_host_register, cudafx_##b##_host_pinned,               \
    cudafx_##b##_host_free,                                                                         \
    cudafx_median_##b, cudafx_convolve_##b,                                                         \
    cudafx_nlmeans_##b##_open, cudafx_nlmeans_##b##_count, cudafx_nlmeans_##b##_count_levels,      \
    cudafx_nlmeans_##b##_denoise,                                                                   \
    cudafx_nlmeans_##b##_close, cudafx_nlbayes_##b,                                                 \
    cudafx_quantize_##b##_open, cudafx_quantize_##b##_rows, cudafx_quantize_##b##_seed,             \
    cudafx_quantize_##b##_assign,                                                                   \
    cudafx_quantize_##b##_lloyd, cudafx_quantize_##b##_map, cudafx_quantize_##b##_close             \
  }

/* The CPU backend (core/cpu.c): the reference. */
extern const cudafx_backend_ops cudafx_cpu_backend;
#ifdef CUDAFX_HAVE_CUDA
/* The CUDA backend (cuda/backend.cu), in builds with nvcc. */
extern const cudafx_backend_ops cudafx_cuda_backend;
#endif

/* The backend a call runs on: the engine calls run once with it (and again
 * with the CPU's when it falls back). */
typedef cudafx_status (*cudafx_run_fn) (const cudafx_backend_ops *b, void *job, const cudafx_options *o);
/* AUTO tries CUDA when built and usable and falls back to the CPU on a
 * CUDA failure, recording why in the report; CUDA forced fails with the CUDA
 * status (CUDAFX_ERR_CUDA_NOT_BUILT without nvcc). Invalid-argument,
 * out-of-memory-on-host and cancel statuses never fall back. dst: the
 * call's output (NULL: none), whose rows options.rows_ready hears of; the
 * backend sees a rows_ready only for such a call and reports its rows in
 * order as they become final (cudafx_rows_final), and dispatch reports the
 * rest once the backend has succeeded. src: the call's input, whose rows
 * options.rows_needed is asked for: all of them before the backend runs,
 * unless cuda_streams (the job's CUDA run asks for src's rows before it
 * reads them: through the stripe runner, cfx_run_stripes or cfx_load_image,
 * which ask for each stripe's rows before they upload them, or quantize's
 * run) and the run is on CUDA; the backend sees a rows_needed only then. */
cudafx_status cudafx_dispatch (const char *filter, cudafx_run_fn run, void *job, const cudafx_image *src,
                               const cudafx_image *dst, int cuda_streams, const cudafx_options *o);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_BACKEND_H */
