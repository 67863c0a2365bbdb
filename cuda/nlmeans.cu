/* Non-local means on the GPU; core/nlmeans.c is the CPU reference and its
 * header gives the formula (Buades, Coll, Morel 2005; IPOL 2011 weights) and
 * the order of the arithmetic, which this file follows: with nvcc
 * --fmad=false and no fused multiply-add below except in the weighted sums,
 * the patch distances and weights are the same floats as the CPU's; only the
 * order in which the weighted values are summed differs.
 *
 * Same fast formulation as the CPU (Darbon et al., ISBI 2008): the loop runs
 * over search offsets and each offset's squared-difference image is filtered
 * over the patch with separable weights g (flat or Gaussian). One thread
 * block owns a TILE_W x TILE_H tile of output pixels and keeps the tile plus
 * its halo (search + patch radius) as float colour planes in shared memory,
 * loaded once. Per offset o != 0:
 *   A. e = sum_c (I_c(q) - I_c(q+o))^2 for the tile plus the patch halo into
 *      shared memory; each thread keeps I_c(q) of its fixed positions in
 *      registers, so only the shifted pixel is read;
 *   B. horizontal sums g_0 e(x-P) + ... + g_2P e(x+P), each thread a run of
 *      RUN columns;
 *   C. vertical sums g_0 h(y-P) + ... + g_2P h(y+P), each thread one column
 *      and ROWS_PER_THREAD rows, the weight nlmeans_exp_neg (d * scale -
 *      offset), the weighted sum, the sum of weights and the largest weight,
 *      kept in registers across offsets.
 * After the last offset the centre is added with weight 1 or the largest
 * weight (plan.centre_max); alpha is copied. Borders clamp: the stripe
 * runner makes up rows, the tile load clamps columns.
 *
 * The search window's rows are split into chunks (launches), the partial
 * sums kept in the stripe's scratch between them, so a long run reports
 * progress and answers cancel between chunks. */
#include "context.cuh"

#include <math.h>
#include <string.h>

namespace {

constexpr int TILE_W = 32, TILE_H = 32, THREADS = 128;
constexpr int ROWS_PER_THREAD = TILE_H / (THREADS / 32); /* pass C: one warp per row band */
constexpr int RUN = 8;                                   /* pass B: columns per thread */
constexpr int RUNS = TILE_W / RUN;
constexpr int H_STRIDE = TILE_W + 1; /* odd: pass B's writes hit distinct banks */
constexpr int MAX_N = 4; /* colour channels */
/* Pixel-offset pairs per launch before the search window is split further. */
constexpr double WORK_PER_CHUNK = 2147483648.0;
constexpr int CHUNKS_WITH_PROGRESS = 4;

/* Squared differences of the tile plus the patch halo: E_W x E_H. */
template <int P> struct e_grid
{
  static constexpr int W = TILE_W + 2 * P, H = TILE_H + 2 * P;
  static constexpr int STRIDE = W + 1; /* odd: pass B's reads hit distinct banks */
  static constexpr int PER_THREAD = (W * H + THREADS - 1) / THREADS;
};

struct nlm_args
{
  int   search_radius, radius; /* S and S + P: the tile's halo */
  int   dy0, dy1;              /* search rows of this launch: dy0 <= dy < dy1 */
  int   first, last;           /* start from zero sums / add the centre, normalise, store */
  float scale, offset;         /* weight = nlmeans_exp_neg (d * scale - offset), d the patch sum */
  int   centre_max;
  float g[2 * NLMEANS_MAX_PATCH_RADIUS + 1]; /* patch weights */
};

template <int P, int N>
__global__ void __launch_bounds__ (THREADS)
nlmeans_kernel (cfx_stripe s, nlm_args a)
{
  using G = e_grid<P>;
  constexpr int RPT = ROWS_PER_THREAD;
  extern __shared__ float shm[];
  const int R = a.radius, S = a.search_radius;
  const int IW = TILE_W + 2 * R, IH = TILE_H + 2 * R, plane = IW * IH;
  float *img = shm;                  /* N planes IH x IW: tile rows/columns -R .. TILE+R-1 */
  float *E = img + N * plane;        /* G::H x G::STRIDE */
  float *Hs = E + G::H * G::STRIDE;  /* G::H x H_STRIDE */
  const int tid = threadIdx.x;
  const int bx0 = blockIdx.x * TILE_W, by0 = blockIdx.y * TILE_H; /* stripe coordinates */
  const int channels = s.channels;

  /* The tile plus halo, 0..255 scale. Rows past the stripe's buffer only
   * feed outputs past its last row (never stored), so clamping them there
   * just keeps the reads inside the buffer. */
  const int buffer_rows = s.rows + 2 * s.halo;
  for (int i = tid; i < N * plane; i += THREADS)
    {
      int c = i / plane, rem = i - c * plane, r = rem / IW, col = rem - r * IW;
      int y = min (max (by0 - R + r + s.halo, 0), buffer_rows - 1);
      int x = min (max (bx0 - R + col, 0), s.width - 1);
      const unsigned char *row = s.d_src + (size_t) y * s.src_pitch;
      size_t e = (size_t) x * channels + c;
      img[i] = s.type == CUDAFX_U8 ? (float) row[e] : ((const float *) row)[e] * 255.0f;
    }
  __syncthreads ();

  /* Pass A's positions of this thread, fixed across offsets: their plane
   * index and their own colour values. Positions past the grid (last round
   * only) use a valid index and are not stored. */
  int   base[G::PER_THREAD];
  float centre[G::PER_THREAD][N];
#pragma unroll
  for (int k = 0; k < G::PER_THREAD; k++)
    {
      int idx = min (tid + k * THREADS, G::W * G::H - 1);
      int r = idx / G::W, c = idx - r * G::W;
      base[k] = (r - P + R) * IW + (c - P + R);
#pragma unroll
      for (int ch = 0; ch < N; ch++)
        centre[k][ch] = img[ch * plane + base[k]];
    }

  /* Pass C's outputs: column tx, tile rows row0 .. row0 + RPT - 1. */
  const int tx = tid & 31, row0 = (tid >> 5) * RPT;
  const int out_x = bx0 + tx;
  float *scratch = (float *) s.d_scratch;
  const size_t scratch_row = (size_t) s.width * (N + 2);
  /* acc[j]: weighted sums of the N channels, sum of weights, largest weight. */
  float acc[RPT][N + 2];
#pragma unroll
  for (int j = 0; j < RPT; j++)
    {
      int out_y = by0 + row0 + j;
      bool inside = out_x < s.width && out_y < s.rows;
#pragma unroll
      for (int ch = 0; ch < N + 2; ch++)
        acc[j][ch] = !a.first && inside
                   ? scratch[(size_t) out_y * scratch_row + (size_t) ch * s.width + out_x] : 0.0f;
    }

  for (int dy = a.dy0; dy < a.dy1; dy++)
    for (int dx = -S; dx <= S; dx++)
      {
        if (dx == 0 && dy == 0)
          continue; /* the centre comes after the last offset */
        const int shift = dy * IW + dx;

        /* A: squared differences. E is free: pass B of the previous offset
         * finished before the barrier that preceded pass C. */
#pragma unroll
        for (int k = 0; k < G::PER_THREAD; k++)
          {
            int idx = tid + k * THREADS;
            if (idx < G::W * G::H)
              {
                float e = 0.0f;
#pragma unroll
                for (int ch = 0; ch < N; ch++)
                  {
                    float d = centre[k][ch] - img[ch * plane + base[k] + shift];
                    e += d * d; /* not fused: --fmad=false, as on the CPU */
                  }
                E[idx + idx / G::W] = e; /* row idx / W at stride W + 1 */
              }
          }
        __syncthreads ();

        /* B: horizontal patch sums, tile columns, rows -P .. TILE_H+P-1.
         * Hs is free: every thread left pass C before the barrier above. */
        for (int t = tid; t < G::H * RUNS; t += THREADS)
          {
            int r = t / RUNS, x0 = (t - r * RUNS) * RUN;
            float e[RUN + 2 * P];
#pragma unroll
            for (int i = 0; i < RUN + 2 * P; i++)
              e[i] = E[r * G::STRIDE + x0 + i];
#pragma unroll
            for (int k = 0; k < RUN; k++)
              {
                float h = a.g[0] * e[k];
#pragma unroll
                for (int j = 1; j <= 2 * P; j++)
                  h += a.g[j] * e[k + j];
                Hs[r * H_STRIDE + x0 + k] = h;
              }
          }
        __syncthreads ();

        /* C: vertical patch sums, weights, weighted sums. */
        float hv[RPT + 2 * P];
#pragma unroll
        for (int i = 0; i < RPT + 2 * P; i++)
          hv[i] = Hs[(row0 + i) * H_STRIDE + tx];
        const float *nb = img + (row0 + R + dy) * IW + tx + R + dx;
#pragma unroll
        for (int j = 0; j < RPT; j++)
          {
            float d = a.g[0] * hv[j];
#pragma unroll
            for (int i = 1; i <= 2 * P; i++)
              d += a.g[i] * hv[j + i];
            float w = nlmeans_exp_neg (d * a.scale - a.offset);
#pragma unroll
            for (int ch = 0; ch < N; ch++)
              acc[j][ch] = __fmaf_rn (w, nb[ch * plane + j * IW], acc[j][ch]);
            acc[j][N] += w;
            acc[j][N + 1] = fmaxf (acc[j][N + 1], w);
          }
      }

  /* Store: partial sums to the scratch, or the result (alpha copied). */
#pragma unroll
  for (int j = 0; j < RPT; j++)
    {
      int out_y = by0 + row0 + j;
      if (out_x >= s.width || out_y >= s.rows)
        continue;
      if (!a.last)
        {
#pragma unroll
          for (int ch = 0; ch < N + 2; ch++)
            scratch[(size_t) out_y * scratch_row + (size_t) ch * s.width + out_x] = acc[j][ch];
          continue;
        }
      const unsigned char *src = s.d_src + (size_t) (out_y + s.halo) * s.src_pitch;
      unsigned char *dst = s.d_dst + (size_t) out_y * s.dst_pitch;
      size_t e = (size_t) out_x * channels;
      const float wc = nlmeans_centre_weight (a.centre_max, acc[j][N + 1]);
      const float ws = acc[j][N] + wc;
      const float *centre_px = img + (row0 + j + R) * IW + tx + R;
#pragma unroll
      for (int ch = 0; ch < N; ch++)
        {
          float v = (acc[j][ch] + wc * centre_px[ch * plane]) / ws;
          if (s.type == CUDAFX_U8)
            {
              v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
              dst[e + ch] = (unsigned char) (v + 0.5f);
            }
          else
            ((float *) dst)[e + ch] = v / 255.0f;
        }
      if (channels > N && s.type == CUDAFX_U8)
        dst[e + N] = src[e + N];
      else if (channels > N)
        ((float *) dst)[e + N] = ((const float *) src)[e + N];
    }
}

typedef void (*nlm_kernel_fn) (cfx_stripe, nlm_args);

template <int P>
nlm_kernel_fn
kernel_for_patch (int N)
{
  static const nlm_kernel_fn kernels[MAX_N] = {
    nlmeans_kernel<P, 1>, nlmeans_kernel<P, 2>, nlmeans_kernel<P, 3>, nlmeans_kernel<P, 4>,
  };
  return kernels[N - 1];
}

/* Kernel for patch radius P (1..5) and N colour channels (1..MAX_N). */
nlm_kernel_fn
kernel_for (int P, int N)
{
  switch (P)
    {
    case 1:  return kernel_for_patch<1> (N);
    case 2:  return kernel_for_patch<2> (N);
    case 3:  return kernel_for_patch<3> (N);
    case 4:  return kernel_for_patch<4> (N);
    default: return kernel_for_patch<5> (N);
    }
}

struct nlm_ctx
{
  const nlmeans_plan   *plan;
  int                   colours;
  const cudafx_options *o;
};

size_t
shared_bytes (int P, int S, int N)
{
  size_t side = TILE_W + 2 * (size_t) (S + P), e_rows = TILE_H + 2 * (size_t) P;
  return sizeof (float) * (N * side * side + e_rows * (TILE_W + 2 * P + 1) + e_rows * H_STRIDE);
}

cudafx_status
nlmeans_stripe (void *ctx, const cfx_stripe *s)
{
  const nlm_ctx *m = (const nlm_ctx *) ctx;
  const int P = m->plan->patch_radius, S = m->plan->search_radius;
  nlm_kernel_fn kernel = kernel_for (P, m->colours);
  size_t shm = shared_bytes (P, S, m->colours);
  cudafx_status st = cfx_check (cudaFuncSetAttribute ((const void *) kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int) shm),
                                "nl-means", "shared-memory attribute");
  if (st)
    return st;

  /* Search rows per launch: bounded work, and with a progress callback a
   * few launches at least, so cancel is answered within a stripe. */
  const int rows = 2 * S + 1;
  double work = (double) s->width * s->rows * rows * rows;
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
      nlm_args a = { S, S + P, -S + rows * i / chunks, -S + rows * (i + 1) / chunks,
                     i == 0, i == chunks - 1, m->plan->dist_scale, m->plan->dist_offset,
                     m->plan->centre_max, {} };
      memcpy (a.g, m->plan->patch_weights, sizeof a.g);
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

} // namespace

extern "C" cudafx_status
cudafx_nlmeans_cuda (const cudafx_image *src, cudafx_image *dst, const nlmeans_plan *plan,
                     const cudafx_options *o)
{
  const int colours = src->channels - (src->has_alpha ? 1 : 0);
  nlm_ctx m = { plan, colours, o };
  size_t scratch_row; /* partial sums between launches: colours + 2 planes */
  if (__builtin_mul_overflow ((size_t) src->width, sizeof (float) * (colours + 2), &scratch_row))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "nl-means: image too large");
  return cfx_run_stripes ("nl-means", src, dst, plan->search_radius + plan->patch_radius,
                          CUDAFX_BORDER_CLAMP, scratch_row, nlmeans_stripe, &m, o);
}
