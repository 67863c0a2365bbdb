/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Median / percentile filter on the GPU; core/median.c is the CPU reference.
 *
 * Every kernel finds exact order statistics, so the output equals the CPU's
 * bit for bit:
 * - median_columns_kernel (u8, square, radius <= 3; every rank of 3x3, the
 *   median of 5x5 and 7x7): separable sorting networks after Adams 2021,
 *   "Fast median filters using separable sorting networks". A block walks
 *   down 16 output rows, keeping each column's raw words in registers (the
 *   new rows loaded a step ahead of their use). 5x5 and 7x7 take two output
 *   rows a step: their windows share L-1 rows, whose columns are sorted once,
 *   and the selection among those shared keys is done once for both (3x3
 *   takes one row a step, all L rows sorted). Per step each thread sorts the
 *   window column of one aligned 4-byte word, its even and its odd bytes as
 *   two 16-bit lanes a word, into a shared tile, followed by the two outputs'
 *   own rows unsorted. Sorting is per lane, so the sorted column at any byte
 *   offset is a regrouping of the sorted words' lanes (one byte permute at
 *   most): columns are sorted once and shared by every output that uses
 *   them. The tile is as wide as the block; the threads at its ends sort
 *   the halo and output nothing. Each thread reads the tile words its
 *   windows span once for both streams, then selects its outputs with a
 *   network built at compile time (median_network.h): the rank-rows sorted
 *   across the columns, keys the row/column order rules out dropped, the
 *   rest merged; with two rows the shared grid yields the L+1 candidate
 *   ranks and each output merges in its sorted own row; everything pruned
 *   backwards to the ranks needed. Lanes
 *   hold 0x6400 + byte, which also reads as the half float 1024 + byte, so
 *   the even outputs' network runs as 16-bit integer min/max and the odd
 *   outputs' as half-float min/max (sm_80 on). On sm_90 both kinds run in
 *   the ALU pipe, which bounds the networks with issue slots to spare, so
 *   from 5x5 on the odd outputs' full comparators are half-float
 *   arithmetic instead (min = a - relu (a - b), max = b + relu (a - b),
 *   exact on these integers): the FMA pipe takes that share.
 * - median_packed_kernel (u8, square, radius <= 2, the other ranks): four
 *   bytes per 32-bit word through a full sorting network with SIMD byte
 *   min/max, then the rank-k word is picked.
 * - median_select_kernel (f32, circles, other u8 ranks up to 7x7): each
 *   thread finds the rank-k key of its window by binary search on the key's
 *   bits (count of keys <= mid), 8 rounds for u8 and 32 for f32 (floats
 *   mapped to order-preserving uint32 keys). Small radii keep the window in
 *   registers (template R); other radii read it from the read-only cache.
 * - median_histogram_kernel (u8, larger radii): Huang's sliding histogram
 *   (Huang, Yang, Tang 1979) down a column, one 256-bin histogram per
 *   thread in shared memory, and the answer tracked as in Huang's paper: it
 *   moves a few bins a row, so there is no search from the bottom; per
 *   output it costs O(r) updates, not O(r^2). Counts are bytes up to 15x15
 *   (16-bit beyond), so twice the warps fit an SM, and each thread's counts
 *   lie in its own bank. Circles slide per column with each column's own
 *   half-height. Bound by latency: the histograms' shared memory allows 24
 *   warps an SM, which keep about two thirds of the issue slots busy.
 * Borders clamp: the stripe runner makes up rows, kernels clamp columns.
 * Timings of these kernels and of the ones they replaced: docs/BENCHMARKS.md. */
#include "context.cuh"
#include "median_network.h"

#include <math.h>
#include <utility>

namespace {

constexpr int SELECT_BLOCK_X = 32, SELECT_BLOCK_Y = 8;
constexpr int MAX_REGISTER_RADIUS = 3;  /* windows up to 7x7 in registers */
constexpr int MAX_PACKED_RADIUS = 2;
constexpr int MAX_COLUMNS_RADIUS = 3;
constexpr int COLUMNS_THREADS = 128;    /* tile words (4 bytes) across a block, halo included */
constexpr int COLUMNS_ROWS = 16;        /* output rows a block walks down */
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
  __device__ static unsigned to (float v) { return median_float_key (v); }
  __device__ static float from (unsigned k) { return median_key_float (k); }
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

/* u8, any radius: one thread per (column, channel, segment of rows), its
 * histogram in shared memory. Counts are bytes while a window holds at most
 * 255 keys (radius 7), else 16-bit (201^2 < 65536): small counts, more
 * warps resident. Thread t's counts lie in bank t (bins K = 4 / sizeof
 * (CountT) a word, words interleaved by thread), so a warp's updates never
 * conflict. The answer m is tracked as in Huang's paper, with lt, the
 * number of window keys below m: each row step moves m by the few bins the
 * rank moved, so no search from the bottom, and each key costs one count
 * read and one write. */
template <typename CountT>
__global__ void __launch_bounds__ (HIST_THREADS)
median_histogram_kernel (cfx_stripe s, int r, int rank, const int *d_half)
{
  constexpr int K = 4 / sizeof (CountT);
  extern __shared__ int shared[];
  int *half = shared;                                   /* [2r+1]: column half-heights */
  unsigned *words = (unsigned *) (shared + 2 * r + 1);  /* [256 / K][HIST_THREADS] words of K counts */
  const int t = threadIdx.x;
  for (int i = t; i < 2 * r + 1; i += HIST_THREADS)
    half[i] = d_half[i];
  for (int i = t; i < 256 / K * HIST_THREADS; i += HIST_THREADS)
    words[i] = 0;
  __syncthreads ();

  const int x = blockIdx.x * HIST_THREADS + t, c = blockIdx.z, y0 = blockIdx.y * HIST_SEGMENT;
  if (x >= s.width || y0 >= s.rows)
    return;
  const int y1 = min (y0 + HIST_SEGMENT, s.rows);
  CountT *own = (CountT *) (words + t);
  auto bin = [&] (unsigned v) -> CountT & { return own[(v / K) * HIST_THREADS * K + v % K]; };
  /* Window of output row y: input rows y + halo - half .. y + halo + half. */
  for (int dx = -r; dx <= r; dx++)
    {
      const int xx = min (max (x + dx, 0), s.width - 1), h = half[dx + r];
      for (int dy = -h; dy <= h; dy++)
        bin (load<unsigned char> (s.d_src, s.src_pitch, y0 + s.halo + dy, xx, s.channels, c))++;
    }
  int m = 0, lt = 0; /* lt: window keys < m */
  for (int y = y0;; y++)
    {
      while (lt > rank)
        lt -= bin (--m);
      for (int n = bin (m); lt + n <= rank; n = bin (++m))
        lt += n;
      s.d_dst[(size_t) y * s.dst_pitch + (size_t) x * s.channels + c] = (unsigned char) m;
      if (y + 1 >= y1)
        break;
      for (int dx = -r; dx <= r; dx++)
        {
          const int xx = min (max (x + dx, 0), s.width - 1), h = half[dx + r];
          const unsigned out = load<unsigned char> (s.d_src, s.src_pitch, y + s.halo - h, xx, s.channels, c);
          const unsigned in = load<unsigned char> (s.d_src, s.src_pitch, y + s.halo + h + 1, xx, s.channels, c);
          lt += ((int) in < m) - ((int) out < m);
          if (in != out) /* distinct bins: both counts read before either is written */
            {
              const CountT n_out = bin (out), n_in = bin (in);
              bin (out) = n_out - 1;
              bin (in) = n_in + 1;
            }
        }
    }
}

template <int N> constexpr median_network::sort_network<N> sorter{};
template <int L, int RANK, int STEP> constexpr median_network::select_network<L, RANK, STEP> selector{};

/* The networks run with every slot index a compile-time constant, so the
 * keys stay in registers whatever the compiler's unrolling heuristics decide.
 * sort_bytes: four 8-bit lanes a word (__vminu4, emulated on sm_75..90);
 * sort_lanes and select_lanes: two 16-bit lanes (__vminu2, one instruction
 * on sm_90). */
template <int N, int... I>
__device__ __forceinline__ void
sort_bytes (unsigned *v, std::integer_sequence<int, I...>)
{
  ((void) ([&] {
     constexpr int a = sorter<N>.net.a[I], b = sorter<N>.net.b[I];
     unsigned lo = __vminu4 (v[a], v[b]);
     v[b] = __vmaxu4 (v[a], v[b]);
     v[a] = lo;
   } ()), ...);
}

template <int N, int... I>
__device__ __forceinline__ void
sort_lanes (unsigned *v, std::integer_sequence<int, I...>)
{
  ((void) ([&] {
     constexpr int a = sorter<N>.net.a[I], b = sorter<N>.net.b[I];
     unsigned lo = __vminu2 (v[a], v[b]);
     v[b] = __vmaxu2 (v[a], v[b]);
     v[a] = lo;
   } ()), ...);
}

/* Keys are 16-bit lanes 0x6400 + byte: in that form they also read as the
 * half floats 1024 + byte, so min/max can run as integers or, on sm_80 and
 * later, as half floats: another instruction, which can issue alongside. */
template <bool HALF>
__device__ __forceinline__ unsigned
lane_min (unsigned a, unsigned b)
{
#if __CUDA_ARCH__ >= 800
  if (HALF)
    {
      unsigned m;
      asm ("min.f16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
      return m;
    }
#endif
  return __vminu2 (a, b);
}

template <bool HALF>
__device__ __forceinline__ unsigned
lane_max (unsigned a, unsigned b)
{
#if __CUDA_ARCH__ >= 800
  if (HALF)
    {
      unsigned m;
      asm ("max.f16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
      return m;
    }
#endif
  return __vmaxu2 (a, b);
}

/* Both halves of a comparator on half-float lanes, without min/max: with
 * d = relu (a - b), min = a - d and max = b + d. Keys 1024 + byte are
 * integers below 2048, so every step is exact in half precision. On sm_90
 * integer and half min/max share the ALU pipe, which bounds the selection
 * networks with issue slots to spare; these three run in the FMA pipe. */
__device__ __forceinline__ void
fma_compare (unsigned a, unsigned b, unsigned &lo, unsigned &hi)
{
#if __CUDA_ARCH__ >= 900
  unsigned d;
  asm ("fma.rn.relu.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(b), "r"(0xbc00bc00u), "r"(a)); /* -1.0 a lane */
  asm ("sub.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(a), "r"(d));
  asm ("add.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(b), "r"(d));
#else
  lo = lane_min<true> (a, b);
  hi = lane_max<true> (a, b);
#endif
}

/* The pruned selection network on one stream of lanes. SPLIT (half-float
 * lanes only): comparators that keep both halves take fma_compare, the
 * others one min or max, so the work splits between two pipes. */
template <int L, int RANK, int STEP, bool HALF, bool SPLIT, int... I>
__device__ __forceinline__ void
select_lanes (unsigned *v, std::integer_sequence<int, I...>)
{
  static_assert (HALF || !SPLIT, "fma_compare needs half-float lanes");
  ((void) ([&] {
     constexpr int a = selector<L, RANK, STEP>.a[I], b = selector<L, RANK, STEP>.b[I];
     constexpr bool to_a = selector<L, RANK, STEP>.min_to_a[I], to_b = selector<L, RANK, STEP>.max_to_b[I];
     if constexpr (SPLIT && to_a && to_b)
       fma_compare (v[a], v[b], v[a], v[b]);
     else
       {
         unsigned lo = lane_min<HALF> (v[a], v[b]), hi = lane_max<HALF> (v[a], v[b]);
         if (to_a)
           v[a] = lo;
         if (to_b)
           v[b] = hi;
       }
   } ()), ...);
}

/* The rank-th key after sort_bytes (rank at run time). */
template <int N, int... K>
__device__ __forceinline__ unsigned
pick_sorted (const unsigned *v, int rank, std::integer_sequence<int, K...>)
{
  unsigned out = 0;
  ((void) ([&] {
     constexpr int slot = sorter<N>.order[K];
     out = K == rank ? v[slot] : out;
   } ()), ...);
  return out;
}

/* Sorted even and odd lanes of a column into its tile column, k-th smallest
 * in row k. */
template <int L, int... K>
__device__ __forceinline__ void
store_sorted (uint2 *column, int tile_width, const unsigned *even, const unsigned *odd,
              std::integer_sequence<int, K...>)
{
  ((void) ([&] {
     constexpr int slot = sorter<L>.order[K];
     column[K * tile_width] = make_uint2 (even[slot], odd[slot]);
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
  sort_bytes<N> (v, std::make_integer_sequence<int, sorter<N>.net.count> ());
  unsigned out = pick_sorted<N> (v, rank, std::make_integer_sequence<int, N> ());
  /* Rows are padded to 256 bytes on the device: a whole word always fits. */
  *(unsigned *) (s.d_dst + (size_t) y * s.dst_pitch + o) = out;
}

/* Column P of the window (byte offset P from the thread's output word) as
 * 16-bit lanes of stream P & 1: stream S's word at tile index i holds bytes
 * (4i + S, 4i + S + 2) of the row. Words are the thread's row of tile words
 * from its word LO on, already in registers. */
template <int P, int LO>
__device__ __forceinline__ unsigned
column_key (const uint2 *words)
{
  constexpr int word = (P >> 2) - LO; /* floor, also for negative P */
  const uint2 lo = words[word];
  unsigned key = P & 1 ? lo.y : lo.x;
  if (P & 2)
    { /* lanes straddle two words: upper lane of one, lower of the next */
      const uint2 hi = words[word + 1];
      key = __byte_perm (key, P & 1 ? hi.y : hi.x, 0x5432);
    }
  return key;
}

/* Output rows a column-kernel step computes: from 5x5 on, two rows share
 * the sorting of L-1 window rows and the selection among them; at 3x3 the
 * own rows' sorting costs more than it saves. */
template <int R> constexpr int rows_per_step = R >= 2 ? 2 : 1;

/* Whether the odd outputs' full comparators move to the FMA pipe
 * (fma_compare): from 5x5 on, where the networks bound the kernel; at 3x3
 * they are a small part of its work. */
template <int R> constexpr bool split_pipes = R >= 2;

/* Blocks an SM must hold (0: no bound). 5 caps 7x7 at 96 registers (112
 * unbounded), which is faster; more blocks spill. 3x3 is left alone. */
template <int R> constexpr int columns_min_blocks = R >= 2 ? 5 : 0;

/* The thread's even and odd outputs of the step's STEP rows: every tile word
 * of the tile's rows is read once for both streams (a column needs one or
 * two words of one stream), then the pruned selection networks run, even
 * outputs by integer min/max and odd ones by half-float min/max. Tile rows:
 * the SORTED = L - STEP + 1 shared window rows, sorted per column, then
 * (STEP 2) the upper and the lower output's own rows, as loaded. */
template <int R, int CH, int RANK, int STEP, int... DX>
__device__ __forceinline__ void
select_from_tile (const uint2 *tile, int tile_width, int base, uint2 *out, std::integer_sequence<int, DX...>)
{
  constexpr int L = 2 * R + 1, SORTED = L - STEP + 1, TILE_ROWS = SORTED + (STEP - 1) * 2;
  /* Words read, from the thread's own: column P reads word P >> 2 and, when
   * P & 2, the next, so floor ((P + 2) / 4) last, most for P = R * CH + 1. */
  constexpr int LO = (-R * CH) >> 2, WORDS = ((R * CH + 3) >> 2) - LO + 1;
  /* Slot of tile row k, column DX, as the network numbers them. */
  constexpr auto slot = [] (int k, int dx) { return k < SORTED ? dx * SORTED + k : SORTED * L + (k - SORTED) * L + dx; };
  unsigned even[TILE_ROWS * L], odd[TILE_ROWS * L];
#pragma unroll
  for (int k = 0; k < TILE_ROWS; k++)
    {
      uint2 words[WORDS];
#pragma unroll
      for (int q = 0; q < WORDS; q++)
        words[q] = tile[k * tile_width + base + LO + q];
      ((even[slot (k, DX)] = column_key<(DX - R) * CH, LO> (words)), ...);
      ((odd[slot (k, DX)] = column_key<(DX - R) * CH + 1, LO> (words)), ...);
    }
  constexpr int ops = selector<L, RANK, STEP>.count;
  constexpr int upper = selector<L, RANK, STEP>.answer[0], lower = selector<L, RANK, STEP>.answer[STEP - 1];
  select_lanes<L, RANK, STEP, false, false> (even, std::make_integer_sequence<int, ops> ());
  select_lanes<L, RANK, STEP, true, split_pipes<R>> (odd, std::make_integer_sequence<int, ops> ());
  out[0] = make_uint2 (even[upper], odd[upper]);
  out[STEP - 1] = make_uint2 (even[lower], odd[lower]);
}

/* Words of a row left and right of a column kernel's outputs that their
 * windows reach: column P of the window reads words down to P >> 2 and up
 * to (P + 2) >> 2, P from -R * CH to R * CH + 1. */
template <int R, int CH> constexpr int columns_halo = (R * CH + 3) / 4;

/* Output words of a column kernel's block: its threads sort one tile column
 * each, the outer ones only for their neighbours' windows. */
template <int R, int CH> constexpr int columns_outputs = COLUMNS_THREADS - 2 * columns_halo<R, CH>;

/* u8, square, radius R, CH channels, rank RANK. Per step of STEP output
 * rows, each thread sorts the columns of one aligned word of the row, split
 * into its even and odd bytes as two 16-bit lanes each, into a shared tile
 * as wide as the block: the window rows all the step's outputs share,
 * sorted, then each output's own row. The HALO threads at either end only
 * sort: a second pass for the halo words, by one warp and with loads not
 * prefetched, kept the other warps waiting at the barrier. Sorting is per lane,
 * so a column at any byte offset is the sorted column words' lanes regrouped
 * (one byte permute at most). Then the pruned selection network gives the
 * thread's two even and two odd outputs of each of the STEP rows. */
template <int R, int CH, int RANK>
__global__ void __launch_bounds__ (COLUMNS_THREADS, columns_min_blocks<R>)
median_columns_kernel (cfx_stripe s)
{
  constexpr int L = 2 * R + 1, STEP = rows_per_step<R>;
  constexpr int SORTED = L - STEP + 1, TILE_ROWS = SORTED + (STEP - 1) * 2;
  constexpr int RAW = L + STEP - 1; /* input rows of a step */
  constexpr int HALO = columns_halo<R, CH>, TILE = COLUMNS_THREADS;
  static_assert (COLUMNS_ROWS % STEP == 0, "a block's rows split into whole steps");
  static_assert (columns_outputs<R, CH> > 0, "the halo fits the block");
  __shared__ uint2 tiles[2][TILE_ROWS * TILE]; /* two, so one barrier a step suffices */
  const int row_bytes = s.width * CH, last_row = s.rows + 2 * s.halo - 1;
  /* Thread t sorts tile column t, row word w; it outputs word w if it is
   * none of the halo's. */
  const int w = blockIdx.x * columns_outputs<R, CH> - HALO + (int) threadIdx.x;
  const bool outputs = threadIdx.x >= HALO && threadIdx.x < TILE - HALO && 4 * w < row_bytes;
  const int y0 = blockIdx.y * COLUMNS_ROWS, y1 = min (y0 + COLUMNS_ROWS, s.rows);
  /* The column's raw words stay in registers from step to step: each step
   * loads STEP new rows, a step ahead of their use. */
  auto load = [&] (int row) {
    return load_word (s.d_src + (size_t) min (row, last_row) * s.src_pitch, 4 * w, row_bytes, CH);
  };
  unsigned raw[RAW]; /* input rows y - R .. y + STEP - 1 + R */
#pragma unroll
  for (int k = 0; k < RAW; k++)
    raw[k] = load (y0 + s.halo - R + k);
  for (int y = y0; y < y1; y += STEP)
    {
      uint2 *tile = tiles[(y / STEP) & 1];
      unsigned even[RAW], odd[RAW];
#pragma unroll
      for (int k = 0; k < RAW; k++)
        {
          even[k] = __byte_perm (raw[k], 0x64646464, 0x4240); /* 0x6400 + byte a lane */
          odd[k] = __byte_perm (raw[k], 0x64646464, 0x4341);
        }
#pragma unroll
      for (int k = 0; k + STEP < RAW; k++)
        raw[k] = raw[k + STEP];
#pragma unroll
      for (int j = 0; j < STEP; j++)
        raw[RAW - STEP + j] = load (y + s.halo - R + RAW + j);
      /* shared rows: all but the first and last input rows at STEP 2 */
      sort_lanes<SORTED> (even + STEP - 1, std::make_integer_sequence<int, sorter<SORTED>.net.count> ());
      sort_lanes<SORTED> (odd + STEP - 1, std::make_integer_sequence<int, sorter<SORTED>.net.count> ());
      uint2 *column = tile + threadIdx.x;
      store_sorted<SORTED> (column, TILE, even + STEP - 1, odd + STEP - 1, std::make_integer_sequence<int, SORTED> ());
      if (STEP == 2)
        {
          column[SORTED * TILE] = make_uint2 (even[0], odd[0]);
          column[(SORTED + 1) * TILE] = make_uint2 (even[RAW - 1], odd[RAW - 1]);
        }
      __syncthreads ();
      if (outputs)
        {
          uint2 out[STEP];
          select_from_tile<R, CH, RANK, STEP> (tile, TILE, threadIdx.x, out, std::make_integer_sequence<int, L> ());
          /* The lanes' low bytes; rows are padded to 256 bytes on the
           * device: a whole word always fits. */
#pragma unroll
          for (int j = 0; j < STEP; j++)
            if (y + j < y1)
              *(unsigned *) (s.d_dst + (size_t) (y + j) * s.dst_pitch + 4 * w) = __byte_perm (out[j].x, out[j].y, 0x6240);
        }
    }
}

template <int R, int CH, int... RANK>
bool
launch_columns (const cfx_stripe *s, int rank, std::integer_sequence<int, RANK...>)
{
  int words = (s->width * CH + 3) / 4;
  constexpr int out = columns_outputs<R, CH>;
  dim3 grid ((words + out - 1) / out, (s->rows + COLUMNS_ROWS - 1) / COLUMNS_ROWS);
  return ((rank == RANK
           && (median_columns_kernel<R, CH, RANK><<<grid, COLUMNS_THREADS, 0, s->stream>>> (*s), true))
          || ...);
}

/* The column kernels built: every rank of 3x3, the median of 5x5 and 7x7. */
template <int CH>
bool
launch_columns (const cfx_stripe *s, int r, int rank)
{
  switch (r)
    {
    case 1: return launch_columns<1, CH> (s, rank, std::make_integer_sequence<int, 9> ());
    case 2: return launch_columns<2, CH> (s, rank, std::integer_sequence<int, 12> ());
    case 3: return launch_columns<3, CH> (s, rank, std::integer_sequence<int, 24> ());
    default: return false;
    }
}

struct median_ctx
{
  const median_plan *p;
  int                rank;
  int               *d_half; /* the plan's column half-heights on the device */
  cfx_context       *cx;
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
  if (m->p->radius <= MAX_COLUMNS_RADIUS && m->p->shape == CUDAFX_SHAPE_SQUARE)
    {
      bool launched;
      switch (s->channels)
        {
        case 1: launched = launch_columns<1> (s, m->p->radius, m->rank); break;
        case 2: launched = launch_columns<2> (s, m->p->radius, m->rank); break;
        case 3: launched = launch_columns<3> (s, m->p->radius, m->rank); break;
        default: launched = launch_columns<4> (s, m->p->radius, m->rank); break;
        }
      if (launched)
        return cfx_check_launch ("median", "median_columns_kernel");
    }
  /* Other ranks: packed networks up to 5x5; at 7x7 the network outgrows the
   * registers and selection by counting is faster. */
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
  dim3 grid ((s->width + HIST_THREADS - 1) / HIST_THREADS, (s->rows + HIST_SEGMENT - 1) / HIST_SEGMENT,
             s->channels);
  /* byte counts while the window holds at most 255 keys */
  const bool bytes = (2 * r + 1) * (2 * r + 1) <= 255;
  auto kernel = bytes ? median_histogram_kernel<unsigned char> : median_histogram_kernel<unsigned short>;
  size_t shared_bytes = (2 * r + 1) * sizeof (int) + 256 * HIST_THREADS * (bytes ? 1 : 2);
  cudafx_status st = cfx_allow_shared (m->cx, (const void *) kernel, shared_bytes, "median");
  if (st)
    return st;
  kernel<<<grid, HIST_THREADS, shared_bytes, s->stream>>> (*s, r, m->rank, m->d_half);
  return cfx_check_launch ("median", "median_histogram_kernel");
}

} // namespace

extern "C" cudafx_status
cudafx_median_cuda (const cudafx_image *src, cudafx_image *dst, const median_plan *plan,
                    const cudafx_options *o)
{
  cfx_call call;
  cudafx_status s = cfx_begin (call, "median", o, CFX_LANE_ASKED);
  if (s)
    return s;
  median_ctx m = { plan, plan->rank, NULL, call.cx };
  if (src->type == CUDAFX_U8 && plan->radius > MAX_REGISTER_RADIUS)
    {
      size_t bytes = sizeof (int) * (2 * plan->radius + 1);
      if ((s = cfx_buffer (call.cx, CFX_SLOT_AUX, bytes, (void **) &m.d_half, "median")) ||
          (s = cfx_check (cudaMemcpyAsync (m.d_half, plan->half, bytes, cudaMemcpyHostToDevice, call.cx->stream),
                          "median", "copy to device")))
        return s;
    }
  return cfx_run_stripes (call.cx, "median", src, dst, plan->radius, CUDAFX_BORDER_CLAMP, 0, median_stripe, &m, o);
}
