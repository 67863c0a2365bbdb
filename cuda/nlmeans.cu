/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local means on the GPU, and its noise estimate; core/nlmeans.c is the
 * CPU reference and its header gives the formula (Buades, Coll, Morel 2005;
 * IPOL 2011 weights) and the order of the arithmetic, which this file
 * follows: with nvcc --fmad=false and no fused multiply-add below except in
 * the weighted sums and the weight's exponent, the patch distances are the
 * same floats as the CPU's. The weights are not: the CPU's exp is a
 * polynomial (core/nlmeans.h's nlmeans_exp_neg, about 20 instructions),
 * the GPU takes the hardware's 2^x (ex2 below, one): both within 1e-5 of
 * exp, relative, which docs/TESTING.md's Determinism ("within 1 of the
 * CPU on u8, 1/255 on f32") allows. The weighted values are also summed in another order.
 *
 * Same fast formulation as the CPU (Darbon et al., ISBI 2008): the loop runs
 * over search offsets and each offset's squared-difference image is filtered
 * over the patch with separable weights g (flat or Gaussian, symmetric;
 * flat u8 sums slide along when they are exact integers). Offsets come in
 * pairs, d(p, p+o) = d(p+o, p): one distance image serves o and -o. One
 * thread block owns a TILE_W x TILE_H tile of output pixels and keeps the
 * tile plus its halo (search + patch radius) in shared memory, loaded once:
 * u8 pixels as one 32-bit word of colour bytes (squared differences summed
 * over the channels by __vabsdiffu4 and __dp4a, exact integers as on the
 * CPU), f32 as float colour planes. Per pair o = (dx, dy), dy > 0 or dy = 0
 * and dx > 0:
 *   AB. the horizontal patch sums h = g_0 e(x-P) + ... + g_2P e(x+P) of the
 *       squared differences e(q) = sum_c (I_c(q) - I_c(q+o))^2, for the
 *       rows and columns both offsets need (the tile, and the tile moved by
 *       -o), into shared memory; each task one row and RUN columns, its
 *       squared differences in registers;
 *   CD. each thread one column and RPT rows of the tile: the vertical sums
 *       g_0 h(y-P) + ... + g_2P h(y+P) at p (weight of o) and at p - o
 *       (weight of -o), the weight exp (-max (d * scale - offset, 0)) as
 *       nlmeans_exp_neg clamps it (computed as weight_of below), the
 *       weighted sums, the sum of weights and the largest weight, kept in
 *       registers across offsets.
 * The u8 kernels run n rows of the half window at once (two, or four for
 * flat colour patches: rows_at_once), o_i = (dx, dy + i): AB makes the n
 * images (each task's own pixels read once), and CD reads each neighbour
 * once for the n weights it takes (o_i's neighbour of a pixel is o_i+1's
 * neighbour of the pixel above), so a neighbour's load and conversion, the
 * barriers and the per-offset set-up are shared by n offsets.
 * After the last offset the centre is added with weight 1 or the largest
 * weight (plan.centre_max); alpha is copied. Borders clamp: the stripe
 * runner makes up rows, the tile load clamps columns.
 *
 * The search window's rows are split into chunks (launches), the partial
 * sums kept in the stripe's scratch between them, so a long run reports
 * progress and answers cancel between chunks.
 *
 * Noise estimate (automatic mode, or a manual run that reports sigma) and
 * the noise-model fit's histograms (automatic mode): noise_kernel counts
 * core/nlmeans.h's nlmeans_noise_bin (every interior row), or
 * nlmeans_fit_bin (the fit's rows), of one colour channel per block into
 * shared-memory histograms of integer counts, added to the device's with
 * integer atomics: order-free, so the counts, and from them the noise model,
 * sigma and the plan (made by the engine, core/nlmeans.c and
 * nlmeans_noise.c), equal the CPU's. An image that fits the device in one
 * stripe with the largest halo the estimate can lead to is uploaded once
 * for the fit, the estimate and the filter; a larger one is counted stripe
 * by stripe (a 1-row halo) before it is filtered.
 *
 * Camera noise (plan.vst): the stripe's pixels go through the
 * variance-stabilising transform on the device (vst_forward_kernel, into f32
 * colour planes in the scratch), are denoised there by the f32 kernel and
 * come back through the exact unbiased inverse (vst_inverse_kernel) into the
 * image's own type: the copies move the image's bytes, not f32, and the
 * per-value arithmetic is core/nlmeans.h's, as on the CPU. */
#include "context.cuh"

#include <math.h>
#include <string.h>
#include <new>
#include <type_traits>

namespace {

constexpr int TILE_W = 32, TILE_H = 32, THREADS = 128;
constexpr int RPT = TILE_W * TILE_H / THREADS; /* CD: rows per thread, warps across columns */
constexpr int RUN = 8;                         /* AB: columns per task */
static_assert (TILE_W % 32 == 0 && THREADS % TILE_W == 0 && RPT * THREADS == TILE_W * TILE_H,
               "CD: whole warps across the tile's columns");
static_assert (TILE_H >= 32 && THREADS % 32 == 0, "AB: the top 32 rows of a run a warp, more rows after");
/* Pixel-pair operations per launch before the search window is split further. */
constexpr double WORK_PER_CHUNK = 2147483648.0;
constexpr int CHUNKS_WITH_PROGRESS = 4;
constexpr int NOISE_THREADS = 256;

/* How a kernel stages and compares pixels. */
enum pixel_kind { U8_FLAT, U8_WEIGHTED, F32 };

/* Search radii are served by two kernel sizes: up to 10 (every automatic
 * colour plan, and grey below sigma 30) and up to 20 (the parameter's
 * range). The shared-memory strides follow the size, not S, so they are
 * compile-time constants: every shared load and store in the offset loop
 * then addresses a register plus an immediate, where strides known only at
 * run time cost an address computation each. */
constexpr int SEARCH_SMALL = 10, SEARCH_MAX = 20;

constexpr int
search_bound (int S)
{
  return S <= SEARCH_SMALL ? SEARCH_SMALL : SEARCH_MAX;
}

/* Shared-memory layout of a block for patch radius P, search radius S and
 * its bound SB = search_bound (S): the image tile (ih rows of iw columns,
 * placed as for SB: ihs rows at an odd stride iws, so a warp reading a
 * column of 32 rows hits 32 banks; RUN - 1 spare columns for AB's last
 * task) and the horizontal sums (hrows x hcols at an odd stride). */
struct layout
{
  int ih, iw, ihs, iws, hrows, hcols, hs;
  __host__ __device__ constexpr layout (int P, int S, int SB)
    : ih (TILE_H + 2 * (S + P)), iw (TILE_W + 2 * (S + P) + RUN - 1), ihs (TILE_H + 2 * (SB + P)),
      iws ((TILE_W + 2 * (SB + P) + RUN - 1) | 1), hrows (TILE_H + SB + 2 * P),
      hcols ((TILE_W + SB + RUN - 1) / RUN * RUN), hs (hcols | 1)
  {
  }
};

struct nlm_args
{
  int   search_radius, radius; /* S and S + P: the tile's halo */
  int   dy0, dy1;              /* rows of the half window of this launch: dy0 <= dy < dy1 */
  int   first, last;           /* start from zero sums / add the centre, normalise, store */
  int   colours;               /* of the image; the kernel's NA may be larger (zero channels) */
  float neg_scale2, offset2;   /* the plan's -dist_scale and dist_offset times log2 (e): weight_of */
  int   centre_max;
  float g[2 * NLMEANS_MAX_PATCH_RADIUS + 1]; /* patch weights */
};

/* Byte C of a packed pixel as a float. */
template <int C>
__device__ __forceinline__ float
byte_float (unsigned px)
{
  return __uint_as_float (__byte_perm (px, 0x4bu, 0x4550 + C)) - 8388608.0f;
}

/* Squared difference of tile pixels i and j summed over the channels, as
 * a T (int: u8 only). */
template <int NA, bool U8, typename T = float>
__device__ __forceinline__ T
distance (const unsigned *px, const float *planes, int plane, int i, int j)
{
  if constexpr (std::is_same<T, int>::value)
    {
      unsigned d = __vabsdiffu4 (px[i], px[j]);
      return (int) __dp4a (d, d, 0u);
    }
  else if constexpr (U8)
    {
      /* The sum (at most 4 * 255^2 < 2^23) added to the bits of 2^23: the
       * float 2^23 + sum, exact, without a conversion instruction. */
      unsigned d = __vabsdiffu4 (px[i], px[j]);
      return __uint_as_float (__dp4a (d, d, 0x4b000000u)) - 8388608.0f;
    }
  else
    {
      float e = 0.0f;
#pragma unroll
      for (int c = 0; c < NA; c++)
        {
          float d = planes[c * plane + i] - planes[c * plane + j];
          e += d * d; /* not fused: --fmad=false, as on the CPU */
        }
      return e;
    }
}

/* Tile pixel i's colour values. */
template <int NA, bool U8>
__device__ __forceinline__ void
pixel (const unsigned *px, const float *planes, int plane, int i, float (&v)[NA])
{
  if constexpr (U8)
    {
      unsigned p = px[i];
      v[0] = byte_float<0> (p);
      if constexpr (NA > 1)
        v[1] = byte_float<1> (p);
      if constexpr (NA > 2)
        v[2] = byte_float<2> (p);
      if constexpr (NA > 3)
        v[3] = byte_float<3> (p);
    }
  else
#pragma unroll
    for (int c = 0; c < NA; c++)
      v[c] = planes[c * plane + i];
}

/* Patch weight i of 0..2P. The plan's weights are symmetric, g_i = g_2P-i
 * (core/nlmeans.h), so only g_0 .. g_P are read: a value's products with
 * g_i and g_2P-i are then one multiplication, which the compiler shares
 * between the two sums that use it (the same floats, one multiplication
 * fewer a term). */
template <int P>
__device__ __forceinline__ float
patch_weight (const nlm_args &a, int i)
{
  return a.g[i <= P ? i : 2 * P - i];
}

/* 2^y by the special-function unit (MUFU.EX2), relative error about
 * 2^-22 (PTX ISA, ex2.approx): one instruction. Inline PTX because no
 * spelling of it in CUDA C gives that one instruction in this file: exp2f
 * and __expf become ex2.approx.f32 without .ftz (nvcc's default, kept: the
 * noise and transform kernels here must round as the CPU does), which
 * ptxas wraps in a compare and two predicated multiplications that keep
 * subnormal results, and -use_fast_math would change every float operation
 * in the file. The flush to zero changes nothing here: weight_of's y is
 * never below -126, and a subnormal y gives 1 either way. */
__device__ __forceinline__ float
ex2 (float y)
{
  float r;
  asm ("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
}

/* nlmeans_exp_neg's smallest weight: it clamps x to 87 (so the weight of a
 * far patch is exp (-87), normal, never 0). In log2 units. */
constexpr float EX2_LOWEST = -87.0f * 1.44269504f;

/* The weight of patch distance d: nlmeans_exp_neg (d * dist_scale -
 * dist_offset) as 2^y, y = dist_offset log2 (e) - d dist_scale log2 (e)
 * (one fused multiply-add; the host folded log2 (e) into the plan's
 * factors) clamped as nlmeans_exp_neg clamps x: x <= 0 (y >= 0) weighs 1
 * exactly, x past 87 weighs exp (-87) (tiny, not 0: where every patch is
 * that far, the CPU's weights are all equal and the result is the window's
 * mean; with 0 it would be the centre alone), and a NaN distance (a NaN
 * pixel) the same as a far patch, never a NaN weight. CENTRE_ONE (u8, the
 * centre weighing 1) drops the lower clamp: there the weights past 87 (at
 * most exp (-87) each, here 0 or less) change the result by less than
 * 441 * 255 * exp (-87), and u8 has no NaN; one instruction fewer a weight. */
template <bool CENTRE_ONE = false>
__device__ __forceinline__ float
weight_of (float d, const nlm_args &a)
{
  float y = __fmaf_rn (d, a.neg_scale2, a.offset2);
  return ex2 (fminf (CENTRE_ONE ? y : fmaxf (y, EX2_LOWEST), 0.0f));
}

/* Whether the patch sums are integers below 2^24 however they are summed
 * (u8, flat patch, the window moved by one sum plus and one minus): then
 * sliding sums are exact, the same floats as the CPU's sums term by term. */
template <int P, int NA, bool FLAT>
__device__ constexpr bool
exact_sums ()
{
  return FLAT && (2 * P + 1) * (2 * P + 2) * NA * 65025 <= (1 << 24);
}

/* Whether a patch distance (the whole patch's sum) stays below 2^23 too, so
 * the sums can be kept as integers: a sliding integer sum is one IADD3
 * where the float one is two FADDs, the squared distances need no
 * conversion, and 2^23 + d, the float whose bits are those of 2^23 plus
 * the integer d, gives d back as a float with one FADD (the same float the
 * float sums give, d being an exact integer). */
template <int P, int NA, bool FLAT>
__device__ constexpr bool
integer_sums ()
{
  return exact_sums<P, NA, FLAT> () && (2 * P + 1) * (2 * P + 1) * NA * 65025 < (1 << 23);
}

/* The horizontal sums' type in shared memory. */
template <int P, int NA, bool FLAT>
using hsum = typename std::conditional<integer_sums<P, NA, FLAT> (), int, float>::type;

/* The bits of the float 2^23. */
constexpr int BITS_2_23 = 0x4b000000;

/* The patch distances d of the thread's RPT pixels from the column of
 * horizontal sums starting at hcol (RPT + 2P rows, top to bottom, hs apart,
 * a compile-time constant). */
template <int P, int NA, bool FLAT>
__device__ __forceinline__ void
patch_distances (const hsum<P, NA, FLAT> *hcol, int hs, const nlm_args &a, float (&d)[RPT])
{
  constexpr bool INT = integer_sums<P, NA, FLAT> ();
  hsum<P, NA, FLAT> hv[RPT + 2 * P];
#pragma unroll
  for (int i = 0; i < RPT + 2 * P; i++)
    hv[i] = hcol[i * hs];
  int di = 0; /* INT: the bits of 2^23 + d */
#pragma unroll
  for (int j = 0; j < RPT; j++)
    {
      if constexpr (INT)
        {
          if (j > 0)
            di = di + (int) hv[j + 2 * P] - (int) hv[j - 1];
          else
            {
              di = BITS_2_23 + (int) hv[0];
#pragma unroll
              for (int i = 1; i <= 2 * P; i++)
                di += (int) hv[i];
            }
          d[j] = __int_as_float (di) - 8388608.0f;
        }
      else if (exact_sums<P, NA, FLAT> () && j > 0)
        d[j] = d[j - 1] + hv[j + 2 * P] - hv[j - 1];
      else
        {
          d[j] = FLAT ? hv[j] : patch_weight<P> (a, 0) * hv[j];
#pragma unroll
          for (int i = 1; i <= 2 * P; i++)
            d[j] += FLAT ? hv[j + i] : patch_weight<P> (a, i) * hv[j + i];
        }
    }
}

/* A neighbour v of weight w into a pixel's sums: the weighted channels, the
 * sum of weights and, unless FLAT, the largest weight. FLAT kernels run only
 * plans whose centre weighs 1 (nlmeans_stripe). */
template <int NA, bool FLAT>
__device__ __forceinline__ void
add_neighbour (float w, const float (&v)[NA], float (&acc)[NA + 2])
{
#pragma unroll
  for (int c = 0; c < NA; c++)
    acc[c] = __fmaf_rn (w, v[c], acc[c]);
  acc[NA] += w;
  if constexpr (!FLAT)
    acc[NA + 1] = fmaxf (acc[NA + 1], w);
}

/* A neighbour's weight w, or 0 when it is an f32 pixel holding a
 * non-finite value (nlmeans_unknown, core/nlmeans.h: its value would pull
 * the output towards 0); u8 pixels have none. */
template <int NA, bool U8>
__device__ __forceinline__ float
candidate_weight (float w, const float (&v)[NA])
{
  if constexpr (!U8)
#pragma unroll
    for (int c = 0; c < NA; c++)
      w = nlmeans_unknown (v[c]) ? 0.0f : w;
  return w;
}

/* CD for one offset: the distances of the thread's RPT pixels from the
 * horizontal sums at hcol, their weights, and the weighted neighbours, the
 * first at tile index nb (rows iws apart, a compile-time constant). */
template <int P, int NA, bool U8, bool FLAT>
__device__ __forceinline__ void
weigh (const hsum<P, NA, FLAT> *hcol, int hs, const unsigned *px, const float *planes, int plane, int nb,
       int iws, const nlm_args &a, float (&acc)[RPT][NA + 2])
{
  float d[RPT];
  patch_distances<P, NA, FLAT> (hcol, hs, a, d);
#pragma unroll
  for (int j = 0; j < RPT; j++)
    {
      float v[NA];
      pixel<NA, U8> (px, planes, plane, nb + j * iws, v);
      add_neighbour<NA, FLAT> (candidate_weight<NA, U8> (weight_of<FLAT> (d[j], a), v), v, acc[j]);
    }
}

/* CD for N offsets (dx, dy + i), i < N, whose neighbours are one row apart,
 * on one side: at p (MINUS false), offset i's neighbour of the thread's
 * pixel j is neighbour m = j + i; at p - o (MINUS true), m = j + N - 1 - i.
 * So RPT + N - 1 neighbours, read and converted once each, serve N RPT
 * weights. Offset i's distances come from the sums at hcol + i hplane (and
 * N - 1 - i rows down at p - o); the first neighbour is tile index nb. */
template <int P, int NA, bool FLAT, int N, bool MINUS>
__device__ __forceinline__ void
weigh_rows (const hsum<P, NA, FLAT> *hcol, int hplane, int hs, const unsigned *px, int nb, int iws,
            const nlm_args &a, float (&acc)[RPT][NA + 2])
{
  float d[N][RPT];
#pragma unroll
  for (int i = 0; i < N; i++)
    patch_distances<P, NA, FLAT> (hcol + i * hplane + (MINUS ? (N - 1 - i) * hs : 0), hs, a, d[i]);
#pragma unroll
  for (int m = 0; m < RPT + N - 1; m++)
    {
      float v[NA];
      pixel<NA, true> (px, nullptr, 0, nb + m * iws, v);
#pragma unroll
      for (int i = 0; i < N; i++)
        {
          const int j = m - (MINUS ? N - 1 - i : i);
          if (j >= 0 && j < RPT)
            add_neighbour<NA, FLAT> (weight_of<FLAT> (d[i][j], a), v, acc[j]);
        }
    }
}

/* AB for N offsets (dx, dy + i), i < N: the horizontal sums of their squared
 * differences into N images hplane apart, Hs row hr tile row hr - dy -
 * (N - 1) - P, column hc tile column hc + lo, for the rows and columns
 * both signs of each offset need. A task is a row and a run of RUN
 * columns: first the top 32 rows of each run, a warp a run, then the other
 * rows of all runs one run after another. Consecutive tasks of a run are
 * consecutive rows, which a warp reads and writes at odd strides in
 * distinct banks; a warp's tasks in two runs (RUN columns apart) collide in
 * some bank, which takes the warp's load or store twice: with whole warps
 * on the top rows that happens only among the rest (1.19 passes a
 * warp-wide load or store on average at P 1 or 2, S 10, where runs of
 * rows_n tasks one after another took 1.55). The N offsets' squared
 * differences share the task's own pixels (read once). */
template <int P, int NA, int KIND, int N>
__device__ __forceinline__ void
horizontal_sums (hsum<P, NA, KIND == U8_FLAT> *Hs, int hplane, int hs, const unsigned *px, const float *planes,
                 int plane, int iws, int R, int dx, int dy, const nlm_args &a)
{
  constexpr bool U8 = KIND != F32, FLAT = KIND == U8_FLAT;
  using H = hsum<P, NA, FLAT>;
  const int lo = dx > 0 ? -dx : 0, dw = TILE_W + abs (dx);
  const int rows_n = TILE_H + dy + N - 1 + 2 * P, runs = (dw + RUN - 1) / RUN;
  const int rest = rows_n - 32; /* >= 2P */
  const unsigned magic = ((1u << 20) + rest - 1) / rest; /* u / rest for u < 2^12 */
  for (int t = threadIdx.x; t < runs * rows_n; t += THREADS)
    {
      int run, hr;
      if (t < runs * 32)
        run = t >> 5, hr = t & 31;
      else
        {
          int u = t - runs * 32;
          run = (int) (((unsigned) u * magic) >> 20);
          hr = 32 + u - run * rest;
        }
      int q = (hr - dy - (N - 1) - P + R) * iws + lo + run * RUN - P + R; /* e[0]'s pixel */
      H e[N][RUN + 2 * P];
#pragma unroll
      for (int k = 0; k < RUN + 2 * P; k++)
#pragma unroll
        for (int i = 0; i < N; i++)
          e[i][k] = distance<NA, U8, H> (px, planes, plane, q + k, q + k + (dy + i) * iws + dx);
#pragma unroll
      for (int i = 0; i < N; i++)
        {
          H *hrow = Hs + i * hplane + hr * hs + run * RUN;
          H h = 0;
#pragma unroll
          for (int k = 0; k < RUN; k++)
            {
              if (exact_sums<P, NA, FLAT> () && k > 0)
                h = h + e[i][k + 2 * P] - e[i][k - 1];
              else if constexpr (FLAT)
                {
                  h = e[i][k];
#pragma unroll
                  for (int j = 1; j <= 2 * P; j++)
                    h += e[i][k + j];
                }
              else
                {
                  h = patch_weight<P> (a, 0) * e[i][k];
#pragma unroll
                  for (int j = 1; j <= 2 * P; j++)
                    h += patch_weight<P> (a, j) * e[i][k + j];
                }
              hrow[k] = h;
            }
        }
    }
}

/* Offset rows a kernel weighs at once (weigh_rows): four for u8 colours
 * with flat patches and search radii up to SEARCH_SMALL (every automatic
 * colour plan's), faster than two though their registers and four sum
 * images hold an SM to 4 blocks where two allowed 5 (docs/BENCHMARKS.md,
 * "nl-means kernels"). Two for the other u8 kernels: with four the Gaussian-patch
 * kernels would spill, the grey ones fall from 7 blocks an SM to 4, larger
 * radii's shared memory to 2 or 3. One for f32. */
__host__ __device__ constexpr int
rows_at_once (int kind, int SB, int NA)
{
  return kind == F32 ? 1 : kind == U8_FLAT && SB == SEARCH_SMALL && NA >= 3 ? 4 : 2;
}

/* AB and CD for the N offsets (dx, dy + i), i < N, of a u8 kernel, the
 * thread's pixels in column tx from row row0: Hs row hr is tile row
 * hr - dy - (N - 1) - P in all N images, so the pixels' patches start at
 * Hs row row0 + dy + N - 1 at p for every offset, and at row0 + N - 1 - i
 * at p - o for offset i (weigh_rows adds the rows of i). */
template <int P, int NA, int KIND, int N>
__device__ __forceinline__ void
weigh_offset_rows (hsum<P, NA, KIND == U8_FLAT> *Hs, int hplane, int hs, const unsigned *px, int iws, int R,
                   int row0, int tx, int dx, int dy, const nlm_args &a, float (&acc)[RPT][NA + 2])
{
  constexpr bool FLAT = KIND == U8_FLAT;
  const int lo = dx > 0 ? -dx : 0;
  horizontal_sums<P, NA, KIND, N> (Hs, hplane, hs, px, nullptr, 0, iws, R, dx, dy, a);
  __syncthreads ();
  weigh_rows<P, NA, FLAT, N, false> (Hs + (row0 + dy + N - 1) * hs + tx - lo, hplane, hs, px,
                                     (row0 + dy + R) * iws + tx + dx + R, iws, a, acc);
  weigh_rows<P, NA, FLAT, N, true> (Hs + row0 * hs + tx - dx - lo, hplane, hs, px,
                                    (row0 - dy - (N - 1) + R) * iws + tx - dx + R, iws, a, acc);
}

/* Blocks an SM must hold at once, which sets a thread's register budget
 * (THREADS 128): 4 (128 registers). Bounding the u8 colour kernels with
 * Gaussian patches to 5 blocks (96 registers) paid while they weighed one
 * offset at a time; weighing two (weigh_rows) they spill at 96. */
template <int NA, int KIND>
constexpr int
min_blocks ()
{
  return 4;
}

/* The kernel for patch radius P, NA channels, pixels KIND and search radii
 * up to SB (SEARCH_SMALL or SEARCH_MAX). */
template <int P, int NA, int KIND, int SB>
__global__ void __launch_bounds__ (THREADS, (min_blocks<NA, KIND> ()))
nlmeans_kernel (cfx_stripe s, nlm_args a)
{
  constexpr bool U8 = KIND != F32, FLAT = KIND == U8_FLAT;
  using H = hsum<P, NA, FLAT>;
  extern __shared__ unsigned shm[];
  const int R = a.radius, S = a.search_radius;
  const layout L (P, S, SB);
  const int plane = L.ihs * L.iws;
  const unsigned *px = shm;          /* U8: ih x iws packed pixels */
  const float *planes = (float *) shm; /* F32: NA planes ih x iws */
  H *Hs = (H *) (shm + (U8 ? 1 : NA) * plane);
  const int tid = threadIdx.x;
  const int bx0 = blockIdx.x * TILE_W, by0 = blockIdx.y * TILE_H; /* stripe coordinates */
  const int channels = s.channels;

  /* The tile plus halo, 0..255 scale (f32 through nlmeans_patch_value:
   * non-finite values read as 0 and are marked); channels past the image's
   * colours are 0. Rows past the stripe's buffer only feed outputs past its last row
   * (never stored), so clamping them there just keeps the reads inside. */
  const int buffer_rows = s.rows + 2 * s.halo;
  for (int i = tid; i < L.ih * L.iw; i += THREADS)
    {
      int r = i / L.iw, col = i - r * L.iw;
      int y = min (max (by0 - R + r + s.halo, 0), buffer_rows - 1);
      int x = min (max (bx0 - R + col, 0), s.width - 1);
      const unsigned char *row = s.d_src + (size_t) y * s.src_pitch;
      size_t e = (size_t) x * channels;
      if (U8)
        {
          unsigned v = 0;
#pragma unroll
          for (int c = 0; c < NA; c++)
            v |= c < a.colours ? (unsigned) row[e + c] << (8 * c) : 0u;
          shm[r * L.iws + col] = v;
        }
      else
#pragma unroll
        for (int c = 0; c < NA; c++)
          ((float *) shm)[c * plane + r * L.iws + col]
            = c < a.colours ? nlmeans_patch_value (((const float *) row)[e + c]) : 0.0f;
    }

  /* CD's outputs: column tx, tile rows row0 .. row0 + RPT - 1. */
  const int tx = tid % TILE_W, row0 = tid / TILE_W * RPT;
  const int out_x = bx0 + tx;
  float *scratch = (float *) s.d_scratch;
  const size_t scratch_row = (size_t) s.width * (NA + 2);
  /* acc[j]: weighted sums of the NA channels, sum of weights, largest weight
   * (not kept by FLAT kernels: ACC channels). */
  constexpr int ACC = FLAT ? NA + 1 : NA + 2;
  float acc[RPT][NA + 2];
#pragma unroll
  for (int j = 0; j < RPT; j++)
    {
      int out_y = by0 + row0 + j;
      bool inside = out_x < s.width && out_y < s.rows;
#pragma unroll
      for (int ch = 0; ch < ACC; ch++)
        acc[j][ch] = !a.first && inside
                   ? scratch[(size_t) out_y * scratch_row + (size_t) ch * s.width + out_x] : 0.0f;
    }
  __syncthreads ();

  /* The half window's offsets, in rows dy of offsets (dx, dy). The u8
   * kernels take up to rows_at_once rows where the launch has them (dy >
   * 0): for each dx, AB the sums of (dx, dy) .. (dx, dy + n - 1) into n
   * images, CD all n with each neighbour read once (weigh_rows), one
   * barrier pair for them. Per offset the sums serve o at p and -o at p
   * (its distance at p - o). */
  constexpr int ROWS = rows_at_once (KIND, SB, NA);
  const int hplane = L.hrows * L.hs;
  for (int dy = a.dy0; dy < a.dy1;)
    {
      const int n = !U8 || dy == 0 ? 1 : dy + ROWS - 1 < a.dy1 ? ROWS : dy + 1 < a.dy1 ? 2 : 1;
      for (int dx = dy ? -S : 1; dx <= S; dx++)
        {
          const int lo = dx > 0 ? -dx : 0;
          if (n == 1)
            {
              /* Hs row hr is tile row hr - dy - P. */
              horizontal_sums<P, NA, KIND, 1> (Hs, hplane, L.hs, px, planes, plane, L.iws, R, dx, dy, a);
              __syncthreads ();
              weigh<P, NA, U8, FLAT> (Hs + (row0 + dy) * L.hs + tx - lo, L.hs, px, planes, plane,
                                      (row0 + dy + R) * L.iws + tx + dx + R, L.iws, a, acc);
              weigh<P, NA, U8, FLAT> (Hs + row0 * L.hs + tx - dx - lo, L.hs, px, planes, plane,
                                      (row0 - dy + R) * L.iws + tx - dx + R, L.iws, a, acc);
            }
          else if constexpr (ROWS > 1)
            {
              if (n == ROWS)
                weigh_offset_rows<P, NA, KIND, ROWS> (Hs, hplane, L.hs, px, L.iws, R, row0, tx, dx, dy, a, acc);
              else
                weigh_offset_rows<P, NA, KIND, 2> (Hs, hplane, L.hs, px, L.iws, R, row0, tx, dx, dy, a, acc);
            }
          __syncthreads (); /* Hs is rewritten by the next AB */
        }
      dy += n;
    }

  /* Store: partial sums to the scratch, or the result (alpha and non-finite
   * values copied). */
#pragma unroll
  for (int j = 0; j < RPT; j++)
    {
      int out_y = by0 + row0 + j;
      if (out_x >= s.width || out_y >= s.rows)
        continue;
      if (!a.last)
        {
#pragma unroll
          for (int ch = 0; ch < ACC; ch++)
            scratch[(size_t) out_y * scratch_row + (size_t) ch * s.width + out_x] = acc[j][ch];
          continue;
        }
      const unsigned char *src = s.d_src + (size_t) (out_y + s.halo) * s.src_pitch;
      unsigned char *dst = s.d_dst + (size_t) out_y * s.dst_pitch;
      size_t e = (size_t) out_x * channels;
      const float wc = FLAT ? 1.0f : nlmeans_centre_weight (a.centre_max, acc[j][NA + 1]);
      const float ws = acc[j][NA] + wc;
      float centre[NA];
      pixel<NA, U8> (px, planes, plane, (row0 + j + R) * L.iws + tx + R, centre);
#pragma unroll
      for (int ch = 0; ch < NA; ch++)
        {
          if (ch >= a.colours)
            break;
          float v = (acc[j][ch] + wc * centre[ch]) / ws;
          if (U8)
            {
              v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
              dst[e + ch] = (unsigned char) (v + 0.5f);
            }
          else
            ((float *) dst)[e + ch] = nlmeans_unknown (centre[ch]) ? ((const float *) src)[e + ch] : v / 255.0f;
        }
      if (channels > a.colours && U8)
        dst[e + a.colours] = src[e + a.colours];
      else if (channels > a.colours)
        ((float *) dst)[e + a.colours] = ((const float *) src)[e + a.colours];
    }
}

typedef void (*nlm_kernel_fn) (cfx_stripe, nlm_args);

/* Colour channels a kernel handles for an image's colours: 2 go as 3 with a
 * zero channel (rare layouts share the RGB kernels). */
int
kernel_channels (int colours)
{
  return colours == 2 ? 3 : colours;
}

template <int P, int SB>
nlm_kernel_fn
kernel_for_patch (int NA, int kind)
{
  static const nlm_kernel_fn kernels[3][3] = {
    { nlmeans_kernel<P, 1, U8_FLAT, SB>, nlmeans_kernel<P, 1, U8_WEIGHTED, SB>, nlmeans_kernel<P, 1, F32, SB> },
    { nlmeans_kernel<P, 3, U8_FLAT, SB>, nlmeans_kernel<P, 3, U8_WEIGHTED, SB>, nlmeans_kernel<P, 3, F32, SB> },
    { nlmeans_kernel<P, 4, U8_FLAT, SB>, nlmeans_kernel<P, 4, U8_WEIGHTED, SB>, nlmeans_kernel<P, 4, F32, SB> },
  };
  return kernels[NA == 1 ? 0 : NA == 3 ? 1 : 2][kind];
}

template <int SB>
nlm_kernel_fn
kernel_for_bound (int P, int NA, int kind)
{
  switch (P)
    {
    case 1:  return kernel_for_patch<1, SB> (NA, kind);
    case 2:  return kernel_for_patch<2, SB> (NA, kind);
    case 3:  return kernel_for_patch<3, SB> (NA, kind);
    case 4:  return kernel_for_patch<4, SB> (NA, kind);
    default: return kernel_for_patch<5, SB> (NA, kind);
    }
}

/* Kernel for patch radius P (1..5), search radius S (1..SEARCH_MAX: the
 * argument table's range, core/params.c, which the engine checks before a
 * backend runs), NA channels (1, 3, 4) and the pixels. */
nlm_kernel_fn
kernel_for (int P, int S, int NA, int kind)
{
  return search_bound (S) == SEARCH_SMALL ? kernel_for_bound<SEARCH_SMALL> (P, NA, kind)
                                          : kernel_for_bound<SEARCH_MAX> (P, NA, kind);
}

size_t
shared_bytes (int P, int S, int NA, int kind)
{
  const int SB = search_bound (S);
  const layout L (P, S, SB);
  const size_t tile = (kind == F32 ? (size_t) NA : 1) * L.ihs * L.iws;
  return sizeof (float) * (tile + (size_t) rows_at_once (kind, SB, NA) * L.hrows * L.hs);
}

/* The histograms of channel blockIdx.z over the interior pixels of image
 * rows y_first, y_first + step, ... < y_end of the stripe (their neighbours
 * are in it: halo >= 1): FIT the fit's bins (nlmeans_fit_bin), else the
 * noise estimate's (nlmeans_noise_bin). */
template <bool FIT>
__global__ void __launch_bounds__ (NOISE_THREADS)
noise_kernel (cfx_stripe s, int y_first, int y_end, int step, unsigned long long *hist)
{
  constexpr int BINS = FIT ? NLMEANS_FIT_BINS : NLMEANS_NOISE_BINS;
  extern __shared__ unsigned counts[]; /* BINS */
  for (int i = threadIdx.x; i < BINS; i += NOISE_THREADS)
    counts[i] = 0;
  __syncthreads ();
  const int channels = s.channels, c = blockIdx.z;
  for (int y = y_first + blockIdx.y * step; y < y_end; y += gridDim.y * step)
    {
      const unsigned char *row = s.d_src + (size_t) (y - s.y0 + s.halo) * s.src_pitch;
      for (int x = 1 + blockIdx.x * NOISE_THREADS + threadIdx.x; x < s.width - 1;
           x += gridDim.x * NOISE_THREADS)
        {
          float v[3][3]; /* as core/nlmeans.c's load_row */
#pragma unroll
          for (int i = 0; i < 3; i++)
#pragma unroll
            for (int j = 0; j < 3; j++)
              {
                const unsigned char *r = row + ((ptrdiff_t) i - 1) * (ptrdiff_t) s.src_pitch;
                size_t e = (size_t) (x - 1 + j) * channels + c;
                v[i][j] = s.type == CUDAFX_U8 ? (float) r[e] : ((const float *) r)[e] * 255.0f;
              }
          int b = FIT ? nlmeans_fit_bin (v[0], v[1], v[2]) : nlmeans_noise_bin (v[0], v[1], v[2]);
          if (b >= 0)
            atomicAdd (&counts[b], 1u);
        }
    }
  __syncthreads ();
  unsigned long long *hc = hist + (size_t) c * BINS;
  for (int i = threadIdx.x; i < BINS; i += NOISE_THREADS)
    if (counts[i])
      atomicAdd (&hc[i], (unsigned long long) counts[i]);
}

/* Grid-stride loops over n values. */
constexpr int VST_THREADS = 256;

/* The colour channels of the stripe's rows, halos included, transformed
 * into t (f32, colours channels a pixel, 0..1 scale), as
 * core/nlmeans_noise.c's nlmeans_vst_forward. */
__global__ void __launch_bounds__ (VST_THREADS)
vst_forward_kernel (cfx_stripe s, const nlmeans_vst *v, int colours, float *t)
{
  const size_t row = (size_t) s.width * colours, n = row * (s.rows + 2 * (size_t) s.halo);
  const size_t size = s.type == CUDAFX_U8 ? 1 : sizeof (float);
  for (size_t i = (size_t) blockIdx.x * VST_THREADS + threadIdx.x; i < n; i += (size_t) gridDim.x * VST_THREADS)
    {
      size_t y = i / row, k = i - y * row, x = k / colours;
      int c = (int) (k - x * colours);
      t[i] = nlmeans_vst_forward_value (v, c, s.type, s.d_src + y * s.src_pitch + (x * s.channels + c) * size);
    }
}

/* The stripe's output rows from u (as made by the forward kernel and
 * denoised) through the inverse into dst, alpha from the source, as
 * core/nlmeans_noise.c's nlmeans_vst_inverse. */
__global__ void __launch_bounds__ (VST_THREADS)
vst_inverse_kernel (cfx_stripe s, const nlmeans_vst *v, int colours, const float *u)
{
  const int channels = s.channels;
  const size_t row = (size_t) s.width * channels, n = row * s.rows;
  for (size_t i = (size_t) blockIdx.x * VST_THREADS + threadIdx.x; i < n; i += (size_t) gridDim.x * VST_THREADS)
    {
      size_t y = i / row, k = i - y * row, x = k / channels;
      int c = (int) (k - x * channels);
      unsigned char *d = s.d_dst + y * s.dst_pitch;
      if (c >= colours)
        {
          const unsigned char *a = s.d_src + (y + s.halo) * s.src_pitch;
          if (s.type == CUDAFX_U8)
            d[k] = a[k];
          else
            ((float *) d)[k] = ((const float *) a)[k];
          continue;
        }
      float r = nlmeans_vst_inverse_value (v, c, u[(y * s.width + x) * colours + c]);
      if (s.type == CUDAFX_U8)
        d[k] = (unsigned char) (r + 0.5f);
      else
        ((float *) d)[k] = r / 255.0f;
    }
}

struct nlm_ctx
{
  cfx_context          *cx;
  int                   colours;
  int                   na; /* the kernels' channels */
  const cudafx_options *o;
  const nlmeans_plan   *plan;
  int                   fit, step; /* what the counts are: the fit's (on every step-th row), else the estimate's */
  uint64_t             *hist;     /* the counts' destination on the host */
  unsigned long long   *d_hist;
  const nlmeans_vst    *d_vst;    /* plan->vst on the device */
};

/* Counts the stripe's rows into the device's histograms (zeroed by the first
 * stripe); after the last one, copies them to m->hist. */
cudafx_status
count_stripe (void *ctx, const cfx_stripe *s)
{
  nlm_ctx *m = (nlm_ctx *) ctx;
  const int colours = m->colours, bins = m->fit ? NLMEANS_FIT_BINS : NLMEANS_NOISE_BINS;
  const int step = m->fit ? m->step : 1;
  const size_t bytes = sizeof (unsigned long long) * colours * bins;
  cudafx_status st;
  if (s->y0 == 0 &&
      ((st = cfx_buffer (m->cx, CFX_SLOT_AUX, bytes, (void **) &m->d_hist, "nl-means")) ||
       (st = cfx_check (cudaMemsetAsync (m->d_hist, 0, bytes, s->stream), "nl-means", "memset"))))
    return st;

  /* Counted rows 1, 1 + step, ...: the first at or after the stripe's. */
  const int y_begin = s->y0 > 1 ? s->y0 : 1;
  const int y_first = 1 + (y_begin - 1 + step - 1) / step * step;
  const int y_end = s->y0 + s->rows < s->height - 1 ? s->y0 + s->rows : s->height - 1;
  if (y_first < y_end && s->width >= 3)
    {
      const int sms = m->cx->sms, rows = (y_end - y_first + step - 1) / step;
      const size_t shm = sizeof (unsigned) * bins;
      void (*kernel) (cfx_stripe, int, int, int, unsigned long long *)
        = m->fit ? noise_kernel<true> : noise_kernel<false>;
      if ((st = cfx_allow_shared (m->cx, (const void *) kernel, shm, "nl-means")))
        return st;
      /* Enough blocks to fill the device twice, each across a row. */
      int gx = (s->width - 2 + NOISE_THREADS - 1) / NOISE_THREADS;
      gx = gx < 2 * sms ? gx : 2 * sms;
      int gy = (2 * sms + gx - 1) / gx;
      gy = gy < rows ? gy : rows;
      kernel<<<dim3 (gx, gy, colours), NOISE_THREADS, shm, s->stream>>> (*s, y_first, y_end, step, m->d_hist);
      if ((st = cfx_check_launch ("nl-means", "noise_kernel")))
        return st;
    }
  if (s->y0 + s->rows < s->height)
    return CUDAFX_OK;
  static_assert (sizeof (uint64_t) == sizeof (unsigned long long), "the counts' host and device types");
  if ((st = cfx_check (cudaMemcpyAsync (m->hist, m->d_hist, bytes, cudaMemcpyDeviceToHost, s->stream),
                       "nl-means", "copy to host")) ||
      (st = cfx_check (cudaStreamSynchronize (s->stream), "nl-means", "noise_kernel")))
    return st;
  return CUDAFX_OK;
}

/* The filter on one stripe with m->plan. */
cudafx_status
nlmeans_stripe (void *ctx, const cfx_stripe *s)
{
  const nlm_ctx *m = (const nlm_ctx *) ctx;
  const nlmeans_plan *plan = m->plan;
  const int P = plan->patch_radius, S = plan->search_radius;
  const bool u8 = s->type == CUDAFX_U8;
  bool flat = true;
  for (int j = 0; j <= 2 * P; j++)
    flat = flat && plan->patch_weights[j] == 1.0f;
  /* A flat plan whose centre weighs as its nearest neighbour (no such
   * plan is made today) runs the Gaussian kernel, with weights 1. */
  const int kind = !u8 ? F32 : flat && !plan->centre_max ? U8_FLAT : U8_WEIGHTED;
  nlm_kernel_fn kernel = kernel_for (P, S, m->na, kind);
  size_t shm = shared_bytes (P, S, m->na, kind);
  cudafx_status st = cfx_allow_shared (m->cx, (const void *) kernel, shm, "nl-means");
  if (st)
    return st;

  /* Half-window rows per launch: bounded work, and with a progress callback
   * a few launches at least, so cancel is answered within a stripe. */
  const int rows = S + 1;
  double work = (double) s->width * s->rows * rows * (2 * S + 1);
  int chunks = (int) ceil (work / WORK_PER_CHUNK);
  const cudafx_options *o = m->o;
  if (o && o->progress && chunks < CHUNKS_WITH_PROGRESS)
    chunks = CHUNKS_WITH_PROGRESS;
  chunks = chunks < 1 ? 1 : chunks > rows ? rows : chunks;

  dim3 grid ((s->width + TILE_W - 1) / TILE_W, (s->rows + TILE_H - 1) / TILE_H);
  if (grid.y > 65535)
    return cudafx_fail (CUDAFX_ERR_CUDA, "nl-means: CUDA grid too tall for %d rows", s->rows);
  for (int i = 0; i < chunks; i++)
    {
      nlm_args a = { S, S + P, rows * i / chunks, rows * (i + 1) / chunks, i == 0, i == chunks - 1,
                     m->colours, (float) (-plan->dist_scale * M_LOG2E), (float) (plan->dist_offset * M_LOG2E),
                     plan->centre_max, {} };
      memcpy (a.g, plan->patch_weights, sizeof a.g);
      kernel<<<grid, THREADS, shm, s->stream>>> (*s, a);
      if ((st = cfx_check_launch ("nl-means", "nlmeans_kernel")))
        return st;
      if (a.last || !(o && o->progress))
        continue;
      if ((st = cfx_check (cudaStreamSynchronize (s->stream), "nl-means", "kernel")) ||
          (st = cudafx_progress (o, (s->y0 + s->rows * (double) (i + 1) / chunks) / s->height)))
        return st;
    }
  return CUDAFX_OK;
}

/* Grid of a grid-stride loop over n values: enough blocks to fill the device. */
static int
vst_blocks (const nlm_ctx *m, size_t n)
{
  size_t blocks = (n + VST_THREADS - 1) / VST_THREADS, most = 8 * (size_t) m->cx->sms;
  return (int) (blocks < 1 ? 1 : blocks < most ? blocks : most);
}

/* Behind the transform on one stripe: its rows (halos too) forward into the
 * f32 planes t, t denoised into u by the f32 kernel with m->plan, u back
 * through the inverse into the stripe's output. t and u follow the partial
 * sums in the stripe's scratch (the session sized it). */
cudafx_status
vst_stripe (void *ctx, const cfx_stripe *s)
{
  const nlm_ctx *m = (const nlm_ctx *) ctx;
  const int colours = m->colours;
  const size_t in_rows = s->rows + 2 * (size_t) s->halo, width = s->width;
  float *t = (float *) s->d_scratch + in_rows * width * (m->na + 2);
  float *u = t + in_rows * width * colours;
  cudafx_status st;
  vst_forward_kernel<<<vst_blocks (m, in_rows * width * colours), VST_THREADS, 0, s->stream>>> (*s, m->d_vst,
                                                                                                  colours, t);
  if ((st = cfx_check_launch ("nl-means", "vst_forward_kernel")))
    return st;
  cfx_stripe f = *s;
  f.d_src = (const unsigned char *) t;
  f.d_dst = (unsigned char *) u;
  f.src_pitch = f.dst_pitch = width * colours * sizeof (float);
  f.channels = colours;
  f.type = CUDAFX_F32;
  if ((st = nlmeans_stripe (ctx, &f)))
    return st;
  vst_inverse_kernel<<<vst_blocks (m, s->rows * width * s->channels), VST_THREADS, 0, s->stream>>> (*s, m->d_vst,
                                                                                                      colours, u);
  return cfx_check_launch ("nl-means", "vst_inverse_kernel");
}

} // namespace

/* A call: the device held from open to close; the image kept on it from
 * the count to the denoise when it fits one stripe with the largest halo
 * the plan can have. */
struct nlmeans_session
{
  cfx_call              call;
  const cudafx_image   *src;
  int                   max_halo;
  nlm_ctx               m;
  size_t                scratch_row; /* partial sums between launches: na + 2 planes; behind the
                                        transform also its two images' colours planes each */
  cfx_stripe            image;       /* the kept image, when loaded */
  int                   loaded;
  bool                  failed;      /* a CUDA error: drop the buffers at close */
};

static cudafx_status
session_status (nlmeans_session *ses, cudafx_status s)
{
  if (s == CUDAFX_ERR_CUDA)
    ses->failed = true;
  return s;
}

extern "C" cudafx_status
cudafx_nlmeans_cuda_open (const cudafx_image *src, int colours, int max_halo, int transformed,
                          const cudafx_options *o, nlmeans_session **out)
{
  nlmeans_session *ses = *out = new (std::nothrow) nlmeans_session ();
  if (!ses)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: out of memory");
  cudafx_status s = cfx_begin (ses->call, "nl-means", o, CFX_LANE_ASKED);
  ses->src = src;
  ses->max_halo = max_halo;
  ses->m = { ses->call.cx, colours, kernel_channels (colours), o, NULL, 0, 1, NULL, NULL, NULL };
  const size_t planes = ses->m.na + 2 + (transformed ? 2 * (size_t) colours : 0);
  if (!s && __builtin_mul_overflow ((size_t) src->width, sizeof (float) * planes, &ses->scratch_row))
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: image too large");
  return s;
}

/* The counts m->fit asks for into hist. */
static cudafx_status
count_image (nlmeans_session *ses, uint64_t *hist)
{
  cfx_context *cx = ses->call.cx;
  nlm_ctx *m = &ses->m;
  m->hist = hist;
  /* A denoise follows: one upload for the counts and the filter when the
   * image fits. */
  cudafx_status s = CUDAFX_OK;
  if (ses->max_halo > 0 && !ses->loaded &&
      (s = cfx_load_image (cx, "nl-means", ses->src, ses->max_halo, CUDAFX_BORDER_CLAMP, ses->scratch_row,
                           &ses->image, &ses->loaded, m->o)))
    return session_status (ses, s);
  if (ses->loaded)
    return session_status (ses, cfx_apply (cx, "nl-means", &ses->image, count_stripe, m, NULL, m->o));
  /* Else stripe by stripe (progress is the filter's). */
  cudafx_options quiet;
  if (m->o)
    {
      quiet = *m->o;
      quiet.progress = NULL;
    }
  return session_status (ses, cfx_run_stripes (cx, "nl-means", ses->src, NULL, 1, CUDAFX_BORDER_CLAMP, 0,
                                                count_stripe, m, m->o ? &quiet : NULL));
}

extern "C" cudafx_status
cudafx_nlmeans_cuda_count (nlmeans_session *ses, uint64_t *hist)
{
  ses->m.fit = 0;
  return count_image (ses, hist);
}

extern "C" cudafx_status
cudafx_nlmeans_cuda_count_levels (nlmeans_session *ses, int stride, uint64_t *hist)
{
  ses->m.fit = 1;
  ses->m.step = stride;
  return count_image (ses, hist);
}

extern "C" cudafx_status
cudafx_nlmeans_cuda_denoise (nlmeans_session *ses, const nlmeans_plan *plan, cudafx_image *dst)
{
  cfx_context *cx = ses->call.cx;
  nlm_ctx *m = &ses->m;
  m->plan = plan;
  const int halo = plan->search_radius + plan->patch_radius;
  cfx_stripe_fn fn = plan->vst ? vst_stripe : nlmeans_stripe;
  cudafx_status s;
  if (plan->vst)
    {
      /* The transform's tables, for the stripes' kernels (the counts are
       * done with the slot). */
      void *d_vst;
      if ((s = cfx_buffer (cx, CFX_SLOT_AUX, sizeof (nlmeans_vst), &d_vst, "nl-means")) ||
          (s = cfx_check (cudaMemcpyAsync (d_vst, plan->vst, sizeof (nlmeans_vst), cudaMemcpyHostToDevice,
                                           cx->stream), "nl-means", "copy to device")))
        return session_status (ses, s);
      m->d_vst = (const nlmeans_vst *) d_vst;
    }
  if (ses->loaded && halo <= ses->image.halo)
    {
      if (!(s = cfx_apply (cx, "nl-means", &ses->image, fn, m, dst, m->o)))
        s = cudafx_progress (m->o, 1.0);
      return session_status (ses, s);
    }
  return session_status (ses, cfx_run_stripes (cx, "nl-means", ses->src, dst, halo, CUDAFX_BORDER_CLAMP,
                                                ses->scratch_row, fn, m, m->o));
}

extern "C" void
cudafx_nlmeans_cuda_close (nlmeans_session *ses)
{
  if (ses && ses->failed && ses->call.cx)
    cfx_release_buffers (ses->call.cx); /* after a fault, start the next call from clean buffers */
  delete ses; /* releases the device */
}
