/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Median / percentile filter on the GPU; core/median.c is the CPU reference.
 *
 * Every kernel finds exact order statistics, so the output equals the CPU's
 * bit for bit:
 * - median_columns_kernel (u8, square, every rank of 3x3): separable
 *   sorting networks after Adams 2021, "Fast median filters using separable
 *   sorting networks". A block walks down 16 output rows, keeping each
 *   column's raw words in registers (the next row loaded a step ahead of its
 *   use). Per row each thread sorts the window column of one aligned 4-byte
 *   word, its even and its odd bytes as two 16-bit lanes a word, into a
 *   shared tile. Sorting is per lane, so the sorted column at any byte
 *   offset is a regrouping of the sorted words' lanes (one byte permute at
 *   most): columns are sorted once and shared by every output that uses
 *   them. The tile is as wide as the block; the threads at its ends sort
 *   the halo and output nothing. Each thread reads the tile words its
 *   window spans once for both streams, then selects its outputs with a
 *   network built at compile time (median_network.h): the rank-rows sorted
 *   across the columns, keys the row/column order rules out dropped, the
 *   rest merged, everything pruned backwards to the rank needed. Lanes hold
 *   0x6400 + byte, which also reads as the half float 1024 + byte, so the
 *   even outputs' network runs as 16-bit integer min/max and the odd
 *   outputs' as half-float min/max (sm_80 on).
 * - median_tile_kernel (u8, square, the median of 5x5 and 7x7): Adams'
 *   2-D tiles. Outputs that are neighbours in the same channel share most
 *   of their windows, so the block's sorted columns are regrouped by
 *   channel: a tile word holds one channel's columns x and x + W as two
 *   16-bit lanes, and a thread selects a 2x2 tile of outputs per lane (two
 *   rows, two adjacent pixels). Their windows share an (L-1) x (L-1) core,
 *   selected once; each tile column's own sorted column and each tile row's
 *   own keys are merged in once for the outputs that share them. At 7x7
 *   that is 153 min/max a register of two outputs, against 232 when only
 *   two rows shared (the column kernel's layout, which pairs bytes of
 *   different channels). Instruction issue bounds the kernel, the
 *   networks two thirds of it at 7x7, half at 5x5: on sm_90
 *   integer min/max issue in the ALU pipe at half rate, so half the full
 *   comparators are half-float arithmetic in the FMA pipe instead
 *   (min = a - relu (a - b), max = b + relu (a - b), exact on these
 *   integers), which balances the issue slots against the ALU pipe.
 * - median_packed_kernel (u8, square, the other ranks of 5x5): four
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
 * Timings of these kernels and of the ones they replaced: docs/BENCHMARKS.md,
 * "Median kernels" (earlier runs in its history). */
#include "context.cuh"
#include "median_network.h"

#include <math.h>
#include <utility>

namespace {

constexpr int SELECT_BLOCK_X = 32, SELECT_BLOCK_Y = 8;
constexpr int MAX_REGISTER_RADIUS = 3;  /* windows up to 7x7 in registers */
constexpr int MAX_PACKED_RADIUS = 2;    /* the other ranks of 5x5 */
constexpr int MAX_TILE_RADIUS = 3;      /* the median of 5x5 and 7x7 */
constexpr int COLUMNS_THREADS = 128;    /* tile words (4 bytes) across a block, halo included */
constexpr int COLUMNS_ROWS = 16;        /* output rows a column or tile block walks down */
constexpr int HIST_THREADS = 32;        /* one warp; bins interleaved by thread: no bank conflicts */
constexpr int HIST_SEGMENT = 64;        /* output rows per thread */

template <typename T> struct key_of;
/* known: whether a key may be MEDIAN_UNKNOWN_KEY (core/backend.h: a
 * non-finite value, left as it is and kept out of its neighbours' windows). */
template <> struct key_of<unsigned char>
{
  static constexpr int bits = 8;
  static constexpr bool known = false;
  __device__ static unsigned to (unsigned char v) { return v; }
  __device__ static unsigned char from (unsigned k) { return (unsigned char) k; }
};
template <> struct key_of<float>
{
  static constexpr int bits = 32;
  static constexpr bool known = true;
  __device__ static unsigned to (float v) { return median_known_key (v); }
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
median_select_kernel (cfx_stripe s, int r, int circle, int rank, int n, double percentile)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y; /* output row within the stripe */
  if (x >= s.width || y >= s.rows)
    return;
  T *out = (T *) (s.d_dst + (size_t) y * s.dst_pitch) + (size_t) x * s.channels;
  int cy = y + s.halo; /* centre row in the input stripe */
  for (int c = 0; c < s.channels; c++)
    {
      if (key_of<T>::known)
        {
          T centre = load<T> (s.d_src, s.src_pitch, cy, x, s.channels, c);
          if (key_of<T>::to (centre) == MEDIAN_UNKNOWN_KEY)
            {
              out[c] = centre;
              continue;
            }
        }
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
          int k = rank;
          if (key_of<T>::known)
            {
              int unknown = 0;
#pragma unroll
              for (int i = 0; i < N; i++)
                unknown += in[i] && keys[i] == MEDIAN_UNKNOWN_KEY;
              if (unknown)
                k = median_window_rank (percentile, n - unknown);
            }
          key = select_rank<T> (k, [&] (unsigned mid) {
            int n = 0;
#pragma unroll
            for (int i = 0; i < N; i++)
              n += in[i] && keys[i] <= mid;
            return n;
          });
        }
      else
        {
          /* count_le (mid): window keys <= mid */
          auto count_le = [&] (unsigned mid) {
            int m = 0;
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
                    m += key_of<T>::to (load<T> (s.d_src, s.src_pitch, cy + dy, xx, s.channels, c)) <= mid;
                  }
              }
            return m;
          };
          int k = rank;
          if (key_of<T>::known)
            {
              /* the finite values: those below the unknown key */
              int known = count_le (MEDIAN_UNKNOWN_KEY - 1);
              if (known < n)
                k = median_window_rank (percentile, known);
            }
          key = select_rank<T> (k, count_le);
        }
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
template <int L, int RANK> constexpr median_network::select_network<L, RANK> selector{};
template <int L, int RANK> constexpr median_network::tile_network<L, RANK> tiler{};

/* The networks run with every slot index a compile-time constant, so the
 * keys stay in registers whatever the compiler's unrolling heuristics decide.
 * sort_bytes: four 8-bit lanes a word (__vminu4, emulated on sm_75..90);
 * sort_lanes and run_network: two 16-bit lanes (__vminu2, one instruction
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

/* Full comparators of the tile network that run as half-float arithmetic in
 * the FMA pipe (fma_compare, 3 instructions) rather than as 2 integer
 * min/max in the ALU pipe, which issues every other cycle: FMA_EIGHTHS of
 * every 8 (by position in the network). Half balances the two limits, the
 * issue slots and the ALU pipe (docs/BENCHMARKS.md, "Median kernels", times
 * other shares). */
constexpr int FMA_EIGHTHS = 4;

/* A pruned network (median_network::half_network: min/max halves and
 * copies) on one stream of lanes. HALF: min/max as half floats, so that the
 * column kernel's two streams issue as different instructions. FMA: the
 * tile kernel's share of full comparators as fma_compare (copies are free:
 * registers renamed). */
template <const auto &NET, bool HALF, bool FMA, int... I>
__device__ __forceinline__ void
run_network (unsigned *v, std::integer_sequence<int, I...>)
{
  ((void) ([&] {
     constexpr int a = NET.a[I], b = NET.b[I];
     constexpr bool to_a = NET.min_to_a[I], to_b = NET.max_to_b[I];
     if constexpr (NET.copy[I])
       v[b] = v[a];
     else if constexpr (FMA && to_a && to_b && I % 8 < FMA_EIGHTHS)
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

/* A sorted column into its tile column, k-th smallest at column[k *
 * rows_apart]: key (slot) is what a sorter<N> slot stores, the slot an
 * std::integral_constant so that keys stay in registers. */
template <int N, typename T, typename Key, int... K>
__device__ __forceinline__ void
store_sorted (T *column, int rows_apart, Key key, std::integer_sequence<int, K...>)
{
  ((column[K * rows_apart] = key (std::integral_constant<int, sorter<N>.order[K]> ())), ...);
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

/* The thread's even and odd outputs: every tile word of the tile's L rows
 * (the window rows, sorted per column) is read once for both streams (a
 * column needs one or two words of one stream), then the pruned selection
 * networks run, even outputs by integer min/max and odd ones by half-float
 * min/max. */
template <int R, int CH, int RANK, int... DX>
__device__ __forceinline__ uint2
select_from_tile (const uint2 *tile, int tile_width, int base, std::integer_sequence<int, DX...>)
{
  constexpr int L = 2 * R + 1;
  /* Words read, from the thread's own: column P reads word P >> 2 and, when
   * P & 2, the next, so floor ((P + 2) / 4) last, most for P = R * CH + 1. */
  constexpr int LO = (-R * CH) >> 2, WORDS = ((R * CH + 3) >> 2) - LO + 1;
  unsigned even[L * L], odd[L * L]; /* tile row k, column DX: slot DX * L + k */
#pragma unroll
  for (int k = 0; k < L; k++)
    {
      uint2 words[WORDS];
#pragma unroll
      for (int q = 0; q < WORDS; q++)
        words[q] = tile[k * tile_width + base + LO + q];
      ((even[DX * L + k] = column_key<(DX - R) * CH, LO> (words)), ...);
      ((odd[DX * L + k] = column_key<(DX - R) * CH + 1, LO> (words)), ...);
    }
  constexpr int ops = selector<L, RANK>.count, answer = selector<L, RANK>.answer[0];
  run_network<selector<L, RANK>, false, false> (even, std::make_integer_sequence<int, ops> ());
  run_network<selector<L, RANK>, true, false> (odd, std::make_integer_sequence<int, ops> ());
  return make_uint2 (even[answer], odd[answer]);
}

/* Words of a row left and right of a column kernel's outputs that their
 * windows reach: column P of the window reads words down to P >> 2 and up
 * to (P + 2) >> 2, P from -R * CH to R * CH + 1. */
template <int R, int CH> constexpr int columns_halo = (R * CH + 3) / 4;

/* Output words of a column kernel's block: its threads sort one tile column
 * each, the outer ones only for their neighbours' windows. */
template <int R, int CH> constexpr int columns_outputs = COLUMNS_THREADS - 2 * columns_halo<R, CH>;

/* u8, square, radius R, CH channels, rank RANK (built for 3x3, every
 * rank). Per output row, each thread sorts the window column of one
 * aligned word of the row, split into its even and odd bytes as two 16-bit
 * lanes each, into a shared tile as wide as the block. The HALO threads at
 * either end only sort: a second pass for the halo words, by one warp and
 * with loads not prefetched, kept the other warps waiting at the barrier.
 * Sorting is per lane, so a column at any byte offset is the sorted column
 * words' lanes regrouped (one byte permute at most). Then the pruned
 * selection network gives the thread's two even and two odd outputs. */
template <int R, int CH, int RANK>
__global__ void __launch_bounds__ (COLUMNS_THREADS)
median_columns_kernel (cfx_stripe s)
{
  constexpr int L = 2 * R + 1;
  constexpr int HALO = columns_halo<R, CH>, TILE = COLUMNS_THREADS;
  static_assert (columns_outputs<R, CH> > 0, "the halo fits the block");
  __shared__ uint2 tiles[2][L * TILE]; /* two, so one barrier a step suffices */
  const int row_bytes = s.width * CH, last_row = s.rows + 2 * s.halo - 1;
  /* Thread t sorts tile column t, row word w; it outputs word w if it is
   * none of the halo's. */
  const int w = blockIdx.x * columns_outputs<R, CH> - HALO + (int) threadIdx.x;
  const bool outputs = threadIdx.x >= HALO && threadIdx.x < TILE - HALO && 4 * w < row_bytes;
  const int y0 = blockIdx.y * COLUMNS_ROWS, y1 = min (y0 + COLUMNS_ROWS, s.rows);
  /* The column's raw words stay in registers from row to row: each step
   * loads the next row, a step ahead of its use. */
  auto load = [&] (int row) {
    return load_word (s.d_src + (size_t) min (row, last_row) * s.src_pitch, 4 * w, row_bytes, CH);
  };
  unsigned raw[L]; /* input rows y - R .. y + R */
#pragma unroll
  for (int k = 0; k < L; k++)
    raw[k] = load (y0 + s.halo - R + k);
  for (int y = y0; y < y1; y++)
    {
      uint2 *tile = tiles[y & 1];
      unsigned even[L], odd[L];
#pragma unroll
      for (int k = 0; k < L; k++)
        {
          even[k] = __byte_perm (raw[k], 0x64646464, 0x4240); /* 0x6400 + byte a lane */
          odd[k] = __byte_perm (raw[k], 0x64646464, 0x4341);
        }
#pragma unroll
      for (int k = 0; k + 1 < L; k++)
        raw[k] = raw[k + 1];
      raw[L - 1] = load (y + s.halo + R + 1);
      sort_lanes<L> (even, std::make_integer_sequence<int, sorter<L>.net.count> ());
      sort_lanes<L> (odd, std::make_integer_sequence<int, sorter<L>.net.count> ());
      store_sorted<L> (tile + threadIdx.x, TILE, [&] (auto slot) { return make_uint2 (even[slot.value], odd[slot.value]); },
                       std::make_integer_sequence<int, L> ());
      __syncthreads ();
      if (outputs)
        {
          const uint2 out = select_from_tile<R, CH, RANK> (tile, TILE, threadIdx.x, std::make_integer_sequence<int, L> ());
          /* The lanes' low bytes; rows are padded to 256 bytes on the
           * device: a whole word always fits. */
          *(unsigned *) (s.d_dst + (size_t) y * s.dst_pitch + 4 * w) = __byte_perm (out.x, out.y, 0x6240);
        }
    }
}

/* The column kernels built: every rank of 3x3. */
template <int CH, int... RANK>
void
launch_columns (const cfx_stripe *s, int rank, std::integer_sequence<int, RANK...>)
{
  int words = (s->width * CH + 3) / 4;
  constexpr int out = columns_outputs<1, CH>;
  dim3 grid ((words + out - 1) / out, (s->rows + COLUMNS_ROWS - 1) / COLUMNS_ROWS);
  ((rank == RANK ? median_columns_kernel<1, CH, RANK><<<grid, COLUMNS_THREADS, 0, s->stream>>> (*s) : (void) 0), ...);
}

/* The median tile kernel's shape for CH channels: W tile words a channel
 * plane's row (each word two 16-bit lanes, columns W apart), 2W output
 * pixels a block, and one selecting thread a pair of tile words, so that a
 * warp selects in one plane. */
template <int CH> constexpr int tile_words = CH >= 3 ? 64 : 256 / CH;
template <int CH> constexpr int tile_threads = CH * tile_words<CH> / 2;

/* The tile row's key-pair words in registers, slots as tile_network
 * numbers them. Tile row k of plane c holds, at word j, the columns
 * x0 - R + j (low lane) and x0 + W - R + j (high lane); the thread's outputs
 * are columns 2p + R and 2p + R + 1 of each lane. */
template <int R, int... J>
__device__ __forceinline__ void
tile_row_words (const unsigned *row, int k, unsigned *v, std::integer_sequence<int, J...>)
{
  constexpr int L = 2 * R + 1, H = L - 1;
  using net = median_network::tile_network<L, 0>;
  unsigned w[L + 1];
  ((*(uint2 *) &w[2 * J] = *(const uint2 *) &row[2 * J]), ...);
  if (k < H)
    {
      v[net::LEFT + k] = w[0];
      v[net::RIGHT + k] = w[L];
#pragma unroll
      for (int c = 0; c < H; c++)
        v[c * H + k] = w[1 + c];
    }
  else
#pragma unroll
    for (int j = 0; j <= L; j++)
      v[(k == H ? net::UPPER : net::LOWER) + j] = w[j];
}

/* One output row of a tile thread: columns 0 and 1 of each lane from d on,
 * lane 1's FAR bytes further; `left` columns of the row from d on. Plain
 * conditional stores off one pointer that the caller keeps from step to
 * step: with the address worked out from the row inside, the compiler
 * recomputed it for every store, each behind its own branch
 * (docs/BENCHMARKS.md, "Median kernels"). */
template <int CH, int FAR>
__device__ __forceinline__ void
store_tile_row (unsigned char *d, int left, unsigned l, unsigned r)
{
  if (left > 0)
    d[0] = (unsigned char) l;
  if (left > 1)
    d[CH] = (unsigned char) r;
  if (left > FAR / CH)
    d[FAR] = (unsigned char) (l >> 16);
  if (left > FAR / CH + 1)
    d[FAR + CH] = (unsigned char) (r >> 16);
}

/* f (std::integral_constant<int, phase>) for a phase known only at run
 * time, so that f can index registers by it. */
template <int... P, typename F>
__device__ __forceinline__ void
phase_switch (int phase, std::integer_sequence<int, P...>, F f)
{
  ((phase == P ? f (std::integral_constant<int, P> ()) : (void) 0), ...);
}

/* u8 median of L x L windows, radius R 2 or 3 (Adams 2021's 2-D tiles).
 * The block's CH x W x 2 sorted column keys are regrouped by channel into
 * a tile: plane c's word j pairs the columns x0 - R + j and x0 + W - R + j
 * as 16-bit lanes 0x6400 + byte, so that every min/max serves two outputs
 * W pixels apart and each word holds one channel: horizontally adjacent
 * outputs of a channel lie in neighbouring words. Per step of two output
 * rows, each thread sorts the columns of its (up to SORT_K) words over the
 * two rows' L - 1 shared input rows into the tile, followed by the upper
 * and the lower output's own row as loaded; its raw words stay in
 * registers, the next rows loaded a step ahead. Then each thread reads the
 * L + 1 words of its plane that its 2x2 outputs per lane span and runs the
 * tile network (median_network.h): the four windows' shared (L-1)^2 core
 * selected once, each column's own column and each row's own keys merged in
 * once for the outputs that share them. */
template <int R, int CH>
__global__ void __launch_bounds__ (tile_threads<CH>)
median_tile_kernel (cfx_stripe s)
{
  constexpr int L = 2 * R + 1, H = L - 1, RANK = L * L / 2, RAW = L + 1, TILE_ROWS = H + 2;
  constexpr int W = tile_words<CH>, THREADS = tile_threads<CH>, TW = W + 2 * R; /* words a plane row */
  constexpr int WORDS = CH * TW, SORT_K = (WORDS + THREADS - 1) / THREADS;
  static_assert (W % 64 == 0 && COLUMNS_ROWS % 2 == 0, "warps select in one plane, steps of two rows");
  __shared__ __align__ (16) unsigned tiles[2][TILE_ROWS * WORDS]; /* two, so one barrier a step suffices */
  const int x0 = blockIdx.x * 2 * W, last_row = s.rows + 2 * s.halo - 1;
  const int y0 = blockIdx.y * COLUMNS_ROWS, y1 = min (y0 + COLUMNS_ROWS, s.rows);
  /* Sorted words: t = j * CH + c (consecutive threads, consecutive bytes);
   * byte offsets of the two lanes' columns, clamped to the row. Rows are
   * addressed once a step for all words (the block's rows are the same for
   * every thread), each load one 32-bit offset from its row. */
  unsigned lo_byte[SORT_K], hi_byte[SORT_K], tile_at[SORT_K];
#pragma unroll
  for (int m = 0; m < SORT_K; m++)
    {
      const int t = threadIdx.x + m * THREADS, j = t / CH, c = t % CH;
      lo_byte[m] = min (max (x0 - R + j, 0), s.width - 1) * CH + c;
      hi_byte[m] = min (max (x0 + W - R + j, 0), s.width - 1) * CH + c;
      tile_at[m] = c * TW + j;
    }
  auto input_row = [&] (int row) {
    const unsigned char *p = s.d_src + (size_t) (unsigned) min (row, last_row) * s.src_pitch;
    asm ("" : "+l"(p)); /* opaque: else each load's address redid row * pitch (64-bit) */
    return p;
  };
  auto load = [&] (int m, const unsigned char *row) {
    return (unsigned) __ldg (row + lo_byte[m]) | (unsigned) __ldg (row + hi_byte[m]) << 16 | 0x64006400u;
  };
  /* Input rows y - R .. y + 1 + R, row y - R in slot 2 * phase: each step
   * loads the next two rows into the two slots it is done with. */
  unsigned raw[SORT_K][RAW];
#pragma unroll
  for (int k = 0; k < RAW; k++)
    {
      const unsigned char *row = input_row (y0 + s.halo - R + k);
#pragma unroll
      for (int m = 0; m < SORT_K; m++)
        if (threadIdx.x + m * THREADS < WORDS)
          raw[m][k] = load (m, row);
    }
  /* Selecting thread: plane c, words 2p .. 2p + L of each tile row; its
   * outputs from column x0 + 2p on, `left` columns to the row's end. */
  const int c = threadIdx.x / (W / 2), p = threadIdx.x % (W / 2), left = s.width - x0 - 2 * p;
  unsigned char *out = s.d_dst + (size_t) y0 * s.dst_pitch + (size_t) (x0 + 2 * p) * CH + c;
  int phase = 0;
  for (int y = y0; y < y1; y += 2, out += 2 * s.dst_pitch, phase = phase + 1 < RAW / 2 ? phase + 1 : 0)
    {
      unsigned *tile = tiles[(y / 2) & 1];
      const unsigned char *next0 = input_row (y + s.halo - R + RAW), *next1 = input_row (y + s.halo - R + RAW + 1);
      /* The phase a compile-time constant, so every raw slot is a fixed
       * register: with the rows shifted down the slots instead, the
       * compiler moved each word's rows from register to register. */
      phase_switch (phase, std::make_integer_sequence<int, RAW / 2> (), [&] (auto ph) {
        constexpr int O = 2 * decltype (ph)::value; /* slot of row y - R */
#pragma unroll
        for (int m = 0; m < SORT_K; m++)
          if (threadIdx.x + m * THREADS < WORDS)
            {
              unsigned v[RAW];
#pragma unroll
              for (int k = 0; k < RAW; k++)
                v[k] = raw[m][(O + k) % RAW];
              raw[m][O] = load (m, next0);
              raw[m][O + 1] = load (m, next1);
              sort_lanes<H> (v + 1, std::make_integer_sequence<int, sorter<H>.net.count> ());
              store_sorted<H> (tile + tile_at[m], WORDS, [&] (auto slot) { return v[1 + slot.value]; },
                               std::make_integer_sequence<int, H> ());
              tile[H * WORDS + tile_at[m]] = v[0];
              tile[(H + 1) * WORDS + tile_at[m]] = v[RAW - 1];
            }
      });
      __syncthreads ();
      unsigned v[tiler<L, RANK>.slots];
#pragma unroll
      for (int k = 0; k < TILE_ROWS; k++)
        tile_row_words<R> (tile + k * WORDS + c * TW + 2 * p, k, v, std::make_integer_sequence<int, (L + 1) / 2> ());
      run_network<tiler<L, RANK>, false, true> (v, std::make_integer_sequence<int, tiler<L, RANK>.count> ());
      /* The lanes' low bytes: answers (upper left, upper right, lower left,
       * lower right), columns x0 + 2p (+ 1) and W further. */
      constexpr int ul = tiler<L, RANK>.answer[0], ur = tiler<L, RANK>.answer[1];
      constexpr int ll = tiler<L, RANK>.answer[2], lr = tiler<L, RANK>.answer[3];
      store_tile_row<CH, W * CH> (out, left, v[ul], v[ur]);
      if (y + 1 < y1)
        store_tile_row<CH, W * CH> (out + s.dst_pitch, left, v[ll], v[lr]);
    }
}

template <int R, int CH>
void
launch_tile (const cfx_stripe *s)
{
  constexpr int W = tile_words<CH>;
  dim3 grid ((s->width + 2 * W - 1) / (2 * W), (s->rows + COLUMNS_ROWS - 1) / COLUMNS_ROWS);
  median_tile_kernel<R, CH><<<grid, tile_threads<CH>, 0, s->stream>>> (*s);
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
    case 1: median_select_kernel<T, 1><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank, m->p->n, m->p->percentile); break;
    case 2: median_select_kernel<T, 2><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank, m->p->n, m->p->percentile); break;
    case 3: median_select_kernel<T, 3><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank, m->p->n, m->p->percentile); break;
    default: median_select_kernel<T, 0><<<grid, block, 0, s->stream>>> (*s, r, circle, m->rank, m->p->n, m->p->percentile); break;
    }
  return cfx_check_launch ("median", "median_select_kernel");
}

cudafx_status
median_stripe (void *ctx, const cfx_stripe *s)
{
  const median_ctx *m = (const median_ctx *) ctx;
  if (s->type == CUDAFX_F32)
    return launch_select<float> (m, s);
  const int r = m->p->radius;
  const bool square = m->p->shape == CUDAFX_SHAPE_SQUARE;
  if (square && r == 1)
    {
      constexpr auto ranks = std::make_integer_sequence<int, 9> ();
      switch (s->channels)
        {
        case 1: launch_columns<1> (s, m->rank, ranks); break;
        case 2: launch_columns<2> (s, m->rank, ranks); break;
        case 3: launch_columns<3> (s, m->rank, ranks); break;
        default: launch_columns<4> (s, m->rank, ranks); break;
        }
      return cfx_check_launch ("median", "median_columns_kernel");
    }
  if (square && r <= MAX_TILE_RADIUS && m->rank == (2 * r + 1) * (2 * r + 1) / 2)
    {
      switch (s->channels)
        {
        case 1: r == 2 ? launch_tile<2, 1> (s) : launch_tile<3, 1> (s); break;
        case 2: r == 2 ? launch_tile<2, 2> (s) : launch_tile<3, 2> (s); break;
        case 3: r == 2 ? launch_tile<2, 3> (s) : launch_tile<3, 3> (s); break;
        default: r == 2 ? launch_tile<2, 4> (s) : launch_tile<3, 4> (s); break;
        }
      return cfx_check_launch ("median", "median_tile_kernel");
    }
  /* Other ranks of 5x5: the packed network; at 7x7 it outgrows the
   * registers and selection by counting is faster. */
  if (r == MAX_PACKED_RADIUS && square)
    {
      dim3 block (64, 4);
      dim3 grid (((s->width * s->channels + 3) / 4 + block.x - 1) / block.x, (s->rows + block.y - 1) / block.y);
      median_packed_kernel<MAX_PACKED_RADIUS><<<grid, block, 0, s->stream>>> (*s, m->rank);
      return cfx_check_launch ("median", "median_packed_kernel");
    }
  if (m->p->radius <= MAX_REGISTER_RADIUS)
    return launch_select<unsigned char> (m, s);
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
