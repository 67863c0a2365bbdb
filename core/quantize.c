/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantization by k-means (Lloyd 1982) with k-means++ seeding
 * (Arthur & Vassilvitskii 2007), in Oklab (Björn Ottosson 2020, "A perceptual
 * color space for image processing", from sRGB-encoded values) or in RGB,
 * with optional Floyd–Steinberg (1976) error diffusion, or positioned
 * dithering (Bayer 1973's ordered matrix, or a blue-noise mask made by
 * Ulichney's void-and-cluster method, 1993: tools/gen_bluenoise.py). A given
 * palette (a .gpl file, a GIMP palette) replaces k-means: the run is then the
 * mapping alone.
 *
 * The exact scheme, so that the CUDA port reproduces the palette bit for bit:
 *
 * Features. Every pixel becomes a feature vector of integers stored in float
 * (exact): 3 values for RGB images, 1 for grey. With x the
 * channel value on the 0..255 scale as a float (u8: (float) v; f32:
 * v * 255.0f), NaN replaced by 0 and clamped to ±8191 (so that |f| < 2^21
 * and sums of squared distances over the sample fit int64):
 *   rgb:   f = floorf (x * 256.0f + 0.5f)
 *   oklab: t = x / 255.0f; linear = sign (t) * srgb_decode (|t|) with
 *          srgb_decode (t) = t <= 0.04045f ? t / 12.92f : u * u * root5 (u * u),
 *          u = (t + 0.055f) / 1.055f  (that is u^2.4);
 *          RGB: lms = M1 · linear, lms' = sign · root3 (|lms|), Lab = M2 · lms'
 *          (Ottosson's matrices, rows summed left to right);
 *          grey: L = root3 (linear) (the Oklab L of a neutral grey);
 *          f = floorf (clamp (L * 255.0f) * 256.0f + 0.5f), likewise a and b.
 *   root_n (a, n), a > 0: bits of a as int32 i, i = (i - 0x3f800000) / n +
 *   0x3f800000 (C division, truncating), then 3 Newton steps
 *   y = ((n - 1) * y + a / y^(n-1)) / n with y^(n-1) multiplied left to right.
 * All in IEEE float with no fused multiply-adds (-ffp-contract=off, nvcc
 * --fmad=false), so CPU and GPU compute the same features. u8 images read the
 * sRGB decode from a 256-entry table filled by the same function.
 *
 * Voting. Pixels with alpha 0 do not vote, nor f32 pixels holding a
 * non-finite value (quantize.h, quantize_known), unless no pixel would; then
 * all vote. n = number of voting pixels.
 *
 * Seeding (on the device on the CUDA backend, see Backends). Sample S =
 * min (n, 65536) voting pixels: sample j is the voting pixel of rank
 * floor (j * n / S) in raster order. A = clamp (floor (128 / K), 1, 8)
 * independent attempts; attempt a uses the PRNG splitmix64 with state
 * seed + a * 2^32 and uniform u = (next >> 11) * 2^-53, and runs:
 *  1. Greedy k-means++ (as in scikit-learn), T = 2 + floor (log (K)) trials
 *     per centre. First centre: sample floor (u * S). D2[j] = squared distance
 *     of sample j to its nearest centre, exact in int64 (the features are
 *     integers); total = sum of D2. While fewer than K centres and total > 0
 *     (total 0: the sample has fewer distinct colours than K): for each of T
 *     trials in turn, target = (int64) (u * (double) total) and the
 *     candidate is the first j
 *     whose running sum of D2 exceeds target and whose D2 > 0 (the last j
 *     with D2 > 0 if rounding leaves none); its potential is the sum over j
 *     of min (D2[j], distance² to the candidate); the trial with the lowest
 *     potential (the first on ties) becomes the next centre.
 *  2. Lloyd on the sample exactly as below (float distances, integer
 *     means): at most 20 updates, stopping when no centre moves; then error
 *     = sum in int64 of each sample's float distance to its nearest final
 *     centre (integers below 2^46 held exactly, quantize.h: the sum is exact
 *     in any order).
 * The attempt with the lowest error (the first on ties) gives the starting
 * centres. Attempts are independent, so they may run in parallel. If it has
 * fewer than K centres (the sample has fewer distinct colours) and n > S,
 * voting pixels whose features equal no centre become centres, in raster
 * order, until K.
 *
 * Lloyd on the image, t = 1 .. max_iterations: assign every voting pixel to
 * the nearest centre, distance d = dx*dx + dy*dy + dz*dz in float in that
 * order (grey: dy = dz = 0; centres are the integers in float), ties to the
 * lowest index; each centre becomes the mean of its pixels: sums of the
 * integer features in int64 (order-free, so any thread count or GPU
 * reduction gives the same), centre = floor ((2 * sum + count) / (2 * count))
 * (round half up); a centre with no pixels stays put. Stop when no centre
 * moved (the next assignment would repeat this one); iterations = t.
 * On u8 images both backends run these passes over the distinct colours of
 * the voting pixels, each with its count, instead of over every pixel: a
 * pixel's features depend on its colour alone and its assignment on its
 * features alone, so adding count * feature for each distinct colour gives
 * the same int64 sums (order-free), hence the same centres, iterations and
 * palette, bit for bit. The colours are found once a run (the distinct
 * section below; on the GPU a device histogram, cuda/quantize_lloyd.cu,
 * then CUB's selection of its non-empty bins, cuda/quantize.cu). f32
 * images, images of 2^32 pixels or more (a count is uint32) and
 * CUDAFX_QUANTIZE_PER_PIXEL (tests) take every pixel; so does the CUDA
 * backend when the colours' buffers exceed its budget's share.
 *
 * Palette (host): centre / 256 on the 0..255 scale (rgb), or the inverse
 * Oklab transform in double with libm; then rounded to the element type (u8:
 * clamp 0..255 and round half up; f32: stored as float, not clamped).
 * Entries equal to an earlier one after rounding are dropped.
 *
 * Mapping: features of the palette entries as above; every pixel (transparent
 * ones too) takes the nearest entry (ties to the lowest index) and its colour
 * channels become exactly that entry; alpha is copied. An f32 pixel holding
 * a non-finite value is copied as it is.
 *
 * Given palette: its entries, rounded to the element type as above but
 * duplicates kept (an entry keeps its index; the first of equal entries is
 * the one taken), are the palette; no votes count.
 *
 * Positioned dithering (ordered, blue-noise): per pixel, independent of the
 * others. t = (rank + 1/2) / N - 1/2 is the pixel's threshold (quantize.h:
 * the Bayer rank in a 16x16 matrix, or the blue-noise mask's in 64x64,
 * both tiled from the image's origin); each colour channel becomes
 * clamp (x + spread * t) to the palette's range, and the pixel takes the
 * nearest entry of that. spread: the median over the entries of the
 * distance to their nearest other entry over sqrt (dims) (0..255 scale,
 * double, then float),
 * so a ramp of evenly spaced greys dithers a flat grey to its mean (exactly
 * in rgb; in oklab the boundary between two greys lies at their mean
 * lightness, not their mean value).
 *
 * Floyd–Steinberg: sequential, every row left to right. The value is the
 * pixel (0..255 scale, float) plus the diffused error, clamped per channel to
 * the palette's range; it takes the nearest entry in the chosen space, and
 * the error (value - entry, RGB, float) goes 7/16 right, 3/16 down-left,
 * 5/16 down, 1/16 down-right. With reduced bleeding (GIMP's
 * FSLOWBLEED), each channel's incoming error, summed as above, first goes
 * through quantize_limit_error (1:1 to 24 levels, 1:2 to 72, then 48).
 * Transparent pixels (and non-finite ones, as voting says) take their
 * plain nearest entry and neither receive nor pass on error. Both backends run it as a
 * wavefront, each row two pixels behind the one above, which keeps every
 * float addition in the sequential order: the same output for any thread
 * count (see dither_row) and on the device (cuda/quantize_dither.cu, where
 * a warp takes 32 rows, a lane each, and waits on the warp above's
 * progress).
 *
 * Backends. The per-pixel arithmetic (features, distance) is quantize.h's,
 * shared with cuda/quantize*.cu. quantize_run drives a backend session
 * (core/backend.h): the backend does the passes over the image (assignment
 * sums, over every pixel or its distinct colours, mapping,
 * Floyd–Steinberg) and the seeding attempts on
 * the sample (cuda/quantize_seed.cu: the same integer
 * arithmetic, so the same centres; a backend may leave the seeding to the
 * host's reference, as the CPU one does and the CUDA one when its memory
 * budget leaves no room). A u8 image without alpha is handed to the
 * backend row by row (quantize_rows; see row_pieces), which may take the
 * sample itself (the CUDA one on the device, from the uploaded rows); else
 * the sample is taken as pixel values on one thread (sample_codes), and the
 * seeding computes their features (on the device, or in sample_features).
 * A backend may also run Lloyd's whole loop on the image, the passes with
 * the centre updates (quantize.h's quantize_move_centre) and the
 * convergence test, as the CUDA one does where the passes need no upload;
 * else the engine runs it here pass by pass. The sample, the choice
 * of the attempt and the palette stay here for both, so the palette is the
 * CPU's. This file's CPU session is the reference backend.
 */
#include "bluenoise.h"
#include "cpu.h"

#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK         512      /* pixels per vectorised distance block */
/* Lloyd updates of each attempt on the sample: enough to rank the attempts,
 * since the image's own passes refine the winner; more bought no palette
 * quality on the test photos and cost a small photo most of its time
 * (docs/BENCHMARKS.md, "Quantize: distinct colours, seeding and the sample"). */
#define SAMPLE_ITERATIONS 20
#define FILTER        "quantize"
/* The Oklab feature cache costs 4 bytes per feature per pixel: kept up to
 * 2^24 pixels (192 MiB for colour; a 12 MP photo is cached), beyond that the
 * features are recomputed in each pass (same values, more time), so the extra
 * memory stays bounded whatever the image size. */
#define CACHE_MAX_PIXELS ((size_t) 1 << 24)

typedef struct {
  const cudafx_image           *src;
  cudafx_image                 *dst;
  const cudafx_quantize_params *p;
  cudafx_palette               *palette;
} quantize_job;

/* ---- features (the transform itself is in quantize.h) ---------------------- */

static void
feature_space_init (quantize_space *fs, int dims, int oklab)
{
  fs->dims = dims;
  fs->oklab = oklab;
  for (int v = 0; v < 256; v++)
    fs->decode[v] = quantize_srgb_decode ((float) v / 255.0f);
}

/* Flattened so that each clone computes the features with its own
 * instructions (floorf is one instruction from SSE4.1 on, a call before). */
CUDAFX_CPU_CLONES __attribute__ ((flatten)) static void
features_of (const quantize_space *fs, const float *x, const uint8_t *code, float *f)
{
  quantize_features (fs->dims, fs->oklab, fs->decode, x, code, f);
}

/* Colour channels of pixel x of a row as 0..255-scale floats (and u8 codes). */
static void
read_pixel (const cudafx_image *img, const uint8_t *row, int x, int dims, float *v, uint8_t *code)
{
  size_t i = (size_t) x * img->channels;
  dims = dims == 1 ? 1 : 3; /* grey or colour: tells the compiler v and code hold 3 */
  for (int c = 0; c < dims; c++)
    {
      if (img->type == CUDAFX_U8)
        {
          code[c] = row[i + c];
          v[c] = (float) code[c];
        }
      else
        v[c] = ((const float *) row)[i + c] * 255.0f;
    }
}

/* Inverse of the feature transform for the palette (host only, double). */
static double
srgb_encode (double lin)
{
  double m = fabs (lin);
  double t = m <= 0.0031308 ? 12.92 * m : 1.055 * pow (m, 1.0 / 2.4) - 0.055;
  return lin < 0 ? -t : t;
}

static void
colour_of_centre (const quantize_space *fs, const int32_t *centre, double *colour)
{
  double f[3];
  for (int c = 0; c < fs->dims; c++)
    f[c] = centre[c] / (double) QUANTIZE_FIXED;
  if (!fs->oklab)
    {
      for (int c = 0; c < fs->dims; c++)
        colour[c] = f[c];
      return;
    }
  if (fs->dims == 1)
    {
      double L = f[0] / 255.0;
      colour[0] = 255.0 * srgb_encode (L * L * L);
      return;
    }
  double L = f[0] / 255.0, a = f[1] / 255.0, b = f[2] / 255.0;
  double l = L + 0.3963377774 * a + 0.2158037573 * b;
  double m = L - 0.1055613458 * a - 0.0638541728 * b;
  double s = L - 0.0894841775 * a - 1.2914855480 * b;
  l = l * l * l;
  m = m * m * m;
  s = s * s * s;
  colour[0] = 255.0 * srgb_encode (4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s);
  colour[1] = 255.0 * srgb_encode (-1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s);
  colour[2] = 255.0 * srgb_encode (-0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s);
}

/* ---- the shared state of one run ------------------------------------------- */

typedef struct {
  const cudafx_image *src;
  cudafx_image       *dst;
  quantize_space      fs;
  int                 width;
  int                 everyone_votes; /* no alpha, or every pixel transparent */
  float              *plane[3];  /* Oklab features cached per pixel (y * width + x), else NULL */
  int                *row_votes; /* voting pixels per row */
  int                 k;         /* centres of the pass (Lloyd's, then the palette's) */
  const float       (*centre)[3]; /* their features; grey: [1], [2] are 0 */
  float               lloyd[CUDAFX_MAX_COLORS][3]; /* Lloyd's centres as features */
  quantize_sums      *acc;       /* one per thread */
  const quantize_mapping *map;   /* the mapping's palette */
  size_t              colours;   /* distinct colours of the voting pixels (plan->distinct), else 0 */
  float              *colour[3]; /* their features (planes past dims: NULL) */
  uint32_t           *count;     /* and their voting pixels */
} quantize_ctx;

/* The CPU backend's session: the passes' context with the Oklab cache or
 * the distinct colours. */
struct quantize_session {
  quantize_ctx          q;
  const cudafx_options *o;
};

static const float zero_block[BLOCK];

/* Features of pixels x0 .. x0+len-1 of row y into out[0..dims-1]. */
CUDAFX_CPU_CLONES static void
compute_features (const quantize_ctx *q, int y, int x0, int len, float *const *out)
{
  const cudafx_image *src = q->src;
  const uint8_t *row = cudafx_row (src, y);
  int dims = q->fs.dims, ch = src->channels;
  if (!q->fs.oklab && src->type == CUDAFX_U8)
    {
      /* fixed_point of an integer is exact: the RGB u8 fast path, with the
       * common interleaving spelt out so that it vectorises */
      const uint8_t *px = row + (size_t) x0 * ch;
      if (ch == 3)
        for (int i = 0; i < len; i++)
          {
            out[0][i] = (float) px[3 * i] * QUANTIZE_FIXED;
            out[1][i] = (float) px[3 * i + 1] * QUANTIZE_FIXED;
            out[2][i] = (float) px[3 * i + 2] * QUANTIZE_FIXED;
          }
      else
        for (int c = 0; c < dims; c++)
          for (int i = 0; i < len; i++)
            out[c][i] = (float) px[(size_t) i * ch + c] * QUANTIZE_FIXED;
      return;
    }
  for (int i = 0; i < len; i++)
    {
      float v[3] = { 0, 0, 0 }, f[3];
      uint8_t code[3] = { 0, 0, 0 };
      read_pixel (src, row, x0 + i, dims, v, code);
      features_of (&q->fs, v, src->type == CUDAFX_U8 ? code : NULL, f);
      for (int c = 0; c < dims; c++)
        out[c][i] = f[c];
    }
}

static int
is_voting (const quantize_ctx *q, const uint8_t *row, int x)
{
  const cudafx_image *src = q->src;
  if (q->everyone_votes)
    return 1;
  return quantize_votes (row + (size_t) x * src->channels * cudafx_type_size (src->type), src->type == CUDAFX_U8,
                         q->fs.dims, src->channels, src->has_alpha);
}

/* First pass: counts the voting pixels of each row. */
CUDAFX_CPU_CLONES static void
vote_rows (void *ctx_, int y0, int y1)
{
  quantize_ctx *q = ctx_;
  for (int y = y0; y < y1; y++)
    {
      const uint8_t *row = cudafx_row (q->src, y);
      int votes = q->width;
      if (!q->everyone_votes)
        for (int x = votes = 0; x < q->width; x++)
          votes += is_voting (q, row, x);
      q->row_votes[y] = votes;
    }
}

/* Fills the CPU session's Oklab cache. */
static void
cache_rows (void *ctx_, int y0, int y1)
{
  quantize_ctx *q = ctx_;
  for (int y = y0; y < y1; y++)
    {
      size_t base = (size_t) y * q->width;
      float *out[3] = { q->plane[0] + base, q->plane[1] ? q->plane[1] + base : NULL,
                        q->plane[2] ? q->plane[2] + base : NULL };
      compute_features (q, y, 0, q->width, out);
    }
}

/* Nearest of the k centres for len pixels; ties go to the lowest index. */
CUDAFX_CPU_CLONES static void
nearest_block (const float *px, const float *py, const float *pz, int len,
               const float (*centre)[3], int k, float *best_d, int32_t *best_k)
{
  for (int i = 0; i < len; i++)
    {
      best_d[i] = INFINITY;
      best_k[i] = 0;
    }
  for (int j = 0; j < k; j++)
    {
      /* a local copy: no aliasing with best_d, so the loop vectorises */
      const float c[3] = { centre[j][0], centre[j][1], centre[j][2] };
      for (int i = 0; i < len; i++)
        {
          float d = quantize_distance (px[i], py[i], pz[i], c);
          int better = d < best_d[i];
          best_d[i] = better ? d : best_d[i];
          best_k[i] = better ? j : best_k[i];
        }
    }
}

typedef void (*block_fn) (quantize_ctx *q, int y, int x0, int len,
                          const float *const *f, const int32_t *best_k);

/* Runs fn on blocks of rows [y0, y1) with each pixel's nearest centre. */
static void
for_blocks (quantize_ctx *q, int y0, int y1, block_fn fn)
{
  float buf[3][BLOCK], best_d[BLOCK];
  int32_t best_k[BLOCK];
  for (int y = y0; y < y1; y++)
    for (int x0 = 0; x0 < q->width; x0 += BLOCK)
      {
        int len = q->width - x0 < BLOCK ? q->width - x0 : BLOCK;
        const float *f[3] = { zero_block, zero_block, zero_block };
        if (q->plane[0])
          for (int c = 0; c < q->fs.dims; c++)
            f[c] = q->plane[c] + (size_t) y * q->width + x0;
        else
          {
            float *out[3] = { buf[0], buf[1], buf[2] };
            compute_features (q, y, x0, len, out);
            for (int c = 0; c < q->fs.dims; c++)
              f[c] = buf[c];
          }
        nearest_block (f[0], f[1], f[2], len, q->centre, q->k, best_d, best_k);
        fn (q, y, x0, len, f, best_k);
      }
}

CUDAFX_CPU_CLONES static void
accumulate_block (quantize_ctx *q, int y, int x0, int len, const float *const *f,
                  const int32_t *best_k)
{
  quantize_sums *acc = &q->acc[omp_get_thread_num ()];
  const uint8_t *row = cudafx_row (q->src, y);
  for (int i = 0; i < len; i++)
    {
      if (!q->everyone_votes && !is_voting (q, row, x0 + i))
        continue;
      int j = best_k[i];
      /* planes past dims are zeros: adding them keeps the loop branch-free */
      acc->sums[j][0] += (int64_t) f[0][i];
      acc->sums[j][1] += (int64_t) f[1][i];
      acc->sums[j][2] += (int64_t) f[2][i];
      acc->counts[j]++;
    }
}

CUDAFX_CPU_CLONES static void
assign_rows (void *ctx_, int y0, int y1)
{
  for_blocks (ctx_, y0, y1, accumulate_block);
}

/* The assignment over blocks [b0, b1) of BLOCK distinct colours: each adds
 * its count times its features, the same int64 sums as its pixels one by
 * one. */
CUDAFX_CPU_CLONES static void
assign_colours (void *ctx_, int b0, int b1)
{
  quantize_ctx *q = ctx_;
  quantize_sums *acc = &q->acc[omp_get_thread_num ()];
  float best_d[BLOCK];
  int32_t best_k[BLOCK];
  for (int b = b0; b < b1; b++)
    {
      size_t i0 = (size_t) b * BLOCK;
      int len = q->colours - i0 < BLOCK ? (int) (q->colours - i0) : BLOCK;
      const float *f[3];
      for (int c = 0; c < 3; c++)
        f[c] = q->colour[c] ? q->colour[c] + i0 : zero_block;
      nearest_block (f[0], f[1], f[2], len, q->centre, q->k, best_d, best_k);
      for (int i = 0; i < len; i++)
        {
          int j = best_k[i];
          int64_t n = q->count[i0 + i];
          acc->sums[j][0] += n * (int64_t) f[0][i];
          acc->sums[j][1] += n * (int64_t) f[1][i];
          acc->sums[j][2] += n * (int64_t) f[2][i];
          acc->counts[j] += n;
        }
    }
}

/* Writes palette entry best_k[i] to pixel x0 + i of row y, alpha copied;
 * an f32 pixel quantize_known_f32 finds unknown is copied whole. */
CUDAFX_CPU_CLONES static void
write_block (quantize_ctx *q, int y, int x0, int len, const float *const *f,
             const int32_t *best_k)
{
  const cudafx_image *src = q->src;
  cudafx_image *dst = q->dst;
  int dims = q->fs.dims, ch = src->channels;
  const uint8_t *srow = cudafx_row (src, y);
  uint8_t *drow = cudafx_row (dst, y);
  for (int i = 0; i < len; i++)
    {
      size_t at = (size_t) (x0 + i) * ch;
      int j = best_k[i];
      if (dst->type == CUDAFX_U8)
        {
          for (int c = 0; c < dims; c++)
            drow[at + c] = q->map->pal.u8[j][c];
          if (src->has_alpha)
            drow[at + ch - 1] = srow[at + ch - 1];
        }
      else if (!quantize_known_f32 ((const float *) srow + at, dims, ch, src->has_alpha))
        memcpy ((float *) drow + at, (const float *) srow + at, ch * sizeof (float));
      else
        {
          for (int c = 0; c < dims; c++)
            ((float *) drow)[at + c] = q->map->pal.f32[j][c];
          if (src->has_alpha)
            ((float *) drow)[at + ch - 1] = ((const float *) srow)[at + ch - 1];
        }
    }
}

CUDAFX_CPU_CLONES static void
map_rows (void *ctx_, int y0, int y1)
{
  for_blocks (ctx_, y0, y1, write_block);
}

static const uint16_t blue_noise[QUANTIZE_BLUE_SIZE * QUANTIZE_BLUE_SIZE] = { QUANTIZE_BLUE_NOISE_RANKS };

/* Positioned dithering (see the header): each pixel offset by its threshold
 * times the spread, clamped to the palette's range, to its nearest entry. */
CUDAFX_CPU_CLONES static void
position_rows (void *ctx_, int y0, int y1)
{
  quantize_ctx *q = ctx_;
  const quantize_mapping *m = q->map;
  float buf[3][BLOCK], best_d[BLOCK];
  int32_t best_k[BLOCK];
  int dims = q->fs.dims;
  for (int y = y0; y < y1; y++)
    {
      const uint8_t *row = cudafx_row (q->src, y);
      for (int x0 = 0; x0 < q->width; x0 += BLOCK)
        {
          int len = q->width - x0 < BLOCK ? q->width - x0 : BLOCK;
          for (int i = 0; i < len; i++)
            {
              float v[3] = { 0, 0, 0 }, f[3] = { 0, 0, 0 };
              uint8_t code[3];
              read_pixel (q->src, row, x0 + i, dims, v, code);
              float t = m->spread * quantize_threshold (m->dither, blue_noise, x0 + i, y);
              for (int c = 0; c < dims; c++)
                {
                  float e = quantize_sanitize (v[c]) + t;
                  v[c] = e < m->lo[c] ? m->lo[c] : e > m->hi[c] ? m->hi[c] : e;
                }
              features_of (&q->fs, v, NULL, f);
              for (int c = 0; c < 3; c++)
                buf[c][i] = f[c];
            }
          nearest_block (buf[0], buf[1], buf[2], len, q->centre, q->k, best_d, best_k);
          write_block (q, y, x0, len, NULL, best_k);
        }
    }
}

/* ---- seeding ------------------------------------------------------------- */

/* Greedy k-means++ on the sample, continuing the PRNG `state`: writes the
 * centres and returns how many were found (≤ k). d2 and work hold n and
 * 2 * n values. */
CUDAFX_CPU_CLONES static int
seed_centres (const sample_set *smp, int k, int trials, uint64_t *state, int64_t *d2,
              int64_t *work, int32_t (*centres)[3])
{
  int n = smp->n;
  const float *px = smp->plane[0], *py = smp->plane[1], *pz = smp->plane[2];
  int64_t *trial = work, *best = work + n;
  int first = (int) (quantize_uniform (state) * n);
  for (int c = 0; c < 3; c++)
    centres[0][c] = (int32_t) smp->plane[c][first];
  int64_t total = 0;
  for (int j = 0; j < n; j++)
    {
      d2[j] = quantize_exact_distance (px[j], py[j], pz[j], centres[0]);
      total += d2[j];
    }
  int found = 1;
  while (found < k && total > 0)
    {
      int64_t best_total = INT64_MAX;
      for (int t = 0; t < trials; t++)
        {
          int64_t target = (int64_t) (quantize_uniform (state) * (double) total), run = 0;
          int chosen = -1;
          for (int j = 0; j < n; j++)
            {
              run += d2[j];
              if (d2[j] > 0)
                {
                  chosen = j;
                  if (run > target)
                    break;
                }
            }
          int32_t candidate[3];
          for (int c = 0; c < 3; c++)
            candidate[c] = (int32_t) smp->plane[c][chosen];
          int64_t pot = 0;
          for (int j = 0; j < n; j++)
            {
              int64_t d = quantize_exact_distance (px[j], py[j], pz[j], candidate);
              trial[j] = d < d2[j] ? d : d2[j];
              pot += trial[j];
            }
          if (pot < best_total)
            {
              best_total = pot;
              memcpy (centres[found], candidate, sizeof candidate);
              int64_t *swap = best;
              best = trial;
              trial = swap;
            }
        }
      int64_t *swap = d2;
      d2 = best;
      best = swap;
      total = best_total;
      found++;
    }
  return found;
}

/* Moves every centre with pixels to their rounded mean; returns whether one moved. */
static int
update_centres (const quantize_sums *acc, int k, int dims, int32_t (*centres)[3])
{
  int moved = 0;
  for (int j = 0; j < k; j++)
    if (acc->counts[j] > 0)
      moved |= quantize_move_centre (acc->sums[j], acc->counts[j], dims, centres[j]);
  return moved;
}

/* Lloyd on the sample (the full-image scheme, sequential); returns the
 * sample's squared error. The distances are integers below 2^46 held
 * exactly in float (quantize.h), so their int64 sum is exact (< 2^62) and
 * does not depend on the order: the device sums them in any order. */
CUDAFX_CPU_CLONES static int64_t
refine_on_sample (const sample_set *smp, int k, int iterations, int32_t (*centres)[3],
                  quantize_sums *acc)
{
  float centre_f[CUDAFX_MAX_COLORS][3], best_d[BLOCK];
  int32_t best_k[BLOCK];
  int64_t error = 0;
  for (int it = 0; it <= iterations; it++)
    {
      for (int j = 0; j < k; j++)
        for (int c = 0; c < 3; c++)
          centre_f[j][c] = (float) centres[j][c];
      memset (acc, 0, sizeof *acc);
      error = 0;
      for (int i0 = 0; i0 < smp->n; i0 += BLOCK)
        {
          int len = smp->n - i0 < BLOCK ? smp->n - i0 : BLOCK;
          nearest_block (smp->plane[0] + i0, smp->plane[1] + i0, smp->plane[2] + i0, len,
                         (const float (*)[3]) centre_f, k, best_d, best_k);
          for (int i = 0; i < len; i++)
            {
              error += (int64_t) best_d[i];
              for (int c = 0; c < smp->dims; c++)
                acc->sums[best_k[i]][c] += (int64_t) smp->plane[c][i0 + i];
              acc->counts[best_k[i]]++;
            }
        }
      /* the last round only measures the error */
      if (it == iterations || !update_centres (acc, k, smp->dims, centres))
        break;
    }
  return error;
}

/* The seeding job for K centres. Attempts: a bounded cost (about 128
 * centres' worth), since more centres leave less to the luck of one seeding. */
static quantize_seeding
seeding_for (int k, uint32_t seed)
{
  int attempts = 128 / k;
  quantize_seeding job = { k, 2 + (int) floor (log ((double) k)),
                           attempts < 1 ? 1 : attempts > QUANTIZE_ATTEMPTS ? QUANTIZE_ATTEMPTS : attempts,
                           SAMPLE_ITERATIONS, seed };
  return job;
}

/* The attempts on the host: attempt a draws from state seed + a * 2^32 and
 * is independent of the others, so they run in parallel; work holds
 * 3 * n values per thread and acc one quantize_sums per attempt. */
CUDAFX_CPU_CLONES static void
seed_on_host (const sample_set *smp, const quantize_seeding *job, int threads, int64_t *work,
              quantize_sums *acc, int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found,
              int64_t *error)
{
#pragma omp parallel for num_threads (threads) schedule (dynamic, 1)
  for (int a = 0; a < job->attempts; a++)
    {
      uint64_t state = quantize_attempt_state (job->seed, a);
      int64_t *mine = work + (size_t) omp_get_thread_num () * 3 * smp->n;
      found[a] = seed_centres (smp, job->k, job->trials, &state, mine, mine + smp->n, centres[a]);
      error[a] = refine_on_sample (smp, found[a], job->iterations, centres[a], &acc[a]);
    }
}

/* The attempt whose centres start the full image: the lowest sample error,
 * the first on ties. */
static int
best_attempt (const int64_t *error, int attempts)
{
  int best = 0;
  for (int a = 1; a < attempts; a++)
    if (error[a] < error[best])
      best = a;
  return best;
}

/* When the sample holds fewer distinct colours than K but the image has
 * more pixels than the sample, colours the sample missed become centres too,
 * in raster order, until K: K >= distinct colours then still reproduces the
 * image exactly. Sequential, on the host. */
static int
add_unsampled_colours (const quantize_ctx *q, int32_t (*centres)[3], int found, int k)
{
  int dims = q->fs.dims, last = 0;
  for (int y = 0; y < q->src->height && found < k; y++)
    {
      const uint8_t *row = cudafx_row (q->src, y);
      for (int x = 0; x < q->width && found < k; x++)
        {
          if (!is_voting (q, row, x))
            continue;
          float f[3] = { 0, 0, 0 };
          float *out[3] = { &f[0], &f[1], &f[2] };
          if (q->plane[0])
            for (int c = 0; c < dims; c++)
              f[c] = q->plane[c][(size_t) y * q->width + x];
          else
            compute_features (q, y, x, 1, out);
          int32_t colour[3] = { (int32_t) f[0], (int32_t) f[1], (int32_t) f[2] };
          /* runs of one colour are common: try the last match first */
          int known = !memcmp (centres[last], colour, sizeof colour);
          for (int j = 0; j < found && !known; j++)
            if (!memcmp (centres[j], colour, sizeof colour))
              {
                known = 1;
                last = j;
              }
          if (!known)
            memcpy (centres[found++], colour, sizeof colour);
        }
    }
  return found;
}

/* ---- the run ------------------------------------------------------------- */

/* Entry n of the mapping from a colour on the 0..255 scale, rounded to the
 * element type (u8: clamp 0..255, round half up; f32: stored as float, not
 * clamped); its features become a centre of the mapping. With `unique`, an
 * entry equal to an earlier one after rounding is dropped: returns whether
 * the entry was kept. */
static int
set_entry (const quantize_ctx *q, const double *colour, int n, int unique, cudafx_palette *palette,
           quantize_mapping *m)
{
  int dims = q->fs.dims, u8 = q->src->type == CUDAFX_U8;
  float v[3], f[3], stored[3] = { 0, 0, 0 };
  uint8_t code[3] = { 0, 0, 0 };
  for (int c = 0; c < dims; c++)
    {
      if (u8)
        {
          double r = floor (colour[c] + 0.5);
          code[c] = (uint8_t) (r < 0 ? 0 : r > 255 ? 255 : r);
          v[c] = (float) code[c];
        }
      else
        {
          stored[c] = (float) (colour[c] / 255.0);
          v[c] = stored[c] * 255.0f;
        }
    }
  for (int e = 0; e < n && unique; e++)
    if (u8 ? !memcmp (m->pal.u8[e], code, sizeof code) : !memcmp (m->pal.f32[e], stored, sizeof stored))
      return 0;
  memcpy (m->pal.u8[n], code, sizeof code);
  memcpy (m->pal.f32[n], stored, sizeof stored);
  for (int c = 0; c < 3; c++)
    m->value[n][c] = c < dims ? v[c] : 0.0f;
  features_of (&q->fs, v, u8 ? code : NULL, f);
  for (int c = 0; c < 3; c++)
    m->pal.centre[n][c] = c < dims ? f[c] : 0.0f;
  if (palette)
    for (int c = 0; c < 3; c++)
      palette->entries[n][c] = c >= dims ? 0.0 : u8 ? code[c] : (double) stored[c] * 255.0;
  return 1;
}

/* The positioned dithers' amplitude: the median, over the entries, of the
 * distance (0..255 scale, per channel: the Euclidean distance over
 * sqrt (dims), since the threshold moves every channel at once) to the
 * nearest other entry. A ramp of evenly spaced greys gets its step, so a
 * flat grey between two levels is reproduced in proportion; a palette of
 * clusters gets their spacing. */
static float
dither_spread (const quantize_mapping *m, int dims)
{
  int k = m->pal.k;
  if (k < 2)
    return 0.0f;
  double nearest[CUDAFX_MAX_COLORS];
  for (int i = 0; i < k; i++)
    {
      nearest[i] = INFINITY;
      for (int j = 0; j < k; j++)
        {
          double d = 0;
          for (int c = 0; c < dims; c++)
            d += ((double) m->value[i][c] - m->value[j][c]) * ((double) m->value[i][c] - m->value[j][c]);
          if (j != i && d > 0 && d < nearest[i])
            nearest[i] = d;
        }
    }
  /* insertion sort: at most 256 values, once a run */
  for (int i = 1; i < k; i++)
    for (int j = i; j > 0 && nearest[j] < nearest[j - 1]; j--)
      {
        double t = nearest[j];
        nearest[j] = nearest[j - 1];
        nearest[j - 1] = t;
      }
  double median = nearest[(k - 1) / 2];
  return isfinite (median) ? (float) sqrt (median / dims) : 0.0f;
}

/* The mapping's entries' range per channel and the dither's amplitude. */
static void
finish_mapping (quantize_mapping *m, int n, int dims, cudafx_dither dither)
{
  m->pal.k = n;
  m->dither = dither;
  for (int c = 0; c < 3; c++)
    {
      m->lo[c] = m->hi[c] = m->value[0][c];
      for (int j = 1; j < n; j++)
        {
          m->lo[c] = fminf (m->lo[c], m->value[j][c]);
          m->hi[c] = fmaxf (m->hi[c], m->value[j][c]);
        }
    }
  m->spread = dither_spread (m, dims);
  /* the centres in order of their first feature, then of index (insertion
   * sort: at most 256, once a run) */
  for (int j = 0; j < n; j++)
    {
      float e[4] = { m->pal.centre[j][0], m->pal.centre[j][1], m->pal.centre[j][2], (float) j };
      int at = j;
      for (; at > 0 && m->sorted[at - 1][0] > e[0]; at--)
        memcpy (m->sorted[at], m->sorted[at - 1], sizeof e);
      memcpy (m->sorted[at], e, sizeof e);
    }
}

/* Rounds the centres to palette entries of the element type and drops
 * duplicates. */
static int
build_palette (const quantize_ctx *q, const int32_t (*centres)[3], int k, cudafx_palette *palette,
               quantize_mapping *m)
{
  int n = 0;
  for (int j = 0; j < k; j++)
    {
      double colour[3];
      colour_of_centre (&q->fs, centres[j], colour);
      n += set_entry (q, colour, n, 1, palette, m);
    }
  return n;
}

/* A given palette, entry for entry (duplicates kept: the entries keep their
 * indices, and the first of equal entries is the one ever taken). */
static int
given_palette (const quantize_ctx *q, const cudafx_palette *given, cudafx_palette *palette,
               quantize_mapping *m)
{
  for (int j = 0; j < given->colors; j++)
    set_entry (q, given->entries[j], j, 0, palette, m);
  return given->colors;
}

/* A given palette the image can take: 1..256 finite entries, grey ones for
 * a grey image. */
static cudafx_status
check_given (const cudafx_palette *given, int dims)
{
  if (given->colors < 1 || given->colors > CUDAFX_MAX_COLORS)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "quantize: palette has %d colors (1..%d expected)",
                        given->colors, CUDAFX_MAX_COLORS);
  if (given->channels != 1 && given->channels != 3)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "quantize: palette has %d channels (1 or 3 expected)",
                        given->channels);
  for (int j = 0; j < given->colors; j++)
    for (int c = 0; c < given->channels; c++)
      {
        double v = given->entries[j][c];
        if (!isfinite (v))
          return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "quantize: palette entry %d is not a finite color", j);
        if (dims == 1 && c > 0 && v != given->entries[j][0])
          return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                              "quantize: palette entry %d (%g %g %g) is not grey: a grey image takes "
                              "a palette of greys",
                              j, given->entries[j][0], given->entries[j][1], given->entries[j][2]);
      }
  return CUDAFX_OK;
}

/* ---- Floyd–Steinberg as a wavefront ---------------------------------------
 *
 * In the sequential scan the error of pixel (x, y) receives, in this order,
 * 1/16, 5/16 and 3/16 from pixels x-1, x, x+1 of row y-1, then 7/16 from
 * pixel x-1 of row y. Row y may therefore take pixel x once row y-1 has
 * finished pixel x+2 (or the whole row, near its end): every addition to a
 * row's error then happens in the sequential order, so the output is the
 * same bit for bit with any number of threads. Thread t takes rows t, t+n,
 * t+2n ... and publishes how far it is (release) every DITHER_PUBLISH pixels
 * and at each row's end; the thread of row y reads its predecessor's
 * progress (acquire) only when its last reading is not far enough. */

#define DITHER_PUBLISH 32 /* pixels between publications of a row's progress */
#define DITHER_SPINS   64 /* pause spins before a waiting thread yields its core */

/* One thread's progress: y * (width + 1) + pixels finished of its current row
 * y. It only grows, as the thread's rows do, so "row y has finished x pixels"
 * is "progress >= y * (width + 1) + x" whichever later row the thread is on.
 * A cache line each, so that publishing does not disturb other threads. */
typedef struct {
  _Alignas (64) atomic_llong at;
} dither_progress;

typedef struct {
  quantize_ctx    *q;
  float            lo[3], hi[3];  /* the palette's range per channel */
  int              limit;         /* reduced bleeding: quantize_limit_error on the incoming error */
  float           *err;           /* `ring` rows of error, guard pixel at each end */
  size_t           row_len;       /* floats per error row */
  int              ring;
  int              threads;       /* of the team: rows go round robin */
  dither_progress *done;          /* per thread */
  atomic_int       stop;          /* set on cancel; waiters watch it */
} dither_state;

static void
cpu_relax (void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause ();
#elif defined(__aarch64__)
  __asm__ volatile ("yield");
#endif
}

/* Waits until *above reaches need; 0 when the dither is stopped instead. A
 * thread waiting longer than a few spins yields its core, so that more
 * threads than cores still progress. */
static int
dither_wait (dither_state *d, dither_progress *above, long long need, long long *seen)
{
  for (int spins = 0;; spins++)
    {
      *seen = atomic_load_explicit (&above->at, memory_order_acquire);
      if (*seen >= need)
        return 1;
      if (atomic_load_explicit (&d->stop, memory_order_relaxed))
        return 0;
      if (spins < DITHER_SPINS)
        cpu_relax ();
      else
        sched_yield ();
    }
}

/* Row y of the dither; 0 when stopped before its end. */
CUDAFX_CPU_CLONES static int
dither_row (dither_state *d, int y)
{
  quantize_ctx *q = d->q;
  const cudafx_image *src = q->src;
  int w = q->width, dims = q->fs.dims, n = d->threads;
  /* Error ring of n + 1 rows. Row y uses error rows y and y + 1, and zeroes
   * row y + 1 now, in the slot of row y + 1 - ring <= y - n. Rows y - n and
   * below, the only ones that use that row, are finished: row y - n was this
   * thread's (rows are round robin), and a row finishes only after the row
   * above it has (its last pixel waits for the whole row above). Row y + 1
   * starts only after row y publishes, so after this zeroing. */
  float *cur = d->err + (size_t) (y % d->ring) * d->row_len + 3;
  float *next = d->err + (size_t) ((y + 1) % d->ring) * d->row_len + 3;
  memset (next - 3, 0, d->row_len * sizeof *next);
  dither_progress *mine = &d->done[y % n], *above = &d->done[(y + n - 1) % n];
  /* one thread: above is mine and has finished row y - 1; row 0 needs a
   * negative count, so the initial 0 passes */
  long long start = (long long) y * (w + 1), above_start = start - (w + 1);
  long long seen = atomic_load_explicit (&above->at, memory_order_acquire);
  const uint8_t *row = cudafx_row (src, y);
  for (int x = 0; x < w; x++)
    {
      long long need = above_start + (x + 3 < w ? x + 3 : w);
      if (seen < need && !dither_wait (d, above, need, &seen))
        return 0;
      float v[3] = { 0, 0, 0 }, f[3] = { 0, 0, 0 };
      float *fp[3] = { &f[0], &f[1], &f[2] };
      uint8_t code[3];
      int32_t j;
      int voting = is_voting (q, row, x);
      if (voting)
        {
          read_pixel (src, row, x, dims, v, code);
          for (int c = 0; c < dims; c++)
            {
              float in = d->limit ? quantize_limit_error (cur[3 * x + c]) : cur[3 * x + c];
              float e = quantize_sanitize (v[c]) + in;
              v[c] = e < d->lo[c] ? d->lo[c] : e > d->hi[c] ? d->hi[c] : e;
            }
          features_of (&q->fs, v, NULL, f);
        }
      else
        compute_features (q, y, x, 1, fp);
      j = quantize_nearest_sorted ((const float (*)[4]) q->map->sorted, q->k, f[0], f[1], f[2]);
      write_block (q, y, x, 1, (const float *const *) fp, &j);
      if (voting)
        for (int c = 0; c < dims; c++)
          {
            float e = v[c] - q->map->value[j][c];
            cur[3 * (x + 1) + c] += e * (7.0f / 16.0f);
            next[3 * (x - 1) + c] += e * (3.0f / 16.0f);
            next[3 * x + c] += e * (5.0f / 16.0f);
            next[3 * (x + 1) + c] += e * (1.0f / 16.0f);
          }
      if ((x + 1) % DITHER_PUBLISH == 0)
        atomic_store_explicit (&mine->at, start + x + 1, memory_order_release);
    }
  atomic_store_explicit (&mine->at, start + w, memory_order_release);
  return 1;
}

/* Floyd–Steinberg (see the header) on the CPU's threads. Progress and cancel
 * stay on the calling thread (thread 0): hosts' callbacks are not
 * thread-safe. */
CUDAFX_CPU_CLONES static cudafx_status
dither_image (quantize_ctx *q, const cudafx_options *o)
{
  int h = q->src->height, threads = cudafx_thread_count (o);
  threads = threads < h ? threads : h;
  dither_state d = { .q = q, .ring = threads + 1, .row_len = ((size_t) q->width + 2) * 3,
                     .limit = q->map->dither == CUDAFX_DITHER_FS_LOW_BLEED };
  d.err = calloc ((size_t) d.ring * d.row_len, sizeof *d.err);
  d.done = aligned_alloc (_Alignof (dither_progress), (size_t) threads * sizeof *d.done);
  cudafx_status s = CUDAFX_OK;
  if (!d.err || !d.done)
    {
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for the dither rows");
      goto done;
    }
  for (int t = 0; t < threads; t++)
    atomic_init (&d.done[t].at, 0);
  atomic_init (&d.stop, 0);
  for (int c = 0; c < 3; c++)
    {
      d.lo[c] = q->map->lo[c];
      d.hi[c] = q->map->hi[c];
    }
#pragma omp parallel num_threads (threads)
  {
    /* the team may be smaller than asked (nested, limits): a ring of
     * `threads` + 1 rows still suffices */
#pragma omp single
    d.threads = omp_get_num_threads ();
    int me = omp_get_thread_num ();
    for (int y = me; y < h && dither_row (&d, y); y += d.threads)
      if (me == 0 && (s = cudafx_progress (o, 0.9 + 0.1 * (y + 1) / h)))
        {
          atomic_store_explicit (&d.stop, 1, memory_order_relaxed);
          break;
        }
  }
  /* thread 0 reported its last row; the image's last row may be another's */
  if (!s && (h - 1) % d.threads)
    s = cudafx_progress (o, 1.0);
done:
  free (d.err);
  free (d.done);
  return s;
}

/* ---- the seeding sample ----------------------------------------------------
 *
 * Sample j is the voting pixel of rank floor (j * n / S) in raster order. Row
 * y holds ranks [R, R + votes) (R: voting pixels above it), so its samples
 * are j = ceil (R * S / n) .. ceil ((R + votes) * S / n) - 1: every row
 * finds its own, and the rows run in parallel. */

typedef struct {
  const quantize_ctx *q;
  uint64_t            n_vote;
  const uint64_t     *rank;  /* voting pixels above each row */
  sample_set         *smp;
} sample_job;

static void
sample_rows (void *ctx_, int y0, int y1)
{
  const sample_job *job = ctx_;
  const quantize_ctx *q = job->q;
  const sample_set *smp = job->smp;
  for (int y = y0; y < y1; y++)
    {
      uint64_t rank = job->rank[y];
      uint64_t j = quantize_first_sample (rank, job->n_vote, smp->n);
      uint64_t end = quantize_first_sample (rank + (uint64_t) q->row_votes[y], job->n_vote, smp->n);
      const uint8_t *row = cudafx_row (q->src, y);
      uint64_t next = quantize_sample_rank (j, job->n_vote, smp->n);
      for (int x = 0; j < end; x++)
        {
          if (q->everyone_votes)
            {
              /* every pixel votes: the sample's x follows from its rank */
              x += (int) (next - rank);
              rank = next;
            }
          else if (!is_voting (q, row, x))
            continue;
          if (rank == next)
            {
              float *out[3] = { smp->plane[0] + j, smp->plane[1] + j, smp->plane[2] + j };
              compute_features (q, y, x, 1, out);
              next = quantize_sample_rank (++j, job->n_vote, smp->n);
            }
          rank++;
        }
    }
}

/* Every pixel of a u8 image votes: sample j is pixel floor (j * n / S),
 * taken as its values (smp->codes), on this thread: no parallel region,
 * whose threads spin on after it and would compete with a host's own
 * threads (the GEGL module's), and the features' arithmetic goes to the
 * seeding (the device's, or sample_features). floor (j * n / S) = j * q +
 * floor (j * r / S) with n = q * S + r, the last term kept as a running
 * quotient and remainder. */
static void
sample_codes (const quantize_ctx *q, uint64_t n_vote, sample_set *smp)
{
  const cudafx_image *src = q->src;
  uint64_t whole = n_vote / (uint64_t) smp->n, part = n_vote % (uint64_t) smp->n, quotient = 0, remainder = 0;
  for (int j = 0; j < smp->n; j++)
    {
      uint64_t rank = (uint64_t) j * whole + quotient;
      int y = (int) (rank / (uint64_t) q->width), x = (int) (rank - (uint64_t) y * q->width);
      const uint8_t *px = (const uint8_t *) cudafx_row (src, y) + (size_t) x * src->channels;
      for (int c = 0; c < smp->dims; c++)
        smp->plane[c][j] = px[c];
      remainder += part;
      if (remainder >= (uint64_t) smp->n)
        {
          remainder -= (uint64_t) smp->n;
          quotient++;
        }
    }
  smp->codes = 1;
}

/* Features of a sample taken as codes, in place, SAMPLE_CHUNK samples a
 * task. */
#define SAMPLE_CHUNK 1024

typedef struct {
  const quantize_space *fs;
  sample_set           *smp;
} code_job;

CUDAFX_CPU_CLONES static void
code_chunks (void *ctx_, int c0, int c1)
{
  const code_job *job = ctx_;
  sample_set *smp = job->smp;
  for (int j = c0 * SAMPLE_CHUNK; j < c1 * SAMPLE_CHUNK && j < smp->n; j++)
    {
      float v[3] = { 0, 0, 0 }, f[3] = { 0, 0, 0 };
      uint8_t code[3] = { 0, 0, 0 };
      for (int c = 0; c < smp->dims; c++)
        code[c] = (uint8_t) (v[c] = smp->plane[c][j]);
      features_of (job->fs, v, code, f);
      for (int c = 0; c < smp->dims; c++)
        smp->plane[c][j] = f[c];
    }
}

static cudafx_status
sample_features (const quantize_space *fs, sample_set *smp, const cudafx_options *o)
{
  code_job job = { fs, smp };
  smp->codes = 0;
  return cudafx_parallel_rows ((smp->n + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK, code_chunks, &job, o, 0.1, 0.1);
}

static cudafx_status
take_sample (const quantize_ctx *q, uint64_t n_vote, sample_set *smp, const cudafx_options *o)
{
  if (q->everyone_votes && q->src->type == CUDAFX_U8)
    {
      sample_codes (q, n_vote, smp);
      return CUDAFX_OK;
    }
  int h = q->src->height;
  uint64_t *rank = malloc ((size_t) h * sizeof *rank);
  if (!rank)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for the seeding sample");
  rank[0] = 0;
  for (int y = 1; y < h; y++)
    rank[y] = rank[y - 1] + (uint64_t) q->row_votes[y - 1];
  sample_job job = { q, n_vote, rank, smp };
  cudafx_status s = cudafx_parallel_rows (h, sample_rows, &job, o, 0.1, 0.1);
  free (rank);
  return s;
}

/* The seeding attempts on the host (the reference; also what the engine
 * runs when a backend leaves the seeding to it). */
static cudafx_status
seed_reference (const sample_set *smp, const quantize_seeding *job, const cudafx_options *o,
                int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found, int64_t *error)
{
  int threads = cudafx_thread_count (o);
  threads = threads < job->attempts ? threads : job->attempts;
  int64_t *work = malloc ((size_t) smp->n * 3 * (size_t) threads * sizeof *work);
  quantize_sums *acc = malloc (QUANTIZE_ATTEMPTS * sizeof *acc);
  cudafx_status s = CUDAFX_OK;
  if (!work || !acc)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for the seeding sample");
  else
    seed_on_host (smp, job, threads, work, acc, centres, found, error);
  free (work);
  free (acc);
  return s;
}

/* ---- the distinct colours (u8) ----------------------------------------------
 *
 * A voting pixel's key is its colour bytes (RGB: r << 16 | g << 8 | b;
 * grey: the value). A radix partition by the top byte: each chunk of rows
 * counts its keys per top byte; prefix sums over (top byte, chunk) give each
 * chunk its places, where it writes the low 16 bits, so a bucket's keys lie
 * together. Each bucket then counts its keys in a table of 2^16 counters of
 * its thread's own (256 KiB, in that core's cache) and lists every key once
 * with its count, clearing the counters as it goes; it does that twice,
 * first for the number of colours per bucket (their places in the list),
 * then to write them. 2 bytes per voting pixel for the time of the build,
 * and no atomics: the same speed per core on 2 cores or 16. The arrays are
 * cudafx_host_alloc_plain's, in huge pages: on a virtual machine the 4 KB
 * pages' faults cost more than the build itself (docs/BENCHMARKS.md,
 * "Quantize: distinct colours, seeding and the sample"). */

#define DISTINCT_CHUNKS 1024   /* most chunks of rows in the partition */
#define DISTINCT_LOW    65536  /* keys per bucket: the low 16 bits */

typedef struct {
  quantize_ctx *q;
  int           rows;         /* rows per chunk */
  size_t      (*place)[256];  /* per chunk and top byte: keys, then the first place */
  size_t        start[257];   /* bucket b: low[start[b] .. start[b + 1]) */
  size_t        first[256];   /* bucket b: colours, then its first place in the list */
  uint16_t     *low;
  uint32_t     *table;        /* DISTINCT_LOW zeroed counters per thread */
  int           scatter;      /* the partition's second pass */
  int           write;        /* the buckets' second pass: write the list */
} distinct_job;

/* Top byte and low 16 bits of the key of pixel x of a row. */
static inline void
pixel_key (const quantize_ctx *q, const uint8_t *row, int x, int *top, int *low)
{
  const uint8_t *px = row + (size_t) x * q->src->channels;
  *top = px[0];
  *low = q->fs.dims == 3 ? px[1] << 8 | px[2] : 0;
}

/* Per chunk of rows: counts the keys of each top byte (the first pass), or
 * writes each key's low bits at its bucket's next place (the second). */
CUDAFX_CPU_CLONES static void
partition_chunks (void *ctx_, int c0, int c1)
{
  distinct_job *job = ctx_;
  const quantize_ctx *q = job->q;
  for (int c = c0; c < c1; c++)
    for (int y = c * job->rows; y < (c + 1) * job->rows && y < q->src->height; y++)
      {
        const uint8_t *row = cudafx_row (q->src, y);
        for (int x = 0; x < q->width; x++)
          if (is_voting (q, row, x))
            {
              int top, low;
              pixel_key (q, row, x, &top, &low);
              if (job->scatter)
                job->low[job->place[c][top]++] = (uint16_t) low;
              else
                job->place[c][top]++;
            }
      }
}

/* Colour `at` of the list: key top << 16 | low, n voting pixels. */
static void
store_colour (quantize_ctx *q, int top, int low, uint32_t n, size_t at)
{
  uint8_t code[3] = { (uint8_t) top, (uint8_t) (low >> 8), (uint8_t) low };
  float v[3] = { code[0], code[1], code[2] }, f[3];
  features_of (&q->fs, v, code, f);
  for (int c = 0; c < q->fs.dims; c++)
    q->colour[c][at] = f[c];
  q->count[at] = n;
}

CUDAFX_CPU_CLONES static void
bucket_colours (void *ctx_, int b0, int b1)
{
  distinct_job *job = ctx_;
  uint32_t *table = job->table + (size_t) omp_get_thread_num () * DISTINCT_LOW;
  for (int b = b0; b < b1; b++)
    {
      const uint16_t *low = job->low + job->start[b];
      size_t len = job->start[b + 1] - job->start[b], found = 0;
      for (size_t i = 0; i < len; i++)
        table[low[i]]++;
      for (size_t i = 0; i < len; i++)
        {
          uint32_t n = table[low[i]];
          if (!n)
            continue;
          table[low[i]] = 0;
          if (job->write)
            store_colour (job->q, b, low[i], n, job->first[b] + found);
          found++;
        }
      if (!job->write)
        job->first[b] = found;
    }
}

/* The distinct colours of the voting pixels and their counts into
 * q->colours, colour and count (the plan's distinct path: u8, fewer than
 * 2^32 pixels, so that a count fits uint32). Progress from `from` to `to`. */
static cudafx_status
find_colours (quantize_ctx *q, const cudafx_options *o, double from, double to)
{
  int h = q->src->height, threads = cudafx_thread_count (o);
  int chunks = h < DISTINCT_CHUNKS ? h : DISTINCT_CHUNKS;
  distinct_job job = { .q = q, .rows = (h + chunks - 1) / chunks };
  chunks = (h + job.rows - 1) / job.rows;
  size_t n = (size_t) q->src->width * (size_t) h;
  double step = (to - from) / 4;
  cudafx_status s = CUDAFX_OK;
  job.place = calloc ((size_t) chunks, sizeof *job.place);
  job.low = cudafx_host_alloc_plain (n * sizeof *job.low);
  job.table = calloc ((size_t) threads * DISTINCT_LOW, sizeof *job.table);
  if (!job.place || !job.low || !job.table)
    {
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for %zu pixels", n);
      goto done;
    }
  if ((s = cudafx_parallel_rows (chunks, partition_chunks, &job, o, from, from + step)))
    goto done;
  size_t at = 0;
  for (int b = 0; b < 256; b++)
    {
      job.start[b] = at;
      for (int c = 0; c < chunks; c++)
        {
          size_t keys = job.place[c][b];
          job.place[c][b] = at;
          at += keys;
        }
    }
  job.start[256] = at;
  job.scatter = 1;
  if ((s = cudafx_parallel_rows (chunks, partition_chunks, &job, o, from + step, from + 2 * step)) ||
      (s = cudafx_parallel_rows (256, bucket_colours, &job, o, from + 2 * step, from + 3 * step)))
    goto done;
  q->colours = 0;
  for (int b = 0; b < 256; b++)
    {
      size_t found = job.first[b];
      job.first[b] = q->colours;
      q->colours += found;
    }
  int taken = !!(q->count = cudafx_host_alloc_plain (q->colours * sizeof *q->count));
  for (int c = 0; c < q->fs.dims; c++)
    taken &= !!(q->colour[c] = cudafx_host_alloc_plain (q->colours * sizeof (float)));
  if (!taken)
    {
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for %zu pixels", n);
      goto done;
    }
  job.write = 1;
  s = cudafx_parallel_rows (256, bucket_colours, &job, o, from + 3 * step, to);
done:
  free (job.place);
  free (job.low);
  free (job.table);
  return s;
}

/* ---- the CPU backend's session (core/cpu.c's table) ---------------------- */

void
cudafx_quantize_cpu_close (quantize_session *ses)
{
  if (!ses)
    return;
  for (int c = 0; c < 3; c++)
    {
      free (ses->q.plane[c]);
      free (ses->q.colour[c]);
    }
  free (ses->q.count);
  free (ses->q.acc);
  free (ses);
}

cudafx_status
cudafx_quantize_cpu_open (const quantize_plan *plan, const cudafx_options *o, quantize_session **out)
{
  const cudafx_image *src = plan->src;
  int threads = cudafx_thread_count (o);
  size_t n = (size_t) src->width * (size_t) src->height; /* checked by quantize_run */
  quantize_session *ses = *out = calloc (1, sizeof *ses);
  if (!ses)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory");
  quantize_ctx *q = &ses->q;
  ses->o = o;
  q->src = src;
  q->width = src->width;
  q->fs = plan->fs;
  q->everyone_votes = plan->everyone_votes;
  /* Oklab features cost cube roots: computed once (up to CACHE_MAX_PIXELS)
   * for the passes over every pixel. RGB ones are recomputed from the
   * pixels in every pass, cheaper than reading a cache. The distinct path's
   * Lloyd reads its colours' features, and the one mapping pass computes
   * each pixel's as a cache would. */
  int want_cache = q->fs.oklab && n <= CACHE_MAX_PIXELS && !plan->distinct, cache = want_cache;
  for (int c = 0; c < q->fs.dims && cache; c++)
    if (!(q->plane[c] = malloc (n * sizeof (float))))
      cache = 0;
  q->acc = malloc ((size_t) threads * sizeof (quantize_sums));
  if (cache != want_cache || !q->acc)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for %zu pixels", n);
  if (plan->distinct)
    return find_colours (q, o, 0.05, 0.1);
  return cache ? cudafx_parallel_rows (src->height, cache_rows, q, o, 0.05, 0.1) : CUDAFX_OK;
}

/* The CPU gets all rows first (cudafx_dispatch) and leaves the sample to
 * the host: nothing to do as they are handed over. */
cudafx_status
cudafx_quantize_cpu_rows (quantize_session *ses, int y0, int y1, int *sampled)
{
  *sampled = 0;
  return CUDAFX_OK;
}

/* The engine's own seeding is the CPU's. */
cudafx_status
cudafx_quantize_cpu_seed (quantize_session *ses, const sample_set *smp, const quantize_seeding *job,
                          int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found, int64_t *error,
                          int *seeded)
{
  *seeded = 0;
  return CUDAFX_OK;
}

cudafx_status
cudafx_quantize_cpu_assign (quantize_session *ses, const float (*centre)[3], int k, quantize_sums *sums,
                            double from, double to)
{
  quantize_ctx *q = &ses->q;
  int threads = cudafx_thread_count (ses->o), dims = q->fs.dims;
  q->centre = centre;
  q->k = k;
  memset (q->acc, 0, (size_t) threads * sizeof (quantize_sums));
  cudafx_status s = q->colours ? cudafx_parallel_rows ((int) ((q->colours + BLOCK - 1) / BLOCK), assign_colours, q,
                                                       ses->o, from, to)
                               : cudafx_parallel_rows (q->src->height, assign_rows, q, ses->o, from, to);
  for (int t = 1; t < threads && !s; t++)
    for (int j = 0; j < k; j++)
      {
        for (int c = 0; c < dims; c++)
          q->acc[0].sums[j][c] += q->acc[t].sums[j][c];
        q->acc[0].counts[j] += q->acc[t].counts[j];
      }
  if (!s)
    *sums = q->acc[0];
  return s;
}

/* The engine's own passes are the CPU's. */
cudafx_status
cudafx_quantize_cpu_lloyd (quantize_session *ses, int32_t (*centres)[3], int k, int max_iterations,
                           int *iterations, double from, double to, int *ran)
{
  *ran = 0;
  return CUDAFX_OK;
}

cudafx_status
cudafx_quantize_cpu_map (quantize_session *ses, const quantize_mapping *m, cudafx_image *dst)
{
  quantize_ctx *q = &ses->q;
  q->dst = dst;
  q->map = m;
  q->centre = (const float (*)[3]) m->pal.centre;
  q->k = m->pal.k;
  if (quantize_is_diffusion (m->dither))
    return dither_image (q, ses->o);
  return cudafx_parallel_rows (q->src->height, m->dither ? position_rows : map_rows, q, ses->o, 0.9, 1.0);
}

/* ---- the engine's side ----------------------------------------------------- */

static int
sample_size (uint64_t n_vote)
{
  return n_vote < QUANTIZE_SAMPLE_MAX ? (int) n_vote : QUANTIZE_SAMPLE_MAX;
}

/* K-means on backend b's session: the sample (unless the backend took it,
 * `sampled`), the choice of the seeding attempt and Lloyd's centre updates
 * here, the passes over every pixel and the seeding attempts by the
 * backend. Writes the centres, their count and the iterations run. */
static cudafx_status
kmeans (const cudafx_backend_ops *b, quantize_session *ses, quantize_ctx *q, const cudafx_quantize_params *p,
        uint64_t n_vote, int sampled, const cudafx_options *o, int32_t (*centres)[3], int *iterations)
{
  int dims = q->fs.dims;
  cudafx_status s = CUDAFX_OK;
  int count = sample_size (n_vote);
  float *sample_planes = calloc ((size_t) count * 3, sizeof *sample_planes);
  int32_t (*attempt)[CUDAFX_MAX_COLORS][3] = malloc (QUANTIZE_ATTEMPTS * sizeof *attempt);
  quantize_sums *sums = malloc (sizeof *sums);
  if (!sample_planes || !attempt || !sums)
    {
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for the seeding sample");
      goto done;
    }
  sample_set smp = { count, dims, { sample_planes, sample_planes + count, sample_planes + 2 * count }, 0 };
  sample_set held = { count, dims, { NULL, NULL, NULL }, 1 }; /* the backend's, as values */
  if (!sampled && (s = take_sample (q, n_vote, &smp, o)))
    goto done;
  quantize_seeding seeding = seeding_for (p->colors, p->seed);
  int found[QUANTIZE_ATTEMPTS], seeded = 0;
  int64_t error[QUANTIZE_ATTEMPTS];
  if ((s = b->quantize_seed (ses, sampled ? &held : &smp, &seeding, attempt, found, error, &seeded)) ||
      (!seeded && sampled && (s = take_sample (q, n_vote, &smp, o))) ||
      (!seeded && smp.codes && (s = sample_features (&q->fs, &smp, o))) ||
      (!seeded && (s = seed_reference (&smp, &seeding, o, attempt, found, error))))
    goto done;
  int best = best_attempt (error, seeding.attempts);
  memcpy (centres, attempt[best], sizeof attempt[best]);
  q->k = found[best];
  if (q->k < p->colors && n_vote > (uint64_t) count)
    q->k = add_unsampled_colours (q, centres, q->k, p->colors);
  for (int j = 0; j < q->k; j++)
    for (int c = 0; c < 3; c++)
      q->lloyd[j][c] = (float) centres[j][c];

  /* Assignments stop changing exactly when an update leaves every centre
   * where it was: the next assignment would repeat this one. The backend
   * may run the loop itself (the same passes and updates), else it runs
   * here pass by pass. */
  int moved = 1, ran = 0;
  *iterations = 0;
  if ((s = b->quantize_lloyd (ses, centres, q->k, p->max_iterations, iterations, 0.1, 0.9, &ran)))
    goto done;
  for (int it = 1; it <= p->max_iterations && moved && !ran; it++)
    {
      double from = 0.1 + 0.8 * (it - 1) / p->max_iterations;
      double to = 0.1 + 0.8 * it / p->max_iterations;
      if ((s = b->quantize_assign (ses, (const float (*)[3]) q->lloyd, q->k, sums, from, to)))
        goto done;
      *iterations = it;
      moved = update_centres (sums, q->k, dims, centres);
      for (int j = 0; j < q->k; j++)
        for (int c = 0; c < dims; c++)
          q->lloyd[j][c] = (float) centres[j][c];
    }
done:
  free (sample_planes);
  free (attempt);
  free (sums);
  return s;
}

/* The pieces in which a u8 image without alpha is handed to the backend
 * (quantize_rows), which can then take the seeding sample itself: the CUDA
 * one gathers it on the device from the uploaded rows, where the host's
 * one thread held up the seeding (docs/BENCHMARKS.md, "Quantize: distinct
 * colours, seeding and the sample"). When the host provides src's rows as they
 * are asked for (options.rows_needed: only on the CUDA backend,
 * cudafx_dispatch asks for all of them before any other run), pieces of at
 * least STREAM_PIECE_BYTES, at most STREAM_PIECES, each asked for and handed
 * over in turn: the GPU uploads a piece, counts its colours and takes its
 * samples while the host provides the next, so that only the last piece's
 * share lies between the last row and the seeding. Few pieces: a GEGL
 * operation's read costs a round of its threads each. Else one piece; 0
 * (other images): all rows are asked for first and the host samples.
 * CUDAFX_QUANTIZE_PIECES=N (tests, measurements): N pieces when asking,
 * whatever the size (one row each at least). */
#define STREAM_PIECES      4
#define STREAM_PIECE_BYTES ((size_t) 4 << 20)

static int
row_pieces (const cudafx_image *src, const cudafx_options *o)
{
  if (src->has_alpha || src->type != CUDAFX_U8)
    return 0;
  if (!o || !o->rows_needed)
    return 1;
  const char *env = cudafx_test_switch ("CUDAFX_QUANTIZE_PIECES");
  size_t pieces = (size_t) src->width * (size_t) src->height * (size_t) src->channels / STREAM_PIECE_BYTES;
  pieces = env && atoi (env) > 0 ? (size_t) atoi (env) : pieces > STREAM_PIECES ? STREAM_PIECES : pieces;
  pieces = pieces > (size_t) src->height ? (size_t) src->height : pieces;
  return pieces < 1 ? 1 : (int) pieces;
}

/* One run on backend b: the votes, then k-means (or the given palette), the
 * palette, and the mapping by the backend. */
static cudafx_status
quantize_run (const cudafx_backend_ops *b, void *job_, const cudafx_options *o)
{
  const quantize_job *job = job_;
  const cudafx_image *src = job->src;
  const cudafx_quantize_params *p = job->p;
  int dims = src->channels - src->has_alpha, h = src->height;
  size_t n = (size_t) src->width * (size_t) h;
  cudafx_status s = CUDAFX_OK;
  quantize_session *ses = NULL;
  quantize_mapping *map = NULL;
  int32_t (*centres)[3] = NULL;
  quantize_ctx *q = calloc (1, sizeof *q);
  if (!q)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory");
  q->src = src;
  q->width = src->width;
  /* f32 without alpha: every pixel votes unless one is not finite (the
   * vote pass below finds out) */
  q->everyone_votes = !src->has_alpha && src->type == CUDAFX_U8;
  feature_space_init (&q->fs, dims, p->color_space == CUDAFX_SPACE_OKLAB);

  if (n / (size_t) src->width != (size_t) h || n > SIZE_MAX / sizeof (float))
    {
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: image size overflows");
      goto done;
    }
  q->row_votes = malloc ((size_t) h * sizeof (int));
  map = calloc (1, sizeof *map);
  centres = malloc (CUDAFX_MAX_COLORS * sizeof *centres);
  if (!q->row_votes || !map || !centres)
    {
      s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "quantize: out of memory for %zu pixels", n);
      goto done;
    }

  int pieces = row_pieces (src, o);
  if (!pieces && (s = cudafx_source_rows (o, FILTER, h)))
    goto done;
  /* u8 without alpha: every row votes whole, no pass (nor threads) needed */
  if (q->everyone_votes)
    for (int y = 0; y < h; y++)
      q->row_votes[y] = q->width;
  else if ((s = cudafx_parallel_rows (h, vote_rows, q, o, 0.0, 0.05)))
    goto done;
  uint64_t n_vote = 0;
  for (int y = 0; y < h; y++)
    n_vote += (uint64_t) q->row_votes[y];
  if (n_vote == n && !src->has_alpha)
    q->everyone_votes = 1;
  if (n_vote == 0)
    {
      /* nothing is visible: let every pixel vote rather than have no palette */
      q->everyone_votes = 1;
      for (int y = 0; y < h; y++)
        q->row_votes[y] = q->width;
      n_vote = n;
    }
  /* The distinct colours for u8 (a count fits uint32); CUDAFX_QUANTIZE_PER_PIXEL
   * keeps every pixel, the same sums the long way (tests compare the two). */
  const char *per_pixel = cudafx_test_switch ("CUDAFX_QUANTIZE_PER_PIXEL");
  int distinct = src->type == CUDAFX_U8 && n <= UINT32_MAX && !(per_pixel && *per_pixel && strcmp (per_pixel, "0"));
  quantize_plan plan = { src, q->fs, q->everyone_votes, distinct, p->dither, p->palette ? 0 : sample_size (n_vote) };
  if ((s = b->quantize_open (&plan, o, &ses)))
    goto done;
  int sampled = pieces > 0;
  for (int i = 0, y0 = 0; i < pieces; i++)
    {
      int y1 = (int) ((int64_t) h * (i + 1) / pieces), took = 0;
      if ((s = cudafx_source_rows (o, FILTER, y1)) || (s = b->quantize_rows (ses, y0, y1, &took)))
        goto done;
      sampled &= took;
      y0 = y1;
    }
  int iterations = 0;
  if (!p->palette && (s = kmeans (b, ses, q, p, n_vote, sampled, o, centres, &iterations)))
    goto done;
  if (job->palette)
    memset (job->palette, 0, sizeof *job->palette);
  q->k = p->palette ? given_palette (q, p->palette, job->palette, map)
                    : build_palette (q, (const int32_t (*)[3]) centres, q->k, job->palette, map);
  finish_mapping (map, q->k, dims, p->dither);
  s = b->quantize_map (ses, map, job->dst);
  if (!s && job->palette)
    {
      job->palette->colors = q->k;
      job->palette->channels = dims;
      job->palette->iterations = iterations;
    }

done:
  if (ses)
    b->quantize_close (ses);
  free (centres);
  free (map);
  free (q->row_votes);
  free (q);
  return s;
}

void
cudafx_quantize_params_init (cudafx_quantize_params *p)
{
  cudafx_params_defaults (CUDAFX_FILTER_QUANTIZE, p);
}

cudafx_status
cudafx_quantize (const cudafx_image *src, cudafx_image *dst, const cudafx_quantize_params *p,
                 const cudafx_options *o, cudafx_palette *palette)
{
  cudafx_status s;
  if (!p)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "quantize: params is NULL");
  if ((s = cudafx_check_pair (FILTER, src, dst)))
    return s;
  int dims = src->channels - src->has_alpha;
  if (dims != 1 && dims != 3)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                        "quantize: source image has %d colour channels (1 grey or 3 RGB expected)", dims);
  if ((s = cudafx_params_check (CUDAFX_FILTER_QUANTIZE, p)) || (p->palette && (s = check_given (p->palette, dims))))
    return s;
  quantize_job job = { src, dst, p, palette };
  /* quantize_run asks for src's rows itself on the CUDA backend */
  return cudafx_dispatch (FILTER, quantize_run, &job, src, dst, 1, o);
}
