/* Median / percentile filter on the GPU; core/median.c is the CPU reference.
 *
 * Two kernels, both exact order statistics, so the output equals the CPU's
 * bit for bit:
 * - median_select_kernel: each thread finds the rank-k key of its window by
 *   binary search on the key's bits (count of keys <= mid), 8 rounds for u8
 *   and 32 for f32 (floats mapped to order-preserving uint32 keys). Small
 *   radii keep the window in registers (template R); other radii read it
 *   from the read-only cache.
 * - median_packed_kernel (u8, square, radius <= 2): four bytes per thread
 *   in one 32-bit word sorted together with SIMD byte min/max (__vminu4 /
 *   __vmaxu4) through Batcher's odd-even merge network, pruned to the window
 *   size, then the rank-k word is picked (packed 8-bit min/max, as in
 *   Adams 2021's vectorised networks).
 * - median_histogram_kernel (u8, larger radii): Huang's sliding histogram
 *   (Huang, Yang, Tang 1979) down a column, one 256-bin histogram per thread
 *   in shared memory with 16 coarse bins to find the rank quickly; per output
 *   it costs O(r) updates, not O(r^2). Circles slide per column with each
 *   column's own half-height.
 * Borders clamp: the stripe runner makes up rows, kernels clamp columns. */
#include "context.cuh"

#include <math.h>
#include <utility>

namespace {

constexpr int SELECT_BLOCK_X = 32, SELECT_BLOCK_Y = 8;
constexpr int MAX_REGISTER_RADIUS = 3;  /* windows up to 7x7 in registers */
constexpr int MAX_PACKED_RADIUS = 2;
constexpr int HIST_THREADS = 32;        /* one warp; bins interleaved by thread: no bank conflicts */
constexpr int HIST_SEGMENT = 64;        /* output rows per thread */

template <typename T> struct key_of;
template <> struct key_of<unsigned char>
{
  static constexpr int bits = 8;
  __device__ static unsigned to (unsigned char v) { return v; }
  __device__ static unsigned char from (unsigned k) { return (unsigned char) k; }
};
template <> struct key_of<float>
{
  static constexpr int bits = 32;
  /* Order-preserving: negative floats reversed, positives above them. */
  __device__ static unsigned to (float v)
  {
    unsigned u = __float_as_uint (v);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
  }
  __device__ static float from (unsigned k)
  {
    return __uint_as_float ((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
  }
};

/* Smallest key t with more than `rank` window keys <= t: the rank-th key. */
template <typename T, typename CountFn>
__device__ unsigned
select_rank (int rank, CountFn count_le)
{
  unsigned lo = 0, hi = key_of<T>::bits == 32 ? 0xffffffffu : (1u << key_of<T>::bits) - 1;
  while (lo < hi)
    {
      unsigned mid = lo + (hi - lo) / 2;
      if (count_le (mid) > rank)
        hi = mid;
      else
        lo = mid + 1;
    }
  return lo;
}

template <typename T>
__device__ __forceinline__ T
load (const unsigned char *base, size_t pitch, int y, int x, int channels, int c)
{
  return __ldg ((const T *) (base + (size_t) y * pitch) + (size_t) x * channels + c);
}

/* R > 0: window radius known at compile time, keys in registers.
 * R == 0: radius r at run time, keys re-read from the cache each round. */
template <typename T, int R>
__global__ void
median_select_kernel (cfx_stripe s, int r, int circle, int rank)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y; /* output row within the stripe */
  if (x >= s.width || y >= s.rows)
    return;
  T *out = (T *) (s.d_dst + (size_t) y * s.dst_pitch) + (size_t) x * s.channels;
  int cy = y + s.halo; /* centre row in the input stripe */
  for (int c = 0; c < s.channels; c++)
    {
      unsigned key;
      if (R > 0)
        {
          constexpr int N = (2 * R + 1) * (2 * R + 1);
          unsigned keys[N];
          bool in[N];
#pragma unroll
          for (int dy = -R; dy <= R; dy++)
#pragma unroll
            for (int dx = -R; dx <= R; dx++)
              {
                int i = (dy + R) * (2 * R + 1) + dx + R;
                int xx = min (max (x + dx, 0), s.width - 1);
                keys[i] = key_of<T>::to (load<T> (s.d_src, s.src_pitch, cy + dy, xx, s.channels, c));
                in[i] = !circle || dx * dx + dy * dy <= R * R;
              }
          key = select_rank<T> (rank, [&] (unsigned mid) {
            int n = 0;
#pragma unroll
            for (int i = 0; i < N; i++)
              n += in[i] && keys[i] <= mid;
            return n;
          });
        }
      else
        key = select_rank<T> (rank, [&] (unsigned mid) {
          int n = 0;
          for (int dy = -r; dy <= r; dy++)
            {
              int half = circle ? (int) sqrtf ((float) (r * r - dy * dy)) : r;
              while (circle && half * half + dy * dy > r * r)
                half--;
              while (circle && (half + 1) * (half + 1) + dy * dy <= r * r)
                half++;
              for (int dx = -half; dx <= half; dx++)
                {
                  int xx = min (max (x + dx, 0), s.width - 1);
                  n += key_of<T>::to (load<T> (s.d_src, s.src_pitch, cy + dy, xx, s.channels, c)) <= mid;
                }
            }
          return n;
        });
      out[c] = key_of<T>::from (key);
    }
}

/* u8, any radius: one thread per (column, channel, segment of rows). */
__global__ void
median_histogram_kernel (cfx_stripe s, int r, int rank, const int *d_half)
{
  extern __shared__ unsigned shared[];
  unsigned *fine = shared;                      /* [256][HIST_THREADS] */
  unsigned *coarse = shared + 256 * HIST_THREADS; /* [16][HIST_THREADS] */
  int *half = (int *) (coarse + 16 * HIST_THREADS); /* [2r+1]: column half-heights */
  int t = threadIdx.x;
  for (int i = t; i < 2 * r + 1; i += HIST_THREADS)
    half[i] = d_half[i];
  for (int i = t; i < 272 * HIST_THREADS; i += HIST_THREADS)
    shared[i] = 0;
  __syncthreads ();

  int x = blockIdx.x * HIST_THREADS + t;
  int c = blockIdx.z;
  int y0 = blockIdx.y * HIST_SEGMENT;
  if (x >= s.width || y0 >= s.rows)
    return;
  int y1 = min (y0 + HIST_SEGMENT, s.rows);

  auto add = [&] (int yy, int xx, int delta) {
    unsigned v = load<unsigned char> (s.d_src, s.src_pitch, yy, xx, s.channels, c);
    fine[v * HIST_THREADS + t] += delta;
    coarse[(v >> 4) * HIST_THREADS + t] += delta;
  };
  /* Window of output row y: input rows y + halo - half .. y + halo + half. */
  for (int dx = -r; dx <= r; dx++)
    {
      int xx = min (max (x + dx, 0), s.width - 1), h = half[dx + r];
      for (int dy = -h; dy <= h; dy++)
        add (y0 + s.halo + dy, xx, 1);
    }
  for (int y = y0;; y++)
    {
      unsigned acc = 0;
      int b = 0;
      while (acc + coarse[b * HIST_THREADS + t] <= (unsigned) rank)
        acc += coarse[b++ * HIST_THREADS + t];
      int v = b * 16;
      while (acc + fine[v * HIST_THREADS + t] <= (unsigned) rank)
        acc += fine[v++ * HIST_THREADS + t];
      s.d_dst[(size_t) y * s.dst_pitch + (size_t) x * s.channels + c] = (unsigned char) v;
      if (y + 1 >= y1)
        break;
      for (int dx = -r; dx <= r; dx++)
        {
          int xx = min (max (x + dx, 0), s.width - 1), h = half[dx + r];
          add (y + s.halo - h, xx, -1);
          add (y + s.halo + h + 1, xx, 1);
        }
    }
}

/* Batcher's odd-even merge sort for n keys (padded to a power of two with
 * +inf, whose comparators are pruned since they never swap). */
template <int N> struct sort_network
{
  static constexpr int P = N <= 1 ? 1 : 2 * sort_network<(N + 1) / 2>::P;
  int a[P * P], b[P * P], count;
  constexpr sort_network () : a (), b (), count (0)
  {
    for (int p = 1; p < P; p <<= 1)
      for (int k = p; k >= 1; k >>= 1)
        for (int j = k % p; j + k < P; j += 2 * k)
          for (int i = 0; i < k && i < P - j - k; i++)
            if ((i + j) / (2 * p) == (i + j + k) / (2 * p) && i + j + k < N)
              {
                a[count] = i + j;
                b[count] = i + j + k;
                count++;
              }
  }
};
template <> struct sort_network<1> { static constexpr int P = 1; };

template <int N> constexpr sort_network<N> network_of{};

/* Applies the network with every index a compile-time constant, so the keys
 * stay in registers whatever the compiler's unrolling heuristics decide. */
template <int N, int... I>
__device__ __forceinline__ void
apply_network (unsigned *v, std::integer_sequence<int, I...>)
{
  ((void) ([&] {
     constexpr int a = network_of<N>.a[I], b = network_of<N>.b[I];
     unsigned lo = __vminu4 (v[a], v[b]);
     v[b] = __vmaxu4 (v[a], v[b]);
     v[a] = lo;
   } ()), ...);
}

/* Four consecutive bytes of a row starting at byte offset o (any alignment),
 * columns clamped to the row: a funnel shift of two aligned words inside the
 * row, byte by byte at the row's ends. */
__device__ __forceinline__ unsigned
load_word (const unsigned char *row, int o, int row_bytes, int channels)
{
  if (o >= 0 && o + 4 <= row_bytes)
    { /* the second word may run past the row, never past the padded pitch */
      const unsigned *w = (const unsigned *) (row + (o & ~3));
      unsigned lo = __ldg (w), hi = (o & 3) ? __ldg (w + 1) : 0;
      return __funnelshift_r (lo, hi, (o & 3) * 8);
    }
  unsigned v = 0;
  int width = row_bytes / channels;
  for (int j = 0; j < 4; j++)
    {
      int byte = o + j, x = byte >= 0 ? byte / channels : -((-byte + channels - 1) / channels);
      int c = byte - x * channels;
      x = min (max (x, 0), width - 1);
      v |= (unsigned) __ldg (row + x * channels + c) << (8 * j);
    }
  return v;
}

template <int R>
__global__ void
median_packed_kernel (cfx_stripe s, int rank)
{
  constexpr int N = (2 * R + 1) * (2 * R + 1);
  int row_bytes = s.width * s.channels;
  int o = (blockIdx.x * blockDim.x + threadIdx.x) * 4; /* first output byte */
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (o >= row_bytes || y >= s.rows)
    return;
  unsigned v[N];
#pragma unroll
  for (int dy = -R; dy <= R; dy++)
    {
      const unsigned char *row = s.d_src + (size_t) (y + s.halo + dy) * s.src_pitch;
#pragma unroll
      for (int dx = -R; dx <= R; dx++)
        v[(dy + R) * (2 * R + 1) + dx + R] = load_word (row, o + dx * s.channels, row_bytes, s.channels);
    }
  apply_network<N> (v, std::make_integer_sequence<int, network_of<N>.count> ());
  unsigned out = v[0];
#pragma unroll
  for (int i = 1; i < N; i++)
    out = i == rank ? v[i] : out;
  /* Rows are padded to 256 bytes on the device: a whole word always fits. */
  *(unsigned *) (s.d_dst + (size_t) y * s.dst_pitch + o) = out;
}

struct median_ctx
{
  const cudafx_median_params *p;
  int rank;
  int *d_half;
};

template <typename T>
cudafx_status
launch_select (const median_ctx *m, const cfx_stripe *s)
{
  dim3 block (SELECT_BLOCK_X, SELECT_BLOCK_Y);
  dim3 grid ((s->width + block.x - 1) / block.x, (s->rows + block.y - 1) / block.y);
  int r = m->p->radius, circle = m->p->shape == CUDAFX_SHAPE_CIRCLE;
  switch (r)
    {
    case 1: median_select_kernel<T, 1><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank); break;
    case 2: median_select_kernel<T, 2><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank); break;
    case 3: median_select_kernel<T, 3><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank); break;
    default: median_select_kernel<T, 0><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank); break;
    }
  return cfx_check_launch ("median", "median_select_kernel");
}

cudafx_status
median_stripe (void *ctx, const cfx_stripe *s)
{
  const median_ctx *m = (const median_ctx *) ctx;
  if (s->type == CUDAFX_F32)
    return launch_select<float> (m, s);
  /* Measured on an H100: packed networks win up to 5x5; at 7x7 the network
   * outgrows the registers and selection by counting is faster. */
  if (m->p->radius <= MAX_PACKED_RADIUS && m->p->shape == CUDAFX_SHAPE_SQUARE)
    {
      dim3 block (64, 4);
      dim3 grid (((s->width * s->channels + 3) / 4 + block.x - 1) / block.x, (s->rows + block.y - 1) / block.y);
      switch (m->p->radius)
        {
        case 1: median_packed_kernel<1><<<grid, block, 0, s->stream>>> (*s, m->rank); break;
        default: median_packed_kernel<2><<<grid, block, 0, s->stream>>> (*s, m->rank); break;
        }
      return cfx_check_launch ("median", "median_packed_kernel");
    }
  if (m->p->radius <= MAX_REGISTER_RADIUS)
    return launch_select<unsigned char> (m, s);
  int r = m->p->radius;
  size_t shared_bytes = (272 * HIST_THREADS) * sizeof (unsigned) + (2 * r + 1) * sizeof (int);
  cudafx_status st = cfx_check (cudaFuncSetAttribute (median_histogram_kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      (int) shared_bytes),
                                "median", "shared-memory attribute");
  if (st)
    return st;
  dim3 grid ((s->width + HIST_THREADS - 1) / HIST_THREADS, (s->rows + HIST_SEGMENT - 1) / HIST_SEGMENT,
             s->channels);
  median_histogram_kernel<<<grid, HIST_THREADS, shared_bytes, s->stream>>> (*s, r, m->rank, m->d_half);
  return cfx_check_launch ("median", "median_histogram_kernel");
}

} // namespace

extern "C" cudafx_status
cudafx_median_cuda (const cudafx_image *src, cudafx_image *dst, const cudafx_median_params *p,
                    const cudafx_options *o)
{
  int r = p->radius;
  /* Column half-heights of the window and its size n; rank as the CPU has it. */
  int h_half[2 * 100 + 1];
  long n = 0;
  for (int dx = -r; dx <= r; dx++)
    {
      int h = r;
      if (p->shape == CUDAFX_SHAPE_CIRCLE)
        while (h * h + dx * dx > r * r)
          h--;
      h_half[dx + r] = h;
      n += 2 * h + 1;
    }
  median_ctx m = { p, (int) lround (p->percentile / 100.0 * (double) (n - 1)), NULL };

  cudafx_status s = CUDAFX_OK;
  if (src->type == CUDAFX_U8 && r > MAX_REGISTER_RADIUS)
    {
      s = cfx_check (cudaMalloc (&m.d_half, sizeof (int) * (2 * r + 1)), "median", "allocation");
      if (!s)
        s = cfx_check (cudaMemcpy (m.d_half, h_half, sizeof (int) * (2 * r + 1), cudaMemcpyHostToDevice),
                       "median", "copy to device");
    }
  if (!s)
    s = cfx_run_stripes ("median", src, dst, r, CUDAFX_BORDER_CLAMP, 0, median_stripe, &m, o);
  cudaFree (m.d_half);
  return s;
}
