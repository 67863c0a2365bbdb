/* Colour quantize passes on the GPU: k-means assignment with the centre
 * sums (Lloyd 1982), and the mapping of every pixel to its nearest palette
 * entry. core/quantize.c drives them and stays the reference: sampling,
 * k-means++ seeding, the centre update and convergence test, the palette and
 * Floyd–Steinberg run on the host for both backends, and the per-pixel
 * arithmetic is core/quantize.h's, compiled here without fused multiply-adds
 * (--fmad=false) and with IEEE division, so features, distances and nearest
 * centres equal the CPU's bit for bit.
 *
 * Determinism: a centre's sums are sums of integer features (|f| < 2^21), so
 * any order of addition gives the same total. Each block adds its pixels'
 * features into int32 shared-memory counters with shared atomics for one
 * chunk of CHUNK pixels (at most CHUNK * 2^21 < 2^31: no overflow), folds
 * them into int64 shared totals after every chunk, and writes its totals to
 * its own slot of a partials array; a second kernel adds the slots up. No
 * global atomics, and the result does not depend on the grid, the block
 * size, the stripes or the scheduling.
 *
 * Memory: the image, its features (float planes) and vote flags stay on the
 * device across the iterations when they fit the budget; otherwise every
 * pass uploads the image in stripes and recomputes their features. */
#include "context.cuh"

#include <new>
#include <stdio.h>

namespace {

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
    {
      size_t a = at + v.channels - 1;
      v.votes[p] = v.u8 ? row[a] != 0 : ((const float *) row)[a] != 0.0f;
    }
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
assign_kernel (stripe_view v, int k, long long *partials)
{
  __shared__ int s_chunk[COUNTERS];
  __shared__ long long s_total[COUNTERS];
  const int counters = 4 * k, tid = threadIdx.x;
  for (int i = tid; i < counters; i += THREADS)
    {
      s_chunk[i] = 0;
      s_total[i] = 0;
    }
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
            float d = quantize_distance (fx[i], fy[i], fz[i], c_centre[j]);
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

/* totals[i] += the blocks' partials[.][i]. */
__global__ void
reduce_kernel (const long long *partials, int blocks, int counters, long long *totals)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= counters)
    return;
  long long sum = 0;
  for (int b = 0; b < blocks; b++)
    sum += partials[(size_t) b * counters + i];
  totals[i] += sum;
}

/* Each pixel to its nearest palette entry (features of the entries in
 * c_centre); alpha copied from the source. */
__global__ void
map_kernel (stripe_view v, int k, unsigned char *dst, size_t dst_pitch)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  float fx, fy, fz, best = INFINITY;
  int label = 0;
  load_features (v, p, fx, fy, fz);
  for (int j = 0; j < k; j++)
    {
      float d = quantize_distance (fx, fy, fz, c_centre[j]);
      if (d < best)
        {
          best = d;
          label = j;
        }
    }
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  size_t at = (size_t) x * v.channels;
  const unsigned char *srow = v.src + (size_t) y * v.src_pitch;
  unsigned char *drow = dst + (size_t) y * dst_pitch;
  if (v.u8)
    {
      for (int c = 0; c < v.dims; c++)
        drow[at + c] = c_pal_u8[label][c];
      if (v.has_alpha)
        drow[at + v.channels - 1] = srow[at + v.channels - 1];
    }
  else
    {
      for (int c = 0; c < v.dims; c++)
        ((float *) drow)[at + c] = c_pal_f32[label][c];
      if (v.has_alpha)
        ((float *) drow)[at + v.channels - 1] = ((const float *) srow)[at + v.channels - 1];
    }
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

struct quantize_device
{
  std::unique_lock<std::mutex> lock;
  const cudafx_image   *src;
  const cudafx_options *o;
  int                   dims, oklab, everyone_votes;
  size_t                row_bytes, pitch;
  int                   rows, n_stripes;
  int                   loaded;        /* stripe whose features are on the device, -1 none */
  int                   max_blocks;    /* blocks of assign_kernel (partials slots) */
  unsigned char        *d_src, *d_dst, *d_votes;
  float                *d_plane[3];
  long long            *d_partials, *d_totals;
  cudaEvent_t           ev[4];
  int                   events;        /* how many of ev exist */
  int                   failed;        /* a CUDA error happened: drop the buffers at close */
};

namespace {

cudafx_status
fail_cuda (quantize_device *q, cudafx_status s)
{
  if (s == CUDAFX_ERR_CUDA)
    q->failed = 1;
  return s;
}

stripe_view
view_of (const quantize_device *q, int stripe, int *y0)
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
upload_stripe (quantize_device *q, const stripe_view &v, int y0)
{
  q->loaded = -1;
  return cfx_check (cudaMemcpy2DAsync (q->d_src, q->pitch, cudafx_row (q->src, y0), q->src->stride,
                                       q->row_bytes, v.rows, cudaMemcpyHostToDevice, 0),
                    FILTER, "copy to device");
}

cudafx_status
compute_features (quantize_device *q, const stripe_view &v, int i)
{
  features_kernel<<<grid_for (v.n, THREADS), THREADS>>> (v, q->d_plane[0], q->d_plane[1], q->d_plane[2]);
  cudafx_status s = cfx_check_launch (FILTER, "features_kernel");
  if (!s)
    q->loaded = i;
  return s;
}

enum pass_kind { PASS_ASSIGN, PASS_MAP };

/* One pass over every stripe: load, the pass's kernels, and for the mapping
 * the copy back to dst; kernel and transfer times go to the report. */
cudafx_status
run_pass (quantize_device *q, pass_kind kind, int k, cudafx_image *dst)
{
  cudafx_report *report = q->o ? q->o->report : NULL;
  cudafx_status s = CUDAFX_OK;
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
      if ((s = cfx_check (cudaEventRecord (q->ev[0], 0), FILTER, "event")) ||
          (fresh && (s = upload_stripe (q, v, y0))) ||
          (s = cfx_check (cudaEventRecord (q->ev[1], 0), FILTER, "event")) ||
          (fresh && (s = compute_features (q, v, i))))
        break;
      if (kind == PASS_ASSIGN)
        {
          unsigned blocks = grid_for (v.n, CHUNK);
          if (blocks > (unsigned) q->max_blocks)
            blocks = (unsigned) q->max_blocks;
          assign_kernel<<<blocks, THREADS>>> (v, k, q->d_partials);
          if ((s = cfx_check_launch (FILTER, "assign_kernel")))
            break;
          reduce_kernel<<<grid_for (4 * k, THREADS), THREADS>>> (q->d_partials, (int) blocks, 4 * k,
                                                                 q->d_totals);
          if ((s = cfx_check_launch (FILTER, "reduce_kernel")))
            break;
        }
      else
        {
          map_kernel<<<grid_for (v.n, THREADS), THREADS>>> (v, k, q->d_dst, q->pitch);
          if ((s = cfx_check_launch (FILTER, "map_kernel")))
            break;
        }
      if ((s = cfx_check (cudaEventRecord (q->ev[2], 0), FILTER, "event")) ||
          (kind == PASS_MAP &&
           (s = cfx_check (cudaMemcpy2DAsync (cudafx_row (dst, y0), dst->stride, q->d_dst, q->pitch,
                                              q->row_bytes, v.rows, cudaMemcpyDeviceToHost, 0),
                           FILTER, "copy to host"))) ||
          (s = cfx_check (cudaEventRecord (q->ev[3], 0), FILTER, "event")) ||
          (s = cfx_check (cudaStreamSynchronize (0), FILTER, "kernel")) ||
          (s = cfx_check (cudaEventElapsedTime (&up_ms, q->ev[0], q->ev[1]), FILTER, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->ev[1], q->ev[2]), FILTER, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&down_ms, q->ev[2], q->ev[3]), FILTER, "event timing")))
        break;
      if (report)
        {
          report->kernel_ms += kernel_ms;
          report->transfer_ms += up_ms + down_ms;
        }
      if (kind == PASS_MAP)
        s = cudafx_progress (q->o, 0.9 + 0.1 * (y0 + v.rows) / q->src->height);
    }
  return fail_cuda (q, s);
}

} // namespace

extern "C" cudafx_status
cudafx_quantize_cuda_open (const cudafx_image *src, const quantize_space *space, int everyone_votes,
                           const cudafx_options *o, quantize_device **out)
{
  *out = NULL;
  quantize_device *q = new (std::nothrow) quantize_device ();
  if (!q)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: out of memory", FILTER);
  q->lock = cfx_lock ();
  q->src = src;
  q->o = o;
  q->dims = space->dims;
  q->oklab = space->oklab;
  q->everyone_votes = everyone_votes;
  q->loaded = -1;
  *out = q;

  cudafx_status s;
  int device_sms = 0;
  if ((s = cfx_check (cudaSetDevice (0), FILTER, "device selection")) ||
      (s = cfx_check (cudaDeviceGetAttribute (&device_sms, cudaDevAttrMultiProcessorCount, 0), FILTER,
                      "device query")))
    return fail_cuda (q, s);

  /* Stripe rows from the budget: per row the source and result rows, the
   * feature planes and the vote flags; once, the blocks' partial sums
   * (as many blocks as a quarter of the budget allows) and the totals. */
  q->row_bytes = (size_t) src->width * src->channels * cudafx_type_size (src->type);
  q->pitch = align_up (q->row_bytes);
  size_t budget = cfx_memory_budget ();
  size_t block_bytes = COUNTERS * sizeof (long long);
  size_t blocks = (size_t) device_sms * BLOCKS_PER_SM;
  if (blocks * block_bytes > budget / 4)
    blocks = budget / 4 / block_bytes;
  if (blocks < 1)
    blocks = 1;
  q->max_blocks = (int) blocks;
  size_t per_row = 2 * q->pitch + (size_t) src->width * (q->dims * sizeof (float) + !everyone_votes);
  size_t fixed = (blocks + 1) * block_bytes + 5 * ALIGN; /* + the planes' alignment */
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
  size_t scratch = q->dims * plane_bytes + vote_bytes + blocks * block_bytes + block_bytes;
  unsigned char *d_scratch;
  if ((s = cfx_buffer (CFX_SLOT_SRC, q->pitch * q->rows, (void **) &q->d_src, FILTER)) ||
      (s = cfx_buffer (CFX_SLOT_DST, q->pitch * q->rows, (void **) &q->d_dst, FILTER)) ||
      (s = cfx_buffer (CFX_SLOT_SCRATCH, scratch, (void **) &d_scratch, FILTER)))
    return fail_cuda (q, s);
  for (int c = 0; c < q->dims; c++)
    q->d_plane[c] = (float *) (d_scratch + c * plane_bytes);
  q->d_votes = d_scratch + q->dims * plane_bytes;
  q->d_partials = (long long *) (q->d_votes + vote_bytes);
  q->d_totals = q->d_partials + blocks * COUNTERS;

  for (; q->events < 4; q->events++)
    if ((s = cfx_check (cudaEventCreate (&q->ev[q->events]), FILTER, "event creation")))
      return fail_cuda (q, s);
  return fail_cuda (q, cfx_check (cudaMemcpyToSymbolAsync (c_decode, space->decode, sizeof space->decode,
                                                           0, cudaMemcpyHostToDevice, 0),
                                  FILTER, "copy to device"));
}

extern "C" cudafx_status
cudafx_quantize_cuda_assign (quantize_device *q, const float (*centre)[3], int k, quantize_sums *sums)
{
  long long totals[COUNTERS];
  cudafx_status s;
  if ((s = cfx_check (cudaMemcpyToSymbolAsync (c_centre, centre, (size_t) k * sizeof centre[0], 0,
                                               cudaMemcpyHostToDevice, 0),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemsetAsync (q->d_totals, 0, 4 * (size_t) k * sizeof (long long), 0), FILTER,
                      "memset")) ||
      (s = run_pass (q, PASS_ASSIGN, k, NULL)) ||
      (s = cfx_check (cudaMemcpy (totals, q->d_totals, 4 * (size_t) k * sizeof (long long),
                                  cudaMemcpyDeviceToHost),
                      FILTER, "copy to host")))
    return fail_cuda (q, s);
  for (int j = 0; j < k; j++)
    {
      for (int c = 0; c < 3; c++)
        sums->sums[j][c] = totals[4 * j + c];
      sums->counts[j] = totals[4 * j + 3];
    }
  return CUDAFX_OK;
}

extern "C" cudafx_status
cudafx_quantize_cuda_map (quantize_device *q, const quantize_palette *pal, cudafx_image *dst)
{
  cudafx_status s;
  size_t bytes = (size_t) pal->k * sizeof pal->centre[0];
  if ((s = cfx_check (cudaMemcpyToSymbolAsync (c_centre, pal->centre, bytes, 0, cudaMemcpyHostToDevice, 0),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemcpyToSymbolAsync (c_pal_u8, pal->u8, (size_t) pal->k * sizeof pal->u8[0], 0,
                                               cudaMemcpyHostToDevice, 0),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemcpyToSymbolAsync (c_pal_f32, pal->f32, (size_t) pal->k * sizeof pal->f32[0], 0,
                                               cudaMemcpyHostToDevice, 0),
                      FILTER, "copy to device")))
    return fail_cuda (q, s);
  return run_pass (q, PASS_MAP, pal->k, dst);
}

extern "C" void
cudafx_quantize_cuda_close (quantize_device *q)
{
  if (!q)
    return;
  if (q->failed)
    cfx_release_buffers (); /* after a fault, start the next call from clean buffers */
  for (int e = 0; e < q->events; e++)
    cudaEventDestroy (q->ev[e]);
  delete q; /* releases the GPU lock */
}
