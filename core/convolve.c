/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Convolution with a preset or custom kernel (CPU reference and fallback).
 *
 * Kernels are applied like OpenCV filter2D and GIMP's Convolution Matrix,
 * without flipping (correlation): out(x, y) = sum k[j][i] * in(x+i-r, y+j-r).
 *
 * Method: the input is padded once at the border policy, libvips style, so
 * the inner loops never test bounds: each source row is converted to a float
 * row with r extra pixels on each side filled through the border map, and
 * rows above and below the image are mapped (or zeroed for "black") before
 * they enter a per-thread ring of the 2r+1 rows an output row needs. Rank-1
 * kernels (k = u vᵀ up to a relative 1e-9, found from the largest entry's row
 * and column) run as two 1-D passes, horizontal into a float ring, then
 * vertical; others run as a direct 2-D sum.
 *
 * Arithmetic (the CUDA kernel must copy it to match bit for bit on u8):
 * - Working values are floats on the element's own scale (u8: 0..255, f32:
 *   as stored); the offset is offset (u8) or offset / 255 (f32).
 * - Effective divisor d = divisor, or when divisor is 0 the kernel sum s,
 *   or 1 when s is zero (|s| <= 1e-9 sum|k|: Sobel, Laplacian, high-pass).
 * - Float taps, computed in double and rounded once:
 *   direct:    w[j*n+i] = (float) (k[j][i] / d)
 *   separable: h[i] = (float) k[pr][i]  (the row through the largest entry
 *              k[pr][pc]), v[j] = (float) (k[j][pc] / k[pr][pc] / d);
 *   gaussian:  g[i] = exp (-(i-R)² / 2σ²) / sum, R = ceil (3σ), h[i] = (float) g[i],
 *              v[j] = (float) (g[j] / d) with d = sum over the 2-D kernel g gᵀ.
 * - Every weighted sum (the fixed point and exact sums below aside) starts
 *   from 0.0f and adds w * x term by term in tap order (direct: row-major;
 *   horizontal: left to right; vertical: top to bottom), a float multiply
 *   then a float add, never fused (-ffp-contract=off). Taps equal to 0 are skipped, which changes nothing
 *   for finite data.
 * - u8 output: v = sum + offset; v = v > 0 ? v : 0; v = v < 255 ? v : 255;
 *   result (int) (v + 0.5f). f32 output: sum + offset, not clamped.
 * - f32 non-finite values: these sums run as if there were none, then the
 *   outputs whose window holds one are computed again (fix_non_finite,
 *   core/convolve.h's convolve_fix_pixel, the same arithmetic).
 *
 * Fixed point (u8 without alpha, separable, every tap >= 0, 2-D sum <= 1 —
 * Gaussian and the blur presets; at most CONVOLVE_FIXED_MAX_TAPS): 16-bit
 * lanes hold twice the floats' values per vector, as OpenCV's bit-exact
 * GaussianBlur does. The horizontal taps are h / sum h, the vertical ones
 * v * sum h, each rounded to a multiple of 1/65536 (fixed_point_taps: the
 * rounded taps sum exactly to the rounded total). A pixel enters as x << 8;
 * each pass is bias + sum over the nonzero taps of (value * tap) >> 16 in
 * unsigned integers (bias = half the number of nonzero taps, the mean of the
 * dropped fractions), so the vertical sum is the result times 256 and the
 * output is to_u8 ((float) sum * (1 / 256.0f) + offset). Within 1 of the
 * float arithmetic; a constant image stays constant.
 *
 * Exact sums (u8 without alpha, direct, when the taps are precise enough):
 * taps w = k / d become integers q = w * 2^S: w * 2^S rounded down, then
 * raised by 1 at the largest fractions (ties: row-major order) until they
 * sum to round (sum w * 2^S), so a kernel summing to 1 sums to 2^S (a
 * constant image stays constant, the identity is the identity). S is the
 * largest (at most 30) for which every tap row's positive and negative
 * parts each stay within 2^22 / 255. The result is the integer sum
 * q * x, order-free: a tap row at a time in floats, exact within 2^22
 * (the GPU starts a row from 1.5 * 2^23 and reads the integer off the
 * encoding), the rows added in int32; then v = (float) sum * 2^-S + offset
 * and to_u8 as above. The plan takes this path only when the rounding's
 * worst case over u8 images, 255 * max (sum of positive, sum of negative
 * q / 2^S - w), plus a bound of the float arithmetic's own error, is at
 * most 1/2: the result is then within 1 of the float arithmetic's. Since
 * the sum is exact, the GPU may fuse multiply and add (one instruction a
 * tap instead of two).
 *
 * Alpha (GIMP 2.x Convolution Matrix "alpha weighting"): colour is
 * premultiplied by the raw alpha a before convolving, so transparent pixels
 * contribute nothing whatever their colour. A second plane convolves a with
 * |k| (taps |w| built like above but without the divisor) giving the
 * coverage W; with A = sum|k| (double, rounded to float) the colour is
 *   W > 0 ? (P * A) / W + offset : offset
 * where P is the premultiplied colour's sum. With opaque pixels W = A·a and
 * this is the plain result; with a non-negative kernel it is the
 * alpha-weighted average. The alpha channel itself is the kernel-weighted
 * average of alpha, sum(w * a) * (float) (d / s), clamped to 0..1 (0..255),
 * without divisor or offset: blurs soften edges, sharpening sharpens them.
 * Zero-sum kernels (edge detectors) keep the source alpha, which would
 * otherwise vanish.
 *
 * Work is split in bands of rows, one per thread at a time, so the 2r rows
 * that fill a band's ring are paid once per band; a band is processed in
 * vertical strips of about 2048 floats so that the ring stays in the L2
 * cache. The weighted sums keep 128 outputs in 8 vector registers (GCC
 * vector extensions) while they run through the terms.
 */
#include "cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Floats per register-blocked tile of the weighted sums: 8 vectors of 16,
 * enough independent sums to hide the add latency. */
#define TILE 128
/* Floats of output row per vertical strip. */
#define STRIP_FLOATS 2048
/* Relative tolerance for "zero sum" and "rank 1", against sum|k| and max|k|. */
#define KERNEL_EPS 1e-9

static size_t
round_tile (size_t n)
{
  return (n + TILE - 1) / TILE * TILE;
}

void
cudafx_convolve_params_init (cudafx_convolve_params *p)
{
  cudafx_params_defaults (CUDAFX_FILTER_CONVOLVE, p);
}

/* ---- kernels ------------------------------------------------------------ */

/* 5×5 presets, the usual published values:
 * Laplacian: the 5×5 discrete Laplacian-of-Gaussian approximation;
 * sharpen: unsharp masking, 256·δ·2 − binomial 5×5 (Wikipedia, "Kernel
 * (image processing)"), sum 256; high-pass: 25·δ − box 5×5, sum 0. */
static const signed char laplacian_5x5[25] = {
   0,  0, -1,  0,  0,
   0, -1, -2, -1,  0,
  -1, -2, 16, -2, -1,
   0, -1, -2, -1,  0,
   0,  0, -1,  0,  0,
};
static const short sharpen_5x5[25] = {
  -1,  -4,  -6,  -4, -1,
  -4, -16, -24, -16, -4,
  -6, -24, 476, -24, -6,
  -4, -16, -24, -16, -4,
  -1,  -4,  -6,  -4, -1,
};
static const signed char high_pass_5x5[25] = {
  -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1,
  -1, -1, 24, -1, -1,
  -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1,
};
/* Sobel as derivatives: horizontal is d/dx (positive where the image gets
 * brighter to the right), vertical is d/dy (brighter downwards). */
static const signed char sobel_x[9] = { -1, 0, 1, -2, 0, 2, -1, 0, 1 };
static const signed char sobel_y[9] = { -1, -2, -1, 0, 0, 0, 1, 2, 1 };
static const signed char binomial_3[3] = { 1, 2, 1 };
static const signed char binomial_5[5] = { 1, 4, 6, 4, 1 };

/* A parameter set's kernel: an outer product col ⊗ row (gaussian, whose size
 * may exceed the matrix) or an n×n matrix. */
typedef struct {
  int    size;
  int    outer;
  double matrix[CONVOLVE_MAX_TAPS_2D];
  double col[CONVOLVE_MAX_TAPS_1D], row[CONVOLVE_MAX_TAPS_1D];
} kernel_def;

static cudafx_status
check_params (const cudafx_convolve_params *p)
{
  cudafx_status s;
  if (!p)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "convolve: params is NULL");
  if ((s = cudafx_params_check (CUDAFX_FILTER_CONVOLVE, p)))
    return s;
  if (p->preset == CUDAFX_PRESET_CUSTOM && p->kernel)
    {
      int n = p->kernel_size;
      if (n < 1 || n > CUDAFX_MAX_KERNEL_SIZE || n % 2 == 0)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                            "convolve: kernel size %d is not an odd number from 1 to %d",
                            n, CUDAFX_MAX_KERNEL_SIZE);
      for (int i = 0; i < n * n; i++)
        if (!isfinite (p->kernel[i]))
          return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                              "convolve: kernel value at row %d, column %d is not a finite number",
                              i / n + 1, i % n + 1);
    }
  return CUDAFX_OK;
}

static void
outer_product (kernel_def *k, const signed char *v, int n)
{
  k->size = n;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      k->matrix[j * n + i] = v[j] * v[i];
}

static void
matrix_of (kernel_def *k, const signed char *m, int n)
{
  k->size = n;
  for (int i = 0; i < n * n; i++)
    k->matrix[i] = m[i];
}

/* Fills k from checked parameters. */
static cudafx_status
kernel_from_params (const cudafx_convolve_params *p, kernel_def *k)
{
  k->outer = 0;
  switch (p->preset)
    {
    case CUDAFX_PRESET_CUSTOM:
      if (!p->kernel)
        {
          k->size = 3;
          for (int i = 0; i < 9; i++)
            k->matrix[i] = i == 4;
        }
      else
        {
          k->size = p->kernel_size;
          memcpy (k->matrix, p->kernel, sizeof (double) * k->size * k->size);
        }
      break;
    case CUDAFX_PRESET_LAPLACIAN_5X5: matrix_of (k, laplacian_5x5, 5); break;
    case CUDAFX_PRESET_HIGH_PASS_5X5: matrix_of (k, high_pass_5x5, 5); break;
    case CUDAFX_PRESET_SHARPEN_5X5:
      k->size = 5;
      for (int i = 0; i < 25; i++)
        k->matrix[i] = sharpen_5x5[i];
      break;
    case CUDAFX_PRESET_MEAN_3X3:
      k->size = 3;
      for (int i = 0; i < 9; i++)
        k->matrix[i] = 1;
      break;
    case CUDAFX_PRESET_BLUR_3X3: outer_product (k, binomial_3, 3); break;
    case CUDAFX_PRESET_BLUR_5X5: outer_product (k, binomial_5, 5); break;
    case CUDAFX_PRESET_SOBEL_HORIZONTAL: matrix_of (k, sobel_x, 3); break;
    case CUDAFX_PRESET_SOBEL_VERTICAL: matrix_of (k, sobel_y, 3); break;
    case CUDAFX_PRESET_GAUSSIAN:
      {
        int r = (int) ceil (3 * p->sigma);
        double sum = 0;
        if (2 * r + 1 > CONVOLVE_MAX_TAPS_1D)
          return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "convolve: sigma %g is too large", p->sigma);
        k->size = 2 * r + 1;
        k->outer = 1;
        for (int i = -r; i <= r; i++)
          sum += k->row[i + r] = exp (-(double) i * i / (2 * p->sigma * p->sigma));
        for (int i = 0; i < k->size; i++)
          k->col[i] = k->row[i] /= sum;
        break;
      }
    }
  return CUDAFX_OK;
}

static double
kernel_tap (const kernel_def *k, int j, int i)
{
  return k->outer ? k->col[j] * k->row[i] : k->matrix[j * k->size + i];
}

/* Splits a matrix into col ⊗ row when it has rank 1: row is the row through
 * the largest entry, col that entry's column divided by it. */
static void
find_rank_1 (kernel_def *k)
{
  int n = k->size, pivot = 0;
  double big = 0;
  for (int i = 0; i < n * n; i++)
    if (fabs (k->matrix[i]) > big)
      {
        big = fabs (k->matrix[i]);
        pivot = i;
      }
  if (big == 0)
    return;
  int pr = pivot / n, pc = pivot % n;
  for (int i = 0; i < n; i++)
    {
      k->row[i] = k->matrix[pr * n + i];
      k->col[i] = k->matrix[i * n + pc] / k->matrix[pivot];
    }
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      if (fabs (k->matrix[j * n + i] - k->col[j] * k->row[i]) > KERNEL_EPS * big)
        return;
  k->outer = 1;
}

cudafx_status
cudafx_convolve_kernel (const cudafx_convolve_params *p, double *taps, int *size)
{
  kernel_def *k;
  cudafx_status s;
  cudafx_clear_error ();
  if ((s = check_params (p)))
    return s;
  if (!taps || !size)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "convolve: taps or size is NULL");
  if (!(k = malloc (sizeof *k)))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory");
  s = kernel_from_params (p, k);
  if (!s && k->size > CUDAFX_MAX_KERNEL_SIZE)
    s = cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                     "convolve: the gaussian kernel for sigma %g is %d×%d, larger than %d×%d",
                     p->sigma, k->size, k->size, CUDAFX_MAX_KERNEL_SIZE, CUDAFX_MAX_KERNEL_SIZE);
  if (!s)
    {
      for (int j = 0; j < k->size; j++)
        for (int i = 0; i < k->size; i++)
          taps[j * k->size + i] = kernel_tap (k, j, i);
      *size = k->size;
    }
  free (k);
  return s;
}

/* ---- plan: float taps and constants, the arithmetic the GPU copies ------ */


/* Rounds weights w[0..n), each >= 0, to multiples of 1/65536 whose sum is
 * the rounded sum of w (the largest weight absorbs the difference); 0 when
 * one does not fit 16 bits or the sum exceeds 1. */
static int
fixed_point_taps (const double *w, int n, uint16_t *taps, uint16_t *bias)
{
  long q[CONVOLVE_FIXED_MAX_TAPS], total = 0;
  double sum = 0;
  int big = 0, nonzero = 0;
  for (int i = 0; i < n; i++)
    {
      sum += w[i];
      q[i] = lround (w[i] * 65536);
      total += q[i];
      big = q[i] > q[big] ? i : big;
    }
  q[big] += lround (sum * 65536) - total;
  if (lround (sum * 65536) > 65536)
    return 0;
  for (int i = 0; i < n; i++)
    {
      if (q[i] < 0 || q[i] > 65535)
        return 0;
      taps[i] = (uint16_t) q[i];
      nonzero += q[i] != 0;
    }
  *bias = (uint16_t) (nonzero / 2);
  return 1;
}

/* The fixed-point taps of a separable kernel (row, col / d), when it
 * qualifies (see the top of this file). */
static int
plan_fixed_point (const kernel_def *k, double d, convolve_plan *plan)
{
  const int n = k->size;
  double h[CONVOLVE_FIXED_MAX_TAPS], v[CONVOLVE_FIXED_MAX_TAPS], h_sum = 0;
  if (n > CONVOLVE_FIXED_MAX_TAPS)
    return 0;
  for (int i = 0; i < n; i++)
    {
      if (k->row[i] < 0 || k->col[i] / d < 0)
        return 0;
      h_sum += k->row[i];
    }
  if (!(h_sum > 0))
    return 0;
  for (int i = 0; i < n; i++)
    {
      h[i] = k->row[i] / h_sum;
      v[i] = k->col[i] / d * h_sum;
    }
  return fixed_point_taps (h, n, plan->fixed_taps, &plan->fixed_bias[0])
         && fixed_point_taps (v, n, plan->fixed_taps + n, &plan->fixed_bias[1]);
}

/* Exact direct sums (see the top of this file): a tap row's partial sums
 * stay within 2^22 units, where floats from 1.5 * 2^23 count units exactly. */
#define EXACT_ROW_BUDGET 0x1p22
/* Tap i's fraction left by rounding down, for the largest-remainder pass. */
typedef struct {
  double frac;
  int    i;
} tap_fraction;

static int
by_fraction (const void *a_, const void *b_)
{
  const tap_fraction *a = a_, *b = b_;
  return a->frac != b->frac ? (a->frac < b->frac ? 1 : -1) : a->i - b->i;
}

/* q[0..n) = w * 2^s rounded down, then raised by 1 at the largest
 * fractions (ties: lower index) until they sum to round (sum w * 2^s). */
static void
round_taps (const double *w, int n, int s, long *q)
{
  tap_fraction r[CONVOLVE_MAX_TAPS_2D];
  double sum = 0;
  long total = 0;
  for (int i = 0; i < n; i++)
    {
      const double v = ldexp (w[i], s);
      q[i] = (long) floor (v);
      r[i].frac = v - (double) q[i];
      r[i].i = i;
      sum += w[i];
      total += q[i];
    }
  long raise = lround (ldexp (sum, s)) - total;
  raise = raise < 0 ? 0 : raise > n ? n : raise;
  qsort (r, n, sizeof *r, by_fraction);
  for (long k = 0; k < raise; k++)
    q[r[k].i]++;
}

/* The largest of a row's positive and negative sums (units or taps). */
static double
row_reach (const double *v, int n)
{
  double pos = 0, neg = 0;
  for (int i = 0; i < n; i++)
    {
      pos += v[i] > 0 ? v[i] : 0;
      neg += v[i] < 0 ? -v[i] : 0;
    }
  return pos > neg ? pos : neg;
}

/* The integer taps of a direct u8 n×n kernel w, when an S fits the row
 * budget and keeps the result within 1/2 of the float arithmetic's value
 * (see the top of this file); stores them as floats with 2^-S. */
static int
plan_exact (const double *w, int n, convolve_plan *plan)
{
  long q[CONVOLVE_MAX_TAPS_2D];
  double reach = 0, abs_sum = 0;
  for (int j = 0; j < n; j++)
    reach = fmax (reach, row_reach (w + j * n, n));
  for (int i = 0; i < n * n; i++)
    abs_sum += fabs (w[i]);
  if (!(abs_sum > 0) || !isfinite (abs_sum))
    return 0;
  /* from the unrounded taps (rounding adds at most one unit a tap) down to
   * the first S whose rounded rows fit */
  int s = (int) floor (log2 ((EXACT_ROW_BUDGET / 255 - n) / reach));
  for (s = s > 30 ? 30 : s; s >= 0; s--)
    {
      double units[CUDAFX_MAX_KERNEL_SIZE], worst = 0;
      round_taps (w, n * n, s, q);
      for (int j = 0; j < n; j++)
        {
          for (int i = 0; i < n; i++)
            units[i] = (double) q[j * n + i];
          worst = fmax (worst, row_reach (units, n));
        }
      if (255 * worst <= EXACT_ROW_BUDGET)
        break;
    }
  if (s < 0)
    return 0;
  /* the rounding's worst case over u8 images (255 where it adds up), and a
   * bound of the float arithmetic's own error (n² + 1 roundings of at most
   * 2^-24 of the largest sum) */
  double err[CONVOLVE_MAX_TAPS_2D];
  for (int i = 0; i < n * n; i++)
    err[i] = ldexp ((double) q[i], -s) - w[i];
  const double error = 255 * row_reach (err, n * n) + (n * n + 1) * 0x1p-24 * 255 * abs_sum;
  if (error > 0.5)
    return 0;
  for (int i = 0; i < n * n; i++)
    plan->taps[i] = (float) q[i];
  plan->sum_scale = (float) ldexp (1, -s);
  return 1;
}

static cudafx_status
make_plan (const cudafx_convolve_params *p, const cudafx_image *src, convolve_plan *plan)
{
  const cudafx_type type = src->type;
  kernel_def *k;
  cudafx_status s;
  if (!(k = malloc (sizeof *k)))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory");
  if ((s = kernel_from_params (p, k)))
    goto out;
  int n = k->size;
  double sum = 0, abs_sum = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      {
        sum += kernel_tap (k, j, i);
        abs_sum += fabs (kernel_tap (k, j, i));
      }
  plan->zero_sum = fabs (sum) <= KERNEL_EPS * abs_sum;
  double d = p->divisor != 0 ? p->divisor : plan->zero_sum ? 1 : sum;
  if (!k->outer)
    find_rank_1 (k);
  plan->border = p->border;
  plan->size = n;
  plan->radius = n / 2;
  plan->separable = k->outer;
  plan->abs_sum = (float) abs_sum;
  plan->alpha_scale = plan->zero_sum ? 1.0f : (float) (d / sum);
  plan->offset = (float) (type == CUDAFX_U8 ? p->offset : p->offset / 255.0);
  if (k->outer)
    for (int i = 0; i < n; i++)
      {
        plan->taps[i] = (float) k->row[i];
        plan->taps[n + i] = (float) (k->col[i] / d);
        plan->abs_taps[i] = (float) fabs (k->row[i]);
        plan->abs_taps[n + i] = (float) fabs (k->col[i]);
      }
  else
    for (int i = 0; i < n * n; i++)
      {
        plan->taps[i] = (float) (k->matrix[i] / d);
        plan->abs_taps[i] = (float) fabs (k->matrix[i]);
      }
  plan->fixed16 = type == CUDAFX_U8 && !src->has_alpha && k->outer && plan_fixed_point (k, d, plan);
  plan->sum_scale = 1.0f;
  plan->exact = 0;
  if (type == CUDAFX_U8 && !src->has_alpha && !k->outer)
    {
      double w[CONVOLVE_MAX_TAPS_2D];
      for (int i = 0; i < n * n; i++)
        w[i] = k->matrix[i] / d;
      plan->exact = plan_exact (w, n, plan);
    }
  for (int i = 0; i < (k->outer ? 2 * n : n * n); i++)
    if (!isfinite (plan->taps[i]))
      {
        s = cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                         "convolve: divisor %g is too small for this kernel", p->divisor);
        break;
      }
out:
  free (k);
  return s;
}

/* ---- CPU implementation ------------------------------------------------- */

typedef struct {
  const cudafx_image   *src;
  cudafx_image         *dst;
  const convolve_plan  *plan;
  cudafx_border         border;
  int                   band_rows;
  int                   strip;                 /* pixels per vertical strip */
  int                   left[CONVOLVE_MAX_TAPS_1D / 2];  /* source x of pixel -1-p, or -1 */
  int                   right[CONVOLVE_MAX_TAPS_1D / 2]; /* source x of pixel width+p, or -1 */
  /* per-thread scratch: thread t owns floats [t * scratch_floats, ...) */
  float                *scratch;
  size_t                scratch_floats;
  size_t                pad_len, apad_len;     /* padded row, colour and alpha plane */
  size_t                ring_len, aring_len;   /* rows of the ring */
  size_t                row_len, arow_len;     /* an output row, rounded to TILE */
  cudafx_status         status;
} convolve_job;

/* A thread's buffers inside the scratch. */
typedef struct {
  float *pad, *apad;           /* one converted source row with its border */
  float *ring[CONVOLVE_MAX_TAPS_1D];    /* 2r+1 rows: padded (direct) or filtered (separable) */
  float *aring[CONVOLVE_MAX_TAPS_1D];
  float *acc, *aacc;           /* the output row's sums */
  /* separable: the horizontal pass's terms over pad and apad, zero taps left out */
  const float *h_in[CONVOLVE_MAX_TAPS_1D], *ha_in[CONVOLVE_MAX_TAPS_1D];
  float h_w[CONVOLVE_MAX_TAPS_1D], ha_w[CONVOLVE_MAX_TAPS_1D];
  int h_terms, ha_terms;
  /* fixed point: the buffers above hold uint16_t; the horizontal terms */
  const uint16_t *hq_in[CONVOLVE_FIXED_MAX_TAPS];
  uint16_t hq_w[CONVOLVE_FIXED_MAX_TAPS];
  int hq_terms;
} workspace;

/* 16 floats: one AVX-512 register, two AVX ones. GCC vector extensions keep
 * the tile's sums in registers across the terms; plain loops got vectorised
 * over the terms, with gathers, instead. Element-wise multiply, then add. */
typedef float vec16 __attribute__ ((vector_size (64)));

static inline vec16
load16 (const float *p)
{
  vec16 v;
  memcpy (&v, p, sizeof v);
  return v;
}

/* out[x] = sum over t of w[t] * in[t][x], for x < len rounded up to TILE
 * (buffers have that slack). Terms in order, from 0.0f, multiply then add. */
CUDAFX_CPU_CLONES static void
weighted_sum (float *restrict out, const float *const *in, const float *w, int n, size_t len)
{
  for (size_t x0 = 0; x0 < len; x0 += TILE)
    {
      vec16 a[TILE / 16] = { 0 };
      for (int t = 0; t < n; t++)
        {
          const float *s = in[t] + x0;
          const float wt = w[t];
          for (int v = 0; v < TILE / 16; v++)
            a[v] = a[v] + wt * load16 (s + 16 * v);
        }
      memcpy (out + x0, a, sizeof a);
    }
}

/* Exact sums: out[x] = sum over tap rows r of the integer sum over terms
 * row_end[r-1] <= t < row_end[r] of w[t] * in[t][x], for x < len rounded
 * up to TILE. A row's sum is exact in floats (the plan's budget), so it may
 * fuse multiply and add; the rows add up in int32 lanes; the total leaves
 * as a float. */
typedef int32_t vec16i __attribute__ ((vector_size (64)));

CUDAFX_CPU_CLONES __attribute__ ((optimize ("fp-contract=fast"))) static void
exact_sum (float *restrict out, const float *const *in, const float *w, const int *row_end, int rows,
           size_t len)
{
  for (size_t x0 = 0; x0 < len; x0 += TILE)
    {
      vec16i total[TILE / 16] = { 0 };
      for (int r = 0, t = 0; r < rows; r++)
        {
          vec16 a[TILE / 16] = { 0 };
          for (; t < row_end[r]; t++)
            {
              const float *s = in[t] + x0;
              const float wt = w[t];
              for (int v = 0; v < TILE / 16; v++)
                a[v] = a[v] + wt * load16 (s + 16 * v);
            }
          for (int v = 0; v < TILE / 16; v++)
            total[v] += __builtin_convertvector (a[v], vec16i);
        }
      for (int v = 0; v < TILE / 16; v++)
        {
          const vec16 f = __builtin_convertvector (total[v], vec16);
          memcpy (out + x0 + 16 * v, &f, sizeof f);
        }
    }
}

/* 32 lanes of 16 bits: one AVX-512 register. */
typedef uint16_t vecu16 __attribute__ ((vector_size (64)));
#define TILE16 256

static inline vecu16
mul_high16 (vecu16 a, uint16_t b)
{
  vecu16 r = { 0 };
  for (int i = 0; i < 32; i++) /* GCC makes this one vpmulhuw */
    r[i] = (uint16_t) (((uint32_t) a[i] * b) >> 16);
  return r;
}

/* Fixed point: out[x] = bias + sum over t of (in[t][x] * w[t]) >> 16, for
 * x < len rounded up to TILE16. The plan keeps the sums below 65536. */
CUDAFX_CPU_CLONES static void
weighted_sum_u16 (uint16_t *restrict out, const uint16_t *const *in, const uint16_t *w, int n,
                  uint16_t bias, size_t len)
{
  for (size_t x0 = 0; x0 < len; x0 += TILE16)
    {
      vecu16 a[TILE16 / 32];
      for (int v = 0; v < TILE16 / 32; v++)
        a[v] = (vecu16) {} + bias;
      for (int t = 0; t < n; t++)
        {
          const uint16_t *s = in[t] + x0;
          for (int v = 0; v < TILE16 / 32; v++)
            {
              vecu16 x;
              memcpy (&x, s + 32 * v, sizeof x);
              a[v] += mul_high16 (x, w[t]);
            }
        }
      memcpy (out + x0, a, sizeof a);
    }
}

/* Converts count pixels of a source row from pixel sx to floats at dst,
 * colour premultiplied by alpha, and their alpha to adst. */
CUDAFX_CPU_CLONES static void
convert_pixels (const cudafx_image *src, const uint8_t *row, int sx, int count,
                float *restrict dst, float *restrict adst)
{
  const int c = src->channels;
  const size_t n = (size_t) count * c;
  if (src->type == CUDAFX_U8)
    {
      const uint8_t *restrict s = row + (size_t) sx * c;
      for (size_t i = 0; i < n; i++)
        dst[i] = s[i];
    }
  else
    memcpy (dst, (const float *) row + (size_t) sx * c, sizeof (float) * n);
  if (src->has_alpha)
    for (int x = 0; x < count; x++)
      {
        const float a = dst[(size_t) x * c + c - 1];
        adst[x] = a;
        for (int k = 0; k < c - 1; k++)
          dst[(size_t) x * c + k] *= a;
      }
}

/* Puts source pixel sx (or -1: black) of row at position p of ws->pad. */
static void
border_pixel (const convolve_job *job, workspace *ws, const uint8_t *row, int sx, int p)
{
  const int c = job->src->channels;
  float *dst = ws->pad + (size_t) p * c;
  if (sx >= 0)
    convert_pixels (job->src, row, sx, 1, dst, ws->apad + p);
  else
    {
      memset (dst, 0, sizeof (float) * c);
      if (job->src->has_alpha)
        ws->apad[p] = 0.0f;
    }
}

/* Converts pixels x0 - r .. x1 + r - 1 of source row sy (or -1: black) to
 * floats in ws->pad (alpha in ws->apad); pixels beyond the left and right
 * edges come through the border maps. */
CUDAFX_CPU_CLONES static void
load_row (const convolve_job *job, workspace *ws, int sy, int x0, int x1)
{
  const cudafx_image *src = job->src;
  const int c = src->channels, w = src->width, r = job->plan->radius;
  const int a = x0 - r, b = x1 + r;
  if (sy < 0)
    {
      memset (ws->pad, 0, sizeof (float) * (size_t) (b - a) * c);
      if (src->has_alpha)
        memset (ws->apad, 0, sizeof (float) * (size_t) (b - a));
      return;
    }
  const uint8_t *row = cudafx_row (src, sy);
  const int i0 = a > 0 ? a : 0, i1 = b < w ? b : w;
  convert_pixels (src, row, i0, i1 - i0, ws->pad + (size_t) (i0 - a) * c, ws->apad + (i0 - a));
  for (int x = a; x < i0; x++)
    border_pixel (job, ws, row, job->left[-1 - x], x - a);
  for (int x = i1; x < b; x++)
    border_pixel (job, ws, row, job->right[x - w], x - a);
}

/* load_row for the fixed-point path: pixels as x << 8 in ws->pad. */
CUDAFX_CPU_CLONES static void
load_row_fixed (const convolve_job *job, workspace *ws, int sy, int x0, int x1)
{
  const cudafx_image *src = job->src;
  const int c = src->channels, w = src->width, r = job->plan->radius;
  const int a = x0 - r, b = x1 + r;
  const int i0 = a > 0 ? a : 0, i1 = b < w ? b : w;
  const uint8_t *restrict row = cudafx_row (src, sy);
  uint16_t *restrict pad = (uint16_t *) ws->pad;
  for (size_t i = (size_t) i0 * c; i < (size_t) i1 * c; i++)
    pad[i - (size_t) a * c] = (uint16_t) (row[i] << 8);
  for (int x = a; x < b; x++)
    if (x < i0 || x >= i1)
      {
        const int sx = x < 0 ? job->left[-1 - x] : job->right[x - w];
        for (int k = 0; k < c; k++)
          pad[(size_t) (x - a) * c + k] = sx < 0 ? 0 : (uint16_t) (row[(size_t) sx * c + k] << 8);
      }
}

/* Fills the ring slot of virtual row v (any integer; mapped at the border). */
CUDAFX_CPU_CLONES static void
prepare_row (const convolve_job *job, workspace *ws, int v, int x0, int x1)
{
  const convolve_plan *pl = job->plan;
  const cudafx_image *src = job->src;
  const int n = pl->size, c = src->channels;
  const int slot = ((v % n) + n) % n;
  const int sy = cudafx_border_index (v, src->height, job->border);
  if (!pl->separable)
    {
      /* the padded row itself is the ring entry */
      float *pad = ws->pad, *apad = ws->apad;
      ws->pad = ws->ring[slot];
      ws->apad = ws->aring[slot];
      load_row (job, ws, sy, x0, x1);
      ws->pad = pad;
      ws->apad = apad;
      return;
    }
  if (pl->fixed16)
    {
      /* a black row sums to the bias alone, as on the GPU */
      if (sy < 0)
        memset (ws->pad, 0, sizeof (float) * job->pad_len);
      else
        load_row_fixed (job, ws, sy, x0, x1);
      weighted_sum_u16 ((uint16_t *) ws->ring[slot], ws->hq_in, ws->hq_w, ws->hq_terms,
                        pl->fixed_bias[0], (size_t) (x1 - x0) * c);
      return;
    }
  if (sy < 0)
    {
      memset (ws->ring[slot], 0, sizeof (float) * job->ring_len);
      if (src->has_alpha)
        memset (ws->aring[slot], 0, sizeof (float) * job->aring_len);
      return;
    }
  load_row (job, ws, sy, x0, x1);
  weighted_sum (ws->ring[slot], ws->h_in, ws->h_w, ws->h_terms, (size_t) (x1 - x0) * c);
  if (src->has_alpha)
    weighted_sum (ws->aring[slot], ws->ha_in, ws->ha_w, ws->ha_terms, (size_t) (x1 - x0));
}

/* Sums the ring into ws->acc (and ws->aacc) for output row y, pixels x0..x1-1. */
CUDAFX_CPU_CLONES static void
sum_ring (const convolve_job *job, workspace *ws, int y, int x0, int x1)
{
  const convolve_plan *pl = job->plan;
  const int n = pl->size, r = pl->radius, c = job->src->channels, w = x1 - x0;
  const float *in[CONVOLVE_MAX_TAPS_2D];
  float wt[CONVOLVE_MAX_TAPS_2D];
  if (pl->fixed16)
    {
      const uint16_t *qin[CONVOLVE_FIXED_MAX_TAPS];
      uint16_t qw[CONVOLVE_FIXED_MAX_TAPS];
      int terms = 0;
      for (int j = 0; j < n; j++)
        if (pl->fixed_taps[n + j])
          {
            qin[terms] = (const uint16_t *) ws->ring[(((y - r + j) % n) + n) % n];
            qw[terms++] = pl->fixed_taps[n + j];
          }
      weighted_sum_u16 ((uint16_t *) ws->acc, qin, qw, terms, pl->fixed_bias[1], (size_t) w * c);
      return;
    }
  if (pl->exact)
    {
      int row_end[CUDAFX_MAX_KERNEL_SIZE], terms = 0;
      for (int j = 0; j < n; j++)
        {
          const float *row = ws->ring[(((y - r + j) % n) + n) % n];
          for (int i = 0; i < n; i++)
            if (pl->taps[j * n + i] != 0.0f)
              {
                in[terms] = row + (size_t) i * c;
                wt[terms++] = pl->taps[j * n + i];
              }
          row_end[j] = terms;
        }
      exact_sum (ws->acc, in, wt, row_end, n, (size_t) w * c);
      return;
    }
  for (int plane = 0; plane < (job->src->has_alpha ? 2 : 1); plane++)
    {
      float **ring = plane ? ws->aring : ws->ring;
      const float *taps = plane ? pl->abs_taps : pl->taps;
      const int step = plane ? 1 : c;
      int terms = 0;
      for (int j = 0; j < n; j++)
        {
          const float *row = ring[(((y - r + j) % n) + n) % n];
          if (pl->separable)
            {
              if (taps[n + j] != 0.0f)
                {
                  in[terms] = row;
                  wt[terms++] = taps[n + j];
                }
            }
          else
            for (int i = 0; i < n; i++)
              if (taps[j * n + i] != 0.0f)
                {
                  in[terms] = row + (size_t) i * step;
                  wt[terms++] = taps[j * n + i];
                }
        }
      weighted_sum (plane ? ws->aacc : ws->acc, in, wt, terms, (size_t) w * (plane ? 1 : c));
    }
}

static inline uint8_t
to_u8 (float v)
{
  v = v > 0.0f ? v : 0.0f; /* also maps NaN to 0 */
  v = v < 255.0f ? v : 255.0f;
  return (uint8_t) (int) (v + 0.5f);
}

/* Writes pixels x0..x1-1 of output row y from ws->acc (and ws->aacc). */
CUDAFX_CPU_CLONES static void
store_row (const convolve_job *job, workspace *ws, int y, int x0, int x1)
{
  const convolve_plan *pl = job->plan;
  const cudafx_image *src = job->src;
  const int c = src->channels, w = x1 - x0;
  const size_t n = (size_t) w * c, first = (size_t) x0 * c;
  const float off = pl->offset;
  float *restrict acc = ws->acc;
  uint8_t *out = cudafx_row (job->dst, y) + first * cudafx_type_size (src->type);

  if (pl->fixed16)
    {
      const uint16_t *restrict sum = (const uint16_t *) acc;
      for (size_t i = 0; i < n; i++)
        out[i] = to_u8 ((float) sum[i] * (1.0f / 256.0f) + off);
      return;
    }
  if (src->has_alpha)
    {
      const float amax = src->type == CUDAFX_U8 ? 255.0f : 1.0f;
      const uint8_t *in = cudafx_row (src, y) + first * cudafx_type_size (src->type);
      for (int x = 0; x < w; x++)
        {
          float *px = acc + (size_t) x * c;
          const float cover = ws->aacc[x];
          for (int k = 0; k < c - 1; k++)
            px[k] = cover > 0.0f ? px[k] * pl->abs_sum / cover + off : off;
          float a;
          if (pl->zero_sum)
            a = src->type == CUDAFX_U8 ? in[(size_t) x * c + c - 1]
                                       : ((const float *) in)[(size_t) x * c + c - 1];
          else
            {
              a = px[c - 1] * pl->alpha_scale;
              a = a > 0.0f ? a : 0.0f;
              a = a < amax ? a : amax;
            }
          px[c - 1] = a;
        }
    }
  else
    for (size_t i = 0; i < n; i++)
      acc[i] = acc[i] * pl->sum_scale + off; /* scale 1 but for exact sums */

  if (src->type == CUDAFX_U8)
    for (size_t i = 0; i < n; i++)
      out[i] = to_u8 (acc[i]);
  else
    memcpy (out, acc, sizeof (float) * n);
}

CUDAFX_CPU_CLONES static void
convolve_bands (void *ctx, int b0, int b1)
{
  convolve_job *job = ctx;
  const convolve_plan *pl = job->plan;
  const int n = pl->size, r = pl->radius, height = job->src->height;
  float *base = job->scratch + (size_t) omp_get_thread_num () * job->scratch_floats;
  workspace ws;

  ws.pad = base;
  base += job->pad_len;
  ws.apad = base;
  base += job->apad_len;
  ws.acc = base;
  base += job->row_len;
  ws.aacc = base;
  base += job->arow_len;
  for (int j = 0; j < n; j++)
    {
      ws.ring[j] = base;
      base += job->ring_len;
      ws.aring[j] = base;
      base += job->aring_len;
    }
  ws.h_terms = ws.ha_terms = ws.hq_terms = 0;
  for (int i = 0; pl->fixed16 && i < n; i++)
    if (pl->fixed_taps[i])
      {
        ws.hq_in[ws.hq_terms] = (const uint16_t *) ws.pad + (size_t) i * job->src->channels;
        ws.hq_w[ws.hq_terms++] = pl->fixed_taps[i];
      }
  for (int i = 0; pl->separable && i < n; i++)
    {
      if (pl->taps[i] != 0.0f)
        {
          ws.h_in[ws.h_terms] = ws.pad + (size_t) i * job->src->channels;
          ws.h_w[ws.h_terms++] = pl->taps[i];
        }
      if (pl->abs_taps[i] != 0.0f)
        {
          ws.ha_in[ws.ha_terms] = ws.apad + i;
          ws.ha_w[ws.ha_terms++] = pl->abs_taps[i];
        }
    }

  for (int b = b0; b < b1; b++)
    {
      int y0 = b * job->band_rows;
      int y1 = y0 + job->band_rows < height ? y0 + job->band_rows : height;
      for (int x0 = 0; x0 < job->src->width; x0 += job->strip)
        {
          int x1 = x0 + job->strip < job->src->width ? x0 + job->strip : job->src->width;
          for (int v = y0 - r; v < y0 + r; v++)
            prepare_row (job, &ws, v, x0, x1);
          for (int y = y0; y < y1; y++)
            {
              prepare_row (job, &ws, y + r, x0, x1);
              sum_ring (job, &ws, y, x0, x1);
              store_row (job, &ws, y, x0, x1);
            }
        }
    }
}

/* a * b + c with overflow check into *out; returns 0 on overflow. */
static int
size_mul_add (size_t a, size_t b, size_t c, size_t *out)
{
  if (b && a > (SIZE_MAX - c) / b)
    return 0;
  *out = a * b + c;
  return 1;
}

static cudafx_status
convolve_job_run (convolve_job *job, const cudafx_options *o)
{
  const cudafx_image *src = job->src;
  const convolve_plan *pl = job->plan;
  const int threads = cudafx_thread_count (o);
  const size_t c = src->channels, w = src->width, r = pl->radius, n = pl->size;
  const int alpha = src->has_alpha;
  size_t per_ring, per_thread, total;
  cudafx_status s;

  for (int p = 0; p < pl->radius; p++)
    {
      job->left[p] = cudafx_border_index (-1 - p, src->width, job->border);
      job->right[p] = cudafx_border_index (src->width + p, src->width, job->border);
    }

  /* Vertical strips keep a ring of 2r+1 strip rows in the L2 cache. */
  size_t strip = STRIP_FLOATS / c > 4 * r ? STRIP_FLOATS / c : 4 * r;
  job->strip = (int) (strip < w ? strip : w);
  /* rows are read TILE-rounded, plus 2r pixels of border */
  job->row_len = round_tile ((size_t) job->strip * c);
  job->arow_len = alpha ? round_tile (job->strip) : 0;
  job->pad_len = job->row_len + 2 * r * c;
  job->apad_len = alpha ? job->arow_len + 2 * r : 0;
  job->ring_len = pl->separable ? job->row_len : job->pad_len;
  job->aring_len = pl->separable ? job->arow_len : job->apad_len;
  per_ring = job->ring_len + job->aring_len;
  if (!size_mul_add (per_ring, n, job->pad_len + job->apad_len + job->row_len + job->arow_len,
                     &per_thread)
      || !size_mul_add (per_thread, threads, 0, &total) || total > SIZE_MAX / sizeof (float))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: working buffers too large");
  job->scratch_floats = per_thread;
  /* zeroed: the TILE slack of the rows is read (results discarded) */
  job->scratch = calloc (total, sizeof (float));
  if (!job->scratch)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory for %zu working floats", total);

  int bands = threads * 4 < src->height ? threads * 4 : src->height;
  job->band_rows = (src->height + bands - 1) / bands;
  bands = (src->height + job->band_rows - 1) / job->band_rows;
  s = cudafx_parallel_rows (bands, convolve_bands, job, o, 0.0, 1.0);
  free (job->scratch);
  job->scratch = NULL;
  return s;
}

/* ---- non-finite f32 values: the fix-up (see core/convolve.h) ------------- */

typedef struct {
  const cudafx_image  *src;
  cudafx_image        *dst;
  const convolve_plan *plan;
  uint8_t             *bad_rows;    /* 1 for a source row holding a non-finite value */
  int                 *marks;       /* per thread: width + size counts */
} fix_job;

static int
pixel_finite (const float *p, int c)
{
  for (int k = 0; k < c; k++)
    if (!isfinite (p[k]))
      return 0;
  return 1;
}

static void
mark_rows (void *ctx, int y0, int y1)
{
  fix_job *job = ctx;
  const size_t n = (size_t) job->src->width * job->src->channels;
  for (int y = y0; y < y1; y++)
    {
      const float *row = (const float *) cudafx_row (job->src, y);
      int bad = 0;
      for (size_t i = 0; i < n; i++)
        bad |= !isfinite (row[i]);
      job->bad_rows[y] = (uint8_t) bad;
    }
}

/* Output rows y0..y1-1: the outputs whose window holds a non-finite element
 * again, by convolve_fix_pixel. Per row, the virtual columns -r .. w+r-1
 * holding one in a window row are counted up (prefix sums), so that an
 * output's window is tested in O(1). */
static void
fix_rows (void *ctx, int y0, int y1)
{
  fix_job *job = ctx;
  const cudafx_image *src = job->src;
  const convolve_plan *pl = job->plan;
  const int w = src->width, c = src->channels, n = pl->size, r = pl->radius;
  int *count = job->marks + (size_t) omp_get_thread_num () * (w + n);
  for (int y = y0; y < y1; y++)
    {
      int hit = 0;
      for (int j = 0; j < n && !hit; j++)
        {
          const int sy = cudafx_border_index (y - r + j, src->height, pl->border);
          hit = sy >= 0 && job->bad_rows[sy];
        }
      if (!hit)
        continue;
      memset (count, 0, sizeof (int) * (size_t) (w + n));
      for (int j = 0; j < n; j++)
        {
          const int sy = cudafx_border_index (y - r + j, src->height, pl->border);
          if (sy < 0 || !job->bad_rows[sy])
            continue;
          const float *row = (const float *) cudafx_row (src, sy);
          for (int v = -r; v < w + r; v++)
            {
              const int sx = cudafx_border_index (v, w, pl->border);
              if (sx >= 0 && !pixel_finite (row + (size_t) sx * c, c))
                count[v + r + 1] = 1;
            }
        }
      for (int v = 0; v < w + n - 1; v++)
        count[v + 1] += count[v];
      const convolve_window win = { src->data, src->stride, y - r, src->height, w, c, src->has_alpha,
                                    pl->border };
      const float *in = (const float *) cudafx_row (src, y);
      float *out = (float *) cudafx_row (job->dst, y);
      for (int x = 0; x < w; x++)
        if (count[x + n] > count[x]) /* virtual columns x - r .. x + r */
          convolve_fix_pixel (pl, &win, x, in + (size_t) x * c, out + (size_t) x * c);
    }
}

static cudafx_status
fix_non_finite (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                const cudafx_options *o)
{
  fix_job job = { src, dst, plan, NULL, NULL };
  const int threads = cudafx_thread_count (o);
  int any = 0;
  cudafx_status s;
  if (!(job.bad_rows = malloc ((size_t) src->height)))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory");
  if (!(s = cudafx_parallel_rows (src->height, mark_rows, &job, o, 1.0, 1.0)))
    {
      for (int y = 0; y < src->height && !any; y++)
        any = job.bad_rows[y];
      if (any)
        {
          job.marks = malloc (sizeof (int) * (size_t) threads * (size_t) (src->width + plan->size));
          s = job.marks ? cudafx_parallel_rows (src->height, fix_rows, &job, o, 1.0, 1.0)
                        : cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory");
        }
    }
  free (job.marks);
  free (job.bad_rows);
  return s;
}

/* The CPU backend's convolution (core/cpu.c's table). f32 images then have
 * the outputs near a non-finite value fixed up (see core/convolve.h). */
cudafx_status
cudafx_convolve_cpu (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                     const cudafx_options *o)
{
  convolve_job *job = calloc (1, sizeof *job);
  if (!job)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory");
  job->src = src;
  job->dst = dst;
  job->plan = plan;
  job->border = plan->border;
  cudafx_status s = convolve_job_run (job, o);
  free (job);
  if (!s && src->type == CUDAFX_F32)
    s = fix_non_finite (src, dst, plan, o);
  return s;
}

typedef struct {
  const cudafx_image  *src;
  cudafx_image        *dst;
  const convolve_plan *plan;
} convolve_call;

static cudafx_status
convolve_run (const cudafx_backend_ops *b, void *call_, const cudafx_options *o)
{
  const convolve_call *call = call_;
  return b->convolve (call->src, call->dst, call->plan, o);
}

cudafx_status
cudafx_convolve (const cudafx_image *src, cudafx_image *dst, const cudafx_convolve_params *p,
                 const cudafx_options *o)
{
  convolve_plan *plan;
  cudafx_status s;

  cudafx_clear_error ();
  if ((s = cudafx_check_pair ("convolve", src, dst)) || (s = check_params (p)))
    return s;
  plan = malloc (sizeof *plan);
  if (!plan)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "convolve: out of memory");
  else if (!(s = make_plan (p, src, plan)))
    {
      convolve_call call = { src, dst, plan };
      s = cudafx_dispatch ("convolve", convolve_run, &call, src, dst, 1, o);
    }
  free (plan);
  return s;
}
