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
 * patches Q of its search window (side n1) nearest by the squared distance
 * of their first channel (Y; a grey image's only one), P itself included.
 * For each channel on its own, the group's mean patch m and covariance C
 * (k1^2 x k1^2, divided by N1 - 1), and every patch of the group restored
 * by the empirical Wiener estimate
 *     Q^ = m + (C - beta1 sigma^2 I) C^-1 (Q - m)
 * (Cholesky factor of C, one solve per patch). Flat areas: when the group's
 * values vary no more than the noise (their variance, averaged over the
 * channels, at most gamma sigma^2), every value becomes the group's mean.
 * Every restored patch of every group is added, with weight 1, into the
 * basic estimate at its place; the estimate is the sum over the weight.
 *
 * Step 2, from the basic estimate B: groups by the distance of B's patches
 * over all channels (k2 x k2 x colours values), the N2 nearest plus every
 * patch nearer than tau. Mean m_B and covariance C_B (all channels
 * together) of B's group, mean m of the noisy group, and
 *     Q^ = m + C_B (C_B + beta2 sigma^2 I)^-1 (Q - m)
 * for every noisy patch Q of the group; the flat-area test on the noisy
 * group, whose values then take B's group mean. Aggregated as in step 1.
 *
 * Where this differs from the IPOL program, by choice: the reference
 * patches lie on a fixed grid (every `stride`-th position in each
 * direction, with the last row and column of positions added so that the
 * references cover the image) instead of the program's scan that skips
 * every patch already used in a group ("paste boost"). That scan's order
 * makes each output depend on the whole image; the grid keeps every output
 * a function of its neighbourhood (nlbayes_halo), so that stripes, GEGL's
 * regions and previews equal the whole image's run, and lets the GPU
 * restore all groups at once. docs/BENCHMARKS.md has what it costs and
 * gains against the published figures.
 *
 * Order of the sums, which cuda/nlbayes.cu follows: a group's patches in
 * the order of their position in the window (row by row), a distance over
 * the patch's rows then columns (then channels), and the aggregation of the
 * references in fixed tiles (tiles of reference positions, even columns of
 * tiles then odd within each row of tiles, rows in order) so that the
 * output does not depend on the thread count.
 *
 * Automatic mode asks nl-means' estimator (cudafx_nlmeans_estimate) for the
 * noise: flat noise is denoised with its sigma; camera noise behind the
 * same variance-stabilising transform nl-means uses (core/nlmeans_noise.c),
 * with the sigma it leaves. Alpha is copied unchanged. Non-finite f32
 * values are left as they are, and read as 0 by the patches around them. */
#include "cpu.h"
#include "nlbayes.h"
#include "nlmeans_noise.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

/* Reference positions per tile side (at least; see tile_side). */
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
      s->stride = s->patch / 2 + 1;
      { char nm[16]; snprintf (nm, sizeof nm, "NLB_STRIDE%d", i + 1); if (getenv (nm)) s->stride = atoi (getenv (nm)); }
    }
  if (getenv ("NLB_FLAT")) p->flat_area = atoi (getenv ("NLB_FLAT"));
  s2->tau = 16.0f * s2->patch * s2->patch * colours;
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
  float       *num;    /* colours planes of sums of restored values */
  float       *den;    /* one plane of weights */
} nlb_images;

/* One thread's scratch, sized for the largest step. */
typedef struct {
  uint64_t *keys;    /* candidates: distance bits << 32 | position index */
  int      *pos;     /* the group's positions, y * w + x */
  float    *noisy;   /* group x dims, noisy values */
  float    *basic;   /* group x dims, basic values (step 2) */
  float    *centred; /* group x dims */
  float    *cov;     /* dims x dims */
  float    *aux;     /* dims x dims, or group x dims */
  float    *mean, *mean_b, *z;
} nlb_work;

static void
work_free (nlb_work *t)
{
  free (t->keys);
  free (t->pos);
  free (t->noisy);
  free (t->basic);
  free (t->centred);
  free (t->cov);
  free (t->aux);
  free (t->mean);
  free (t->mean_b);
  free (t->z);
  memset (t, 0, sizeof *t);
}

static int
work_alloc (nlb_work *t, int candidates, int dims)
{
  memset (t, 0, sizeof *t);
  size_t gd = (size_t) candidates * dims, dd = (size_t) dims * dims;
  t->keys = malloc ((size_t) candidates * sizeof *t->keys);
  t->pos = malloc ((size_t) candidates * sizeof *t->pos);
  t->noisy = malloc (gd * sizeof (float));
  t->basic = malloc (gd * sizeof (float));
  t->centred = malloc (gd * sizeof (float));
  t->cov = malloc (dd * sizeof (float));
  t->aux = malloc ((gd > dd ? gd : dd) * sizeof (float));
  t->mean = malloc ((size_t) dims * sizeof (float));
  t->mean_b = malloc ((size_t) dims * sizeof (float));
  t->z = malloc ((size_t) dims * sizeof (float));
  if (t->keys && t->pos && t->noisy && t->basic && t->centred && t->cov && t->aux && t->mean && t->mean_b && t->z)
    return 1;
  work_free (t);
  return 0;
}

/* Squared distance between the k x k patches at a and b of the planes
 * [c0, c1) (each plane w x h), rows then columns then channels. */
static inline float
patch_distance (const float *planes, size_t plane, int w, int k, int a, int b, int c0, int c1)
{
  float d = 0.0f;
  for (int c = c0; c < c1; c++)
    {
      const float *pa = planes + c * plane + a, *pb = planes + c * plane + b;
      for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
          {
            float e = pa[i * w + j] - pb[i * w + j];
            d += e * e;
          }
    }
  return d;
}

static void
sort_keys (uint64_t *k, int n)
{
  /* Insertion sort below 16, else a quicksort on the median of three: the
   * keys are distinct (the position is in the low bits). */
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
          k[i] = k[j];
          k[j] = t;
          i++;
          j--;
        }
      /* Recurse on the smaller side. */
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

/* Puts the n smallest keys first (in no order), n < count. */
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
              k[i] = k[j];
              k[j] = t;
              i++;
              j--;
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

/* The group of the reference at position ref: positions into t->pos in
 * window order, their count returned. */
static int
find_group (const nlb_images *im, const nlbayes_step *st, int step, int ref, nlb_work *t)
{
  const int w = im->w, k = st->patch, r = st->search / 2;
  const size_t plane = (size_t) w * im->h;
  const int ry = ref / w, rx = ref % w;
  const int y0 = ry - r > 0 ? ry - r : 0, y1 = ry + r < im->h - k ? ry + r : im->h - k;
  const int x0 = rx - r > 0 ? rx - r : 0, x1 = rx + r < w - k ? rx + r : w - k;
  const float *planes = step ? im->basic : im->noisy;
  /* Step 1 compares the first channel (Y) of a colour image, step 2 all. */
  const int c1 = step || im->colours != 3 ? im->colours : 1;
  int count = 0, below = 0;
  for (int y = y0; y <= y1; y++)
    for (int x = x0; x <= x1; x++)
      {
        int q = y * w + x;
        float d = patch_distance (planes, plane, w, k, ref, q, 0, c1);
        below += step && d < st->tau;
        /* Distances are >= 0: their bits order as they do; the window
         * index breaks ties. */
        t->keys[count] = (uint64_t) cudafx_float_bits (d) << 32 | (uint32_t) count;
        count++;
      }
  int n = st->group > below ? st->group : below;
  if (n > count)
    n = count;
  if (n < count)
    select_keys (t->keys, count, n);
  /* The window order of the chosen ones, as the sums expect. */
  for (int i = 0; i < n; i++)
    t->keys[i] &= 0xffffffffu;
  sort_keys (t->keys, n);
  const int span = x1 - x0 + 1;
  for (int i = 0; i < n; i++)
    {
      int idx = (int) t->keys[i];
      t->pos[i] = (y0 + idx / span) * w + x0 + idx % span;
    }
  return n;
}

/* Gathers the channels [c0, c1) of the n patches at pos of planes into
 * out, n x ((c1 - c0) k^2), channel-major within a patch. */
static void
gather (const float *planes, size_t plane, int w, int k, const int *pos, int n, int c0, int c1, float *out)
{
  const int dims = (c1 - c0) * k * k;
  for (int g = 0; g < n; g++)
    {
      float *o = out + (size_t) g * dims;
      for (int c = c0; c < c1; c++)
        {
          const float *p = planes + c * plane + pos[g];
          for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
              *o++ = p[i * w + j];
        }
    }
}

/* Mean over the n rows of x (n x dims) into m, and x - m into out. */
static void
centre (const float *x, int n, int dims, float *m, float *out)
{
  for (int d = 0; d < dims; d++)
    m[d] = 0.0f;
  for (int g = 0; g < n; g++)
    for (int d = 0; d < dims; d++)
      m[d] += x[(size_t) g * dims + d];
  for (int d = 0; d < dims; d++)
    m[d] /= (float) n;
  for (int g = 0; g < n; g++)
    for (int d = 0; d < dims; d++)
      out[(size_t) g * dims + d] = x[(size_t) g * dims + d] - m[d];
}

/* cov = x^T x / (n - 1) of the centred rows x (n x dims), full matrix. */
CUDAFX_CPU_CLONES static void
covariance (const float *x, int n, int dims, float *cov)
{
  memset (cov, 0, (size_t) dims * dims * sizeof *cov);
  for (int g = 0; g < n; g++)
    {
      const float *r = x + (size_t) g * dims;
      for (int i = 0; i < dims; i++)
        {
          float a = r[i];
          float *ci = cov + (size_t) i * dims;
          for (int j = 0; j < dims; j++)
            ci[j] += a * r[j];
        }
    }
  const float inv = 1.0f / (float) (n - 1);
  for (size_t i = 0; i < (size_t) dims * dims; i++)
    cov[i] *= inv;
}

/* In place: the lower Cholesky factor L of a (dims x dims), a = L L^T.
 * 0 when a is not positive definite. */
static int
cholesky (float *a, int dims)
{
  for (int j = 0; j < dims; j++)
    {
      float *rj = a + (size_t) j * dims;
      float d = rj[j];
      for (int m = 0; m < j; m++)
        d -= rj[m] * rj[m];
      if (!(d > 1e-6f))
        return 0;
      d = sqrtf (d);
      rj[j] = d;
      const float inv = 1.0f / d;
      for (int i = j + 1; i < dims; i++)
        {
          float *ri = a + (size_t) i * dims;
          float s = ri[j];
          for (int m = 0; m < j; m++)
            s -= ri[m] * rj[m];
          ri[j] = s * inv;
        }
    }
  return 1;
}

/* z = (L L^T)^-1 b. */
static void
cholesky_solve (const float *l, int dims, const float *b, float *z)
{
  for (int i = 0; i < dims; i++)
    {
      const float *ri = l + (size_t) i * dims;
      float s = b[i];
      for (int m = 0; m < i; m++)
        s -= ri[m] * z[m];
      z[i] = s / ri[i];
    }
  for (int i = dims - 1; i >= 0; i--)
    {
      float s = z[i];
      for (int m = i + 1; m < dims; m++)
        s -= l[(size_t) m * dims + i] * z[m];
      z[i] = s / l[(size_t) i * dims + i];
    }
}

/* The variance of a group's values around each channel's mean, averaged
 * over the channels (x: n rows of `channels` blocks of kk values). */
static int flat_mode = -1;
static float
group_variance (const float *x, int n, int channels, int kk, float *channel_mean)
{
  if (flat_mode < 0) flat_mode = getenv ("NLB_FLATMODE") ? atoi (getenv ("NLB_FLATMODE")) : 0;
  const int dims = channels * kk;
  float var = 0.0f;
  for (int c = 0; c < channels; c++)
    {
      float s = 0.0f;
      for (int g = 0; g < n; g++)
        for (int i = 0; i < kk; i++)
          s += x[(size_t) g * dims + c * kk + i];
      float m = s / (float) (n * kk), v = 0.0f;
      channel_mean[c] = m;
      if (flat_mode == 0)
        {
          for (int g = 0; g < n; g++)
            for (int i = 0; i < kk; i++)
              {
                float e = x[(size_t) g * dims + c * kk + i] - m;
                v += e * e;
              }
          var += v / (float) (n * kk - 1);
        }
      else
        {
          for (int i = 0; i < kk; i++)
            {
              float mi = 0.0f, vi = 0.0f;
              for (int g = 0; g < n; g++) mi += x[(size_t) g * dims + c * kk + i];
              mi /= n;
              for (int g = 0; g < n; g++) { float e = x[(size_t) g * dims + c * kk + i] - mi; vi += e * e; }
              var += vi / (float) (n - 1) / kk;
            }
        }
    }
  return var / (float) channels;
}

/* Sets every patch of x to the mean patch (flat_mode 1) or the channel means. */
static void
flat_fill (float *x, const float *src, int n, int channels, int kk, const float *cm)
{
  const int dims = channels * kk;
  for (int c = 0; c < channels; c++)
    for (int i = 0; i < kk; i++)
      {
        float m = cm[c];
        if (flat_mode == 1)
          {
            m = 0.0f;
            for (int g = 0; g < n; g++) m += src[(size_t) g * dims + c * kk + i];
            m /= n;
          }
        for (int g = 0; g < n; g++)
          x[(size_t) g * dims + c * kk + i] = m;
      }
}

/* Restores the group of step 1 in t->noisy (n x colours k^2): each channel
 * by its own Wiener estimate, or the flat-area mean. */
static void
restore_step1 (const nlbayes_plan *p, int n, int k, nlb_work *t)
{
  const int colours = p->colours, kk = k * k, dims = colours * kk;
  const float s2 = p->sigma * p->sigma, bs2 = p->step[0].beta * s2;
  float cm[CUDAFX_NOISE_MAX_CHANNELS];
  if (p->flat_area && n > 1 && group_variance (t->noisy, n, colours, kk, cm) <= p->gamma * s2)
    {
      flat_fill (t->noisy, t->noisy, n, colours, kk, cm);
      return;
    }
  for (int c = 0; c < colours; c++)
    {
      /* This channel's block of every patch, as rows of kk. */
      for (int g = 0; g < n; g++)
        memcpy (t->aux + (size_t) g * kk, t->noisy + (size_t) g * dims + c * kk, kk * sizeof (float));
      centre (t->aux, n, kk, t->mean, t->centred);
      int ok = n > 1;
      if (ok)
        {
          covariance (t->centred, n, kk, t->cov);
          ok = cholesky (t->cov, kk);
        }
      for (int g = 0; g < n; g++)
        {
          float *out = t->noisy + (size_t) g * dims + c * kk;
          const float *x = t->centred + (size_t) g * kk;
          if (!ok)
            {
              /* A degenerate group (as many patches as values or fewer,
               * or no spread at all): its mean. */
              for (int i = 0; i < kk; i++)
                out[i] = t->mean[i];
              continue;
            }
          cholesky_solve (t->cov, kk, x, t->z);
          for (int i = 0; i < kk; i++)
            out[i] = t->mean[i] + (x[i] - bs2 * t->z[i]);
        }
    }
}

/* Restores the noisy group of step 2 in t->noisy from the basic group in
 * t->basic (both n x colours k^2). */
static void
restore_step2 (const nlbayes_plan *p, int n, int k, nlb_work *t)
{
  const int colours = p->colours, kk = k * k, dims = colours * kk;
  const float s2 = p->sigma * p->sigma, bs2 = p->step[1].beta * s2;
  float cm[CUDAFX_NOISE_MAX_CHANNELS];
  if (p->flat_area && n > 1 && group_variance (t->noisy, n, colours, kk, cm) <= p->gamma * s2)
    {
      group_variance (t->basic, n, colours, kk, cm);
      flat_fill (t->noisy, t->basic, n, colours, kk, cm);
      return;
    }
  if (n < 2)
    return; /* one patch: no statistics, the noisy values stay */
  centre (t->basic, n, dims, t->mean_b, t->centred);
  covariance (t->centred, n, dims, t->cov);
  /* aux = C_B + beta sigma^2 I, factored; C_B stays in cov. */
  memcpy (t->aux, t->cov, (size_t) dims * dims * sizeof (float));
  for (int i = 0; i < dims; i++)
    t->aux[(size_t) i * dims + i] += bs2;
  if (!cholesky (t->aux, dims))
    return;
  centre (t->noisy, n, dims, t->mean, t->centred);
  float *zb = t->basic; /* the basic group is no longer needed: one z per patch */
  for (int g = 0; g < n; g++)
    cholesky_solve (t->aux, dims, t->centred + (size_t) g * dims, zb + (size_t) g * dims);
  for (int g = 0; g < n; g++)
    {
      const float *z = zb + (size_t) g * dims;
      float *out = t->noisy + (size_t) g * dims;
      for (int i = 0; i < dims; i++)
        {
          const float *ci = t->cov + (size_t) i * dims;
          float s = 0.0f;
          for (int m = 0; m < dims; m++)
            s += ci[m] * z[m];
          out[i] = t->mean[i] + s;
        }
    }
}

/* Adds the n restored patches of t->noisy to the sums. */
static void
aggregate (const nlb_images *im, int k, int n, const nlb_work *t)
{
  const int w = im->w, kk = k * k, dims = im->colours * kk;
  const size_t plane = (size_t) w * im->h;
  for (int g = 0; g < n; g++)
    {
      const float *v = t->noisy + (size_t) g * dims;
      for (int c = 0; c < im->colours; c++)
        {
          float *o = im->num + c * plane + t->pos[g];
          for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
              o[i * w + j] += v[c * kk + i * k + j];
        }
      float *d = im->den + t->pos[g];
      for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
          d[i * w + j] += 1.0f;
    }
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
  const int tiles_x = (im->w + side - 1) / side, tiles_y = (im->h + side - 1) / side;
  const int threads = cudafx_thread_count (o);
  nlb_work *work = calloc ((size_t) threads, sizeof *work);
  cudafx_status s = work ? CUDAFX_OK : cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory");
  for (int i = 0; !s && i < threads; i++)
    if (!work_alloc (&work[i], candidates, dims))
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
          while (i < nx && gx[i] < t * side)
            i++;
          tile_x[t] = i;
        }
      for (int t = 0, i = 0; t <= tiles_y; t++)
        {
          while (i < ny && gy[i] < t * side)
            i++;
          tile_y[t] = i;
        }
    }
  for (int ty = 0; !s && ty < tiles_y; ty++)
    {
      for (int parity = 0; parity < 2; parity++)
        {
#pragma omp parallel for num_threads (threads) schedule (dynamic, 1)
          for (int tx = parity; tx < tiles_x; tx += 2)
            {
              nlb_work *t = &work[omp_get_thread_num ()];
              for (int iy = tile_y[ty]; iy < tile_y[ty + 1]; iy++)
                {
                  for (int ix = tile_x[tx]; ix < tile_x[tx + 1]; ix++)
                    {
                      int ref = gy[iy] * im->w + gx[ix];
                      int n = find_group (im, st, step, ref, t);
                      const size_t plane = (size_t) im->w * im->h;
                      gather (im->noisy, plane, im->w, k, t->pos, n, 0, p->colours, t->noisy);
                      if (step)
                        {
                          gather (im->basic, plane, im->w, k, t->pos, n, 0, p->colours, t->basic);
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
divide (const float *num, const float *den, int colours, size_t plane, float *out)
{
  for (int c = 0; c < colours; c++)
    for (size_t i = 0; i < plane; i++)
      out[c * plane + i] = num[c * plane + i] / den[i];
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
  if (__builtin_mul_overflow (plane, (size_t) (3 * colours + 1) * sizeof (float), &bytes))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: image too large");
  float *noisy = malloc (plane * colours * sizeof (float));
  float *basic = malloc (plane * colours * sizeof (float));
  float *num = calloc (plane * colours, sizeof (float));
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
          memset (num, 0, plane * colours * sizeof (float));
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

typedef struct {
  const cudafx_image *src;
  cudafx_image       *dst;
  nlbayes_plan        plan;
  const nlmeans_vst  *vst;  /* camera noise: denoise behind it */
} nlbayes_call;

/* Behind the transform: src's colour channels into an f32 image whose noise
 * is the plan's sigma, denoised on backend b, and transformed back. */
static cudafx_status
run_stabilised (const cudafx_backend_ops *b, const nlbayes_call *call, const cudafx_options *o)
{
  const cudafx_image *src = call->src;
  const int colours = call->plan.colours;
  size_t row = (size_t) src->width * colours * sizeof (float), bytes;
  if (__builtin_mul_overflow (row, (size_t) src->height, &bytes))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: image too large");
  float *t = malloc (bytes), *u = malloc (bytes);
  cudafx_status s = CUDAFX_OK;
  if (!t || !u)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: out of memory for the transformed image");
  else
    {
      cudafx_image ti = { t, src->width, src->height, colours, 0, CUDAFX_F32, row };
      cudafx_image ui = ti;
      ui.data = u;
      nlmeans_vst_forward (call->vst, src, &ti, o);
      if (!(s = b->nlbayes (&ti, &ui, &call->plan, o)))
        nlmeans_vst_inverse (call->vst, &ui, src, call->dst, o);
    }
  free (t);
  free (u);
  return s;
}

static cudafx_status
nlbayes_run (const cudafx_backend_ops *b, void *call_, const cudafx_options *o)
{
  const nlbayes_call *call = call_;
  if (call->vst)
    return run_stabilised (b, call, o);
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
      if (p->noise.signal_dependent)
        {
          if (p->noise.channels != colours)
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                                "nl-bayes: the noise model has %d channels, the image %d colour channels",
                                p->noise.channels, colours);
          est.noise = p->noise;
        }
    }
  else
    {
      cudafx_options eo = *o;
      eo.progress = NULL; /* the estimate is quick: progress starts with the denoising */
      eo.rows_ready = NULL;
      if ((s = cudafx_nlmeans_estimate (src, &eo, &est)))
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
  /* A noiseless image still gets a plan: the smallest sigma of the table. */
  if (!(sigma >= 0.1))
    sigma = 0.1;
  choose_plan (sigma, colours, p->flat_area != 0, &call.plan);
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
      for (double s = 0.5; s <= 255.0; s += 0.5)
        {
          choose_plan (s, colours, p->flat_area != 0, &plan);
          int h = nlbayes_halo (&plan);
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
  if (!(sigma >= 0.1))
    sigma = 0.1;
  choose_plan (sigma, colours, p->flat_area != 0, &plan);
  return nlbayes_halo (&plan);
}
