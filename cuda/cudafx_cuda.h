/* The CUDA backend's operations (core/backend.h's interface), each defined
 * in its filter's file and gathered into cudafx_cuda_backend by
 * cuda/backend.cu. They return a status and never exit. */
#ifndef CUDAFX_CUDA_H
#define CUDAFX_CUDA_H

#include "../core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

int cudafx_cuda_probe (char *name, size_t name_size, char *why, size_t why_size);

cudafx_status cudafx_median_cuda (const cudafx_image *src, cudafx_image *dst, const median_plan *plan,
                                  const cudafx_options *o);
cudafx_status cudafx_convolve_cuda (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                                    const cudafx_options *o);

cudafx_status cudafx_nlmeans_cuda_open (const cudafx_image *src, int colours, int max_halo,
                                        const cudafx_options *o, nlmeans_session **out);
cudafx_status cudafx_nlmeans_cuda_count (nlmeans_session *s, uint64_t *hist);
cudafx_status cudafx_nlmeans_cuda_denoise (nlmeans_session *s, const nlmeans_plan *plan, cudafx_image *dst);
void cudafx_nlmeans_cuda_close (nlmeans_session *s);

cudafx_status cudafx_quantize_cuda_open (const quantize_plan *plan, const cudafx_options *o,
                                         quantize_session **out);
cudafx_status cudafx_quantize_cuda_seed (quantize_session *s, const sample_set *smp,
                                         const quantize_seeding *job,
                                         int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found,
                                         int64_t *error, int *seeded);
cudafx_status cudafx_quantize_cuda_assign (quantize_session *s, const float (*centre)[3], int k,
                                           quantize_sums *sums, double from, double to);
cudafx_status cudafx_quantize_cuda_map (quantize_session *s, const quantize_mapping *m, cudafx_image *dst);
void cudafx_quantize_cuda_close (quantize_session *s);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_CUDA_H */
