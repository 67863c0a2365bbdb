/* Convolution on the GPU; core/convolve.c is the CPU reference, and its
 * header states the arithmetic copied here term for term so that u8 results
 * match bit for bit: float taps from the shared plan (core/convolve.h), sums
 * from 0.0f in tap order with zero taps skipped, multiply then add (built
 * with --fmad=false), colour premultiplied by alpha with a coverage plane.
 *
 * Direct kernels: a shared-memory tile of the block's pixels plus the kernel
 * radius, converted (and premultiplied) once, taps in constant memory.
 * Separable kernels (rank 1, Gaussian): a horizontal pass into a float
 * scratch (rows of the stripe plus halo), then a vertical pass that also
 * finishes the pixel. Rows beyond the image come from the stripe runner;
 * kernels map columns through the border policy. The CPU's 16-bit fixed
 * point (plan->fixed16: u8, no alpha, non-negative separable taps) is exact
 * integer arithmetic here too; the horizontal sums (< 65536) travel in the
 * float scratch, which holds them exactly. */
#include "context.cuh"
#include "../core/convolve.h"

namespace {

constexpr int BLOCK_X = 32, BLOCK_Y = 8;

__constant__ float c_taps[CONVOLVE_MAX_TAPS_2D];
__constant__ float c_abs_taps[CONVOLVE_MAX_TAPS_2D];
__constant__ unsigned short c_fixed_taps[2 * CONVOLVE_FIXED_MAX_TAPS];

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

/* Direct 2-D sum over a shared tile. */
template <typename T, int CH, bool ALPHA>
__global__ void
convolve_direct_kernel (cfx_stripe s, convolve_plan pl, cudafx_border border)
{
  extern __shared__ float tile[]; /* (BLOCK_Y + 2r) x (BLOCK_X + 2r) x CH */
  const int r = pl.radius, n = pl.size, tw = BLOCK_X + 2 * r, th = BLOCK_Y + 2 * r;
  const int bx = blockIdx.x * BLOCK_X, by = blockIdx.y * BLOCK_Y;
  for (int i = threadIdx.y * BLOCK_X + threadIdx.x; i < tw * th; i += BLOCK_X * BLOCK_Y)
    {
      int ty = i / tw, tx = i % tw;
      int iy = min (by + ty, s.rows + 2 * s.halo - 1); /* rows past the stripe are never used */
      load_pixel<T, CH, ALPHA> (s, iy, bx + tx - r, border, tile + (size_t) i * CH);
    }
  __syncthreads ();
  int x = bx + threadIdx.x, y = by + threadIdx.y;
  if (x >= s.width || y >= s.rows)
    return;
  float acc[CH], cover = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; c++)
    acc[c] = 0.0f;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      {
        const float *v = tile + ((size_t) (threadIdx.y + j) * tw + threadIdx.x + i) * CH;
        float w = c_taps[j * n + i];
        if (w != 0.0f)
#pragma unroll
          for (int c = 0; c < CH; c++)
            acc[c] = acc[c] + w * v[c];
        if (ALPHA)
          {
            float aw = c_abs_taps[j * n + i];
            if (aw != 0.0f)
              cover = cover + aw * v[CH - 1];
          }
      }
  finish_pixel<T, CH, ALPHA> (s, pl, x, y, acc, cover);
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

/* Fixed point, horizontal: bias + sum of ((x << 8) * tap) >> 16 per channel. */
template <int CH>
__global__ void
convolve_rows_fixed_kernel (cfx_stripe s, convolve_plan pl, cudafx_border border)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= s.width || iy >= s.rows + 2 * s.halo)
    return;
  unsigned acc[CH];
#pragma unroll
  for (int c = 0; c < CH; c++)
    acc[c] = pl.fixed_bias[0];
  const unsigned char *row = s.d_src + (size_t) iy * s.src_pitch;
  for (int i = 0; i < pl.size; i++)
    {
      const unsigned w = c_fixed_taps[i];
      int sx = cudafx_border_index (x + i - pl.radius, s.width, border);
      if (w == 0 || sx < 0)
        continue;
#pragma unroll
      for (int c = 0; c < CH; c++)
        acc[c] += ((unsigned) row[(size_t) sx * CH + c] << 8) * w >> 16;
    }
  float *out = (float *) s.d_scratch + ((size_t) iy * s.width + x) * CH;
#pragma unroll
  for (int c = 0; c < CH; c++)
    out[c] = (float) acc[c];
}

/* Fixed point, vertical, and the u8 result (sum / 256 + offset). */
template <int CH>
__global__ void
convolve_columns_fixed_kernel (cfx_stripe s, convolve_plan pl)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= s.width || y >= s.rows)
    return;
  unsigned acc[CH];
#pragma unroll
  for (int c = 0; c < CH; c++)
    acc[c] = pl.fixed_bias[1];
  const int n = pl.size;
  for (int j = 0; j < n; j++)
    {
      const unsigned w = c_fixed_taps[n + j];
      if (w == 0)
        continue;
      const float *v = (const float *) s.d_scratch + ((size_t) (y + j) * s.width + x) * CH;
#pragma unroll
      for (int c = 0; c < CH; c++)
        acc[c] += (unsigned) v[c] * w >> 16;
    }
  unsigned char *out = s.d_dst + (size_t) y * s.dst_pitch + (size_t) x * CH;
#pragma unroll
  for (int c = 0; c < CH; c++)
    out[c] = to_u8 ((float) acc[c] * (1.0f / 256.0f) + pl.offset);
}

template <int CH>
cudafx_status
launch_fixed (const convolve_plan &pl, cudafx_border border, const cfx_stripe *s)
{
  dim3 block (BLOCK_X, BLOCK_Y);
  dim3 row_grid ((s->width + BLOCK_X - 1) / BLOCK_X, (s->rows + 2 * s->halo + BLOCK_Y - 1) / BLOCK_Y);
  convolve_rows_fixed_kernel<CH><<<row_grid, block, 0, s->stream>>> (*s, pl, border);
  cudafx_status st = cfx_check_launch ("convolve", "convolve_rows_fixed_kernel");
  if (st)
    return st;
  dim3 grid ((s->width + BLOCK_X - 1) / BLOCK_X, (s->rows + BLOCK_Y - 1) / BLOCK_Y);
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
      size_t shared = sizeof (float) * CH * (BLOCK_X + 2 * pl.radius) * (BLOCK_Y + 2 * pl.radius);
      cudafx_status st = cfx_check (cudaFuncSetAttribute (convolve_direct_kernel<T, CH, ALPHA>,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          (int) shared),
                                    "convolve", "shared-memory attribute");
      if (st)
        return st;
      convolve_direct_kernel<T, CH, ALPHA><<<grid, block, shared, s->stream>>> (*s, pl, cx->border);
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
          && (st = cfx_check (cudaMemcpyToSymbolAsync (c_fixed_taps, pl->fixed_taps,
                                                       sizeof (unsigned short) * 2 * pl->size, 0,
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
  stripe_args a = { { plan, border }, src->has_alpha != 0 };
  size_t scratch = plan->separable
                     ? sizeof (float) * (size_t) src->width * (src->channels + (src->has_alpha ? 1 : 0))
                     : 0;
  return cfx_run_stripes ("convolve", src, dst, plan->radius, border, scratch, convolve_stripe, &a, o);
}
