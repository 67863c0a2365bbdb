/* SPDX-License-Identifier: GPL-3.0-or-later */
/* What the files of the GPU colour quantize share: quantize.cu (the backend
 * session's entry points, the passes over the stripes), quantize_seed.cu
 * (the seeding), quantize_lloyd.cu (Lloyd's passes), quantize_map.cu (the
 * mapping without dither) and quantize_dither.cu (Floyd–Steinberg and the
 * positioned dithers). Internal: only these files include it.
 *
 * Constant memory is a file's own (the CUDA files are compiled whole, with
 * no device linking), so each file whose kernels read the decode table or
 * the palette holds its own copy of them and fills it (qz_*_constants)
 * before those kernels run: quantize_lloyd.cu the decode table, for the
 * features; quantize_map.cu the palette; quantize_dither.cu both, and the
 * entries' values. */
#ifndef CUDAFX_QUANTIZE_CUH
#define CUDAFX_QUANTIZE_CUH

#include "context.cuh"

/* ---- the passes' shapes ------------------------------------------------------- */

constexpr int THREADS = 256;
constexpr int PIXELS_PER_THREAD = 4;
constexpr int CHUNK = THREADS * PIXELS_PER_THREAD;
static_assert ((long long) CHUNK * QUANTIZE_FEATURE_MAX < 2147483648LL,
               "a chunk's int32 partial sums could overflow");
constexpr int COUNTERS = 4 * CUDAFX_MAX_COLORS; /* per centre: 3 sums, 1 count */
constexpr const char *FILTER = "quantize";

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

/* ---- device helpers of several files ------------------------------------------ */

/* Features of pixel p (zeros past dims). */
__device__ __forceinline__ void
load_features (const stripe_view &v, size_t p, float &fx, float &fy, float &fz)
{
  fx = v.plane[0][p];
  fy = v.dims == 3 ? v.plane[1][p] : 0.0f;
  fz = v.dims == 3 ? v.plane[2][p] : 0.0f;
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

/* A u8 pixel's colour key, the index of its bin: r << 16 | g << 8 | b, grey
 * the value. The histogram counts by it and the mapping's table is read by
 * it. */
__device__ __forceinline__ unsigned
colour_key (const unsigned char *px, int dims)
{
  return dims == 3 ? (unsigned) px[0] << 16 | (unsigned) px[1] << 8 | px[2] : px[0];
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

/* ---- host helpers of several files -------------------------------------------- */

/* Blocks of `threads` threads for n. */
static inline unsigned
grid_for (size_t n, int threads)
{
  return (unsigned) ((n + threads - 1) / threads);
}

/* Floyd–Steinberg's rows per warp, one per lane (quantize_dither.cu);
 * quantize.cu sizes the boundary rows by them. */
constexpr int DITHER_ROWS = 32;

/* Boundary rows and counters for a stripe of `rows` rows of `width` pixels. */
static inline size_t
dither_bound_rows (int rows)
{
  return (size_t) (rows + DITHER_ROWS - 1) / DITHER_ROWS + 1;
}

/* The palette the mapping reads, into constant memory: centre, u8 and f32
 * are the copies (symbols) of the file whose kernels read them. */
static inline cudafx_status
upload_palette (cudaStream_t stream, const quantize_palette *pal, const void *centre, const void *u8,
                const void *f32)
{
  cudafx_status s;
  size_t bytes = (size_t) pal->k * sizeof pal->centre[0];
  if ((s = cfx_check (cudaMemcpyToSymbolAsync (centre, pal->centre, bytes, 0, cudaMemcpyHostToDevice, stream),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemcpyToSymbolAsync (u8, pal->u8, (size_t) pal->k * sizeof pal->u8[0], 0,
                                               cudaMemcpyHostToDevice, stream),
                      FILTER, "copy to device")))
    return s;
  return cfx_check (cudaMemcpyToSymbolAsync (f32, pal->f32, (size_t) pal->k * sizeof pal->f32[0], 0,
                                             cudaMemcpyHostToDevice, stream),
                    FILTER, "copy to device");
}

/* ---- the session -------------------------------------------------------------- */

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

/* ---- quantize.cu: the session's helpers the other files call ------------------ */

/* s, noting a CUDA fault (the buffers are dropped at close). */
cudafx_status qz_fail_cuda (quantize_session *q, cudafx_status s);
/* Stripe 0 of a one-stripe image onto the device with its features. */
cudafx_status qz_preload (quantize_session *q);
/* The times of quantize_rows' last piece into the report. */
cudafx_status qz_report_piece (quantize_session *q);
/* The distinct colours of the voting pixels, their features and counts. */
cudafx_status qz_find_colours (quantize_session *q);

/* ---- quantize_seed.cu --------------------------------------------------------- */

/* Device bytes of the seeding's workspace: the sample, the state. */
extern const size_t qz_seed_bytes;
/* Queues sample_kernel: the seeding sample's entries j0 .. j1 - 1 from the
 * rows of v, which start at image row y0 (n pixels in the image). */
cudafx_status qz_sample (const quantize_session *q, const stripe_view &v, int y0, unsigned long long n,
                         unsigned long long j0, unsigned long long j1);

/* ---- quantize_lloyd.cu -------------------------------------------------------- */

/* The decode table of fs into this file's constant memory. */
cudafx_status qz_lloyd_constants (cudaStream_t stream, const quantize_space *fs);
/* Queues features_kernel over stripe v into the session's planes. */
cudafx_status qz_features (const quantize_session *q, const stripe_view &v);
/* Queues one assignment of the centres in d_lloyd into d_totals (v NULL:
 * over the distinct colours); max_iterations > 0: the device's Lloyd loop. */
cudafx_status qz_queue_assign (quantize_session *q, const stripe_view *v, int k, int max_iterations);
/* Queues histogram_kernel: the voting pixels of stripe v counted into bins. */
cudafx_status qz_histogram (const stripe_view &v, unsigned *bins, cudaStream_t stream);
/* Queues colours_kernel: the selected colours' features and counts. */
cudafx_status qz_colours (const quantize_session *q, int selected);

/* ---- quantize_map.cu ---------------------------------------------------------- */

/* The palette into this file's constant memory. */
cudafx_status qz_map_constants (cudaStream_t stream, const quantize_palette *pal);
/* Queues label_colours_kernel: the distinct colours' entries (k of them). */
cudafx_status qz_label_colours (const quantize_session *q, int k);
/* Queues the mapping of stripe v: through the colours' table (table_map),
 * else by map_kernel's search of the k entries. */
cudafx_status qz_map (const quantize_session *q, const stripe_view &v, int k);

/* ---- quantize_dither.cu ------------------------------------------------------- */

/* The decode table of fs, m's palette and for Floyd–Steinberg its entries'
 * values, into this file's constant memory. */
cudafx_status qz_dither_constants (cudaStream_t stream, const quantize_space *fs, const quantize_mapping *m);
/* Floyd–Steinberg over stripe i of the image (rows y0 ..), k entries. */
cudafx_status qz_launch_dither (quantize_session *q, const stripe_view &v, int i, int y0, int k);
/* Queues position_kernel over stripe v (rows y0 ..), k entries. */
cudafx_status qz_position (const quantize_session *q, const stripe_view &v, int y0, int k);

#endif /* CUDAFX_QUANTIZE_CUH */
