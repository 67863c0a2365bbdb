/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Noise level of an image from the image alone, robust to texture.
 *
 * A residual filter (a Laplacian) cannot tell fine texture from noise: fur
 * or foliage raises its estimate. Here the noise is measured only where the
 * image has no structure the patches could carry, in directions of patch
 * space that the image's structure does not reach:
 *
 * - Weak-texture patches (Liu, Tanaka, Okutomi, "Single-image noise level
 *   estimation for blind denoising", IEEE TIP 2013): a 7x7 patch's texture
 *   strength is its gradient energy xi = |D_h p|^2 + |D_v p|^2 (differences
 *   of horizontal and vertical neighbours inside the patch). Of pure noise
 *   of variance s^2, xi / s^2 is about Gamma (N/2, 2 tr (D^T D) / N), N the
 *   patch's pixels; patches below its 0.99 quantile for the current s^2
 *   (Wilson and Hilferty's approximation of the quantile) are kept, s^2 is
 *   estimated again on them, and so on until the selection settles.
 * - The noise's share of patch space (Chen, Zhu, Heng, "An efficient
 *   statistical method for image noise level estimation", ICCV 2015):
 *   natural patches lie near a low-dimensional subspace, so the smallest
 *   eigenvalues of the patches' covariance are noise alone. Their
 *   distribution (Marchenko-Pastur) has its mean at the noise variance, so
 *   the noise eigenvalues are the largest set of smallest ones whose mean
 *   does not exceed their median, and the estimate is that mean. Unlike the
 *   smallest eigenvalue alone (Liu et al.), it is not biased low by the
 *   spread of sample eigenvalues.
 *
 * Brightness-dependent noise (camera noise) needs the variance per
 * brightness level. The patches are binned by their mean into NOISE_LEVELS
 * levels; the covariance is of the patches less their level's mean patch,
 * each divided by its level's current variance, so that noise is white
 * with variance 1 in every level and one eigen-decomposition finds the
 * noise directions for all; a level's variance is the mean energy per
 * dimension of its weak-texture patches in those directions. The texture
 * threshold of a patch is its level's. Patches holding a clipped value (0
 * or 255: clipping hides noise) are left out.
 *
 * Correlation: on the weak-texture patches, less the plane fitted to each
 * (what is left is noise and only a little texture), the covariance of the
 * residuals, each patch divided by its level's variance. Removing the
 * plane takes part of smoothed noise with it, so the noise's stationary
 * autocovariance R (lags up to LAG) is fitted to it by least squares: the
 * residuals' covariance is M C(R) M, M the projection that removes the
 * plane, linear in R. The correlations are R's over R(0); R(0) itself is
 * the noise's whole variance over the share the noise directions see
 * (variance_ratio: 1 for white noise). Between channels: the residuals'
 * products at one pixel.
 *
 * The sample is bounded: at most MAX_PATCHES patches a channel on an
 * evenly spaced grid. Sums run over fixed blocks of patches in double and
 * the blocks are added in order, so the estimate does not depend on the
 * thread count; it runs on the host image for every backend. */
#include "noise_estimate.h"
#include "engine.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define SIDE 7
#define N (SIDE * SIDE)
#define TRI (N * (N + 1) / 2)
#define MAX_PATCHES (1 << 14)
#define BLOCK 512
#define LEVEL_MIN 40     /* weak-texture patches a level's variance needs */
#define ITERATIONS 10
#define SETTLED 2e-3 /* relative change of the variances that ends the iterations */
#define QUANTILE_Z 2.3263478740408408 /* the 0.99 quantile of the standard normal */

/* The patches of one channel and what the iterations keep of them. */
typedef struct {
  float   *p;      /* n x N values, 0..255 */
  uint8_t *valid;  /* no clipped value */
  uint8_t *sel;    /* weak texture */
  uint8_t *level;
  float   *xi;     /* gradient energy */
  double   s2[NOISE_LEVELS]; /* current variance per level (filled in where a level has none) */
} channel_patches;

/* acc (the upper triangle of an N x N matrix, row by row) += d d^T. */
CUDAFX_CPU_CLONES static void
add_outer (double *restrict acc, const double *restrict d)
{
  for (int j = 0; j < N; j++)
    {
      const double dj = d[j];
      for (int k = j; k < N; k++)
        acc[k - j] += dj * d[k];
      acc += N - j;
    }
}

/* sum over the m rows b of basis of (b . d)^2. */
CUDAFX_CPU_CLONES static double
projected_energy (const double (*restrict basis)[N], int m, const double *restrict d)
{
  double sum = 0;
  for (int k = 0; k < m; k++)
    {
      double dot = 0;
      for (int j = 0; j < N; j++)
        dot += basis[k][j] * d[j];
      sum += dot * dot;
    }
  return sum;
}

/* Eigen-decomposition of the symmetric n x n matrix a (n <= N; destroyed):
 * eigenvalues in w, eigenvectors in the columns of v. Householder reduction
 * to tridiagonal form, then the implicit symmetric QR algorithm with
 * Wilkinson's shift, the reflections and rotations accumulated into v
 * (Golub, Van Loan, "Matrix Computations", 4th ed., algorithms 8.3.1 and
 * 8.3.2, with the deflation of section 8.3.5): fewer operations than
 * Jacobi rotations on the estimate's serial path (docs/BENCHMARKS.md,
 * "Noise estimate", has the cost). */
static void
symmetric_eigen (double *a, int n, double *w, double *v)
{
  double e[N], u[N], p[N];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      v[i * n + j] = i == j;
  /* A <- H A H column by column, H = I - beta u u^T taking column k's part
   * below the diagonal to alpha e_1; V <- V H. */
  for (int k = 0; k + 2 < n; k++)
    {
      const int m = n - k - 1;
      double norm = 0;
      for (int i = 0; i < m; i++)
        u[i] = a[(k + 1 + i) * n + k], norm += u[i] * u[i];
      norm = sqrt (norm);
      const double alpha = u[0] > 0 ? -norm : norm;
      u[0] -= alpha;
      double uu = 0;
      for (int i = 0; i < m; i++)
        uu += u[i] * u[i];
      if (uu == 0)
        continue; /* the column is already reduced */
      const double beta = 2 / uu;
      double up = 0;
      for (int i = 0; i < m; i++)
        {
          double t = 0;
          for (int j = 0; j < m; j++)
            t += a[(k + 1 + i) * n + k + 1 + j] * u[j];
          p[i] = beta * t;
          up += u[i] * p[i];
        }
      const double half = beta * up / 2;
      for (int i = 0; i < m; i++)
        p[i] -= half * u[i];
      for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
          a[(k + 1 + i) * n + k + 1 + j] -= u[i] * p[j] + p[i] * u[j];
      a[(k + 1) * n + k] = a[k * n + k + 1] = alpha;
      for (int i = 1; i < m; i++)
        a[(k + 1 + i) * n + k] = a[k * n + k + 1 + i] = 0;
      for (int r = 0; r < n; r++)
        {
          double t = 0;
          for (int j = 0; j < m; j++)
            t += v[r * n + k + 1 + j] * u[j];
          t *= beta;
          for (int j = 0; j < m; j++)
            v[r * n + k + 1 + j] -= t * u[j];
        }
    }
  for (int i = 0; i < n; i++)
    w[i] = a[i * n + i], e[i] = i + 1 < n ? a[(i + 1) * n + i] : 0;

  /* QR steps on the unreduced block [l, m] that ends the matrix's
   * undeflated part; e[i] couples i and i + 1. */
  for (int m = n - 1, steps = 0; m > 0 && steps < 30 * n;)
    {
      if (fabs (e[m - 1]) <= DBL_EPSILON * (fabs (w[m - 1]) + fabs (w[m])))
        {
          e[m - 1] = 0;
          m--;
          continue;
        }
      int l = m - 1;
      while (l > 0 && fabs (e[l - 1]) > DBL_EPSILON * (fabs (w[l - 1]) + fabs (w[l])))
        l--;
      if (l > 0)
        e[l - 1] = 0;
      steps++;
      const double dd = (w[m - 1] - w[m]) / 2, em = e[m - 1];
      const double mu = w[m] - em * em / (dd + copysign (hypot (dd, em), dd));
      double x = w[l] - mu, z = e[l];
      for (int k = l; k < m; k++)
        {
          /* The rotation in the plane (k, k + 1) that zeroes z against x:
           * the shift's first column, then each step's bulge. */
          const double r = hypot (x, z), c = x / r, s = z / r;
          if (k > l)
            e[k - 1] = r;
          const double dk = w[k], dk1 = w[k + 1], ek = e[k];
          w[k] = c * c * dk + 2 * c * s * ek + s * s * dk1;
          w[k + 1] = s * s * dk - 2 * c * s * ek + c * c * dk1;
          e[k] = c * s * (dk1 - dk) + (c * c - s * s) * ek;
          if (k + 1 < m)
            {
              x = e[k];
              z = s * e[k + 1];
              e[k + 1] *= c;
            }
          for (int r2 = 0; r2 < n; r2++)
            {
              const double vk = v[r2 * n + k], vk1 = v[r2 * n + k + 1];
              v[r2 * n + k] = c * vk + s * vk1;
              v[r2 * n + k + 1] = c * vk1 - s * vk;
            }
        }
    }
}

/* Chen et al.'s count of noise eigenvalues among w (any order): the
 * largest m such that the m smallest have a mean no larger than their
 * median; their indices in order[0..m). */
static int
noise_dimensions (const double *w, int n, int *order)
{
  for (int i = 0; i < n; i++)
    order[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort, ascending */
    for (int j = i; j > 0 && w[order[j]] < w[order[j - 1]]; j--)
      {
        int t = order[j];
        order[j] = order[j - 1];
        order[j - 1] = t;
      }
  double sum = 0;
  for (int i = 0; i < n; i++)
    sum += w[order[i]];
  for (int m = n; m > 1; m--)
    {
      double med = m % 2 ? w[order[m / 2]] : 0.5 * (w[order[m / 2 - 1]] + w[order[m / 2]]);
      if (sum / m <= med)
        return m;
      sum -= w[order[m - 1]];
    }
  return 1;
}

/* The 0.99 quantile of xi / s^2 for pure noise: Gamma (N/2, 2 tr / N) is
 * tr / N chi^2 (N). */
static double
texture_quantile (double tr)
{
  const double k = 2.0 / (9.0 * N), c = 1 - k + QUANTILE_Z * sqrt (k);
  return tr * c * c * c;
}

/* Variances of levels without an estimate from their neighbours (linear
 * between, constant beyond); all 1 when none has one. */
static void
fill_levels (const double *var, double *s2)
{
  int first = -1, last = -1;
  for (int l = 0; l < NOISE_LEVELS; l++)
    if (var[l] > 0)
      last = l, first = first < 0 ? l : first;
  for (int l = 0; l < NOISE_LEVELS; l++)
    {
      if (first < 0)
        s2[l] = 1;
      else if (l <= first)
        s2[l] = var[first];
      else if (l >= last)
        s2[l] = var[last];
      else if (var[l] > 0)
        s2[l] = var[l];
      else
        {
          int lo = l, hi = l;
          while (var[lo] <= 0)
            lo--;
          while (var[hi] <= 0)
            hi++;
          s2[l] = var[lo] + (var[hi] - var[lo]) * (l - lo) / (double) (hi - lo);
        }
    }
}

static int
cmp_float (const void *a, const void *b)
{
  float x = *(const float *) a, y = *(const float *) b;
  return (x > y) - (x < y);
}

/* The variance of flat noise from levels' variances: their mean by the
 * patches they rest on, over the levels of LEVEL_MIN patches or more that
 * keep NOISE_CLIP_MARGIN sigmas from 0 and 255 (or, when clipping or a
 * small image leaves none, all). */
static double
flat_variance (const double *var, const double *y, const int *count)
{
  double kept = 0, kept_n = 0, all = 0, all_n = 0;
  for (int l = 0; l < NOISE_LEVELS; l++)
    {
      if (var[l] <= 0)
        continue;
      all += count[l] * var[l], all_n += count[l];
      const double sl = sqrt (var[l]);
      if (count[l] >= LEVEL_MIN && y[l] >= NOISE_CLIP_MARGIN * sl && y[l] <= 255 - NOISE_CLIP_MARGIN * sl)
        kept += count[l] * var[l], kept_n += count[l];
    }
  return kept_n > 0 ? kept / kept_n : all_n > 0 ? all / all_n : 0;
}

/* Selects the weak-texture patches for the levels' variances cp->s2; at
 * least floor of them (the least textured relative to their level's
 * noise) so that a nearly clean image still has a sample. Returns whether
 * the selection changed. */
static int
select_patches (channel_patches *cp, int n, double q, int floor_count, float *scratch)
{
  int changed = 0, count = 0, valid = 0;
  for (int i = 0; i < n; i++)
    if (cp->valid[i])
      {
        float r = (float) (cp->xi[i] / cp->s2[cp->level[i]]);
        scratch[valid++] = r;
        count += r < q;
      }
  float limit = (float) q;
  int strict = 1;
  if (count < floor_count && valid > 0)
    {
      qsort (scratch, valid, sizeof *scratch, cmp_float);
      limit = scratch[(floor_count < valid ? floor_count : valid) - 1];
      strict = 0;
    }
  for (int i = 0; i < n; i++)
    {
      int s = 0;
      if (cp->valid[i])
        {
          float r = (float) (cp->xi[i] / cp->s2[cp->level[i]]);
          s = strict ? r < limit : r <= limit;
        }
      changed |= s != cp->sel[i];
      cp->sel[i] = (uint8_t) s;
    }
  return changed;
}

/* The per-level variances of one channel's patches (see the header) into
 * e; with flat, one variance for all levels (every level's threshold and
 * weight the same: Liu et al.'s single threshold, so that a level of fine
 * texture cannot raise its own as a level's variance does) into e->flat,
 * starting from the selection cp->sel the levels' run left. cp->sel and
 * cp->s2 end as the last iteration's. */
static cudafx_status
estimate_channel (channel_patches *cp, int n, int flat, noise_estimate *e, int c)
{
  const int blocks = (n + BLOCK - 1) / BLOCK;
  double *mean_acc = calloc ((size_t) blocks * NOISE_LEVELS * (N + 2), sizeof *mean_acc);
  double *cov_acc = malloc ((size_t) blocks * TRI * sizeof *cov_acc);
  double *energy = malloc ((size_t) n * sizeof *energy);
  float *scratch = malloc ((size_t) n * sizeof *scratch);
  double mu[NOISE_LEVELS][N], cov[N * N], w[N], v[N * N], basis[N][N];
  int order[N];
  if (!mean_acc || !cov_acc || !energy || !scratch)
    {
      free (mean_acc);
      free (cov_acc);
      free (energy);
      free (scratch);
      return CUDAFX_ERR_NO_MEMORY; /* the caller says so: this runs in a task */
    }

  /* D^T D's trace: every difference inside the patch counts its two pixels. */
  const double q = texture_quantile (2.0 * 2 * SIDE * (SIDE - 1));
  int valid = 0;
  for (int i = 0; i < n; i++)
    valid += cp->valid[i];
  const int floor_count = valid / 20 > 20 * N ? valid / 20 : 20 * N;
  if (!flat)
    {
      for (int l = 0; l < NOISE_LEVELS; l++)
        cp->s2[l] = INFINITY;
      for (int i = 0; i < n; i++)
        cp->sel[i] = cp->valid[i];
    }
  else
    {
      const double v = flat_variance (e->var[c], e->y[c], e->count[c]);
      for (int l = 0; l < NOISE_LEVELS; l++)
        cp->s2[l] = v > 0 ? v : 1;
      e->flat[c] = v;
      select_patches (cp, n, q, floor_count, scratch);
    }

  for (int it = 0; it < ITERATIONS; it++)
    {
      /* The levels' mean patches. */
      memset (mean_acc, 0, (size_t) blocks * NOISE_LEVELS * (N + 2) * sizeof *mean_acc);
#pragma omp taskloop grainsize (1)
      for (int b = 0; b < blocks; b++)
        {
          double *acc = mean_acc + (size_t) b * NOISE_LEVELS * (N + 2);
          for (int i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++)
            if (cp->sel[i])
              {
                double *a = acc + (size_t) cp->level[i] * (N + 2);
                const float *p = cp->p + (size_t) i * N;
                double sum = 0;
                for (int j = 0; j < N; j++)
                  a[j] += p[j], sum += p[j];
                a[N] += 1;
                a[N + 1] += sum / N;
              }
        }
      double lcount[NOISE_LEVELS] = { 0 }, ymean[NOISE_LEVELS] = { 0 };
      memset (mu, 0, sizeof mu);
      for (int b = 0; b < blocks; b++)
        for (int l = 0; l < NOISE_LEVELS; l++)
          {
            const double *a = mean_acc + ((size_t) b * NOISE_LEVELS + l) * (N + 2);
            for (int j = 0; j < N; j++)
              mu[l][j] += a[j];
            lcount[l] += a[N];
            ymean[l] += a[N + 1];
          }
      double total = 0;
      for (int l = 0; l < NOISE_LEVELS; l++)
        {
          total += lcount[l];
          for (int j = 0; j < N && lcount[l] > 0; j++)
            mu[l][j] /= lcount[l];
        }
      if (total < 2 * N)
        break;

      /* Covariance of the patches less their level's mean, each level's
       * divided by its variance (none on the first pass). */
#pragma omp taskloop grainsize (1) shared (mu)
      for (int b = 0; b < blocks; b++)
        {
          double *acc = cov_acc + (size_t) b * TRI, d[N];
          memset (acc, 0, TRI * sizeof *acc);
          for (int i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++)
            if (cp->sel[i])
              {
                const int l = cp->level[i];
                const float *p = cp->p + (size_t) i * N;
                const double s = isfinite (cp->s2[l]) ? 1.0 / sqrt (cp->s2[l]) : 1.0;
                for (int j = 0; j < N; j++)
                  d[j] = (p[j] - mu[l][j]) * s;
                add_outer (acc, d);
              }
        }
      double tri[TRI] = { 0 };
      for (int b = 0; b < blocks; b++)
        for (int t = 0; t < TRI; t++)
          tri[t] += cov_acc[(size_t) b * TRI + t];
      for (int j = 0, t = 0; j < N; j++)
        for (int k = j; k < N; k++, t++)
          cov[j * N + k] = cov[k * N + j] = tri[t] / total;
      symmetric_eigen (cov, N, w, v);
      /* The noise dimensions' energy: directly, or what the others leave
       * of the whole when they are fewer. */
      const int m = noise_dimensions (w, N, order), direct = m <= N / 2;
      const int nb = direct ? m : N - m;
      for (int d = 0; d < nb; d++)
        for (int j = 0; j < N; j++)
          basis[d][j] = v[j * N + order[direct ? d : m + d]];

      /* Each weak-texture patch's energy per noise dimension. */
#pragma omp taskloop grainsize (BLOCK) shared (mu, basis)
      for (int i = 0; i < n; i++)
        {
          energy[i] = 0;
          if (!cp->sel[i])
            continue;
          const int l = cp->level[i];
          const float *p = cp->p + (size_t) i * N;
          double whole = 0, d[N];
          for (int j = 0; j < N; j++)
            d[j] = p[j] - mu[l][j], whole += d[j] * d[j];
          const double part = projected_energy ((const double (*)[N]) basis, nb, d);
          energy[i] = (direct ? part : whole - part) / m;
        }
      double var[NOISE_LEVELS] = { 0 }, y[NOISE_LEVELS];
      int count[NOISE_LEVELS];
      for (int i = 0; i < n; i++)
        if (cp->sel[i])
          var[cp->level[i]] += energy[i];
      for (int l = 0; l < NOISE_LEVELS; l++)
        {
          count[l] = (int) lcount[l];
          y[l] = lcount[l] > 0 ? ymean[l] / lcount[l] : (l + 0.5) * 256.0 / NOISE_LEVELS;
          var[l] = lcount[l] > 0 ? var[l] / lcount[l] : 0;
        }
      double before[NOISE_LEVELS];
      memcpy (before, cp->s2, sizeof before);
      if (flat)
        {
          const double v = flat_variance (var, y, count);
          for (int l = 0; l < NOISE_LEVELS; l++)
            cp->s2[l] = v > 0 ? v : 1;
          e->flat[c] = v;
        }
      else
        {
          for (int l = 0; l < NOISE_LEVELS; l++)
            var[l] = count[l] >= LEVEL_MIN ? var[l] : 0;
          memcpy (e->var[c], var, sizeof var);
          memcpy (e->y[c], y, sizeof y);
          memcpy (e->count[c], count, sizeof count);
          fill_levels (var, cp->s2);
        }
      /* Settled: no level's variance moved by SETTLED (patches at the
       * threshold may swap in and out for ever). */
      int settled = 1;
      for (int l = 0; l < NOISE_LEVELS; l++)
        settled &= fabs (cp->s2[l] - before[l]) <= SETTLED * cp->s2[l];
      if (settled || !select_patches (cp, n, q, floor_count, scratch))
        break;
    }

  free (mean_acc);
  free (cov_acc);
  free (energy);
  free (scratch);
  return CUDAFX_OK;
}

/* Lags of the noise's autocovariance the correlation fit solves for:
 * |dx|, |dy| <= LAG, one of each pair (dx, dy), (-dx, -dy); longer lags are
 * taken as 0. */
#define LAG 3
#define LAGS (1 + LAG + LAG * (2 * LAG + 1))

/* The lag class of the offset from pixel i to pixel j of the patch, or -1
 * beyond LAG. */
static int
lag_class (int i, int j)
{
  int dx = j % SIDE - i % SIDE, dy = j / SIDE - i / SIDE;
  if (dy < 0 || (dy == 0 && dx < 0))
    dx = -dx, dy = -dy;
  if (dx > LAG || dx < -LAG || dy > LAG)
    return -1;
  return dy == 0 ? dx : 1 + LAG + (dy - 1) * (2 * LAG + 1) + dx + LAG;
}

/* Solves the n x n system a x = b (a symmetric positive definite; both
 * destroyed) by Cholesky; 0 when a is not. */
static int
solve_spd (double *a, double *b, int n)
{
  for (int j = 0; j < n; j++)
    {
      double d = a[j * n + j];
      for (int k = 0; k < j; k++)
        d -= a[j * n + k] * a[j * n + k];
      if (!(d > 0))
        return 0;
      d = sqrt (d);
      a[j * n + j] = d;
      for (int i = j + 1; i < n; i++)
        {
          double t = a[i * n + j];
          for (int k = 0; k < j; k++)
            t -= a[i * n + k] * a[j * n + k];
          a[i * n + j] = t / d;
        }
    }
  for (int i = 0; i < n; i++)
    {
      for (int k = 0; k < i; k++)
        b[i] -= a[i * n + k] * b[k];
      b[i] /= a[i * n + i];
    }
  for (int i = n - 1; i >= 0; i--)
    {
      for (int k = i + 1; k < n; k++)
        b[i] -= a[k * n + i] * b[k];
      b[i] /= a[i * n + i];
    }
  return 1;
}

/* The noise's autocovariance R (LAGS values, R[0] the variance) whose
 * patches, less their planes, have the covariance s (N x N): s = M C(R) M
 * with C(R)_ij = R (lag of i, j) and M = I - H the projection that removes
 * the plane, linear in R, fitted by least squares over all of s's entries.
 * 0 when the system is singular. */
static int
fit_autocovariance (const double *s, double *r)
{
  static double g[LAGS][N * N]; /* M B_k M, B_k the indicator of lag class k */
  static int ready;
  double m[N * N], a[LAGS * LAGS];
#pragma omp critical (noise_estimate_lags)
  if (!ready)
    {
      double h[3][N], norm[3] = { 0 };
      for (int i = 0; i < N; i++)
        h[0][i] = 1, h[1][i] = i % SIDE - (SIDE - 1) / 2.0, h[2][i] = i / SIDE - (SIDE - 1) / 2.0;
      for (int k = 0; k < 3; k++)
        for (int i = 0; i < N; i++)
          norm[k] += h[k][i] * h[k][i];
      for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
          {
            m[i * N + j] = i == j;
            for (int k = 0; k < 3; k++)
              m[i * N + j] -= h[k][i] * h[k][j] / norm[k];
          }
      for (int k = 0; k < LAGS; k++)
        {
          /* (M B_k)_ij = sum over l of class k with j: M_il */
          static double mb[N * N];
          memset (mb, 0, sizeof mb);
          for (int l = 0; l < N; l++)
            for (int j = 0; j < N; j++)
              if (lag_class (l, j) == k)
                for (int i = 0; i < N; i++)
                  mb[i * N + j] += m[i * N + l];
          for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
              {
                double t = 0;
                for (int l = 0; l < N; l++)
                  t += mb[i * N + l] * m[l * N + j];
                g[k][i * N + j] = t;
              }
        }
      ready = 1;
    }
  for (int k = 0; k < LAGS; k++)
    {
      r[k] = 0;
      for (int t = 0; t < N * N; t++)
        r[k] += g[k][t] * s[t];
      for (int l = 0; l <= k; l++)
        {
          double t = 0;
          for (int u = 0; u < N * N; u++)
            t += g[k][u] * g[l][u];
          a[k * LAGS + l] = a[l * LAGS + k] = t;
        }
    }
  return solve_spd (a, r, LAGS);
}

/* The residual of patch p less its least-squares plane (the grid's
 * coordinates are centred, so mean and slopes are independent). */
static void
detrend (const float *p, double *r)
{
  double mean = 0, gu = 0, gv = 0, norm = 0;
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++)
      {
        double u = x - (SIDE - 1) / 2.0, v = y - (SIDE - 1) / 2.0, val = p[y * SIDE + x];
        mean += val, gu += u * val, gv += v * val;
        norm += u * u;
      }
  mean /= N;
  gu /= norm, gv /= norm; /* sum v^2 = sum u^2 on the square */
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++)
      r[y * SIDE + x] = p[y * SIDE + x] - mean - gu * (x - (SIDE - 1) / 2.0) - gv * (y - (SIDE - 1) / 2.0);
}

/* One block's sums for estimate_correlation. */
typedef struct {
  double tri[CUDAFX_NOISE_MAX_CHANNELS][TRI];
  double cross[CUDAFX_NOISE_MAX_CHANNELS][CUDAFX_NOISE_MAX_CHANNELS];
  double cross_sq[CUDAFX_NOISE_MAX_CHANNELS][CUDAFX_NOISE_MAX_CHANNELS][2];
  int    patches[CUDAFX_NOISE_MAX_CHANNELS];
} correlation_sums;

/* The correlations of the noise (see the header) on the weak-texture
 * patches of every channel: per channel the covariance of the detrended
 * patches, each divided by its level's variance, and the autocovariance
 * fitted to it; between channels the detrended patches' products at one
 * pixel. */
static void
estimate_correlation (channel_patches *cp, int colours, int n, int threads, noise_estimate *e)
{
  /* Blocks of patches summed on their own and then in order, as
   * estimate_channel's, so that the sums do not depend on the threads. */
  const int blocks = (n + BLOCK - 1) / BLOCK;
  correlation_sums *sums = calloc ((size_t) blocks, sizeof *sums);
  if (!sums)
    return; /* the correlation is a report: none rather than a failure */
#pragma omp parallel for num_threads (threads) schedule (static)
  for (int b = 0; b < blocks; b++)
    {
      correlation_sums *bs = &sums[b];
      for (int i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++)
        {
          double r[CUDAFX_NOISE_MAX_CHANNELS][N];
          for (int c = 0; c < colours; c++)
            {
              if (!cp[c].sel[i])
                continue;
              const double s = cp[c].s2[cp[c].level[i]], k = 1 / sqrt (s);
              double d[N];
              detrend (cp[c].p + (size_t) i * N, r[c]);
              for (int j = 0; j < N; j++)
                d[j] = r[c][j] * k;
              add_outer (bs->tri[c], d);
              bs->patches[c]++;
              for (int dch = 0; dch < c; dch++)
                if (cp[dch].sel[i])
                  {
                    double sd = cp[dch].s2[cp[dch].level[i]], xy = 0, xx = 0, yy = 0;
                    for (int j = 0; j < N; j++)
                      xy += r[c][j] * r[dch][j], xx += r[c][j] * r[c][j], yy += r[dch][j] * r[dch][j];
                    bs->cross[c][dch] += xy / sqrt (s * sd);
                    bs->cross_sq[c][dch][0] += xx / s;
                    bs->cross_sq[c][dch][1] += yy / sd;
                  }
            }
        }
    }
  correlation_sums *all = &sums[0];
  for (int b = 1; b < blocks; b++)
    for (int c = 0; c < colours; c++)
      {
        for (int t = 0; t < TRI; t++)
          all->tri[c][t] += sums[b].tri[c][t];
        all->patches[c] += sums[b].patches[c];
        for (int d = 0; d < c; d++)
          {
            all->cross[c][d] += sums[b].cross[c][d];
            all->cross_sq[c][d][0] += sums[b].cross_sq[c][d][0];
            all->cross_sq[c][d][1] += sums[b].cross_sq[c][d][1];
          }
      }
  const int *patches = all->patches;
  double lag[LAGS] = { 0 }, ratio = 0;
  int counted = 0;
  for (int c = 0; c < colours; c++)
    {
      double cov[N * N], r[LAGS];
      if (patches[c] < 2 * N)
        continue;
      for (int j = 0, t = 0; j < N; j++)
        for (int k = j; k < N; k++, t++)
          cov[j * N + k] = cov[k * N + j] = all->tri[c][t] / patches[c];
      if (!fit_autocovariance (cov, r) || !(r[0] > 0))
        continue;
      for (int k = 0; k < LAGS; k++)
        lag[k] += r[k] / r[0];
      ratio += r[0];
      counted++;
    }
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 3; x++)
      e->spatial[y][x] = 0;
  for (int dy = -1; dy <= 1; dy++)
    for (int dx = -1; dx <= 1; dx++)
      {
        /* pixel 0 of a patch row 1 column 1 to its neighbour: the class */
        int k = lag_class (SIDE + 1, (1 + dy) * SIDE + 1 + dx);
        e->spatial[1 + dy][1 + dx] = counted ? lag[k] / counted : 0;
      }
  e->spatial[1][1] = 1;
  e->variance_ratio = counted ? ratio / counted : 1;
  double ch = 0;
  int pairs = 0;
  for (int c = 0; c < colours; c++)
    for (int d = 0; d < c; d++)
      if (all->cross_sq[c][d][0] > 0 && all->cross_sq[c][d][1] > 0)
        {
          ch += all->cross[c][d] / sqrt (all->cross_sq[c][d][0] * all->cross_sq[c][d][1]);
          pairs++;
        }
  e->channel = pairs ? ch / pairs : 0;
  free (sums);
}

cudafx_status
noise_estimate_image (const cudafx_image *src, int colours, const cudafx_options *o, noise_estimate *e)
{
  memset (e, 0, sizeof *e);
  e->colours = colours;
  e->spatial[1][1] = 1;
  e->variance_ratio = 1;
  const int W = src->width, H = src->height;
  if (W < SIDE || H < SIDE || colours < 1)
    return CUDAFX_OK;

  /* The grid: the smallest step that keeps to MAX_PATCHES patches. */
  const double positions = (double) (W - SIDE + 1) * (H - SIDE + 1);
  int step = (int) ceil (sqrt (positions / MAX_PATCHES));
  step = step < 1 ? 1 : step;
  while ((double) ((W - SIDE) / step + 1) * ((H - SIDE) / step + 1) > MAX_PATCHES)
    step++;
  const int gw = (W - SIDE) / step + 1, gh = (H - SIDE) / step + 1, n = gw * gh;
  const int threads = cudafx_thread_count (o);

  channel_patches cp[CUDAFX_NOISE_MAX_CHANNELS];
  memset (cp, 0, sizeof cp);
  cudafx_status s = CUDAFX_OK;
  for (int c = 0; c < colours && !s; c++)
    {
      cp[c].p = malloc ((size_t) n * N * sizeof *cp[c].p);
      cp[c].valid = malloc (n);
      cp[c].sel = malloc (n);
      cp[c].level = malloc (n);
      cp[c].xi = malloc ((size_t) n * sizeof *cp[c].xi);
      if (!cp[c].p || !cp[c].valid || !cp[c].sel || !cp[c].level || !cp[c].xi)
        s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
    }
  if (!s)
    {
      const int ch = src->channels;
#pragma omp parallel for num_threads (threads) schedule (static)
      for (int i = 0; i < n; i++)
        {
          const int x0 = (i % gw) * step, y0 = (i / gw) * step;
          for (int c = 0; c < colours; c++)
            {
              float *p = cp[c].p + (size_t) i * N;
              int clipped = 0;
              double sum = 0, xi = 0;
              for (int y = 0; y < SIDE; y++)
                {
                  const uint8_t *row = cudafx_row (src, y0 + y);
                  for (int x = 0; x < SIDE; x++)
                    {
                      size_t k = (size_t) (x0 + x) * ch + c;
                      float v = src->type == CUDAFX_U8 ? row[k] : ((const float *) row)[k] * 255.0f;
                      clipped |= !(v > 0.0f && v < 255.0f);
                      p[y * SIDE + x] = v;
                      sum += v;
                    }
                }
              for (int y = 0; y < SIDE; y++)
                for (int x = 0; x < SIDE; x++)
                  {
                    if (x + 1 < SIDE)
                      xi += (double) (p[y * SIDE + x + 1] - p[y * SIDE + x]) * (p[y * SIDE + x + 1] - p[y * SIDE + x]);
                    if (y + 1 < SIDE)
                      xi += (double) (p[(y + 1) * SIDE + x] - p[y * SIDE + x]) * (p[(y + 1) * SIDE + x] - p[y * SIDE + x]);
                  }
              int level = (int) (sum / N * NOISE_LEVELS / 256.0);
              cp[c].level[i] = (uint8_t) (level < 0 ? 0 : level >= NOISE_LEVELS ? NOISE_LEVELS - 1 : level);
              cp[c].valid[i] = !clipped;
              cp[c].xi[i] = (float) xi;
            }
        }
      /* The channels at once, each a task whose loops are task loops: the
       * serial steps of one channel (eigen-decompositions, selections)
       * overlap the others' parallel sums. */
      cudafx_status cs[CUDAFX_NOISE_MAX_CHANNELS] = { 0 };
#pragma omp parallel num_threads (threads)
#pragma omp single
      for (int c = 0; c < colours; c++)
#pragma omp task firstprivate (c) shared (cp, cs, e)
        {
          if (!(cs[c] = estimate_channel (&cp[c], n, 0, e, c)))
            cs[c] = estimate_channel (&cp[c], n, 1, e, c);
        }
      for (int c = 0; c < colours && !s; c++)
        if (cs[c])
          s = cudafx_fail (cs[c], "nl-means: out of memory");
      if (!s)
        estimate_correlation (cp, colours, n, threads, e);
    }
  for (int c = 0; c < colours; c++)
    {
      free (cp[c].p);
      free (cp[c].valid);
      free (cp[c].sel);
      free (cp[c].level);
      free (cp[c].xi);
    }
  return s;
}
