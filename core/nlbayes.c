/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local Bayes denoising: the engine's side and the CPU reference.
 *
 * Lebrun, Buades, Morel, "A Nonlocal Bayesian Image Denoising Algorithm",
 * SIAM J. Imaging Sciences 6(3), 2013, and "Implementation of the
 * "Non-Local Bayes" (NL-Bayes) Image Denoising Algorithm", IPOL 2013, whose
 * steps and parameter table this file follows:
 *
 * Colour: the channels are turned into an orthonormal opponent space (Y =
 * (R+G+B)/sqrt 3, U = (R-B)/sqrt 2, V = (R-2G+B)/sqrt 6), where the noise
 * keeps its sigma in every channel; back at the end.
 *
 * Step 1, for a reference patch P (k1 x k1) of the noisy image: the N1
 * patches Q of its search window (side n1) nearest by their squared
 * distance over every channel, P itself included (ties go to the patch
 * nearer P, then to the window's order). For each channel on its own, the
 * group's mean patch m and covariance C (k1^2 x k1^2, divided by N1 - 1),
 * and every patch of the group restored by the empirical Wiener estimate
 *     Q^ = m + (C - beta1 sigma^2 I) C^-1 (Q - m)
 * (Cholesky factor of C, one solve per patch). Flat areas: when the
 * channel's patches differ from their mean patch by no more than the noise
 * (their variance about it, averaged over the patch's values, at most
 * gamma sigma^2), they all become the mean patch. Every restored patch of
 * every group is added, with weight 1, into the basic estimate at its
 * place; the estimate is the sum over the weight.
 *
 * Step 2, from the basic estimate B: groups by the distance of B's patches
 * over all channels (k2 x k2 x colours values), the N2 nearest plus every
 * patch nearer than tau. Mean m_B and covariance C_B (all channels
 * together) of B's group, mean m of the noisy group, and
 *     Q^ = m + C_B (C_B + beta2 sigma^2 I)^-1 (Q - m)
 * for every noisy patch Q of the group. Aggregated as in step 1.
 *
 * Where this differs from the IPOL program, by choice (docs/BENCHMARKS.md,
 * "Non-Local Bayes", has each measurement): the
 * reference patches lie on a fixed grid (every `stride`-th position in each
 * direction, with the first and last added so that the references cover
 * the image) instead of the program's scan that skips every patch already
 * used in a group ("paste boost"). That scan's order makes each output
 * depend on the whole image; the grid keeps every output a function of its
 * neighbourhood (nlbayes_halo), so that stripes, GEGL's regions and
 * previews equal the whole image's run, and lets the GPU restore all groups
 * at once. The flat-area test is the one above, per channel and in step 1
 * alone (step 2's, on the noisy group with B's mean as the estimate,
 * flattened textured groups); step 1's distance takes every channel, not Y
 * alone; tau is half the paper's.
 *
 * Order of the sums, which cuda/nlbayes.cu follows where it can: a group's
 * patches in the order of their position in the window (row by row), a
 * distance over the channels, then the patch's rows, then its columns. The
 * aggregation's sums are fixed point (NLBAYES_FIXED in nlbayes.h), the same
 * in any order, so that the output depends neither on the thread count nor
 * on which part of the image is filtered, and the GPU's atomics give the
 * CPU's sums; threads take tiles of reference positions, even columns of
 * tiles then odd within each row of tiles, so that no two add to one pixel
 * at once.
 *
 * Automatic mode asks nl-means' estimator (nlmeans_estimate_for) for the
 * noise: flat noise is denoised with its sigma; camera noise behind the same
 * variance-stabilising transform nl-means uses (core/nlmeans_noise.c), with
 * the sigma it leaves; correlated noise (demosaicked and compressed camera
 * files) in two scales, after the multiscale scheme of the Noise Clinic
 * (Lebrun, Colom, Morel, "The Noise Clinic: a blind image denoising
 * algorithm", IPOL 2015; "Multiscale image blind denoising", IEEE TIP
 * 2015): noise smoothed over neighbouring pixels is low-frequency noise,
 * which patches of the image's scale take for signal, but which is closer
 * to white on the image halved. The image is denoised with a multiple of
 * the noise's sigma (multiscale_fine); its half (means of 2x2 blocks on the
 * whole image's even grid) is denoised with another (MULTISCALE_COARSE),
 * and the difference between that and the half of the first result,
 * interpolated bilinearly back to full size, is added to the first result:
 * the coarse scale's denoising replaces the low frequencies. Both passes
 * are the backend's nl-bayes, so the GPU runs them as the CPU does; the
 * halves and the correction are computed on the host (multiscale_run). Alpha is copied unchanged. Non-finite f32
 * values are left as they are, and read as 0 by the patches around them. */
#include "cpu.h"
#include "nlbayes.h"
#include "nlmeans_noise.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Pixels per side of a tile of reference positions, at least (run_step
 * doubles it until tiles two apart never touch the same pixels). */
#define TILE 64

/* ---- the parameter table (IPOL 2013, section "Parameters") --------------- */

static void
choose_plan (double sigma, int colours, int flat_area, nlbayes_plan *p)
{
  memset (p, 0, sizeof *p);
  p->sigma = (float) sigma;
  p->gamma = 1.05f;
  p->flat_area = flat_area;
  p->colours = colours;
  nlbayes_step *s1 = &p->step[0], *s2 = &p->step[1];
  if (colours == 1)
    {
      s1->patch = sigma < 30 ? 5 : 7;
      s2->patch = 5;
      s1->group = sigma < 10 ? 35 : sigma < 30 ? 45 : sigma < 80 ? 90 : 100;
      s2->group = sigma < 20 ? 15 : sigma < 40 ? 25 : sigma < 80 ? 30 : 45;
      s1->beta = sigma < 15 ? 1.1f : sigma < 70 ? 1.0f : 0.9f;
      s2->beta = sigma < 15 ? 1.1f : sigma < 35 ? 1.0f : 0.9f;
    }
  else
    {
      s1->patch = sigma < 20 ? 3 : sigma < 50 ? 5 : 7;
      s2->patch = sigma < 50 ? 3 : sigma < 70 ? 5 : 7;
      s1->group = 3 * s1->patch * s1->patch;
      s2->group = 3 * s2->patch * s2->patch;
      s1->beta = 1.0f;
      s2->beta = sigma < 50 ? 1.2f : 1.0f;
    }
  for (int i = 0; i < 2; i++)
    {
      nlbayes_step *s = &p->step[i];
      s->search = s->group / 2 | 1; /* half the group, odd */
      if (s->search > NLBAYES_MAX_SEARCH)
        s->search = NLBAYES_MAX_SEARCH;
      /* Step 1 guides step 2 and may overlap its patches by one pixel;
       * step 2's tile the image. docs/BENCHMARKS.md, "Non-Local Bayes", has
       * the measurement. */
      s->stride = i == 0 && s->patch > 1 ? s->patch - 1 : s->patch;
    }
  /* Half the paper's 16 per value: as good on the grid, and smaller groups. */
  s2->tau = 8.0f * s2->patch * s2->patch * colours;
}

void
cudafx_nlbayes_params_init (cudafx_nlbayes_params *p)
{
  cudafx_params_defaults (CUDAFX_FILTER_NLBAYES, p);
}

/* ---- the CPU reference ----------------------------------------------------- */

/* One step's image data: planes of w x h floats, 0..255 scale. */
typedef struct {
  int          w, h, colours;
  const float *noisy;  /* colours planes */
  const float *basic;  /* step 2: the basic estimate's planes; NULL in step 1 */
  long long   *num;    /* colours planes of sums of restored values, fixed point (NLBAYES_FIXED) */
  float       *den;    /* one plane of weights */
} nlb_images;

/* One thread's scratch, sized for the largest group of a step. A group's
 * values are stored value-major: row d (a value of the patch: channel,
 * then patch row, then column) holds that value of the n patches, so that
 * the statistics and the solves run along rows. */
typedef struct {
  uint64_t *keys;    /* candidates: distance bits << 32 | window index */
  float    *dist;    /* one row of the window's distances */
  int      *pos;     /* the group's positions, y * w + x */
  float    *noisy;   /* dims x n: noisy values, restored in place */
  float    *basic;   /* dims x n: basic values (step 2) */
  float    *z;       /* dims x n: solves */
  float    *cov;     /* dims x dims */
  float    *chol;    /* dims x dims */
  float    *mean, *mean_b;
} nlb_work;

static void
work_free (nlb_work *t)
{
  free (t->keys);
  free (t->dist);
  free (t->pos);
  free (t->noisy);
  free (t->basic);
  free (t->z);
  free (t->cov);
  free (t->chol);
  free (t->mean);
  free (t->mean_b);
  memset (t, 0, sizeof *t);
}

static int
work_alloc (nlb_work *t, int candidates, int side, int dims)
{
  memset (t, 0, sizeof *t);
  size_t gd = (size_t) candidates * dims, dd = (size_t) dims * dims;
  t->keys = malloc ((size_t) candidates * sizeof *t->keys);
  t->dist = malloc ((size_t) side * sizeof *t->dist);
  t->pos = malloc ((size_t) candidates * sizeof *t->pos);
  t->noisy = malloc (gd * sizeof (float));
  t->basic = malloc (gd * sizeof (float));
  t->z = malloc (gd * sizeof (float));
  t->cov = malloc (dd * sizeof (float));
  t->chol = malloc (dd * sizeof (float));
  t->mean = malloc ((size_t) dims * sizeof (float));
  t->mean_b = malloc ((size_t) dims * sizeof (float));
  if (t->keys && t->dist && t->pos && t->noisy && t->basic && t->z && t->cov && t->chol && t->mean && t->mean_b)
    return 1;
  work_free (t);
  return 0;
}

/* Sorts distinct keys ascending. */
static void
sort_keys (uint64_t *k, int n)
{
  while (n > 16)
    {
      uint64_t a = k[0], b = k[n / 2], c = k[n - 1];
      uint64_t pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
      int i = 0, j = n - 1;
      for (;;)
        {
          while (k[i] < pivot)
            i++;
          while (k[j] > pivot)
            j--;
          if (i >= j)
            break;
          uint64_t t = k[i];
          k[i++] = k[j];
          k[j--] = t;
        }
      /* The smaller side by recursion, the larger by the loop. */
      int left = j + 1;
      if (left < n - left)
        {
          sort_keys (k, left);
          k += left;
          n -= left;
        }
      else
        {
          sort_keys (k + left, n - left);
          n = left;
        }
    }
  for (int i = 1; i < n; i++)
    {
      uint64_t v = k[i];
      int j = i;
      for (; j > 0 && k[j - 1] > v; j--)
        k[j] = k[j - 1];
      k[j] = v;
    }
}

/* Puts the n smallest of count distinct keys first, in no order (Hoare's
 * selection). */
static void
select_keys (uint64_t *k, int count, int n)
{
  int lo = 0, hi = count - 1;
  while (hi > lo)
    {
      uint64_t pivot = k[lo + (hi - lo) / 2];
      int i = lo, j = hi;
      while (i <= j)
        {
          while (k[i] < pivot)
            i++;
          while (k[j] > pivot)
            j--;
          if (i <= j)
            {
              uint64_t t = k[i];
              k[i++] = k[j];
              k[j--] = t;
            }
        }
      if (n - 1 <= j)
        hi = j;
      else if (n - 1 >= i)
        lo = i;
      else
        break;
    }
}

/* The group of the reference patch at ref: its positions into t->pos in
 * window order (row by row), their count returned. The distance is summed
 * over the channels, then the patch's rows, then its columns. */
CUDAFX_CPU_CLONES static int
find_group (const nlb_images *im, const nlbayes_step *st, int step, int ref, nlb_work *t)
{
  const int w = im->w, k = st->patch, r = st->search / 2;
  const size_t plane = (size_t) w * im->h;
  const int ry = ref / w, rx = ref % w;
  const int y0 = ry - r > 0 ? ry - r : 0, y1 = ry + r < im->h - k ? ry + r : im->h - k;
  const int x0 = rx - r > 0 ? rx - r : 0, x1 = rx + r < w - k ? rx + r : w - k;
  const int span = x1 - x0 + 1;
  const float *planes = step ? im->basic : im->noisy;
  int count = 0, below = 0;
  for (int y = y0; y <= y1; y++)
    {
      float *d = t->dist;
      for (int x = 0; x < span; x++)
        d[x] = 0.0f;
      for (int c = 0; c < im->colours; c++)
        for (int i = 0; i < k; i++)
          {
            const float *q = planes + c * plane + (size_t) (y + i) * w + x0;
            const float *p = planes + c * plane + ref + (size_t) i * w;
            for (int j = 0; j < k; j++)
              {
                const float a = p[j];
                for (int x = 0; x < span; x++)
                  {
                    float e = a - q[x + j];
                    d[x] += e * e;
                  }
              }
          }
      for (int x = 0; x < span; x++)
        {
          below += d[x] < st->tau;
          /* Distances are >= 0, so their bits order as they do. Ties go to
           * the patch nearer the reference, then to the window order: the
           * reference itself always comes first, so every reference patch
           * is restored and the grid covers the image. */
          const int dy = y - ry, dx = x0 + x - rx;
          t->keys[count] = (uint64_t) cudafx_float_bits (d[x]) << 32
                           | (uint32_t) (dy * dy + dx * dx) << NLBAYES_INDEX_BITS | (uint32_t) count;
          count++;
        }
    }
  int n = st->group > below ? st->group : below;
  n = n < count ? n : count;
  if (n < count)
    select_keys (t->keys, count, n);
  for (int i = 0; i < n; i++)
    t->keys[i] &= (1u << NLBAYES_INDEX_BITS) - 1;
  sort_keys (t->keys, n);
  for (int i = 0; i < n; i++)
    {
      int idx = (int) t->keys[i];
      t->pos[i] = (y0 + idx / span) * w + x0 + idx % span;
    }
  return n;
}

/* The n patches at pos of planes (colours of them), value-major into out. */
static void
gather (const float *planes, size_t plane, int w, int k, int colours, const int *pos, int n, float *out)
{
  for (int c = 0, d = 0; c < colours; c++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++, d++)
        {
          const float *p = planes + c * plane + (size_t) i * w + j;
          float *o = out + (size_t) d * n;
          for (int g = 0; g < n; g++)
            o[g] = p[pos[g]];
        }
}

/* Sum of a[g] b[g] (b NULL: of a[g]) over g < n, in 8 interleaved partial
 * sums added in a fixed order: the compiler may then use vector lanes
 * without reordering a float sum by itself, which it must not. */
static inline float
lane_dot (const float *a, const float *b, int n)
{
  float acc[8] = { 0 };
  int g = 0;
  for (; g + 8 <= n; g += 8)
    for (int l = 0; l < 8; l++)
      acc[l] += b ? a[g + l] * b[g + l] : a[g + l];
  for (int l = 0; g < n; g++, l++)
    acc[l] += b ? a[g] * b[g] : a[g];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Row means of x (dims x n) into m, and x centred in place. */
static void
centre (float *x, int n, int dims, float *m)
{
  for (int d = 0; d < dims; d++)
    {
      float *r = x + (size_t) d * n;
      m[d] = lane_dot (r, NULL, n) / (float) n;
      for (int g = 0; g < n; g++)
        r[g] -= m[d];
    }
}

/* cov = x x^T / (n - 1) of the centred rows x (dims x n), whole matrix. */
CUDAFX_CPU_CLONES static void
covariance (const float *x, int n, int dims, float *cov)
{
  const float inv = 1.0f / (float) (n - 1);
  for (int i = 0; i < dims; i++)
    for (int j = 0; j <= i; j++)
      {
        float s = lane_dot (x + (size_t) i * n, x + (size_t) j * n, n);
        cov[(size_t) i * dims + j] = cov[(size_t) j * dims + i] = s * inv;
      }
}

/* The lower Cholesky factor l of a (dims x dims), a = l l^T; 0 when a is
 * not positive definite. */
static int
cholesky (const float *a, int dims, float *l)
{
  for (int j = 0; j < dims; j++)
    {
      float *lj = l + (size_t) j * dims;
      float d = a[(size_t) j * dims + j];
      for (int m = 0; m < j; m++)
        d -= lj[m] * lj[m];
      if (!(d > 1e-6f))
        return 0;
      lj[j] = sqrtf (d);
      for (int i = j + 1; i < dims; i++)
        {
          float *li = l + (size_t) i * dims;
          float s = a[(size_t) i * dims + j];
          for (int m = 0; m < j; m++)
            s -= li[m] * lj[m];
          li[j] = s / lj[j];
        }
    }
  return 1;
}

/* z = (l l^T)^-1 x for the n columns of x (dims x n) at once. */
CUDAFX_CPU_CLONES static void
cholesky_solve (const float *l, int dims, const float *x, int n, float *z)
{
  for (int i = 0; i < dims; i++)
    {
      float *zi = z + (size_t) i * n;
      const float *li = l + (size_t) i * dims;
      for (int g = 0; g < n; g++)
        zi[g] = x[(size_t) i * n + g];
      for (int m = 0; m < i; m++)
        {
          const float f = li[m], *zm = z + (size_t) m * n;
          for (int g = 0; g < n; g++)
            zi[g] -= f * zm[g];
        }
      const float inv = 1.0f / li[i];
      for (int g = 0; g < n; g++)
        zi[g] *= inv;
    }
  for (int i = dims - 1; i >= 0; i--)
    {
      float *zi = z + (size_t) i * n;
      for (int m = i + 1; m < dims; m++)
        {
          const float f = l[(size_t) m * dims + i], *zm = z + (size_t) m * n;
          for (int g = 0; g < n; g++)
            zi[g] -= f * zm[g];
        }
      const float inv = 1.0f / l[(size_t) i * dims + i];
      for (int g = 0; g < n; g++)
        zi[g] *= inv;
    }
}

/* The variance of the centred rows x (dims x n) about their means,
 * averaged over the rows: how much the group's patches differ. */
static float
spread (const float *x, int n, int dims)
{
  float v = 0.0f;
  for (int d = 0; d < dims; d++)
    v += lane_dot (x + (size_t) d * n, x + (size_t) d * n, n);
  return v / ((float) (n - 1) * dims);
}

/* Step 1 on the group in t->noisy (colours k^2 x n), restored in place:
 * each channel by its own Wiener estimate, or by the group's mean patch
 * when the channel is flat (its patches differ by no more than the noise)
 * or its covariance is degenerate (fewer patches than values, no spread). */
CUDAFX_CPU_CLONES static void
restore_step1 (const nlbayes_plan *p, int n, int k, nlb_work *t)
{
  const int kk = k * k;
  const float s2 = p->sigma * p->sigma, bs2 = p->step[0].beta * s2;
  for (int c = 0; c < p->colours; c++)
    {
      float *x = t->noisy + (size_t) c * kk * n;
      centre (x, n, kk, t->mean);
      int wiener = n > 1 && !(p->flat_area && spread (x, n, kk) <= p->gamma * s2);
      if (wiener)
        {
          covariance (x, n, kk, t->cov);
          wiener = cholesky (t->cov, kk, t->chol);
        }
      if (wiener)
        cholesky_solve (t->chol, kk, x, n, t->z);
      /* Q^ = m + (C - beta sigma^2 I) C^-1 (Q - m) = m + x - beta sigma^2 z. */
      for (int d = 0; d < kk; d++)
        {
          float *r = x + (size_t) d * n;
          const float *z = t->z + (size_t) d * n, m = t->mean[d];
          for (int g = 0; g < n; g++)
            r[g] = wiener ? m + (r[g] - bs2 * z[g]) : m;
        }
    }
}

/* Step 2 on the noisy group in t->noisy from the basic group in t->basic
 * (both colours k^2 x n), restored in place. */
CUDAFX_CPU_CLONES static void
restore_step2 (const nlbayes_plan *p, int n, int k, nlb_work *t)
{
  const int dims = p->colours * k * k;
  const float bs2 = p->step[1].beta * p->sigma * p->sigma;
  if (n < 2)
    return; /* one patch: no statistics, its noisy values stay */
  centre (t->basic, n, dims, t->mean_b);
  covariance (t->basic, n, dims, t->cov);
  /* C_B + beta sigma^2 I is positive definite. */
  for (int i = 0; i < dims; i++)
    t->cov[(size_t) i * dims + i] += bs2;
  int ok = cholesky (t->cov, dims, t->chol);
  for (int i = 0; i < dims; i++)
    t->cov[(size_t) i * dims + i] -= bs2;
  if (!ok)
    return;
  centre (t->noisy, n, dims, t->mean);
  cholesky_solve (t->chol, dims, t->noisy, n, t->z);
  /* Q^ = m + C_B z. */
  for (int i = 0; i < dims; i++)
    {
      float *r = t->noisy + (size_t) i * n;
      const float *ci = t->cov + (size_t) i * dims;
      for (int g = 0; g < n; g++)
        r[g] = t->mean[i];
      for (int m = 0; m < dims; m++)
        {
          const float f = ci[m], *zm = t->z + (size_t) m * n;
          for (int g = 0; g < n; g++)
            r[g] += f * zm[g];
        }
    }
}

/* Adds the n restored patches of t->noisy to the sums. */
static void
aggregate (const nlb_images *im, int k, int n, const nlb_work *t)
{
  const int w = im->w;
  const size_t plane = (size_t) w * im->h;
  for (int g = 0; g < n; g++)
    {
      for (int c = 0, d = 0; c < im->colours; c++)
        for (int i = 0; i < k; i++)
          {
            long long *o = im->num + c * plane + t->pos[g] + (size_t) i * w;
            for (int j = 0; j < k; j++, d++)
              o[j] += NLBAYES_FIXED (t->noisy[(size_t) d * n + g]);
          }
      for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
          im->den[t->pos[g] + (size_t) i * w + j] += 1.0f;
    }
}

/* floor (a / b), b > 0. */
static int
floor_div (int a, int b)
{
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* The reference positions along a side of n pixels (patch k, stride s,
 * the grid's phase from the whole image's origin o): every position
 * congruent to -o modulo s, plus the first and the last, so that the
 * reference patches cover every pixel. Writes them ascending to out and
 * returns their count. */
static int
grid_positions (int n, int k, int s, int o, int *out)
{
  const int last = n - k;
  int count = 0, first = ((-o) % s + s) % s;
  if (first != 0)
    out[count++] = 0;
  for (int x = first; x <= last; x += s)
    out[count++] = x;
  if (out[count - 1] != last)
    out[count++] = last;
  return count;
}

/* One step over the whole image, its sums into im->num and im->den. */
static cudafx_status
run_step (const nlb_images *im, const nlbayes_plan *p, int step, const cudafx_options *o, double from,
          double to)
{
  const nlbayes_step *st = &p->step[step];
  const int k = st->patch, dims = p->colours * k * k, candidates = st->search * st->search;
  int *gx = malloc ((size_t) (im->w + 2) * sizeof *gx), *gy = malloc ((size_t) (im->h + 2) * sizeof *gy);
  if (!gx || !gy)
    {
      free (gx);
      free (gy);
      return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
    }
  const int nx = grid_positions (im->w, k, st->stride, p->origin_x, gx);
  const int ny = grid_positions (im->h, k, st->stride, p->origin_y, gy);
  /* Tiles of reference positions whose groups two tiles apart never
   * touch the same pixels, so that a column of tiles can be restored in
   * parallel in a fixed order of the sums. */
  int side = TILE;
  while (side < st->search + k)
    side *= 2;
  /* Tiles on the whole image's grid, so that a part's sums run in the
   * whole run's order: tile t covers positions with (x + origin) in
   * [(t0 + t) side, (t0 + t + 1) side). */
  const int t0x = floor_div (p->origin_x, side), t0y = floor_div (p->origin_y, side);
  const int tiles_x = floor_div (p->origin_x + im->w - 1, side) - t0x + 1;
  const int tiles_y = floor_div (p->origin_y + im->h - 1, side) - t0y + 1;
  const int threads = cudafx_thread_count (o);
  nlb_work *work = calloc ((size_t) threads, sizeof *work);
  cudafx_status s = work ? CUDAFX_OK : cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
  for (int i = 0; !s && i < threads; i++)
    if (!work_alloc (&work[i], candidates, st->search, dims))
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
  /* Tile tx's positions are gx[tile_x[tx]] .. gx[tile_x[tx + 1] - 1]. */
  int *tile_x = malloc ((size_t) (tiles_x + 1) * sizeof *tile_x);
  int *tile_y = malloc ((size_t) (tiles_y + 1) * sizeof *tile_y);
  if (!s && (!tile_x || !tile_y))
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
  if (!s)
    {
      for (int t = 0, i = 0; t <= tiles_x; t++)
        {
          while (i < nx && gx[i] + p->origin_x < (t0x + t) * side)
            i++;
          tile_x[t] = i;
        }
      for (int t = 0, i = 0; t <= tiles_y; t++)
        {
          while (i < ny && gy[i] + p->origin_y < (t0y + t) * side)
            i++;
          tile_y[t] = i;
        }
    }
  for (int ty = 0; !s && ty < tiles_y; ty++)
    {
      for (int parity = 0; parity < 2; parity++)
        {
#pragma omp parallel for num_threads (threads) schedule (dynamic, 1)
          for (int tx = (parity + t0x) & 1; tx < tiles_x; tx += 2)
            {
              nlb_work *t = &work[omp_get_thread_num ()];
              for (int iy = tile_y[ty]; iy < tile_y[ty + 1]; iy++)
                {
                  for (int ix = tile_x[tx]; ix < tile_x[tx + 1]; ix++)
                    {
                      int ref = gy[iy] * im->w + gx[ix];
                      int n = find_group (im, st, step, ref, t);
                      const size_t plane = (size_t) im->w * im->h;
                      gather (im->noisy, plane, im->w, k, p->colours, t->pos, n, t->noisy);
                      if (step)
                        {
                          gather (im->basic, plane, im->w, k, p->colours, t->pos, n, t->basic);
                          restore_step2 (p, n, k, t);
                        }
                      else
                        restore_step1 (p, n, k, t);
                      aggregate (im, k, n, t);
                    }
                }
            }
        }
      s = cudafx_progress (o, from + (to - from) * (ty + 1) / tiles_y);
    }
  if (work)
    for (int i = 0; i < threads; i++)
      work_free (&work[i]);
  free (work);
  free (tile_x);
  free (tile_y);
  free (gx);
  free (gy);
  return s;
}

/* out = num / den, plane by plane (every pixel has a weight: the grid
 * covers the image). */
static void
divide (const long long *num, const float *den, int colours, size_t plane, float *out)
{
  for (int c = 0; c < colours; c++)
    for (size_t i = 0; i < plane; i++)
      out[c * plane + i] = NLBAYES_UNFIXED (num[c * plane + i], den[i]);
}

/* The orthonormal opponent transform of three channels and its transpose. */
static const float opp[3][3] = {
  { 0.57735027f, 0.57735027f, 0.57735027f },
  { 0.70710678f, 0.0f, -0.70710678f },
  { 0.40824829f, -0.81649658f, 0.40824829f },
};

/* src's colour channels into planes (0..255 scale, opponent space for
 * three); non-finite values read as 0. */
static void
load_planes (const cudafx_image *src, int colours, float *planes)
{
  const size_t plane = (size_t) src->width * src->height;
  const int ch = src->channels;
#pragma omp parallel for schedule (static)
  for (int y = 0; y < src->height; y++)
    {
      const uint8_t *row = cudafx_row (src, y);
      for (int x = 0; x < src->width; x++)
        {
          float v[CUDAFX_NOISE_MAX_CHANNELS];
          for (int c = 0; c < colours; c++)
            {
              float f = src->type == CUDAFX_U8 ? row[(size_t) x * ch + c]
                                               : ((const float *) row)[(size_t) x * ch + c] * 255.0f;
              v[c] = isfinite (f) ? f : 0.0f;
            }
          size_t i = (size_t) y * src->width + x;
          for (int c = 0; c < colours; c++)
            {
              float s = v[c];
              if (colours == 3)
                s = (opp[c][0] * v[0] + opp[c][1] * v[1]) + opp[c][2] * v[2];
              planes[c * plane + i] = s;
            }
        }
    }
}

/* planes back into dst (rounded and clamped on u8); alpha and non-finite
 * values from src. */
static void
store_planes (const float *planes, int colours, const cudafx_image *src, cudafx_image *dst)
{
  const size_t plane = (size_t) src->width * src->height;
  const int ch = src->channels;
#pragma omp parallel for schedule (static)
  for (int y = 0; y < src->height; y++)
    {
      const uint8_t *srow = cudafx_row (src, y);
      uint8_t *drow = cudafx_row (dst, y);
      for (int x = 0; x < src->width; x++)
        {
          size_t i = (size_t) y * src->width + x;
          float v[CUDAFX_NOISE_MAX_CHANNELS];
          for (int c = 0; c < colours; c++)
            {
              if (colours == 3)
                v[c] = (opp[0][c] * planes[i] + opp[1][c] * planes[plane + i]) + opp[2][c] * planes[2 * plane + i];
              else
                v[c] = planes[c * plane + i];
            }
          for (int c = 0; c < ch; c++)
            {
              size_t e = (size_t) x * ch + c;
              if (src->type == CUDAFX_U8)
                {
                  float f = c < colours ? v[c] : srow[e];
                  f = f < 0.0f ? 0.0f : f > 255.0f ? 255.0f : f;
                  drow[e] = (uint8_t) (f + 0.5f);
                }
              else
                {
                  float f = ((const float *) srow)[e];
                  ((float *) drow)[e] = c < colours && isfinite (f) ? v[c] / 255.0f : f;
                }
            }
        }
    }
}

cudafx_status
cudafx_nlbayes_cpu (const cudafx_image *src, cudafx_image *dst, const nlbayes_plan *p, const cudafx_options *o)
{
  const int colours = p->colours;
  const size_t plane = (size_t) src->width * src->height;
  size_t bytes;
  /* noisy and basic planes of floats, num's of fixed-point sums, one plane of weights */
  if (__builtin_mul_overflow (plane, (size_t) colours * (2 * sizeof (float) + sizeof (long long)) + sizeof (float),
                              &bytes))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: image too large");
  float *noisy = malloc (plane * colours * sizeof (float));
  float *basic = malloc (plane * colours * sizeof (float));
  long long *num = calloc (plane * colours, sizeof (long long));
  float *den = calloc (plane, sizeof (float));
  cudafx_status s = CUDAFX_OK;
  if (!noisy || !basic || !num || !den)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory for a %dx%d image", src->width,
                     src->height);
  else
    {
      /* Patches larger than the image shrink to it. */
      nlbayes_plan plan = *p;
      for (int i = 0; i < 2; i++)
        {
          int side = src->width < src->height ? src->width : src->height;
          if (plan.step[i].patch > side)
            plan.step[i].patch = side;
          if (plan.step[i].stride > plan.step[i].patch)
            plan.step[i].stride = plan.step[i].patch;
        }
      nlb_images im = { src->width, src->height, colours, noisy, NULL, num, den };
      load_planes (src, colours, noisy);
      if (!(s = run_step (&im, &plan, 0, o, 0.0, 0.5)))
        {
          divide (num, den, colours, plane, basic);
          memset (num, 0, plane * colours * sizeof (long long));
          memset (den, 0, plane * sizeof (float));
          im.basic = basic;
          if (!(s = run_step (&im, &plan, 1, o, 0.5, 1.0)))
            {
              divide (num, den, colours, plane, basic);
              store_planes (basic, colours, src, dst);
            }
        }
    }
  free (noisy);
  free (basic);
  free (num);
  free (den);
  return s;
}

/* ---- the engine's side ----------------------------------------------------- */

/* Correlated noise (core/nlmeans.c: demosaicked and compressed camera
 * noise): the multiples of the whole noise's sigma that the image and its
 * half are denoised with (the header). The Wiener estimates assume white
 * noise, to which noise smoothed over neighbouring pixels looks like
 * signal, so the image itself takes a sigma above the noise's, and its
 * half, where the noise is closer to white and averaged, a smaller one.
 * How far above grows as the noise grows alike in the colour channels
 * (nlmeans_channel_alike), from MULTISCALE_FINE_LOW to MULTISCALE_FINE_HIGH:
 * noise of its own in each channel is told from the image by the three
 * channels of a patch together, noise alike in them is not. On the
 * camera-pipeline JPEGs of tests/quality the files of low channel
 * correlation were best at the lowest fine multiples tried and those of
 * high at the highest, for both demosaicking methods, and the grey layers
 * of the same files (one channel) at 1.5 to 2 (docs/BENCHMARKS.md,
 * "Non-Local Bayes"). The noise model's sigma of correlated noise is the
 * whole noise at a pixel (core/nlmeans.c's estimate_noise). */
#define MULTISCALE_FINE_LOW  2.0
#define MULTISCALE_FINE_HIGH 7.0
#define MULTISCALE_COARSE    1.5

static double
multiscale_fine (const cudafx_noise_model *m)
{
  return MULTISCALE_FINE_LOW + nlmeans_channel_alike (m) * (MULTISCALE_FINE_HIGH - MULTISCALE_FINE_LOW);
}

/* The sigma a plan is made for: the noise's (behind the transform, the
 * transform's) times scale, and at least the table's smallest, so that a
 * noiseless image still gets a plan. */
static double
plan_sigma (double sigma, double scale)
{
  sigma *= scale;
  return sigma >= 0.1 ? sigma : 0.1;
}

typedef struct {
  const cudafx_image *src;
  cudafx_image       *dst;
  nlbayes_plan        plan;
  const nlmeans_vst  *vst;    /* camera noise: denoise behind it */
  int                 coarse; /* correlated noise: the half is denoised with coarse_plan too */
  nlbayes_plan        coarse_plan;
} nlbayes_call;

/* Behind the transform (nlmeans_vst_run): backend b's nl-bayes of the
 * transformed image. */
typedef struct {
  const cudafx_backend_ops *b;
  const nlbayes_call       *call;
  const cudafx_options     *o;
} nlbayes_transformed;

static cudafx_status
denoise_transformed (const cudafx_image *t, cudafx_image *u, void *ctx)
{
  const nlbayes_transformed *x = ctx;
  return x->b->nlbayes (t, u, &x->call->plan, x->o);
}

/* A part of a run's progress: [0, 1] of a pass as [from, to] of the call. */
typedef struct {
  const cudafx_options *o;
  double                from, to;
} pass_progress;

static int
report_pass (double fraction, void *user)
{
  const pass_progress *pp = user;
  return pp->o->progress (pp->from + (pp->to - pp->from) * fraction, pp->o->user_data);
}

/* Options for one pass of a run in passes: its progress as [from, to] of
 * the call's, and no rows reported (the pass's rows are not final). */
static cudafx_options
pass_options (const cudafx_options *o, pass_progress *pp, double from, double to)
{
  cudafx_options po = *o;
  *pp = (pass_progress) { o, from, to };
  po.progress = o->progress ? report_pass : NULL;
  po.user_data = pp;
  po.rows_ready = NULL;
  return po;
}

/* Colour channel c of pixel x of row, 0..255 scale; non-finite values
 * read as 0, as the denoising reads them. */
static inline float
colour_value (const cudafx_image *img, const uint8_t *row, int x, int c)
{
  const size_t e = (size_t) x * img->channels + c;
  float v = img->type == CUDAFX_U8 ? row[e] : ((const float *) row)[e] * 255.0f;
  return isfinite (v) ? v : 0.0f;
}

/* The 2x2 block means of img's colour channels on the whole image's even
 * grid (blocks from column ox and row oy, whole blocks only) into out, cw x
 * ch pixels of colours f32 values on the 0..1 scale less sub (cw x ch x
 * colours, 0..1; NULL: nothing). */
static void
halve (const cudafx_image *img, int colours, int ox, int oy, int cw, int ch, const float *sub, float *out)
{
#pragma omp parallel for schedule (static)
  for (int j = 0; j < ch; j++)
    {
      const uint8_t *r0 = cudafx_row (img, oy + 2 * j), *r1 = cudafx_row (img, oy + 2 * j + 1);
      for (int i = 0; i < cw; i++)
        for (int c = 0; c < colours; c++)
          {
            const int x = ox + 2 * i;
            const float m = ((colour_value (img, r0, x, c) + colour_value (img, r0, x + 1, c))
                             + (colour_value (img, r1, x, c) + colour_value (img, r1, x + 1, c)))
                            * (0.25f / 255.0f);
            const size_t at = ((size_t) j * cw + i) * colours + c;
            out[at] = sub ? sub[at] - m : m;
          }
    }
}

/* Where fine pixel x (of a side whose blocks start at o, n of them) falls
 * among the block centres: the two blocks around it and the weight of the
 * second; outside the first and last centres, the nearest block alone. */
static inline void
block_between (int x, int o, int n, int *b0, int *b1, float *f)
{
  float u = (x - o - 0.5f) * 0.5f;
  u = u < 0.0f ? 0.0f : u > n - 1 ? (float) (n - 1) : u;
  *b0 = (int) u;
  *b1 = *b0 + 1 < n ? *b0 + 1 : *b0;
  *f = u - (float) *b0;
}

/* Correlated noise in two scales (the header): backend b's nl-bayes of
 * call->src into call->dst, of src's half with the coarse plan, and the
 * coarse scale's correction added to dst. */
static cudafx_status
multiscale_run (const cudafx_backend_ops *b, const nlbayes_call *call, const cudafx_options *o)
{
  const cudafx_image *src = call->src;
  cudafx_image *dst = call->dst;
  const int colours = call->plan.colours;
  /* The whole image's blocks start at its even columns and rows. */
  const int ox = call->plan.origin_x & 1, oy = call->plan.origin_y & 1;
  const int cw = (src->width - ox) / 2, ch = (src->height - oy) / 2;
  pass_progress pp;
  cudafx_options po = pass_options (o, &pp, 0.0, cw > 0 && ch > 0 ? 0.8 : 1.0);
  cudafx_status s = b->nlbayes (src, dst, &call->plan, &po);
  if (s || cw <= 0 || ch <= 0)
    return s; /* a single row or column: no half to denoise */
  const size_t values = (size_t) cw * ch * colours;
  float *half = malloc (values * sizeof *half), *den = malloc (values * sizeof *den);
  if (!half || !den)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
  else
    {
      const size_t stride = (size_t) cw * colours * sizeof (float);
      cudafx_image hi = { half, cw, ch, colours, 0, CUDAFX_F32, stride }, di = hi;
      di.data = den;
      nlbayes_plan coarse = call->coarse_plan;
      coarse.origin_x = (call->plan.origin_x + ox) / 2;
      coarse.origin_y = (call->plan.origin_y + oy) / 2;
      halve (src, colours, ox, oy, cw, ch, NULL, half);
      po = pass_options (o, &pp, 0.8, 1.0);
      if (!(s = b->nlbayes (&hi, &di, &coarse, &po)))
        {
          /* The correction: the denoised half less dst's half, into half. */
          halve (dst, colours, ox, oy, cw, ch, den, half);
#pragma omp parallel for schedule (static)
          for (int y = 0; y < src->height; y++)
            {
              int j0, j1;
              float fy;
              block_between (y, oy, ch, &j0, &j1, &fy);
              const float *c0 = half + (size_t) j0 * cw * colours, *c1 = half + (size_t) j1 * cw * colours;
              const uint8_t *srow = cudafx_row (src, y);
              uint8_t *drow = cudafx_row (dst, y);
              for (int x = 0; x < src->width; x++)
                {
                  int i0, i1;
                  float fx;
                  block_between (x, ox, cw, &i0, &i1, &fx);
                  for (int c = 0; c < colours; c++)
                    {
                      const size_t e = (size_t) x * src->channels + c;
                      const float a0 = c0[i0 * colours + c] + fx * (c0[i1 * colours + c] - c0[i0 * colours + c]);
                      const float a1 = c1[i0 * colours + c] + fx * (c1[i1 * colours + c] - c1[i0 * colours + c]);
                      const float corr = a0 + fy * (a1 - a0);
                      if (src->type == CUDAFX_U8)
                        {
                          float f = drow[e] + 255.0f * corr;
                          f = f < 0.0f ? 0.0f : f > 255.0f ? 255.0f : f;
                          drow[e] = (uint8_t) (f + 0.5f);
                        }
                      else if (isfinite (((const float *) srow)[e]))
                        ((float *) drow)[e] += corr;
                    }
                }
            }
        }
    }
  free (half);
  free (den);
  return s;
}

/* The halo of multiscale_run from its plans' (fine's and coarse's, in
 * their own pixels): the correction at a pixel interpolates the two blocks
 * around it (within 2 pixels), each the coarse run's value (coarse halo
 * blocks of 2 pixels around it, and its own 2) less dst's mean over it
 * (dst within 3 pixels). */
static int
multiscale_halo (int fine, int coarse)
{
  int h = 2 * coarse + 6;
  return fine + 4 > h ? fine + 4 : h;
}

static cudafx_status
nlbayes_run (const cudafx_backend_ops *b, void *call_, const cudafx_options *o)
{
  const nlbayes_call *call = call_;
  if (call->vst)
    {
      nlbayes_transformed x = { b, call, o };
      return nlmeans_vst_run (call->vst, call->src, call->dst, "nl-bayes", denoise_transformed, &x, o);
    }
  if (call->coarse)
    return multiscale_run (b, call, o);
  return b->nlbayes (call->src, call->dst, &call->plan, o);
}

cudafx_status
cudafx_nlbayes (const cudafx_image *src, cudafx_image *dst, const cudafx_nlbayes_params *p,
                const cudafx_options *o, cudafx_nlbayes_info *info)
{
  cudafx_status s;
  if ((s = cudafx_check_pair ("nl-bayes", src, dst)))
    return s;
  if (!p)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "nl-bayes: params is NULL");
  if ((s = cudafx_params_check (CUDAFX_FILTER_NLBAYES, p)))
    return s;
  if (!(p->estimate >= 0.0 && p->estimate <= 255.0))
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "nl-bayes: estimate must be 0..255 (0: estimate it), not %g",
                        p->estimate);
  const int colours = src->channels - (src->has_alpha ? 1 : 0);

  /* The noise: given, estimated beforehand by the host, or estimated now. */
  cudafx_nlmeans_info est;
  memset (&est, 0, sizeof est);
  if (!p->automatic)
    est.sigma = p->sigma;
  else if (p->estimate > 0.0)
    {
      est.sigma = p->estimate;
      if (p->noise.signal_dependent && p->noise.channels != colours)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                            "nl-bayes: the noise model has %d channels, the image %d colour channels",
                            p->noise.channels, colours);
      est.noise = p->noise;
    }
  else
    {
      cudafx_options eo = *o;
      eo.progress = NULL; /* the estimate is quick: progress starts with the denoising */
      eo.rows_ready = NULL;
      eo.report = NULL; /* the call reports its own backend, not the estimate's */
      if ((s = nlmeans_estimate_for ("nl-bayes", src, &eo, &est)))
        return s;
    }

  nlbayes_call call = { .src = src, .dst = dst };
  nlmeans_vst *vst = NULL;
  double sigma = est.sigma;
  if (est.noise.signal_dependent)
    {
      if (!(vst = malloc (sizeof *vst)))
        return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
      nlmeans_vst_make (&est.noise, colours, vst);
      sigma = vst->scale;
      call.vst = vst;
    }
  /* Correlated noise in two scales (behind the transform, a model given
   * with both, in one: the transform's sigma is not the whole noise's). */
  call.coarse = est.noise.correlated && !vst;
  choose_plan (plan_sigma (sigma, call.coarse ? multiscale_fine (&est.noise) : 1.0), colours, p->flat_area != 0,
               &call.plan);
  if (call.coarse)
    choose_plan (plan_sigma (sigma, MULTISCALE_COARSE), colours, p->flat_area != 0, &call.coarse_plan);
  call.plan.origin_x = p->origin_x;
  call.plan.origin_y = p->origin_y;

  s = cudafx_dispatch ("nl-bayes", nlbayes_run, &call, src, dst, 0, o);
  if (!s && info)
    {
      memset (info, 0, sizeof *info);
      info->sigma = est.sigma;
      info->noise = est.noise;
      if (!est.noise.signal_dependent)
        {
          info->noise.channels = colours;
          info->noise.sigma_dark = info->noise.sigma_light = est.sigma;
        }
      info->stabilised_sigma = vst ? vst->scale : 0.0;
      for (int i = 0; i < 2; i++)
        {
          info->patch_size[i] = call.plan.step[i].patch;
          info->group_size[i] = call.plan.step[i].group;
          info->search_size[i] = call.plan.step[i].search;
        }
      info->flat_area = call.plan.flat_area;
    }
  free (vst);
  return s;
}

/* The plan's halo for the noise p gives; without a noise known beforehand
 * (automatic, no estimate), the largest over the table's noise levels (the
 * steps only grow with sigma, but the table is searched rather than assumed). */
int
cudafx_nlbayes_halo (const cudafx_nlbayes_params *p, int colours)
{
  nlbayes_plan plan;
  double sigma = p->sigma;
  int halo = 0;

  if (p->automatic && !(p->estimate > 0.0))
    {
      /* Correlated noise may be found: its two scales' reach too. */
      for (double s = 0.5; s <= 255.0; s += 0.5)
        {
          choose_plan (s, colours, p->flat_area != 0, &plan);
          int h = multiscale_halo (nlbayes_halo (&plan), nlbayes_halo (&plan));
          halo = h > halo ? h : halo;
        }
      return halo;
    }
  if (p->automatic)
    {
      sigma = p->estimate;
      if (p->noise.signal_dependent && p->noise.channels == colours)
        {
          nlmeans_vst *vst = malloc (sizeof *vst); /* its tables are large for a stack */
          if (!vst)
            return cudafx_nlbayes_halo (&(cudafx_nlbayes_params) { .automatic = 1, .flat_area = p->flat_area },
                                        colours);
          nlmeans_vst_make (&p->noise, colours, vst);
          sigma = vst->scale;
          free (vst);
        }
    }
  /* cudafx_nlbayes's choice: two scales for correlated noise without the transform. */
  if (p->automatic && p->noise.correlated && !p->noise.signal_dependent)
    {
      nlbayes_plan coarse;
      choose_plan (plan_sigma (sigma, multiscale_fine (&p->noise)), colours, p->flat_area != 0, &plan);
      choose_plan (plan_sigma (sigma, MULTISCALE_COARSE), colours, p->flat_area != 0, &coarse);
      return multiscale_halo (nlbayes_halo (&plan), nlbayes_halo (&coarse));
    }
  choose_plan (plan_sigma (sigma, 1.0), colours, p->flat_area != 0, &plan);
  return nlbayes_halo (&plan);
}
