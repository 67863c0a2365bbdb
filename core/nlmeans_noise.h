/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Automatic nl-means for camera noise (engine-internal; core/nlmeans_noise.c
 * has the method and the papers): the noise level function fitted to an
 * image's noise estimate, and the variance-stabilising transform nl-means then
 * runs behind (its type and per-value arithmetic are core/nlmeans.h's, which
 * both backends compute with). */
#ifndef CUDAFX_NLMEANS_NOISE_H
#define CUDAFX_NLMEANS_NOISE_H

#include "nlmeans.h"
#include "noise_estimate.h"

/* Fits the noise model of the colour channels to their noise estimate
 * (core/noise_estimate.h); *sigma is the one sigma of flat noise on the
 * same levels. type: the image's. */
cudafx_status nlmeans_noise_fit (const noise_estimate *e, cudafx_type type, cudafx_noise_model *m, double *sigma);
/* Rows whose neighbourhoods the camera model's histograms count: 1,
 * 1 + stride, ... < height - 1 (a backend's nlmeans_count_levels). */
int nlmeans_fit_stride (int width, int height);
/* The camera model's a and b (and sigma_dark, sigma_light) of m, from the
 * residual histograms (colours x NLMEANS_FIT_BINS counts of nlmeans_fit_bin
 * over the rows of nlmeans_fit_stride); its other fields are left as they
 * are. CUDAFX_ERR_INVALID_ARG (no message): a channel has too few levels
 * for the fit. */
cudafx_status nlmeans_noise_fit_histograms (const uint64_t *hist, int colours, cudafx_type type,
                                            cudafx_noise_model *m);
/* How alike correlated noise is in the colour channels, from its channel
 * correlation: 0 up to 0.3, 1 from 0.6 on, linear in between; the place
 * between the two strengths each filter gives correlated noise. */
double nlmeans_channel_alike (const cudafx_noise_model *m);
/* The transform for a signal-dependent model. */
void nlmeans_vst_make (const cudafx_noise_model *m, int colours, nlmeans_vst *v);
/* src's colour channels into t (f32, colours channels, no alpha), transformed. */
void nlmeans_vst_forward (const nlmeans_vst *v, const cudafx_image *src, cudafx_image *t,
                          const cudafx_options *o);
/* A denoiser of the transformed image t into u (f32, colours channels, no
 * alpha), for nlmeans_vst_run. */
typedef cudafx_status (*nlmeans_vst_denoise_fn) (const cudafx_image *t, cudafx_image *u, void *ctx);
/* src's colour channels forward into an f32 image whose noise is v's one
 * sigma, denoised there by fn, and back into dst (alpha from src); filter
 * names the call in messages. */
cudafx_status nlmeans_vst_run (const nlmeans_vst *v, const cudafx_image *src, cudafx_image *dst, const char *filter,
                               nlmeans_vst_denoise_fn fn, void *ctx, const cudafx_options *o);
/* cudafx_nlmeans_estimate for the automatic mode of another filter, which
 * its messages name (a backend that cannot run the estimate's counting says
 * so under the name of the filter the user asked for). */
cudafx_status nlmeans_estimate_for (const char *filter, const cudafx_image *src, const cudafx_options *o,
                                    cudafx_nlmeans_info *info);
/* The exact unbiased inverse of u (as made by forward and denoised) into
 * dst; alpha from src. */
void nlmeans_vst_inverse (const nlmeans_vst *v, const cudafx_image *u, const cudafx_image *src,
                          cudafx_image *dst, const cudafx_options *o);

#endif /* CUDAFX_NLMEANS_NOISE_H */
