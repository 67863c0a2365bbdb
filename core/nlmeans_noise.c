/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Automatic nl-means for camera noise: the noise level function (NLF) of
 * an image, fitted to the image alone, and the variance-stabilising
 * transform nl-means runs behind when the noise depends on brightness.
 *
 * Model (Foi, Trimeche, Katkovnik, Egiazarian, "Practical Poissonian-
 * Gaussian noise modeling and fitting for single-image raw-data", IEEE TIP
 * 2008): per colour channel the noise of the linear-light value x (0..1,
 * the sRGB value decoded) has variance a x + b, shot noise plus read noise.
 * Seen in the 8-bit sRGB pixels y, whose slope is e'(x) = d(255 sRGB)/dx,
 * its variance is v(y) = e'(x)^2 (a x + b) + q, q = 1/12 the rounding to 8
 * bits.
 *
 * Which model: core/noise_estimate.c's noise variance of each brightness
 * level, from weak-texture patches, in the directions of patch space the
 * image's structure leaves to the noise (Liu, Tanaka, Okutomi 2013; Chen,
 * Zhu, Heng 2015), so texture does not raise them. Levels too close to 0 or
 * 255 for their noise (clipping makes it look smaller) or with few patches
 * are left out. What texture is left only raises a level's variance, so
 * the fits weigh levels above the model down (a Cauchy weight of the
 * relative residual) and those below it fully. The one sigma of flat noise
 * is the estimate's (one texture threshold for all levels).
 *
 * The camera model's a and b: fitted the same way to levels of Immerkaer's
 * residual (the 3x3 neighbourhood's, core/nlmeans.h's nlmeans_fit_bin),
 * binned by brightness as Liu, Freeman, Szeliski, Kang ("Noise estimation
 * from a single image", CVPR 2006) bin it, per level sigma = median |l| /
 * (6 * 0.6745), on up to NLF_SAMPLES neighbourhoods a channel that the
 * backend counts where the image is. 3x3 neighbourhoods free of clipped
 * values reach much further into noisy shadows than 7x7 patches do; fitted
 * to the patches' levels alone, a photo with few bright-enough shadows had
 * its shadows' sigma extrapolated twice too high (docs/BENCHMARKS.md,
 * "Noise estimate").
 *
 * Two models are fitted to the levels of every channel by iteratively
 * reweighted least squares on the variances: flat (v = constant, the
 * Gaussian noise automatic mode has always assumed) and the camera's (a, b
 * >= 0). The camera's is used only when it fits clearly better than the
 * flat one over all channels (robust cost below CAMERA_GAIN times the
 * flat's), fits well in itself (below CAMERA_COST a channel: on clean
 * photos, whose residual is texture and compression, neither model does)
 * and its sigma varies by CAMERA_SPREAD or more over the levels it was
 * fitted to; otherwise nl-means runs on the one sigma. Measured on
 * tests/data's photos (docs/BENCHMARKS.md, "Noise estimate"): the camera
 * model's cost is at
 * least the flat one's on Gaussian noise and clean photos alike, at most
 * 0.4 times it on camera noise; the strongest camera noise, whose dark
 * levels are too noisy to keep, spreads its sigma by only 1.09-1.14 over
 * the levels left.
 *
 * Transform: the generalised Anscombe transform of the linear-light value,
 * z = 2/a sqrt (a x + 3a^2/8 + b) (Murtagh, Starck, Bijaoui 1995), written
 * 2x / (sqrt (a x + c) + sqrt (c)), c = 3a^2/8 + b, so that a = 0 is
 * x / sqrt (b); its noise has sigma about 1 at every brightness. Scaled by
 * one factor for all channels so that the widest channel spans 0..255, the
 * image is denoised as f32 with the parameters of automatic mode for
 * that scale as sigma. The way back is the exact unbiased inverse (Makitalo,
 * Foi, "Optimal inversion of the generalized Anscombe transformation for
 * Poisson-Gaussian noise", IEEE TIP 2013): the clean value whose expected
 * transformed observation equals the denoised value, E{z | x} computed here
 * for the observation 8-bit sRGB pixels really are (a Gaussian of variance
 * a x + b in linear light, clipped to 0..1, encoded and rounded), on a grid
 * of the 256 sRGB levels, inverted through a table uniform in z. f32 images
 * go through the same transform with their values clamped to 0..1 (the
 * model is of display-referred sRGB) and the same inverse. */
#include "nlmeans_noise.h"
#include "engine.h"
#include "noise_estimate.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define NLF_MIN_PATCHES 40  /* a level with fewer weak-texture patches is left out */
#define NLF_SAMPLES (1 << 19) /* residuals per channel the histograms count at most (a 12 MP image: every 24th row) */
#define NLF_MIN_SAMPLES 200   /* a histogram level with fewer is left out */
#define NLF_SCALE   0.2       /* relative residual of the variance a level may have */
#define NLF_ITERATIONS 20
#define CAMERA_GAIN 0.6   /* the camera model's cost at most this times the flat one's */
#define CAMERA_COST 2.0   /* and at most this a channel: it explains the levels */
#define CAMERA_SPREAD 1.05 /* its sigma at least this much larger in the dark */

/* d (255 sRGB) / dx at linear x. */
static double
srgb_slope (double x)
{
  return 255.0 * (x <= 0.0031308 ? 12.92 : 1.055 / 2.4 * pow (x, 1.0 / 2.4 - 1.0));
}

/* One brightness level of one channel. */
typedef struct {
  double y, x, g, v, s; /* sRGB centre, linear, slope^2, variance, weight */
} nlf_level;

int
nlmeans_fit_stride (int width, int height)
{
  const double interior = (double) (width - 2) * (height - 2);
  return interior > NLF_SAMPLES ? (int) ceil (interior / NLF_SAMPLES) : 1;
}

/* Median of a histogram of one-unit bins (bin k holds [k - 1/2, k + 1/2)),
 * interpolated within its bin; *count its total. */
static double
hist_median (const uint64_t *h, int n, uint64_t *count)
{
  uint64_t total = 0;
  for (int k = 0; k < n; k++)
    total += h[k];
  *count = total;
  double half = total / 2.0, cum = 0.0;
  for (int k = 0; k < n; k++)
    {
      if (h[k] && cum + h[k] >= half)
        return fmax (0.0, k - 0.5 + (half - cum) / h[k]);
      cum += h[k];
    }
  return 0.0;
}

#define MEDIAN_TO_SIGMA (1.0 / (6.0 * 0.6744897501960817))

/* Robust cost of a relative residual: above the model (texture) Cauchy,
 * below it quadratic. */
static double
rho (double r)
{
  r /= NLF_SCALE;
  return r > 0 ? log1p (r * r) : r * r;
}

static double
robust_weight (double r)
{
  r /= NLF_SCALE;
  return r > 0 ? 1.0 / (1.0 + r * r) : 1.0;
}

/* The model's variance at a level: flat (p[0]) or the camera's (p[0] = a,
 * p[1] = b). */
static double
model_variance (int camera, const double *p, const nlf_level *l)
{
  double v = camera ? l->g * (p[0] * l->x + p[1]) : p[0];
  return v > 1e-6 ? v : 1e-6;
}

/* Fits one model to n levels; returns its robust cost (weighted mean). */
static double
fit_model (int camera, const nlf_level *lv, int n, double *p)
{
  double *w = malloc (n * sizeof *w);
  for (int k = 0; k < n; k++)
    w[k] = lv[k].s / (lv[k].v * lv[k].v);
  for (int it = 0; it < NLF_ITERATIONS; it++)
    {
      if (!camera)
        {
          double sw = 0, swv = 0;
          for (int k = 0; k < n; k++)
            sw += w[k], swv += w[k] * lv[k].v;
          p[0] = swv / sw;
        }
      else
        {
          /* Normal equations of v = a (g x) + b g, then the bound a, b >= 0. */
          double s11 = 0, s12 = 0, s22 = 0, t1 = 0, t2 = 0;
          for (int k = 0; k < n; k++)
            {
              double f1 = lv[k].g * lv[k].x, f2 = lv[k].g;
              s11 += w[k] * f1 * f1, s12 += w[k] * f1 * f2, s22 += w[k] * f2 * f2;
              t1 += w[k] * f1 * lv[k].v, t2 += w[k] * f2 * lv[k].v;
            }
          double det = s11 * s22 - s12 * s12;
          double a = det > 0 ? (t1 * s22 - t2 * s12) / det : -1, b = det > 0 ? (s11 * t2 - s12 * t1) / det : -1;
          if (a < 0 || b < 0)
            {
              /* The better of the two one-term fits. */
              double a_only = s11 > 0 ? fmax (t1 / s11, 0) : 0, b_only = s22 > 0 ? fmax (t2 / s22, 0) : 0;
              double ea = 0, eb = 0;
              for (int k = 0; k < n; k++)
                {
                  double da = lv[k].v - a_only * lv[k].g * lv[k].x, db = lv[k].v - b_only * lv[k].g;
                  ea += w[k] * da * da, eb += w[k] * db * db;
                }
              a = ea <= eb ? a_only : 0;
              b = ea <= eb ? 0 : b_only;
            }
          p[0] = a, p[1] = b;
        }
      for (int k = 0; k < n; k++)
        {
          double m = model_variance (camera, p, &lv[k]);
          w[k] = lv[k].s * robust_weight ((lv[k].v - m) / m) / (m * m);
        }
    }
  double cost = 0, sw = 0;
  for (int k = 0; k < n; k++)
    {
      double m = model_variance (camera, p, &lv[k]);
      cost += lv[k].s * rho ((lv[k].v - m) / m);
      sw += lv[k].s;
    }
  free (w);
  return sw > 0 ? cost / sw : 0;
}

/* The model's sigma in pixel units at sRGB level y (0..255) of channel c. */
static double
model_sigma_at (const cudafx_noise_model *m, int c, double y)
{
  double x = nlmeans_srgb_decode (y / 255.0), e = srgb_slope (x);
  return sqrt (e * e * (m->a[c] * x + m->b[c]));
}

cudafx_status
nlmeans_noise_fit (const noise_estimate *est, cudafx_type type, cudafx_noise_model *m, double *sigma)
{
  const int colours = est->colours;
  nlf_level lv[NOISE_LEVELS];
  memset (m, 0, sizeof *m);
  m->channels = colours;
  *sigma = 0;

  const double q = type == CUDAFX_U8 ? 1.0 / 12.0 : 0.0;
  double cost_flat = 0, cost_camera = 0, spread = INFINITY, sum_sq = 0;
  for (int c = 0; c < colours; c++)
    {
      int n = 0;
      for (int l = 0; l < NOISE_LEVELS; l++)
        {
          const double v = est->var[c][l], y = est->y[c][l], sl = sqrt (v);
          const int count = est->count[c][l];
          if (v <= 2 * q || count < NLF_MIN_PATCHES || y < NOISE_CLIP_MARGIN * sl
              || y > 255 - NOISE_CLIP_MARGIN * sl)
            continue;
          double x = nlmeans_srgb_decode (y / 255.0), e = srgb_slope (x);
          lv[n++] = (nlf_level) { y, x, e * e, v - q, sqrt ((double) count) };
        }
      sum_sq += est->flat[c];
      if (n < 3)
        {
          /* Too few levels to tell a slope from a constant: flat. */
          cost_camera = INFINITY;
          continue;
        }
      double pf[1], pc[2];
      cost_flat += fit_model (0, lv, n, pf);
      cost_camera += fit_model (1, lv, n, pc);
      m->a[c] = pc[0];
      m->b[c] = pc[1];
      double lo = INFINITY, hi = 0;
      for (int k = 0; k < n; k++)
        {
          double sk = model_sigma_at (m, c, lv[k].y);
          lo = fmin (lo, sk), hi = fmax (hi, sk);
        }
      spread = fmin (spread, lo > 0 ? hi / lo : 0);
    }
  *sigma = sqrt (sum_sq / colours);

  if (isfinite (cost_camera) && cost_camera < CAMERA_GAIN * cost_flat
      && cost_camera < CAMERA_COST * colours && spread >= CAMERA_SPREAD)
    {
      m->signal_dependent = 1;
      for (int c = 0; c < colours; c++)
        {
          m->sigma_dark += model_sigma_at (m, c, 32) / colours;
          m->sigma_light += model_sigma_at (m, c, 224) / colours;
        }
    }
  else
    {
      memset (m->a, 0, sizeof m->a);
      memset (m->b, 0, sizeof m->b);
      m->sigma_dark = m->sigma_light = *sigma;
    }
  return CUDAFX_OK;
}

cudafx_status
nlmeans_noise_fit_histograms (const uint64_t *hist, int colours, cudafx_type type, cudafx_noise_model *m)
{
  uint64_t *h64 = malloc (NLMEANS_FIT_RES * sizeof *h64);
  nlf_level *lv = malloc (NLMEANS_FIT_LEVELS * sizeof *lv);
  if (!h64 || !lv)
    {
      free (h64);
      free (lv);
      return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
    }
  const double q = type == CUDAFX_U8 ? 1.0 / 12.0 : 0.0;
  int fitted = 1;
  m->sigma_dark = m->sigma_light = 0;
  for (int c = 0; c < colours; c++)
    {
      const uint64_t *hc = hist + (size_t) c * NLMEANS_FIT_BINS;
      uint64_t total = 0, count;
      for (int k = 0; k < NLMEANS_FIT_RES; k++)
        {
          h64[k] = 0;
          for (int l = 0; l < NLMEANS_FIT_LEVELS; l++)
            h64[k] += hc[(size_t) l * NLMEANS_FIT_RES + k];
        }
      hist_median (h64, NLMEANS_FIT_RES, &total);
      int n = 0;
      for (int l = 0; l < NLMEANS_FIT_LEVELS; l++)
        {
          for (int k = 0; k < NLMEANS_FIT_RES; k++)
            h64[k] = hc[(size_t) l * NLMEANS_FIT_RES + k];
          double sl = hist_median (h64, NLMEANS_FIT_RES, &count) * MEDIAN_TO_SIGMA;
          double y = (l + 0.5) * 256.0 / NLMEANS_FIT_LEVELS;
          if (count < NLF_MIN_SAMPLES || count * 1000 < total || y < NOISE_CLIP_MARGIN * sl
              || y > 255 - NOISE_CLIP_MARGIN * sl || sl * sl <= 2 * q)
            continue;
          double x = nlmeans_srgb_decode (y / 255.0), e = srgb_slope (x);
          lv[n++] = (nlf_level) { y, x, e * e, sl * sl - q, sqrt ((double) count) };
        }
      double pc[2] = { 0, 0 };
      if (n < 3)
        fitted = 0;
      else
        fit_model (1, lv, n, pc);
      m->a[c] = pc[0];
      m->b[c] = pc[1];
    }
  if (fitted)
    for (int c = 0; c < colours; c++)
      {
        m->sigma_dark += model_sigma_at (m, c, 32) / colours;
        m->sigma_light += model_sigma_at (m, c, 224) / colours;
      }
  free (h64);
  free (lv);
  return fitted ? CUDAFX_OK : CUDAFX_ERR_INVALID_ARG;
}

/* Noise alike in the three channels (what a JPEG's subsampled chroma leaves
 * of a camera's noise) makes the channels' patch distances vary together,
 * as one channel's do, and comes with more of the compression's own error,
 * which the weak-texture patches of the estimate do not see; noise of its
 * own in each channel partly averages out over them. A grey image reads 0.
 * The camera-pipeline JPEGs of tests/quality measure 0.2 to 0.7. */
#define CHANNEL_ALIKE_LOW  0.3
#define CHANNEL_ALIKE_HIGH 0.6

double
nlmeans_channel_alike (const cudafx_noise_model *m)
{
  double t = (m->channel_corr - CHANNEL_ALIKE_LOW) / (CHANNEL_ALIKE_HIGH - CHANNEL_ALIKE_LOW);
  return t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
}

/* ---- the transform --------------------------------------------------------- */

void
nlmeans_vst_make (const cudafx_noise_model *m, int colours, nlmeans_vst *v)
{
  double span = 0;
  memset (v, 0, sizeof *v);
  v->colours = colours;
  for (int c = 0; c < colours; c++)
    {
      v->a[c] = m->a[c];
      v->c[c] = 3.0 / 8.0 * m->a[c] * m->a[c] + fmax (m->b[c], 1e-12);
      span = fmax (span, nlmeans_gat (v->a[c], v->c[c], 1.0));
    }
  v->scale = (float) (255.0 / span);

  double lin[257];
  for (int k = 0; k <= 256; k++)
    lin[k] = nlmeans_srgb_decode ((k - 0.5) / 255.0); /* lower edge of level k's rounding interval */
#pragma omp parallel for schedule (static)
  for (int c = 0; c < colours; c++)
    {
      const double a = v->a[c], cc = v->c[c];
      double e[256];
      for (int k = 0; k < 256; k++)
        v->forward[c][k] = (float) (v->scale * nlmeans_gat (a, cc, nlmeans_srgb_decode (k / 255.0)));
      /* E{z | x} at the 256 sRGB levels: P(level k | x) from the Gaussian of
       * variance a x + b, clipped at 0 and 1 (levels 0 and 255 take the tails). */
      for (int j = 0; j < 256; j++)
        {
          double x = nlmeans_srgb_decode (j / 255.0), sd = sqrt (fmax (a * x + cc - 3.0 / 8.0 * a * a, 1e-12));
          double sum = 0, below = 0;
          for (int k = 0; k < 256; k++)
            {
              double upper = k == 255 ? 1.0 : 0.5 * erfc (-(lin[k + 1] - x) / (sd * M_SQRT2));
              sum += (upper - below) * v->forward[c][k];
              below = upper;
            }
          e[j] = j > 0 && sum <= e[j - 1] ? e[j - 1] + 1e-9 : sum;
        }
      /* Uniform in z: the level (fractional) whose E{z | x} it is. */
      const double z0 = e[0], step = (e[255] - e[0]) / NLMEANS_VST_CELLS;
      v->inv_z0[c] = (float) z0;
      v->inv_step[c] = (float) step;
      int j = 0;
      for (int i = 0; i <= NLMEANS_VST_CELLS; i++)
        {
          double z = z0 + i * step;
          while (j < 254 && e[j + 1] < z)
            j++;
          double f = (z - e[j]) / (e[j + 1] - e[j]);
          v->inverse[c][i] = (float) fmin (255.0, fmax (0.0, j + fmin (1.0, fmax (0.0, f))));
        }
    }
}

void
nlmeans_vst_forward (const nlmeans_vst *v, const cudafx_image *src, cudafx_image *t,
                     const cudafx_options *o)
{
  const int n = v->colours, ch = src->channels, W = src->width;
  const size_t size = cudafx_type_size (src->type);
#pragma omp parallel for num_threads (cudafx_thread_count (o)) schedule (static)
  for (int y = 0; y < src->height; y++)
    {
      const uint8_t *srow = cudafx_row (src, y);
      float *trow = (float *) cudafx_row (t, y);
      for (int x = 0; x < W; x++)
        for (int c = 0; c < n; c++)
          trow[(size_t) x * n + c]
            = nlmeans_vst_forward_value (v, c, src->type, srow + ((size_t) x * ch + c) * size);
    }
}

void
nlmeans_vst_inverse (const nlmeans_vst *v, const cudafx_image *u, const cudafx_image *src,
                     cudafx_image *dst, const cudafx_options *o)
{
  const int n = v->colours, ch = src->channels, W = src->width;
#pragma omp parallel for num_threads (cudafx_thread_count (o)) schedule (static)
  for (int y = 0; y < src->height; y++)
    {
      const float *urow = (const float *) cudafx_row (u, y);
      const uint8_t *srow = cudafx_row (src, y);
      uint8_t *drow = cudafx_row (dst, y);
      for (int x = 0; x < W; x++)
        for (int c = 0; c < ch; c++)
          {
            size_t e = (size_t) x * ch + c;
            if (c >= n)
              {
                if (src->type == CUDAFX_U8)
                  drow[e] = srow[e];
                else
                  ((float *) drow)[e] = ((const float *) srow)[e];
                continue;
              }
            float r = nlmeans_vst_inverse_value (v, c, urow[(size_t) x * n + c]);
            if (src->type == CUDAFX_U8)
              drow[e] = (uint8_t) (r + 0.5f);
            else
              ((float *) drow)[e] = r / 255.0f;
          }
    }
}

cudafx_status
nlmeans_vst_run (const nlmeans_vst *v, const cudafx_image *src, cudafx_image *dst, const char *filter,
                 nlmeans_vst_denoise_fn fn, void *ctx, const cudafx_options *o)
{
  size_t row = (size_t) src->width * v->colours * sizeof (float), bytes;
  if (__builtin_mul_overflow (row, (size_t) src->height, &bytes))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: image too large", filter);
  float *t = malloc (bytes), *u = malloc (bytes);
  cudafx_status s = CUDAFX_OK;
  if (!t || !u)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: out of memory for the transformed image", filter);
  else
    {
      cudafx_image ti = { t, src->width, src->height, v->colours, 0, CUDAFX_F32, row };
      cudafx_image ui = ti;
      ui.data = u;
      nlmeans_vst_forward (v, src, &ti, o);
      if (!(s = fn (&ti, &ui, ctx)))
        nlmeans_vst_inverse (v, &ui, src, dst, o);
    }
  free (t);
  free (u);
  return s;
}
