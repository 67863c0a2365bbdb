/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize passes on the GPU: k-means assignment with the centre
 * sums (Lloyd 1982), over every pixel or, for u8 images, over the distinct
 * colours of the voting pixels with their counts (a histogram of colour
 * keys with integer atomics, then CUB's selection of the non-empty bins;
 * see the distinct section), the mapping of every pixel to its nearest palette
 * entry, plain or with Floyd–Steinberg error diffusion, and the seeding
 * attempts on the sample (k-means++ and Lloyd, see the seeding section),
 * and Lloyd's loop on the image without the host where its passes need no
 * upload (cudafx_quantize_cuda_lloyd: reduce_kernel's last block updates
 * the centres with quantize.h's quantize_move_centre and tests
 * convergence). core/quantize.c drives them (a session of core/backend.h)
 * and stays the reference: the choice of the attempt and the palette run
 * on the host for both backends, the sample there too unless the rows
 * handed over (quantize_rows) give it here, and the per-pixel
 * arithmetic is core/quantize.h's, compiled here without fused multiply-adds
 * (--fmad=false) and with IEEE division, so features, distances, nearest
 * centres and diffused errors equal the CPU's bit for bit.
 *
 * Determinism: a centre's sums are sums of integer features (|f| < 2^21), so
 * any order of addition gives the same total. Each block adds its pixels'
 * features into int32 shared-memory counters with shared atomics for one
 * chunk of CHUNK pixels (at most CHUNK * 2^21 < 2^31: no overflow), folds
 * them into int64 shared totals after every chunk, and writes its totals to
 * its own slot of a partials array; a second kernel adds the slots up. No
 * global atomics, and the result does not depend on the grid, the block
 * size, the stripes or the scheduling. Over the distinct colours a colour
 * adds its count times its features into int64 shared counters instead:
 * the same integer sums.
 *
 * Memory: the image, its features (float planes) and vote flags stay on the
 * device across the iterations when they fit the budget; otherwise every
 * pass uploads the image in stripes and recomputes their features. The
 * seeding's workspace (about 1 MB) is taken first when it costs at most a
 * quarter of the budget; otherwise the host seeds. The distinct colours'
 * buffers (the 2^24 counters, 64 MiB, grey 256; per colour 16 bytes, at
 * most one colour per pixel) come next on the same terms; otherwise Lloyd
 * runs over every pixel. The seeding runs on the context's side stream
 * while a one-stripe image goes up on its main one and its distinct
 * colours are found; a one-stripe u8 image without alpha goes up before,
 * as the engine hands its rows over (cudafx_quantize_cuda_rows, in pieces
 * when the host provides them as asked), its colours counted and its
 * seeding sample gathered (sample_kernel) piece by piece, so that the
 * seeding waits for the last piece alone. When every pixel votes and no
 * dither follows, the mapping reads a table of each distinct colour's
 * entry (map_table_kernel) instead of searching the palette for every
 * pixel, and no pass reads per-pixel features.
 *
 * Floyd–Steinberg: see the dither section below. */
#include "../core/bluenoise.h"
#include "context.cuh"

#include <cooperative_groups.h>
#include <cstddef>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>
#include <new>
#include <stdio.h>
#include <thread>
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>

namespace {

namespace cg = cooperative_groups;

constexpr int THREADS = 256;
constexpr int PIXELS_PER_THREAD = 4;
constexpr int CHUNK = THREADS * PIXELS_PER_THREAD;
static_assert ((long long) CHUNK * QUANTIZE_FEATURE_MAX < 2147483648LL,
               "a chunk's int32 partial sums could overflow");
constexpr int COUNTERS = 4 * CUDAFX_MAX_COLORS; /* per centre: 3 sums, 1 count */
constexpr int BLOCKS_PER_SM = 4;
constexpr size_t ALIGN = 256;
constexpr const char *FILTER = "quantize";

__constant__ float c_decode[256];
__constant__ float c_centre[CUDAFX_MAX_COLORS][3];
__constant__ unsigned char c_pal_u8[CUDAFX_MAX_COLORS][3];
__constant__ float c_pal_f32[CUDAFX_MAX_COLORS][3];

/* Lloyd's centres on the device. The assignments read `centre`; when the
 * device runs the loop (cudafx_quantize_cuda_lloyd), the last block of each
 * pass's reduce_kernel moves `mean` to its pixels' rounded means
 * (quantize_move_centre, the host's update), copies them into `centre`,
 * counts the pass and settles the loop when no centre moved or after the
 * last pass allowed; the kernels of passes queued past that return at
 * once. When the host runs the loop, it writes `centre` before each pass
 * and `settled` stays 0. */
struct lloyd_state
{
  float    centre[CUDAFX_MAX_COLORS][3];
  int32_t  mean[CUDAFX_MAX_COLORS][3];
  int      iterations; /* passes run */
  int      settled;
  unsigned ticket;     /* reduce_kernel's blocks done in this pass */
};

/* Called by every block after writing its results: true in the block that
 * finished last, which then reads the others' results from L2 (__ldcg).
 * Resets the ticket for the next launch. */
__device__ bool
last_block (unsigned *ticket)
{
  __shared__ bool s_last;
  __threadfence ();
  __syncthreads ();
  if (threadIdx.x == 0)
    {
      s_last = atomicAdd (ticket, 1u) == gridDim.x - 1;
      if (s_last)
        *ticket = 0;
    }
  __syncthreads ();
  if (s_last)
    __threadfence ();
  return s_last;
}


/* One stripe on the device: rows of the source, their features (plane c,
 * pixel y * width + x of the stripe) and vote flags. */
struct stripe_view
{
  const unsigned char *src;
  size_t               src_pitch;
  int                  width, rows, channels, dims, oklab, u8, has_alpha;
  const float         *plane[3];
  unsigned char       *votes;   /* NULL when every pixel votes */
  size_t               n;       /* width * rows */
};

__global__ void
features_kernel (stripe_view v, float *plane0, float *plane1, float *plane2)
{
  __shared__ float s_decode[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    s_decode[i] = c_decode[i];
  __syncthreads ();
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  const unsigned char *row = v.src + (size_t) y * v.src_pitch;
  size_t at = (size_t) x * v.channels;
  float x255[3] = { 0.0f, 0.0f, 0.0f }, f[3] = { 0.0f, 0.0f, 0.0f };
  unsigned char code[3] = { 0, 0, 0 };
  for (int c = 0; c < v.dims; c++)
    if (v.u8)
      {
        code[c] = row[at + c];
        x255[c] = (float) code[c];
      }
    else
      x255[c] = ((const float *) row)[at + c] * 255.0f;
  quantize_features (v.dims, v.oklab, s_decode, x255, v.u8 ? code : NULL, f);
  plane0[p] = f[0];
  if (v.dims == 3)
    {
      plane1[p] = f[1];
      plane2[p] = f[2];
    }
  if (v.votes)
    v.votes[p] = quantize_votes (row + at * (v.u8 ? 1 : sizeof (float)), v.u8, v.dims, v.channels, v.has_alpha);
}

/* Features of pixel p (zeros past dims). */
__device__ __forceinline__ void
load_features (const stripe_view &v, size_t p, float &fx, float &fy, float &fz)
{
  fx = v.plane[0][p];
  fy = v.dims == 3 ? v.plane[1][p] : 0.0f;
  fz = v.dims == 3 ? v.plane[2][p] : 0.0f;
}

/* Assignment and per-block sums; partials[block][4 * j + c]: c < 3 the sum of
 * feature c, c == 3 the count of the voting pixels nearest to centre j. */
__global__ void __launch_bounds__ (THREADS)
assign_kernel (stripe_view v, int k, const lloyd_state *st, long long *partials)
{
  __shared__ int s_chunk[COUNTERS];
  __shared__ long long s_total[COUNTERS];
  __shared__ float s_centre[CUDAFX_MAX_COLORS][3];
  const int counters = 4 * k, tid = threadIdx.x;
  if (st->settled)
    return;
  for (int i = tid; i < counters; i += THREADS)
    {
      s_chunk[i] = 0;
      s_total[i] = 0;
    }
  for (int i = tid; i < 3 * k; i += THREADS)
    s_centre[i / 3][i % 3] = st->centre[i / 3][i % 3];
  __syncthreads ();
  /* the loop bound depends on the block only: every thread reaches the barriers */
  for (size_t base = (size_t) blockIdx.x * CHUNK; base < v.n; base += (size_t) gridDim.x * CHUNK)
    {
      float fx[PIXELS_PER_THREAD], fy[PIXELS_PER_THREAD], fz[PIXELS_PER_THREAD];
      float best[PIXELS_PER_THREAD];
      int label[PIXELS_PER_THREAD];
      bool votes[PIXELS_PER_THREAD];
#pragma unroll
      for (int i = 0; i < PIXELS_PER_THREAD; i++)
        {
          size_t p = base + tid + (size_t) i * THREADS;
          votes[i] = p < v.n && (!v.votes || v.votes[p]);
          fx[i] = fy[i] = fz[i] = 0.0f;
          if (p < v.n)
            load_features (v, p, fx[i], fy[i], fz[i]);
          best[i] = INFINITY;
          label[i] = 0;
        }
      /* nearest centre, the first on ties, as nearest_block on the CPU */
      for (int j = 0; j < k; j++)
#pragma unroll
        for (int i = 0; i < PIXELS_PER_THREAD; i++)
          {
            float d = quantize_distance (fx[i], fy[i], fz[i], s_centre[j]);
            if (d < best[i])
              {
                best[i] = d;
                label[i] = j;
              }
          }
#pragma unroll
      for (int i = 0; i < PIXELS_PER_THREAD; i++)
        if (votes[i])
          {
            int *slot = s_chunk + 4 * label[i];
            atomicAdd (slot, (int) fx[i]);
            if (v.dims == 3)
              {
                atomicAdd (slot + 1, (int) fy[i]);
                atomicAdd (slot + 2, (int) fz[i]);
              }
            atomicAdd (slot + 3, 1);
          }
      __syncthreads ();
      for (int i = tid; i < counters; i += THREADS)
        {
          s_total[i] += s_chunk[i];
          s_chunk[i] = 0;
        }
      __syncthreads ();
    }
  for (int i = tid; i < counters; i += THREADS)
    partials[(size_t) blockIdx.x * counters + i] = s_total[i];
}

/* totals[i] += the blocks' partials[.][i], launched with one block per
 * counter: the threads split the column, CUB adds their sums (one thread
 * per counter, adding every block's slot in turn, was a serial chain;
 * docs/BENCHMARKS.md, "Quantize: distinct colours, seeding and the sample").
 * Integer sums: the same in any order. With
 * max_iterations > 0 the device runs Lloyd's loop: the last block then
 * updates st (lloyd_state) from the totals and clears them for the next
 * pass. */
__global__ void __launch_bounds__ (THREADS)
reduce_kernel (const long long *partials, int blocks, int counters, long long *totals, lloyd_state *st, int dims,
               int max_iterations)
{
  using block_sum = cub::BlockReduce<long long, THREADS>;
  __shared__ typename block_sum::TempStorage s_sum;
  const int i = blockIdx.x, tid = threadIdx.x;
  if (st->settled)
    return;
  long long sum = 0;
  for (int b = tid; b < blocks; b += THREADS)
    sum += partials[(size_t) b * counters + i];
  sum = block_sum (s_sum).Sum (sum);
  if (tid == 0)
    totals[i] += sum;
  if (max_iterations == 0 || !last_block (&st->ticket))
    return;
  int moved = 0;
  for (int j = tid; j < counters / 4; j += THREADS)
    {
      const long long count = __ldcg (&totals[4 * j + 3]);
      if (count == 0)
        continue;
      const int64_t sums[3] = { __ldcg (&totals[4 * j]), __ldcg (&totals[4 * j + 1]), __ldcg (&totals[4 * j + 2]) };
      moved |= quantize_move_centre (sums, count, dims, st->mean[j]);
      for (int c = 0; c < dims; c++)
        st->centre[j][c] = (float) st->mean[j][c];
    }
  moved = __syncthreads_or (moved);
  for (int j = tid; j < counters; j += THREADS)
    totals[j] = 0;
  if (tid == 0)
    {
      st->iterations++;
      st->settled = !moved || st->iterations == max_iterations;
    }
}

/* Index of the nearest of the k entries of centre, the first on ties. */
__device__ __forceinline__ int
nearest_entry (float fx, float fy, float fz, const float (*centre)[3], int k)
{
  float best = INFINITY;
  int label = 0;
  for (int j = 0; j < k; j++)
    {
      float d = quantize_distance (fx, fy, fz, centre[j]);
      if (d < best)
        {
          best = d;
          label = j;
        }
    }
  return label;
}

/* ---- Lloyd over the distinct colours (u8; core/quantize.c's header) ------- */

/* A u8 pixel's colour key, the index of its bin: r << 16 | g << 8 | b, grey
 * the value. The histogram counts by it and the mapping's table is read by
 * it. */
__device__ __forceinline__ unsigned
colour_key (const unsigned char *px, int dims)
{
  return dims == 3 ? (unsigned) px[0] << 16 | (unsigned) px[1] << 8 | px[2] : px[0];
}

/* Counts the voting pixels of each colour key (colour_key; v.votes is NULL
 * when every pixel votes). Neighbouring pixels often share a colour: the
 * lanes of a warp with one key add their number in one atomic (CUDA's
 * labeled_partition), not one each on the same word. Integer atomics: the
 * counts do not depend on the order. */
__global__ void
histogram_kernel (stripe_view v, unsigned *bins)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  const unsigned char *px = v.src + (size_t) y * v.src_pitch + (size_t) x * v.channels;
  if (v.votes && px[v.channels - 1] == 0)
    return;
  unsigned key = colour_key (px, v.dims);
  cg::coalesced_group same = cg::labeled_partition (cg::coalesced_threads (), key);
  if (same.thread_rank () == 0)
    atomicAdd (bins + key, same.size ());
}

/* The bins CUB's selection keeps. */
struct bin_filled
{
  const unsigned *bins;
  __device__ bool operator() (unsigned key) const { return bins[key] != 0; }
};

/* The features of each of the n selected colours (keys[i]) into the
 * planes, its count into count[i]. */
__global__ void
colours_kernel (const unsigned *bins, const unsigned *keys, int n, int dims, int oklab, float *plane0, float *plane1,
                float *plane2, unsigned *count)
{
  __shared__ float s_decode[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    s_decode[i] = c_decode[i];
  __syncthreads ();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  unsigned key = keys[i];
  unsigned char code[3] = { (unsigned char) (dims == 3 ? key >> 16 : key), (unsigned char) (key >> 8),
                            (unsigned char) key };
  float x255[3] = { (float) code[0], (float) code[1], (float) code[2] }, f[3];
  quantize_features (dims, oklab, s_decode, x255, code, f);
  plane0[i] = f[0];
  if (dims == 3)
    {
      plane1[i] = f[1];
      plane2[i] = f[2];
    }
  count[i] = bins[key];
}

/* The mapping's table when every pixel votes (every pixel's colour is then
 * among the distinct ones): each colour's nearest palette entry (c_centre),
 * into its key's bin. The same features and search as map_kernel's for
 * the pixels of that colour, so the same entry. */
__global__ void
label_colours_kernel (const float *plane0, const float *plane1, const float *plane2, const unsigned *keys, int n,
                      int dims, int k, unsigned *bins)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float fx = plane0[i], fy = dims == 3 ? plane1[i] : 0.0f, fz = dims == 3 ? plane2[i] : 0.0f;
  bins[keys[i]] = nearest_entry (fx, fy, fz, c_centre, k);
}

/* The assignment over the n distinct colours: each adds its count times its
 * features to its nearest centre's sums (a count times a feature passes
 * 2^31: int64), then to its block's slot of partials as assign_kernel does.
 * A warp's colours are neighbours in key order, mostly of one centre: CUB
 * sums each run of equal centres first, so one lane per run meets the
 * shared counters rather than 32 lanes queueing on one 64-bit counter
 * (docs/BENCHMARKS.md, "Quantize: distinct colours, seeding and the sample").
 * Integer sums: the same in any order. */
__global__ void __launch_bounds__ (THREADS)
assign_colours_kernel (const float *plane0, const float *plane1, const float *plane2, const unsigned *count, int n,
                       int dims, int k, const lloyd_state *st, long long *partials)
{
  using warp_sum = cub::WarpReduce<long long>;
  __shared__ typename warp_sum::TempStorage s_warp[THREADS / 32];
  __shared__ unsigned long long s_total[COUNTERS];
  __shared__ float s_centre[CUDAFX_MAX_COLORS][3];
  const int counters = 4 * k, lane = threadIdx.x % 32;
  if (st->settled)
    return;
  warp_sum sum (s_warp[threadIdx.x / 32]);
  for (int i = threadIdx.x; i < counters; i += THREADS)
    s_total[i] = 0;
  for (int i = threadIdx.x; i < 3 * k; i += THREADS)
    s_centre[i / 3][i % 3] = st->centre[i / 3][i % 3];
  __syncthreads ();
  /* the loop bound depends on the block only: whole warps take part in the sums */
  for (int base = blockIdx.x * THREADS; base < n; base += gridDim.x * THREADS)
    {
      int i = base + threadIdx.x, label = -1;
      long long value[4] = { 0, 0, 0, 0 }; /* count times each feature, and the count */
      if (i < n)
        {
          float fx = plane0[i], fy = dims == 3 ? plane1[i] : 0.0f, fz = dims == 3 ? plane2[i] : 0.0f;
          label = nearest_entry (fx, fy, fz, s_centre, k);
          value[3] = count[i];
          value[0] = value[3] * (int) fx;
          value[1] = value[3] * (int) fy;
          value[2] = value[3] * (int) fz;
        }
      int before = __shfl_up_sync (0xffffffffu, label, 1);
      bool head = lane == 0 || label != before;
      for (int c = 0; c < 4; c++)
        {
          if (c > 0 && c < 3 && dims == 1)
            continue;
          long long run = sum.HeadSegmentedSum (value[c], head);
          __syncwarp (); /* the warp's CUB storage is reused */
          /* two's complement: adding the unsigned image of a negative sum subtracts it */
          if (head && label >= 0)
            atomicAdd (s_total + 4 * label + c, (unsigned long long) run);
        }
    }
  __syncthreads ();
  for (int i = threadIdx.x; i < counters; i += THREADS)
    partials[(size_t) blockIdx.x * counters + i] = (long long) s_total[i];
}

/* A palette entry (u8 or f32 as dst holds) into pixel (x, y) of dst; alpha
 * copied from the source, and an f32 pixel quantize_known_f32 finds unknown
 * copied whole, as the CPU's write_block does. dims: v.dims, or that as a
 * constant. */
__device__ __forceinline__ void
write_entry (const stripe_view &v, int dims, int x, int y, const unsigned char *u8, const float *f32,
             unsigned char *dst, size_t dst_pitch)
{
  size_t at = (size_t) x * v.channels;
  const unsigned char *srow = v.src + (size_t) y * v.src_pitch;
  unsigned char *drow = dst + (size_t) y * dst_pitch;
  if (v.u8)
    {
      for (int c = 0; c < dims; c++)
        drow[at + c] = u8[c];
      if (v.has_alpha)
        drow[at + v.channels - 1] = srow[at + v.channels - 1];
    }
  else if (!quantize_known_f32 ((const float *) srow + at, dims, v.channels, v.has_alpha))
    for (int c = 0; c < v.channels; c++)
      ((float *) drow)[at + c] = ((const float *) srow)[at + c];
  else
    {
      for (int c = 0; c < dims; c++)
        ((float *) drow)[at + c] = f32[c];
      if (v.has_alpha)
        ((float *) drow)[at + v.channels - 1] = ((const float *) srow)[at + v.channels - 1];
    }
}

/* ---- seeding on the device -------------------------------------------------
 *
 * core/quantize.c's seeding attempts, the same centres as the host's: the
 * sample's k-means++ picks, then Lloyd on the sample. One cooperative
 * launch: each attempt is a group of `group` blocks (SEED_BLOCKS_PER_SM
 * times the multiprocessors over the attempts, fewer when the sample fills
 * fewer), each holding its share of the sample and its D2 in shared memory
 * for the whole seeding; the blocks of an attempt meet at a barrier of
 * their own (an arrival counter in global memory) and exchange what they
 * must through global memory. An attempt that stops early leaves the
 * others alone. (One launch per step, with the
 * block that finished last doing the step's tail, spent the seeding's time
 * in launch gaps, tickets and tails: docs/BENCHMARKS.md, "Quantize: distinct
 * colours, seeding and the sample".) All sums are of
 * integers (int64 squared distances, integer features), so they depend on
 * neither the order, the group nor the block size.
 *
 * Samples: block g of an attempt holds samples [g * per, (g + 1) * per),
 * per = lanes * SEED_THREADS; warp w of it the `lanes` rows of 32 samples
 * from (w * lanes) * 32, lane l sample l of each row, so that a running sum
 * in sample order is the blocks' sums, then the warps', then the rows',
 * then the lanes' in turn.
 *
 * k-means++, one pick: every block reads the blocks' D2 sums (the previous
 * pick's potentials of the chosen trial) and scans them; each trial's
 * target (the draw times the total, clamped to total - 1) lies in one
 * block, whose warp for that trial finds the candidate there (the warps'
 * sums, then the rows, a warp scan each) and publishes it. Barrier. Each
 * block sums min (D2, distance to the candidate) over its samples for
 * every trial. Barrier. Every block adds the blocks' sums up, takes the
 * trial of lowest potential (the first on ties) and applies it to its D2.
 * The first j whose running sum exceeds the target always has D2 > 0; a
 * target clamped to total - 1 selects the last j with D2 > 0, as the host's
 * fallback does. Two barriers a pick.
 *
 * Lloyd, one round: each block assigns its samples (nearest centre, the
 * first on ties), sums each run of one centre in a row (CUB) and adds the
 * runs into its warp's own int32 counters in shared memory (a warp holds at
 * most SEED_MAX_LANES rows: no overflow; warps sharing 64-bit counters
 * queued on them), then the block's totals of them into the attempt's
 * global int64 ones (integer atomics). Barrier. Every block reads the
 * totals and moves the centres itself (quantize_move_centre, the same in
 * every block). One barrier a round: the global counters rotate through
 * three sets, so that block 0 can clear the set of the round before while
 * others already add into the next one. */

constexpr int SEED_THREADS = 512;
constexpr int SEED_WARPS = SEED_THREADS / 32;
constexpr int SEED_MAX_GROUP = QUANTIZE_SAMPLE_MAX / SEED_THREADS; /* blocks of an attempt: a sample each at least */
static_assert (SEED_MAX_GROUP <= SEED_THREADS, "the blocks' sums are scanned one per thread");
static_assert (QUANTIZE_MAX_TRIALS <= SEED_WARPS, "one warp per trial");
constexpr size_t SEED_SAMPLE_BYTES = sizeof (long long) + 3 * sizeof (float); /* shared: D2 and features */
constexpr int SEED_MAX_LANES = 32;
/* Blocks resident on a multiprocessor, and so the groups' size: two (64
 * registers a thread) hid the rounds' latencies better than one
 * (docs/BENCHMARKS.md, "Quantize: distinct colours, seeding and the sample"). */
constexpr int SEED_BLOCKS_PER_SM = 2;
static_assert ((long long) SEED_MAX_LANES * 32 * QUANTIZE_FEATURE_MAX < 2147483648LL,
               "a warp's int32 Lloyd sums could overflow");
constexpr int SEED_SETS = 3;                  /* Lloyd's global counters rotate */
constexpr int SEED_ERROR = COUNTERS;          /* the round's error, after the counters */
constexpr unsigned FULL_MASK = 0xffffffffu;

/* What the attempts give the host. */
struct seed_results
{
  long long error[QUANTIZE_ATTEMPTS];   /* sample error of the final centres */
  int       found[QUANTIZE_ATTEMPTS];   /* centres picked */
  int       centres[QUANTIZE_ATTEMPTS][CUDAFX_MAX_COLORS][3];
};

/* What the blocks of an attempt exchange; zeroed before the launch. */
struct seed_state
{
  seed_results       res;
  int                cand[QUANTIZE_ATTEMPTS][QUANTIZE_MAX_TRIALS]; /* the pick's candidates (samples) */
  long long          part[QUANTIZE_ATTEMPTS][QUANTIZE_MAX_TRIALS][SEED_MAX_GROUP]; /* each block's potentials */
  unsigned long long acc[SEED_SETS][QUANTIZE_ATTEMPTS][COUNTERS + 1]; /* Lloyd: 3 sums and a count a centre, error */
  unsigned           arrived[QUANTIZE_ATTEMPTS]; /* the attempt's barrier */
};

struct seed_view
{
  const float *plane[3];  /* the sample (planes past dims are zeros) */
  seed_state  *st;
  int          n, dims, k, trials, iterations;
  int          group;     /* blocks of an attempt */
  int          lanes;     /* samples of a thread */
  int          attempt0;  /* of this launch's first group */
  uint32_t     seed;
};

/* Sums of the seeding's int64 values: exact, so CUB's order is as good as
 * any. */
typedef cub::WarpReduce<long long> warp_reduce;
typedef cub::WarpReduce<int> warp_reduce_int;
typedef cub::WarpScan<long long> warp_scan;
typedef cub::BlockReduce<long long, SEED_THREADS> block_reduce;
typedef cub::BlockScan<long long, SEED_THREADS> block_scan;

/* The blocks of one attempt wait here for each other: every block's writes
 * before it are seen by every block after it (cooperative groups' grid
 * barrier, for a group of blocks). `target`: the group's size times the
 * barriers passed so far, this one included. */
__device__ void
group_barrier (unsigned *arrived, unsigned target)
{
  __syncthreads ();
  if (threadIdx.x == 0)
    {
      __threadfence ();
      atomicAdd (arrived, 1u);
      while (*(volatile unsigned *) arrived < target)
        ;
      __threadfence ();
    }
  __syncthreads ();
}

/* The seeding attempts: grid of (attempts of this launch) * group blocks. */
__global__ void __launch_bounds__ (SEED_THREADS, SEED_BLOCKS_PER_SM)
seed_kernel (seed_view v)
{
  extern __shared__ long long s_d2[]; /* then the features (3 planes of per), each warp's Lloyd sums */
  __shared__ int s_centre[CUDAFX_MAX_COLORS][3];
  __shared__ float s_centre_f[CUDAFX_MAX_COLORS][3];
  __shared__ long long s_prefix[SEED_THREADS];
  __shared__ long long s_trial[QUANTIZE_MAX_TRIALS][SEED_WARPS]; /* each warp's potentials */
  __shared__ long long s_warp_d2[SEED_WARPS];
  __shared__ long long s_potential[QUANTIZE_MAX_TRIALS];
  __shared__ int s_cand[QUANTIZE_MAX_TRIALS][3];
  __shared__ union
  {
    typename block_scan::TempStorage   scan;
    typename block_reduce::TempStorage reduce;
  } s_block;
  __shared__ typename warp_reduce::TempStorage s_warp_reduce[SEED_WARPS];
  __shared__ typename warp_reduce_int::TempStorage s_warp_reduce_int[SEED_WARPS];
  __shared__ typename warp_scan::TempStorage s_warp_scan[SEED_WARPS];

  const int a = v.attempt0 + blockIdx.x / v.group, g = blockIdx.x % v.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, lanes = v.lanes;
  const int per = lanes * SEED_THREADS, begin = g * per;
  const int count = v.n - begin < 0 ? 0 : v.n - begin < per ? v.n - begin : per;
  seed_state *st = v.st;
  unsigned *arrived = &st->arrived[a];
  unsigned barriers = 0;
  float *s_x = (float *) (s_d2 + per), *s_y = s_x + per, *s_z = s_y + per;
  int *s_sums = (int *) (s_z + per), *s_sum = s_sums + warp * 4 * v.k; /* this warp's: 3 sums and a count a centre */
  for (int l = tid; l < per; l += SEED_THREADS)
    {
      bool in = l < count;
      s_x[l] = in ? v.plane[0][begin + l] : 0.0f;
      s_y[l] = in ? v.plane[1][begin + l] : 0.0f;
      s_z[l] = in ? v.plane[2][begin + l] : 0.0f;
    }
  /* k-means++: the first centre (draw 0) and D2 to it; samples past the
   * end have D2 0 throughout */
  const uint64_t start = quantize_attempt_state (v.seed, a);
  if (tid < 3)
    s_centre[0][tid] = (int) v.plane[tid][(int) (quantize_draw (start, 0) * v.n)];
  __syncthreads ();
  long long mine = 0;
  for (int i = 0; i < lanes; i++)
    {
      int l = (warp * lanes + i) * 32 + lane;
      long long d = l < count ? quantize_exact_distance (s_x[l], s_y[l], s_z[l], s_centre[0]) : 0;
      s_d2[l] = d;
      mine += d;
    }
  mine = warp_reduce (s_warp_reduce[warp]).Sum (mine);
  if (lane == 0)
    s_warp_d2[warp] = mine;
  __syncthreads ();
  if (tid == 0)
    {
      long long sum = 0;
      for (int w = 0; w < SEED_WARPS; w++)
        sum += s_warp_d2[w];
      st->part[a][0][g] = sum;
    }
  int found = 1, slot = 0; /* slot: the trial whose block sums are D2's */
  group_barrier (arrived, ++barriers * v.group);
  for (;;)
    {
      long long sum = tid < v.group ? __ldcg (&st->part[a][slot][tid]) : 0, prefix;
      block_scan (s_block.scan).InclusiveSum (sum, prefix);
      s_prefix[tid] = prefix;
      __syncthreads ();
      const long long total = s_prefix[SEED_THREADS - 1];
      if (found >= v.k || total == 0)
        break;
      /* each trial's candidate, by the block where its target lies */
      if (warp < v.trials)
        {
          uint64_t draw = 1 + (uint64_t) (found - 1) * v.trials + warp;
          long long target = (long long) (quantize_draw (start, draw) * (double) total);
          if (target > total - 1)
            target = total - 1;
          /* the first block whose prefix exceeds it (the last's is total) */
          const int lo = (int) (thrust::upper_bound (thrust::seq, s_prefix, s_prefix + v.group, target) - s_prefix);
          if (lo == g)
            {
              long long rest = target - (g > 0 ? s_prefix[g - 1] : 0), w_sum = lane < SEED_WARPS ? s_warp_d2[lane] : 0,
                        w_incl;
              warp_scan (s_warp_scan[warp]).InclusiveSum (w_sum, w_incl);
              /* the block's samples sum to its prefix step, which exceeds rest: some warp crosses */
              const int w = __ffs (__ballot_sync (FULL_MASK, w_incl > rest)) - 1;
              rest -= __shfl_sync (FULL_MASK, w_incl - w_sum, w);
              for (int i = 0; i < lanes; i++)
                {
                  const int row = (w * lanes + i) * 32;
                  long long d = s_d2[row + lane], incl;
                  __syncwarp (); /* before the warp's scan storage serves again */
                  warp_scan (s_warp_scan[warp]).InclusiveSum (d, incl);
                  unsigned crossing = __ballot_sync (FULL_MASK, incl > rest);
                  if (crossing)
                    {
                      if (lane == __ffs (crossing) - 1)
                        st->cand[a][warp] = begin + row + lane;
                      break;
                    }
                  rest -= __shfl_sync (FULL_MASK, incl, 31);
                }
            }
        }
      group_barrier (arrived, ++barriers * v.group);
      if (tid < 3 * v.trials)
        s_cand[tid / 3][tid % 3] = (int) v.plane[tid % 3][__ldcg (&st->cand[a][tid / 3])];
      __syncthreads ();
      /* every trial's potential over the block's samples */
      long long value[QUANTIZE_MAX_TRIALS];
#pragma unroll
      for (int t = 0; t < QUANTIZE_MAX_TRIALS; t++)
        value[t] = 0;
      for (int i = 0; i < lanes; i++)
        {
          int l = (warp * lanes + i) * 32 + lane;
          long long d = s_d2[l];
          float x = s_x[l], y = s_y[l], z = s_z[l];
#pragma unroll
          for (int t = 0; t < QUANTIZE_MAX_TRIALS; t++)
            if (t < v.trials)
              {
                long long e = quantize_exact_distance (x, y, z, s_cand[t]);
                value[t] += e < d ? e : d;
              }
        }
#pragma unroll
      for (int t = 0; t < QUANTIZE_MAX_TRIALS; t++)
        if (t < v.trials)
          {
            long long s = warp_reduce (s_warp_reduce[warp]).Sum (value[t]);
            if (lane == 0)
              s_trial[t][warp] = s;
            __syncwarp (); /* before the warp's reduce storage serves again */
          }
      __syncthreads ();
      if (tid < v.trials)
        {
          long long s = 0;
          for (int w = 0; w < SEED_WARPS; w++)
            s += s_trial[tid][w];
          st->part[a][tid][g] = s;
        }
      group_barrier (arrived, ++barriers * v.group);
      if (warp < v.trials)
        {
          long long s = 0;
          for (int b = lane; b < v.group; b += 32)
            s += __ldcg (&st->part[a][warp][b]);
          s = warp_reduce (s_warp_reduce[warp]).Sum (s);
          if (lane == 0)
            s_potential[warp] = s;
        }
      __syncthreads ();
      /* the trial with the lowest potential (the first on ties) is the next
       * centre, its values the new D2 */
      int best = 0;
      for (int t = 1; t < v.trials; t++)
        if (s_potential[t] < s_potential[best])
          best = t;
      for (int i = 0; i < lanes; i++)
        {
          int l = (warp * lanes + i) * 32 + lane;
          long long e = quantize_exact_distance (s_x[l], s_y[l], s_z[l], s_cand[best]);
          if (e < s_d2[l])
            s_d2[l] = e;
        }
      if (tid < SEED_WARPS)
        s_warp_d2[tid] = s_trial[best][tid];
      if (tid < 3)
        s_centre[found][tid] = s_cand[best][tid];
      found++;
      slot = best;
      __syncthreads ();
    }

  /* Lloyd on the sample; the last round only measures the error */
  const int k = found;
  for (int i = tid; i < 3 * k; i += SEED_THREADS)
    s_centre_f[i / 3][i % 3] = (float) s_centre[i / 3][i % 3];
  long long error = 0;
  for (int round = 0;; round++)
    {
      unsigned long long *acc = st->acc[round % SEED_SETS][a];
      for (int i = lane; i < 4 * k; i += 32)
        s_sum[i] = 0;
      __syncthreads (); /* and the centres' floats are written */
      warp_reduce_int runs (s_warp_reduce_int[warp]);
      long long err = 0;
      for (int i = 0; i < lanes; i++)
        {
          int l = (warp * lanes + i) * 32 + lane;
          float x = s_x[l], y = s_y[l], z = s_z[l];
          int label = nearest_entry (x, y, z, s_centre_f, k);
          int value[4] = { (int) x, (int) y, (int) z, 1 };
          if (l < count)
            err += (long long) quantize_distance (x, y, z, s_centre_f[label]);
          else
            label = -1;
          int before = __shfl_up_sync (FULL_MASK, label, 1);
          bool head = lane == 0 || label != before;
#pragma unroll
          for (int c = 0; c < 4; c++)
            {
              if (c > 0 && c < 3 && v.dims == 1)
                continue;
              int run = runs.HeadSegmentedSum (value[c], head);
              __syncwarp (); /* the warp's CUB storage is reused */
              if (head && label >= 0)
                atomicAdd (s_sum + 4 * label + c, run);
            }
        }
      err = block_reduce (s_block.reduce).Sum (err);
      __syncthreads (); /* every warp's sums are done */
      for (int i = tid; i < 4 * k; i += SEED_THREADS)
        {
          long long sum = 0;
          for (int w = 0; w < SEED_WARPS; w++)
            sum += s_sums[w * 4 * v.k + i];
          if (sum)
            atomicAdd (acc + i, (unsigned long long) sum);
        }
      if (tid == 0 && err)
        atomicAdd (acc + SEED_ERROR, (unsigned long long) err);
      group_barrier (arrived, ++barriers * v.group);
      /* update_centres on the host */
      int moved = 0;
      if (round < v.iterations)
        for (int c = tid; c < k; c += SEED_THREADS)
          {
            long long n = (long long) __ldcg (acc + 4 * c + 3);
            const int64_t sums[3] = { (long long) __ldcg (acc + 4 * c), (long long) __ldcg (acc + 4 * c + 1),
                                      (long long) __ldcg (acc + 4 * c + 2) };
            if (n > 0)
              moved |= quantize_move_centre (sums, n, v.dims, s_centre[c]);
          }
      moved = __syncthreads_or (moved);
      /* every block has read the set of the round before: clear it for the round after */
      if (g == 0)
        {
          unsigned long long *old = st->acc[(round + 2) % SEED_SETS][a];
          for (int i = tid; i < 4 * k; i += SEED_THREADS)
            old[i] = 0;
          if (tid == 0)
            old[SEED_ERROR] = 0;
        }
      if (round == v.iterations || !moved)
        {
          error = (long long) __ldcg (acc + SEED_ERROR);
          break;
        }
      for (int i = tid; i < 3 * k; i += SEED_THREADS)
        s_centre_f[i / 3][i % 3] = (float) s_centre[i / 3][i % 3];
    }
  if (g == 0)
    {
      for (int i = tid; i < 3 * k; i += SEED_THREADS)
        st->res.centres[a][i / 3][i % 3] = s_centre[i / 3][i % 3];
      if (tid == 0)
        {
          st->res.found[a] = k;
          st->res.error[a] = error;
        }
    }
}

/* A sample taken as u8 values (sample_set.codes) becomes its features in
 * place: quantize_features of the codes, as the host's compute_features
 * makes them. fs by value: the side stream reads no constant memory that
 * the main stream may still be writing. */
__global__ void
sample_features_kernel (float *plane0, float *plane1, float *plane2, int n, quantize_space fs)
{
  __shared__ float s_decode[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    s_decode[i] = fs.decode[i];
  __syncthreads ();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n)
    return;
  float *plane[3] = { plane0, plane1, plane2 };
  float x255[3] = { 0.0f, 0.0f, 0.0f }, f[3];
  unsigned char code[3] = { 0, 0, 0 };
  for (int c = 0; c < fs.dims; c++)
    {
      code[c] = (unsigned char) plane[c][j];
      x255[c] = (float) code[c];
    }
  quantize_features (fs.dims, fs.oklab, s_decode, x255, code, f);
  for (int c = 0; c < fs.dims; c++)
    plane[c][j] = f[c];
}

/* The seeding sample's entries j0 .. j0 + count - 1, all in the rows of v,
 * which start at image row y0, of a u8 image every pixel of which votes
 * (n pixels: the rank of a pixel is its raster index; quantize_sample_rank),
 * its values into the planes as codes (sample_features_kernel makes them
 * features), zeros past dims. */
__global__ void
sample_kernel (stripe_view v, int y0, unsigned long long n, int samples, unsigned long long j0, int count,
               float *plane0, float *plane1, float *plane2)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count)
    return;
  unsigned long long j = j0 + (unsigned) i, rank = quantize_sample_rank (j, n, samples);
  int y = (int) (rank / (unsigned) v.width), x = (int) (rank - (unsigned long long) y * (unsigned) v.width);
  const unsigned char *px = v.src + (size_t) (y - y0) * v.src_pitch + (size_t) x * v.channels;
  plane0[j] = px[0];
  plane1[j] = v.dims == 3 ? px[1] : 0.0f;
  plane2[j] = v.dims == 3 ? px[2] : 0.0f;
}

/* Device bytes of the seeding: the sample, the state. */
constexpr size_t SEED_PLANE_BYTES = (QUANTIZE_SAMPLE_MAX * sizeof (float) + 255) / 256 * 256;
constexpr size_t SEED_BYTES = 3 * SEED_PLANE_BYTES + sizeof (seed_state);

/* Each pixel to its nearest palette entry (features of the entries in
 * c_centre); alpha copied from the source. */
__global__ void
map_kernel (stripe_view v, int k, unsigned char *dst, size_t dst_pitch)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  float fx, fy, fz;
  load_features (v, p, fx, fy, fz);
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  int label = nearest_entry (fx, fy, fz, c_centre, k);
  write_entry (v, v.dims, x, y, c_pal_u8[label], c_pal_f32[label], dst, dst_pitch);
}

/* map_kernel through the table of label_colours_kernel: each pixel its
 * colour's entry (u8, every pixel voting). */
__global__ void
map_table_kernel (stripe_view v, const unsigned *bins, unsigned char *dst, size_t dst_pitch)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  const unsigned char *px = v.src + (size_t) y * v.src_pitch + (size_t) x * v.channels;
  unsigned key = colour_key (px, v.dims);
  unsigned label = bins[key];
  write_entry (v, v.dims, x, y, c_pal_u8[label], c_pal_f32[label], dst, dst_pitch);
}

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
 * (chunks of 8 instead of 32: a sixth fewer at 12 MP). Blocks take their
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
 * waits for the kernel's end (a stripe's worth, milliseconds): warps reading
 * a stop flag from host memory while they wait made the kernel ten times
 * slower on the H100. */

constexpr int DITHER_ROWS = 32;     /* rows per warp: one per lane */
constexpr int DITHER_CHUNK = 8;     /* pixels of a boundary row published and loaded at once */
constexpr int DITHER_SEARCH_WARPS = 4; /* warps of a group sharing a larger palette's search: one a scheduler */
constexpr int DITHER_PREFETCH = 32; /* pixels ahead a lane prefetches its row into L1 */
constexpr int DITHER_PREFETCH_EVERY = 8; /* pixels between prefetches: at most 128 bytes, so every line */
constexpr int DITHER_MARKS = 32;    /* progress calls per stripe, at most */
constexpr int DITHER_REG_ENTRIES = 16; /* palettes up to this size: the centres in registers */
constexpr int DITHER_GROUP = 8;     /* entries of a larger palette compared at once */
constexpr unsigned FULL_WARP = 0xffffffffu;

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

/* Boundary rows and counters for a stripe of `rows` rows of `width` pixels. */
size_t
dither_bound_rows (int rows)
{
  return (size_t) (rows + DITHER_ROWS - 1) / DITHER_ROWS + 1;
}

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

size_t
align_up (size_t bytes)
{
  return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

unsigned
grid_for (size_t n, int threads)
{
  return (unsigned) ((n + threads - 1) / threads);
}

} // namespace

/* A call: the device held from open to close. */
struct quantize_session
{
  cfx_call              call;
  cfx_context          *cx;
  const cudafx_image   *src;
  const cudafx_options *o;
  quantize_space        fs;
  int                   dims, oklab, everyone_votes;
  size_t                row_bytes, pitch;
  int                   rows, n_stripes;
  int                   loaded;        /* stripe whose features are on the device, -1 none */
  int                   arrived;       /* rows of the one stripe uploaded by quantize_rows */
  int                   samples;       /* plan->sample */
  int                   counted;       /* quantize_rows counted every row's colour */
  bool                  piece_timed;   /* ev[0..2] time quantize_rows' last piece, not reported yet */
  int                   max_blocks;    /* blocks of assign_kernel (partials slots) */
  unsigned char        *d_src, *d_dst, *d_votes;
  float                *d_plane[3];
  long long            *d_partials, *d_totals;
  lloyd_state          *d_lloyd;
  unsigned char        *d_seed;        /* the seeding's workspace, NULL: the host seeds */
  float4               *d_bound;       /* Floyd–Steinberg: dither_args.bound */
  int                  *d_progress;    /* and its counters */
  const quantize_mapping *map;         /* the dithers' mapping: range, spread, method */
  volatile int         *h_rows_done, *d_rows_done; /* dither_args.rows_done: host, device address */
  int                   failed;        /* a CUDA error happened: drop the buffers at close */
  /* Lloyd over the distinct colours (plan->distinct, and room in the budget) */
  int                   distinct;
  int                   colours;       /* found: their number, 0 before the first assignment */
  int                   bins;          /* colour keys: 2^24, grey 256 */
  unsigned             *d_bins;        /* voting pixels per key */
  unsigned             *d_keys;        /* the colours' keys */
  unsigned             *d_counts;      /* and their voting pixels */
  /* The mapping reads the colours' table (map_table_kernel): Lloyd runs
   * over the distinct colours, every pixel votes and no dither. The
   * passes then need no per-pixel features. */
  int                   table_map;
  float                *d_colour[3];   /* their features */
  void                 *d_select;      /* CUB's scratch, select_bytes */
  size_t                select_bytes;
  int                  *d_selected;    /* how many CUB kept */
};
/* The context's events: 0-3 time the passes (main stream; quantize_rows'
 * pieces: 0-2, and 3 marks their samples taken), 4-7 the seeding (side
 * stream). */

namespace {

cudafx_status
fail_cuda (quantize_session *q, cudafx_status s)
{
  if (s == CUDAFX_ERR_CUDA)
    q->failed = 1;
  return s;
}

stripe_view
view_of (const quantize_session *q, int stripe, int *y0)
{
  *y0 = stripe * q->rows;
  int n = *y0 + q->rows <= q->src->height ? q->rows : q->src->height - *y0;
  stripe_view v;
  v.src = q->d_src;
  v.src_pitch = q->pitch;
  v.width = q->src->width;
  v.rows = n;
  v.channels = q->src->channels;
  v.dims = q->dims;
  v.oklab = q->oklab;
  v.u8 = q->src->type == CUDAFX_U8;
  v.has_alpha = q->src->has_alpha;
  for (int c = 0; c < 3; c++)
    v.plane[c] = q->d_plane[c];
  v.votes = q->everyone_votes ? NULL : q->d_votes;
  v.n = (size_t) v.width * n;
  return v;
}

cudafx_status
upload_stripe (quantize_session *q, const stripe_view &v, int y0)
{
  q->loaded = -1;
  if (q->arrived == q->src->height)
    return CUDAFX_OK; /* the one stripe, uploaded by quantize_rows */
  return cfx_check (cudaMemcpy2DAsync (q->d_src, q->pitch, cudafx_row (q->src, y0), q->src->stride,
                                       q->row_bytes, v.rows, cudaMemcpyHostToDevice, q->cx->stream),
                    FILTER, "copy to device");
}

cudafx_status
compute_features (quantize_session *q, const stripe_view &v, int i)
{
  if (q->table_map)
    {
      q->loaded = i; /* no pass reads them */
      return CUDAFX_OK;
    }
  features_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, q->d_plane[0], q->d_plane[1], q->d_plane[2]);
  cudafx_status s = cfx_check_launch (FILTER, "features_kernel");
  if (!s)
    q->loaded = i;
  return s;
}

/* Faults in every page of dst's rows [y0, y0 + rows) on the host's threads,
 * leaving the bytes as they are (an atomic OR of 0 is a write access). The
 * driver copies device results into pageable memory on one thread, which
 * on a fresh buffer (a new image) would take every page fault itself.
 * Pinned memory (the GEGL module's regions) has its pages: no touch, and
 * no parallel region whose threads, spinning on after it, would compete
 * with the host's own threads for the cores. */
void
touch_pages (cudafx_image *dst, int y0, int rows, size_t row_bytes, int threads)
{
  constexpr size_t PAGE = 4096; /* the smallest page size: larger ones are touched more than once */
#pragma omp parallel for num_threads (threads) schedule (static)
  for (int y = y0; y < y0 + rows; y++)
    {
      unsigned char *row = (unsigned char *) cudafx_row (dst, y);
      for (size_t b = 0; b < row_bytes; b += PAGE)
        __atomic_fetch_or (row + b, (unsigned char) 0, __ATOMIC_RELAXED);
      __atomic_fetch_or (row + row_bytes - 1, (unsigned char) 0, __ATOMIC_RELAXED);
    }
}

/* Plane c of the seeding's sample on the device. */
float *
seed_plane (const quantize_session *q, int c)
{
  return (float *) (q->d_seed + c * SEED_PLANE_BYTES);
}

/* Stripe 0 of a one-stripe image to the device (unless quantize_rows
 * uploaded it) and its features, on stream 0 while the seeding runs on its
 * own; the passes then find it loaded. Timed by ev[0..2]. */
cudafx_status
preload (quantize_session *q)
{
  int y0;
  stripe_view v = view_of (q, 0, &y0);
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[0], q->cx->stream), FILTER, "event")) ||
      (s = upload_stripe (q, v, y0)) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[1], q->cx->stream), FILTER, "event")) ||
      (s = compute_features (q, v, 0)))
    return s;
  return cfx_check (cudaEventRecord (q->cx->ev[2], q->cx->stream), FILTER, "event");
}

enum pass_kind { PASS_ASSIGN, PASS_HISTOGRAM, PASS_MAP, PASS_DITHER, PASS_POSITION };

/* Queues one assignment of the centres in d_lloyd into d_totals: over the
 * loaded stripe v (every pixel), or with v NULL over the distinct colours
 * (found). max_iterations > 0: the device runs Lloyd's loop (reduce_kernel). */
cudafx_status
queue_assign (quantize_session *q, const stripe_view *v, int k, int max_iterations)
{
  cudaStream_t stream = q->cx->stream;
  unsigned blocks = v ? grid_for (v->n, CHUNK) : grid_for ((size_t) q->colours, THREADS);
  if (blocks > (unsigned) q->max_blocks)
    blocks = (unsigned) q->max_blocks;
  cudafx_status s;
  if (v)
    assign_kernel<<<blocks, THREADS, 0, stream>>> (*v, k, q->d_lloyd, q->d_partials);
  else
    assign_colours_kernel<<<blocks, THREADS, 0, stream>>> (q->d_colour[0], q->d_colour[1], q->d_colour[2],
                                                           q->d_counts, q->colours, q->dims, k, q->d_lloyd,
                                                           q->d_partials);
  if ((s = cfx_check_launch (FILTER, v ? "assign_kernel" : "assign_colours_kernel")))
    return s;
  reduce_kernel<<<4 * k, THREADS, 0, stream>>> (q->d_partials, (int) blocks, 4 * k, q->d_totals, q->d_lloyd, q->dims,
                                                max_iterations);
  return cfx_check_launch (FILTER, "reduce_kernel");
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

/* Floyd–Steinberg over stripe i (rows y0 ..): its first group continues
 * from the last row of stripe i - 1, whose errors the boundary rows still
 * hold. Calls the progress callback as the rows get done (the stripe's end
 * is run_pass's); on a cancel, waits for the kernel's end. */
cudafx_status
launch_dither (quantize_session *q, const stripe_view &v, int i, int y0, int k)
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

/* One pass over every stripe: load, the pass's kernels, and for the mapping
 * (plain or dithered) the copy back to dst; kernel and transfer times go to the report. */
cudafx_status
run_pass (quantize_session *q, pass_kind kind, int k, cudafx_image *dst)
{
  cudafx_report *report = q->o ? q->o->report : NULL;
  cudafx_status s = CUDAFX_OK;
  const bool maps = kind != PASS_ASSIGN && kind != PASS_HISTOGRAM;
  const bool touch =
    maps && !cudafx_cuda_host_pinned (dst->data, (size_t) (dst->height - 1) * dst->stride + q->row_bytes);
  for (int i = 0; i < q->n_stripes && !s; i++)
    {
      char point[32];
      snprintf (point, sizeof point, "stripe%d", i);
      if (cfx_inject (point))
        return fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault",
                                          FILTER, i));
      int y0;
      stripe_view v = view_of (q, i, &y0);
      float up_ms = 0, kernel_ms = 0, down_ms = 0;
      int fresh = q->loaded != i; /* else its features are still on the device */
      if ((s = cfx_check (cudaEventRecord (q->cx->ev[0], q->cx->stream), FILTER, "event")) ||
          (fresh && (s = upload_stripe (q, v, y0))) ||
          (s = cfx_check (cudaEventRecord (q->cx->ev[1], q->cx->stream), FILTER, "event")) ||
          (fresh && (kind == PASS_ASSIGN || kind == PASS_MAP || q->table_map) && (s = compute_features (q, v, i))))
        break;
      if (kind == PASS_HISTOGRAM)
        {
          if (i == 0 && (s = cfx_check (cudaMemsetAsync (q->d_bins, 0, (size_t) q->bins * sizeof (unsigned),
                                                         q->cx->stream),
                                        FILTER, "memset")))
            break;
          histogram_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, q->d_bins);
          if ((s = cfx_check_launch (FILTER, "histogram_kernel")))
            break;
        }
      else if (kind == PASS_ASSIGN)
        {
          if ((s = queue_assign (q, &v, k, 0)))
            break;
        }
      else if (kind == PASS_MAP)
        {
          if (q->table_map && i == 0)
            {
              label_colours_kernel<<<grid_for ((size_t) q->colours, THREADS), THREADS, 0, q->cx->stream>>> (
                q->d_colour[0], q->d_colour[1], q->d_colour[2], q->d_keys, q->colours, q->dims, k, q->d_bins);
              if ((s = cfx_check_launch (FILTER, "label_colours_kernel")))
                break;
            }
          if (q->table_map)
            map_table_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, q->d_bins, q->d_dst, q->pitch);
          else
            map_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, k, q->d_dst, q->pitch);
          if ((s = cfx_check_launch (FILTER, "map_kernel")))
            break;
        }
      else if (kind == PASS_POSITION)
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
          if ((s = cfx_check_launch (FILTER, "position_kernel")))
            break;
        }
      else if ((s = launch_dither (q, v, i, y0, k)))
        break;
      if ((s = cfx_check (cudaEventRecord (q->cx->ev[2], q->cx->stream), FILTER, "event")))
        break;
      if (maps)
        {
          if (touch)
            touch_pages (dst, y0, v.rows, q->row_bytes, cudafx_thread_count (q->o)); /* as the kernel runs */
          if ((s = cfx_download_rows (q->cx, FILTER, q->d_dst, q->pitch, dst, y0, v.rows, q->cx->ev[3], q->o)))
            break;
        }
      if ((!maps && (s = cfx_check (cudaEventRecord (q->cx->ev[3], q->cx->stream), FILTER, "event"))) ||
          (s = cfx_check (cudaStreamSynchronize (q->cx->stream), FILTER, "kernel")) ||
          (s = cfx_check (cudaEventElapsedTime (&up_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&down_ms, q->cx->ev[2], q->cx->ev[3]), FILTER, "event timing")))
        break;
      if (report)
        {
          report->kernel_ms += kernel_ms;
          report->transfer_ms += up_ms + down_ms;
        }
      if (maps)
        s = cudafx_progress (q->o, 0.9 + 0.1 * (y0 + v.rows) / q->src->height);
    }
  return fail_cuda (q, s);
}

/* Ends a stretch of work on the main stream that began at ev[0]: waits for
 * it and adds its time to the report's kernel time. */
cudafx_status
add_kernel_time (quantize_session *q, const char *what)
{
  float ms = 0;
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[1], q->cx->stream), FILTER, "event")) ||
      (s = cfx_check (cudaEventSynchronize (q->cx->ev[1]), FILTER, what)) ||
      (s = cfx_check (cudaEventElapsedTime (&ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")))
    return s;
  if (q->o && q->o->report)
    q->o->report->kernel_ms += ms;
  return CUDAFX_OK;
}

/* Reports the times of quantize_rows' last piece (its upload, ev[0] to
 * ev[1]; its kernels, to ev[2]), waiting for them, before ev[0..2] serve
 * again. */
cudafx_status
report_piece (quantize_session *q)
{
  if (!q->piece_timed)
    return CUDAFX_OK;
  q->piece_timed = false;
  float up_ms = 0, kernel_ms = 0;
  cudafx_status s;
  if ((s = cfx_check (cudaEventSynchronize (q->cx->ev[2]), FILTER, "copy to device")) ||
      (s = cfx_check (cudaEventElapsedTime (&up_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")))
    return s;
  if (q->o && q->o->report)
    {
      q->o->report->transfer_ms += up_ms;
      q->o->report->kernel_ms += kernel_ms;
    }
  return CUDAFX_OK;
}

/* The distinct colours of the voting pixels, once a run: their keys
 * counted stripe by stripe (unless quantize_rows did), CUB's selection of
 * the non-empty bins (keys ascending), then each colour's features and
 * count. */
cudafx_status
find_colours (quantize_session *q)
{
  cudaStream_t stream = q->cx->stream;
  size_t bytes = q->select_bytes;
  int selected = 0;
  cudafx_status s;
  if ((!q->counted && (s = run_pass (q, PASS_HISTOGRAM, 0, NULL))) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[0], stream), FILTER, "event")) ||
      (s = cfx_check (cub::DeviceSelect::If (q->d_select, bytes, thrust::counting_iterator<unsigned> (0), q->d_keys,
                                             q->d_selected, q->bins, bin_filled { q->d_bins }, stream),
                      FILTER, "selecting the colours")) ||
      (s = cfx_check (cudaMemcpyAsync (&selected, q->d_selected, sizeof selected, cudaMemcpyDeviceToHost, stream),
                      FILTER, "copy to host")) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "selecting the colours")))
    return s;
  colours_kernel<<<grid_for ((size_t) selected, THREADS), THREADS, 0, stream>>> (
    q->d_bins, q->d_keys, selected, q->dims, q->oklab, q->d_colour[0], q->d_colour[1], q->d_colour[2], q->d_counts);
  /* the kernel time includes the count's copy back, a few bytes */
  if ((s = cfx_check_launch (FILTER, "colours_kernel")) || (s = add_kernel_time (q, "colours_kernel")))
    return s;
  q->colours = selected;
  return CUDAFX_OK;
}

/* One assignment over the distinct colours into d_totals (found on the
 * first call). */
cudafx_status
assign_colours (quantize_session *q, int k)
{
  cudafx_status s;
  if ((!q->colours && (s = find_colours (q))) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[0], q->cx->stream), FILTER, "event")) ||
      (s = queue_assign (q, NULL, k, 0)))
    return s;
  return add_kernel_time (q, "assign_colours_kernel");
}

/* The palette the mapping reads, into constant memory. */
cudafx_status
upload_palette (cudaStream_t stream, const quantize_palette *pal)
{
  cudafx_status s;
  size_t bytes = (size_t) pal->k * sizeof pal->centre[0];
  if ((s = cfx_check (cudaMemcpyToSymbolAsync (c_centre, pal->centre, bytes, 0, cudaMemcpyHostToDevice, stream),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemcpyToSymbolAsync (c_pal_u8, pal->u8, (size_t) pal->k * sizeof pal->u8[0], 0,
                                               cudaMemcpyHostToDevice, stream),
                      FILTER, "copy to device")))
    return s;
  return cfx_check (cudaMemcpyToSymbolAsync (c_pal_f32, pal->f32, (size_t) pal->k * sizeof pal->f32[0], 0,
                                             cudaMemcpyHostToDevice, stream),
                    FILTER, "copy to device");
}

} // namespace

extern "C" cudafx_status
cudafx_quantize_cuda_open (const quantize_plan *plan, const cudafx_options *o, quantize_session **out)
{
  *out = NULL;
  quantize_session *q = new (std::nothrow) quantize_session ();
  if (!q)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: out of memory", FILTER);
  const cudafx_image *src = plan->src;
  const quantize_space *space = &plan->fs;
  const int everyone_votes = plan->everyone_votes;
  q->src = src;
  q->o = o;
  q->fs = *space;
  q->dims = space->dims;
  q->oklab = space->oklab;
  q->everyone_votes = everyone_votes;
  q->loaded = -1;
  q->samples = plan->sample;
  *out = q;

  cudafx_status s = cfx_begin (q->call, FILTER, o);
  if (s)
    return fail_cuda (q, s);
  q->cx = q->call.cx;
  const int device_sms = q->cx->sms;

  /* Stripe rows from the budget: per row the source and result rows, the
   * feature planes and the vote flags, and the dither's boundary rows (one
   * per DITHER_ROWS rows, and counters); once, the blocks' partial sums (as
   * many blocks as a quarter of the budget allows), the totals, and the
   * dither's two extra boundary rows. */
  q->row_bytes = (size_t) src->width * src->channels * cudafx_type_size (src->type);
  q->pitch = align_up (q->row_bytes);
  size_t budget = cfx_memory_budget (q->cx);
  /* the seeding's workspace when it costs at most a quarter of the budget */
  size_t seed_bytes = align_up (SEED_BYTES) <= budget / 4 ? align_up (SEED_BYTES) : 0;
  budget -= seed_bytes;
  /* Lloyd over the distinct colours when their buffers cost at most a
   * quarter of the rest: a counter per key, and per colour (at most one per
   * key or per pixel) its key, then count, and features; CUB's scratch.
   * Else over every pixel, the same sums. */
  size_t colour_bytes = 0, bin_bytes = 0, array_bytes = 0;
  if (plan->distinct)
    {
      q->bins = q->dims == 3 ? 1 << 24 : 256;
      size_t pixels = (size_t) src->width * src->height;
      size_t most = pixels < (size_t) q->bins ? pixels : (size_t) q->bins;
      bin_bytes = align_up ((size_t) q->bins * sizeof (unsigned));
      array_bytes = align_up (most * sizeof (float)); /* and of unsigned: keys, counts */
      if ((s = cfx_check (cub::DeviceSelect::If (nullptr, q->select_bytes, thrust::counting_iterator<unsigned> (0),
                                                 (unsigned *) nullptr, (int *) nullptr, q->bins,
                                                 bin_filled { nullptr }, q->cx->stream),
                          FILTER, "selecting the colours")))
        return fail_cuda (q, s);
      size_t bytes = bin_bytes + (2 + q->dims) * array_bytes + align_up (q->select_bytes) + ALIGN;
      if (bytes <= budget / 4)
        {
          colour_bytes = bytes;
          budget -= bytes;
          q->distinct = 1;
          q->table_map = everyone_votes && plan->dither == CUDAFX_DITHER_NONE;
        }
    }
  size_t block_bytes = COUNTERS * sizeof (long long);
  size_t blocks = (size_t) device_sms * BLOCKS_PER_SM;
  if (blocks * block_bytes > budget / 4)
    blocks = budget / 4 / block_bytes;
  if (blocks < 1)
    blocks = 1;
  q->max_blocks = (int) blocks;
  size_t bound_row = (size_t) src->width * sizeof (float4);
  size_t per_row = 2 * q->pitch + (size_t) src->width * (q->dims * sizeof (float) + !everyone_votes) +
                   bound_row / DITHER_ROWS + 1;
  size_t fixed = (blocks + 1) * block_bytes + sizeof (lloyd_state) + 2 * bound_row + 9 * ALIGN; /* + alignment */
  if (budget <= fixed + per_row)
    return fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA,
                                      "%s: CUDA out of memory: %zu bytes of device memory allowed, "
                                      "a stripe needs %zu", FILTER, budget, fixed + per_row));
  size_t max_rows = (budget - fixed) / per_row;
  q->rows = max_rows < (size_t) src->height ? (int) max_rows : src->height;
  q->n_stripes = (src->height + q->rows - 1) / q->rows;
  q->rows = (src->height + q->n_stripes - 1) / q->n_stripes; /* even stripes */

  size_t pixels = (size_t) src->width * q->rows;
  size_t plane_bytes = align_up (pixels * sizeof (float));
  size_t vote_bytes = everyone_votes ? 0 : align_up (pixels);
  size_t bound_bytes = align_up (dither_bound_rows (q->rows) * bound_row);
  size_t scratch = seed_bytes + q->dims * plane_bytes + vote_bytes + blocks * block_bytes + block_bytes +
                   align_up (sizeof (lloyd_state)) + bound_bytes + align_up (dither_bound_rows (q->rows) * sizeof (int));
  unsigned char *d_scratch;
  if ((s = cfx_buffer (q->cx, CFX_SLOT_SRC, q->pitch * q->rows, (void **) &q->d_src, FILTER)) ||
      (s = cfx_buffer (q->cx, CFX_SLOT_DST, q->pitch * q->rows, (void **) &q->d_dst, FILTER)) ||
      (s = cfx_buffer (q->cx, CFX_SLOT_SCRATCH, scratch, (void **) &d_scratch, FILTER)))
    return fail_cuda (q, s);
  q->d_seed = seed_bytes ? d_scratch : NULL;
  d_scratch += seed_bytes;
  for (int c = 0; c < q->dims; c++)
    q->d_plane[c] = (float *) (d_scratch + c * plane_bytes);
  q->d_votes = d_scratch + q->dims * plane_bytes;
  q->d_partials = (long long *) (q->d_votes + vote_bytes);
  q->d_totals = q->d_partials + blocks * COUNTERS;
  q->d_lloyd = (lloyd_state *) (q->d_totals + COUNTERS);
  q->d_bound = (float4 *) ((unsigned char *) q->d_lloyd + align_up (sizeof (lloyd_state)));
  q->d_progress = (int *) ((unsigned char *) q->d_bound + bound_bytes);
  if (q->distinct)
    {
      unsigned char *d_colours;
      if ((s = cfx_buffer (q->cx, CFX_SLOT_AUX, colour_bytes, (void **) &d_colours, FILTER)))
        return fail_cuda (q, s);
      q->d_bins = (unsigned *) d_colours;
      q->d_keys = (unsigned *) (d_colours + bin_bytes);
      q->d_counts = (unsigned *) (d_colours + bin_bytes + array_bytes);
      for (int c = 0; c < q->dims; c++)
        q->d_colour[c] = (float *) (d_colours + bin_bytes + (2 + c) * array_bytes);
      q->d_select = d_colours + bin_bytes + (2 + q->dims) * array_bytes;
      q->d_selected = (int *) ((unsigned char *) q->d_select + align_up (q->select_bytes));
    }

  if ((s = cfx_check (cudaMemsetAsync (q->d_lloyd, 0, sizeof (lloyd_state), q->cx->stream), FILTER, "memset")))
    return fail_cuda (q, s);
  return fail_cuda (q, cfx_check (cudaMemcpyToSymbolAsync (c_decode, space->decode, sizeof space->decode,
                                                           0, cudaMemcpyHostToDevice, q->cx->stream),
                                  FILTER, "copy to device"));
}

extern "C" cudafx_status
cudafx_quantize_cuda_rows (quantize_session *q, int y0, int y1, int *sampled)
{
  *sampled = 0;
  if (q->n_stripes > 1)
    return CUDAFX_OK; /* each pass uploads its stripes */
  cfx_context *cx = q->cx;
  const cudafx_image *src = q->src;
  int top;
  stripe_view v = view_of (q, 0, &top);
  v.src += (size_t) y0 * q->pitch;
  v.rows = y1 - y0;
  v.n = (size_t) v.width * v.rows;
  /* the seeding sample's entries in these rows, every pixel voting */
  const unsigned long long n = (unsigned long long) src->width * src->height;
  const unsigned long long j0 = quantize_first_sample ((uint64_t) y0 * src->width, n, q->samples),
                           j1 = quantize_first_sample ((uint64_t) y1 * src->width, n, q->samples);
  cudafx_status s;
  if ((s = report_piece (q)) || (s = cfx_check (cudaEventRecord (cx->ev[0], cx->stream), FILTER, "event")) ||
      (s = cfx_check (cudaMemcpy2DAsync ((unsigned char *) v.src, q->pitch, cudafx_row (src, y0), src->stride,
                                         q->row_bytes, v.rows, cudaMemcpyHostToDevice, cx->stream),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaEventRecord (cx->ev[1], cx->stream), FILTER, "event")))
    return fail_cuda (q, s);
  q->loaded = -1;
  q->arrived = y1;
  q->piece_timed = true;
  if (q->d_seed && q->samples > 0)
    {
      if (j1 > j0)
        {
          sample_kernel<<<grid_for (j1 - j0, THREADS), THREADS, 0, cx->stream>>> (
            v, y0, n, q->samples, j0, (int) (j1 - j0), seed_plane (q, 0), seed_plane (q, 1), seed_plane (q, 2));
          if ((s = cfx_check_launch (FILTER, "sample_kernel")))
            return fail_cuda (q, s);
        }
      if ((s = cfx_check (cudaEventRecord (cx->ev[3], cx->stream), FILTER, "event")))
        return fail_cuda (q, s);
      *sampled = 1;
    }
  if (q->distinct)
    {
      if (y0 == 0 && (s = cfx_check (cudaMemsetAsync (q->d_bins, 0, (size_t) q->bins * sizeof (unsigned), cx->stream),
                                     FILTER, "memset")))
        return fail_cuda (q, s);
      if (v.n)
        {
          histogram_kernel<<<grid_for (v.n, THREADS), THREADS, 0, cx->stream>>> (v, q->d_bins);
          if ((s = cfx_check_launch (FILTER, "histogram_kernel")))
            return fail_cuda (q, s);
        }
      q->counted = y1 == src->height;
    }
  return fail_cuda (q, cfx_check (cudaEventRecord (cx->ev[2], cx->stream), FILTER, "event"));
}

extern "C" cudafx_status
cudafx_quantize_cuda_seed (quantize_session *q, const sample_set *smp, const quantize_seeding *job,
                           int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found, int64_t *error,
                           int *seeded)
{
  *seeded = 0;
  if (!q->d_seed)
    return CUDAFX_OK;
  if (cfx_inject ("seed"))
    return fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA %s failed: %s", FILTER, "seeding",
                                      "injected fault"));
  /* The geometry: a group of blocks an attempt, SEED_BLOCKS_PER_SM blocks
   * a multiprocessor in all, no more blocks than the sample fills, every
   * block resident at once (the groups' barriers need it: a cooperative
   * launch, several one after the other when the attempts do not fit; the
   * host seeds when one group does not). */
  cfx_context *cx = q->cx;
  cudafx_status s;
  cudaFuncAttributes attr;
  if ((s = cfx_check (cudaFuncGetAttributes (&attr, seed_kernel), FILTER, "seeding")))
    return fail_cuda (q, s);
  const size_t lane_bytes = SEED_THREADS * SEED_SAMPLE_BYTES, sum_bytes = SEED_WARPS * 4 * job->k * sizeof (int);
  const size_t room = (size_t) cx->shared_optin > attr.sharedSizeBytes + sum_bytes
                        ? cx->shared_optin - attr.sharedSizeBytes - sum_bytes
                        : 0;
  const int most_lanes = room / lane_bytes < SEED_MAX_LANES ? (int) (room / lane_bytes) : SEED_MAX_LANES;
  /* CUDAFX_CUDA_SEED_SMS=N (tests): the geometry of a device with N
   * multiprocessors, fewer than this one's, so that an H100 runs the
   * smaller groups and the several launches a smaller GPU gets. */
  int sms = cx->sms;
  const char *as_if = cudafx_test_switch ("CUDAFX_CUDA_SEED_SMS");
  if (as_if && atoi (as_if) >= 1 && atoi (as_if) < sms)
    sms = atoi (as_if);
  int group = SEED_BLOCKS_PER_SM * sms / job->attempts;
  if (group < 1)
    group = 1;
  int lanes = (smp->n + group * SEED_THREADS - 1) / (group * SEED_THREADS);
  if (lanes > most_lanes)
    lanes = most_lanes;
  if (lanes < 1)
    return CUDAFX_OK; /* the host seeds */
  group = (smp->n + lanes * SEED_THREADS - 1) / (lanes * SEED_THREADS);
  const size_t shared = (size_t) lanes * lane_bytes + sum_bytes;
  int per_sm = 0;
  if ((s = cfx_allow_shared (cx, (const void *) seed_kernel, shared, FILTER)) ||
      (s = cfx_check (cudaOccupancyMaxActiveBlocksPerMultiprocessor (&per_sm, seed_kernel, SEED_THREADS, shared),
                      FILTER, "seeding")))
    return fail_cuda (q, s);
  const int together = per_sm * sms / group; /* attempts a launch */
  if (together < 1 || group > SEED_MAX_GROUP)
    return CUDAFX_OK; /* the host seeds */
  seed_view v;
  for (int c = 0; c < 3; c++)
    v.plane[c] = seed_plane (q, c);
  v.st = (seed_state *) (q->d_seed + 3 * SEED_PLANE_BYTES);
  v.n = smp->n;
  v.dims = smp->dims;
  v.k = job->k;
  v.trials = job->trials;
  v.iterations = job->iterations;
  v.group = group;
  v.lanes = lanes;
  v.seed = job->seed;
  /* pinned: a copy into pageable memory would return only once the seeding
   * is done, and the image's upload queued after it would not overlap it */
  seed_results *res;
  /* the side stream, which does not wait for the main one (nor it for this) */
  cudaStream_t stream = cx->side;
  if ((s = cfx_staging (cx, CFX_STAGING_COUNTERS, sizeof *res, (void **) &res, NULL, FILTER)) ||
      (s = cfx_check (cudaEventRecord (cx->ev[4], stream), FILTER, "event")))
    return fail_cuda (q, s);
  /* the sample from the host, or from the rows quantize_rows uploaded once
   * they are taken (ev[3]) */
  for (int c = 0; c < 3 && smp->plane[0]; c++)
    if ((s = cfx_check (cudaMemcpyAsync ((void *) v.plane[c], smp->plane[c], (size_t) smp->n * sizeof (float),
                                         cudaMemcpyHostToDevice, stream),
                        FILTER, "copy to device")))
      return fail_cuda (q, s);
  if ((s = cfx_check (cudaMemsetAsync (v.st, 0, sizeof (seed_state), stream), FILTER, "memset")) ||
      (!smp->plane[0] && (s = cfx_check (cudaStreamWaitEvent (stream, cx->ev[3], 0), FILTER, "event"))) ||
      (s = cfx_check (cudaEventRecord (cx->ev[5], stream), FILTER, "event")))
    return fail_cuda (q, s);
  if (smp->codes)
    {
      sample_features_kernel<<<(smp->n + SEED_THREADS - 1) / SEED_THREADS, SEED_THREADS, 0, stream>>> (
        (float *) v.plane[0], (float *) v.plane[1], (float *) v.plane[2], v.n, q->fs);
      if ((s = cfx_check_launch (FILTER, "sample_features_kernel")))
        return fail_cuda (q, s);
    }
  for (v.attempt0 = 0; v.attempt0 < job->attempts; v.attempt0 += together)
    {
      int attempts = job->attempts - v.attempt0 < together ? job->attempts - v.attempt0 : together;
      void *args[] = { &v };
      char point[32];
      snprintf (point, sizeof point, "seed-launch%d", v.attempt0 / together);
      if (cfx_inject (point))
        return fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA %s failed: %s", FILTER, "seeding",
                                          "injected fault"));
      if ((s = cfx_check (cudaLaunchCooperativeKernel ((const void *) seed_kernel, dim3 (attempts * group),
                                                       dim3 (SEED_THREADS), args, shared, stream),
                          FILTER, "seed_kernel")) ||
          (s = cfx_check_launch (FILTER, "seed_kernel")))
        return fail_cuda (q, s);
    }
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[6], stream), FILTER, "event")) ||
      (s = cfx_check (cudaMemcpyAsync (res, &v.st->res, sizeof *res, cudaMemcpyDeviceToHost, stream), FILTER,
                      "copy to host")) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[7], stream), FILTER, "event")))
    return fail_cuda (q, s);
  /* Meanwhile, when the image stays on the device for every pass, it goes
   * up with its features, and its distinct colours are found. */
  float up_ms = 0, kernel_ms = 0, down_ms = 0, load_ms = 0, features_ms = 0;
  int preloaded = q->n_stripes == 1;
  if ((s = report_piece (q)) ||
      (preloaded &&
       ((s = preload (q)) || (s = cfx_check (cudaStreamSynchronize (q->cx->stream), FILTER, "features")) ||
        (s = cfx_check (cudaEventElapsedTime (&load_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
        (s = cfx_check (cudaEventElapsedTime (&features_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")) ||
        (q->distinct && (s = find_colours (q))))) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "seeding")) ||
      (s = cfx_check (cudaEventElapsedTime (&up_ms, q->cx->ev[4], q->cx->ev[5]), FILTER, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->cx->ev[5], q->cx->ev[6]), FILTER, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&down_ms, q->cx->ev[6], q->cx->ev[7]), FILTER, "event timing")))
    return fail_cuda (q, s);
  cudafx_report *report = q->o ? q->o->report : NULL;
  if (report)
    {
      report->kernel_ms += kernel_ms + features_ms;
      report->transfer_ms += up_ms + down_ms + load_ms;
    }
  for (int a = 0; a < job->attempts; a++)
    {
      found[a] = res->found[a];
      error[a] = res->error[a];
      memcpy (centres[a], res->centres[a], (size_t) res->found[a] * sizeof centres[a][0]);
    }
  *seeded = 1;
  return CUDAFX_OK;
}

extern "C" cudafx_status
cudafx_quantize_cuda_assign (quantize_session *q, const float (*centre)[3], int k, quantize_sums *sums,
                             double from, double to)
{
  cudaStream_t stream = q->cx->stream;
  long long totals[COUNTERS];
  cudafx_status s;
  if ((s = report_piece (q)) ||
      (s = cfx_check (cudaMemcpyAsync (q->d_lloyd->centre, centre, (size_t) k * sizeof centre[0],
                                       cudaMemcpyHostToDevice, stream),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemsetAsync (q->d_totals, 0, 4 * (size_t) k * sizeof (long long), stream), FILTER,
                      "memset")) ||
      (s = q->distinct ? assign_colours (q, k) : run_pass (q, PASS_ASSIGN, k, NULL)) ||
      (s = cfx_check (cudaMemcpyAsync (totals, q->d_totals, 4 * (size_t) k * sizeof (long long),
                                       cudaMemcpyDeviceToHost, stream),
                      FILTER, "copy to host")) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "copy to host")))
    return fail_cuda (q, s);
  for (int j = 0; j < k; j++)
    {
      for (int c = 0; c < 3; c++)
        sums->sums[j][c] = totals[4 * j + c];
      sums->counts[j] = totals[4 * j + 3];
    }
  return cudafx_progress (q->o, to);
}

/* Passes queued between looks at whether the device's Lloyd loop has
 * settled: a look waits for the queue to drain (a host round trip), and a
 * pass queued past the end costs two launches that return at once. */
constexpr int LLOYD_BATCH = 8;

extern "C" cudafx_status
cudafx_quantize_cuda_lloyd (quantize_session *q, int32_t (*centres)[3], int k, int max_iterations, int *iterations,
                            double from, double to, int *ran)
{
  *ran = 0;
  if (!q->distinct && q->n_stripes > 1)
    return CUDAFX_OK; /* each pass uploads the stripes: the host drives them */
  cudaStream_t stream = q->cx->stream;
  cudafx_status s = report_piece (q);
  if (s)
    return fail_cuda (q, s);
  lloyd_state start;
  memset (&start, 0, sizeof start);
  for (int j = 0; j < k; j++)
    for (int c = 0; c < 3; c++)
      {
        start.mean[j][c] = centres[j][c];
        start.centre[j][c] = (float) centres[j][c];
      }
  int y0;
  const stripe_view v = view_of (q, 0, &y0);
  const bool load = !q->distinct && q->loaded != 0; /* the seeding ran on the host: nothing preloaded */
  struct
  {
    int iterations, settled;
  } seen = { 0, 0 }; /* lloyd_state's two, adjacent */
  static_assert (offsetof (lloyd_state, settled) == offsetof (lloyd_state, iterations) + sizeof (int),
                 "iterations and settled are read back together");
  if ((s = cfx_check (cudaMemcpyAsync (q->d_lloyd, &start, sizeof start, cudaMemcpyHostToDevice, stream), FILTER,
                      "copy to device")) ||
      (s = cfx_check (cudaMemsetAsync (q->d_totals, 0, 4 * (size_t) k * sizeof (long long), stream), FILTER,
                      "memset")) ||
      (q->distinct && !q->colours && (s = find_colours (q))) || (load && (s = preload (q))) ||
      (!load && (s = cfx_check (cudaEventRecord (q->cx->ev[2], stream), FILTER, "event"))))
    return fail_cuda (q, s);
  for (int queued = 0; queued < max_iterations && !seen.settled;)
    {
      int batch = max_iterations - queued < LLOYD_BATCH ? max_iterations - queued : LLOYD_BATCH;
      for (int b = 0; b < batch && !s; b++)
        s = queue_assign (q, q->distinct ? NULL : &v, k, max_iterations);
      queued += batch;
      if (s ||
          (s = cfx_check (cudaMemcpyAsync (&seen, &q->d_lloyd->iterations, sizeof seen, cudaMemcpyDeviceToHost,
                                           stream),
                          FILTER, "copy to host")) ||
          (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "Lloyd")) ||
          (s = cudafx_progress (q->o, from + (to - from) * seen.iterations / max_iterations)))
        return fail_cuda (q, s);
    }
  float load_ms = 0, features_ms = 0, lloyd_ms = 0;
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[3], stream), FILTER, "event")) ||
      (s = cfx_check (cudaMemcpyAsync (start.mean, q->d_lloyd->mean, (size_t) k * sizeof start.mean[0],
                                       cudaMemcpyDeviceToHost, stream),
                      FILTER, "copy to host")) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "Lloyd")) ||
      (s = cfx_check (cudaEventElapsedTime (&lloyd_ms, q->cx->ev[2], q->cx->ev[3]), FILTER, "event timing")) ||
      (load &&
       ((s = cfx_check (cudaEventElapsedTime (&load_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
        (s = cfx_check (cudaEventElapsedTime (&features_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")))))
    return fail_cuda (q, s);
  if (q->o && q->o->report)
    {
      q->o->report->kernel_ms += lloyd_ms + features_ms;
      q->o->report->transfer_ms += load_ms;
    }
  memcpy (centres, start.mean, (size_t) k * sizeof start.mean[0]);
  *iterations = seen.iterations;
  *ran = 1;
  return CUDAFX_OK;
}

extern "C" cudafx_status
cudafx_quantize_cuda_map (quantize_session *q, const quantize_mapping *m, cudafx_image *dst)
{
  cudafx_status s;
  if ((s = report_piece (q)) || (s = upload_palette (q->cx->stream, &m->pal)))
    return fail_cuda (q, s);
  q->map = m;
  if (q->table_map && !q->colours && (s = find_colours (q)))
    return fail_cuda (q, s);
  if (m->dither == CUDAFX_DITHER_NONE)
    return run_pass (q, PASS_MAP, m->pal.k, dst);
  if (!quantize_is_diffusion (m->dither))
    return run_pass (q, PASS_POSITION, m->pal.k, dst);
  if ((s = cfx_check (cudaMemcpyToSymbolAsync (c_pal_value, m->value, (size_t) m->pal.k * sizeof m->value[0], 0,
                                               cudaMemcpyHostToDevice, q->cx->stream),
                      FILTER, "copy to device")) ||
      (s = cfx_staging (q->cx, CFX_STAGING_COUNTERS, sizeof (int), (void **) &q->h_rows_done,
                        (void **) &q->d_rows_done, FILTER)))
    return fail_cuda (q, s);
  return run_pass (q, PASS_DITHER, m->pal.k, dst);
}

extern "C" void
cudafx_quantize_cuda_close (quantize_session *q)
{
  if (!q)
    return;
  if (q->failed && q->call.cx)
    cfx_release_buffers (q->call.cx); /* after a fault, start the next call from clean buffers */
  delete q; /* releases the device */
}
