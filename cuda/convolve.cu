/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Convolution on the GPU; core/convolve.c is the CPU reference, and its
 * header states the arithmetic copied here term for term so that u8 results
 * match bit for bit: float taps from the shared plan (core/convolve.h), sums
 * from 0.0f in tap order, multiply then add (built with --fmad=false), colour
 * premultiplied by alpha with a coverage plane. The CPU skips zero taps; u8
 * sums add them (0 * a finite value adds nothing), f32 sums skip them, since
 * 0 * inf is not 0 (f32 kernels with a zero tap run the generic direct
 * kernel, the only one that tests taps). Taps travel as kernel parameters
 * (constant bank).
 *
 * Tiles: a warp converts one tile row at a time into channel planes of
 * floats in shared memory, four pixels a lane from aligned words (u8 by byte
 * permutes, no conversion unit; f32 as float4), the border policy applied
 * only to groups of pixels that reach past the image. A thread then slides
 * over its row of the tile in float4 steps, so one loaded value serves up to
 * four taps.
 *
 * Direct kernels (not rank 1): each thread computes 4 outputs along a row
 * times 4 down a column from a block tile of its pixels plus the radius;
 * every tile row it reads feeds the taps of each of its 4 output rows, in
 * tap order for every output. Built for 3x3 and 5x5 (loops unrolled, taps
 * as instruction operands) and 15x15 (a tile row's taps unrolled), and for
 * any size.
 *
 * 3x3 and 5x5 without alpha (u8, and f32 kernels without zero taps) take a
 * leaner build of the same scheme (convolve_small_kernel): only the taps as
 * parameters, a tile aligned to whole groups (one float4 store a plane per
 * group, a batch of a thread's loads issued before any conversion), the
 * channels summed one after the other in a loop that is not unrolled
 * (unrolled, the straight code outgrows the instruction cache and stalls on
 * instruction fetch), and each thread's results kept in registers across
 * that loop so that rows leave as whole words: written channel by channel,
 * f32 rows touch eight times the memory sectors they fill. Their sums are
 * bound by instruction issue: a multiply and an add a tap, which the CPU's
 * rounding forbids fusing.
 *
 * u8 direct kernels without alpha whose plan made the sums exact
 * (plan->exact: integer taps, see core/convolve.c) take the same scheme
 * with one fused multiply-add a tap (convolve_exact_kernel, built for 3x3,
 * 5x5 and 15x15; other sizes, the direct kernel with EXACT): a tap row sums
 * in floats from 1.5 * 2^23, where they count units exactly, and its
 * integer, read off the encoding, joins the output's int32 total.
 *
 * Separable u8 without alpha with non-negative taps (plan->fixed16: the
 * Gaussian, the blurs): the CPU's 16-bit fixed point, exactly. Each pass is
 * bias + sum of (value * tap) >> 16; an accumulator starts at 2^39 + bias *
 * 2^16, where floats are the multiples of 2^16, so one fused multiply-add
 * rounded down (__fmaf_rd) adds exactly floor (value * tap / 2^16) units and
 * the encoding's low 16 bits are the CPU's 16-bit lane. The horizontal pass
 * gives each thread 8 outputs along a row of a per-warp tile aligned to
 * groups of four pixels (its planes padded a float4 every two so that a
 * warp's float4 reads meet no bank conflict), its taps fully unrolled for a
 * tap count rounded up to 8, 16, 24 or 32 (larger kernels loop over 32 at a
 * time), and stores 16-bit sums into a scratch of rows padded to 16 bytes;
 * the vertical pass treats the scratch as plain columns of elements
 * (channels need no care), each thread 4 elements times 8 output rows, with
 * 8 scratch rows in registers, each read once for every output it feeds
 * (as 2^23 + lane where the taps allow: one instruction a value), and with
 * offset 0 reads its u8 results off the lanes as integers.
 *
 * Other separable kernels (f32, alpha, negative taps): a horizontal pass
 * into a float scratch (rows of the stripe plus halo), then a vertical pass
 * that also finishes the pixel. Rows beyond the image come from the stripe
 * runner; kernels map columns through the border policy.
 *
 * f32: the outputs whose window holds a non-finite value are computed again
 * afterwards by the CPU's convolve_fix_pixel (core/convolve.h; launch_fix).
 *
 * Timings of these kernels and of the ones they replaced: docs/BENCHMARKS.md,
 * "Convolution kernels" (earlier runs in its history). */
#include "context.cuh"
#include "../core/convolve.h"

#include <type_traits>

namespace {

constexpr int WARP = 32;
constexpr int BLOCK_X = 32, BLOCK_Y = 8;  /* the float separable kernels */
constexpr int MAX_WARPS = 8;              /* warps of a tiled block, fewer when shared memory is short */
constexpr int DIRECT_P = 4;               /* direct: outputs a thread computes along a row */
constexpr int DIRECT_R = 4;               /* and down a column */
constexpr int ROWS_P = 8;                 /* fixed point, horizontal: outputs a thread computes */
constexpr int COLUMN_ELEMENTS = 4;        /* fixed point, vertical: elements a thread computes */
constexpr int COLUMN_R = 8;               /* and output rows */
constexpr int FIXED_PADDED = CONVOLVE_FIXED_MAX_TAPS + 1; /* taps padded with zeros */
static_assert (FIXED_PADDED % 32 == 0 && FIXED_PADDED % COLUMN_R == 0, "fixed-point tap padding");

/* The fixed-point path's taps and constants (kernel parameters). */
struct fixed_args
{
  int   left;                        /* horizontal: tile columns left of an output, the radius rounded up to 4 */
  int   row_padded;                  /* horizontal tap slots: left + radius + 1 rounded up to 8, past 32 to 32 */
  int   column_padded;               /* vertical taps rounded up to COLUMN_R */
  int   column_raw;                  /* vertical taps applied to 2^23 + lane (see the vertical pass) */
  int   scratch_pitch;               /* 16-bit elements per scratch row, a multiple of 8 */
  /* 2^39 + bias * 2^16 (vertical: + 128 * 2^16, see the vertical pass):
   * from 2^39 to 2^40 floats are the multiples of 2^16, and the low 16 bits
   * of 2^39's encoding are zero */
  float row_start, column_start;
  float offset;
  float row_taps[FIXED_PADDED];      /* slot i: 256 * the tap of pixel i - left (pixels enter as x, not x << 8) */
  float column_taps[FIXED_PADDED];   /* tap, zeros to a multiple of COLUMN_R */
  float column_fix[FIXED_PADDED / COLUMN_R]; /* column_raw: taken off the sums before each group of taps */
};

__host__ __device__ constexpr int
round4 (int n)
{
  return (n + 3) / 4 * 4;
}

/* Tile columns of a warp whose lanes compute P outputs each: those outputs
 * and the taps, in whole float4s. */
__host__ __device__ constexpr int
tile_width (int p, int size)
{
  return WARP * p + round4 (size);
}

/* The fixed-point horizontal pass's tiles: group g (tile columns 4g ..
 * 4g + 3) is float4 g + g / 2 of its plane. With 8 outputs a lane, lanes
 * read float4s 32 bytes apart, two to a bank group; a float4 of padding
 * after every two spreads them over all banks. */
__device__ __forceinline__ int
fixed_group (int g)
{
  return g + (g >> 1);
}

/* Float4s of such a plane of tw columns (a multiple of 8). */
__host__ __device__ constexpr int
fixed_plane4 (int tw)
{
  return tw / 4 + tw / 8;
}

/* A byte as a float, exactly: 2^23 + b, less 2^23 (no conversion unit). */
__device__ __forceinline__ float
byte_float (unsigned word, int b)
{
  return __uint_as_float (__byte_perm (word, 0x4b000000u, 0x7660 + b)) - 0x1p23f;
}

__device__ __forceinline__ float to_float (unsigned char v) { return byte_float (v, 0); }
__device__ __forceinline__ float to_float (float v) { return v; }

/* The CH channels of pixels 4m .. 4m+3 of a row: CH aligned words of four
 * elements. */
template <int CH>
__device__ __forceinline__ void
load_quad (const unsigned char *row, int m, float *v)
{
  const unsigned *w = (const unsigned *) row + (size_t) m * CH;
#pragma unroll
  for (int q = 0; q < CH; q++)
    {
      unsigned word = __ldg (w + q);
#pragma unroll
      for (int b = 0; b < 4; b++)
        v[4 * q + b] = byte_float (word, b);
    }
}

template <int CH>
__device__ __forceinline__ void
load_quad (const float *row, int m, float *v)
{
  const float4 *w = (const float4 *) row + (size_t) m * CH;
#pragma unroll
  for (int q = 0; q < CH; q++)
    {
      float4 f = __ldg (w + q);
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
}

/* One warp fills one tile row: pixels p0 .. p0 + count - 1 of an input row
 * as CH planes of floats (plane c at tile + c * plane), colour premultiplied
 * by alpha with ALPHA as the CPU's load_row does, black border as zeros. A
 * lane takes four pixels at a time, from aligned words when they lie inside
 * the row, else pixel by pixel through the border map. */
template <typename T, int CH, bool ALPHA>
__device__ __forceinline__ void
fill_tile_row (const unsigned char *row_bytes, int p0, int count, int width, cudafx_border border,
               float *tile, int plane)
{
  const T *row = (const T *) row_bytes;
  const int m_end = (p0 + count + 3) >> 2; /* groups up to the one of pixel p0 + count - 1 */
  for (int m = (p0 >> 2) + (int) threadIdx.x; m < m_end; m += WARP)
    {
      float v[4 * CH];
      if (m >= 0 && 4 * m + 4 <= width)
        load_quad<CH> (row, m, v);
      else
#pragma unroll
        for (int k = 0; k < 4; k++)
          {
            int sx = cudafx_border_index (4 * m + k, width, border);
#pragma unroll
            for (int c = 0; c < CH; c++)
              v[k * CH + c] = sx < 0 ? 0.0f : to_float (__ldg (row + (size_t) sx * CH + c));
          }
#pragma unroll
      for (int k = 0; k < 4; k++)
        {
          const int tx = 4 * m + k - p0;
          if (tx < 0 || tx >= count)
            continue;
          if (ALPHA)
#pragma unroll
            for (int c = 0; c < CH - 1; c++)
              v[k * CH + c] *= v[k * CH + CH - 1];
#pragma unroll
          for (int c = 0; c < CH; c++)
            tile[c * plane + tx] = v[k * CH + c];
        }
    }
}

/* A thread's sliding window over one plane row: v[0 .. P+3] are the tile
 * columns first .. first + P + 3 of the current step; starting, it holds
 * columns 0 .. P-1 of the thread's run in v[4 ..]. Group g is the float4 of
 * columns 4g .. 4g + 3. */
template <int P>
struct window
{
  const float4 *plane;
  int g0; /* the thread's first group */
  float v[P + 4];

  __device__ __forceinline__ float4 group (int g) const
  {
    return plane[g];
  }
  __device__ __forceinline__ void start (const float *plane_row, int first_group)
  {
    plane = (const float4 *) plane_row;
    g0 = first_group;
#pragma unroll
    for (int q = 0; q < P / 4; q++)
      {
        float4 f = group (g0 + q);
        v[4 + 4 * q] = f.x, v[5 + 4 * q] = f.y, v[6 + 4 * q] = f.z, v[7 + 4 * q] = f.w;
      }
  }
  /* Before taps i0 .. i0 + 3 (i0 a multiple of 4): v[k + ii] is the input
   * of output k for tap i0 + ii. */
  __device__ __forceinline__ void step (int i0)
  {
#pragma unroll
    for (int k = 0; k < P; k++)
      v[k] = v[k + 4];
    float4 f = group (g0 + i0 / 4 + P / 4);
    v[P] = f.x, v[P + 1] = f.y, v[P + 2] = f.z, v[P + 3] = f.w;
  }
};

__device__ __forceinline__ unsigned char
to_u8 (float v)
{
  v = v > 0.0f ? v : 0.0f; /* also maps NaN to 0 */
  v = v < 255.0f ? v : 255.0f;
  return (unsigned char) (int) (v + 0.5f);
}

__device__ __forceinline__ void store (unsigned char *p, float v) { *p = to_u8 (v); }
__device__ __forceinline__ void store (float *p, float v) { *p = v; }

/* Pixel (x of the stripe's input row iy) as floats: colour premultiplied by
 * raw alpha as the CPU's load_row does; black border gives zeros. */
template <typename T, int CH, bool ALPHA>
__device__ __forceinline__ void
load_pixel (const cfx_stripe &s, int iy, int x, cudafx_border border, float *v)
{
  int sx = cudafx_border_index (x, s.width, border);
  if (sx < 0)
    {
#pragma unroll
      for (int c = 0; c < CH; c++)
        v[c] = 0.0f;
      return;
    }
  const T *p = (const T *) (s.d_src + (size_t) iy * s.src_pitch) + (size_t) sx * CH;
#pragma unroll
  for (int c = 0; c < CH; c++)
    v[c] = (float) p[c];
  if (ALPHA)
#pragma unroll
    for (int c = 0; c < CH - 1; c++)
      v[c] *= v[CH - 1];
}

/* Finishes one pixel from its sums as the CPU's store_row does. */
template <typename T, int CH, bool ALPHA>
__device__ __forceinline__ void
finish_pixel (const cfx_stripe &s, const convolve_plan &pl, int x, int y, float *acc, float cover)
{
  T *out = (T *) (s.d_dst + (size_t) y * s.dst_pitch) + (size_t) x * CH;
  if (ALPHA)
    {
      const float amax = s.type == CUDAFX_U8 ? 255.0f : 1.0f;
#pragma unroll
      for (int c = 0; c < CH - 1; c++)
        acc[c] = cover > 0.0f ? acc[c] * pl.abs_sum / cover + pl.offset : pl.offset;
      float a;
      if (pl.zero_sum)
        a = (float) ((const T *) (s.d_src + (size_t) (y + s.halo) * s.src_pitch))[(size_t) x * CH + CH - 1];
      else
        {
          a = acc[CH - 1] * pl.alpha_scale;
          a = a > 0.0f ? a : 0.0f;
          a = a < amax ? a : amax;
        }
      acc[CH - 1] = a;
    }
  else
#pragma unroll
    for (int c = 0; c < CH; c++)
      acc[c] = acc[c] * pl.sum_scale + pl.offset; /* scale 1 but for exact sums */
#pragma unroll
  for (int c = 0; c < CH; c++)
    store (out + c, acc[c]);
}

/* Exact sums (plan->exact): a tap row's sum starts from ROW_START, where
 * floats count units exactly within 2^22 (the plan keeps a row's parts
 * within that), so fused multiply-adds are exact too; the row's integer is
 * the encoding less ROW_START_BITS. */
constexpr float ROW_START = 0x1.8p23f;
constexpr int ROW_START_BITS = 0x4b400000;

/* Direct 2-D sum over a block tile: each thread DIRECT_P outputs along a row
 * times DIRECT_R down a column. Tile row t of the thread's rows feeds its
 * output k with tap row t - k, so for every output the taps come in
 * row-major order, as on the CPU. N: the kernel size when it is built for
 * one, else 0: a tile row's taps then unroll fully (no loop or bounds
 * tests), and for 3x3 and 5x5 the rows too, so the taps become instruction
 * operands. EXACT (u8 without alpha, exact sums of a size the exact kernel
 * is not built for): each tile row's sums start from ROW_START and go into
 * the integer totals when the row is done. */
template <typename T, int CH, bool ALPHA, int N, bool EXACT = false>
__global__ void __launch_bounds__ (WARP * MAX_WARPS)
convolve_direct_kernel (cfx_stripe s, convolve_plan pl, cudafx_border border)
{
  constexpr bool SKIP_ZERO = sizeof (T) == sizeof (float) && N == 0; /* see launch */
  extern __shared__ float4 tile4[];
  float *tile = (float *) tile4; /* [CH][th][tw]; tile column tx is pixel bx + tx - r */
  const int n = N ? N : pl.size, r = n / 2, tw = tile_width (DIRECT_P, n);
  const int th = blockDim.y * DIRECT_R + n - 1, plane = th * tw;
  const int bx = blockIdx.x * WARP * DIRECT_P, by = blockIdx.y * blockDim.y * DIRECT_R;
  const int last_row = s.rows + 2 * s.halo - 1; /* rows past the stripe feed no stored output */
  for (int ty = threadIdx.y; ty < th; ty += blockDim.y)
    fill_tile_row<T, CH, ALPHA> (s.d_src + (size_t) min (by + ty, last_row) * s.src_pitch,
                                 bx - r, tw, s.width, border, tile + ty * tw, plane);
  __syncthreads ();
  const int x0 = bx + threadIdx.x * DIRECT_P, y0 = by + threadIdx.y * DIRECT_R;
  if (x0 >= s.width || y0 >= s.rows)
    return;
  float acc[DIRECT_R][DIRECT_P][CH], cover[DIRECT_R][DIRECT_P];
  int total[DIRECT_R][DIRECT_P][CH]; /* EXACT: the rows' sums; acc holds the current row's */
#pragma unroll
  for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
    for (int p = 0; p < DIRECT_P; p++)
      {
        cover[k][p] = 0.0f;
#pragma unroll
        for (int c = 0; c < CH; c++)
          {
            acc[k][p][c] = EXACT ? ROW_START : 0.0f;
            total[k][p][c] = 0;
          }
      }
#pragma unroll (N && N <= 5 ? N + DIRECT_R : 1) /* larger, the code outgrows the instruction cache */
  for (int t = 0; t < n + DIRECT_R - 1; t++)
    {
      window<DIRECT_P> win[CH];
#pragma unroll
      for (int c = 0; c < CH; c++)
        win[c].start (tile + c * plane + (threadIdx.y * DIRECT_R + t) * tw, threadIdx.x);
#pragma unroll (N ? N : 2) /* the window turns over in 2 steps */
      for (int i0 = 0; i0 < n; i0 += 4)
        {
#pragma unroll
          for (int c = 0; c < CH; c++)
            win[c].step (i0);
#pragma unroll
          for (int ii = 0; ii < 4; ii++)
            {
              const int i = i0 + ii;
              if (i >= n)
                break;
#pragma unroll
              for (int k = 0; k < DIRECT_R; k++)
                {
                  const int j = t - k;
                  if (j < 0 || j >= n)
                    continue;
                  const float w = pl.taps[j * n + i];
                  if (!SKIP_ZERO || w != 0.0f)
#pragma unroll
                    for (int p = 0; p < DIRECT_P; p++)
#pragma unroll
                      for (int c = 0; c < CH; c++)
                        acc[k][p][c] = EXACT ? __fmaf_rn (w, win[c].v[p + ii], acc[k][p][c])
                                             : acc[k][p][c] + w * win[c].v[p + ii];
                  if (ALPHA)
                    {
                      const float aw = pl.abs_taps[j * n + i];
                      if (!SKIP_ZERO || aw != 0.0f)
#pragma unroll
                        for (int p = 0; p < DIRECT_P; p++)
                          cover[k][p] = cover[k][p] + aw * win[CH - 1].v[p + ii];
                    }
                }
            }
        }
      if (EXACT) /* tile row t was tap row t - k of output row k (or no row: adds 0) */
#pragma unroll
        for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
          for (int p = 0; p < DIRECT_P; p++)
#pragma unroll
            for (int c = 0; c < CH; c++)
              {
                total[k][p][c] += __float_as_int (acc[k][p][c]) - ROW_START_BITS;
                acc[k][p][c] = ROW_START;
              }
    }
#pragma unroll
  for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
    for (int p = 0; p < DIRECT_P; p++)
      if (y0 + k < s.rows && x0 + p < s.width)
        {
#pragma unroll
          for (int c = 0; EXACT && c < CH; c++)
            acc[k][p][c] = __int2float_rn (total[k][p][c]);
          finish_pixel<T, CH, ALPHA> (s, pl, x0 + p, y0 + k, acc[k][p], cover[k][p]);
        }
}

/* The small direct kernels' arguments: the taps alone, so that a launch
 * carries a hundred bytes of parameters rather than the whole plan. */
template <int N>
struct small_args
{
  float taps[N * N];
  float offset;
  void set (const convolve_plan &pl)
  {
    for (int i = 0; i < N * N; i++)
      taps[i] = pl.taps[i];
    offset = pl.offset;
  }
};

constexpr int SMALL_LEFT = 4; /* tile columns left of the block's first output: a whole group */

/* Tile columns of the small kernels: the block's outputs plus a group on
 * each side (radius <= 2). */
constexpr int SMALL_TW = WARP * DIRECT_P + 2 * SMALL_LEFT;

/* Word q of a row's 4 * CH bytes (element e = p * CH + c) from pixel
 * words that hold channel c in byte CH - 1 - c: with CH >= 2 the four
 * bytes come from two neighbouring pixels, one byte permute. */
template <int CH>
__device__ __forceinline__ unsigned
row_word (const unsigned *pixel, int q)
{
  if (CH == 1)
    return __byte_perm (__byte_perm (pixel[4 * q], pixel[4 * q + 1], 0x0040),
                        __byte_perm (pixel[4 * q + 2], pixel[4 * q + 3], 0x0040), 0x5410);
  const int first = 4 * q / CH;
  unsigned selector = 0;
  for (int b = 0; b < 4; b++)
    selector |= (unsigned) (((4 * q + b) / CH == first ? 0 : 4) + CH - 1 - (4 * q + b) % CH) << 4 * b;
  return __byte_perm (pixel[first], pixel[min (first + 1, DIRECT_P - 1)], selector);
}

/* u8 result of v = sum + offset as the CPU's store_row computes it: v
 * clamped to 0..255, then (int) (v + 0.5f); the truncation is a rounded-down
 * add of 2^23, whose encoding then holds the integer in its low byte (no
 * conversion unit). */
__device__ __forceinline__ unsigned
u8_bits (float v)
{
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  return __float_as_uint (__fadd_rd (v + 0.5f, 0x1p23f));
}

/* The small kernels' u8 outputs: pixel[k][p] holds output (x0 + p, y0 + k)
 * with channel 0 in its highest used byte; rows leave as packed words. */
template <int CH>
__device__ __forceinline__ void
store_small_u8 (const cfx_stripe &s, int x0, int y0, const unsigned (&pixel)[DIRECT_R][DIRECT_P])
{
  unsigned packed[DIRECT_R][CH]; /* row k's 4 * CH bytes as CH words */
#pragma unroll
  for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
    for (int q = 0; q < CH; q++)
      packed[k][q] = row_word<CH> (pixel[k], q);
#pragma unroll
  for (int k = 0; k < DIRECT_R; k++)
    {
      if (y0 + k >= s.rows)
        break;
      unsigned char *out = s.d_dst + (size_t) (y0 + k) * s.dst_pitch + (size_t) x0 * CH;
      if (x0 + DIRECT_P <= s.width) /* x0 * CH bytes: a multiple of 4 */
        {
          if (CH == 2)
            *(uint2 *) out = make_uint2 (packed[k][0], packed[k][CH > 1 ? 1 : 0]);
          else if (CH == 4)
            *(uint4 *) out = make_uint4 (packed[k][0], packed[k][CH > 1 ? 1 : 0], packed[k][CH > 2 ? 2 : 0],
                                         packed[k][CH > 3 ? 3 : 0]);
          else
#pragma unroll
            for (int q = 0; q < CH; q++)
              ((unsigned *) out)[q] = packed[k][q];
        }
      else
#pragma unroll
        for (int e = 0; e < DIRECT_P * CH; e++)
          if (x0 + e / CH < s.width)
            out[e] = (unsigned char) (packed[k][e / 4] >> 8 * (e % 4));
    }
}

/* A group of four pixels as the small kernels load it: u8, CH words of
 * four bytes; f32, CH float4s. */
template <typename T, int CH> struct small_group;
template <int CH> struct small_group<unsigned char, CH>
{
  unsigned w[CH];
  __device__ __forceinline__ void load (const unsigned char *row, int m)
  {
#pragma unroll
    for (int q = 0; q < CH; q++)
      w[q] = __ldg ((const unsigned *) row + (size_t) m * CH + q);
  }
  __device__ __forceinline__ void clear ()
  {
#pragma unroll
    for (int q = 0; q < CH; q++)
      w[q] = 0;
  }
  __device__ __forceinline__ void set (int e, const unsigned char *p) { w[e / 4] |= (unsigned) __ldg (p) << 8 * (e % 4); }
  __device__ __forceinline__ float get (int e) const { return byte_float (w[e / 4], e % 4); }
};
template <int CH> struct small_group<float, CH>
{
  float4 f[CH];
  __device__ __forceinline__ void load (const unsigned char *row, int m)
  {
#pragma unroll
    for (int q = 0; q < CH; q++)
      f[q] = __ldg ((const float4 *) row + (size_t) m * CH + q);
  }
  __device__ __forceinline__ void clear ()
  {
#pragma unroll
    for (int q = 0; q < CH; q++)
      f[q] = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
  }
  __device__ __forceinline__ void set (int e, const unsigned char *p) { (&f[0].x)[e] = __ldg ((const float *) p); }
  __device__ __forceinline__ float get (int e) const { return (&f[0].x)[e]; }
};

/* Group m of row into g; a group that crosses the image's left or right
 * edge takes each pixel through the border map (none: 0). */
template <typename T, int CH>
__device__ __forceinline__ void
load_group (small_group<T, CH> &g, const unsigned char *row, int m, int width, cudafx_border border)
{
  if (m >= 0 && 4 * m + 4 <= width)
    {
      g.load (row, m);
      return;
    }
  g.clear ();
#pragma unroll
  for (int k = 0; k < 4; k++)
    {
      const int sx = cudafx_border_index (4 * m + k, width, border);
      if (sx >= 0)
#pragma unroll
        for (int c = 0; c < CH; c++)
          g.set (k * CH + c, row + ((size_t) sx * CH + c) * sizeof (T));
    }
}

/* Groups a thread loads before converting any, so that the block waits
 * for memory about once: u8 groups are CH registers, f32 ones 4 * CH. */
template <typename T> constexpr int small_batch = sizeof (T) == 1 ? 5 : 2;

/* Blocks of the small kernels an SM holds (their launch bound, for blocks
 * of 8 warps): 3 fit a H100's shared memory, and without the bound ptxas
 * spills; f32 keeps its 4 x 4 x CH results in registers, so 2. */
template <typename T> constexpr int small_blocks = sizeof (T) == 1 ? 3 : 2;

/* Warps a small kernel's block: u8 sums are bound by issue, and 8 warps
 * share the tile's halo rows; f32 blocks wait on memory at their barrier,
 * and as many warps resident in blocks of 2 keep more of them computing
 * while others load, at the cost of loading the halo rows more often. */
template <typename T> constexpr int small_warps = sizeof (T) == 1 ? MAX_WARPS : 2;

/* Fills the small and exact kernels' tile: th rows of G groups of four
 * pixels from group m0 of the stripe's input row by on, CH planes of floats
 * (plane floats apart, rows 4 G floats). A thread loads a batch of groups before converting any.
 * INTERIOR: every group lies inside the rows (no border map). */
template <typename T, int CH, int G, bool INTERIOR>
__device__ __forceinline__ void
fill_small_tile (const cfx_stripe &s, int m0, int by, int th, cudafx_border border, float4 *tile4, int plane)
{
  constexpr int BATCH = small_batch<T>;
  const int last_row = s.rows + 2 * s.halo - 1; /* rows past the stripe feed no stored output */
  const int threads = blockDim.x * blockDim.y, units = th * G;
  for (int u0 = threadIdx.y * WARP + threadIdx.x; u0 < units; u0 += BATCH * threads)
    {
      small_group<T, CH> g[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; b++)
        {
          const int u = u0 + b * threads, m = m0 + u % G;
          if (u >= units)
            break;
          const unsigned char *row = s.d_src + (size_t) min (by + u / G, last_row) * s.src_pitch;
          if (INTERIOR)
            g[b].load (row, m);
          else
            load_group (g[b], row, m, s.width, border);
        }
#pragma unroll
      for (int b = 0; b < BATCH; b++)
        {
          const int u = u0 + b * threads;
          if (u >= units)
            break;
#pragma unroll
          for (int c = 0; c < CH; c++)
            tile4[(c * plane + (u / G) * 4 * G) / 4 + u % G]
              = make_float4 (g[b].get (c), g[b].get (CH + c), g[b].get (2 * CH + c), g[b].get (3 * CH + c));
        }
    }
}

/* The small kernels' f32 outputs: out[k] holds row k's 4 * CH floats,
 * pixel by pixel; whole rows leave as CH float4s a thread, so a warp
 * writes contiguous bytes (channel by channel, every store would touch
 * eight times the sectors). */
template <int CH>
__device__ __forceinline__ void
store_small_f32 (const cfx_stripe &s, int x0, int y0, const float (&out)[DIRECT_R][DIRECT_P * CH])
{
#pragma unroll
  for (int k = 0; k < DIRECT_R; k++)
    {
      if (y0 + k >= s.rows)
        break;
      float *row = (float *) (s.d_dst + (size_t) (y0 + k) * s.dst_pitch) + (size_t) x0 * CH;
      if (x0 + DIRECT_P <= s.width) /* x0 * CH floats: 16-byte aligned */
#pragma unroll
        for (int q = 0; q < CH; q++)
          ((float4 *) row)[q] = make_float4 (out[k][4 * q], out[k][4 * q + 1], out[k][4 * q + 2], out[k][4 * q + 3]);
      else
#pragma unroll
        for (int e = 0; e < DIRECT_P * CH; e++)
          if (x0 + e / CH < s.width)
            row[e] = out[k][e];
    }
}

/* Direct sums of 3x3 and 5x5 kernels without alpha (u8, and f32 without
 * zero taps). Like convolve_direct_kernel each thread computes DIRECT_P x
 * DIRECT_R outputs, taps in row-major order for every output, but a
 * channel's loops are unrolled (the taps are instruction operands) and the
 * channels are summed one after the other in a loop that is not unrolled:
 * 16 accumulators live, not 16 * CH, and one copy of the code, which then
 * fits the instruction cache. The sums are bound by instruction issue (a
 * multiply and an add a tap, never fused), so little else is spent per
 * output. The tile starts a whole group left of the block (tile column tc
 * is pixel bx - SMALL_LEFT + tc), so each group of four pixels is stored as
 * one float4 a plane. Results collect in registers across the channel loop
 * (u8: shifted into a word a pixel; f32: shifted along CH registers a
 * pixel) and leave as whole words.
 *
 * Each output's sum starts with its first product rather than 0.0f +
 * product: the same values up to the sign of a zero. u8 adds the offset
 * only when it is nonzero (no u8 result shows the sign of a zero); f32 adds
 * it always, which also gives zeros the CPU's sign. */
template <typename T, int CH, int N>
__global__ void __launch_bounds__ (WARP * MAX_WARPS, small_blocks<T>)
convolve_small_kernel (cfx_stripe s, small_args<N> a, cudafx_border border)
{
  constexpr int r = N / 2, G = SMALL_TW / 4;
  constexpr bool U8 = sizeof (T) == 1;
  static_assert (r <= SMALL_LEFT && SMALL_LEFT - r + DIRECT_P + N - 1 <= 12, "three groups per window");
  extern __shared__ float4 tile4[];
  float *tile = (float *) tile4; /* [CH][th][SMALL_TW] */
  const int th = blockDim.y * DIRECT_R + N - 1, plane = th * SMALL_TW;
  const int bx = blockIdx.x * WARP * DIRECT_P, by = blockIdx.y * blockDim.y * DIRECT_R;
  /* blocks whose groups all lie inside the rows take the path without border tests */
  if (bx >= SMALL_LEFT && bx + SMALL_TW - SMALL_LEFT <= s.width)
    fill_small_tile<T, CH, G, true> (s, bx / 4 - SMALL_LEFT / 4, by, th, border, tile4, plane);
  else
    fill_small_tile<T, CH, G, false> (s, bx / 4 - SMALL_LEFT / 4, by, th, border, tile4, plane);
  __syncthreads ();
  const int x0 = bx + threadIdx.x * DIRECT_P, y0 = by + threadIdx.y * DIRECT_R;
  if (x0 >= s.width || y0 >= s.rows)
    return;
  /* u8: each output pixel's bytes, channel 0 in the highest used byte */
  unsigned pixel[DIRECT_R][DIRECT_P] = {};
  /* f32: row k's floats, pixel by pixel, channel 0 first */
  float out[DIRECT_R][DIRECT_P * CH];
#pragma unroll 1
  for (int c = 0; c < CH; c++)
    {
      float acc[DIRECT_R][DIRECT_P];
#pragma unroll
      for (int t = 0; t < DIRECT_R + N - 1; t++)
        {
          /* tile columns 4 * lane .. + 11; output p, tap i reads w[SMALL_LEFT - r + p + i] */
          const float4 *src = (const float4 *) (tile + c * plane + (threadIdx.y * DIRECT_R + t) * SMALL_TW) + threadIdx.x;
          float w[12];
#pragma unroll
          for (int q = 0; q < 3; q++)
            {
              float4 f = src[q];
              w[4 * q] = f.x, w[4 * q + 1] = f.y, w[4 * q + 2] = f.z, w[4 * q + 3] = f.w;
            }
#pragma unroll
          for (int k = 0; k < DIRECT_R; k++)
            {
              const int j = t - k;
              if (j < 0 || j >= N)
                continue;
#pragma unroll
              for (int i = 0; i < N; i++)
#pragma unroll
                for (int p = 0; p < DIRECT_P; p++)
                  {
                    const float term = a.taps[j * N + i] * w[SMALL_LEFT - r + p + i];
                    acc[k][p] = j == 0 && i == 0 ? term : acc[k][p] + term;
                  }
            }
        }
      if constexpr (U8)
        {
          if (a.offset != 0.0f) /* sum + 0.0f is sum, up to the sign of a zero */
#pragma unroll
            for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
              for (int p = 0; p < DIRECT_P; p++)
                acc[k][p] = acc[k][p] + a.offset;
#pragma unroll
          for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
            for (int p = 0; p < DIRECT_P; p++)
              pixel[k][p] = __byte_perm (pixel[k][p], u8_bits (acc[k][p]), 0x2104); /* << 8, new byte in */
        }
      else /* after the last channel, out[k][p * CH + c] holds channel c */
#pragma unroll
        for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
          for (int p = 0; p < DIRECT_P; p++)
            {
#pragma unroll
              for (int e = 0; e + 1 < CH; e++)
                out[k][p * CH + e] = out[k][p * CH + e + 1];
              out[k][p * CH + CH - 1] = acc[k][p] + a.offset;
            }
    }
  if (U8)
    store_small_u8<CH> (s, x0, y0, pixel);
  else
    store_small_f32<CH> (s, x0, y0, out);
}

/* The exact kernels' tile: the block's outputs plus whole groups on each
 * side, at least the radius. */
template <int N> constexpr int exact_left = (N / 2 + 3) / 4 * 4;
template <int N> constexpr int exact_tw = WARP * DIRECT_P + 2 * exact_left<N>;

/* The exact kernels' arguments: the integer taps (as floats), the offset
 * and 2^-S. */
template <int N>
struct exact_args : small_args<N>
{
  float scale;
};

/* u8 direct sums without alpha when the plan made them exact (3x3, 5x5 and
 * 15x15): the small kernels' scheme (tile of float planes aligned to
 * groups, DIRECT_P x DIRECT_R outputs a thread, channels one after the
 * other, results leaving as whole words) with one fused multiply-add a tap.
 * Output row k takes tap row j from tile row j + k; each such row sums from
 * ROW_START and its integer joins the output's total. Up to 5x5 the tile
 * rows come in order, each read once and fed to every output row it
 * belongs to, all unrolled (taps as operands); 15x15 loops over the tap
 * rows, reading the four tile rows of one (unrolled, its code outgrows the
 * instruction cache). The result is (float) total * 2^-S + offset, as on
 * the CPU. */
template <int CH, int N>
__global__ void __launch_bounds__ (WARP * MAX_WARPS, small_blocks<unsigned char>)
convolve_exact_kernel (cfx_stripe s, exact_args<N> a, cudafx_border border)
{
  constexpr int r = N / 2, LEFT = exact_left<N>, TW = exact_tw<N>, G = TW / 4;
  constexpr int C0 = LEFT - r;                        /* window column of output 0's tap 0 */
  constexpr int Q = (C0 + DIRECT_P + N - 2) / 4 + 1;  /* float4s a window */
  extern __shared__ float4 tile4[];
  float *tile = (float *) tile4; /* [CH][th][TW]; tile column tc is pixel bx - LEFT + tc */
  const int th = blockDim.y * DIRECT_R + N - 1, plane = th * TW;
  const int bx = blockIdx.x * WARP * DIRECT_P, by = blockIdx.y * blockDim.y * DIRECT_R;
  if (bx >= LEFT && bx + TW - LEFT <= s.width)
    fill_small_tile<unsigned char, CH, G, true> (s, bx / 4 - LEFT / 4, by, th, border, tile4, plane);
  else
    fill_small_tile<unsigned char, CH, G, false> (s, bx / 4 - LEFT / 4, by, th, border, tile4, plane);
  __syncthreads ();
  const int x0 = bx + threadIdx.x * DIRECT_P, y0 = by + threadIdx.y * DIRECT_R;
  if (x0 >= s.width || y0 >= s.rows)
    return;
  unsigned pixel[DIRECT_R][DIRECT_P] = {}; /* each output pixel's bytes, channel 0 highest */
#pragma unroll 1
  for (int c = 0; c < CH; c++)
    {
      const float *rows = tile + c * plane + threadIdx.y * DIRECT_R * TW;
      int total[DIRECT_R][DIRECT_P] = {};
      auto load = [&] (int t, float (&w)[4 * Q]) {
        const float4 *src = (const float4 *) (rows + t * TW) + threadIdx.x;
#pragma unroll
        for (int q = 0; q < Q; q++)
          {
            const float4 f = src[q];
            w[4 * q] = f.x, w[4 * q + 1] = f.y, w[4 * q + 2] = f.z, w[4 * q + 3] = f.w;
          }
      };
      auto add_row = [&] (const float (&w)[4 * Q], const float *taps, int k) {
        float part[DIRECT_P];
#pragma unroll
        for (int p = 0; p < DIRECT_P; p++)
          part[p] = ROW_START;
#pragma unroll
        for (int i = 0; i < N; i++)
#pragma unroll
          for (int p = 0; p < DIRECT_P; p++)
            part[p] = __fmaf_rn (taps[i], w[C0 + p + i], part[p]);
#pragma unroll
        for (int p = 0; p < DIRECT_P; p++)
          total[k][p] += __float_as_int (part[p]) - ROW_START_BITS;
      };
      if constexpr (N <= 5)
        {
#pragma unroll
          for (int t = 0; t < DIRECT_R + N - 1; t++)
            {
              float w[4 * Q];
              load (t, w);
#pragma unroll
              for (int k = 0; k < DIRECT_R; k++)
                if (t - k >= 0 && t - k < N)
                  add_row (w, a.taps + (t - k) * N, k); /* taps as operands */
            }
        }
      else
        {
#pragma unroll 1
          for (int j = 0; j < N; j++)
            {
              float taps[N]; /* loaded once for the four output rows (the loop's index picks them) */
#pragma unroll
              for (int i = 0; i < N; i++)
                taps[i] = a.taps[j * N + i];
#pragma unroll
              for (int k = 0; k < DIRECT_R; k++)
                {
                  float w[4 * Q];
                  load (j + k, w);
                  add_row (w, taps, k);
                }
            }
        }
#pragma unroll
      for (int k = 0; k < DIRECT_R; k++)
#pragma unroll
        for (int p = 0; p < DIRECT_P; p++)
          {
            float v = __int2float_rn (total[k][p]) * a.scale;
            if (a.offset != 0.0f) /* v + 0.0f is v, up to the sign of a zero */
              v = v + a.offset;
            pixel[k][p] = __byte_perm (pixel[k][p], u8_bits (v), 0x2104); /* << 8, new byte in */
          }
    }
  store_small_u8<CH> (s, x0, y0, pixel);
}

/* Horizontal pass over every input row of the stripe: CH sums (plus the
 * coverage with ALPHA) per pixel into the float scratch. */
template <typename T, int CH, bool ALPHA>
__global__ void
convolve_rows_kernel (cfx_stripe s, convolve_plan pl, cudafx_border border)
{
  constexpr int P = CH + (ALPHA ? 1 : 0);
  int x = blockIdx.x * blockDim.x + threadIdx.x, iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= s.width || iy >= s.rows + 2 * s.halo)
    return;
  float acc[P];
#pragma unroll
  for (int c = 0; c < P; c++)
    acc[c] = 0.0f;
  const int r = pl.radius;
  for (int i = 0; i < pl.size; i++)
    {
      float v[CH];
      float w = pl.taps[i], aw = ALPHA ? pl.abs_taps[i] : 0.0f;
      if (w == 0.0f && aw == 0.0f)
        continue;
      load_pixel<T, CH, ALPHA> (s, iy, x + i - r, border, v);
      if (w != 0.0f)
#pragma unroll
        for (int c = 0; c < CH; c++)
          acc[c] = acc[c] + w * v[c];
      if (ALPHA && aw != 0.0f)
        acc[P - 1] = acc[P - 1] + aw * v[CH - 1];
    }
  float *out = (float *) s.d_scratch + ((size_t) iy * s.width + x) * P;
#pragma unroll
  for (int c = 0; c < P; c++)
    out[c] = acc[c];
}

/* Vertical pass and finish. */
template <typename T, int CH, bool ALPHA>
__global__ void
convolve_columns_kernel (cfx_stripe s, convolve_plan pl)
{
  constexpr int P = CH + (ALPHA ? 1 : 0);
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= s.width || y >= s.rows)
    return;
  float acc[CH], cover = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; c++)
    acc[c] = 0.0f;
  const int n = pl.size;
  for (int j = 0; j < n; j++)
    {
      const float *v = (const float *) s.d_scratch + ((size_t) (y + j) * s.width + x) * P;
      float w = pl.taps[n + j];
      if (w != 0.0f)
#pragma unroll
        for (int c = 0; c < CH; c++)
          acc[c] = acc[c] + w * v[c];
      if (ALPHA)
        {
          float aw = pl.abs_taps[n + j];
          if (aw != 0.0f)
            cover = cover + aw * v[P - 1];
        }
    }
  finish_pixel<T, CH, ALPHA> (s, pl, x, y, acc, cover);
}

/* Two 16-bit lanes (the low halves of two accumulators' encodings) in a word. */
__device__ __forceinline__ unsigned
pack_lanes (float lo, float hi)
{
  return __byte_perm (__float_as_uint (lo), __float_as_uint (hi), 0x5410);
}

/* Fixed point, horizontal: bias + sum of ((x << 8) * tap) >> 16 per channel
 * for every input row, 16-bit sums into the scratch. One warp per row: it
 * fills its own tile row, tile column tc being pixel bx - f.left + tc, so
 * that the tile starts on a group of four pixels and each group is CH
 * aligned words loaded and one float4 stored a plane. Each lane then
 * computes ROWS_P neighbouring outputs over the f.row_padded tap slots
 * (slot i reads pixel x - f.left + i; slots outside the kernel hold zero
 * taps, as do black-border pixels), T slots at a time, fully unrolled: the
 * window is renamed registers, and with T slots in all (ONE) the taps are
 * instruction operands. */
template <int CH, int T, bool ONE>
__global__ void __launch_bounds__ (WARP * MAX_WARPS)
convolve_rows_fixed_kernel (cfx_stripe s, fixed_args f, cudafx_border border)
{
  static_assert (T % 8 == 0, "a lane's window starts on an even group");
  extern __shared__ float4 tile4[];
  const int np = ONE ? T : f.row_padded, tw = WARP * ROWS_P + np, plane4 = fixed_plane4 (tw);
  const int iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (iy >= s.rows + 2 * s.halo)
    return; /* the whole warp: tiles are per warp */
  float4 *tile = tile4 + threadIdx.y * CH * plane4;
  const int bx = blockIdx.x * WARP * ROWS_P, m0 = (bx - f.left) / 4, groups = tw / 4;
  const unsigned char *row = s.d_src + (size_t) iy * s.src_pitch;
  /* groups a lane fills, at most; all its loads go out before any conversion */
  constexpr int ITER = (WARP * ROWS_P + (ONE ? T : FIXED_PADDED) + 4 * WARP - 1) / (4 * WARP);
  small_group<unsigned char, CH> g[ITER];
#pragma unroll
  for (int it = 0; it < ITER; it++)
    {
      const int u = threadIdx.x + it * WARP, m = m0 + u;
      if (u >= groups)
        break;
      load_group (g[it], row, m, s.width, border);
    }
#pragma unroll
  for (int it = 0; it < ITER; it++)
    {
      const int u = threadIdx.x + it * WARP;
      if (u >= groups)
        break;
#pragma unroll
      for (int c = 0; c < CH; c++)
        tile[c * plane4 + fixed_group (u)]
          = make_float4 (g[it].get (c), g[it].get (CH + c), g[it].get (2 * CH + c), g[it].get (3 * CH + c));
    }
  __syncwarp ();
  const int x0 = bx + threadIdx.x * ROWS_P;
  if (x0 >= s.width)
    return;
  float acc[ROWS_P][CH];
#pragma unroll
  for (int p = 0; p < ROWS_P; p++)
#pragma unroll
    for (int c = 0; c < CH; c++)
      acc[p][c] = f.row_start;
#pragma unroll 1
  for (int i0 = 0; i0 < np; i0 += T)
#pragma unroll
    for (int c = 0; c < CH; c++)
      {
        /* tile columns 8 * lane + i0 .. + ROWS_P + T - 1: groups 2 * lane + i0 / 4 + q */
        const float4 *src = tile + c * plane4 + 3 * threadIdx.x + 3 * (i0 / 8);
        float v[ROWS_P + T];
#pragma unroll
        for (int q = 0; q < (ROWS_P + T) / 4; q++)
          {
            const float4 w = src[fixed_group (q)];
            v[4 * q] = w.x, v[4 * q + 1] = w.y, v[4 * q + 2] = w.z, v[4 * q + 3] = w.w;
          }
#pragma unroll
        for (int i = 0; i < T; i++)
#pragma unroll
          for (int p = 0; p < ROWS_P; p++)
            acc[p][c] = __fmaf_rd (v[p + i], f.row_taps[i0 + i], acc[p][c]);
      }
  /* x0 is a multiple of 8 and scratch rows hold multiples of 8 elements:
   * the thread's 8 * CH elements are CH aligned 16-byte words */
  unsigned short *out = (unsigned short *) s.d_scratch + (size_t) iy * f.scratch_pitch + (size_t) x0 * CH;
  if (x0 + ROWS_P <= s.width)
    {
#pragma unroll
      for (int q = 0; q < CH; q++)
        {
          unsigned w[4];
#pragma unroll
          for (int h = 0; h < 4; h++)
            {
              const int e = 8 * q + 2 * h; /* elements e, e + 1: pixel e / CH, channel e % CH */
              w[h] = pack_lanes (acc[e / CH][e % CH], acc[(e + 1) / CH][(e + 1) % CH]);
            }
          ((uint4 *) out)[q] = make_uint4 (w[0], w[1], w[2], w[3]);
        }
    }
  else /* the row's last pixels, then zeros over the padding, which the vertical pass reads */
#pragma unroll
    for (int p = 0; p < ROWS_P; p++)
#pragma unroll
      for (int c = 0; c < CH; c++)
        if ((x0 + p) * CH + c < f.scratch_pitch)
          out[p * CH + c] = x0 + p < s.width ? (unsigned short) __float_as_uint (acc[p][c]) : 0;
}

/* Fixed point, vertical, and the u8 result (sum / 256 + offset): columns of
 * scratch elements, whatever their channel. Each thread computes
 * COLUMN_ELEMENTS elements of COLUMN_R output rows; scratch rows come into a
 * ring of COLUMN_R registers, one per tap step, and each feeds every output
 * it belongs to (output k takes row j + k with tap j; taps past the kernel
 * are zero). A pointer steps down the rows; only warps whose rows reach past
 * the stripe's (at its bottom) clamp the row index. The lanes start at bias
 * + 128 (column_start): with offset 0 the CPU's result, sum / 256 clamped to
 * 0..255 then (int) (v + 0.5f), is (sum + 128) >> 8, bits 8 .. 15 of the
 * lane (a sum is at most 255 * 256 + 2 * 63, so the lane never carries and
 * the result never passes 255).
 *
 * RAW (column_raw): a row's values enter as 2^23 + lane, one byte permute
 * each and no subtraction. Tap w then adds 2^23 w + floor (lane * w /
 * 2^16) * 2^16, exact while the sum stays below 2^40: the constant, 2^7 w
 * units of the lane, changes the low 16 bits by a known amount, which the
 * start value's lane takes off beforehand, and before a group of taps that
 * would carry the sum out of its binade, the constants of the groups since
 * the last such point are subtracted (column_fix, one subtraction an output
 * instead of one a value read). Taps summing to 1 add 2^23 units in all,
 * the binade's whole width, so at least one such point is needed; a kernel
 * whose weight lies within one group of COLUMN_R taps has none and runs
 * without RAW. */
template <bool RAW>
__global__ void __launch_bounds__ (WARP * MAX_WARPS)
convolve_columns_fixed_kernel (cfx_stripe s, fixed_args f)
{
  static_assert (COLUMN_ELEMENTS == 4, "a thread's elements are one word of output");
  const int elements = s.width * s.channels;
  const int e0 = (blockIdx.x * WARP + threadIdx.x) * COLUMN_ELEMENTS;
  const int y0 = (blockIdx.y * blockDim.y + threadIdx.y) * COLUMN_R;
  if (e0 >= elements || y0 >= s.rows)
    return;
  const int last_row = s.rows + 2 * s.halo - 1; /* rows past it feed only zero taps or outputs past the stripe */
  const size_t pitch = f.scratch_pitch;
  const unsigned short *column = (const unsigned short *) s.d_scratch + e0;
  auto unpack = [] (uint2 q, float *v) { /* exact: 2^23 + lane, less 2^23 but with RAW */
    const float less = RAW ? 0.0f : 0x1p23f;
    v[0] = __uint_as_float (__byte_perm (q.x, 0x4b000000u, 0x7610)) - less;
    v[1] = __uint_as_float (__byte_perm (q.x, 0x4b000000u, 0x7632)) - less;
    v[2] = __uint_as_float (__byte_perm (q.y, 0x4b000000u, 0x7610)) - less;
    v[3] = __uint_as_float (__byte_perm (q.y, 0x4b000000u, 0x7632)) - less;
  };
  float ring[COLUMN_R][COLUMN_ELEMENTS], acc[COLUMN_R][COLUMN_ELEMENTS];
#pragma unroll
  for (int k = 0; k < COLUMN_R; k++)
#pragma unroll
    for (int e = 0; e < COLUMN_ELEMENTS; e++)
      acc[k][e] = f.column_start;
  /* reads rows y0 .. y0 + COLUMN_R - 1 + column_padded (the last a step ahead, unused) */
  auto sum_rows = [&] (auto clamped) {
    int t = 0;
    const unsigned short *p = column + y0 * pitch;
    auto load = [&] () { /* the last group may read past the row's elements into its padding (zeros) */
      const unsigned short *q = decltype (clamped)::value ? column + min (y0 + t++, last_row) * pitch : p;
      p += pitch;
      return __ldg ((const uint2 *) q);
    };
#pragma unroll
    for (int j = 0; j < COLUMN_R - 1; j++)
      unpack (load (), ring[j]);
    uint2 next = load ();
    for (int j0 = 0; j0 < f.column_padded; j0 += COLUMN_R)
      {
        if (RAW && f.column_fix[j0 / COLUMN_R] != 0.0f)
#pragma unroll
          for (int k = 0; k < COLUMN_R; k++)
#pragma unroll
            for (int e = 0; e < COLUMN_ELEMENTS; e++)
              acc[k][e] = acc[k][e] - f.column_fix[j0 / COLUMN_R];
#pragma unroll
        for (int jj = 0; jj < COLUMN_R; jj++)
          {
            /* row j0 + jj + COLUMN_R - 1 replaces row j0 + jj - 1, which output 0 used last */
            unpack (next, ring[(jj + COLUMN_R - 1) % COLUMN_R]);
            next = load ();
            const float w = f.column_taps[j0 + jj];
#pragma unroll
            for (int k = 0; k < COLUMN_R; k++)
#pragma unroll
              for (int e = 0; e < COLUMN_ELEMENTS; e++)
                acc[k][e] = __fmaf_rd (ring[(jj + k) % COLUMN_R][e], w, acc[k][e]);
          }
      }
  };
  if (y0 + COLUMN_R - 1 + f.column_padded <= last_row)
    sum_rows (std::false_type ());
  else
    sum_rows (std::true_type ());
#pragma unroll
  for (int k = 0; k < COLUMN_R; k++)
    if (y0 + k < s.rows)
      {
        unsigned word = 0;
        if (f.offset == 0.0f)
          word = __byte_perm (__byte_perm (__float_as_uint (acc[k][0]), __float_as_uint (acc[k][1]), 0x0051),
                              __byte_perm (__float_as_uint (acc[k][2]), __float_as_uint (acc[k][3]), 0x0051), 0x5410);
        else
#pragma unroll
          for (int e = 0; e < COLUMN_ELEMENTS; e++)
            { /* the 16-bit sum, exactly as a float */
              float sum = __uint_as_float (0x4b000000u | (__float_as_uint (acc[k][e]) & 0xffffu)) - 0x1p23f - 128.0f;
              word |= (unsigned) to_u8 (sum * (1.0f / 256.0f) + f.offset) << 8 * e;
            }
        unsigned char *out = s.d_dst + (size_t) (y0 + k) * s.dst_pitch + e0;
        if (e0 + COLUMN_ELEMENTS <= elements)
          *(unsigned *) out = word;
        else
#pragma unroll
          for (int e = 0; e < COLUMN_ELEMENTS; e++)
            if (e0 + e < elements)
              out[e] = (unsigned char) (word >> 8 * e);
      }
}

/* Most warps (MAX_WARPS, halved down to 1) for which a block's dynamic
 * shared memory, fixed + warps * per_warp bytes, fits the device. */
int
warps_that_fit (const cfx_context *cx, size_t fixed, size_t per_warp, size_t *bytes)
{
  const int limit = cx->shared_optin;
  int warps = MAX_WARPS;
  while (warps > 1 && fixed + warps * per_warp > (size_t) limit)
    warps /= 2;
  *bytes = fixed + warps * per_warp;
  return warps;
}

template <typename K>
cudafx_status
allow_shared (cfx_context *cx, K kernel, size_t bytes)
{
  return cfx_allow_shared (cx, (const void *) kernel, bytes, "convolve");
}

template <int CH>
cudafx_status
launch_fixed (cfx_context *cx, const fixed_args &f, cudafx_border border, const cfx_stripe *s)
{
  size_t shared;
  const int warps = warps_that_fit (cx, 0, sizeof (float4) * CH * fixed_plane4 (WARP * ROWS_P + f.row_padded), &shared);
  auto kernel = f.row_padded == 8 ? convolve_rows_fixed_kernel<CH, 8, true>
              : f.row_padded == 16 ? convolve_rows_fixed_kernel<CH, 16, true>
              : f.row_padded == 24 ? convolve_rows_fixed_kernel<CH, 24, true>
              : f.row_padded == 32 ? convolve_rows_fixed_kernel<CH, 32, true>
                                   : convolve_rows_fixed_kernel<CH, 32, false>;
  cudafx_status st = allow_shared (cx, kernel, shared);
  if (st)
    return st;
  dim3 row_grid ((s->width + WARP * ROWS_P - 1) / (WARP * ROWS_P), (s->rows + 2 * s->halo + warps - 1) / warps);
  kernel<<<row_grid, dim3 (WARP, warps), shared, s->stream>>> (*s, f, border);
  if ((st = cfx_check_launch ("convolve", "convolve_rows_fixed_kernel")))
    return st;
  const int elements = s->width * CH;
  dim3 grid ((elements + WARP * COLUMN_ELEMENTS - 1) / (WARP * COLUMN_ELEMENTS),
             (s->rows + MAX_WARPS * COLUMN_R - 1) / (MAX_WARPS * COLUMN_R));
  (f.column_raw ? convolve_columns_fixed_kernel<true> : convolve_columns_fixed_kernel<false>)
    <<<grid, dim3 (WARP, MAX_WARPS), 0, s->stream>>> (*s, f);
  return cfx_check_launch ("convolve", "convolve_columns_fixed_kernel");
}


/* Launches a kernel of the small kernels' scheme (N x N taps, a tile of
 * row_bytes a row, DIRECT_R output rows a warp) with at most max_warps
 * warps a block. */
template <int N, typename Args>
cudafx_status
launch_grouped (cfx_context *cx, void (*kernel) (cfx_stripe, Args, cudafx_border), const Args &a,
                size_t row_bytes, int max_warps, cudafx_border border, const cfx_stripe *s, const char *name)
{
  size_t shared;
  int warps = warps_that_fit (cx, row_bytes * (N - 1), row_bytes * DIRECT_R, &shared);
  if (warps > max_warps)
    {
      warps = max_warps;
      shared = row_bytes * (N - 1) + warps * row_bytes * DIRECT_R;
    }
  cudafx_status st = allow_shared (cx, kernel, shared);
  if (st)
    return st;
  dim3 grid ((s->width + WARP * DIRECT_P - 1) / (WARP * DIRECT_P), (s->rows + warps * DIRECT_R - 1) / (warps * DIRECT_R));
  kernel<<<grid, dim3 (WARP, warps), shared, s->stream>>> (*s, a, border);
  return cfx_check_launch ("convolve", name);
}

template <typename T, int CH, int N>
cudafx_status
launch_small (cfx_context *cx, const convolve_plan &pl, cudafx_border border, const cfx_stripe *s)
{
  small_args<N> a;
  a.set (pl);
  return launch_grouped<N> (cx, convolve_small_kernel<T, CH, N>, a, sizeof (float) * CH * SMALL_TW,
                            small_warps<T>, border, s, "convolve_small_kernel");
}

template <int CH, int N>
cudafx_status
launch_exact (cfx_context *cx, const convolve_plan &pl, cudafx_border border, const cfx_stripe *s)
{
  exact_args<N> a;
  a.set (pl);
  a.scale = pl.sum_scale;
  return launch_grouped<N> (cx, convolve_exact_kernel<CH, N>, a, sizeof (float) * CH * exact_tw<N>, MAX_WARPS,
                            border, s, "convolve_exact_kernel");
}

struct convolve_ctx
{
  const convolve_plan *plan;
  cudafx_border border;
  cfx_context *cx;
};

template <typename T, int CH, bool ALPHA>
cudafx_status
launch (const convolve_ctx *cx, const cfx_stripe *s)
{
  const convolve_plan &pl = *cx->plan;
  bool zero_tap = false; /* f32 sums must skip zero taps: only the generic direct kernel tests them */
  for (int i = 0; !pl.separable && i < pl.size * pl.size; i++)
    zero_tap |= pl.taps[i] == 0.0f || pl.abs_taps[i] == 0.0f;
  const bool skip_zero = sizeof (T) == sizeof (float) && zero_tap;
  if constexpr (sizeof (T) == 1 && !ALPHA)
    if (pl.exact) /* u8 direct without alpha; other sizes: the direct kernel below */
      switch (pl.size)
        {
        case 3: return launch_exact<CH, 3> (cx->cx, pl, cx->border, s);
        case 5: return launch_exact<CH, 5> (cx->cx, pl, cx->border, s);
        case 15: return launch_exact<CH, 15> (cx->cx, pl, cx->border, s);
        }
  if (!ALPHA && !pl.separable && !skip_zero && (pl.size == 3 || pl.size == 5))
    return pl.size == 3 ? launch_small<T, CH, 3> (cx->cx, pl, cx->border, s)
                        : launch_small<T, CH, 5> (cx->cx, pl, cx->border, s);
  if (!pl.separable)
    {
      const size_t row_bytes = sizeof (float) * CH * tile_width (DIRECT_P, pl.size);
      size_t shared;
      const int warps = warps_that_fit (cx->cx, row_bytes * (pl.size - 1), row_bytes * DIRECT_R, &shared);
      /* Built for the presets' sizes and the benchmarks' 15x15;
       * f32 kernels with zero taps, which must be skipped, take the generic
       * one, which tests every tap. */
      auto kernel = skip_zero ? convolve_direct_kernel<T, CH, ALPHA, 0>
                  : pl.size == 3 ? convolve_direct_kernel<T, CH, ALPHA, 3>
                  : pl.size == 5 ? convolve_direct_kernel<T, CH, ALPHA, 5>
                  : pl.size == 15 ? convolve_direct_kernel<T, CH, ALPHA, 15>
                                  : convolve_direct_kernel<T, CH, ALPHA, 0>;
      if constexpr (sizeof (T) == 1 && !ALPHA)
        if (pl.exact)
          kernel = convolve_direct_kernel<T, CH, false, 0, true>;
      cudafx_status st = allow_shared (cx->cx, kernel, shared);
      if (st)
        return st;
      dim3 grid ((s->width + WARP * DIRECT_P - 1) / (WARP * DIRECT_P),
                 (s->rows + warps * DIRECT_R - 1) / (warps * DIRECT_R));
      kernel<<<grid, dim3 (WARP, warps), shared, s->stream>>> (*s, pl, cx->border);
      return cfx_check_launch ("convolve", "convolve_direct_kernel");
    }
  dim3 block (BLOCK_X, BLOCK_Y);
  dim3 grid ((s->width + BLOCK_X - 1) / BLOCK_X, (s->rows + BLOCK_Y - 1) / BLOCK_Y);
  dim3 row_grid ((s->width + BLOCK_X - 1) / BLOCK_X, (s->rows + 2 * s->halo + BLOCK_Y - 1) / BLOCK_Y);
  convolve_rows_kernel<T, CH, ALPHA><<<row_grid, block, 0, s->stream>>> (*s, pl, cx->border);
  cudafx_status st = cfx_check_launch ("convolve", "convolve_rows_kernel");
  if (st)
    return st;
  convolve_columns_kernel<T, CH, ALPHA><<<grid, block, 0, s->stream>>> (*s, pl);
  return cfx_check_launch ("convolve", "convolve_columns_kernel");
}

template <typename T>
cudafx_status
launch_type (const convolve_ctx *cx, const cfx_stripe *s, bool alpha)
{
  switch (s->channels * 2 + alpha)
    {
    case 2: return launch<T, 1, false> (cx, s);
    case 4: return launch<T, 2, false> (cx, s);
    case 5: return launch<T, 2, true> (cx, s);
    case 6: return launch<T, 3, false> (cx, s);
    case 8: return launch<T, 4, false> (cx, s);
    default: return launch<T, 4, true> (cx, s);
    }
}

struct stripe_args
{
  convolve_ctx cx;
  bool alpha;
  fixed_args fixed;
};

/* Non-finite f32 values (core/convolve.h): once the sums are done, the
 * outputs whose window holds a non-finite element are recomputed by
 * convolve_fix_pixel, the CPU's definition. Finding them costs a pass over
 * the stripe and, beyond it, work only near such values: the stripe's
 * scratch, free once the sums have run (same stream), holds for each of
 * its input rows a byte a pixel "holds a non-finite element" (bad), a byte
 * a row "holds one" (rows), and on those rows a byte a pixel "a window row
 * centred here meets one", through the column border map (near). */
struct fix_masks
{
  unsigned char *bad, *near, *rows;
};

/* Scratch bytes a stripe row needs for the masks. */
size_t
fix_scratch_row (int width)
{
  return 2 * (size_t) width + 1;
}

fix_masks
masks_of (const cfx_stripe *s)
{
  const size_t pixels = (size_t) (s->rows + 2 * s->halo) * s->width;
  unsigned char *p = (unsigned char *) s->d_scratch;
  return { p, p + pixels, p + 2 * pixels };
}

constexpr int FIX_MARK_THREADS = 256;

/* One block per input row of the stripe: bad and rows. */
__global__ void __launch_bounds__ (FIX_MARK_THREADS)
fix_mark_kernel (cfx_stripe s, fix_masks m)
{
  const int iy = blockIdx.x, c = s.channels;
  const float *row = (const float *) (s.d_src + (size_t) iy * s.src_pitch);
  int any = 0;
  for (int x = threadIdx.x; x < s.width; x += FIX_MARK_THREADS)
    {
      int bad = 0;
      for (int k = 0; k < c; k++)
        bad |= !isfinite (__ldg (row + (size_t) x * c + k));
      m.bad[(size_t) iy * s.width + x] = (unsigned char) bad;
      any |= bad;
    }
  any = __syncthreads_or (any);
  if (threadIdx.x == 0)
    m.rows[iy] = (unsigned char) (any != 0);
}

/* near, on the rows holding a non-finite element (others are not read). */
__global__ void
fix_near_kernel (cfx_stripe s, fix_masks m, int size, cudafx_border border)
{
  const int x = blockIdx.x * blockDim.x + threadIdx.x, iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= s.width || iy >= s.rows + 2 * s.halo || !m.rows[iy])
    return;
  const unsigned char *bad = m.bad + (size_t) iy * s.width;
  int hit = 0;
  for (int i = 0; i < size && !hit; i++)
    {
      const int sx = cudafx_border_index (x - size / 2 + i, s.width, border);
      hit = sx >= 0 && bad[sx];
    }
  m.near[(size_t) iy * s.width + x] = (unsigned char) hit;
}

/* The outputs whose window meets a non-finite element, again. The plan is
 * read in place (grid constant), not copied to each thread. */
__global__ void
fix_pixels_kernel (cfx_stripe s, const __grid_constant__ convolve_plan pl, fix_masks m, int alpha)
{
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= s.width || y >= s.rows)
    return;
  const int y0 = y + s.halo - pl.radius, c = s.channels; /* the stripe row of window row 0 */
  int hit = 0;
  for (int j = 0; j < pl.size && !hit; j++)
    hit = m.rows[y0 + j] && m.near[(size_t) (y0 + j) * s.width + x];
  if (!hit)
    return;
  const float *centre = (const float *) (s.d_src + (size_t) (y + s.halo) * s.src_pitch) + (size_t) x * c;
  const convolve_window win = { s.d_src, s.src_pitch, y0, 0, s.width, c, alpha, pl.border };
  float out[4];
  convolve_fix_pixel (&pl, &win, x, centre, out);
  float *dst = (float *) (s.d_dst + (size_t) y * s.dst_pitch) + (size_t) x * c;
  for (int k = 0; k < c; k++)
    dst[k] = out[k];
}

cudafx_status
launch_fix (const convolve_plan &pl, const cfx_stripe *s, bool alpha)
{
  const fix_masks m = masks_of (s);
  const int in_rows = s->rows + 2 * s->halo;
  fix_mark_kernel<<<in_rows, FIX_MARK_THREADS, 0, s->stream>>> (*s, m);
  cudafx_status st = cfx_check_launch ("convolve", "fix_mark_kernel");
  if (st)
    return st;
  dim3 block (BLOCK_X, BLOCK_Y);
  dim3 near_grid ((s->width + BLOCK_X - 1) / BLOCK_X, (in_rows + BLOCK_Y - 1) / BLOCK_Y);
  fix_near_kernel<<<near_grid, block, 0, s->stream>>> (*s, m, pl.size, pl.border);
  if ((st = cfx_check_launch ("convolve", "fix_near_kernel")))
    return st;
  dim3 grid ((s->width + BLOCK_X - 1) / BLOCK_X, (s->rows + BLOCK_Y - 1) / BLOCK_Y);
  fix_pixels_kernel<<<grid, block, 0, s->stream>>> (*s, pl, m, alpha);
  return cfx_check_launch ("convolve", "fix_pixels_kernel");
}

cudafx_status
convolve_stripe (void *ctx, const cfx_stripe *s)
{
  const stripe_args *a = (const stripe_args *) ctx;
  if (a->cx.plan->fixed16) /* u8 without alpha */
    switch (s->channels)
      {
      case 1: return launch_fixed<1> (a->cx.cx, a->fixed, a->cx.border, s);
      case 2: return launch_fixed<2> (a->cx.cx, a->fixed, a->cx.border, s);
      case 3: return launch_fixed<3> (a->cx.cx, a->fixed, a->cx.border, s);
      default: return launch_fixed<4> (a->cx.cx, a->fixed, a->cx.border, s);
      }
  if (s->type == CUDAFX_U8) /* holds no non-finite value */
    return launch_type<unsigned char> (&a->cx, s, a->alpha);
  cudafx_status st = launch_type<float> (&a->cx, s, a->alpha);
  return st ? st : launch_fix (*a->cx.plan, s, a->alpha);
}

/* The fixed-point taps as the kernels use them. */
void
make_fixed_args (const convolve_plan *plan, size_t elements, fixed_args *f)
{
  const int n = plan->size, r = n / 2;
  f->left = round4 (r);
  f->row_padded = (f->left + r + 1 + 7) / 8 * 8;
  if (f->row_padded > 32)
    f->row_padded = (f->row_padded + 31) / 32 * 32; /* at most FIXED_PADDED: left + r + 1 <= 2 * 64 */
  f->column_padded = (n + COLUMN_R - 1) / COLUMN_R * COLUMN_R;
  f->scratch_pitch = (int) ((elements + 7) / 8 * 8);
  f->row_start = (float) (0x1p39 + plan->fixed_bias[0] * 0x1p16); /* exact: bias < 2^7 */
  f->offset = plan->offset;
  for (int i = 0; i < FIXED_PADDED; i++)
    {
      const int tap = i - (f->left - r); /* slot i's tap */
      f->row_taps[i] = tap >= 0 && tap < n ? 256.0f * plan->fixed_taps[tap] : 0.0f;
      f->column_taps[i] = i < n ? (float) plan->fixed_taps[n + i] : 0.0f;
    }
  /* RAW: the constants added since the last subtraction, in lane units,
   * stay below 2^23 less the start lane's and the sum's 2^16 each */
  const long room = (1L << 23) - 2 * 65536;
  long pending = 0;
  f->column_raw = 1;
  for (int g = 0; g < f->column_padded / COLUMN_R; g++)
    {
      long group = 0;
      for (int j = 0; j < COLUMN_R; j++)
        group += 128L * (long) f->column_taps[g * COLUMN_R + j];
      f->column_fix[g] = 0.0f;
      if (group >= room)
        f->column_raw = 0;
      if (pending + group >= room)
        {
          f->column_fix[g] = (float) ((double) pending * 0x1p16); /* exact: 2^23 * a 16-bit integer sum */
          pending = 0;
        }
      pending += group;
    }
  const long lane = ((long) plan->fixed_bias[1] + 128 - (f->column_raw ? pending : 0)) & 0xffff;
  f->column_start = (float) (0x1p39 + (double) lane * 0x1p16);
}

} // namespace

extern "C" cudafx_status
cudafx_convolve_cuda (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                      const cudafx_options *o)
{
  cfx_call call;
  cudafx_status s = cfx_begin (call, "convolve", o, CFX_LANE_ASKED);
  if (s)
    return s;
  stripe_args a = { { plan, plan->border, call.cx }, src->has_alpha != 0, {} };
  const size_t elements = (size_t) src->width * src->channels;
  size_t scratch = 0;
  if (plan->fixed16)
    {
      make_fixed_args (plan, elements, &a.fixed);
      scratch = sizeof (uint16_t) * (size_t) a.fixed.scratch_pitch;
    }
  else if (plan->separable)
    scratch = sizeof (float) * (size_t) src->width * (src->channels + (src->has_alpha ? 1 : 0));
  if (src->type == CUDAFX_F32 && scratch < fix_scratch_row (src->width))
    scratch = fix_scratch_row (src->width); /* the non-finite fix-up's masks */
  return cfx_run_stripes (call.cx, "convolve", src, dst, plan->radius, plan->border, scratch, convolve_stripe, &a,
                          o);
}
