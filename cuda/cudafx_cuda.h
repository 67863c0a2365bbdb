/* The CUDA backend as the engine sees it: extern "C" entry points that return
 * a status and never exit. Built without nvcc, cuda/stub.c provides versions
 * that report "CUDA not built". */
#ifndef CUDAFX_CUDA_H
#define CUDAFX_CUDA_H

#include "../core/cudafx.h"
#include "../core/convolve.h"
#include "../core/nlmeans.h"
#include "../core/quantize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device is usable; fills name (device name) or why (reason it
 * is not). Probed once per process and cached. */
int cudafx_cuda_probe (char *name, size_t name_size, char *why, size_t why_size);

/* Launchers: validated arguments in, status out (message via cudafx_fail). */
cudafx_status cudafx_median_cuda (const cudafx_image *src, cudafx_image *dst,
                                  const cudafx_median_params *p, const cudafx_options *o);
/* NL-means with the plan core/nlmeans.c made (its header: the formula); with
 * job->estimate the noise histograms are counted on the device first and
 * handed to nlmeans_noise_counted, which completes the plan (or, without
 * job->dst, is all the job asks). */
cudafx_status cudafx_nlmeans_cuda (nlmeans_job *job, const cudafx_options *o);

/* plan from core/convolve.c; border for columns and the stripe's rows. */
cudafx_status cudafx_convolve_cuda (const cudafx_image *src, cudafx_image *dst,
                                    const convolve_plan *plan, cudafx_border border,
                                    const cudafx_options *o);

/* K-means passes over one image on the device; core/quantize.c drives them
 * with the arithmetic of core/quantize.h. open holds the process-wide GPU
 * lock until close; the image is loaded (features computed) once when it
 * fits the device-memory budget, else every pass streams it in stripes. */
typedef struct quantize_device quantize_device;
cudafx_status cudafx_quantize_cuda_open (const cudafx_image *src, const quantize_space *space,
                                         int everyone_votes, const cudafx_options *o,
                                         quantize_device **out);
/* The seeding attempts of core/quantize.c on the device (k-means++, then
 * Lloyd on the sample): centres[a], found[a] and error[a] for a <
 * job->attempts, the same as the host's. *seeded is 0, and nothing else is
 * written, when open left no room for the seeding in the device-memory
 * budget: the host seeds then. */
cudafx_status cudafx_quantize_cuda_seed (quantize_device *q, const sample_set *smp,
                                         const quantize_seeding *job,
                                         int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found,
                                         int64_t *error, int *seeded);
/* Integer sums and counts of the voting pixels by nearest of centre[0..k-1]. */
cudafx_status cudafx_quantize_cuda_assign (quantize_device *q, const float (*centre)[3], int k,
                                           quantize_sums *sums);
/* Every pixel of dst becomes its nearest palette entry; alpha is copied. */
cudafx_status cudafx_quantize_cuda_map (quantize_device *q, const quantize_palette *pal,
                                        cudafx_image *dst);
/* The same with Floyd–Steinberg error diffusion, exactly as the CPU's
 * (core/quantize.c): value holds the entries on the 0..255 scale, lo and hi
 * their range per channel. */
cudafx_status cudafx_quantize_cuda_dither (quantize_device *q, const quantize_palette *pal,
                                           const float (*value)[3], const float lo[3],
                                           const float hi[3], cudafx_image *dst);
void cudafx_quantize_cuda_close (quantize_device *q);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_CUDA_H */
