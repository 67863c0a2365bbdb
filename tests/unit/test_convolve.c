/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Convolution: the engine against a brute-force double-precision 2-D
 * correlation with an explicit border function, over every preset, border
 * mode, custom kernel sizes (rank 1 or not), divisor and offset, both types,
 * channels 1–4 with and without alpha, padded strides and thread counts;
 * properties (identity, constant images, no bleeding from transparent
 * pixels); and invalid arguments. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the oracle --------------------------------------------------------- */

/* The documented preset kernels, written out. */
static const double laplacian[25] = {
   0,  0, -1,  0,  0,
   0, -1, -2, -1,  0,
  -1, -2, 16, -2, -1,
   0, -1, -2, -1,  0,
   0,  0, -1,  0,  0,
};
static const double sharpen[25] = {
  -1,  -4,  -6,  -4, -1,
  -4, -16, -24, -16, -4,
  -6, -24, 476, -24, -6,
  -4, -16, -24, -16, -4,
  -1,  -4,  -6,  -4, -1,
};
static const double high_pass[25] = {
  -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1,
  -1, -1, 24, -1, -1,
  -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1,
};
static const double mean3[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
static const double blur3[9] = { 1, 2, 1, 2, 4, 2, 1, 2, 1 };
static const double blur5[25] = {
  1,  4,  6,  4, 1,
  4, 16, 24, 16, 4,
  6, 24, 36, 24, 6,
  4, 16, 24, 16, 4,
  1,  4,  6,  4, 1,
};
static const double sobel_h[9] = { -1, 0, 1, -2, 0, 2, -1, 0, 1 };
static const double sobel_v[9] = { -1, -2, -1, 0, 0, 0, 1, 2, 1 };
static const double identity3[9] = { 0, 0, 0, 0, 1, 0, 0, 0, 0 };

/* The kernel the parameters describe, malloc'ed, size in *n. */
static double *
expected_kernel (const cudafx_convolve_params *p, int *n)
{
  const double *table = identity3;
  double *k;
  *n = 3;
  switch (p->preset)
    {
    case CUDAFX_PRESET_CUSTOM:
      *n = p->kernel ? p->kernel_size : 3;
      table = p->kernel ? p->kernel : identity3;
      break;
    case CUDAFX_PRESET_LAPLACIAN_5X5: *n = 5; table = laplacian; break;
    case CUDAFX_PRESET_SHARPEN_5X5: *n = 5; table = sharpen; break;
    case CUDAFX_PRESET_HIGH_PASS_5X5: *n = 5; table = high_pass; break;
    case CUDAFX_PRESET_MEAN_3X3: *n = 3; table = mean3; break;
    case CUDAFX_PRESET_BLUR_3X3: *n = 3; table = blur3; break;
    case CUDAFX_PRESET_BLUR_5X5: *n = 5; table = blur5; break;
    case CUDAFX_PRESET_SOBEL_HORIZONTAL: *n = 3; table = sobel_h; break;
    case CUDAFX_PRESET_SOBEL_VERTICAL: *n = 3; table = sobel_v; break;
    case CUDAFX_PRESET_GAUSSIAN:
      {
        int r = (int) ceil (3 * p->sigma);
        double sum = 0;
        *n = 2 * r + 1;
        k = malloc (sizeof (double) * *n * *n);
        for (int j = -r; j <= r; j++)
          for (int i = -r; i <= r; i++)
            sum += k[(j + r) * *n + i + r] = exp (-(i * i + j * j) / (2 * p->sigma * p->sigma));
        for (int i = 0; i < *n * *n; i++)
          k[i] /= sum;
        return k;
      }
    }
  k = malloc (sizeof (double) * *n * *n);
  memcpy (k, table, sizeof (double) * *n * *n);
  return k;
}

/* Index of position i in 0..n-1 under a border mode, or -1 for black. */
static int
ref_border (int i, int n, cudafx_border border)
{
  if (i >= 0 && i < n)
    return i;
  switch (border)
    {
    case CUDAFX_BORDER_CLAMP:
      return i < 0 ? 0 : n - 1;
    case CUDAFX_BORDER_MIRROR:
      if (n == 1)
        return 0;
      while (i < 0 || i >= n)
        i = i < 0 ? -i : 2 * (n - 1) - i;
      return i;
    case CUDAFX_BORDER_WRAP:
      while (i < 0)
        i += n;
      return i % n;
    case CUDAFX_BORDER_BLACK:
      return -1;
    }
  return -1;
}

static double
ref_get (const cudafx_image *img, int x, int y, int c, cudafx_border border)
{
  int sx = ref_border (x, img->width, border), sy = ref_border (y, img->height, border);
  return sx < 0 || sy < 0 ? 0 : harness_get (img, sx, sy, c);
}

/* Element c of the pixel at x + i, y + j as the window centred on (x, y)
 * reads it: a non-finite value as the centre's of the same channel. */
static double
ref_read (const cudafx_image *img, int x, int y, int i, int j, int c, cudafx_border border)
{
  double v = ref_get (img, x + i, y + j, c, border);
  return isfinite (v) ? v : harness_get (img, x, y, c);
}

/* Element (x, y, c) of the result on the 0..255 scale, before rounding and
 * clamping, following the documented formulas in double precision; f32
 * non-finite values by the documented rule (core/convolve.h): a pixel's own
 * non-finite value (or alpha) is kept, a neighbour's reads as the centre's. */
static double
oracle (const cudafx_image *src, const double *k, int n, const cudafx_convolve_params *p,
        int x, int y, int c)
{
  const int r = n / 2, ch = src->channels;
  if (!isfinite (harness_get (src, x, y, c))
      || (src->has_alpha && !isfinite (harness_get (src, x, y, ch - 1))))
    return harness_get (src, x, y, c);
  double sum = 0, abs_sum = 0;
  for (int i = 0; i < n * n; i++)
    {
      sum += k[i];
      abs_sum += fabs (k[i]);
    }
  const int zero_sum = fabs (sum) <= 1e-9 * abs_sum;
  const double d = p->divisor != 0 ? p->divisor : zero_sum ? 1 : sum;
  const int is_alpha = src->has_alpha && c == ch - 1;
  double acc = 0, cover = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      {
        double v = ref_read (src, x, y, i - r, j - r, c, p->border);
        double kv = k[j * n + i];
        if (src->has_alpha && !is_alpha)
          {
            double a = ref_read (src, x, y, i - r, j - r, ch - 1, p->border);
            acc += kv * a * v;
            cover += fabs (kv) * a;
          }
        else
          acc += kv * v;
      }
  if (is_alpha)
    {
      if (zero_sum)
        return harness_get (src, x, y, c);
      double a = acc / sum;
      return a < 0 ? 0 : a > 255 ? 255 : a;
    }
  if (src->has_alpha)
    return cover > 0 ? acc / d * abs_sum / cover + p->offset : p->offset;
  return acc / d + p->offset;
}

/* Whether k is an outer product (every 2x2 minor vanishes, relative to the
 * largest entry). */
static int
is_rank_1 (const double *k, int n)
{
  double big = 0;
  for (int i = 0; i < n * n; i++)
    big = fmax (big, fabs (k[i]));
  for (int a = 0; a < n; a++)
    for (int c = a + 1; c < n; c++)
      for (int b = 0; b < n; b++)
        for (int e = b + 1; e < n; e++)
          if (fabs (k[a * n + b] * k[c * n + e] - k[a * n + e] * k[c * n + b]) > 1e-8 * big * big)
            return 0;
  return 1;
}

/* Whether a u8 case may run in fixed point (core/convolve.c), within 1 of
 * the oracle rather than correctly rounded from float sums: u8 without
 * alpha, either separable with taps k / d all >= 0 summing to at most 1
 * (16-bit, rank 1 also required there; a dense kernel counted here only
 * loosens its own check), or direct (not rank 1: exact integer sums, which
 * the engine takes when its taps are precise enough). Their rounding is
 * checked statistically by convolve_fixed_point_rounds_like_float and
 * convolve_exact_sums_round_like_float. */
static int
may_run_in_fixed_point (const cudafx_image *src, const double *k, int n, double d)
{
  double sum = 0;
  int negative = 0;
  if (src->type != CUDAFX_U8 || src->has_alpha)
    return 0;
  if (!is_rank_1 (k, n))
    return 1;
  for (int i = 0; i < n * n; i++)
    {
      negative |= k[i] / d < 0;
      sum += k[i] / d;
    }
  return !negative && sum <= 1 + 1e-6;
}

/* Checks dst against the oracle and that dst's row padding is still poisoned.
 * u8 from float sums: the correctly rounded oracle (round half up, clamped),
 * exactly, except where the unrounded value lies within a few float ulps of
 * a rounding boundary (x.5), where either neighbour is right. */
static void
check_against_oracle_as (const cudafx_image *src, const cudafx_image *dst,
                         const cudafx_convolve_params *p, const char *what, int may_be_fixed)
{
  int n;
  double *k = expected_kernel (p, &n), abs_sum = 0, sum = 0;
  for (int i = 0; i < n * n; i++)
    {
      abs_sum += fabs (k[i]);
      sum += k[i];
    }
  double d = p->divisor != 0 ? p->divisor : fabs (sum) <= 1e-9 * abs_sum ? 1 : sum;
  /* f32: float sums against double ones, relative to the largest possible sum */
  double tol = 1e-5 * 255 * abs_sum / fabs (d) + 1e-4;
  /* u8: a few float ulps of the largest possible sum (measured: below 1e-5) */
  double round_band = 4 * 0x1p-24 * 255 * abs_sum / fabs (d) + 1e-6;
  const int fixed = may_be_fixed && may_run_in_fixed_point (src, k, n, d);
  for (int y = 0; y < src->height && harness_failures () < 5; y++)
    {
      for (int x = 0; x < src->width; x++)
        for (int c = 0; c < src->channels; c++)
          {
            double want = oracle (src, k, n, p, x, y, c), got = harness_get (dst, x, y, c);
            if (dst->type == CUDAFX_U8 && fixed)
              {
                want = want < 0 ? 0 : want > 255 ? 255 : want;
                CHECK (fabs (got - want) < 1, "%s: (%d,%d,%d) got %g want %.4f", what, x, y, c,
                       got, want);
              }
            else if (dst->type == CUDAFX_U8)
              {
                want = want < 0 ? 0 : want > 255 ? 255 : want;
                double rounded = floor (want + 0.5);
                int near_half = fabs (want - floor (want) - 0.5) <= round_band;
                CHECK (got == rounded || (near_half && fabs (got - want) < 1),
                       "%s: (%d,%d,%d) got %g want %.4f (rounded %g)", what, x, y, c, got, want,
                       rounded);
              }
            else if (!isfinite (want)) /* kept as it is */
              CHECK (isnan (want) ? isnan (got) : got == want, "%s: (%d,%d,%d) got %g want %g",
                     what, x, y, c, got, want);
            else
              CHECK (fabs (got - want) <= tol, "%s: (%d,%d,%d) got %.6f want %.6f",
                     what, x, y, c, got, want);
          }
      size_t row = (size_t) dst->width * dst->channels * cudafx_type_size (dst->type);
      const unsigned char *bytes = (const unsigned char *) dst->data + (size_t) y * dst->stride;
      for (size_t b = row; b < dst->stride; b++)
        CHECK (bytes[b] == 0xA5, "%s: row %d padding byte %zu overwritten", what, y, b);
    }
  free (k);
}

static void
check_against_oracle (const cudafx_image *src, const cudafx_image *dst,
                      const cudafx_convolve_params *p, const char *what)
{
  check_against_oracle_as (src, dst, p, what, 1);
}

/* ---- running the engine over many layouts ------------------------------- */

static const int sizes[][2] = { { 1, 1 }, { 1, 9 }, { 9, 1 }, { 13, 7 }, { 31, 17 }, { 6, 5 }, { 2, 3 } };
static const int layouts[][2] = { { 1, 0 }, { 2, 0 }, { 2, 1 }, { 3, 0 }, { 4, 0 }, { 4, 1 } };
static const int thread_counts[] = { 1, 2, 3, 7 };
#define N_OF(a) ((int) (sizeof (a) / sizeof ((a)[0])))

/* Runs p on the case-th combination of size, layout, type, padding and
 * threads, and checks it against the oracle. */
static void
run_case (const cudafx_convolve_params *p, int variant, const char *what)
{
  harness_rng rng = { 1234567ull + variant };
  const int *sz = sizes[variant % N_OF (sizes)];
  const int *lay = layouts[(variant / 3) % N_OF (layouts)];
  cudafx_type type = (variant / 2) % 2 ? CUDAFX_F32 : CUDAFX_U8;
  size_t pad = variant % 5 == 0 ? 0 : 4 * (variant % 3) + 3 * (type == CUDAFX_U8);
  cudafx_image src = harness_image_new (sz[0], sz[1], lay[0], lay[1], type, pad);
  cudafx_image dst = harness_image_new (sz[0], sz[1], lay[0], lay[1], type, pad + 5 * 4);
  harness_image_random (&src, &rng);
  harness_image_poison (&dst);
  cudafx_options o = harness_options ();
  o.threads = thread_counts[variant % N_OF (thread_counts)];
  char label[200];
  snprintf (label, sizeof label, "%s, %dx%d c%d%s %s pad %zu threads %d border %d", what,
            sz[0], sz[1], lay[0], lay[1] ? "+alpha" : "", type == CUDAFX_U8 ? "u8" : "f32",
            pad, o.threads, p->border);
  cudafx_status s = cudafx_convolve (&src, &dst, p, &o);
  CHECK (s == CUDAFX_OK, "%s: status %d (%s)", label, s, cudafx_error_message ());
  if (s == CUDAFX_OK)
    check_against_oracle (&src, &dst, p, label);
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (convolve_presets_match_oracle)
{
  static const double sigmas[] = { 0.1, 0.8, 1.7, 5 };
  int variant = 0;
  for (int preset = 0; preset <= CUDAFX_PRESET_SOBEL_VERTICAL; preset++)
    for (int border = 0; border < 4; border++)
      for (int rep = 0; rep < 3; rep++)
        {
          cudafx_convolve_params p;
          cudafx_convolve_params_init (&p);
          p.preset = preset;
          p.border = border;
          p.sigma = sigmas[(border + rep) % N_OF (sigmas)];
          p.offset = rep == 2 ? 100 : 0;
          char what[64];
          snprintf (what, sizeof what, "preset %d sigma %g", preset, p.sigma);
          run_case (&p, variant++, what);
        }
}

/* A fixed-point u8 result (3 channels, no alpha): every value within 1 of
 * the oracle, and over the values the clamp leaves alone, rarely off the
 * correctly rounded result (at most 1 in 50) and without bias. */
static void
check_rounds_like_float (const cudafx_image *src, const cudafx_image *dst,
                         const cudafx_convolve_params *p, int ci)
{
  int n, off_by_one = 0, count = 0;
  double *k = expected_kernel (p, &n), bias = 0;
  for (int y = 0; y < src->height; y++)
    for (int x = 0; x < src->width; x++)
      for (int c = 0; c < 3; c++)
        {
          double want = oracle (src, k, n, p, x, y, c), got = harness_get (dst, x, y, c);
          if (want <= 0 || want >= 255)
            {
              CHECK (got == (want <= 0 ? 0 : 255), "case %d: (%d,%d,%d) got %g want %.4f", ci,
                     x, y, c, got, want);
              continue;
            }
          CHECK (fabs (got - want) < 1, "case %d: (%d,%d,%d) got %g want %.4f", ci, x, y, c,
                 got, want);
          off_by_one += got != floor (want + 0.5);
          bias += got - want;
          count++;
        }
  CHECK (count > 1000, "case %d: only %d values inside 0..255", ci, count);
  CHECK (off_by_one <= count / 50, "case %d: %d of %d values not correctly rounded", ci,
         off_by_one, count);
  CHECK (fabs (bias / count) < 0.02, "case %d: mean error %g", ci, bias / count);
  free (k);
}

/* Runs p on a random w×h RGB u8 image and checks it as above. */
static void
run_rounding_case (const cudafx_convolve_params *p, int w, int h, harness_rng *rng, int ci)
{
  cudafx_image src = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  harness_image_random (&src, rng);
  cudafx_options o = harness_options ();
  CHECK (cudafx_convolve (&src, &dst, p, &o) == CUDAFX_OK, "%s", cudafx_error_message ());
  check_rounds_like_float (&src, &dst, p, ci);
  harness_image_free (&src);
  harness_image_free (&dst);
}

/* u8 non-negative separable kernels run in 16-bit fixed point: besides the
 * ±1 of every u8 case, its rounding must be unbiased and rarely off the
 * correctly rounded result, up to its largest size (127 taps, sigma 21). */
TEST (convolve_fixed_point_rounds_like_float)
{
  static const double binomial[25] = { 1, 4, 6, 4, 1, 4, 16, 24, 16, 4, 6, 24, 36, 24, 6,
                                       4, 16, 24, 16, 4, 1, 4, 6, 4, 1 };
  static const struct { cudafx_preset preset; double sigma, divisor; int w, h; } cases[] = {
    { CUDAFX_PRESET_GAUSSIAN, 0.8, 0, 96, 64 },  { CUDAFX_PRESET_GAUSSIAN, 2, 0, 96, 64 },
    { CUDAFX_PRESET_GAUSSIAN, 5, 0, 96, 64 },    { CUDAFX_PRESET_GAUSSIAN, 21, 0, 40, 30 },
    { CUDAFX_PRESET_BLUR_5X5, 0, 0, 96, 64 },    { CUDAFX_PRESET_MEAN_3X3, 0, 0, 96, 64 },
    { CUDAFX_PRESET_CUSTOM, 0, 512, 96, 64 }, /* half the kernel's sum */
  };
  harness_rng rng = { 4242 };
  for (int ci = 0; ci < N_OF (cases); ci++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = cases[ci].preset;
      p.sigma = cases[ci].sigma > 0 ? cases[ci].sigma : p.sigma;
      p.divisor = cases[ci].divisor;
      p.kernel = binomial;
      p.kernel_size = 5;
      p.offset = ci % 2 ? 0 : 0.3;
      run_rounding_case (&p, cases[ci].w, cases[ci].h, &rng, ci);
    }
}

/* u8 direct kernels without alpha run as exact integer sums of taps
 * rounded to multiples of 2^-S: within 1 of the oracle (checked in every
 * case above), and like convolve_fixed_point_rounds_like_float, rarely off
 * the correctly rounded result and without bias; signed kernels, offsets,
 * zero sums, and sizes up to 15x15 with the benchmark's kind of kernel. */
TEST (convolve_exact_sums_round_like_float)
{
  static double k[15 * 15];
  harness_rng rng = { 2121 };
  /* centre: the random taps' mean times n (1.5: about zero sum) */
  static const struct { cudafx_preset preset; int n; double divisor, offset, centre; } cases[] = {
    { CUDAFX_PRESET_SHARPEN_5X5, 5, 0, 0, 0 },   { CUDAFX_PRESET_LAPLACIAN_5X5, 5, 15.7, 128, 0 },
    { CUDAFX_PRESET_HIGH_PASS_5X5, 5, 7.3, 128, 0 }, { CUDAFX_PRESET_CUSTOM, 3, 1, 0, 1.2 },
    { CUDAFX_PRESET_CUSTOM, 5, 1, 0, 1.2 },      { CUDAFX_PRESET_CUSTOM, 5, 0, -20, 1.2 },
    { CUDAFX_PRESET_CUSTOM, 7, 3, 10, 1.2 },     { CUDAFX_PRESET_CUSTOM, 15, 0, 0, 1.2 },
    { CUDAFX_PRESET_CUSTOM, 15, 1, 128, 1.5 },
  };
  for (int ci = 0; ci < N_OF (cases); ci++)
    {
      const int n = cases[ci].n;
      /* dense, mixed signs: a sum of uniforms, scaled by 1/n as the benchmark's normal values */
      for (int i = 0; i < n * n; i++)
        k[i] = (harness_uniform (&rng) + harness_uniform (&rng) + harness_uniform (&rng)
                - cases[ci].centre) / n;
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = cases[ci].preset;
      p.kernel = k;
      p.kernel_size = n;
      p.divisor = cases[ci].divisor;
      p.offset = cases[ci].offset;
      p.border = ci % 4;
      run_rounding_case (&p, 80, 48, &rng, ci);
    }
}

/* A direct kernel whose taps no S makes precise enough falls back to the
 * float sums, correctly rounded: a 31x31 kernel of 0.01s but for a pair
 * +-1000 side by side, which limits S to 7, where the 0.01 / 9.6 taps
 * round to 0 or 1/128 (off by several units on this image). The image's
 * rows are constant, so the pair cancels and the results stay inside
 * 0..255. */
TEST (convolve_imprecise_exact_taps_fall_back_to_float)
{
  static double k[31 * 31];
  harness_rng rng = { 3131 };
  for (int i = 0; i < 31 * 31; i++)
    k[i] = 0.01;
  k[0] = 1000;
  k[1] = -1000;
  cudafx_convolve_params p;
  cudafx_convolve_params_init (&p);
  p.preset = CUDAFX_PRESET_CUSTOM;
  p.kernel = k;
  p.kernel_size = 31;
  cudafx_image src = harness_image_new (40, 33, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (40, 33, 3, 0, CUDAFX_U8, 0);
  for (int y = 0; y < src.height; y++)
    for (int c = 0; c < 3; c++)
      {
        const int v = (int) (256 * harness_uniform (&rng));
        for (int x = 0; x < src.width; x++)
          harness_set (&src, x, y, c, v);
      }
  harness_image_poison (&dst);
  cudafx_options o = harness_options ();
  CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "%s", cudafx_error_message ());
  check_against_oracle_as (&src, &dst, &p, "31x31 imprecise", 0);
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (convolve_gaussian_larger_than_31_taps)
{
  for (int border = 0; border < 4; border++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.sigma = 12; /* 73 taps, beyond the 13×7 image */
      p.border = border;
      run_case (&p, 3 + 6 * border, "gaussian sigma 12");
    }
}

/* Rows wider than the engine's vertical strips (2048 floats), so strips
 * meet inside the image and at its edges; the taller cases also cross the
 * bands of rows the threads take (3 bands of 9 rows). */
TEST (convolve_wide_rows_match_oracle)
{
  static const struct { int custom, f32, channels, alpha, w, h, threads; } cases[] = {
    { 1, 0, 3, 0, 1301, 4, 2 },  { 1, 1, 4, 1, 1301, 4, 2 }, { 0, 0, 3, 0, 1301, 4, 2 },
    { 0, 1, 1, 0, 1301, 4, 2 },  { 1, 0, 1, 0, 2100, 25, 3 }, /* u8 float path: 2 strips */
    { 0, 0, 3, 0, 1400, 25, 3 }, /* u8 fixed point: 3 strips */
    { 1, 0, 4, 1, 1100, 25, 3 }, /* u8 with alpha: 3 strips */
  };
  static double k[49];
  harness_rng rng = { 77 };
  for (int v = 0; v < (int) (sizeof cases / sizeof *cases); v++)
    {
      for (int i = 0; i < 49; i++)
        k[i] = harness_uniform (&rng) - 0.3;
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = cases[v].custom ? CUDAFX_PRESET_CUSTOM : CUDAFX_PRESET_GAUSSIAN;
      p.kernel = k;
      p.kernel_size = 7;
      p.sigma = 2.5;
      p.border = v % 4;
      cudafx_type type = cases[v].f32 ? CUDAFX_F32 : CUDAFX_U8;
      const int w = cases[v].w, h = cases[v].h, channels = cases[v].channels;
      cudafx_image src = harness_image_new (w, h, channels, cases[v].alpha, type, 8);
      cudafx_image dst = harness_image_new (w, h, channels, cases[v].alpha, type, 8);
      harness_image_random (&src, &rng);
      harness_image_poison (&dst);
      cudafx_options o = harness_options ();
      o.threads = cases[v].threads;
      CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "wide: %s", cudafx_error_message ());
      char what[96];
      snprintf (what, sizeof what, "wide %s %dx%d c%d", cases[v].custom ? "custom 7x7" : "gaussian",
                w, h, channels);
      check_against_oracle (&src, &dst, &p, what);
      harness_image_free (&src);
      harness_image_free (&dst);
    }
}

/* Random n×n kernel: rank 1 (outer product) or dense, with a nonzero sum. */
static void
random_kernel (double *k, int n, int rank_1, harness_rng *rng)
{
  double u[CUDAFX_MAX_KERNEL_SIZE], v[CUDAFX_MAX_KERNEL_SIZE];
  for (int i = 0; i < n; i++)
    {
      u[i] = harness_uniform (rng) * 2 - 0.5;
      v[i] = harness_uniform (rng) * 2 - 0.5;
    }
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      k[j * n + i] = rank_1 ? u[j] * v[i] : harness_uniform (rng) * 2 - 0.5;
}

TEST (convolve_custom_kernels_match_oracle)
{
  static const int kernel_sizes[] = { 1, 3, 5, 7, 31 };
  static const double divisors[] = { 0, 1, -2.5, 7 };
  static const double offsets[] = { 0, 40, -100 };
  static double k[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  harness_rng rng = { 99 };
  int variant = 0;
  for (int s = 0; s < N_OF (kernel_sizes); s++)
    for (int rank_1 = 0; rank_1 < 2; rank_1++)
      for (int border = 0; border < 4; border++)
        for (int rep = 0; rep < 2; rep++)
          {
            int n = kernel_sizes[s];
            random_kernel (k, n, rank_1, &rng);
            cudafx_convolve_params p;
            cudafx_convolve_params_init (&p);
            p.preset = CUDAFX_PRESET_CUSTOM;
            p.kernel = k;
            p.kernel_size = n;
            p.border = border;
            p.divisor = divisors[(variant / 2) % N_OF (divisors)];
            p.offset = offsets[variant % N_OF (offsets)];
            char what[96];
            snprintf (what, sizeof what, "custom %dx%d %s divisor %g offset %g", n, n,
                      rank_1 ? "rank-1" : "dense", p.divisor, p.offset);
            run_case (&p, variant++, what);
          }
}

TEST (convolve_zero_sum_kernels_match_oracle)
{
  /* rank-1 and dense kernels summing to 0: divisor 0 means 1, alpha is kept */
  static const double ddx[9] = { 1, 0, -1, 2, 0, -2, 1, 0, -1 };
  static const double dense[9] = { 1, -2, 0.5, 3, -4, 1, 0.25, 0.75, -0.5 };
  for (int v = 0; v < 12; v++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = CUDAFX_PRESET_CUSTOM;
      p.kernel = v % 2 ? dense : ddx;
      p.kernel_size = 3;
      p.offset = 128;
      p.border = v % 4;
      run_case (&p, v * 5 + 2, v % 2 ? "dense zero-sum" : "rank-1 zero-sum");
    }
}

/* ---- non-finite f32 values ---------------------------------------------- */

/* The kernels of the non-finite tests: a custom 3x3 sharpen, the 5x5 blur
 * (separable), Sobel (zero sum), Gaussians (separable, 9 and 31 taps) and
 * a 1x1 kernel. */
static const double sharpen3[9] = { 0, -1, 0, -1, 5, -1, 0, -1, 0 };
static const double two[1] = { 2 };

static cudafx_convolve_params
non_finite_kernel (int i, const char **name)
{
  cudafx_convolve_params p;
  cudafx_convolve_params_init (&p);
  static const char *names[] = { "sharpen 3x3", "blur 5x5", "sobel", "gaussian 1.5", "gaussian 5", "1x1" };
  *name = names[i];
  switch (i)
    {
    case 0: p.preset = CUDAFX_PRESET_CUSTOM; p.kernel = sharpen3; p.kernel_size = 3; break;
    case 1: p.preset = CUDAFX_PRESET_BLUR_5X5; break;
    case 2: p.preset = CUDAFX_PRESET_SOBEL_HORIZONTAL; break;
    case 3: p.preset = CUDAFX_PRESET_GAUSSIAN; p.sigma = 1.5; break;
    case 4: p.preset = CUDAFX_PRESET_GAUSSIAN; p.sigma = 5; break;
    default: p.preset = CUDAFX_PRESET_CUSTOM; p.kernel = two; p.kernel_size = 1; p.offset = 10; break;
    }
  return p;
}

TEST (convolve_keeps_non_finite_values_to_themselves)
{
  static const double bad[] = { NAN, INFINITY, -INFINITY };
  static const int dims[][2] = { { 13, 7 }, { 31, 17 }, { 1, 1 }, { 40, 3 } };
  harness_rng rng = { 67 };
  int variant = 0;
  for (int ki = 0; ki < 6; ki++)
    for (int border = 0; border < 4; border++)
      for (int l = 0; l < N_OF (layouts); l++, variant++)
        {
          const int *d = dims[variant % N_OF (dims)], w = d[0], h = d[1];
          const int ch = layouts[l][0], alpha = layouts[l][1];
          cudafx_image src = harness_image_new (w, h, ch, alpha, CUDAFX_F32, 4 * (variant % 3));
          cudafx_image dst = harness_image_new (w, h, ch, alpha, CUDAFX_F32, 8);
          harness_image_random (&src, &rng);
          /* about one element in 12, and the corners */
          for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
              for (int c = 0; c < ch; c++)
                if (harness_rand (&rng) % 12 == 0
                    || ((x == 0 || x == w - 1) && (y == 0 || y == h - 1) && c == (x + y) % ch))
                  harness_set (&src, x, y, c, bad[harness_rand (&rng) % 3]);
          harness_image_poison (&dst);
          const char *name;
          cudafx_convolve_params p = non_finite_kernel (ki, &name);
          p.border = border;
          cudafx_options o = harness_options ();
          o.threads = 1 + variant % 3;
          char what[160];
          snprintf (what, sizeof what, "%s border %d, %dx%d c%d%s", name, border, w, h, ch,
                    alpha ? "+alpha" : "");
          cudafx_status s = cudafx_convolve (&src, &dst, &p, &o);
          CHECK (s == CUDAFX_OK, "%s: status %d (%s)", what, s, cudafx_error_message ());
          if (s == CUDAFX_OK)
            {
              CHECK (harness_count_non_finite (&dst) == harness_count_non_finite (&src), "%s: %d non-finite values out of %d",
                     what, harness_count_non_finite (&dst), harness_count_non_finite (&src));
              check_against_oracle (&src, &dst, &p, what);
            }
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

/* A flat image with a NaN (and an infinity at its edge): a blur stays flat
 * around them, Sobel gives 0, whatever the border. */
TEST (convolve_flat_with_non_finite_stays_flat)
{
  for (int ki = 1; ki <= 4; ki++)
    for (int border = 0; border < 4; border++)
      for (int ch = 1; ch <= 4; ch += 3)
        {
          const int w = 23, h = 19;
          cudafx_image src = harness_image_new (w, h, ch, 0, CUDAFX_F32, 0);
          cudafx_image dst = harness_image_new (w, h, ch, 0, CUDAFX_F32, 0);
          for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
              for (int c = 0; c < ch; c++)
                harness_set (&src, x, y, c, 128);
          harness_set (&src, 11, 9, 0, NAN);
          harness_set (&src, 0, 4, ch - 1, INFINITY);
          const char *name;
          cudafx_convolve_params p = non_finite_kernel (ki, &name);
          p.border = border;
          cudafx_options o = harness_options ();
          CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "%s", cudafx_error_message ());
          /* black borders darken the edges: only the interior is flat there */
          static double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
          int n = 1;
          CHECK (cudafx_convolve_kernel (&p, taps, &n) == CUDAFX_OK, "%s", cudafx_error_message ());
          const int m = border == CUDAFX_BORDER_BLACK ? n / 2 : 0;
          const double want = p.preset == CUDAFX_PRESET_SOBEL_HORIZONTAL ? 0 : 128;
          for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
              for (int c = 0; c < ch; c++)
                {
                  const double in = harness_get (&src, x, y, c), got = harness_get (&dst, x, y, c);
                  if (!isfinite (in))
                    CHECK (isnan (in) ? isnan (got) : got == in, "%s border %d c%d: (%d,%d,%d) got %g",
                           name, border, ch, x, y, c, got);
                  else if (x >= m && x < w - m && y >= m && y < h - m)
                    CHECK (fabs (got - want) < 1e-3, "%s border %d c%d: (%d,%d,%d) got %g want %g", name,
                           border, ch, x, y, c, got, want);
                }
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

/* ---- properties --------------------------------------------------------- */

TEST (convolve_identity_is_identity)
{
  static const double one[1] = { 1 };
  static double delta5[25];
  delta5[12] = 1;
  const double *kernels[] = { NULL, one, delta5 };
  const int kernel_sizes[] = { 0, 1, 5 };
  harness_rng rng = { 7 };
  for (int kk = 0; kk < 3; kk++)
    for (int l = 0; l < N_OF (layouts); l++)
      for (int t = 0; t < 2; t++)
        {
          cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
          cudafx_image src = harness_image_new (13, 7, layouts[l][0], layouts[l][1], type, 4);
          cudafx_image dst = harness_image_new (13, 7, layouts[l][0], layouts[l][1], type, 0);
          harness_image_random (&src, &rng);
          cudafx_convolve_params p;
          cudafx_convolve_params_init (&p);
          p.preset = CUDAFX_PRESET_CUSTOM;
          p.kernel = kernels[kk];
          p.kernel_size = kernel_sizes[kk];
          p.border = (kk + l) % 4;
          cudafx_options o = harness_options ();
          CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "identity: %s",
                 cudafx_error_message ());
          const int ch = src.channels;
          for (int y = 0; y < 7; y++)
            for (int x = 0; x < 13; x++)
              for (int c = 0; c < ch; c++)
                {
                  double a = src.has_alpha ? harness_get (&src, x, y, ch - 1) : 255;
                  double want = a > 0 ? harness_get (&src, x, y, c) : 0;
                  if (src.has_alpha && c == ch - 1)
                    want = a;
                  /* alpha: (c·a)·1/a can be 1 ulp off in f32; otherwise exact */
                  double tol = type == CUDAFX_F32 && src.has_alpha ? 1e-4 : 0;
                  CHECK (fabs (harness_get (&dst, x, y, c) - want) <= tol,
                         "identity kernel %d layout %d type %d: (%d,%d,%d) %g vs %g", kk, l, t,
                         x, y, c, harness_get (&dst, x, y, c), want);
                }
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

TEST (convolve_constant_stays_constant)
{
  static const cudafx_preset presets[] = { CUDAFX_PRESET_SHARPEN_5X5, CUDAFX_PRESET_MEAN_3X3,
                                           CUDAFX_PRESET_BLUR_3X3, CUDAFX_PRESET_BLUR_5X5,
                                           CUDAFX_PRESET_GAUSSIAN, CUDAFX_PRESET_CUSTOM };
  static double k[49];
  harness_rng rng = { 11 };
  random_kernel (k, 7, 0, &rng); /* dense, mixed signs, sum > 0 */
  for (int pi = 0; pi < N_OF (presets); pi++)
    for (int border = 0; border < 3; border++) /* black is not constant */
      for (int l = 0; l < N_OF (layouts); l++)
        for (int t = 0; t < 2; t++)
          {
            cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
            cudafx_image src = harness_image_new (11, 9, layouts[l][0], layouts[l][1], type, 0);
            cudafx_image dst = harness_image_new (11, 9, layouts[l][0], layouts[l][1], type, 0);
            double colour[4] = { 17, 200, 133, 90 };
            for (int y = 0; y < 9; y++)
              for (int x = 0; x < 11; x++)
                for (int c = 0; c < src.channels; c++)
                  harness_set (&src, x, y, c, colour[c]);
            cudafx_convolve_params p;
            cudafx_convolve_params_init (&p);
            p.preset = presets[pi];
            p.kernel = presets[pi] == CUDAFX_PRESET_CUSTOM ? k : NULL;
            p.kernel_size = 7;
            p.sigma = 1.3;
            p.border = border;
            cudafx_options o = harness_options ();
            o.threads = 1 + l % 3;
            CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "constant: %s",
                   cudafx_error_message ());
            double diff = harness_max_diff (&src, &dst);
            CHECK (diff <= (t ? 1e-3 : 0), "constant: preset %d border %d layout %d type %d: diff %g",
                   p.preset, border, l, t, diff);
            harness_image_free (&src);
            harness_image_free (&dst);
          }
}

/* Transparent pixels do not bleed: their colour never matters, and an
 * opaque constant colour stays constant next to them, black border included. */
TEST (convolve_alpha_does_not_bleed)
{
  harness_rng rng = { 5 };
  for (int t = 0; t < 2; t++)
    for (int border = 0; border < 4; border++)
      {
        cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
        cudafx_image a = harness_image_new (17, 9, 4, 1, type, 0);
        cudafx_image b = harness_image_new (17, 9, 4, 1, type, 0);
        cudafx_image out_a = harness_image_new (17, 9, 4, 1, type, 0);
        cudafx_image out_b = harness_image_new (17, 9, 4, 1, type, 0);
        for (int y = 0; y < 9; y++)
          for (int x = 0; x < 17; x++)
            {
              int opaque = x < 8;
              double alpha = opaque ? 255 : 0;
              double ca[3] = { 40, 120, 250 };
              for (int c = 0; c < 3; c++)
                {
                  harness_set (&a, x, y, c, opaque ? ca[c] : harness_rand (&rng) % 256);
                  harness_set (&b, x, y, c, opaque ? ca[c] : harness_rand (&rng) % 256);
                }
              /* a partly transparent column as well */
              harness_set (&a, x, y, 3, x == 3 ? 77 : alpha);
              harness_set (&b, x, y, 3, x == 3 ? 77 : alpha);
            }
        cudafx_convolve_params p;
        cudafx_convolve_params_init (&p);
        p.sigma = 1.5;
        p.border = border;
        cudafx_options o = harness_options ();
        CHECK (cudafx_convolve (&a, &out_a, &p, &o) == CUDAFX_OK, "bleed a");
        CHECK (cudafx_convolve (&b, &out_b, &p, &o) == CUDAFX_OK, "bleed b");
        CHECK (harness_max_diff (&out_a, &out_b) == 0,
               "colour of transparent pixels leaked (type %d border %d)", t, border);
        for (int y = 0; y < 9; y++)
          for (int x = 0; x < 17; x++)
            if (harness_get (&out_a, x, y, 3) > 0)
              for (int c = 0; c < 3; c++)
                CHECK (fabs (harness_get (&out_a, x, y, c) - harness_get (&a, 0, 0, c)) <= (t ? 1e-3 : 0),
                       "opaque colour changed at (%d,%d,%d): %g (type %d border %d)", x, y, c,
                       harness_get (&out_a, x, y, c), t, border);
        /* the blur softens the alpha edge */
        CHECK (harness_get (&out_a, 8, 4, 3) > 0 && harness_get (&out_a, 7, 4, 3) < 255,
               "alpha edge not blurred");
        harness_image_free (&a);
        harness_image_free (&b);
        harness_image_free (&out_a);
        harness_image_free (&out_b);
      }
}

TEST (convolve_zero_sum_keeps_alpha_and_flat_is_offset)
{
  harness_rng rng = { 3 };
  cudafx_image src = harness_image_new (9, 8, 2, 1, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (9, 8, 2, 1, CUDAFX_U8, 0);
  for (int y = 0; y < 8; y++)
    for (int x = 0; x < 9; x++)
      {
        harness_set (&src, x, y, 0, 90);
        harness_set (&src, x, y, 1, 1 + harness_rand (&rng) % 255);
      }
  const cudafx_preset presets[] = { CUDAFX_PRESET_SOBEL_HORIZONTAL, CUDAFX_PRESET_SOBEL_VERTICAL,
                                    CUDAFX_PRESET_LAPLACIAN_5X5, CUDAFX_PRESET_HIGH_PASS_5X5 };
  for (int i = 0; i < 4; i++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = presets[i];
      p.offset = 128;
      cudafx_options o = harness_options ();
      CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "zero-sum");
      for (int y = 0; y < 8; y++)
        for (int x = 0; x < 9; x++)
          CHECK (harness_get (&dst, x, y, 1) == harness_get (&src, x, y, 1),
                 "preset %d: alpha changed at (%d,%d)", p.preset, x, y);
      /* opaque flat colour: no gradient, only the offset */
      cudafx_image flat = harness_image_new (9, 8, 3, 0, CUDAFX_F32, 0);
      cudafx_image out = harness_image_new (9, 8, 3, 0, CUDAFX_F32, 0);
      for (int y = 0; y < 8; y++)
        for (int x = 0; x < 9; x++)
          for (int c = 0; c < 3; c++)
            harness_set (&flat, x, y, c, 60 * c);
      CHECK (cudafx_convolve (&flat, &out, &p, &o) == CUDAFX_OK, "zero-sum flat");
      for (int y = 0; y < 8; y++)
        for (int x = 0; x < 9; x++)
          for (int c = 0; c < 3; c++)
            CHECK (fabs (harness_get (&out, x, y, c) - 128) < 1e-3, "preset %d flat: %g", p.preset,
                   harness_get (&out, x, y, c));
      harness_image_free (&flat);
      harness_image_free (&out);
    }
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (convolve_thread_count_does_not_change_result)
{
  harness_rng rng = { 21 };
  static double k[25];
  random_kernel (k, 5, 0, &rng);
  for (int preset = 0; preset < 3; preset++)
    {
      cudafx_image src = harness_image_new (61, 47, 4, 1, CUDAFX_F32, 8);
      harness_image_random (&src, &rng);
      cudafx_image ref = harness_image_new (61, 47, 4, 1, CUDAFX_F32, 8);
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = preset == 0 ? CUDAFX_PRESET_CUSTOM : preset == 1 ? CUDAFX_PRESET_GAUSSIAN
                                                                  : CUDAFX_PRESET_SHARPEN_5X5;
      p.kernel = k;
      p.kernel_size = 5;
      p.border = CUDAFX_BORDER_MIRROR;
      cudafx_options o = harness_options ();
      o.threads = 1;
      CHECK (cudafx_convolve (&src, &ref, &p, &o) == CUDAFX_OK, "threads 1");
      for (int ti = 1; ti < N_OF (thread_counts); ti++)
        {
          cudafx_image dst = harness_image_new (61, 47, 4, 1, CUDAFX_F32, 8);
          o.threads = thread_counts[ti];
          CHECK (cudafx_convolve (&src, &dst, &p, &o) == CUDAFX_OK, "threads %d", o.threads);
          for (int y = 0; y < 47; y++)
            CHECK (!memcmp ((char *) dst.data + y * dst.stride, (char *) ref.data + y * ref.stride,
                            61 * 4 * sizeof (float)),
                   "preset %d: row %d differs with %d threads", p.preset, y, o.threads);
          harness_image_free (&dst);
        }
      harness_image_free (&src);
      harness_image_free (&ref);
    }
}

/* ---- the kernel query --------------------------------------------------- */

TEST (convolve_kernel_reports_presets)
{
  static double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  for (int preset = 0; preset <= CUDAFX_PRESET_SOBEL_VERTICAL; preset++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      p.preset = preset;
      p.sigma = 1;
      int size = 0, n;
      double *want = expected_kernel (&p, &n);
      CHECK (cudafx_convolve_kernel (&p, taps, &size) == CUDAFX_OK, "preset %d: %s", preset,
             cudafx_error_message ());
      CHECK (size == n, "preset %d: size %d, want %d", preset, size, n);
      for (int i = 0; i < n * n && size == n; i++)
        CHECK (fabs (taps[i] - want[i]) <= 1e-12, "preset %d tap %d: %g vs %g", preset, i,
               taps[i], want[i]);
      free (want);
    }
  cudafx_convolve_params p;
  cudafx_convolve_params_init (&p);
  int size;
  p.sigma = 5;
  CHECK (cudafx_convolve_kernel (&p, taps, &size) == CUDAFX_OK && size == 31, "sigma 5 is 31x31");
  p.sigma = 6;
  CHECK (cudafx_convolve_kernel (&p, taps, &size) == CUDAFX_ERR_INVALID_ARG
         && strstr (cudafx_error_message (), "sigma"), "sigma 6 does not fit the grid");
}

/* ---- invalid arguments -------------------------------------------------- */

/* check_kernel_query: the kernel query rejects it too (it ignores what only
 * the convolution uses, like a divisor too small for float taps). */
static void
expect_invalid_in (const cudafx_convolve_params *p, const char *arg, int check_kernel_query)
{
  cudafx_image src = harness_image_new (5, 4, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (5, 4, 3, 0, CUDAFX_U8, 0);
  harness_rng rng = { 1 };
  harness_image_random (&src, &rng);
  harness_image_poison (&dst);
  cudafx_options o = harness_options ();
  cudafx_status s = cudafx_convolve (&src, &dst, p, &o);
  CHECK (s == CUDAFX_ERR_INVALID_ARG, "%s: status %d", arg, s);
  CHECK (strstr (cudafx_error_message (), arg) != NULL, "message '%s' does not name %s",
         cudafx_error_message (), arg);
  const unsigned char *d = dst.data;
  for (size_t i = 0; i < dst.stride * 4; i++)
    if (d[i] != 0xA5)
      {
        CHECK (0, "%s: destination written", arg);
        break;
      }
  if (p && check_kernel_query)
    {
      double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
      int size;
      CHECK (cudafx_convolve_kernel (p, taps, &size) == CUDAFX_ERR_INVALID_ARG,
             "kernel query accepts bad %s", arg);
    }
  harness_image_free (&src);
  harness_image_free (&dst);
}

static void
expect_invalid (const cudafx_convolve_params *p, const char *arg)
{
  expect_invalid_in (p, arg, 1);
}

TEST (convolve_invalid_arguments)
{
  static double k[33 * 33];
  cudafx_convolve_params p;
  expect_invalid (NULL, "params");

  cudafx_convolve_params_init (&p);
  p.preset = CUDAFX_PRESET_CUSTOM;
  p.kernel = k;
  k[0] = 1;
  p.kernel_size = 4;
  expect_invalid (&p, "kernel");
  p.kernel_size = 33;
  expect_invalid (&p, "kernel");
  p.kernel_size = 0;
  expect_invalid (&p, "kernel");
  p.kernel_size = 3;
  k[4] = NAN;
  expect_invalid (&p, "kernel");
  k[4] = INFINITY;
  expect_invalid (&p, "kernel");
  k[4] = 1;
  p.divisor = NAN;
  expect_invalid (&p, "divisor");
  p.divisor = 1e-300; /* taps would overflow a float */
  expect_invalid_in (&p, "divisor", 0);

  cudafx_convolve_params_init (&p);
  p.sigma = 0;
  expect_invalid (&p, "sigma");
  p.sigma = 51;
  expect_invalid (&p, "sigma");
  cudafx_convolve_params_init (&p);
  p.offset = 300;
  expect_invalid (&p, "offset");
  cudafx_convolve_params_init (&p);
  p.preset = 10;
  expect_invalid (&p, "preset");
  p.preset = -1;
  expect_invalid (&p, "preset");
  cudafx_convolve_params_init (&p);
  p.border = 4;
  expect_invalid (&p, "border");
}
