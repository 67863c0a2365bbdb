/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize's Lloyd passes on the GPU: k-means assignment with the
 * centre sums (Lloyd 1982), over every pixel (its features computed per
 * stripe, features_kernel) or, for u8 images, over the distinct colours of
 * the voting pixels with their counts (a histogram of colour keys with
 * integer atomics, then CUB's selection of the non-empty bins in
 * quantize.cu, then each colour's features); and, where the device runs
 * Lloyd's loop without the host (cudafx_quantize_cuda_lloyd),
 * reduce_kernel's last block updates the centres with quantize.h's
 * quantize_move_centre and tests convergence.
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
 * the same integer sums. */
#include "quantize.cuh"

#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

namespace {

namespace cg = cooperative_groups;

__constant__ float c_decode[256]; /* this file's copy (quantize.cuh) */

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

/* ---- Lloyd over the distinct colours (u8; core/quantize.c's header) ------- */

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

} // namespace

cudafx_status
qz_lloyd_constants (cudaStream_t stream, const quantize_space *fs)
{
  return cfx_check (cudaMemcpyToSymbolAsync (c_decode, fs->decode, sizeof fs->decode, 0, cudaMemcpyHostToDevice,
                                             stream),
                    FILTER, "copy to device");
}

cudafx_status
qz_features (const quantize_session *q, const stripe_view &v)
{
  features_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, q->d_plane[0], q->d_plane[1], q->d_plane[2]);
  return cfx_check_launch (FILTER, "features_kernel");
}

/* Queues one assignment of the centres in d_lloyd into d_totals: over the
 * loaded stripe v (every pixel), or with v NULL over the distinct colours
 * (found). max_iterations > 0: the device runs Lloyd's loop (reduce_kernel). */
cudafx_status
qz_queue_assign (quantize_session *q, const stripe_view *v, int k, int max_iterations)
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

cudafx_status
qz_histogram (const stripe_view &v, unsigned *bins, cudaStream_t stream)
{
  histogram_kernel<<<grid_for (v.n, THREADS), THREADS, 0, stream>>> (v, bins);
  return cfx_check_launch (FILTER, "histogram_kernel");
}

cudafx_status
qz_colours (const quantize_session *q, int selected)
{
  cudaStream_t stream = q->cx->stream;
  colours_kernel<<<grid_for ((size_t) selected, THREADS), THREADS, 0, stream>>> (
    q->d_bins, q->d_keys, selected, q->dims, q->oklab, q->d_colour[0], q->d_colour[1], q->d_colour[2], q->d_counts);
  return cfx_check_launch (FILTER, "colours_kernel");
}
