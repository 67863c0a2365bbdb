/* Convolution on the GPU; core/convolve.c is the CPU reference, and its
 * header states the arithmetic copied here term for term so that u8 results
 * match bit for bit: float taps from the shared plan (core/convolve.h), sums
 * from 0.0f in tap order with zero taps skipped, multiply then add (built
 * with --fmad=false), colour premultiplied by alpha with a coverage plane.
 *
 * Direct kernels: a shared-memory tile of the block's pixels plus the kernel
 * radius, converted (and premultiplied) once into channel planes of floats,
 * taps in constant memory; each thread computes four neighbouring outputs
 * of a row, sliding over each tile row in float4 steps so one loaded value
 * serves up to four taps.
 * Separable kernels (rank 1, Gaussian): a horizontal pass into a float
 * scratch (rows of the stripe plus halo), then a vertical pass that also
 * finishes the pixel. Rows beyond the image come from the stripe runner;
 * kernels map columns through the border policy. The CPU's 16-bit fixed
 * point (plan->fixed16: u8, no alpha, non-negative separable taps) is exact
 * here too: each term (value * tap) >> 16 comes from one fused multiply-add
 * rounded down (fixed_term), the sums are summed as integers, and the
 * horizontal sums travel as 16 bits in the scratch, as the CPU's lanes hold
 * them. The horizontal pass tiles like the direct kernels; the vertical one
 * gives each thread four outputs down a column. */
#include "context.cuh"
#include "../core/convolve.h"

namespace {

constexpr int BLOCK_X = 32, BLOCK_Y = 8;
constexpr int PER_THREAD = 4;     /* outputs a thread computes along a row (tiled kernels) */
constexpr int DIRECT_Y = 16;      /* thread rows of a direct block */
constexpr int COLUMN_OUTPUTS = 4; /* outputs a thread computes down a column (fixed point) */

__constant__ float c_taps[CONVOLVE_MAX_TAPS_2D];
__constant__ float c_abs_taps[CONVOLVE_MAX_TAPS_2D];
__constant__ float c_fixed_taps[2 * CONVOLVE_FIXED_MAX_TAPS]; /* the 16-bit taps as floats */

/* Tile width of a block row: its BLOCK_X * PER_THREAD outputs and the taps,
 * in whole float4s so each thread slides over its row a float4 at a time. */
__host__ __device__ constexpr int
tile_width (int size)
{
  return BLOCK_X * PER_THREAD + 4 * ((size + 3) / 4);
}

/* (value * tap) >> 16 for value, tap < 65536, on the float pipe: the fused
 * multiply-add rounded down lands on a multiple of 2^16 above 2^39 (where
 * that is the float spacing), so the low bits of its encoding are exactly
 * the integer result; FIXED_ONE is the encoding of 2^39 that each term
 * carries. */
constexpr unsigned FIXED_ONE = 0x53000000u;
__device__ __forceinline__ unsigned
fixed_term (float value, float tap)
{
  return __float_as_uint (__fmaf_rd (value, tap, 0x1p39f));
}

template <typename T> __device__ __forceinline__ float to_float (T v) { return (float) v; }

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
    v[c] = to_float (p[c]);
  if (ALPHA)
#pragma unroll
    for (int c = 0; c < CH - 1; c++)
      v[c] *= v[CH - 1];
}

__device__ __forceinline__ unsigned char
to_u8 (float v)
{
  v = v > 0.0f ? v : 0.0f; /* also maps NaN to 0 */
  v = v < 255.0f ? v : 255.0f;
  return (unsigned char) (int) (v + 0.5f);
}

__device__ __forceinline__ void store (unsigned char *p, float v) { *p = to_u8 (v); }
__device__ __forceinline__ void store (float *p, float v) { *p = v; }

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
        a = to_float (((const T *) (s.d_src + (size_t) (y + s.halo) * s.src_pitch))[(size_t) x * CH + CH - 1]);
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
      acc[c] = acc[c] + pl.offset;
#pragma unroll
  for (int c = 0; c < CH; c++)
    store (out + c, acc[c]);
}

/* Direct 2-D sum over a shared tile: channel planes of floats, each thread
 * PER_THREAD neighbouring outputs of a row, sliding over the tile rows in
 * float4 steps so a loaded value serves up to PER_THREAD taps. */
template <typename T, int CH, bool ALPHA>
__global__ void __launch_bounds__ (BLOCK_X * DIRECT_Y)
convolve_direct_kernel (cfx_stripe s, convolve_plan pl, cudafx_border border)
{
  extern __shared__ float4 tile4[];
  float *tile = (float *) tile4; /* [CH][th][tw]; tile column tx is pixel bx + tx - r */
  const int r = pl.radius, n = pl.size, tw = tile_width (n), th = DIRECT_Y + 2 * r;
  const int bx = blockIdx.x * BLOCK_X * PER_THREAD, by = blockIdx.y * DIRECT_Y;
  for (int ty = threadIdx.y; ty < th; ty += DIRECT_Y)
    {
      int iy = min (by + ty, s.rows + 2 * s.halo - 1); /* rows past the stripe are never used */
      for (int tx = threadIdx.x; tx < tw; tx += BLOCK_X)
        {
          float v[CH];
          load_pixel<T, CH, ALPHA> (s, iy, bx + tx - r, border, v);
#pragma unroll
          for (int c = 0; c < CH; c++)
            tile[(c * th + ty) * tw + tx] = v[c];
        }
    }
  __syncthreads ();
  const int x0 = bx + threadIdx.x * PER_THREAD, y = by + threadIdx.y;
  if (x0 >= s.width || y >= s.rows)
    return;
  float acc[PER_THREAD][CH], cover[PER_THREAD];
#pragma unroll
  for (int k = 0; k < PER_THREAD; k++)
    {
      cover[k] = 0.0f;
#pragma unroll
      for (int c = 0; c < CH; c++)
        acc[k][c] = 0.0f;
    }
  for (int j = 0; j < n; j++)
    {
      const float4 *row[CH];
      float v[CH][8];
#pragma unroll
      for (int c = 0; c < CH; c++)
        {
          row[c] = (const float4 *) (tile + (c * th + threadIdx.y + j) * tw) + threadIdx.x;
          float4 q = row[c][0];
          v[c][4] = q.x, v[c][5] = q.y, v[c][6] = q.z, v[c][7] = q.w;
        }
      for (int i0 = 0; i0 < n; i0 += 4)
        {
#pragma unroll
          for (int c = 0; c < CH; c++)
            {
              float4 q = row[c][i0 / 4 + 1];
              v[c][0] = v[c][4], v[c][1] = v[c][5], v[c][2] = v[c][6], v[c][3] = v[c][7];
              v[c][4] = q.x, v[c][5] = q.y, v[c][6] = q.z, v[c][7] = q.w;
            }
#pragma unroll
          for (int ii = 0; ii < 4; ii++)
            {
              if (i0 + ii >= n)
                break;
              float w = c_taps[j * n + i0 + ii];
              if (w != 0.0f)
#pragma unroll
                for (int k = 0; k < PER_THREAD; k++)
#pragma unroll
                  for (int c = 0; c < CH; c++)
                    acc[k][c] = acc[k][c] + w * v[c][k + ii];
              if (ALPHA)
                {
                  float aw = c_abs_taps[j * n + i0 + ii];
                  if (aw != 0.0f)
#pragma unroll
                    for (int k = 0; k < PER_THREAD; k++)
                      cover[k] = cover[k] + aw * v[CH - 1][k + ii];
                }
            }
        }
    }
#pragma unroll
  for (int k = 0; k < PER_THREAD; k++)
    if (x0 + k < s.width)
      finish_pixel<T, CH, ALPHA> (s, pl, x0 + k, y, acc[k], cover[k]);
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
      float w = c_taps[i], aw = ALPHA ? c_abs_taps[i] : 0.0f;
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
      float w = c_taps[n + j];
      if (w != 0.0f)
#pragma unroll
        for (int c = 0; c < CH; c++)
          acc[c] = acc[c] + w * v[c];
      if (ALPHA)
        {
          float aw = c_abs_taps[n + j];
          if (aw != 0.0f)
            cover = cover + aw * v[P - 1];
        }
    }
  finish_pixel<T, CH, ALPHA> (s, pl, x, y, acc, cover);
}

/* Fixed point, horizontal: bias + sum of ((x << 8) * tap) >> 16 per
 * channel, 16-bit sums into the scratch (the CPU's 16-bit lanes). A warp
 * converts its row's pixels into a tile of x << 8 floats, then each thread
 * slides over PER_THREAD outputs as the direct kernel does. Zero taps and
 * black-border pixels add zero terms, so every tap is summed. */
template <int CH>
__global__ void __launch_bounds__ (BLOCK_X * BLOCK_Y)
convolve_rows_fixed_kernel (cfx_stripe s, convolve_plan pl, cudafx_border border)
{
  extern __shared__ float4 tile4[];
  float *tile = (float *) tile4; /* [CH][BLOCK_Y][tw] */
  const int r = pl.radius, n = pl.size, tw = tile_width (n);
  const int bx = blockIdx.x * BLOCK_X * PER_THREAD, iy = blockIdx.y * BLOCK_Y + threadIdx.y;
  const unsigned char *src = s.d_src + (size_t) min (iy, s.rows + 2 * s.halo - 1) * s.src_pitch;
  for (int tx = threadIdx.x; tx < tw; tx += BLOCK_X)
    {
      int sx = cudafx_border_index (bx + tx - r, s.width, border);
#pragma unroll
      for (int c = 0; c < CH; c++)
        tile[(c * BLOCK_Y + threadIdx.y) * tw + tx] = sx < 0 ? 0.0f : (float) (src[(size_t) sx * CH + c] << 8);
    }
  __syncthreads ();
  const int x0 = bx + threadIdx.x * PER_THREAD;
  if (x0 >= s.width || iy >= s.rows + 2 * s.halo)
    return;
  unsigned acc[PER_THREAD][CH] = {};
  const float4 *row[CH];
  float v[CH][8];
#pragma unroll
  for (int c = 0; c < CH; c++)
    {
      row[c] = (const float4 *) (tile + (c * BLOCK_Y + threadIdx.y) * tw) + threadIdx.x;
      float4 q = row[c][0];
      v[c][4] = q.x, v[c][5] = q.y, v[c][6] = q.z, v[c][7] = q.w;
    }
  for (int i0 = 0; i0 < n; i0 += 4)
    {
#pragma unroll
      for (int c = 0; c < CH; c++)
        {
          float4 q = row[c][i0 / 4 + 1];
          v[c][0] = v[c][4], v[c][1] = v[c][5], v[c][2] = v[c][6], v[c][3] = v[c][7];
          v[c][4] = q.x, v[c][5] = q.y, v[c][6] = q.z, v[c][7] = q.w;
        }
#pragma unroll
      for (int ii = 0; ii < 4; ii++)
        {
          if (i0 + ii >= n)
            break;
          const float w = c_fixed_taps[i0 + ii];
#pragma unroll
          for (int k = 0; k < PER_THREAD; k++)
#pragma unroll
            for (int c = 0; c < CH; c++)
              acc[k][c] += fixed_term (v[c][k + ii], w);
        }
    }
  unsigned short *out = (unsigned short *) s.d_scratch + ((size_t) iy * s.width + x0) * CH;
  const unsigned base = pl.fixed_bias[0] - (unsigned) n * FIXED_ONE;
#pragma unroll
  for (int k = 0; k < PER_THREAD; k++)
    if (x0 + k < s.width)
#pragma unroll
      for (int c = 0; c < CH; c++)
        out[k * CH + c] = (unsigned short) (base + acc[k][c]);
}

/* Fixed point, vertical, and the u8 result (sum / 256 + offset): each thread
 * COLUMN_OUTPUTS outputs down a column, every scratch row read once for all
 * of them. */
template <int CH>
__global__ void
convolve_columns_fixed_kernel (cfx_stripe s, convolve_plan pl)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y0 = (blockIdx.y * blockDim.y + threadIdx.y) * COLUMN_OUTPUTS;
  if (x >= s.width || y0 >= s.rows)
    return;
  const int n = pl.size, last_row = s.rows + 2 * s.halo - 1;
  unsigned acc[COLUMN_OUTPUTS][CH] = {};
  for (int t = 0; t < n + COLUMN_OUTPUTS - 1; t++)
    {
      /* rows past the stripe feed only outputs past it, which are not stored */
      const unsigned short *in = (const unsigned short *) s.d_scratch
                                 + ((size_t) min (y0 + t, last_row) * s.width + x) * CH;
      float v[CH];
#pragma unroll
      for (int c = 0; c < CH; c++) /* exact: 2^23 + h, less 2^23 */
        v[c] = __uint_as_float (0x4b000000u | __ldg (in + c)) - 0x1p23f;
#pragma unroll
      for (int k = 0; k < COLUMN_OUTPUTS; k++)
        {
          int j = t - k; /* output y0 + k takes row t with tap j */
          if (j >= 0 && j < n)
            {
              const float w = c_fixed_taps[n + j];
#pragma unroll
              for (int c = 0; c < CH; c++)
                acc[k][c] += fixed_term (v[c], w);
            }
        }
    }
  const unsigned base = pl.fixed_bias[1] - (unsigned) n * FIXED_ONE;
#pragma unroll
  for (int k = 0; k < COLUMN_OUTPUTS; k++)
    if (y0 + k < s.rows)
      {
        unsigned char *out = s.d_dst + (size_t) (y0 + k) * s.dst_pitch + (size_t) x * CH;
#pragma unroll
        for (int c = 0; c < CH; c++)
          out[c] = to_u8 ((float) (unsigned short) (base + acc[k][c]) * (1.0f / 256.0f) + pl.offset);
      }
}

template <int CH>
cudafx_status
launch_fixed (const convolve_plan &pl, cudafx_border border, const cfx_stripe *s)
{
  dim3 block (BLOCK_X, BLOCK_Y);
  dim3 row_grid ((s->width + BLOCK_X * PER_THREAD - 1) / (BLOCK_X * PER_THREAD),
                 (s->rows + 2 * s->halo + BLOCK_Y - 1) / BLOCK_Y);
  size_t shared = sizeof (float) * CH * BLOCK_Y * tile_width (pl.size);
  convolve_rows_fixed_kernel<CH><<<row_grid, block, shared, s->stream>>> (*s, pl, border);
  cudafx_status st = cfx_check_launch ("convolve", "convolve_rows_fixed_kernel");
  if (st)
    return st;
  dim3 grid ((s->width + BLOCK_X - 1) / BLOCK_X,
             (s->rows + BLOCK_Y * COLUMN_OUTPUTS - 1) / (BLOCK_Y * COLUMN_OUTPUTS));
  convolve_columns_fixed_kernel<CH><<<grid, block, 0, s->stream>>> (*s, pl);
  return cfx_check_launch ("convolve", "convolve_columns_fixed_kernel");
}

struct convolve_ctx
{
  const convolve_plan *plan;
  cudafx_border border;
};

template <typename T, int CH, bool ALPHA>
cudafx_status
launch (const convolve_ctx *cx, const cfx_stripe *s)
{
  const convolve_plan &pl = *cx->plan;
  dim3 block (BLOCK_X, BLOCK_Y);
  dim3 grid ((s->width + BLOCK_X - 1) / BLOCK_X, (s->rows + BLOCK_Y - 1) / BLOCK_Y);
  if (!pl.separable)
    {
      dim3 direct_block (BLOCK_X, DIRECT_Y);
      dim3 direct_grid ((s->width + BLOCK_X * PER_THREAD - 1) / (BLOCK_X * PER_THREAD),
                        (s->rows + DIRECT_Y - 1) / DIRECT_Y);
      size_t shared = sizeof (float) * CH * tile_width (pl.size) * (DIRECT_Y + 2 * pl.radius);
      cudafx_status st = cfx_check (cudaFuncSetAttribute (convolve_direct_kernel<T, CH, ALPHA>,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          (int) shared),
                                    "convolve", "shared-memory attribute");
      if (st)
        return st;
      convolve_direct_kernel<T, CH, ALPHA><<<direct_grid, direct_block, shared, s->stream>>> (*s, pl, cx->border);
      return cfx_check_launch ("convolve", "convolve_direct_kernel");
    }
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
  float fixed_taps[2 * CONVOLVE_FIXED_MAX_TAPS]; /* plan's fixed_taps as floats */
};

cudafx_status
convolve_stripe (void *ctx, const cfx_stripe *s)
{
  const stripe_args *a = (const stripe_args *) ctx;
  const convolve_plan *pl = a->cx.plan;
  if (s->y0 == 0)
    {
      /* Taps go to constant memory here, under the runner's GPU lock. */
      size_t bytes = sizeof (float) * (pl->separable ? 2 * pl->size : pl->size * pl->size);
      cudafx_status st;
      if (pl->fixed16
          && (st = cfx_check (cudaMemcpyToSymbolAsync (c_fixed_taps, a->fixed_taps,
                                                       sizeof (float) * 2 * pl->size, 0,
                                                       cudaMemcpyHostToDevice, s->stream),
                              "convolve", "copy of taps")))
        return st;
      if ((st = cfx_check (cudaMemcpyToSymbolAsync (c_taps, pl->taps, bytes, 0, cudaMemcpyHostToDevice,
                                                    s->stream), "convolve", "copy of taps")) ||
          (st = cfx_check (cudaMemcpyToSymbolAsync (c_abs_taps, pl->abs_taps, bytes, 0,
                                                    cudaMemcpyHostToDevice, s->stream),
                           "convolve", "copy of taps")))
        return st;
    }
  if (pl->fixed16) /* u8 without alpha */
    switch (s->channels)
      {
      case 1: return launch_fixed<1> (*pl, a->cx.border, s);
      case 2: return launch_fixed<2> (*pl, a->cx.border, s);
      case 3: return launch_fixed<3> (*pl, a->cx.border, s);
      default: return launch_fixed<4> (*pl, a->cx.border, s);
      }
  return s->type == CUDAFX_U8 ? launch_type<unsigned char> (&a->cx, s, a->alpha)
                              : launch_type<float> (&a->cx, s, a->alpha);
}

} // namespace

extern "C" cudafx_status
cudafx_convolve_cuda (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                      cudafx_border border, const cudafx_options *o)
{
  stripe_args a = { { plan, border }, src->has_alpha != 0, {} };
  for (int i = 0; plan->fixed16 && i < 2 * plan->size; i++)
    a.fixed_taps[i] = plan->fixed_taps[i];
  size_t scratch = plan->separable
                     ? sizeof (float) * (size_t) src->width * (src->channels + (src->has_alpha ? 1 : 0))
                     : 0;
  return cfx_run_stripes ("convolve", src, dst, plan->radius, border, scratch, convolve_stripe, &a, o);
}
