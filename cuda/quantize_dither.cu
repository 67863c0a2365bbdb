/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize's dithered mappings on the GPU: Floyd–Steinberg error
 * diffusion as a wavefront (see below), every float addition in the
 * sequential scan's order, and the positioned dithers (ordered, blue
 * noise), each pixel's threshold added before the nearest entry is taken.
 * See quantize.cuh. */
#include "../core/bluenoise.h"
#include "quantize.cuh"

#include <thread>

namespace {

/* ---- Floyd–Steinberg -------------------------------------------------------
 *
 * The sequential scan as a wavefront, every float addition in the scan's
 * order (core/quantize.c, dither_row, says why that order is enough). A warp
 * (each warp of the block, see Speed) owns DITHER_ROWS = 32 consecutive rows
 * of the stripe, lane r row r, and walks them in lockstep with a skew of two
 * pixels a row: at step t lane r takes pixel x = t - 2r. Pixel (x, y) needs
 * the errors of pixels x-1, x, x+1 of row y-1 and of its left neighbour: the
 * lane above finished x+1 one step earlier and hands each error down by a
 * shuffle, so every lane keeps a window of three of the row above's errors;
 * the left one is its own last.
 *
 * Between groups (one block each): lane 0's row above is the last row of
 * the previous group of rows (or of the previous stripe). The block of that
 * group stores its last row's errors in a boundary row in global memory and
 * publishes how many are there (a fence, then a volatile store) every
 * DITHER_CHUNK pixels and at the row's end; each warp of the block below
 * reads that count (volatile loads, then a fence) only when it starts a new
 * chunk of the row above, which its lanes then load together into shared
 * memory. A group trails the one above by 2 * 32 + DITHER_CHUNK pixels, so
 * the kernel takes about width + 2 * height + groups * DITHER_CHUNK steps
 * (a smaller chunk shortens the trail, at a fence and a poll a chunk;
 * docs/BENCHMARKS.md, "Floyd–Steinberg on the GPU"). Blocks take their
 * groups in order from a ticket (an atomic counter), not from blockIdx: a
 * block only ever waits for a group taken earlier, by a block that is
 * already running, so the kernel cannot deadlock whatever the scheduling or
 * how many blocks are resident.
 *
 * An error travels as a float4: the channels' errors, and w = 1 when the
 * pixel voted (transparent pixels and pixels outside the image pass none).
 *
 * Speed: the steps are the critical path, and a step's work is one chain of
 * dependent operations (the error sums, features, the nearest search, the
 * entry's value, the shuffle to the next lane); a group's block has an SM to
 * itself. Hence the branch-free nearest search over many entries at once
 * (the CPU's search pruned by sorted first features, core/quantize.h, is
 * slower here: the lanes' searches diverge and each step waits for the
 * longest; docs/BENCHMARKS.md, "Floyd–Steinberg on the GPU", has the
 * measurements), the pixels loaded a
 * step ahead and prefetched into L1, and for larger palettes the search
 * shared by the block's DITHER_SEARCH_WARPS warps: each warp runs the whole
 * step for the same 32 rows (the same arithmetic, so the same values),
 * searches its slice of the palette, and the slices' nearest meet in shared
 * memory (one barrier a step): one warp alone issued on one of the SM's four
 * schedulers, and its search of the whole palette bounded the step.
 *
 * Progress and cancel: each group's last lane, at the end of its row, writes
 * the rows done to mapped host memory; the host calls the progress callback
 * at fixed marks as the rows get done (the same calls every run). A cancel
 * waits for the kernel's end (one stripe's worth), which costs less than
 * warps reading a stop flag from host memory while they wait: that slowed
 * every run (docs/BENCHMARKS.md, "Floyd–Steinberg on the GPU"). */

constexpr int DITHER_CHUNK = 8;     /* pixels of a boundary row published and loaded at once */
constexpr int DITHER_SEARCH_WARPS = 4; /* warps of a group sharing a larger palette's search: one a scheduler */
constexpr int DITHER_PREFETCH = 32; /* pixels ahead a lane prefetches its row into L1 */
constexpr int DITHER_PREFETCH_EVERY = 8; /* pixels between prefetches: at most 128 bytes, so every line */
constexpr int DITHER_MARKS = 32;    /* progress calls per stripe, at most */
constexpr int DITHER_REG_ENTRIES = 16; /* palettes up to this size: the centres in registers */
constexpr int DITHER_GROUP = 8;     /* entries of a larger palette compared at once */
constexpr unsigned FULL_WARP = 0xffffffffu;

/* this file's copies (quantize.cuh) */
__constant__ float c_decode[256];
__constant__ float c_centre[CUDAFX_MAX_COLORS][3];
__constant__ unsigned char c_pal_u8[CUDAFX_MAX_COLORS][3];
__constant__ float c_pal_f32[CUDAFX_MAX_COLORS][3];
__constant__ float c_pal_value[CUDAFX_MAX_COLORS][3]; /* entries on the 0..255 scale */

struct dither_args
{
  float   lo[3], hi[3];   /* the palette's range per channel: values are clamped to it */
  float4 *bound;          /* row 0: the previous stripe's last row; row g + 1: group g's last */
  int    *progress;       /* [g]: pixels of boundary row g + 1 published; [groups]: the ticket */
  int     groups;         /* of DITHER_ROWS rows in the stripe */
  int     above_in;       /* boundary row 0 holds errors (not the first stripe) */
  int     everyone_votes;
  int     limit;          /* reduced bleeding: quantize_limit_error on the incoming error */
  volatile int *rows_done; /* in mapped host memory */
};

/* The nearest search: a warp has no other work on its scheduler to hide
 * latencies behind, so the distances to many entries are computed at once,
 * with no branch per entry. Small palettes sit in registers; larger ones in
 * shared memory as float4 (one load an entry, the same address for every
 * lane), in slices of whole groups of DITHER_GROUP, one a warp, padded at
 * the end with entries at infinity, whose distance is infinite and never
 * wins (a slice of padding alone yields infinity, which loses to slice 0's).
 * Exact: the same distances as nearest_entry, and the same winner (the
 * first of the nearest). */
enum dither_search { SEARCH_REGISTERS, SEARCH_GROUPS };

/* nearest_entry over centres held in registers (DITHER_REG_ENTRIES, padded):
 * the distances merged in a tree, a right-hand candidate (higher indices)
 * replacing a left-hand one only when strictly nearer. */
__device__ __forceinline__ int
nearest_in_registers (const float (&centre)[DITHER_REG_ENTRIES][3], float fx, float fy, float fz)
{
  float d[DITHER_REG_ENTRIES];
  int index[DITHER_REG_ENTRIES];
#pragma unroll
  for (int j = 0; j < DITHER_REG_ENTRIES; j++)
    {
      d[j] = quantize_distance (fx, fy, fz, centre[j]);
      index[j] = j;
    }
#pragma unroll
  for (int step = 1; step < DITHER_REG_ENTRIES; step *= 2)
#pragma unroll
    for (int j = 0; j < DITHER_REG_ENTRIES; j += 2 * step)
      if (d[j + step] < d[j])
        {
          d[j] = d[j + step];
          index[j] = index[j + step];
        }
  return index[0];
}

/* The distances to a group's entries, and their smallest (fminf returns
 * one of its arguments: exact). */
__device__ __forceinline__ float
group_distances (const float4 *centre, float fx, float fy, float fz, float (&d)[DITHER_GROUP])
{
#pragma unroll
  for (int u = 0; u < DITHER_GROUP; u++)
    {
      float4 c = centre[u];
      const float e[3] = { c.x, c.y, c.z };
      d[u] = quantize_distance (fx, fy, fz, e);
    }
  float m[DITHER_GROUP];
#pragma unroll
  for (int u = 0; u < DITHER_GROUP; u++)
    m[u] = d[u];
#pragma unroll
  for (int step = 1; step < DITHER_GROUP; step *= 2)
#pragma unroll
    for (int u = 0; u < DITHER_GROUP; u += 2 * step)
      m[u] = fminf (m[u], m[u + step]);
  return m[0];
}

/* The first u with d[u] == nearest. */
__device__ __forceinline__ int
first_at (const float (&d)[DITHER_GROUP], float nearest)
{
  int at = DITHER_GROUP - 1;
#pragma unroll
  for (int u = DITHER_GROUP - 2; u >= 0; u--)
    if (d[u] == nearest)
      at = u;
  return at;
}

/* nearest_entry over `pairs` pairs of groups in shared memory, two groups
 * (2 * DITHER_GROUP distances) at a time; best: the nearest's distance.
 * Scanning the entries in order, the first nearest lies in the first group
 * whose nearest is strictly nearer than every group's before it: the scan
 * keeps only that group (no branch), and computes its distances again at
 * the end to find the first at that distance. */
__device__ __forceinline__ int
nearest_in_groups (const float4 *centre, int pairs, float fx, float fy, float fz, float &best)
{
  best = INFINITY;
  int group = 0;
  /* unrolled as far as pairs goes (four at 256 entries): the next pair's
   * loads then overlap this pair's arithmetic */
  static_assert (CUDAFX_MAX_COLORS <= 4 * 2 * DITHER_GROUP * DITHER_SEARCH_WARPS, "pairs above 4");
#pragma unroll 4
  for (int g = 0; g < 2 * pairs; g += 2)
    {
      float d0[DITHER_GROUP], d1[DITHER_GROUP];
      float m0 = group_distances (centre + g * DITHER_GROUP, fx, fy, fz, d0);
      float m1 = group_distances (centre + (g + 1) * DITHER_GROUP, fx, fy, fz, d1);
      if (m0 < best)
        {
          best = m0;
          group = g;
        }
      if (m1 < best)
        {
          best = m1;
          group = g + 1;
        }
    }
  float d[DITHER_GROUP];
  group_distances (centre + group * DITHER_GROUP, fx, fy, fz, d);
  return group * DITHER_GROUP + first_at (d, best);
}

/* Pixel x of a source row as stored: the codes of a u8 row, or the bits of
 * an f32 row's floats; the alpha in w (0 without one). pixel_value converts
 * it: apart, so that the dither can load a pixel a step before it converts
 * it (a conversion right after the load waits for the load). */
template <int DIMS>
__device__ __forceinline__ uint4
load_raw (const stripe_view &v, const unsigned char *srow, int x)
{
  size_t at = (size_t) x * v.channels;
  unsigned c[4] = { 0, 0, 0, 0 };
  if (v.u8)
    {
#pragma unroll
      for (int i = 0; i < DIMS; i++)
        c[i] = srow[at + i];
      if (v.has_alpha)
        c[3] = srow[at + v.channels - 1];
    }
  else
    {
      const unsigned *px = (const unsigned *) srow + at;
#pragma unroll
      for (int i = 0; i < DIMS; i++)
        c[i] = px[i];
      if (v.has_alpha)
        c[3] = px[v.channels - 1];
    }
  return make_uint4 (c[0], c[1], c[2], c[3]);
}

/* A pixel from load_raw: its colour channels on the 0..255 scale (u8 codes
 * as floats, exact) and in w its alpha as stored. */
template <int DIMS>
__device__ __forceinline__ float4
pixel_value (const stripe_view &v, uint4 raw)
{
  const unsigned r[4] = { raw.x, raw.y, raw.z, raw.w };
  float c[3] = { 0.0f, 0.0f, 0.0f };
#pragma unroll
  for (int i = 0; i < DIMS; i++)
    c[i] = v.u8 ? (float) r[i] : __uint_as_float (r[i]) * 255.0f;
  return make_float4 (c[0], c[1], c[2], v.u8 ? (float) r[3] : __uint_as_float (r[3]));
}

__device__ __forceinline__ float
channel (const float4 &e, int c)
{
  return c == 0 ? e.x : c == 1 ? e.y : e.z;
}

__device__ __forceinline__ float4
shfl_up_error (float4 e)
{
  e.x = __shfl_up_sync (FULL_WARP, e.x, 1);
  e.y = __shfl_up_sync (FULL_WARP, e.y, 1);
  e.z = __shfl_up_sync (FULL_WARP, e.z, 1);
  e.w = __shfl_up_sync (FULL_WARP, e.w, 1);
  return e;
}

/* DIMS: v.dims as a constant, so that the pixel's arrays stay in registers.
 * One block a group of rows: one warp (SEARCH_REGISTERS), or with
 * SEARCH_GROUPS DITHER_SEARCH_WARPS warps that each search one slice of the
 * palette. */
template <int DIMS, int SEARCH>
__global__ void __launch_bounds__ (DITHER_SEARCH_WARPS * 32)
dither_kernel (stripe_view v, int k, unsigned char *dst, size_t dst_pitch, dither_args a)
{
  /* the lanes look up different entries at once: shared memory, not constant */
  __shared__ float s_decode[256];
  __shared__ float s_f32[CUDAFX_MAX_COLORS][3];
  __shared__ float4 s_value[CUDAFX_MAX_COLORS]; /* w unused: one load */
  __shared__ unsigned char s_u8[CUDAFX_MAX_COLORS][3];
  __shared__ float4 s_above[DITHER_SEARCH_WARPS][DITHER_CHUNK];
  constexpr int padded = SEARCH == SEARCH_GROUPS ? CUDAFX_MAX_COLORS + 2 * DITHER_GROUP * DITHER_SEARCH_WARPS : 1;
  __shared__ float4 s_centre[padded];
  /* each warp's nearest of its slice for each lane (distance, and index as
   * bits), at even and odd steps: a warp writes one step's while the others
   * may still read the last's */
  __shared__ float2 s_nearest[2][DITHER_SEARCH_WARPS][DITHER_ROWS];
  __shared__ int s_group;
  const int lane = threadIdx.x % 32, w = v.width;
  constexpr int warps = SEARCH == SEARCH_REGISTERS ? 1 : DITHER_SEARCH_WARPS;
  const int warp = SEARCH == SEARCH_REGISTERS ? 0 : threadIdx.x / 32;
  /* pairs of groups of entries each warp searches: its slice, entries warp * slice .. */
  const int pairs = (k + 2 * DITHER_GROUP * warps - 1) / (2 * DITHER_GROUP * warps);
  const int slice = 2 * DITHER_GROUP * pairs;
  if (threadIdx.x == 0)
    s_group = atomicAdd (&a.progress[a.groups], 1);
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    s_decode[i] = c_decode[i];
  for (int i = threadIdx.x; i < k; i += blockDim.x)
    s_value[i] = make_float4 (c_pal_value[i][0], c_pal_value[i][1], c_pal_value[i][2], 0.0f);
  for (int i = threadIdx.x; i < 3 * k; i += blockDim.x)
    {
      s_f32[i / 3][i % 3] = c_pal_f32[i / 3][i % 3];
      s_u8[i / 3][i % 3] = c_pal_u8[i / 3][i % 3];
    }
  if constexpr (SEARCH == SEARCH_GROUPS)
    for (int i = threadIdx.x; i < warps * slice; i += blockDim.x)
      s_centre[i] = i < k ? make_float4 (c_centre[i][0], c_centre[i][1], c_centre[i][2], 0.0f)
                          : make_float4 (INFINITY, INFINITY, INFINITY, 0.0f);
  float centre[SEARCH == SEARCH_REGISTERS ? DITHER_REG_ENTRIES : 1][3];
  if constexpr (SEARCH == SEARCH_REGISTERS)
#pragma unroll
    for (int j = 0; j < DITHER_REG_ENTRIES; j++)
#pragma unroll
      for (int c = 0; c < 3; c++)
        centre[j][c] = j < k ? c_centre[j][c] : INFINITY;
  __syncthreads ();

  const int group = s_group;
  if (group >= a.groups)
    return;
  const int y = group * DITHER_ROWS + lane;
  const int last_lane = min (DITHER_ROWS - 1, v.rows - 1 - group * DITHER_ROWS);
  const bool has_row = lane <= last_lane;
  /* warp 0 writes the image; the last warp the boundary row, its count and
   * the progress, so that its fences wait for no stores of the image */
  const bool writes = warp == 0, publishes = warp == warps - 1 && lane == last_lane;
  const size_t pixel_bytes = (size_t) v.channels * (v.u8 ? 1 : sizeof (float));
  const unsigned char *srow = v.src + (size_t) (has_row ? y : 0) * v.src_pitch;
  /* lane 0's row above: the previous group's last row, or the previous stripe's */
  const float4 *above = group > 0 ? a.bound + (size_t) group * w : a.above_in ? a.bound : NULL;
  const volatile int *above_done = group > 0 ? a.progress + group - 1 : NULL;
  int seen = above_done ? 0 : w; /* pixels of the row above known to be there */
  float4 *below = a.bound + (size_t) (group + 1) * w;

  const float lo[3] = { a.lo[0], a.lo[1], a.lo[2] }, hi[3] = { a.hi[0], a.hi[1], a.hi[2] };
  const float4 none = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
  float4 up_left = none, up = none, up_right = none; /* row above: pixels x-1, x, x+1 */
  float4 mine = none;  /* this lane's error of the last step: its left neighbour's */
  uint4 ahead = make_uint4 (0, 0, 0, 0); /* its next pixel, loaded a step early: the load's latency hides behind a step */
  for (int t = -1, parity = 0; t < w + 2 * (DITHER_ROWS - 1); t++, parity ^= 1)
    {
      int next = t + 1; /* the pixel of the row above lane 0 takes in this step */
      if (above && next < w && next % DITHER_CHUNK == 0)
        {
          int need = min (next + DITHER_CHUNK, w);
          while (seen < need)
            {
              int count = 0;
              if (lane == 0)
                count = *above_done;
              seen = __shfl_sync (FULL_WARP, count, 0);
              if (seen < need)
                __nanosleep (64);
            }
          /* acquire: the fence after reading the count orders the loads of the
           * errors after it (an acquire load in the loop costs a fence a poll) */
          __threadfence ();
          __syncwarp (); /* lane 0 is done with the last chunk */
          if (lane < DITHER_CHUNK && next + lane < w)
            s_above[warp][lane] = __ldcg (above + next + lane);
          __syncwarp ();
        }
      float4 incoming = shfl_up_error (mine);
      if (lane == 0)
        incoming = above && next < w ? s_above[warp][next % DITHER_CHUNK] : none;
      up_left = up;
      up = up_right;
      up_right = incoming;
      const float4 left = mine;
      mine = none;
      const int x = t - 2 * lane;
      const float4 px = pixel_value<DIMS> (v, ahead);
      if (has_row && x + 1 >= 0 && x + 1 < w)
        ahead = load_raw<DIMS> (v, srow, x + 1);
      const bool active = has_row && x >= 0 && x < w;
      if constexpr (warps == 1)
        if (!active)
          continue;

      float value[3] = { px.x, px.y, px.z }, f[3] = { 0.0f, 0.0f, 0.0f };
      /* quantize_votes on the converted values: px holds the colour x 255
       * and the alpha as stored (0 without one) */
      const float x255[3] = { px.x, px.y, px.z };
      const bool votes = a.everyone_votes || ((v.u8 || quantize_known (x255, DIMS, px.w))
                                              && (!v.has_alpha || px.w != 0.0f));
      if (active)
        {
          if (x % DITHER_PREFETCH_EVERY == 0 && x + DITHER_PREFETCH < w)
            asm volatile ("prefetch.global.L1 [%0];" :: "l" (srow + (x + DITHER_PREFETCH) * pixel_bytes));
          if (votes)
            {
#pragma unroll
              for (int c = 0; c < DIMS; c++)
                {
                  /* dither_row's additions to this pixel's error, in its order */
                  float e = 0.0f;
                  if (up_left.w != 0.0f)
                    e += channel (up_left, c) * (1.0f / 16.0f);
                  if (up.w != 0.0f)
                    e += channel (up, c) * (5.0f / 16.0f);
                  if (up_right.w != 0.0f)
                    e += channel (up_right, c) * (3.0f / 16.0f);
                  if (left.w != 0.0f)
                    e += channel (left, c) * (7.0f / 16.0f);
                  if (a.limit)
                    e = quantize_limit_error (e);
                  e = quantize_sanitize (value[c]) + e;
                  value[c] = e < lo[c] ? lo[c] : e > hi[c] ? hi[c] : e;
                }
              quantize_features (DIMS, v.oklab, s_decode, value, NULL, f);
            }
          else if (v.u8)
            {
              /* two calls: a conditional pointer to the codes put them in local memory */
              const unsigned char code[3] = { (unsigned char) value[0], (unsigned char) value[1],
                                              (unsigned char) value[2] };
              quantize_features (DIMS, v.oklab, s_decode, value, code, f);
            }
          else
            quantize_features (DIMS, v.oklab, s_decode, value, NULL, f);
        }
      int label;
      if constexpr (SEARCH == SEARCH_REGISTERS)
        label = nearest_in_registers (centre, f[0], f[1], f[2]);
      else
        {
          float best;
          label = warp * slice + nearest_in_groups (s_centre + warp * slice, pairs, f[0], f[1], f[2], best);
          if constexpr (warps > 1)
            {
              /* the slices in index order, each taken only when strictly
               * nearer: the first of the nearest, as one scan would find */
              s_nearest[parity][warp][lane] = make_float2 (best, __int_as_float (label));
              __syncthreads ();
              float2 first = s_nearest[parity][0][lane];
#pragma unroll
              for (int j = 1; j < warps; j++)
                {
                  const float2 c = s_nearest[parity][j][lane];
                  if (c.x < first.x)
                    first = c;
                }
              label = __float_as_int (first.y);
            }
        }
      if (!active)
        continue;
      if (writes)
        write_entry (v, DIMS, x, y, s_u8[label], s_f32[label], dst, dst_pitch);
      if (votes)
        {
          const float4 entry = s_value[label];
          mine = make_float4 (value[0] - entry.x, value[1] - entry.y, value[2] - entry.z, 1.0f);
        }
      if (publishes)
        {
          __stcg (below + x, mine);
          if ((x + 1) % DITHER_CHUNK == 0 || x == w - 1)
            {
              __threadfence (); /* release: the errors before their count */
              *(volatile int *) &a.progress[group] = x + 1;
            }
          if (x == w - 1)
            *a.rows_done = y + 1;
        }
    }
}

/* ---- positioned dithering ------------------------------------------------
 * Per pixel, as core/quantize.c's position_rows: the threshold of the
 * pixel's place (quantize.h) times the spread added to each colour channel,
 * clamped to the palette's range, then the nearest entry. The blue-noise
 * mask is read through the read-only cache (lanes read different cells). */

__device__ const uint16_t g_blue_noise[QUANTIZE_BLUE_SIZE * QUANTIZE_BLUE_SIZE] = { QUANTIZE_BLUE_NOISE_RANKS };

struct position_args
{
  float lo[3], hi[3];
  float spread;
  int   dither;
  int   y0;      /* the stripe's first row in the image: the pattern is the image's */
};

template <int DIMS>
__global__ void
position_kernel (stripe_view v, int k, unsigned char *dst, size_t dst_pitch, position_args a)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  float4 px = pixel_value<DIMS> (v, load_raw<DIMS> (v, v.src + (size_t) y * v.src_pitch, x));
  float value[3] = { px.x, px.y, px.z }, f[3] = { 0.0f, 0.0f, 0.0f };
  float t = a.spread * quantize_threshold (a.dither, g_blue_noise, x, a.y0 + y);
#pragma unroll
  for (int c = 0; c < DIMS; c++)
    {
      float e = quantize_sanitize (value[c]) + t;
      value[c] = e < a.lo[c] ? a.lo[c] : e > a.hi[c] ? a.hi[c] : e;
    }
  quantize_features (DIMS, v.oklab, c_decode, value, NULL, f);
  int label = nearest_entry (f[0], f[1], f[2], c_centre, k);
  write_entry (v, DIMS, x, y, c_pal_u8[label], c_pal_f32[label], dst, dst_pitch);
}

/* The palette's range per channel, which dithered values are clamped to. */
void
copy_range (const quantize_mapping *m, float *lo, float *hi)
{
  for (int c = 0; c < 3; c++)
    {
      lo[c] = m->lo[c];
      hi[c] = m->hi[c];
    }
}

} // namespace

cudafx_status
qz_dither_constants (cudaStream_t stream, const quantize_space *fs, const quantize_mapping *m)
{
  cudafx_status s;
  if ((s = cfx_check (cudaMemcpyToSymbolAsync (c_decode, fs->decode, sizeof fs->decode, 0, cudaMemcpyHostToDevice,
                                               stream),
                      FILTER, "copy to device")) ||
      (s = upload_palette (stream, &m->pal, &c_centre, &c_pal_u8, &c_pal_f32)) || !quantize_is_diffusion (m->dither))
    return s;
  return cfx_check (cudaMemcpyToSymbolAsync (c_pal_value, m->value, (size_t) m->pal.k * sizeof m->value[0], 0,
                                             cudaMemcpyHostToDevice, stream),
                    FILTER, "copy to device");
}

/* Floyd–Steinberg over stripe i (rows y0 ..): its first group continues
 * from the last row of stripe i - 1, whose errors the boundary rows still
 * hold. Calls the progress callback as the rows get done (the stripe's end
 * is run_pass's); on a cancel, waits for the kernel's end. */
cudafx_status
qz_launch_dither (quantize_session *q, const stripe_view &v, int i, int y0, int k)
{
  dither_args a;
  copy_range (q->map, a.lo, a.hi);
  a.bound = q->d_bound;
  a.progress = q->d_progress;
  a.groups = (v.rows + DITHER_ROWS - 1) / DITHER_ROWS;
  a.above_in = i > 0;
  a.everyone_votes = q->everyone_votes;
  a.limit = q->map->dither == CUDAFX_DITHER_FS_LOW_BLEED;
  a.rows_done = q->d_rows_done;
  *q->h_rows_done = 0;
  size_t row = (size_t) v.width * sizeof (float4);
  /* stripes before the last have q->rows rows: their last group's row */
  const float4 *last = q->d_bound + (dither_bound_rows (q->rows) - 1) * v.width;
  cudafx_status s;
  if ((a.above_in && (s = cfx_check (cudaMemcpyAsync (q->d_bound, last, row, cudaMemcpyDeviceToDevice, q->cx->stream),
                                     FILTER, "copy on device"))) ||
      (s = cfx_check (cudaMemsetAsync (q->d_progress, 0, (a.groups + 1) * sizeof (int), q->cx->stream), FILTER,
                      "memset")))
    return s;
  unsigned blocks = a.groups, threads = (k <= DITHER_REG_ENTRIES ? 1 : DITHER_SEARCH_WARPS) * 32;
  unsigned char *d = q->d_dst;
  if (k <= DITHER_REG_ENTRIES)
    {
      if (v.dims == 3)
        dither_kernel<3, SEARCH_REGISTERS><<<blocks, threads, 0, q->cx->stream>>> (v, k, d, q->pitch, a);
      else
        dither_kernel<1, SEARCH_REGISTERS><<<blocks, threads, 0, q->cx->stream>>> (v, k, d, q->pitch, a);
    }
  else if (v.dims == 3)
    dither_kernel<3, SEARCH_GROUPS><<<blocks, threads, 0, q->cx->stream>>> (v, k, d, q->pitch, a);
  else
    dither_kernel<1, SEARCH_GROUPS><<<blocks, threads, 0, q->cx->stream>>> (v, k, d, q->pitch, a);
  if ((s = cfx_check_launch (FILTER, "dither_kernel")) || !q->o || !q->o->progress)
    return s; /* no callback: run_pass waits for the kernel */
  int mark = (a.groups + DITHER_MARKS - 1) / DITHER_MARKS * DITHER_ROWS; /* rows between calls */
  for (int rows = mark; rows < v.rows; rows += mark)
    {
      cudaError_t e = cudaSuccess;
      while (*q->h_rows_done < rows && (e = cudaStreamQuery (q->cx->stream)) == cudaErrorNotReady)
        std::this_thread::yield ();
      if (*q->h_rows_done < rows && e != cudaSuccess)
        return cfx_check (e, FILTER, "kernel");
      if ((s = cudafx_progress (q->o, 0.9 + 0.1 * (y0 + rows) / q->src->height)))
        {
          cudaStreamSynchronize (q->cx->stream); /* the buffers are free after the kernel */
          return s;
        }
    }
  return CUDAFX_OK;
}

cudafx_status
qz_position (const quantize_session *q, const stripe_view &v, int y0, int k)
{
  position_args a;
  copy_range (q->map, a.lo, a.hi);
  a.spread = q->map->spread;
  a.dither = q->map->dither;
  a.y0 = y0;
  unsigned blocks = grid_for (v.n, THREADS);
  if (v.dims == 3)
    position_kernel<3><<<blocks, THREADS, 0, q->cx->stream>>> (v, k, q->d_dst, q->pitch, a);
  else
    position_kernel<1><<<blocks, THREADS, 0, q->cx->stream>>> (v, k, q->d_dst, q->pitch, a);
  return cfx_check_launch (FILTER, "position_kernel");
}
