/* SPDX-License-Identifier: GPL-3.0-or-later */
/* NL-Bayes: the engine against a plain oracle written from the paper
 * (Lebrun, Buades, Morel, IPOL 2013, with the grid of reference patches
 * core/nlbayes.c documents), in double precision, with a full sort of the
 * candidates and Gauss-Jordan inverses instead of the engine's selection
 * and Cholesky solves; plus properties: a constant image stays constant, a
 * clean one almost unchanged, noise goes down, a part of the image equals
 * the same part of a whole run, the thread count changes nothing. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the oracle ------------------------------------------------------------- */

typedef struct {
  int    patch, group, search, stride;
  double beta, tau;
} ref_step;

/* The paper's table (IPOL 2013), with the grid strides and tau of the
 * engine's measured choices. */
static void
ref_table (double sigma, int colours, ref_step st[2])
{
  if (colours == 1)
    {
      st[0].patch = sigma < 30 ? 5 : 7;
      st[1].patch = 5;
      st[0].group = sigma < 10 ? 35 : sigma < 30 ? 45 : sigma < 80 ? 90 : 100;
      st[1].group = sigma < 20 ? 15 : sigma < 40 ? 25 : sigma < 80 ? 30 : 45;
      st[0].beta = sigma < 15 ? 1.1 : sigma < 70 ? 1.0 : 0.9;
      st[1].beta = sigma < 15 ? 1.1 : sigma < 35 ? 1.0 : 0.9;
    }
  else
    {
      st[0].patch = sigma < 20 ? 3 : sigma < 50 ? 5 : 7;
      st[1].patch = sigma < 50 ? 3 : sigma < 70 ? 5 : 7;
      st[0].group = 3 * st[0].patch * st[0].patch;
      st[1].group = 3 * st[1].patch * st[1].patch;
      st[0].beta = 1.0;
      st[1].beta = sigma < 50 ? 1.2 : 1.0;
    }
  for (int i = 0; i < 2; i++)
    {
      st[i].search = st[i].group / 2;
      if (st[i].search % 2 == 0)
        st[i].search++;
      st[i].stride = i == 0 && st[i].patch > 1 ? st[i].patch - 1 : st[i].patch;
    }
  st[0].tau = 0;
  st[1].tau = 8.0 * st[1].patch * st[1].patch * colours;
}

/* Inverse of the n x n matrix a by Gauss-Jordan with partial pivoting into
 * inv; 0 when singular. */
static int
ref_inverse (const double *a, int n, double *inv)
{
  double *m = malloc (sizeof (double) * n * 2 * n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < 2 * n; j++)
      m[i * 2 * n + j] = j < n ? a[i * n + j] : (j - n == i);
  int ok = 1;
  for (int c = 0; c < n && ok; c++)
    {
      int p = c;
      for (int r = c + 1; r < n; r++)
        if (fabs (m[r * 2 * n + c]) > fabs (m[p * 2 * n + c]))
          p = r;
      if (fabs (m[p * 2 * n + c]) < 1e-9)
        {
          ok = 0;
          break;
        }
      for (int j = 0; j < 2 * n; j++)
        {
          double t = m[c * 2 * n + j];
          m[c * 2 * n + j] = m[p * 2 * n + j];
          m[p * 2 * n + j] = t;
        }
      double d = m[c * 2 * n + c];
      for (int j = 0; j < 2 * n; j++)
        m[c * 2 * n + j] /= d;
      for (int r = 0; r < n; r++)
        if (r != c)
          {
            double f = m[r * 2 * n + c];
            for (int j = 0; j < 2 * n; j++)
              m[r * 2 * n + j] -= f * m[c * 2 * n + j];
          }
    }
  for (int i = 0; ok && i < n; i++)
    for (int j = 0; j < n; j++)
      inv[i * n + j] = m[i * 2 * n + n + j];
  free (m);
  return ok;
}

typedef struct { double d; int offset, index; } ref_cand;

/* Nearest first; ties to the patch nearer the reference, then the first in
 * the window (row by row). */
static int
cand_cmp (const void *a, const void *b)
{
  const ref_cand *x = a, *y = b;
  if (x->d != y->d)
    return x->d < y->d ? -1 : 1;
  if (x->offset != y->offset)
    return x->offset - y->offset;
  return x->index - y->index;
}

static int
index_cmp (const void *a, const void *b)
{
  return ((const ref_cand *) a)->index - ((const ref_cand *) b)->index;
}

/* Reference positions of a side of n (patch k, stride s, origin o). */
static int
ref_grid (int n, int k, int s, int o, int *out)
{
  int count = 0;
  for (int x = 0; x <= n - k; x++)
    if (x == 0 || x == n - k || ((x + o) % s + s) % s == 0)
      out[count++] = x;
  return count;
}

/* One step on planes (colours x w x h, double): out = the aggregate. */
static void
ref_step_run (const double *noisy, const double *basic, int w, int h, int colours, double sigma, int flat,
              const ref_step *st, int step, int ox, int oy, double *out)
{
  const int k = st->patch < (w < h ? w : h) ? st->patch : (w < h ? w : h);
  const int stride = st->stride < k ? st->stride : k;
  const int kk = k * k, dims = colours * kk, r = st->search / 2;
  const size_t plane = (size_t) w * h;
  double *num = calloc (plane * colours, sizeof (double)), *den = calloc (plane, sizeof (double));
  int *gx = malloc (sizeof (int) * (w + 1)), *gy = malloc (sizeof (int) * (h + 1));
  int nx = ref_grid (w, k, stride, ox, gx), ny = ref_grid (h, k, stride, oy, gy);
  ref_cand *cand = malloc (sizeof (ref_cand) * (2 * r + 1) * (2 * r + 1));
  const double *cmp = step ? basic : noisy;
  for (int iy = 0; iy < ny; iy++)
    for (int ix = 0; ix < nx; ix++)
      {
        const int ry = gy[iy], rx = gx[ix];
        int count = 0, below = 0;
        for (int y = ry - r; y <= ry + r; y++)
          for (int x = rx - r; x <= rx + r; x++)
            {
              if (y < 0 || x < 0 || y > h - k || x > w - k)
                continue;
              double d = 0;
              for (int c = 0; c < colours; c++)
                for (int i = 0; i < k; i++)
                  for (int j = 0; j < k; j++)
                    {
                      double e = cmp[c * plane + (size_t) (ry + i) * w + rx + j]
                                 - cmp[c * plane + (size_t) (y + i) * w + x + j];
                      d += e * e;
                    }
              below += step && d < st->tau;
              cand[count].d = d;
              cand[count].offset = (y - ry) * (y - ry) + (x - rx) * (x - rx);
              cand[count].index = y * w + x;
              count++;
            }
        qsort (cand, count, sizeof *cand, cand_cmp);
        int n = st->group > below ? st->group : below;
        n = n < count ? n : count;
        qsort (cand, n, sizeof *cand, index_cmp);
        /* The group, patch-major: q[g][d]. */
        double *q = malloc (sizeof (double) * n * dims), *b = malloc (sizeof (double) * n * dims);
        for (int g = 0; g < n; g++)
          for (int c = 0; c < colours; c++)
            for (int i = 0; i < k; i++)
              for (int j = 0; j < k; j++)
                {
                  size_t at = c * plane + cand[g].index + (size_t) i * w + j;
                  q[g * dims + c * kk + i * k + j] = noisy[at];
                  b[g * dims + c * kk + i * k + j] = step ? basic[at] : 0;
                }
        double *est = malloc (sizeof (double) * n * dims);
        memcpy (est, q, sizeof (double) * n * dims);
        /* Over blocks: step 1 each channel, step 2 all of them at once. */
        const int blocks = step ? 1 : colours, bd = step ? dims : kk;
        double *cov = malloc (sizeof (double) * bd * bd), *inv = malloc (sizeof (double) * bd * bd);
        double *mq = malloc (sizeof (double) * bd), *mb = malloc (sizeof (double) * bd);
        for (int blk = 0; blk < blocks && n > 1; blk++)
          {
            const int off = blk * bd;
            for (int d = 0; d < bd; d++)
              {
                mq[d] = mb[d] = 0;
                for (int g = 0; g < n; g++)
                  {
                    mq[d] += q[g * dims + off + d] / n;
                    mb[d] += b[g * dims + off + d] / n;
                  }
              }
            const double *stat = step ? b : q, *ms = step ? mb : mq;
            if (!step)
              {
                double var = 0;
                for (int d = 0; d < bd; d++)
                  for (int g = 0; g < n; g++)
                    var += pow (q[g * dims + off + d] - mq[d], 2) / ((n - 1.0) * bd);
                if (flat && var <= 1.05 * sigma * sigma)
                  {
                    for (int g = 0; g < n; g++)
                      for (int d = 0; d < bd; d++)
                        est[g * dims + off + d] = mq[d];
                    continue;
                  }
              }
            for (int i = 0; i < bd; i++)
              for (int j = 0; j < bd; j++)
                {
                  double s = 0;
                  for (int g = 0; g < n; g++)
                    s += (stat[g * dims + off + i] - ms[i]) * (stat[g * dims + off + j] - ms[j]);
                  cov[i * bd + j] = s / (n - 1);
                }
            const double bs2 = st->beta * sigma * sigma;
            if (step)
              {
                /* Q^ = m + C_B (C_B + beta sigma^2 I)^-1 (Q - m) */
                double *a = malloc (sizeof (double) * bd * bd);
                memcpy (a, cov, sizeof (double) * bd * bd);
                for (int i = 0; i < bd; i++)
                  a[i * bd + i] += bs2;
                if (ref_inverse (a, bd, inv))
                  {
                    for (int i = 0; i < bd; i++)
                      for (int j = 0; j < bd; j++)
                        {
                          double s = 0;
                          for (int m = 0; m < bd; m++)
                            s += cov[i * bd + m] * inv[m * bd + j];
                          a[i * bd + j] = s;
                        }
                    for (int g = 0; g < n; g++)
                      for (int i = 0; i < bd; i++)
                        {
                          double s = mq[i];
                          for (int j = 0; j < bd; j++)
                            s += a[i * bd + j] * (q[g * dims + j] - mq[j]);
                          est[g * dims + i] = s;
                        }
                  }
                free (a);
              }
            else if (ref_inverse (cov, bd, inv))
              {
                /* Q^ = m + (C - beta sigma^2 I) C^-1 (Q - m) */
                for (int g = 0; g < n; g++)
                  for (int i = 0; i < bd; i++)
                    {
                      double s = 0;
                      for (int j = 0; j < bd; j++)
                        s += inv[i * bd + j] * (q[g * dims + off + j] - mq[j]);
                      est[g * dims + off + i] = q[g * dims + off + i] - bs2 * s;
                    }
              }
            else
              for (int g = 0; g < n; g++)
                for (int d = 0; d < bd; d++)
                  est[g * dims + off + d] = mq[d];
          }
        for (int g = 0; g < n; g++)
          for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
              {
                size_t at = cand[g].index + (size_t) i * w + j;
                for (int c = 0; c < colours; c++)
                  num[c * plane + at] += est[g * dims + c * kk + i * k + j];
                den[at] += 1;
              }
        free (q);
        free (b);
        free (est);
        free (cov);
        free (inv);
        free (mq);
        free (mb);
      }
  for (int c = 0; c < colours; c++)
    for (size_t i = 0; i < plane; i++)
      out[c * plane + i] = num[c * plane + i] / den[i];
  free (num);
  free (den);
  free (gx);
  free (gy);
  free (cand);
}

static const double opp[3][3] = {
  { 1 / 1.7320508075688772, 1 / 1.7320508075688772, 1 / 1.7320508075688772 },
  { 1 / 1.4142135623730951, 0, -1 / 1.4142135623730951 },
  { 1 / 2.449489742783178, -2 / 2.449489742783178, 1 / 2.449489742783178 },
};

/* The oracle's result for src's colour channels into out (w x h x colours,
 * 0..255 scale, before rounding). */
static void
ref_nlbayes (const cudafx_image *src, double sigma, int flat, int ox, int oy, double *out)
{
  const int w = src->width, h = src->height, colours = src->channels - src->has_alpha;
  const size_t plane = (size_t) w * h;
  double *noisy = malloc (sizeof (double) * plane * colours), *basic = malloc (sizeof (double) * plane * colours);
  double *fin = malloc (sizeof (double) * plane * colours);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < colours; c++)
        {
          double v = 0;
          if (colours == 3)
            for (int m = 0; m < 3; m++)
              v += opp[c][m] * harness_get (src, x, y, m);
          else
            v = harness_get (src, x, y, c);
          noisy[c * plane + (size_t) y * w + x] = v;
        }
  ref_step st[2];
  ref_table (sigma, colours, st);
  ref_step_run (noisy, NULL, w, h, colours, sigma, flat, &st[0], 0, ox, oy, basic);
  ref_step_run (noisy, basic, w, h, colours, sigma, flat, &st[1], 1, ox, oy, fin);
  for (size_t i = 0; i < plane; i++)
    for (int c = 0; c < colours; c++)
      {
        double v = 0;
        if (colours == 3)
          for (int m = 0; m < 3; m++)
            v += opp[m][c] * fin[m * plane + i];
        else
          v = fin[c * plane + i];
        out[i * colours + c] = v;
      }
  free (noisy);
  free (basic);
  free (fin);
}

/* ---- helpers ------------------------------------------------------------------ */

static cudafx_nlbayes_params
manual (double sigma, int flat)
{
  cudafx_nlbayes_params p;
  cudafx_nlbayes_params_init (&p);
  p.automatic = 0;
  p.sigma = sigma;
  p.flat_area = flat;
  return p;
}

/* A smooth pattern with edges plus Gaussian noise of sigma, clipped;
 * alpha random. */
static void
fill_noisy (cudafx_image *img, double sigma, harness_rng *rng)
{
  const int colours = img->channels - img->has_alpha;
  harness_image_poison (img);
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        {
          double g = harness_gauss (rng);
          double clean = 128 + 60 * sin (x / 5.0 + 1.1 * c) * cos (y / 4.0) + ((x / 6 + y / 6) % 2 ? 30 : -30);
          harness_set (img, x, y, c,
                       c < colours ? fmin (255, fmax (0, clean + sigma * g)) : harness_rand (rng) % 256);
        }
}

/* How the engine's output compares with the oracle: the share of colour
 * values off by more than tol (the oracle rounded as the engine stores it),
 * and the largest difference; alpha must be the source's. */
typedef struct { double share, max; int alpha_ok; } cmp_result;

static cmp_result
compare_with_oracle (const cudafx_image *src, const cudafx_image *dst, const double *ref, double tol)
{
  const int colours = src->channels - src->has_alpha;
  cmp_result r = { 0, 0, 1 };
  long off = 0, total = 0;
  for (int y = 0; y < src->height; y++)
    for (int x = 0; x < src->width; x++)
      {
        for (int c = 0; c < colours; c++)
          {
            double e = ref[((size_t) y * src->width + x) * colours + c];
            if (src->type == CUDAFX_U8)
              e = floor (fmin (255, fmax (0, e)) + 0.5);
            double d = fabs (harness_get (dst, x, y, c) - e);
            r.max = d > r.max ? d : r.max;
            off += d > tol;
            total++;
          }
        if (src->has_alpha && harness_get (dst, x, y, colours) != harness_get (src, x, y, colours))
          r.alpha_ok = 0;
      }
  r.share = total ? (double) off / total : 0;
  return r;
}

/* ---- tests ---------------------------------------------------------------------- */

static const struct { int channels, alpha; } layouts[] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 }, { 2, 0 }, { 4, 0 } };

TEST (nlbayes_matches_oracle)
{
  static const struct { int w, h; } sizes[] = { { 1, 1 }, { 1, 9 }, { 9, 1 }, { 13, 7 }, { 23, 17 }, { 37, 29 } };
  static const double sigmas[] = { 8, 25, 55, 75 };
  harness_rng rng = { 4242 };
  int run = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
      for (int type = 0; type < 2; type++, run++)
        {
          const int w = sizes[si].w, h = sizes[si].h, ch = layouts[li].channels, alpha = layouts[li].alpha;
          const double sigma = sigmas[run % 4];
          const int flat = run % 3 != 0;
          cudafx_image src = harness_image_new (w, h, ch, alpha, type, (run % 3) * 4);
          cudafx_image dst = harness_image_new (w, h, ch, alpha, type, 8);
          fill_noisy (&src, sigma, &rng);
          harness_image_poison (&dst);
          cudafx_nlbayes_params p = manual (sigma, flat);
          cudafx_options o = harness_options ();
          cudafx_status s = cudafx_nlbayes (&src, &dst, &p, &o, NULL);
          CHECK (s == CUDAFX_OK, "status %d: %s", s, cudafx_error_message ());
          if (s == CUDAFX_OK)
            {
              double *ref = malloc (sizeof (double) * w * h * ch);
              ref_nlbayes (&src, sigma, flat, 0, 0, ref);
              /* Float sums against double ones: a near tie between two
               * candidates can pick another group now and then. */
              cmp_result r = compare_with_oracle (&src, &dst, ref, 1);
              CHECK (r.share <= 0.01 && r.max <= 12, "%dx%d ch %d alpha %d %s sigma %g flat %d: %.2f%% off, max %g",
                     w, h, ch, alpha, type ? "f32" : "u8", sigma, flat, 100 * r.share, r.max);
              CHECK (r.alpha_ok, "%dx%d ch %d: alpha changed", w, h, ch);
              free (ref);
            }
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

TEST (nlbayes_constant_image_stays_constant)
{
  for (int type = 0; type < 2; type++)
    for (int flat = 0; flat < 2; flat++)
      for (int automatic = 0; automatic < 2; automatic++)
        {
          cudafx_image src = harness_image_new (41, 33, 4, 1, type, 4);
          cudafx_image dst = harness_image_new (41, 33, 4, 1, type, 4);
          for (int y = 0; y < 33; y++)
            for (int x = 0; x < 41; x++)
              for (int c = 0; c < 4; c++)
                harness_set (&src, x, y, c, c == 3 ? 200 : c == 1 ? 90 : 77);
          cudafx_nlbayes_params p = manual (20, flat);
          p.automatic = automatic;
          cudafx_options o = harness_options ();
          CHECK (cudafx_nlbayes (&src, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
          CHECK (harness_max_diff (&src, &dst) <= (type ? 1e-3 : 0), "%s flat %d auto %d: changed by %g",
                 type ? "f32" : "u8", flat, automatic, harness_max_diff (&src, &dst));
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

/* PSNR of a against clean, two images of one size without alpha. */
static double
psnr_against (const cudafx_image *a, const cudafx_image *clean)
{
  double se = 0;
  long n = 0;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < a->channels; c++, n++)
        se += pow (harness_get (a, x, y, c) - harness_get (clean, x, y, c), 2);
  return 10 * log10 (255.0 * 255.0 / (se / n));
}

TEST (nlbayes_removes_noise_and_keeps_a_clean_image)
{
  const int w = 96, h = 80;
  harness_rng rng = { 99 };
  for (int colours = 1; colours <= 3; colours += 2)
    {
      cudafx_image clean = harness_image_new (w, h, colours, 0, CUDAFX_U8, 0);
      cudafx_image noisy = harness_image_new (w, h, colours, 0, CUDAFX_U8, 0);
      cudafx_image dst = harness_image_new (w, h, colours, 0, CUDAFX_U8, 0);
      fill_noisy (&clean, 0, &rng);
      fill_noisy (&noisy, 20, &rng);
      cudafx_options o = harness_options ();
      cudafx_nlbayes_params p = manual (20, 1);
      CHECK (cudafx_nlbayes (&noisy, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      double before = psnr_against (&noisy, &clean), after = psnr_against (&dst, &clean);
      CHECK (after > before + 3, "colours %d: PSNR %.2f -> %.2f dB", colours, before, after);
      /* A clean image with a small sigma stays within a fraction of a level. */
      p = manual (2, 1);
      CHECK (cudafx_nlbayes (&clean, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (psnr_against (&dst, &clean) > 40, "colours %d: a clean image moved (%.2f dB)", colours,
             psnr_against (&dst, &clean));
      harness_image_free (&clean);
      harness_image_free (&noisy);
      harness_image_free (&dst);
    }
}

/* The part [px0, px1) x [py0, py1) of src, read with halo pixels around it
 * (clipped to the image) and filtered with p at its origin, against the
 * same part of whole, src's run: equal when exact (the CPU, whose sums run
 * in a fixed order), else at most 0.1% of the values off by more than 1. */
static void
check_part (const cudafx_image *src, const cudafx_image *whole, cudafx_nlbayes_params p, const cudafx_options *o,
            int px0, int py0, int px1, int py1, int halo, int exact, const char *what)
{
  const int cx0 = px0 - halo > 0 ? px0 - halo : 0, cy0 = py0 - halo > 0 ? py0 - halo : 0;
  const int cx1 = px1 + halo < src->width ? px1 + halo : src->width;
  const int cy1 = py1 + halo < src->height ? py1 + halo : src->height;
  cudafx_image part = *src;
  part.data = (uint8_t *) src->data + (size_t) cy0 * src->stride
              + (size_t) cx0 * src->channels * cudafx_type_size (src->type);
  part.width = cx1 - cx0;
  part.height = cy1 - cy0;
  cudafx_image pdst = harness_image_new (part.width, part.height, src->channels, src->has_alpha, src->type, 0);
  p.origin_x = cx0;
  p.origin_y = cy0;
  CHECK (cudafx_nlbayes (&part, &pdst, &p, o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  double worst = 0;
  long off = 0, total = 0;
  for (int y = py0; y < py1; y++)
    for (int x = px0; x < px1; x++)
      for (int c = 0; c < src->channels; c++, total++)
        {
          double d = fabs (harness_get (&pdst, x - cx0, y - cy0, c) - harness_get (whole, x, y, c));
          worst = d > worst ? d : worst;
          off += d > 1;
        }
  CHECK (exact ? worst == 0 : (double) off / total < 0.001, "%s: the part differs from the whole by %g", what,
         worst);
  harness_image_free (&pdst);
}

/* A part of the image with a halo, filtered with its origin, equals the
 * same part of the whole image's run (exactly on the CPU, whose sums run in
 * a fixed order); and the thread count changes nothing. */
TEST (nlbayes_parts_and_threads_equal_the_whole)
{
  const int w = 150, h = 130;
  harness_rng rng = { 31 };
  for (int type = 0; type < 2; type++)
    {
      cudafx_image src = harness_image_new (w, h, 3, 0, type, 0);
      cudafx_image whole = harness_image_new (w, h, 3, 0, type, 0);
      cudafx_image again = harness_image_new (w, h, 3, 0, type, 0);
      fill_noisy (&src, 15, &rng);
      cudafx_nlbayes_params p = manual (15, 1);
      cudafx_report rep;
      cudafx_options o = harness_options ();
      o.threads = 1;
      o.report = &rep;
      CHECK (cudafx_nlbayes (&src, &whole, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      const int exact = rep.backend_used == CUDAFX_BACKEND_CPU;
      o.threads = 2;
      CHECK (cudafx_nlbayes (&src, &again, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (exact ? harness_same_pixels (&whole, &again) : harness_diff_share (&whole, &again, 1) < 0.001,
             "%s: 2 threads differ from 1", type ? "f32" : "u8");
      /* The part: x 47..102, y 61..129 (the bottom edge), halo of the plan. */
      cudafx_nlbayes_info info;
      CHECK (cudafx_nlbayes (&src, &again, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      int halo = 0;
      for (int s = 0; s < 2; s++)
        halo += 2 * (info.search_size[s] / 2 + info.patch_size[s]);
      check_part (&src, &whole, p, &o, 47, 61, 103, h, halo, exact, type ? "f32" : "u8");
      harness_image_free (&src);
      harness_image_free (&whole);
      harness_image_free (&again);
    }
}

TEST (nlbayes_keeps_non_finite_values_to_themselves)
{
  harness_rng rng = { 7 };
  cudafx_image src = harness_image_new (40, 30, 3, 0, CUDAFX_F32, 0);
  cudafx_image dst = harness_image_new (40, 30, 3, 0, CUDAFX_F32, 0);
  fill_noisy (&src, 10, &rng);
  float *bad = (float *) ((uint8_t *) src.data + 12 * src.stride) + 3 * 20;
  bad[0] = NAN;
  bad[4] = INFINITY;
  cudafx_nlbayes_params p = manual (10, 1);
  cudafx_options o = harness_options ();
  CHECK (cudafx_nlbayes (&src, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  int nonfinite = 0;
  for (int y = 0; y < 30; y++)
    for (int x = 0; x < 40; x++)
      for (int c = 0; c < 3; c++)
        nonfinite += !isfinite (harness_get (&dst, x, y, c));
  const float *out = (const float *) ((uint8_t *) dst.data + 12 * dst.stride) + 3 * 20;
  CHECK (nonfinite == 2 && isnan (out[0]) && isinf (out[4]), "%d non-finite values out of 2", nonfinite);
  harness_image_free (&src);
  harness_image_free (&dst);
}

/* Flat 30 x 30 blocks of different colours plus Gaussian noise of sigma:
 * the weak-texture patches the noise estimate looks for. */
static void
fill_blocks (cudafx_image *img, double sigma, harness_rng *rng)
{
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        {
          double g = harness_gauss (rng);
          double clean = 60 + ((x / 30) * 37 + (y / 30) * 53 + c * 29) % 140;
          harness_set (img, x, y, c, fmin (255, fmax (0, clean + sigma * g)));
        }
}

TEST (nlbayes_auto_reports_the_estimate)
{
  harness_rng rng = { 3 };
  cudafx_image src = harness_image_new (120, 90, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (120, 90, 3, 0, CUDAFX_U8, 0);
  cudafx_image given = harness_image_new (120, 90, 3, 0, CUDAFX_U8, 0);
  fill_blocks (&src, 12, &rng);
  cudafx_nlbayes_params p;
  cudafx_nlbayes_params_init (&p);
  cudafx_nlbayes_info info;
  cudafx_options o = harness_options ();
  CHECK (p.automatic == 1 && p.flat_area == 1, "defaults: auto %d flat %d", p.automatic, p.flat_area);
  CHECK (cudafx_nlbayes (&src, &dst, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (info.sigma > 8 && info.sigma < 16, "estimated sigma %g for 12", info.sigma);
  CHECK (info.patch_size[0] == 3 && info.group_size[0] == 27 && info.search_size[0] == 13,
         "step 1: patch %d group %d search %d", info.patch_size[0], info.group_size[0], info.search_size[0]);
  /* The estimate handed back as a host does for a preview: the same run. */
  cudafx_nlbayes_params q = p;
  q.estimate = info.sigma;
  q.noise = info.noise;
  CHECK (cudafx_nlbayes (&src, &given, &q, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (harness_diff_share (&dst, &given, 1) == 0, "a given estimate changes the result");
  harness_image_free (&src);
  harness_image_free (&dst);
  harness_image_free (&given);
}

/* clean plus correlated noise: white noise of sigma, averaged over 3 x 3
 * pixels and scaled back to sigma (a pixel's noise shares 2/3 with each
 * horizontal or vertical neighbour's), each channel's its own, clipped. */
static void
add_correlated (const cudafx_image *clean, cudafx_image *noisy, double sigma, harness_rng *rng)
{
  const int w = clean->width, h = clean->height, ch = clean->channels;
  double *white = malloc (sizeof (double) * (w + 2) * (h + 2) * ch);
  for (long i = 0; i < (long) (w + 2) * (h + 2) * ch; i++)
    white[i] = harness_gauss (rng);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++)
        {
          double n = 0;
          for (int dy = 0; dy < 3; dy++)
            for (int dx = 0; dx < 3; dx++)
              n += white[((size_t) (y + dy) * (w + 2) + x + dx) * ch + c];
          harness_set (noisy, x, y, c, fmin (255, fmax (0, harness_get (clean, x, y, c) + sigma * n / 3)));
        }
  free (white);
}

/* Automatic mode on colour noise of sigma reported correlated, the estimate
 * given as a host hands it back (channel correlation 0). */
static cudafx_nlbayes_params
correlated_given (double sigma)
{
  cudafx_nlbayes_params p;
  cudafx_nlbayes_params_init (&p);
  p.estimate = sigma;
  p.noise.channels = 3;
  p.noise.correlated = 1;
  return p;
}

/* Correlated noise (automatic mode, the estimate given as a host hands it
 * back) is denoised in two scales: better than the fine pass alone (a
 * manual run at its sigma), while white noise keeps the one pass at its
 * sigma; a part with an odd origin and the halo the engine reports equals
 * the whole run's. */
TEST (nlbayes_correlated_noise_in_two_scales)
{
  const int w = 240, h = 220;
  const double sigma = 10;
  harness_rng rng = { 41 };
  cudafx_image clean = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  cudafx_image noisy = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  cudafx_image two = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  cudafx_image one = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  fill_blocks (&clean, 0, &rng);
  add_correlated (&clean, &noisy, sigma, &rng);
  cudafx_nlbayes_params p = correlated_given (sigma);
  cudafx_options o = harness_options ();
  o.threads = 1;
  CHECK (cudafx_nlbayes (&noisy, &two, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  cudafx_nlbayes_params fine = manual (2 * sigma, 1); /* the fine pass of noise of its own in each channel */
  CHECK (cudafx_nlbayes (&noisy, &one, &fine, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  const double before = psnr_against (&noisy, &clean), p_one = psnr_against (&one, &clean);
  const double p_two = psnr_against (&two, &clean);
  CHECK (p_two > p_one + 0.3 && p_two > before + 3, "PSNR noisy %.2f, one pass %.2f, two scales %.2f dB",
         before, p_one, p_two);

  cudafx_nlbayes_params white = p;
  white.noise.correlated = 0;
  cudafx_nlbayes_params given = manual (sigma, 1);
  CHECK (cudafx_nlbayes (&noisy, &two, &white, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (cudafx_nlbayes (&noisy, &one, &given, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (harness_diff_share (&two, &one, 0) == 0, "white noise is not denoised as the sigma given");

  cudafx_report rep;
  o.report = &rep;
  CHECK (cudafx_nlbayes (&noisy, &two, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  const int exact = rep.backend_used == CUDAFX_BACKEND_CPU;
  const int halo = cudafx_nlbayes_halo (&p, 3);
  const int px0 = 85, px1 = 110, py0 = 81, py1 = 100;
  CHECK (halo > 0 && px0 - halo > 0 && (px0 - halo) % 2 == 1 && (py0 - halo) % 2 == 1 && px1 + halo < w &&
           py1 + halo < h,
         "the part must lie inside with an odd origin: halo %d", halo);
  check_part (&noisy, &two, p, &o, px0, py0, px1, py1, halo, exact, "two scales");
  harness_image_free (&clean);
  harness_image_free (&noisy);
  harness_image_free (&two);
  harness_image_free (&one);
}

/* Correlated noise is denoised harder the more alike it is in the colour
 * channels: the same run up to a channel correlation of 0.3 and from 0.6
 * on, harder and harder in between. Noise of its own in each channel, on
 * fine texture, shows it: the harder, the lower the PSNR. */
TEST (nlbayes_correlated_strength_follows_channel_correlation)
{
  const int w = 150, h = 130;
  const double sigma = 8;
  harness_rng rng = { 43 };
  cudafx_image clean = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  cudafx_image noisy = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
  cudafx_image out[5];
  static const double corr[] = { 0.0, 0.3, 0.45, 0.6, 0.9 };
  double q[5];
  fill_noisy (&clean, 0, &rng);
  add_correlated (&clean, &noisy, sigma, &rng);
  cudafx_nlbayes_params p = correlated_given (sigma);
  cudafx_options o = harness_options ();
  for (int i = 0; i < 5; i++)
    {
      out[i] = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
      p.noise.channel_corr = corr[i];
      CHECK (cudafx_nlbayes (&noisy, &out[i], &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      q[i] = psnr_against (&out[i], &clean);
    }
  CHECK (harness_diff_share (&out[0], &out[1], 0) == 0 && harness_diff_share (&out[3], &out[4], 0) == 0,
         "the strength changes outside the ramp");
  CHECK (q[1] > q[2] + 0.05 && q[2] > q[3] + 0.2, "PSNR at channel correlations 0.3, 0.45, 0.6: %.2f %.2f %.2f dB",
         q[1], q[2], q[3]);
  for (int i = 0; i < 5; i++)
    harness_image_free (&out[i]);
  harness_image_free (&clean);
  harness_image_free (&noisy);
}

static int
cancel_at_half (double fraction, void *user_data)
{
  *(double *) user_data = fraction;
  return fraction >= 0.5;
}

TEST (nlbayes_progress_and_cancel)
{
  harness_rng rng = { 5 };
  cudafx_image src = harness_image_new (200, 150, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (200, 150, 3, 0, CUDAFX_U8, 0);
  fill_noisy (&src, 10, &rng);
  cudafx_nlbayes_params p = manual (10, 1);
  cudafx_options o = harness_options ();
  double last = 0;
  o.progress = cancel_at_half;
  o.user_data = &last;
  CHECK (cudafx_nlbayes (&src, &dst, &p, &o, NULL) == CUDAFX_ERR_CANCELLED, "not cancelled");
  CHECK (last >= 0.5 && last < 1.0, "cancelled at %g", last);
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (nlbayes_rejects_invalid_arguments)
{
  cudafx_image src = harness_image_new (8, 8, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (8, 8, 3, 0, CUDAFX_U8, 0);
  memset (src.data, 50, src.stride * 8);
  static const double bad[] = { 0, 0.05, 100.5, NAN, -3 };
  cudafx_options o = harness_options ();
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    {
      harness_image_poison (&dst);
      cudafx_nlbayes_params p = manual (bad[i], 1);
      CHECK (cudafx_nlbayes (&src, &dst, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG, "sigma %g accepted", bad[i]);
      CHECK (strstr (cudafx_error_message (), "sigma") != NULL, "message '%s' lacks sigma",
             cudafx_error_message ());
      CHECK (((unsigned char *) dst.data)[0] == 0xA5, "dst written on error");
    }
  cudafx_nlbayes_params p = manual (10, 1);
  p.automatic = 1;
  p.estimate = -1;
  CHECK (cudafx_nlbayes (&src, &dst, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "estimate"), "estimate -1 accepted");
  p = manual (10, 1);
  CHECK (cudafx_nlbayes (&src, &dst, NULL, &o, NULL) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "params"), "NULL params accepted");
  CHECK (cudafx_nlbayes (&src, &src, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "overlaps"), "in-place accepted");
  harness_image_free (&src);
  harness_image_free (&dst);
}
