/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize's seeding on the GPU: core/quantize.c's seeding attempts
 * (k-means++ picks on the sample, then Lloyd on the sample, see below) in
 * cooperative launches on the context's side stream, the sample gathered
 * from the rows the engine hands over (sample_kernel) or taken from the
 * host, and the backend session's seeding entry point
 * (cudafx_quantize_cuda_seed), which meanwhile has the image go up and its
 * distinct colours found. See quantize.cuh. */
#include "quantize.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>
#include <stdio.h>
#include <stdlib.h>
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>

namespace {

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

/* Plane c of the seeding's sample on the device. */
float *
seed_plane (const quantize_session *q, int c)
{
  return (float *) (q->d_seed + c * SEED_PLANE_BYTES);
}

} // namespace

const size_t qz_seed_bytes = SEED_BYTES;

cudafx_status
qz_sample (const quantize_session *q, const stripe_view &v, int y0, unsigned long long n, unsigned long long j0,
           unsigned long long j1)
{
  sample_kernel<<<grid_for (j1 - j0, THREADS), THREADS, 0, q->cx->stream>>> (
    v, y0, n, q->samples, j0, (int) (j1 - j0), seed_plane (q, 0), seed_plane (q, 1), seed_plane (q, 2));
  return cfx_check_launch (FILTER, "sample_kernel");
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
    return qz_fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA %s failed: %s", FILTER, "seeding",
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
    return qz_fail_cuda (q, s);
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
    return qz_fail_cuda (q, s);
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
    return qz_fail_cuda (q, s);
  /* the sample from the host, or from the rows quantize_rows uploaded once
   * they are taken (ev[3]) */
  for (int c = 0; c < 3 && smp->plane[0]; c++)
    if ((s = cfx_check (cudaMemcpyAsync ((void *) v.plane[c], smp->plane[c], (size_t) smp->n * sizeof (float),
                                         cudaMemcpyHostToDevice, stream),
                        FILTER, "copy to device")))
      return qz_fail_cuda (q, s);
  if ((s = cfx_check (cudaMemsetAsync (v.st, 0, sizeof (seed_state), stream), FILTER, "memset")) ||
      (!smp->plane[0] && (s = cfx_check (cudaStreamWaitEvent (stream, cx->ev[3], 0), FILTER, "event"))) ||
      (s = cfx_check (cudaEventRecord (cx->ev[5], stream), FILTER, "event")))
    return qz_fail_cuda (q, s);
  if (smp->codes)
    {
      sample_features_kernel<<<(smp->n + SEED_THREADS - 1) / SEED_THREADS, SEED_THREADS, 0, stream>>> (
        (float *) v.plane[0], (float *) v.plane[1], (float *) v.plane[2], v.n, q->fs);
      if ((s = cfx_check_launch (FILTER, "sample_features_kernel")))
        return qz_fail_cuda (q, s);
    }
  for (v.attempt0 = 0; v.attempt0 < job->attempts; v.attempt0 += together)
    {
      int attempts = job->attempts - v.attempt0 < together ? job->attempts - v.attempt0 : together;
      void *args[] = { &v };
      char point[32];
      snprintf (point, sizeof point, "seed-launch%d", v.attempt0 / together);
      if (cfx_inject (point))
        return qz_fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA %s failed: %s", FILTER, "seeding",
                                             "injected fault"));
      if ((s = cfx_check (cudaLaunchCooperativeKernel ((const void *) seed_kernel, dim3 (attempts * group),
                                                       dim3 (SEED_THREADS), args, shared, stream),
                          FILTER, "seed_kernel")) ||
          (s = cfx_check_launch (FILTER, "seed_kernel")))
        return qz_fail_cuda (q, s);
    }
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[6], stream), FILTER, "event")) ||
      (s = cfx_check (cudaMemcpyAsync (res, &v.st->res, sizeof *res, cudaMemcpyDeviceToHost, stream), FILTER,
                      "copy to host")) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[7], stream), FILTER, "event")))
    return qz_fail_cuda (q, s);
  /* Meanwhile, when the image stays on the device for every pass, it goes
   * up with its features, and its distinct colours are found. */
  float up_ms = 0, kernel_ms = 0, down_ms = 0, load_ms = 0, features_ms = 0;
  int preloaded = q->n_stripes == 1;
  if ((s = qz_report_piece (q)) ||
      (preloaded &&
       ((s = qz_preload (q)) || (s = cfx_check (cudaStreamSynchronize (q->cx->stream), FILTER, "features")) ||
        (s = cfx_check (cudaEventElapsedTime (&load_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
        (s = cfx_check (cudaEventElapsedTime (&features_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")) ||
        (q->distinct && (s = qz_find_colours (q))))) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "seeding")) ||
      (s = cfx_check (cudaEventElapsedTime (&up_ms, q->cx->ev[4], q->cx->ev[5]), FILTER, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->cx->ev[5], q->cx->ev[6]), FILTER, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&down_ms, q->cx->ev[6], q->cx->ev[7]), FILTER, "event timing")))
    return qz_fail_cuda (q, s);
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
