/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local means denoising, CPU reference.
 *
 * Pixel-wise NL-means (Buades, Coll, Morel, "A non-local algorithm for image
 * denoising", CVPR 2005; parameters and weight of "Non-Local Means Denoising",
 * IPOL 2011) in the fast formulation of Darbon, Cunha, Chan, Osher, Jensen
 * (ISBI 2008): loop over the search offsets o; for each, the squared
 * difference image summed over the colour channels is filtered over the patch
 * (separable weights g, horizontal then vertical), so the cost per offset
 * grows with the patch side, not its area. o and -o share one distance
 * image, d(p, p+o) = d(p+o, p), so only half the offsets are computed and
 * each distance row feeds two output rows.
 *
 * Output at pixel p, over offsets o != 0 in the (2S+1)^2 search window:
 *   u(p) = (sum_o w(p,o) I(p+o) + w_c(p) I(p)) / (sum_o w(p,o) + w_c(p))
 *   d2(p,o) = 1/(n G^2) sum_{|i|,|j|<=P} g_i g_j sum_{c<n} (I_c(p+k) - I_c(p+o+k))^2,
 *             k = (j, i), G = sum_j g_j
 *   w(p,o)  = exp (-max (d2 - 2 s^2, 0) / h^2)
 *   w_c(p)  = max_o w(p,o) when centre_max (1 if that is 0), else 1
 * on the 0..255 scale (f32 data is scaled by 255), n colour channels, all
 * colour channels sharing one weight, borders clamped (edge pixels
 * replicated). g is flat (all 1) or Gaussian, g_j = exp (-j^2 / 2a^2) (as in
 * Buades et al. 2005). In manual mode g is flat, the centre weighs 1 and
 * s = 0, so h means what it means for OpenCV's fastNlMeansDenoising; in
 * automatic mode s is the estimated noise sigma and the rest comes from
 * choose_params below. Alpha is copied unchanged. Non-finite f32 values are
 * left as they are; the patches around them read them as 0, and a pixel
 * holding one weighs 0 as its neighbours' candidate (core/nlmeans.h,
 * nlmeans_patch_value).
 *
 * Order of the arithmetic, which cuda/nlmeans.cu follows so that its
 * distances are the same floats (no fused multiply-adds on either side):
 * e = ((d_0^2 + d_1^2) + d_2^2) ... over the channels from 0; horizontal
 * h(x) = g_0 e(x-P) + g_1 e(x-P+1) + ... + g_2P e(x+P), summed left to
 * right; vertical d = g_0 h(y-P) + ... + g_2P h(y+P), top to bottom; weight
 * nlmeans_exp_neg (d * dist_scale - dist_offset) (core/nlmeans.h). The GPU
 * takes the hardware's exp for the weight instead (the two within 1e-5 of
 * each other, relative: docs/TESTING.md, Determinism: +-1 on u8) and sums the weighted
 * values over the offsets in another order (here by half-window rows,
 * there pair by pair, o then -o); the centre term is added last on both.
 *
 * Noise: core/noise_estimate.c measures it on the host image (weak-texture
 * patches, in the directions of patch space the image's structure leaves
 * to the noise, per brightness level) and core/nlmeans_noise.c fits the
 * noise model to it: flat, one sigma (Gaussian noise), or camera noise
 * whose sigma follows brightness.
 *
 * Work is split into tiles of at most TILE_H x TILE_W pixels with a halo of
 * S + P pixels, each thread with its own buffers, so memory stays bounded and
 * a tile's working set stays in cache. The tile layout does not depend on the
 * thread count, so neither does the output.
 *
 * A call estimates the noise first, on the CPU for every backend (the
 * sample is bounded, and the estimate is the same whichever backend
 * denoises), turns it into sigma and, in automatic mode, the parameters and
 * plan, then has the backend (core/backend.h) open a session and denoise
 * with that plan. This file's CPU session is the reference; cuda/nlmeans.cu
 * is the GPU's. When the noise is as strong at every brightness the run is
 * the one above; when it follows brightness (camera noise), the session
 * first counts the residual histograms the camera model's a and b are
 * fitted to (nlmeans_fit_bin, the same counts on both backends), and the
 * plan carries the variance-stabilising transform: the backend transforms
 * the colour channels into f32 whose noise is one sigma, denoises that with
 * the parameters for that sigma and transforms the result back
 * (nlmeans_vst_run here, on the device there). Correlated noise
 * (demosaicked, compressed) is denoised as flat noise of its whole sigma. */
#include "cpu.h"
#include "nlmeans_noise.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define TILE_H 64
#define TILE_W 256

/* What the CPU's denoise works on. */
typedef struct {
  const cudafx_image *src;
  cudafx_image       *dst;
  int                 colours;
  nlmeans_plan        plan;
} nlmeans_job;

/* The CPU backend's session: the image, nothing to keep. */
struct nlmeans_session {
  const cudafx_image   *src;
  int                   colours;
  const cudafx_options *o;
};
/* One thread's buffers, sized for the largest tile. */
typedef struct {
  float *planes;  /* colour planes of the tile plus halo, 0..255 scale */
  float *acc;     /* colours + 2 planes of tile_h x tile_w: weighted sums,
                     sum of weights, largest weight */
  float *erow;    /* squared differences of one row */
  float *ring;    /* 2P+1 rows of horizontal patch sums */
  float *wrow;    /* weights of the current row */
} nlmeans_work;

static int
size_mul (size_t a, size_t b, size_t *out)
{
  return __builtin_mul_overflow (a, b, out);
}

/* Reads channel c of image row y at column x (clamped) on the 0..255 scale
 * into out[0..n), for columns x0 .. x0+n-1; f32 through nlmeans_patch_value.
 * Returns whether an f32 value was non-finite. */
CUDAFX_CPU_CLONES static int
load_row (const cudafx_image *img, int y, int c, int x0, int n, float *out)
{
  const uint8_t *row = cudafx_row (img, y);
  int ch = img->channels, unknown = 0;
  for (int i = 0; i < n; i++)
    {
      int x = x0 + i;
      x = x < 0 ? 0 : x >= img->width ? img->width - 1 : x;
      if (img->type == CUDAFX_U8)
        out[i] = row[(size_t) x * ch + c];
      else
        {
          float v = ((const float *) row)[(size_t) x * ch + c];
          unknown |= !isfinite (v);
          out[i] = nlmeans_patch_value (v);
        }
    }
  return unknown;
}

/* The row kernels below are written for a constant channel count n or
 * patch radius P (always inlined into a switch), so gcc unrolls the inner
 * loops and each kernel is one vectorised pass over the row. */
#define ALWAYS_INLINE static inline __attribute__ ((always_inline))

/* e[x] = sum_c (a_c[x] - a_c[x + shift])^2, x < ew; plane c at a + c*plane. */
ALWAYS_INLINE void
diff_row_n (float *restrict e, const float *restrict a, size_t plane, ptrdiff_t shift, int ew,
            const int n)
{
  for (int x = 0; x < ew; x++)
    {
      float s = 0.0f;
      for (int c = 0; c < n; c++)
        {
          float d = a[c * plane + x] - a[c * plane + x + shift];
          s += d * d;
        }
      e[x] = s;
    }
}

CUDAFX_CPU_CLONES static void
diff_row (float *e, const float *a, size_t plane, ptrdiff_t shift, int ew, int n)
{
  switch (n)
    {
    case 1:  diff_row_n (e, a, plane, shift, ew, 1); break;
    case 2:  diff_row_n (e, a, plane, shift, ew, 2); break;
    case 3:  diff_row_n (e, a, plane, shift, ew, 3); break;
    default: diff_row_n (e, a, plane, shift, ew, 4); break;
    }
}

/* hrow[x] = sum_j g[j] e[x + j], j = 0 .. 2P in that order; x < dw. */
ALWAYS_INLINE void
patch_row_p (const float *restrict e, float *restrict hrow, const float *restrict g, int dw,
             const int P)
{
  for (int x = 0; x < dw; x++)
    {
      float h = g[0] * e[x];
      for (int j = 1; j <= 2 * P; j++)
        h += g[j] * e[x + j];
      hrow[x] = h;
    }
}

/* The patch distances of one row from the 2P+1 rows hrows[0 .. 2P] of
 * horizontal sums (top to bottom), d = sum_i g[i] hrows[i][x] in that order,
 * and their weights w[x]; x < dw. */
ALWAYS_INLINE void
weight_row_p (const float *const *hrows, const float *restrict g, float *restrict w, int dw,
              float scale, float offset, const int P)
{
  for (int x = 0; x < dw; x++)
    {
      float d = g[0] * hrows[0][x];
      for (int i = 1; i <= 2 * P; i++)
        d += g[i] * hrows[i][x];
      w[x] = nlmeans_exp_neg (d * scale - offset);
    }
}

#define SWITCH_PATCH(P, call)                                                                 \
  switch (P)                                                                                  \
    {                                                                                         \
    case 1:  call (1); break;                                                                 \
    case 2:  call (2); break;                                                                 \
    case 3:  call (3); break;                                                                 \
    case 4:  call (4); break;                                                                 \
    default: call (5); break;                                                                 \
    }

CUDAFX_CPU_CLONES static void
patch_row (const float *e, float *hrow, const float *g, int dw, int P)
{
#define CALL(p) patch_row_p (e, hrow, g, dw, p)
  SWITCH_PATCH (P, CALL)
#undef CALL
}

CUDAFX_CPU_CLONES static void
weight_row (const float *const *hrows, const float *g, float *w, int dw, float scale,
            float offset, int P)
{
#define CALL(p) weight_row_p (hrows, g, w, dw, scale, offset, p)
  SWITCH_PATCH (P, CALL)
#undef CALL
}

/* acc_c[x] += w[x] nb_c[x] for the n colour planes, the weight plane
 * acc_n[x] += w[x] and the largest weight acc_n+1[x]; x < tw. unknown: the
 * tile holds non-finite values, and a neighbour holding one weighs 0. */
ALWAYS_INLINE void
accumulate_n (float *restrict acc, size_t tplane, const float *restrict w,
              const float *restrict nb, size_t plane, int tw, const int n, const int unknown)
{
  for (int x = 0; x < tw; x++)
    {
      float wx = w[x], m = acc[(n + 1) * tplane + x];
      if (unknown)
        for (int c = 0; c < n; c++)
          wx = nlmeans_unknown (nb[c * plane + x]) ? 0.0f : wx;
      for (int c = 0; c < n; c++)
        acc[c * tplane + x] += wx * nb[c * plane + x];
      acc[n * tplane + x] += wx;
      acc[(n + 1) * tplane + x] = wx > m ? wx : m;
    }
}

/* The check for unknown values is a build of its own, so that tiles
 * without them (every u8 tile) pay nothing for it. */
CUDAFX_CPU_CLONES static void
accumulate (float *acc, size_t tplane, const float *w, const float *nb, size_t plane, int tw, int n,
            int unknown)
{
#define CALL(k) (unknown ? accumulate_n (acc, tplane, w, nb, plane, tw, k, 1) \
                         : accumulate_n (acc, tplane, w, nb, plane, tw, k, 0))
  switch (n)
    {
    case 1:  CALL (1); break;
    case 2:  CALL (2); break;
    case 3:  CALL (3); break;
    default: CALL (4); break;
    }
#undef CALL
}

/* Tile [x0, x1) x [y0, y1) of the image into dst. */
CUDAFX_CPU_CLONES static void
nlmeans_tile (const nlmeans_job *job, nlmeans_work *wk, int x0, int x1, int y0, int y1)
{
  const nlmeans_plan *plan = &job->plan;
  const int P = plan->patch_radius, S = plan->search_radius, R = S + P;
  const int n = job->colours, tw = x1 - x0, th = y1 - y0;
  const int pw = tw + 2 * R, ph = th + 2 * R;
  const size_t plane = (size_t) pw * ph, tplane = (size_t) tw * th;
  const float scale = plan->dist_scale, offset = plan->dist_offset;
  const float *g = plan->patch_weights;

  /* planes[c] at (row i, column j) is I_c (y0 - R + i, x0 - R + j). */
  int unknown = 0;
  for (int c = 0; c < n; c++)
    for (int i = 0; i < ph; i++)
      {
        int y = y0 - R + i;
        y = y < 0 ? 0 : y >= job->src->height ? job->src->height - 1 : y;
        unknown |= load_row (job->src, y, c, x0 - R, pw, wk->planes + c * plane + (size_t) i * pw);
      }

  /* Sums and the largest weight start at 0; the centre comes last. */
  memset (wk->acc, 0, (n + 2) * tplane * sizeof (float));

  /* Half of the search window: dy > 0, or dy = 0 and dx > 0. */
  for (int dy = 0; dy <= S; dy++)
    for (int dx = dy ? -S : 1; dx <= S; dx++)
      {
        /* Distance rows r = -dy .. th-1 (tile coordinates) at columns
         * lo .. lo+dw-1: row r feeds output row r through +o (columns 0..tw)
         * and output row r+dy through -o (columns -dx .. tw-dx). */
        const int lo = dx > 0 ? -dx : 0, dw = tw + abs (dx);

        /* Tile row q's squared differences start at column lo - P of plane
         * row q + R; its horizontal sums go to ring slot q mod 2P+1, which
         * then holds rows q - 2P .. q: the patch rows of distance row q - P. */
        const int ring_n = 2 * P + 1, first = -dy - P;
        const ptrdiff_t shift = (ptrdiff_t) dy * pw + dx;
        const float *hrows[2 * NLMEANS_MAX_PATCH_RADIUS + 1];
        float *w = wk->wrow;
        for (int q = first; q < th + P; q++)
          {
            const float *a = wk->planes + (size_t) (q + R) * pw + (lo - P + R);
            diff_row (wk->erow, a, plane, shift, dw + 2 * P, n);
            patch_row (wk->erow, wk->ring + (size_t) ((q - first) % ring_n) * dw, g, dw, P);
            if (q - first < 2 * P)
              continue;
            for (int i = 0; i < ring_n; i++)
              hrows[i] = wk->ring + (size_t) ((q - first - 2 * P + i) % ring_n) * dw;
            weight_row (hrows, g, w, dw, scale, offset, P);

            /* Weights of distance row r feed output row r through +o and
             * output row r + dy through -o. */
            const int r = q - P;
            if (r >= 0)
              accumulate (wk->acc + (size_t) r * tw, tplane, w - lo,
                          wk->planes + (size_t) (r + dy + R) * pw + R + dx, plane, tw, n, unknown);
            if (r + dy < th)
              accumulate (wk->acc + (size_t) (r + dy) * tw, tplane, w - lo - dx,
                          wk->planes + (size_t) (r + R) * pw + R - dx, plane, tw, n, unknown);
          }
      }

  /* The centre, normalise and store; alpha and non-finite values are copied. */
  const cudafx_image *src = job->src;
  cudafx_image *dst = job->dst;
  const int ch = src->channels;
  for (int i = 0; i < th; i++)
    {
      const float *ws = wk->acc + n * tplane + (size_t) i * tw;
      const float *wmax = wk->acc + (n + 1) * tplane + (size_t) i * tw;
      const uint8_t *srow = cudafx_row (src, y0 + i);
      uint8_t *drow = cudafx_row (dst, y0 + i);
      for (int c = 0; c < ch; c++)
        {
          const float *acc = wk->acc + c * tplane + (size_t) i * tw;
          const float *centre = wk->planes + c * plane + (size_t) (i + R) * pw + R;
          for (int x = 0; x < tw; x++)
            {
              size_t e = (size_t) (x0 + x) * ch + c;
              float wc = nlmeans_centre_weight (plan->centre_max, wmax[x]);
              if (c >= n)
                {
                  if (src->type == CUDAFX_U8)
                    drow[e] = srow[e];
                  else
                    ((float *) drow)[e] = ((const float *) srow)[e];
                  continue;
                }
              float v = (acc[x] + wc * centre[x]) / (ws[x] + wc);
              if (src->type == CUDAFX_U8)
                {
                  v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
                  drow[e] = (uint8_t) (v + 0.5f);
                }
              else
                ((float *) drow)[e] = nlmeans_unknown (centre[x]) ? ((const float *) srow)[e] : v / 255.0f;
            }
        }
    }
}

static void
work_free (nlmeans_work *wk)
{
  free (wk->planes);
  free (wk->acc);
  free (wk->erow);
  free (wk->ring);
  free (wk->wrow);
}

static cudafx_status
work_alloc (nlmeans_work *wk, int colours, int tile_w, int tile_h, int P, int S)
{
  size_t pw = (size_t) tile_w + 2 * (size_t) (S + P), ph = (size_t) tile_h + 2 * (size_t) (S + P);
  size_t planes, acc, row = pw, ring;
  memset (wk, 0, sizeof *wk);
  if (size_mul (pw, ph, &planes) || size_mul (planes, colours, &planes) ||
      size_mul (planes, sizeof (float), &planes) ||
      size_mul ((size_t) tile_w, tile_h, &acc) || size_mul (acc, colours + 2, &acc) ||
      size_mul (acc, sizeof (float), &acc) ||
      size_mul (row, 2 * (size_t) P + 1, &ring) || size_mul (ring, sizeof (float), &ring))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: image too large");
  wk->planes = malloc (planes);
  wk->acc = malloc (acc);
  wk->erow = malloc (row * sizeof (float));
  wk->ring = malloc (ring);
  wk->wrow = malloc (row * sizeof (float));
  if (!wk->planes || !wk->acc || !wk->erow || !wk->ring || !wk->wrow)
    {
      work_free (wk);
      return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory for %dx%d tiles",
                          tile_w, tile_h);
    }
  return CUDAFX_OK;
}

CUDAFX_CPU_CLONES static cudafx_status
denoise_cpu (const nlmeans_job *job, const cudafx_options *o)
{
  const int W = job->src->width, H = job->src->height;
  const int tiles_x = (W + TILE_W - 1) / TILE_W, tiles_y = (H + TILE_H - 1) / TILE_H;
  const int tile_w = (W + tiles_x - 1) / tiles_x, tile_h = (H + tiles_y - 1) / tiles_y;
  const int tiles = tiles_x * tiles_y;
  int threads = cudafx_thread_count (o);
  if (threads > tiles)
    threads = tiles;
  cudafx_status s = CUDAFX_OK;

  nlmeans_work *work = calloc (threads, sizeof *work);
  if (!work)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
  int allocated = 0;
  for (; allocated < threads && !s; allocated++)
    s = work_alloc (&work[allocated], job->colours, tile_w, tile_h,
                    job->plan.patch_radius, job->plan.search_radius);

  /* Batches of tiles between progress reports, so cancel answers quickly. */
  const int batch = 2 * threads;
  for (int first = 0; first < tiles && !s; first += batch)
    {
      int last = first + batch < tiles ? first + batch : tiles;
#pragma omp parallel for num_threads (threads) schedule (dynamic, 1)
      for (int t = first; t < last; t++)
        {
          int tx = t % tiles_x, ty = t / tiles_x;
          int x0 = tx * tile_w, y0 = ty * tile_h;
          int x1 = x0 + tile_w < W ? x0 + tile_w : W, y1 = y0 + tile_h < H ? y0 + tile_h : H;
          nlmeans_tile (job, &work[omp_get_thread_num ()], x0, x1, y0, y1);
        }
      s = cudafx_progress (o, (double) last / tiles);
    }

  for (int i = 0; i < allocated; i++)
    work_free (&work[i]);
  free (work);
  return s;
}

/* Histograms of the colour channels' 3x3 neighbourhoods on the CPU (see
 * header), per thread, then summed into out: with fit the noise-model fit's
 * (nlmeans_fit_bin, NLMEANS_FIT_BINS a channel) on rows 1, 1 + step, ...,
 * else the noise estimate's (nlmeans_noise_bin, NLMEANS_NOISE_BINS) on
 * every interior row (step 1). */
CUDAFX_CPU_CLONES static cudafx_status
count_bins (const cudafx_image *src, int colours, int fit, int step, const cudafx_options *o, uint64_t *out)
{
  const int W = src->width, H = src->height, bins = fit ? NLMEANS_FIT_BINS : NLMEANS_NOISE_BINS;
  const int rows = H > 2 ? (H - 2 + step - 1) / step : 0;
  int threads = cudafx_thread_count (o);
  threads = threads < rows ? threads : rows > 0 ? rows : 1;
  size_t hist_n, rows_n;
  if (size_mul ((size_t) threads * colours, bins, &hist_n) || size_mul ((size_t) threads * 3, W, &rows_n))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: image too large");
  uint64_t *hist = calloc (hist_n, sizeof *hist);
  float *buf = malloc (rows_n * sizeof *buf);
  if (!hist || !buf)
    {
      free (hist);
      free (buf);
      return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
    }

#pragma omp parallel num_threads (threads)
  {
    int t = omp_get_thread_num ();
    float *r0 = buf + (size_t) t * 3 * W, *r1 = r0 + W, *r2 = r1 + W;
#pragma omp for schedule (static)
    for (int i = 0; i < rows; i++)
      for (int c = 0; c < colours; c++)
        {
          const int y = 1 + i * step;
          uint64_t *hc = hist + ((size_t) t * colours + c) * bins;
          load_row (src, y - 1, c, 0, W, r0);
          load_row (src, y, c, 0, W, r1);
          load_row (src, y + 1, c, 0, W, r2);
          for (int x = 1; x < W - 1; x++)
            {
              int b = fit ? nlmeans_fit_bin (r0 + x - 1, r1 + x - 1, r2 + x - 1)
                          : nlmeans_noise_bin (r0 + x - 1, r1 + x - 1, r2 + x - 1);
              if (b >= 0)
                hc[b]++;
            }
        }
  }
  for (size_t i = 0; i < (size_t) colours * bins; i++)
    {
      out[i] = hist[i];
      for (int t = 1; t < threads; t++)
        out[i] += hist[(size_t) t * colours * bins + i];
    }
  free (buf);
  free (hist);
  return CUDAFX_OK;
}

/* Parameters for noise sigma, by the first row whose max_sigma is not
 * exceeded. Grey: Buades, Coll, Morel, IPOL 2011, table 1 (search 35x35 is
 * radius 17). Colour: IPOL's table 2 up to sigma 15; above, measured on the
 * colour photos of tests/data (tests/quality, README): 5x5 patches with
 * Gaussian weights (std dev 1.5), the centre weighing as its most similar
 * neighbour and a 21x21 search beat IPOL's 5x5 flat patches, centre 1 and
 * 35x35 search by 0.3 dB at sigma 30, 0.5 dB at 50. */
typedef struct {
  double max_sigma;
  int    P, S;
  double k; /* h = k sigma */
  double patch_sigma;
  int    centre_max;
} auto_params;

static const auto_params grey_params[] = {
  { 15, 1, 10, 0.40, 0, 0 },
  { 30, 2, 10, 0.40, 0, 0 },
  { 45, 3, 17, 0.35, 0, 0 },
  { 75, 4, 17, 0.35, 0, 0 },
  { INFINITY, 5, 17, 0.30, 0, 0 },
};
static const auto_params colour_params[] = {
  { 15, 1, 10, 0.55, 0, 0 },
  { 30, 2, 10, 0.55, 1.5, 1 },
  { INFINITY, 2, 10, 0.50, 1.5, 1 },
};

static const auto_params *
auto_table (int colours, size_t *n)
{
  *n = colours == 1 ? sizeof grey_params / sizeof *grey_params
                    : sizeof colour_params / sizeof *colour_params;
  return colours == 1 ? grey_params : colour_params;
}

static double
clamp_h (double h)
{
  return h < 0.1 ? 0.1 : h > 100 ? 100 : h;
}

static void
choose_params (double sigma, int colours, cudafx_nlmeans_info *info)
{
  size_t n;
  const auto_params *a = auto_table (colours, &n);
  while (sigma > a->max_sigma)
    a++;
  info->sigma = sigma;
  info->h = clamp_h (a->k * sigma);
  info->patch_radius = a->P;
  info->search_radius = a->S;
  info->patch_sigma = a->patch_sigma;
  info->centre_max = a->centre_max;
}

/* The largest search plus patch radius choose_params can pick. */
static int
auto_max_halo (int colours)
{
  size_t n;
  const auto_params *a = auto_table (colours, &n);
  int halo = 0;
  for (size_t i = 0; i < n; i++)
    halo = a[i].S + a[i].P > halo ? a[i].S + a[i].P : halo;
  return halo;
}

/* The plan of a run with the parameters in used; s the noise sigma
 * subtracted from the distances (0 in manual mode). */
static void
make_plan (const cudafx_nlmeans_info *used, int colours, double s, nlmeans_plan *plan)
{
  const int P = used->patch_radius;
  double sum = 0.0;
  memset (plan, 0, sizeof *plan);
  plan->patch_radius = P;
  plan->search_radius = used->search_radius;
  for (int j = 0; j <= 2 * P; j++)
    {
      double a = used->patch_sigma;
      plan->patch_weights[j] = a > 0 ? (float) exp (-(j - P) * (j - P) / (2 * a * a)) : 1.0f;
      sum += plan->patch_weights[j];
    }
  plan->dist_scale = (float) (1.0 / (colours * sum * sum * used->h * used->h));
  plan->dist_offset = (float) (2.0 * s * s / (used->h * used->h));
  plan->centre_max = used->centre_max;
}

/* Flat noise of sigma: the parameters, and the plan, for sigma read
 * LOW_SIGMA_SCALE times higher where the table's first row applies (white
 * noise; correlated noise is planned as below). The first row was
 * tuned with the residual estimator, which read the test photos' sigma 10
 * noise 4-14% high; on the texture-robust estimate it lost 0.1-0.3 dB
 * there until sigma was read 10% higher. The transform's plan (camera
 * noise) keeps the table as it is. */
#define LOW_SIGMA_SCALE 1.1

/* Correlated noise makes patch distances vary more than white noise of the
 * same sigma (fewer independent pixels in a patch), so it takes a larger h:
 * CORRELATED_SCALE_LOW times the whole noise's sigma, rising to
 * CORRELATED_SCALE_HIGH as the noise grows alike in the colour channels
 * (nlmeans_channel_alike). The weights take no noise offset there: 2
 * sigma^2 is what white noise adds to a patch distance, correlated noise
 * adds a distance that scatters around it, and subtracting it made the
 * weights hinge on a sigma that the estimate reads up to twice as high on
 * one file as on another of the same noise level. Chosen on the
 * camera-pipeline JPEGs of tests/quality, and held when chosen on the files
 * of one demosaicking method and measured on the other's (docs/BENCHMARKS.md,
 * "Non-local means on camera-pipeline JPEGs"). */
#define CORRELATED_SCALE_LOW  1.7
#define CORRELATED_SCALE_HIGH 3.2

static double
correlated_scale (const cudafx_noise_model *m)
{
  return CORRELATED_SCALE_LOW + nlmeans_channel_alike (m) * (CORRELATED_SCALE_HIGH - CORRELATED_SCALE_LOW);
}

static void
flat_plan (double sigma, const cudafx_noise_model *m, int colours, cudafx_nlmeans_info *used,
           nlmeans_plan *plan)
{
  size_t n;
  if (m->correlated)
    {
      double h = correlated_scale (m) * sigma;
      choose_params (h, colours, used);
      used->h = clamp_h (h);
      make_plan (used, colours, 0.0, plan);
    }
  else
    {
      double s = sigma <= auto_table (colours, &n)->max_sigma ? LOW_SIGMA_SCALE * sigma : sigma;
      choose_params (s, colours, used);
      make_plan (used, colours, s, plan);
    }
  used->sigma = sigma;
}

static int
colour_channels (const cudafx_image *img)
{
  return img->channels - (img->has_alpha ? 1 : 0);
}

void
cudafx_nlmeans_params_init (cudafx_nlmeans_params *p)
{
  cudafx_params_defaults (CUDAFX_FILTER_NLMEANS, p);
}

/* ---- the CPU backend's session (core/cpu.c's table) ---------------------- */

cudafx_status
cudafx_nlmeans_cpu_open (const cudafx_image *src, int colours, int max_halo, int transformed,
                         const cudafx_options *o, nlmeans_session **out)
{
  *out = malloc (sizeof **out);
  if (!*out)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
  **out = (nlmeans_session) { src, colours, o };
  return CUDAFX_OK;
}

cudafx_status
cudafx_nlmeans_cpu_count (nlmeans_session *ses, uint64_t *hist)
{
  return count_bins (ses->src, ses->colours, 0, 1, ses->o, hist);
}

cudafx_status
cudafx_nlmeans_cpu_count_levels (nlmeans_session *ses, int stride, uint64_t *hist)
{
  return count_bins (ses->src, ses->colours, 1, stride, ses->o, hist);
}

/* Behind the transform (nlmeans_vst_run): the plan's denoise of the
 * transformed image. */
typedef struct {
  const nlmeans_plan   *plan;
  const cudafx_options *o;
} nlmeans_transformed;

static cudafx_status
denoise_transformed (const cudafx_image *t, cudafx_image *u, void *ctx)
{
  const nlmeans_transformed *x = ctx;
  nlmeans_job job = { t, u, t->channels, *x->plan };
  return denoise_cpu (&job, x->o);
}

cudafx_status
cudafx_nlmeans_cpu_denoise (nlmeans_session *ses, const nlmeans_plan *plan, cudafx_image *dst)
{
  if (plan->vst)
    {
      nlmeans_transformed x = { plan, ses->o };
      return nlmeans_vst_run (plan->vst, ses->src, dst, "nl-means", denoise_transformed, &x, ses->o);
    }
  nlmeans_job job = { ses->src, dst, ses->colours, *plan };
  return denoise_cpu (&job, ses->o);
}

void
cudafx_nlmeans_cpu_close (nlmeans_session *ses)
{
  free (ses);
}

/* ---- the engine's side ----------------------------------------------------- */

/* One call as the engine runs it on a backend. */
typedef struct {
  const char         *filter;   /* the call's name in messages: "nl-means", or the filter it estimates for */
  const cudafx_image *src;
  cudafx_image       *dst;      /* NULL: the noise estimate only */
  int                 colours;  /* colour channels: channels minus alpha */
  int                 estimate; /* estimate the noise (on the host image, before the backend's session) */
  int                 automatic; /* the parameters follow the estimate */
  int                 max_halo; /* the largest S + P the plan may have (once estimated: its own) */
  cudafx_noise_model  model;    /* the noise model (given, or the estimate's) */
  double              sigma;    /* with it: the sigma reported (given, or the estimate's) */
  nlmeans_vst        *vst;      /* its transform, or NULL */
  cudafx_nlmeans_info used;     /* the parameters (and sigma) of the run */
  nlmeans_plan        plan;
} nlmeans_call;

/* The parameters and plan of automatic mode behind the transform for
 * call->model: those for the transformed image's sigma. */
static cudafx_status
stabilise (nlmeans_call *call)
{
  if (!call->vst && !(call->vst = malloc (sizeof *call->vst)))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
  nlmeans_vst_make (&call->model, call->colours, call->vst);
  choose_params (call->vst->scale, call->colours, &call->used);
  make_plan (&call->used, call->colours, call->vst->scale, &call->plan);
  call->plan.vst = call->vst;
  return CUDAFX_OK;
}

/* Nearest neighbours' mean noise correlation from which the noise is
 * correlated: on tests/data's photos white noise (Gaussian or camera) of
 * sigma 5 to 30 measures at most 0.33 (what is left of texture in the
 * weak-texture patches), the camera-pipeline JPEGs of tests/quality 0.65
 * or more (docs/BENCHMARKS.md, "Noise estimate"). */
#define CORRELATED_FROM 0.5

/* The noise of the host image (core/noise_estimate.c, for every backend)
 * and the model fitted to it; in automatic mode, for flat noise, the
 * parameters and plan. Camera noise's a and b come later, from the
 * session's histograms (camera_model), in automatic mode only: manual mode
 * reports the flat model of the one sigma. */
static cudafx_status
estimate_noise (nlmeans_call *call, const cudafx_options *o)
{
  noise_estimate e;
  cudafx_status s = noise_estimate_image (call->src, call->colours, o, &e);
  if (!s)
    s = nlmeans_noise_fit (&e, call->src->type, &call->model, &call->sigma);
  if (s)
    return s;
  cudafx_noise_model *m = &call->model;
  memcpy (m->spatial_corr, e.spatial, sizeof m->spatial_corr);
  m->channel_corr = e.channel;
  m->correlation = 0.25 * (e.spatial[1][0] + e.spatial[1][2] + e.spatial[0][1] + e.spatial[2][1]);
  m->correlated = m->correlation >= CORRELATED_FROM;
  if (m->correlated)
    {
      /* Smoothed noise hides from the patches' noise directions: sigma is
       * the whole noise at a pixel, and flat (the residual histograms of
       * the camera model miss smoothed noise as much). */
      call->sigma *= sqrt (e.variance_ratio);
      m->signal_dependent = 0;
      memset (m->a, 0, sizeof m->a);
      memset (m->b, 0, sizeof m->b);
      m->sigma_dark = m->sigma_light = call->sigma;
    }
  call->used.sigma = call->sigma;
  if (!call->automatic || m->signal_dependent)
    {
      if (!call->automatic && m->signal_dependent)
        {
          m->signal_dependent = 0;
          memset (m->a, 0, sizeof m->a);
          memset (m->b, 0, sizeof m->b);
          m->sigma_dark = m->sigma_light = call->sigma;
        }
      return CUDAFX_OK;
    }
  flat_plan (call->sigma, m, call->colours, &call->used, &call->plan);
  call->max_halo = call->plan.search_radius + call->plan.patch_radius;
  return CUDAFX_OK;
}

/* Camera noise, found by the estimate: a and b of each channel fitted to
 * the residual histograms backend b counts (core/nlmeans_noise.c's
 * nlmeans_noise_fit_histograms), then the transform's plan. When a channel
 * has too few levels for that fit, the flat model of the one sigma. */
static cudafx_status
camera_model (const cudafx_backend_ops *b, nlmeans_session *ses, nlmeans_call *call)
{
  const cudafx_image *src = call->src;
  uint64_t *hist = calloc ((size_t) call->colours * NLMEANS_FIT_BINS, sizeof *hist);
  cudafx_status s = hist ? CUDAFX_OK : cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
  if (!s)
    s = b->nlmeans_count_levels (ses, nlmeans_fit_stride (src->width, src->height), hist);
  if (!s)
    {
      if (nlmeans_noise_fit_histograms (hist, call->colours, src->type, &call->model))
        {
          cudafx_noise_model *m = &call->model;
          m->signal_dependent = 0;
          memset (m->a, 0, sizeof m->a);
          memset (m->b, 0, sizeof m->b);
          m->sigma_dark = m->sigma_light = call->sigma;
          flat_plan (call->sigma, m, call->colours, &call->used, &call->plan);
        }
      else
        s = stabilise (call);
    }
  free (hist);
  return s;
}

/* The estimate (if asked) on the whole of src, the camera model (if the
 * estimate found camera noise in automatic mode), then the filter (if dst)
 * on backend b. */
static cudafx_status
nlmeans_run (const cudafx_backend_ops *b, void *call_, const cudafx_options *o)
{
  nlmeans_call *call = call_;
  nlmeans_session *ses = NULL;
  cudafx_status s = CUDAFX_OK;
  if (call->estimate && !(s = cudafx_source_rows (o, call->filter, call->src->height)))
    s = estimate_noise (call, o);
  const int camera = call->estimate && call->automatic && call->model.signal_dependent;
  if (s || (!call->dst && !camera))
    return s;
  s = b->nlmeans_open (call->src, call->colours, call->dst ? call->max_halo : 0, camera || call->plan.vst != NULL,
                       o, &ses);
  if (!s && camera)
    s = camera_model (b, ses, call);
  if (!s && call->dst)
    s = b->nlmeans_denoise (ses, &call->plan, call->dst);
  if (ses)
    b->nlmeans_close (ses);
  return s;
}

/* The call's report: the parameters, and the noise model (flat: the one
 * sigma at every brightness). */
static void
call_info (const nlmeans_call *call, cudafx_nlmeans_info *info)
{
  *info = call->used;
  info->noise = call->model;
  info->stabilised_sigma = 0;
  if (call->plan.vst)
    {
      info->sigma = call->sigma;
      info->stabilised_sigma = call->vst->scale;
      return;
    }
  if (!call->estimate)
    {
      /* sigma given: the flat model of that sigma. */
      memset (&info->noise, 0, sizeof info->noise);
      info->noise.channels = call->colours;
      info->noise.sigma_dark = info->noise.sigma_light = info->sigma;
      info->noise.spatial_corr[1][1] = 1;
    }
}

/* Runs the call on the backend the options choose; its report into info. */
static cudafx_status
nlmeans_dispatch (nlmeans_call *call, const cudafx_options *o, cudafx_nlmeans_info *info)
{
  cudafx_status s = cudafx_dispatch (call->filter, nlmeans_run, call, call->src, call->dst, 1, o);
  if (!s && info)
    call_info (call, info);
  free (call->vst);
  return s;
}

cudafx_status
nlmeans_estimate_for (const char *filter, const cudafx_image *src, const cudafx_options *o,
                      cudafx_nlmeans_info *info)
{
  cudafx_status s;
  cudafx_clear_error ();
  if ((s = cudafx_check_image (filter, N_("source"), src)))
    return s;
  if (!info)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: info is NULL", filter);
  nlmeans_call call = { .filter = filter, .src = src, .colours = colour_channels (src), .estimate = 1,
                        .automatic = 1 };
  return nlmeans_dispatch (&call, o, info);
}

cudafx_status
cudafx_nlmeans_estimate (const cudafx_image *src, const cudafx_options *o, cudafx_nlmeans_info *info)
{
  return nlmeans_estimate_for ("nl-means", src, o, info);
}

cudafx_status
cudafx_nlmeans (const cudafx_image *src, cudafx_image *dst, const cudafx_nlmeans_params *p,
                const cudafx_options *o, cudafx_nlmeans_info *info)
{
  cudafx_status s;
  if ((s = cudafx_check_pair ("nl-means", src, dst)))
    return s;
  if (!p)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "nl-means: params is NULL");
  if ((s = cudafx_params_check (CUDAFX_FILTER_NLMEANS, p)))
    return s;
  if (!(p->sigma >= 0.0 && p->sigma <= 255.0))
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "nl-means: sigma must be 0..255 (0: estimate it), not %g",
                        p->sigma);

  const int colours = colour_channels (src);
  nlmeans_call call = { .filter = "nl-means", .src = src, .dst = dst, .colours = colours };
  if (p->automatic && p->sigma > 0.0 && p->noise.signal_dependent)
    {
      if (p->noise.channels != colours)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                            "nl-means: the noise model has %d channels, the image %d colour channels",
                            p->noise.channels, colours);
      /* Behind the transform for the model given. */
      call.model = p->noise;
      call.sigma = p->sigma;
      if ((s = stabilise (&call)))
        return s;
      call.max_halo = call.plan.search_radius + call.plan.patch_radius;
    }
  else if (p->automatic && p->sigma > 0.0)
    {
      flat_plan (p->sigma, &p->noise, colours, &call.used, &call.plan);
      call.max_halo = call.plan.search_radius + call.plan.patch_radius;
    }
  else if (p->automatic)
    {
      /* The plan comes from the estimate (and, for camera noise, the
       * session's histograms); the transform's plan has the same table's radii. */
      call.estimate = call.automatic = 1;
      call.max_halo = auto_max_halo (colours);
    }
  else
    {
      /* The estimate is only reported in manual mode, and costs more than
       * the GPU's filtering: only when asked. */
      call.estimate = info != NULL && p->report_noise;
      call.used.h = p->h;
      call.used.patch_radius = p->patch_radius;
      call.used.search_radius = p->search_radius;
      make_plan (&call.used, colours, 0.0, &call.plan);
      call.max_halo = p->patch_radius + p->search_radius;
    }
  return nlmeans_dispatch (&call, o, info);
}
