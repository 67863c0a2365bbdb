/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local Bayes denoising on the GPU; core/nlbayes.c is the CPU reference
 * and its header gives the method (Lebrun, Buades, Morel, SIAM J. Imaging
 * Sciences 2013; IPOL 2013), the grid of reference patches and the order of
 * the sums.
 *
 * The image's colour channels go into float planes in the stripe's scratch
 * (opponent space for three colours), beside the basic estimate's planes and
 * the sums of the aggregation (num; den, one plane of patch counts). Each
 * step is one kernel over the reference grid, one thread block per
 * reference patch:
 *   1. the squared distances to every patch of its search window (clipped
 *      to the image), one thread per candidate summing over the channels,
 *      the patch's rows and columns in the CPU's order, so that step 1's
 *      distances and groups are the CPU's bit for bit;
 *   2. the group: the n nearest by (distance, squared offset from the
 *      reference, window index) as the CPU orders them — a radix select of
 *      the n-th smallest distance, 8 bits a pass, over a shared-memory
 *      histogram, then a second one over the ties at it by their offset and
 *      index — compacted in window order by a block-wide scan;
 *   3. step 1 (restore_step1): the whole group value-major in shared
 *      memory; each channel's mean, the flat-area test's spread and its
 *      covariance as core/nlbayes.c sums them (8 interleaved partial sums,
 *      lane_dot), the Cholesky factor by one warp per channel (the
 *      channels side by side), each patch's column solved in place by one
 *      thread: every restored value is the CPU's float;
 *      step 2 (restore_step2): the basic group's covariance accumulated
 *      over chunks of the group in shared memory (a chunk is the whole
 *      group unless a large sigma's group does not fit), the factor of
 *      C_B + beta sigma^2 I by one warp, then a second pass over the chunks
 *      that solves each noisy patch's column and forms its estimate;
 *   4. every restored value added to num with integer atomics (fixed
 *      point, NLBAYES_FIXED: the CPU's sums in any order), and each
 *      restored patch counted once at its top-left corner in den (a
 *      pixel's weight, the patches that cover it, is summed from those
 *      counts when dividing).
 * The covariance's lower factor and its upper triangle share one
 * dims x (dims + 1) array, so step 2's largest plan (7x7 patches of three
 * or four channels) fits a block's shared memory.
 * basic = num / den between the steps; after step 2 the same division and
 * the inverse transform, rounded and clamped on u8, alpha and non-finite
 * f32 values copied from src.
 *
 * Where the GPU's values differ from the CPU's: step 2's means and
 * covariances are summed in another order (nvcc --fmad=false keeps every
 * other operation the CPU's), so its restored values, and the output, can
 * differ in their last bits. Step 1's basic estimate, and so step 2's
 * groups, are the CPU's. docs/TESTING.md has the tolerance and what was
 * measured.
 *
 * Stripes: an image that fits the device runs as one piece; a larger one in
 * stripes with nlbayes_halo rows above and below, each stripe's real rows
 * (not those the runner makes up past the image's edge) denoised as an
 * image of their own whose grid keeps the whole image's phase (origin_y),
 * so that the rows it keeps equal the whole image's run. Progress and
 * cancel between launches of a few rows of references. */
#include "context.cuh"

#include <cub/block/block_scan.cuh>

#include <math.h>
#include <string.h>

namespace
{

constexpr int THREADS = 256; /* at least four warps: step 1's Cholesky factors, one warp per channel */
constexpr int LAUNCHES_WITH_PROGRESS = 16; /* per step, when the host watches */

/* The orthonormal opponent transform (core/nlbayes.c's). */
__constant__ float c_opp[3][3] = {
  { 0.57735027f, 0.57735027f, 0.57735027f },
  { 0.70710678f, 0.0f, -0.70710678f },
  { 0.40824829f, -0.81649658f, 0.40824829f },
};

/* The reference positions along one side (core/nlbayes.c's grid_positions
 * as a formula): position 0 when the phase misses it, `regular` positions
 * first, first + stride, ..., then the last one when the regular ones miss it. */
struct nlb_axis
{
  int count, pre, regular, first, stride, last;
};

static nlb_axis
make_axis (int n, int k, int s, int o)
{
  nlb_axis a;
  a.last = n - k;
  a.stride = s;
  a.first = ((-o) % s + s) % s;
  a.pre = a.first != 0;
  a.regular = a.first <= a.last ? (a.last - a.first) / s + 1 : 0;
  int final = a.regular ? a.first + (a.regular - 1) * s : 0;
  a.count = a.pre + a.regular + (final != a.last);
  return a;
}

__device__ __forceinline__ int
axis_pos (const nlb_axis &a, int i)
{
  if (i < a.pre)
    return 0;
  i -= a.pre;
  return i < a.regular ? a.first + i * a.stride : a.last;
}

/* One step's launch. */
struct nlb_args
{
  const float *planes;  /* the planes the distances and statistics read: noisy (step 1), basic (step 2) */
  const float *noisy;   /* the planes restored */
  unsigned long long *num; /* fixed-point sums (NLBAYES_FIXED), two's complement */
  float       *den;
  int          w, h, colours;
  size_t       plane;
  nlb_axis     ax, ay;
  int          k, group, radius;
  float        tau, bs2, flat; /* flat: gamma sigma^2, or -1 without the flat-area test */
  int          ref0;           /* the first reference of the launch */
  /* shared-memory layout */
  int          cand_max, n_max, chunk, chunk_stride;
};

/* The block's shared memory, in floats/ints from the start. */
struct nlb_layout
{
  int ref, dist, pos, hist, misc, mean, inv, mat, x, total; /* offsets in 4-byte words; total words */
};

constexpr int MISC_WORDS = 16;

__host__ __device__ inline int
round4 (int n)
{
  return (n + 3) & ~3;
}

/* step: 0 or 1. mat: step 1 one k^2 x (k^2 + 1) array per channel; step 2
 * one dims x (dims + 1). */
__host__ __device__ inline nlb_layout
layout_of (int step, int colours, int k, int cand_max, int n_max, int chunk_stride)
{
  const int kk = k * k, dims = colours * kk;
  nlb_layout l;
  int at = 0;
  l.ref = at;
  at += round4 (dims);
  l.dist = at;
  at += round4 (cand_max);
  l.pos = at;
  at += round4 (n_max);
  l.hist = at;
  at += 256;
  l.misc = at;
  at += MISC_WORDS;
  l.mean = at;
  at += round4 (2 * dims);
  l.inv = at;
  at += round4 (dims);
  l.mat = at;
  at += round4 (step ? dims * (dims + 1) : colours * kk * (kk + 1));
  l.x = at;
  at += round4 (dims * chunk_stride);
  l.total = at;
  return l;
}

typedef cub::BlockScan<int, THREADS> block_scan;

/* misc words */
enum { M_BELOW, M_DIGIT, M_NEED, M_OK0 /* .. M_OK0 + 3: a channel's (step 2: the group's) Wiener estimate */ };

/* lower-triangle index t -> (i, j), j <= i */
__device__ __forceinline__ void
tri_index (int t, int &i, int &j)
{
  int r = (int) ((sqrtf (8.0f * (float) t + 1.0f) - 1.0f) * 0.5f);
  while (r * (r + 1) / 2 > t)
    r--;
  while ((r + 1) * (r + 2) / 2 <= t)
    r++;
  i = r;
  j = t - r * (r + 1) / 2;
}

/* Sum of a[g] b[g] (b NULL: of a[g]) over g < n in core/nlbayes.c's
 * order: 8 interleaved partial sums, added in a fixed order. */
__device__ __forceinline__ float
lane_dot (const float *a, const float *b, int n)
{
  float acc[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
  int g = 0;
  for (; g + 8 <= n; g += 8)
#pragma unroll
    for (int l = 0; l < 8; l++)
      acc[l] += b ? a[g + l] * b[g + l] : a[g + l];
#pragma unroll
  for (int l = 0; l < 8; l++)
    if (g + l < n)
      acc[l] += b ? a[g + l] * b[g + l] : a[g + l];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* The lower Cholesky factor of the matrix at mat (a dims x (dims + 1)
 * array: the symmetric matrix's entry (j, i), j <= i, at mat[j (dims + 1) +
 * i + 1], plus shift on the diagonal), written to mat[i (dims + 1) + j],
 * by one warp; 1/l_ii into inv. 0 when it is not positive definite (the
 * CPU's test). */
__device__ int
warp_cholesky (float *mat, int dims, float shift, float *inv, int lane)
{
  const int ld = dims + 1;
  for (int j = 0; j < dims; j++)
    {
      const float *lj = mat + j * ld;
      for (int i = j + lane; i < dims; i += 32)
        {
          const float *li = mat + i * ld;
          float s = mat[j * ld + i + 1] + (i == j ? shift : 0.0f);
          for (int m = 0; m < j; m++)
            s -= li[m] * lj[m];
          mat[i * ld + j] = s;
        }
      __syncwarp ();
      const float d = mat[j * ld + j];
      __syncwarp ();
      if (!(d > 1e-6f))
        return 0;
      const float l = sqrtf (d);
      for (int i = j + lane; i < dims; i += 32)
        mat[i * ld + j] = i == j ? l : mat[i * ld + j] / l;
      if (lane == 0)
        inv[j] = 1.0f / l;
      __syncwarp ();
    }
  return 1;
}

/* z = (l l^T)^-1 x in place on one column of x (rows 0..dims-1, stride cs). */
__device__ __forceinline__ void
solve_column (const float *mat, const float *inv, int dims, float *x, int cs)
{
  const int ld = dims + 1;
  for (int i = 0; i < dims; i++)
    {
      const float *li = mat + i * ld;
      float z = x[i * cs];
      for (int m = 0; m < i; m++)
        z -= li[m] * x[m * cs];
      x[i * cs] = z * inv[i];
    }
  for (int i = dims - 1; i >= 0; i--)
    {
      float z = x[i * cs];
      for (int m = i + 1; m < dims; m++)
        z -= mat[m * ld + i] * x[m * cs];
      x[i * cs] = z * inv[i];
    }
}

/* The n patches at pos of planes (all channels), value-major into x (row
 * stride a.chunk_stride), less mean[row] unless mean is NULL; a warp a row. */
__device__ __forceinline__ void
gather_rows (const float *planes, const nlb_args &a, const int *pos, int n, const float *mean, float *x)
{
  const int lane = threadIdx.x & 31, k = a.k, kk = k * k, dims = a.colours * kk;
  for (int d = threadIdx.x >> 5; d < dims; d += THREADS / 32)
    {
      const int c = d / kk, off = d % kk / k * a.w + d % k;
      const float *p = planes + c * a.plane + off, m = mean ? mean[d] : 0.0f;
      float *row = x + d * a.chunk_stride;
      for (int g = lane; g < n; g += 32)
        row[g] = mean ? p[pos[g]] - m : p[pos[g]];
    }
}

/* Step 1 on the group at s_pos (n >= 2, all of it in shared memory), each
 * channel restored by its own Wiener estimate or its mean patch, added to
 * the sums. Means, the flat-area test's spread and the covariances are
 * core/nlbayes.c's sums in its order, so that every restored value is the
 * CPU's float. */
__device__ void
restore_step1 (const nlb_args &a, int n, float *s_mem, const nlb_layout &L)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k = a.k, kk = k * k, dims = a.colours * kk, w = a.w, cs = a.chunk_stride;
  const int ld = kk + 1, mat_words = kk * ld, entries = kk * (kk + 1) / 2;
  float *s_mean = s_mem + L.mean, *s_inv = s_mem + L.inv, *s_mat = s_mem + L.mat, *s_x = s_mem + L.x;
  const int *s_pos = (const int *) (s_mem + L.pos);
  int *s_misc = (int *) (s_mem + L.misc);
  gather_rows (a.noisy, a, s_pos, n, NULL, s_x);
  __syncthreads ();
  for (int d = tid; d < dims; d += THREADS)
    s_mean[d] = lane_dot (s_x + d * cs, NULL, n) / (float) n;
  __syncthreads ();
  for (int d = warp; d < dims; d += THREADS / 32)
    for (int g = lane; g < n; g += 32)
      s_x[d * cs + g] -= s_mean[d];
  __syncthreads ();
  /* each row's sum of squares (the spread's terms, in s_inv until the
   * factors need it), and the covariances' upper triangles */
  const float inv_n1 = 1.0f / (float) (n - 1);
  for (int d = tid; d < dims; d += THREADS)
    s_inv[d] = lane_dot (s_x + d * cs, s_x + d * cs, n);
  for (int e = tid; e < a.colours * entries; e += THREADS)
    {
      const int c = e / entries;
      int i, j;
      tri_index (e % entries, i, j);
      const float *xi = s_x + (c * kk + i) * cs, *xj = s_x + (c * kk + j) * cs;
      s_mat[c * mat_words + j * ld + i + 1] = lane_dot (xi, xj, n) * inv_n1;
    }
  __syncthreads ();
  if (warp < a.colours)
    {
      int ok = 1;
      if (a.flat >= 0.0f)
        {
          float v = 0.0f;
          if (lane == 0)
            for (int d = 0; d < kk; d++)
              v += s_inv[warp * kk + d];
          v = __shfl_sync (0xffffffffu, v, 0);
          ok = !(v / ((float) (n - 1) * kk) <= a.flat);
        }
      __syncwarp ();
      if (ok)
        ok = warp_cholesky (s_mat + warp * mat_words, kk, 0.0f, s_inv + warp * kk, lane);
      if (lane == 0)
        s_misc[M_OK0 + warp] = ok;
    }
  __syncthreads ();
  for (int t = tid; t < a.colours * n; t += THREADS)
    {
      const int c = t / n, g = t % n, p = s_pos[g];
      const int ok = s_misc[M_OK0 + c];
      float *x = s_x + c * kk * cs + g;
      const float *mean = s_mean + c * kk;
      if (ok)
        solve_column (s_mat + c * mat_words, s_inv + c * kk, kk, x, cs);
      for (int di = 0, d = 0; di < k; di++)
        for (int dj = 0; dj < k; dj++, d++)
          {
            const int off = di * w + dj;
            float v = mean[d];
            if (ok)
              {
                /* Q^ = m + (C - beta sigma^2 I) C^-1 (Q - m) = m + x - beta sigma^2 z, x recomputed */
                const float xd = a.noisy[c * a.plane + p + off] - mean[d];
                v = mean[d] + (xd - a.bs2 * x[d * cs]);
              }
            atomicAdd (&a.num[c * a.plane + p + off], (unsigned long long) NLBAYES_FIXED (v));
          }
      if (c == 0)
        atomicAdd (&a.den[p], 1.0f); /* one more patch at p (coverage: divide_kernel) */
    }
}

/* Step 2 on the group at s_pos (n >= 2): the basic group's mean and
 * covariance C_B, accumulated over chunks of the group in shared memory;
 * (C_B + beta sigma^2 I)'s factor; then chunk by chunk each noisy patch Q
 * restored to m + C_B (C_B + beta sigma^2 I)^-1 (Q - m) (m the noisy
 * group's mean) and added to the sums; a group whose matrix is not
 * positive definite adds its noisy patches as they are. */
__device__ void
restore_step2 (const nlb_args &a, int n, float *s_mem, const nlb_layout &L)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k = a.k, kk = k * k, dims = a.colours * kk, w = a.w, cs = a.chunk_stride;
  const int ld = dims + 1, entries = dims * (dims + 1) / 2;
  float *s_mean = s_mem + L.mean, *s_inv = s_mem + L.inv, *s_mat = s_mem + L.mat, *s_x = s_mem + L.x;
  const int *s_pos = (const int *) (s_mem + L.pos);
  int *s_misc = (int *) (s_mem + L.misc);

  /* means of the basic group (s_mean) and the noisy one (s_mean + dims), a warp a row */
  for (int t = warp; t < 2 * dims; t += THREADS / 32)
    {
      const int d = t % dims, c = d / kk, off = d % kk / k * w + d % k;
      const float *p = (t < dims ? a.planes : a.noisy) + c * a.plane + off;
      float s = 0.0f;
      for (int g = lane; g < n; g += 32)
        s += p[s_pos[g]];
      for (int o = 16; o; o >>= 1)
        s += __shfl_xor_sync (0xffffffffu, s, o);
      if (lane == 0)
        s_mean[t] = s / (float) n;
    }
  for (int t = tid; t < dims * ld; t += THREADS)
    s_mat[t] = 0.0f;
  __syncthreads ();

  const int chunks = (n + a.chunk - 1) / a.chunk;
  for (int ch = 0; ch < chunks; ch++)
    {
      const int g0 = ch * a.chunk, m = min (a.chunk, n - g0);
      if (ch)
        __syncthreads ();
      gather_rows (a.planes, a, s_pos + g0, m, s_mean, s_x);
      __syncthreads ();
      for (int e = tid; e < entries; e += THREADS)
        {
          int i, j;
          tri_index (e, i, j);
          const float *xi = s_x + i * cs, *xj = s_x + j * cs;
          float s = 0.0f;
          for (int g = 0; g < m; g++)
            s += xi[g] * xj[g];
          s_mat[j * ld + i + 1] += s;
        }
    }
  __syncthreads ();
  const float inv_n1 = 1.0f / (float) (n - 1);
  for (int e = tid; e < entries; e += THREADS)
    {
      int i, j;
      tri_index (e, i, j);
      s_mat[j * ld + i + 1] *= inv_n1;
    }
  __syncthreads ();
  if (warp == 0)
    {
      const int ok = warp_cholesky (s_mat, dims, a.bs2, s_inv, lane);
      if (lane == 0)
        s_misc[M_OK0] = ok;
    }
  __syncthreads ();
  const int ok = s_misc[M_OK0];
  for (int ch = 0; ch < chunks; ch++)
    {
      const int g0 = ch * a.chunk, m = min (a.chunk, n - g0);
      if (ok)
        {
          __syncthreads ();
          gather_rows (a.noisy, a, s_pos + g0, m, s_mean + dims, s_x);
          __syncthreads ();
        }
      for (int g = tid; g < m; g += THREADS)
        {
          const int p = s_pos[g0 + g];
          float *x = s_x + g;
          if (ok)
            solve_column (s_mat, s_inv, dims, x, cs);
          for (int c = 0, i = 0; c < a.colours; c++)
            for (int di = 0; di < k; di++)
              for (int dj = 0; dj < k; dj++, i++)
                {
                  const size_t at = c * a.plane + p + di * w + dj;
                  float v;
                  if (ok)
                    {
                      /* Q^ = m + C_B z, C_B from the upper triangle */
                      v = s_mean[dims + i];
                      for (int q = 0; q < dims; q++)
                        v += s_mat[(q < i ? q * ld + i : i * ld + q) + 1] * x[q * cs];
                    }
                  else
                    v = a.noisy[at];
                  atomicAdd (&a.num[at], (unsigned long long) NLBAYES_FIXED (v));
                }
          atomicAdd (&a.den[p], 1.0f);
        }
    }
}

/* The CPU's order among candidates at one distance (core/nlbayes.c's
 * find_group): the squared offset from the reference above the window
 * index, distinct for every candidate, so that the reference comes first. */
static __device__ __forceinline__ uint32_t
tie_key (int idx, int span, int y0, int x0, int ry, int rx)
{
  const int dy = y0 + idx / span - ry, dx = x0 + idx % span - rx;
  return (uint32_t) (dy * dy + dx * dx) << NLBAYES_INDEX_BITS | (uint32_t) idx;
}

/* The need-th smallest (from 1) of the 32-bit keys that key_of gives the
 * candidates it admits, by radix select, 8 bits a pass over a shared-memory
 * histogram; need becomes how many candidates at the returned key are
 * within the need smallest. Called by the whole block. */
template <typename KeyOf>
static __device__ uint32_t
radix_select (int count, int &need, int *s_hist, int *s_misc, int lane, int warp, KeyOf key_of)
{
  const int tid = threadIdx.x;
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8)
    {
      for (int t = tid; t < 256; t += THREADS)
        s_hist[t] = 0;
      __syncthreads ();
      for (int idx = tid; idx < count; idx += THREADS)
        {
          /* Most keys share their top bits: one atomic per bin and warp,
           * not per lane, keeps them from queueing on one word. */
          uint32_t b;
          const bool in = key_of (idx, b) && (b & mask) == prefix;
          const unsigned bin = in ? (b >> shift) & 255 : 256 + lane;
          const unsigned peers = __match_any_sync (__activemask (), bin);
          if (in && lane == __ffs (peers) - 1)
            atomicAdd (&s_hist[bin], __popc (peers));
        }
      __syncthreads ();
      if (warp == 0)
        {
          int v[8], sum = 0;
          for (int b = 0; b < 8; b++)
            sum += v[b] = s_hist[lane * 8 + b];
          int incl = sum;
          for (int o = 1; o < 32; o <<= 1)
            {
              int u = __shfl_up_sync (0xffffffffu, incl, o);
              if (lane >= o)
                incl += u;
            }
          int cum = incl - sum;
          for (int b = 0; b < 8; b++)
            {
              if (cum < need && cum + v[b] >= need)
                {
                  s_misc[M_DIGIT] = lane * 8 + b;
                  s_misc[M_NEED] = need - cum;
                }
              cum += v[b];
            }
        }
      __syncthreads ();
      prefix |= (uint32_t) s_misc[M_DIGIT] << shift;
      mask |= 255u << shift;
      need = s_misc[M_NEED];
      __syncthreads ();
    }
  return prefix;
}

/* One step over references ref0 .. ref0 + gridDim.x - 1. STEP 0: each
 * channel's Wiener estimate from the noisy group; 1: all channels' from the
 * basic group's covariance. */
template <int STEP>
__global__ void __launch_bounds__ (THREADS)
nlbayes_kernel (const nlb_args a)
{
  extern __shared__ __align__ (16) float s_mem[];
  __shared__ typename block_scan::TempStorage s_scan;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k = a.k, kk = k * k, dims = a.colours * kk, w = a.w;
  const nlb_layout L = layout_of (STEP, a.colours, k, a.cand_max, a.n_max, a.chunk_stride);
  float *s_ref = s_mem + L.ref;
  uint32_t *s_dist = (uint32_t *) (s_mem + L.dist);
  int *s_pos = (int *) (s_mem + L.pos), *s_hist = (int *) (s_mem + L.hist), *s_misc = (int *) (s_mem + L.misc);

  const int r = a.ref0 + blockIdx.x;
  const int ry = axis_pos (a.ay, r / a.ax.count), rx = axis_pos (a.ax, r % a.ax.count);
  const int ref = ry * w + rx;
  const int y0 = max (ry - a.radius, 0), y1 = min (ry + a.radius, a.h - k);
  const int x0 = max (rx - a.radius, 0), x1 = min (rx + a.radius, w - k);
  const int span = x1 - x0 + 1, count = span * (y1 - y0 + 1);

  /* 1. distances */
  for (int t = tid; t < dims; t += THREADS)
    {
      const int c = t / kk, i = t % kk / k, j = t % k;
      s_ref[t] = a.planes[c * a.plane + ref + i * w + j];
    }
  if (tid == 0)
    s_misc[M_BELOW] = 0;
  __syncthreads ();
  int below = 0;
  for (int idx = tid; idx < count; idx += THREADS)
    {
      const int q = (y0 + idx / span) * w + x0 + idx % span;
      float d = 0.0f;
      for (int c = 0; c < a.colours; c++)
        for (int i = 0; i < k; i++)
          {
            const float *qr = a.planes + c * a.plane + q + i * w;
            const float *pr = s_ref + c * kk + i * k;
            for (int j = 0; j < k; j++)
              {
                float e = pr[j] - qr[j];
                d += e * e;
              }
          }
      below += d < a.tau;
      /* Distances are >= 0: their bits order as they do. */
      s_dist[idx] = __float_as_uint (d);
    }
  if (STEP)
    {
      for (int o = 16; o; o >>= 1)
        below += __shfl_xor_sync (0xffffffffu, below, o);
      if (lane == 0 && below)
        atomicAdd (&s_misc[M_BELOW], below);
    }
  __syncthreads ();
  int n = STEP ? max (a.group, s_misc[M_BELOW]) : a.group;
  n = min (n, count);

  /* 2. the n-th smallest distance D, then among the candidates at D the
   * `need` smallest by the CPU's tie key (squared offset from the
   * reference, then window index: tie_key), found as the tie key T of
   * the last to join. */
  const bool all = n == count;
  uint32_t D = 0xffffffffu, T = 0xffffffffu;
  if (!all)
    {
      int need = n;
      D = radix_select (count, need, s_hist, s_misc, lane, warp,
                        [&] (int idx, uint32_t &key) { key = s_dist[idx]; return true; });
      T = radix_select (count, need, s_hist, s_misc, lane, warp, [&] (int idx, uint32_t &key) {
        key = tie_key (idx, span, y0, x0, ry, rx);
        return s_dist[idx] == D;
      });
    }

  /* The group in window order: each thread a run of candidates. */
  {
    const int per = (count + THREADS - 1) / THREADS, lo = min (tid * per, count), hi = min (lo + per, count);
    int sel = 0, out0;
    for (int i = lo; i < hi; i++)
      {
        const uint32_t b = s_dist[i];
        sel += all || b < D || (b == D && tie_key (i, span, y0, x0, ry, rx) <= T);
      }
    block_scan (s_scan).ExclusiveSum (sel, out0);
    for (int i = lo, o = out0; i < hi; i++)
      {
        const uint32_t b = s_dist[i];
        if (all || b < D || (b == D && tie_key (i, span, y0, x0, ry, rx) <= T))
          s_pos[o++] = (y0 + i / span) * w + x0 + i % span;
      }
  }
  __syncthreads ();

  /* One patch: restored values as they are (step 2 of a group too small for
   * statistics; step 1's mean of one patch is the patch). */
  if (n < 2)
    {
      for (int t = tid; t < dims; t += THREADS)
        {
          const int c = t / kk, off = t % kk / k * w + t % k;
          atomicAdd (&a.num[c * a.plane + s_pos[0] + off],
                     (unsigned long long) NLBAYES_FIXED (a.noisy[c * a.plane + s_pos[0] + off]));
        }
      if (tid == 0)
        atomicAdd (&a.den[s_pos[0]], 1.0f);
      return;
    }
  if (STEP)
    restore_step2 (a, n, s_mem, L);
  else
    restore_step1 (a, n, s_mem, L);
}

/* src's colour channels, rows [r0, r0 + rows) of the image (stripe rows
 * from `first`), into planes: 0..255, opponent space for three colours,
 * non-finite values as 0. */
template <typename T>
__global__ void
load_kernel (const unsigned char *src, size_t pitch, int first, int width, int rows, int channels,
             int colours, float *planes, size_t plane)
{
  const size_t n = (size_t) width * rows;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    {
      const int y = (int) (i / width), x = (int) (i % width);
      const T *row = (const T *) (src + (size_t) (y + first) * pitch) + (size_t) x * channels;
      float v[4];
      for (int c = 0; c < colours; c++)
        {
          float f = sizeof (T) == 1 ? (float) row[c] : (float) row[c] * 255.0f;
          v[c] = isfinite (f) ? f : 0.0f;
        }
      for (int c = 0; c < colours; c++)
        {
          float s = v[c];
          if (colours == 3)
            s = (c_opp[c][0] * v[0] + c_opp[c][1] * v[1]) + c_opp[c][2] * v[2];
          planes[c * plane + i] = s;
        }
    }
}

/* out = num / den, plane by plane, where a pixel's weight den is the number
 * of restored k x k patches that cover it: the sum of the patch counts at
 * the top-left corners (cnt) of the k x k block ending at the pixel. The
 * kernels count a patch once, not once per pixel (a k^2-th of the
 * atomics); the counts are whole numbers, so their sum is the CPU's
 * weight exactly, in any order. */
__global__ void
divide_kernel (const unsigned long long *num, const float *cnt, int k, int w, int h, int colours, float *out)
{
  const size_t plane = (size_t) w * h;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < plane; i += (size_t) gridDim.x * blockDim.x)
    {
      const int y = (int) (i / w), x = (int) (i % w);
      float den = 0.0f;
      for (int dy = 0; dy < k && dy <= y; dy++)
        for (int dx = 0; dx < k && dx <= x; dx++)
          den += cnt[i - (size_t) dy * w - dx];
      for (int c = 0; c < colours; c++)
        out[c * plane + i] = NLBAYES_UNFIXED ((long long) num[c * plane + i], den);
    }
}

/* planes (rows from `skip`) back into dst's rows (rounded and clamped on
 * u8); alpha and non-finite values from src (its rows from `first`). */
template <typename T>
__global__ void
store_kernel (const float *planes, size_t plane, int skip, const unsigned char *src, size_t src_pitch, int first,
              unsigned char *dst, size_t dst_pitch, int width, int rows, int channels, int colours)
{
  const size_t n = (size_t) width * rows;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    {
      const int y = (int) (i / width), x = (int) (i % width);
      const size_t p = (size_t) (y + skip) * width + x;
      const T *srow = (const T *) (src + (size_t) (y + first) * src_pitch) + (size_t) x * channels;
      T *drow = (T *) (dst + (size_t) y * dst_pitch) + (size_t) x * channels;
      float v[4];
      for (int c = 0; c < colours; c++)
        {
          if (colours == 3)
            v[c] = (c_opp[0][c] * planes[p] + c_opp[1][c] * planes[plane + p]) + c_opp[2][c] * planes[2 * plane + p];
          else
            v[c] = planes[c * plane + p];
        }
      for (int c = 0; c < channels; c++)
        {
          if (sizeof (T) == 1)
            {
              float f = c < colours ? v[c] : (float) srow[c];
              f = f < 0.0f ? 0.0f : f > 255.0f ? 255.0f : f;
              drow[c] = (T) (f + 0.5f);
            }
          else
            {
              float f = (float) srow[c];
              drow[c] = c < colours && isfinite (f) ? (T) (v[c] / 255.0f) : (T) f;
            }
        }
    }
}

struct nlb_ctx
{
  cfx_context        *cx;
  nlbayes_plan        plan; /* patches shrunk to the image */
  const cudafx_options *o;
};

/* Blocks of a grid-stride loop over n values. */
static int
loop_blocks (const nlb_ctx *m, size_t n)
{
  size_t blocks = (n + 255) / 256, most = 8 * (size_t) m->cx->sms;
  return (int) (blocks < 1 ? 1 : blocks < most ? blocks : most);
}

/* One step on the planes of a piece of w x h pixels whose top row is row
 * `top` of the image; progress from `from` to `to` of the call. */
static cudafx_status
run_step (const nlb_ctx *m, int step, int w, int h, int top, const float *noisy, const float *basic,
          unsigned long long *num, float *den, cudaStream_t stream, double from, double to)
{
  const nlbayes_plan *p = &m->plan;
  const nlbayes_step *st = &p->step[step];
  const int k = st->patch, kk = k * k, dims = p->colours * kk;
  const size_t plane = (size_t) w * h;
  nlb_args a;
  a.planes = step ? basic : noisy;
  a.noisy = noisy;
  a.num = num;
  a.den = den;
  a.w = w;
  a.h = h;
  a.colours = p->colours;
  a.plane = plane;
  a.ax = make_axis (w, k, st->stride, p->origin_x);
  a.ay = make_axis (h, k, st->stride, p->origin_y + top);
  a.k = k;
  a.group = st->group;
  a.radius = st->search / 2;
  a.tau = st->tau;
  /* the CPU's products, in its order */
  a.bs2 = step ? st->beta * p->sigma * p->sigma : st->beta * (p->sigma * p->sigma);
  a.flat = !step && p->flat_area ? p->gamma * (p->sigma * p->sigma) : -1.0f;
  const int side_x = w - k + 1 < st->search ? w - k + 1 : st->search;
  const int side_y = h - k + 1 < st->search ? h - k + 1 : st->search;
  a.cand_max = side_x * side_y;
  a.n_max = step ? a.cand_max : st->group < a.cand_max ? st->group : a.cand_max;
  /* The whole group in shared memory when it fits; else chunks of it. */
  const size_t optin = (size_t) m->cx->shared_optin;
  const size_t fixed = (size_t) layout_of (step, p->colours, k, a.cand_max, a.n_max, 0).total * 4;
  a.chunk = a.n_max;
  size_t bytes = (size_t) layout_of (step, p->colours, k, a.cand_max, a.n_max, a.n_max | 1).total * 4;
  if (bytes > optin)
    {
      /* Step 1's groups (at most 147 patches of 196 values) always fit. */
      if (!step)
        return cudafx_fail (CUDAFX_ERR_CUDA, "nl-bayes: a %d-value group of %d needs more shared memory than the "
                            "device has", dims, a.n_max);
      /* 2 KB left for the scan's static storage */
      long fit = optin > fixed + 2048 ? (long) ((optin - fixed - 2048) / (4 * (size_t) dims)) - 1 : 0;
      if (fit < 1)
        return cudafx_fail (CUDAFX_ERR_CUDA, "nl-bayes: a %d-value group needs more shared memory than the device has",
                            dims);
      a.chunk = (int) fit;
      bytes = (size_t) layout_of (step, p->colours, k, a.cand_max, a.n_max, a.chunk | 1).total * 4;
    }
  a.chunk_stride = a.chunk | 1; /* odd: a warp's rows of one column in distinct banks */
  void (*kernel) (nlb_args) = step ? nlbayes_kernel<1> : nlbayes_kernel<0>;
  cudafx_status s = cfx_allow_shared (m->cx, (const void *) kernel, bytes, "nl-bayes");
  if (s || (s = cfx_check (cudaMemsetAsync (num, 0, plane * p->colours * sizeof *num, stream), "nl-bayes",
                           "memset")) ||
      (s = cfx_check (cudaMemsetAsync (den, 0, plane * sizeof (float), stream), "nl-bayes", "memset")))
    return s;

  const cudafx_options *o = m->o;
  const bool watched = o && o->progress;
  const int launches = watched ? (a.ay.count < LAUNCHES_WITH_PROGRESS ? a.ay.count : LAUNCHES_WITH_PROGRESS) : 1;
  for (int l = 0; l < launches; l++)
    {
      /* whole rows of references per launch */
      const int r0 = (int) ((long) a.ay.count * l / launches) * a.ax.count;
      const int r1 = (int) ((long) a.ay.count * (l + 1) / launches) * a.ax.count;
      a.ref0 = r0;
      if (r1 > r0)
        {
          kernel<<<r1 - r0, THREADS, bytes, stream>>> (a);
          if ((s = cfx_check_launch ("nl-bayes", "nlbayes_kernel")))
            return s;
        }
      if (watched && l + 1 < launches &&
          ((s = cfx_check (cudaStreamSynchronize (stream), "nl-bayes", "kernel")) ||
           (s = cudafx_progress (o, from + (to - from) * (l + 1) / launches))))
        return s;
    }
  return CUDAFX_OK;
}

/* Both steps on one stripe (or the whole image). */
static cudafx_status
nlbayes_stripe (void *ctx, const cfx_stripe *s)
{
  const nlb_ctx *m = (const nlb_ctx *) ctx;
  const int colours = m->plan.colours, w = s->width;
  /* The stripe's real rows: those the runner made up past the edges are no
   * part of the image. */
  const int top = s->y0 - s->halo > 0 ? s->y0 - s->halo : 0;
  const int bottom = s->y0 + s->rows + s->halo < s->height ? s->y0 + s->rows + s->halo : s->height;
  const int h = bottom - top, first = top - (s->y0 - s->halo);
  const size_t plane = (size_t) w * h;
  float *noisy = (float *) s->d_scratch, *basic = noisy + colours * plane;
  unsigned long long *num = (unsigned long long *) (basic + colours * plane); /* 8-aligned: 2 colours planes before */
  float *den = (float *) (num + colours * plane);
  const bool u8 = s->type == CUDAFX_U8;
  const int blocks = loop_blocks (m, plane);
  if (u8)
    load_kernel<uint8_t><<<blocks, 256, 0, s->stream>>> (s->d_src, s->src_pitch, first, w, h, s->channels, colours,
                                                         noisy, plane);
  else
    load_kernel<float><<<blocks, 256, 0, s->stream>>> (s->d_src, s->src_pitch, first, w, h, s->channels, colours,
                                                       noisy, plane);
  cudafx_status st = cfx_check_launch ("nl-bayes", "load_kernel");
  /* Progress over the stripe's rows of the image. */
  const double f0 = (double) s->y0 / s->height, f1 = (double) (s->y0 + s->rows) / s->height, fm = (f0 + f1) / 2;
  if (st || (st = run_step (m, 0, w, h, top, noisy, NULL, num, den, s->stream, f0, fm)))
    return st;
  divide_kernel<<<blocks, 256, 0, s->stream>>> (num, den, m->plan.step[0].patch, w, h, colours, basic);
  if ((st = cfx_check_launch ("nl-bayes", "divide_kernel")) ||
      (st = run_step (m, 1, w, h, top, noisy, basic, num, den, s->stream, fm, f1)))
    return st;
  divide_kernel<<<blocks, 256, 0, s->stream>>> (num, den, m->plan.step[1].patch, w, h, colours, basic);
  if ((st = cfx_check_launch ("nl-bayes", "divide_kernel")))
    return st;
  const int out_blocks = loop_blocks (m, (size_t) w * s->rows), skip = s->y0 - top, src_first = s->halo;
  if (u8)
    store_kernel<uint8_t><<<out_blocks, 256, 0, s->stream>>> (basic, plane, skip, s->d_src, s->src_pitch, src_first,
                                                              s->d_dst, s->dst_pitch, w, s->rows, s->channels,
                                                              colours);
  else
    store_kernel<float><<<out_blocks, 256, 0, s->stream>>> (basic, plane, skip, s->d_src, s->src_pitch, src_first,
                                                            s->d_dst, s->dst_pitch, w, s->rows, s->channels,
                                                            colours);
  return cfx_check_launch ("nl-bayes", "store_kernel");
}

} // namespace

extern "C" cudafx_status
cudafx_nlbayes_cuda (const cudafx_image *src, cudafx_image *dst, const nlbayes_plan *plan,
                     const cudafx_options *o)
{
  cfx_call call;
  cudafx_status s = cfx_begin (call, "nl-bayes", o, CFX_LANE_ASKED);
  if (s)
    return s;
  cfx_context *cx = call.cx;
  nlb_ctx m = { cx, *plan, o };
  /* Patches larger than the image shrink to it, as on the CPU. */
  for (int i = 0; i < 2; i++)
    {
      nlbayes_step *st = &m.plan.step[i];
      const int side = src->width < src->height ? src->width : src->height;
      if (st->patch > side)
        st->patch = side;
      if (st->stride > st->patch)
        st->stride = st->patch;
    }
  /* noisy and basic planes of floats, num's of fixed-point sums, one plane of weights */
  size_t scratch_row;
  if (__builtin_mul_overflow ((size_t) src->width,
                              plan->colours * (2 * sizeof (float) + sizeof (unsigned long long)) + sizeof (float),
                              &scratch_row))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-bayes: image too large");
  scratch_row = (scratch_row + 7) & ~(size_t) 7; /* each stripe's scratch 8-aligned, for num */
  /* The whole image in one piece when it fits: no halo to compute twice. */
  cfx_stripe whole;
  int loaded = 0;
  if ((s = cfx_load_image (cx, "nl-bayes", src, 0, CUDAFX_BORDER_CLAMP, scratch_row, &whole, &loaded, o)))
    {
      if (s == CUDAFX_ERR_CUDA)
        cfx_release_buffers (cx);
      return s;
    }
  if (loaded)
    {
      s = cfx_apply (cx, "nl-bayes", &whole, nlbayes_stripe, &m, dst, o);
      if (s == CUDAFX_ERR_CUDA)
        cfx_release_buffers (cx);
      else if (!s)
        s = cudafx_progress (o, 1.0);
      return s;
    }
  return cfx_run_stripes (cx, "nl-bayes", src, dst, nlbayes_halo (&m.plan), CUDAFX_BORDER_CLAMP, scratch_row,
                          nlbayes_stripe, &m, o);
}
