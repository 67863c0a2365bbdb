/* The CPU backend's operations, each defined beside its filter's reference
 * code (core/median.c, convolve.c, nlmeans.c, quantize.c) and gathered into
 * the backend table by core/cpu.c. Engine-internal. */
#ifndef CUDAFX_CPU_H
#define CUDAFX_CPU_H

#include "backend.h"

cudafx_status cudafx_median_cpu (const cudafx_image *src, cudafx_image *dst, const median_plan *plan,
                                 const cudafx_options *o);
cudafx_status cudafx_convolve_cpu (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                                   const cudafx_options *o);

cudafx_status cudafx_nlmeans_cpu_open (const cudafx_image *src, int colours, int max_halo,
                                       const cudafx_options *o, nlmeans_session **out);
cudafx_status cudafx_nlmeans_cpu_count (nlmeans_session *s, uint64_t *hist);
cudafx_status cudafx_nlmeans_cpu_denoise (nlmeans_session *s, const nlmeans_plan *plan, cudafx_image *dst);
void cudafx_nlmeans_cpu_close (nlmeans_session *s);

cudafx_status cudafx_quantize_cpu_open (const quantize_plan *plan, const cudafx_options *o,
                                        quantize_session **out);
cudafx_status cudafx_quantize_cpu_seed (quantize_session *s, const sample_set *smp,
                                        const quantize_seeding *job,
                                        int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found,
                                        int64_t *error, int *seeded);
cudafx_status cudafx_quantize_cpu_assign (quantize_session *s, const float (*centre)[3], int k,
                                          quantize_sums *sums, double from, double to);
cudafx_status cudafx_quantize_cpu_map (quantize_session *s, const quantize_mapping *m, cudafx_image *dst);
void cudafx_quantize_cpu_close (quantize_session *s);

#endif /* CUDAFX_CPU_H */
