/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — median and percentile filter, CPU engine.
 *
 * Each output element is the value of rank round(p/100·(n−1)) (0 = smallest)
 * among the n values of its channel in the window around it. The window is
 * the (2r+1)² square, or the disc of offsets with dx² + dy² ≤ r² (column dx
 * then spans |dy| ≤ floor(sqrt(r² − dx²))). Borders replicate the edge pixels.
 * Channels, alpha included, are filtered independently. Non-finite f32
 * values are left as they are and kept out of their neighbours' windows,
 * whose rank is then taken among the finite values (core/backend.h,
 * median_known_key): the network's outputs near one are selected again
 * (known_row), the histogram counts them in a bin of their own.
 *
 * Three methods, chosen in median_cpu:
 *
 * - Small radii: a selection network in the spirit of Adams, "Fast median
 *   filters using separable sorting networks" (ACM TOG 40(4), 2021). Each
 *   column of the window is sorted once per output row and shared by all the
 *   outputs whose window contains it; the sorted columns of one output are
 *   then merged with Batcher's odd-even merge. While merging, values whose
 *   rank bounds put them surely below (or above) the wanted rank become
 *   −∞ (+∞) constants and the compare-exchanges they meet vanish; finally
 *   every operation that does not feed the wanted rank is dropped. The
 *   network is built once per call and run over tiles of a row, each
 *   compare-exchange a min/max loop over whole arrays of elements, which gcc
 *   vectorises for both u8 and f32.
 *
 * - Larger radii, u8 square windows: Perreault–Hébert column histograms
 *   (see columns_rows below), constant time per pixel.
 *
 * - Larger radii otherwise (disc, f32): Huang's sliding window ("A fast two-dimensional median
 *   filtering algorithm", IEEE TASSP 1979) with a hierarchical histogram of
 *   16-way levels (Alparone et al.'s two-level 16×16 histogram for u8): per
 *   output, each window row drops one value and gains one (per-row extents
 *   give the disc), so the cost grows with r, not r². f32 data are first
 *   replaced by the rank of each value among the image's distinct values
 *   (a radix sort), the histogram runs over ranks, and ranks map back to the
 *   original floats, so the result is an exact order statistic.
 */
#include "cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Radii up to this use the selection network, larger ones the histogram. */
#define NETWORK_MAX_RADIUS 3
#define NETWORK_MAX_WINDOW ((2 * NETWORK_MAX_RADIUS + 1) * (2 * NETWORK_MAX_RADIUS + 1))
/* Bytes of one array of the network per tile: small enough that all live
 * arrays stay in the L1/L2 cache. */
#define TILE_BYTES 1024
#define ALIGN 64

typedef struct {
  const cudafx_image *src;
  cudafx_image       *dst;
  const median_plan  *p;
  const uint8_t      *unknown_rows; /* f32: 1 for a row holding a non-finite value; NULL: none */
} median_job;

/* Half-height of window column dx (also half-width of window row dy). */
static int
window_extent (int r, int d, cudafx_shape shape)
{
  if (shape == CUDAFX_SHAPE_SQUARE)
    return r;
  int room = r * r - d * d;
  int h = (int) sqrt ((double) room);
  while ((h + 1) * (h + 1) <= room)
    h++;
  while (h * h > room)
    h--;
  return h;
}

static int
clamp_int (int v, int lo, int hi)
{
  return v < lo ? lo : v > hi ? hi : v;
}

/* Overflow-checked a * b. */
static int
mul_size (size_t a, size_t b, size_t *out)
{
  if (b && a > SIZE_MAX / b)
    return 0;
  *out = a * b;
  return 1;
}

static int
window_size (int r, cudafx_shape shape)
{
  int n = 0;
  for (int d = -r; d <= r; d++)
    n += 2 * window_extent (r, d, shape) + 1;
  return n;
}

/* The output of element (x, y, ch) of an f32 image by the finite values of
 * its window alone (backend.h, median_known_key): the window's keys sorted
 * (a few dozen: the network's windows), or the element itself when it is
 * not finite. */
static float
known_select (const median_job *job, int x, int y, int ch)
{
  const cudafx_image *src = job->src;
  const median_plan *p = job->p;
  const int c = src->channels, r = p->radius;
  const float centre = ((const float *) cudafx_row (src, y))[(size_t) x * c + ch];
  if (!isfinite (centre))
    return centre;
  uint32_t keys[NETWORK_MAX_WINDOW];
  int m = 0;
  for (int dx = -r; dx <= r; dx++)
    for (int dy = -p->half[dx + r]; dy <= p->half[dx + r]; dy++)
      {
        const float *row = (const float *) cudafx_row (src, clamp_int (y + dy, 0, src->height - 1));
        uint32_t k = median_known_key (row[(size_t) clamp_int (x + dx, 0, src->width - 1) * c + ch]);
        if (k == MEDIAN_UNKNOWN_KEY)
          continue;
        int i = m++;
        for (; i > 0 && keys[i - 1] > k; i--)
          keys[i] = keys[i - 1];
        keys[i] = k;
      }
  return median_key_float (keys[median_window_rank (p->percentile, m)]);
}

/* Row y of the network's output, where a window holds a non-finite value:
 * those outputs again by known_select (the network's order is no order for
 * NaN). Only f32 images holding one pay for it. */
static void
known_row (const median_job *job, int y)
{
  const cudafx_image *src = job->src;
  const int r = job->p->radius, w = src->width, c = src->channels;
  int any = 0;
  for (int dy = -r; dy <= r && !any; dy++)
    any = job->unknown_rows[clamp_int (y + dy, 0, src->height - 1)];
  if (!any)
    return;
  float *out = (float *) cudafx_row (job->dst, y);
  for (int x = 0; x < w; x++)
    for (int ch = 0; ch < c; ch++)
      {
        int near = 0;
        for (int dy = -r; dy <= r && !near; dy++)
          {
            const float *row = (const float *) cudafx_row (src, clamp_int (y + dy, 0, src->height - 1));
            for (int dx = -r; dx <= r && !near; dx++)
              near = !isfinite (row[(size_t) clamp_int (x + dx, 0, w - 1) * c + ch]);
          }
        if (near)
          out[(size_t) x * c + ch] = known_select (job, x, y, ch);
      }
}

/* ==== selection network ================================================== */

/* Compare-exchange kernels over arrays: the only place element types differ.
 * `a < b ? a : b` compiles to vector min/max (pminub, minps) for both types. */
#define DEFINE_KERNELS(T, suffix)                                              \
  CUDAFX_CPU_CLONES static void                                                \
  sort2_##suffix (const void *x_, const void *y_, void *lo_, void *hi_, int n) \
  {                                                                            \
    const T *restrict x = x_, *restrict y = y_;                                \
    T *restrict lo = lo_, *restrict hi = hi_;                                  \
    for (int i = 0; i < n; i++)                                                \
      {                                                                        \
        T a = x[i], b = y[i];                                                  \
        lo[i] = a < b ? a : b;                                                 \
        hi[i] = a < b ? b : a;                                                 \
      }                                                                        \
  }                                                                            \
  CUDAFX_CPU_CLONES static void                                                \
  min_##suffix (const void *x_, const void *y_, void *lo_, void *hi_, int n)   \
  {                                                                            \
    const T *restrict x = x_, *restrict y = y_;                                \
    T *restrict lo = lo_;                                                      \
    for (int i = 0; i < n; i++)                                                \
      lo[i] = x[i] < y[i] ? x[i] : y[i];                                       \
  }                                                                            \
  CUDAFX_CPU_CLONES static void                                                \
  max_##suffix (const void *x_, const void *y_, void *lo_, void *hi_, int n)   \
  {                                                                            \
    const T *restrict x = x_, *restrict y = y_;                                \
    T *restrict hi = hi_;                                                      \
    for (int i = 0; i < n; i++)                                                \
      hi[i] = x[i] < y[i] ? y[i] : x[i];                                       \
  }

DEFINE_KERNELS (uint8_t, u8)
DEFINE_KERNELS (float, f32)

typedef void (*kernel_fn) (const void *x, const void *y, void *lo, void *hi, int n);
typedef enum { OP_SORT2, OP_MIN, OP_MAX } op_kind;

static const kernel_fn kernels[2][3] = {
  [CUDAFX_U8] = { sort2_u8, min_u8, max_u8 },
  [CUDAFX_F32] = { sort2_f32, min_f32, max_f32 },
};

/* A value while building: an SSA id (the input rows, then two per
 * operation), read at an element offset; or a constant below / above the
 * wanted rank. */
enum { VALUE_LOW = -1, VALUE_HIGH = -2 };
typedef struct { int id, off; } value;

typedef struct {
  value x, y;
  int   lo, hi;      /* ids of min and max */
  int   whole;       /* column stage: runs over the tile and its halo */
} build_op;

typedef struct {
  build_op *ops;
  int       n_ops, cap, n_ids;
  int       failed;
} builder;

static void
compare_exchange (builder *b, value *x, value *y, int whole)
{
  if (x->id == VALUE_LOW || y->id == VALUE_HIGH)
    return;
  if (y->id == VALUE_LOW || x->id == VALUE_HIGH)
    {
      value t = *x;
      *x = *y;
      *y = t;
      return;
    }
  if (b->n_ops == b->cap)
    {
      int cap = b->cap ? 2 * b->cap : 256;
      build_op *ops = realloc (b->ops, cap * sizeof *ops);
      if (!ops)
        {
          b->failed = 1;
          return;
        }
      b->ops = ops;
      b->cap = cap;
    }
  build_op *op = &b->ops[b->n_ops++];
  *op = (build_op) { *x, *y, b->n_ids, b->n_ids + 1, whole };
  b->n_ids += 2;
  *x = (value) { op->lo, 0 };
  *y = (value) { op->hi, 0 };
}

/* Batcher's odd-even merge of sorted a[0], a[sa], … (m values) and c[0],
 * c[sc], … (n values) into out[m+n]; valid for any lengths (0-1 principle:
 * the merges of the even- and odd-indexed halves differ by at most two zeros,
 * which one rank of compare-exchanges puts in place). */
static void
merge (builder *b, const value *a, int sa, int m, const value *c, int sc, int n,
       value *out, int whole)
{
  if (m == 0 || n == 0)
    {
      for (int i = 0; i < m; i++)
        out[i] = a[i * sa];
      for (int i = 0; i < n; i++)
        out[m + i] = c[i * sc];
      return;
    }
  if (m == 1 && n == 1)
    {
      out[0] = a[0];
      out[1] = c[0];
      compare_exchange (b, &out[0], &out[1], whole);
      return;
    }
  value v[NETWORK_MAX_WINDOW], w[NETWORK_MAX_WINDOW];
  int nv = (m + 1) / 2 + (n + 1) / 2, nw = m / 2 + n / 2, k = 0;
  merge (b, a, 2 * sa, (m + 1) / 2, c, 2 * sc, (n + 1) / 2, v, whole);
  merge (b, a + sa, 2 * sa, m / 2, c + sc, 2 * sc, n / 2, w, whole);
  out[k++] = v[0];
  for (int i = 0; i < nw; i++)
    if (i + 1 < nv)
      {
        out[k] = w[i];
        out[k + 1] = v[i + 1];
        compare_exchange (b, &out[k], &out[k + 1], whole);
        k += 2;
      }
    else
      out[k++] = w[i];
  for (int i = nw + 1; i < nv; i++)
    out[k++] = v[i];
}

static void
sort_values (builder *b, value *v, int n, int whole)
{
  if (n < 2)
    return;
  int h = n / 2;
  value out[NETWORK_MAX_WINDOW];
  sort_values (b, v, h, whole);
  sort_values (b, v + h, n - h, whole);
  merge (b, v, 1, h, v + h, 1, n - h, out, whole);
  memcpy (v, out, n * sizeof *v);
}

/* Values of a sorted part of the window (len of the n) that surely lie below
 * or above the wanted rank become constants. */
static void
prune (value *v, int len, int n, int rank)
{
  for (int i = 0; i < len; i++)
    if (i > rank)
      v[i].id = VALUE_HIGH;
    else if (n - len + i < rank)
      v[i].id = VALUE_LOW;
}

/* The program a thread runs per tile: rows loaded into slots 0..2r, then
 * operations on slots (arrays of slot_len elements). */
typedef struct {
  uint8_t  kind, whole;
  uint16_t x, y, lo, hi;
  int      x_off, y_off;
} exec_op;

typedef struct {
  exec_op *ops;
  int      n_ops;
  int      n_slots;
  int      out_slot, out_off;
  int      radius, channels, width;
  int      tile, halo;       /* elements: outputs per tile, 2r·channels */
  size_t   slot_len;         /* elements per slot, padded for alignment */
  size_t   esize;
  kernel_fn kernel[3];
} network;

/* Builds the network for the window; rows dy = −r..r are ids 0..2r. */
static cudafx_status
network_build (network *net, const median_plan *plan, int channels, int width, cudafx_type type)
{
  const int r = plan->radius, n = plan->n, rank = plan->rank;
  const cudafx_shape shape = plan->shape;
  builder b = { NULL, 0, 0, 2 * r + 1, 0 };
  int *last_use = NULL, *slot_of = NULL, *free_slots = NULL, *needed = NULL;
  cudafx_status status = CUDAFX_ERR_NO_MEMORY;

  /* Column stage: one sorted column per distinct half-height. */
  value sorted[NETWORK_MAX_RADIUS + 1][2 * NETWORK_MAX_RADIUS + 1];
  int used[NETWORK_MAX_RADIUS + 1] = { 0 };
  for (int dx = -r; dx <= r; dx++)
    used[window_extent (r, dx, shape)] = 1;
  for (int h = 0; h <= r; h++)
    {
      for (int i = 0; i < 2 * h + 1; i++)
        sorted[h][i] = (value) { r - h + i, 0 };
      if (used[h])
        sort_values (&b, sorted[h], 2 * h + 1, 1);
    }

  /* Merge stage: the window's columns, read at their offsets, merged pairwise
   * in rounds, pruned after each merge. */
  value lists[2 * NETWORK_MAX_RADIUS + 1][NETWORK_MAX_WINDOW];
  int lens[2 * NETWORK_MAX_RADIUS + 1], n_lists = 2 * r + 1;
  for (int dx = -r; dx <= r; dx++)
    {
      int h = window_extent (r, dx, shape), k = dx + r;
      lens[k] = 2 * h + 1;
      for (int i = 0; i < lens[k]; i++)
        lists[k][i] = (value) { sorted[h][i].id, k * channels };
      prune (lists[k], lens[k], n, rank);
    }
  while (n_lists > 1)
    {
      int next = 0;
      for (int i = 0; i < n_lists; i += 2)
        {
          if (i + 1 == n_lists)
            {
              memmove (lists[next], lists[i], lens[i] * sizeof (value));
              lens[next++] = lens[i];
              continue;
            }
          value out[NETWORK_MAX_WINDOW];
          merge (&b, lists[i], 1, lens[i], lists[i + 1], 1, lens[i + 1], out, 0);
          int len = lens[i] + lens[i + 1];
          prune (out, len, n, rank);
          memcpy (lists[next], out, len * sizeof (value));
          lens[next++] = len;
        }
      n_lists = next;
    }
  if (b.failed)
    goto out;
  value result = lists[0][rank];

  /* Keep only what feeds the result; an operation needed for one side only
   * becomes a min or a max. */
  last_use = malloc (b.n_ids * sizeof *last_use);
  slot_of = malloc (b.n_ids * sizeof *slot_of);
  free_slots = malloc ((b.n_ids + 1) * sizeof *free_slots);
  needed = calloc (b.n_ids, sizeof *needed);
  net->ops = malloc ((b.n_ops + 1) * sizeof *net->ops);
  if (!last_use || !slot_of || !free_slots || !needed || !net->ops)
    goto out;
  needed[result.id] = 1;
  for (int i = b.n_ops - 1; i >= 0; i--)
    if (needed[b.ops[i].lo] || needed[b.ops[i].hi])
      needed[b.ops[i].x.id] = needed[b.ops[i].y.id] = 1;

  /* Slots: rows first; each operation takes free slots for its outputs before
   * releasing inputs read for the last time, so outputs never alias inputs. */
  for (int i = 0; i < b.n_ids; i++)
    last_use[i] = -1;
  for (int i = 0; i < b.n_ops; i++)
    if (needed[b.ops[i].lo] || needed[b.ops[i].hi])
      last_use[b.ops[i].x.id] = last_use[b.ops[i].y.id] = i;
  last_use[result.id] = b.n_ops;
  int n_free = 0, n_slots = 2 * r + 1;
  for (int i = 0; i < 2 * r + 1; i++)
    slot_of[i] = i;
  net->n_ops = 0;
  for (int i = 0; i < b.n_ops; i++)
    {
      build_op *op = &b.ops[i];
      int want_lo = needed[op->lo], want_hi = needed[op->hi];
      if (!want_lo && !want_hi)
        continue;
      exec_op *e = &net->ops[net->n_ops++];
      e->kind = want_lo && want_hi ? OP_SORT2 : want_lo ? OP_MIN : OP_MAX;
      e->whole = op->whole;
      e->x = slot_of[op->x.id];
      e->y = slot_of[op->y.id];
      e->x_off = op->x.off;
      e->y_off = op->y.off;
      e->lo = e->hi = 0;
      if (want_lo)
        e->lo = slot_of[op->lo] = n_free ? free_slots[--n_free] : n_slots++;
      if (want_hi)
        e->hi = slot_of[op->hi] = n_free ? free_slots[--n_free] : n_slots++;
      if (last_use[op->x.id] == i)
        free_slots[n_free++] = slot_of[op->x.id];
      if (last_use[op->y.id] == i && op->y.id != op->x.id)
        free_slots[n_free++] = slot_of[op->y.id];
    }
  net->n_slots = n_slots;
  net->out_slot = slot_of[result.id];
  net->out_off = result.off;
  net->radius = r;
  net->channels = channels;
  net->width = width;
  net->esize = cudafx_type_size (type);
  net->tile = TILE_BYTES / net->esize / channels * channels;
  net->halo = 2 * r * channels;
  size_t per_align = ALIGN / net->esize;
  net->slot_len = (net->tile + net->halo + per_align - 1) / per_align * per_align;
  for (int k = 0; k < 3; k++)
    net->kernel[k] = kernels[type][k];
  status = CUDAFX_OK;
out:
  if (status)
    {
      free (net->ops);
      net->ops = NULL;
    }
  free (b.ops);
  free (last_use);
  free (slot_of);
  free (free_slots);
  free (needed);
  return status;
}

/* Copies pixels x0−r .. x0+n+r−1 of row y (clamped) into slot memory. */
static void
load_row (const network *net, const cudafx_image *src, int y, int x0, int n_px, uint8_t *to)
{
  const uint8_t *row = cudafx_row (src, clamp_int (y, 0, src->height - 1));
  size_t px = net->channels * net->esize;
  int r = net->radius, from = x0 - r, to_x = x0 + n_px + r;
  int a = from < 0 ? 0 : from, z = to_x > src->width ? src->width : to_x;
  for (int x = from; x < a; x++)
    memcpy (to + (size_t) (x - from) * px, row, px);
  memcpy (to + (size_t) (a - from) * px, row + (size_t) a * px, (size_t) (z - a) * px);
  for (int x = z; x < to_x; x++)
    memcpy (to + (size_t) (x - from) * px, row + (size_t) (src->width - 1) * px, px);
}

typedef struct {
  const median_job *job;
  const network    *net;
  uint8_t         **work;   /* per thread: n_slots arrays of slot_len elements */
} network_ctx;

CUDAFX_CPU_CLONES static void
network_rows (void *ctx_, int y0, int y1)
{
  const network_ctx *ctx = ctx_;
  const network *net = ctx->net;
  const cudafx_image *src = ctx->job->src;
  uint8_t *work = ctx->work[omp_get_thread_num ()];
  size_t slot_bytes = net->slot_len * net->esize;
  int c = net->channels, r = net->radius;

  for (int y = y0; y < y1; y++)
    for (int x0 = 0; x0 < src->width; x0 += net->tile / c)
      {
        int n_px = src->width - x0 < net->tile / c ? src->width - x0 : net->tile / c;
        int n_out = n_px * c;
        for (int dy = -r; dy <= r; dy++)
          load_row (net, src, y + dy, x0, n_px, work + (dy + r) * slot_bytes);
        for (int i = 0; i < net->n_ops; i++)
          {
            const exec_op *e = &net->ops[i];
            net->kernel[e->kind] (work + e->x * slot_bytes + e->x_off * net->esize,
                                  work + e->y * slot_bytes + e->y_off * net->esize,
                                  work + e->lo * slot_bytes, work + e->hi * slot_bytes,
                                  e->whole ? n_out + net->halo : n_out);
          }
        memcpy (cudafx_row (ctx->job->dst, y) + (size_t) x0 * c * net->esize,
                work + net->out_slot * slot_bytes + net->out_off * net->esize,
                (size_t) n_out * net->esize);
        if (ctx->job->unknown_rows && x0 + n_px == src->width)
          known_row (ctx->job, y);
      }
}

static cudafx_status
median_network (const median_job *job, const cudafx_options *o)
{
  const cudafx_image *src = job->src;
  network net = { 0 };
  network_ctx ctx = { job, &net, NULL };
  int threads = cudafx_thread_count (o);
  cudafx_status status = network_build (&net, job->p, src->channels, src->width, src->type);
  if (status)
    return status;
  size_t bytes = net.n_slots * net.slot_len * net.esize;
  ctx.work = calloc (threads, sizeof *ctx.work);
  status = CUDAFX_ERR_NO_MEMORY;
  if (!ctx.work)
    goto out;
  for (int t = 0; t < threads; t++)
    if (!(ctx.work[t] = aligned_alloc (ALIGN, bytes)))
      goto out;
  status = cudafx_parallel_rows (src->height, network_rows, &ctx, o, 0, 1);
out:
  if (ctx.work)
    for (int t = 0; t < threads; t++)
      free (ctx.work[t]);
  free (ctx.work);
  free (net.ops);
  return status;
}

/* ==== histogram ============================================================ */

#define HIST_BITS 4
#define HIST_FAN (1 << HIST_BITS)
#define HIST_MAX_LEVELS 8

/* Counts of the window's bins at each level; level l has 16^(l+1) counts.
 * uint16_t suffices: a window holds at most 201² values. */
typedef struct {
  uint16_t *level[HIST_MAX_LEVELS];
  int       levels;
} histogram;

static inline void
hist_add (histogram *h, uint32_t bin, int delta)
{
  for (int l = 0; l < h->levels; l++)
    h->level[l][bin >> (HIST_BITS * (h->levels - 1 - l))] += delta;
}

/* The bin holding the value of the given rank. */
static inline uint32_t
hist_select (const histogram *h, int rank)
{
  uint32_t idx = 0;
  int below = 0;
  for (int l = 0; l < h->levels; l++)
    {
      const uint16_t *cnt = h->level[l] + idx * HIST_FAN;
      int j = 0;
      while (below + cnt[j] <= rank)
        below += cnt[j++];
      idx = idx * HIST_FAN + j;
    }
  return idx;
}

typedef struct {
  const median_job *job;
  const void       *bins;      /* u8: the source itself; f32: rank image */
  size_t            bin_stride;
  const float      *values;    /* f32: value of each rank */
  int               levels;
  const int        *extent;    /* half-width of window row dy, index dy + r */
  int               rank;
  uint32_t          unknown_bin; /* f32: the non-finite values' rank, UINT32_MAX: none */
  histogram        *hists;     /* per thread */
} hist_ctx;

/* f32: the rank of the output among the window's finite values (the
 * non-finite ones all count in unknown_bin, above every finite bin). */
static inline int
hist_rank_f32 (const hist_ctx *ctx, const histogram *h)
{
  if (ctx->unknown_bin == UINT32_MAX)
    return ctx->rank;
  int unknown = h->level[h->levels - 1][ctx->unknown_bin];
  return unknown ? median_window_rank (ctx->job->p->percentile, ctx->job->p->n - unknown) : ctx->rank;
}

/* f32: the value of a bin, or the source element i of row y when that is
 * not finite (left as it is). */
static inline float
hist_value_f32 (const hist_ctx *ctx, int y, size_t i, uint32_t bin)
{
  const uint32_t *ranks = (const uint32_t *) ((const uint8_t *) ctx->bins + (size_t) y * ctx->bin_stride);
  if (ranks[i] == ctx->unknown_bin)
    return ((const float *) cudafx_row (ctx->job->src, y))[i];
  return ctx->values[bin];
}

/* Huang's sliding window over one output row, per channel. BIN_T is the bin
 * element type; RANK the rank to select; STORE writes the value of a bin to
 * dst element i. */
#define DEFINE_HIST_ROW(BIN_T, suffix, RANK, STORE)                            \
  static void                                                                  \
  hist_row_##suffix (const hist_ctx *ctx, histogram *h, int y)                 \
  {                                                                            \
    const cudafx_image *src = ctx->job->src;                                   \
    int w = src->width, c = src->channels, r = ctx->job->p->radius;            \
    uint8_t *drow = cudafx_row (ctx->job->dst, y);                             \
    const BIN_T *rows[2 * 100 + 1];                                            \
    for (int dy = -r; dy <= r; dy++)                                           \
      rows[dy + r] = (const BIN_T *) ((const uint8_t *) ctx->bins              \
                     + clamp_int (y + dy, 0, src->height - 1) * ctx->bin_stride); \
    for (int ch = 0; ch < c; ch++)                                             \
      {                                                                        \
        for (int dy = 0; dy <= 2 * r; dy++)                                    \
          for (int dx = -ctx->extent[dy]; dx <= ctx->extent[dy]; dx++)         \
            hist_add (h, rows[dy][clamp_int (dx, 0, w - 1) * c + ch], 1);      \
        for (int x = 0;; x++)                                                  \
          {                                                                    \
            uint32_t bin = hist_select (h, RANK);                              \
            STORE (drow, x * c + ch, bin);                                     \
            if (x == w - 1)                                                    \
              break;                                                           \
            for (int dy = 0; dy <= 2 * r; dy++)                                \
              {                                                                \
                int e = ctx->extent[dy];                                       \
                hist_add (h, rows[dy][clamp_int (x - e, 0, w - 1) * c + ch], -1); \
                hist_add (h, rows[dy][clamp_int (x + 1 + e, 0, w - 1) * c + ch], 1); \
              }                                                                \
          }                                                                    \
        for (int dy = 0; dy <= 2 * r; dy++)                                    \
          for (int dx = -ctx->extent[dy]; dx <= ctx->extent[dy]; dx++)         \
            hist_add (h, rows[dy][clamp_int (w - 1 + dx, 0, w - 1) * c + ch], -1); \
      }                                                                        \
  }

#define STORE_U8(row, i, bin) ((uint8_t *) (row))[i] = (uint8_t) (bin)
#define STORE_F32(row, i, bin) ((float *) (row))[i] = hist_value_f32 (ctx, y, i, bin)
DEFINE_HIST_ROW (uint8_t, u8, ctx->rank, STORE_U8)
DEFINE_HIST_ROW (uint32_t, f32, hist_rank_f32 (ctx, h), STORE_F32)

CUDAFX_CPU_CLONES static void
hist_rows (void *ctx_, int y0, int y1)
{
  const hist_ctx *ctx = ctx_;
  histogram *h = &ctx->hists[omp_get_thread_num ()];
  for (int y = y0; y < y1; y++)
    if (ctx->job->src->type == CUDAFX_U8)
      hist_row_u8 (ctx, h, y);
    else
      hist_row_f32 (ctx, h, y);
}

/* Replaces each f32 element by the rank of its value among the distinct
 * values (LSD radix sort of key/index pairs, 11 bits a pass); values[rank]
 * gives the float back. */
static cudafx_status
rank_transform (const cudafx_image *src, uint32_t **ranks_out, float **values_out,
                uint32_t *n_distinct, uint32_t *unknown_rank)
{
  size_t row_n = (size_t) src->width * src->channels, n, bytes;
  if (!mul_size (row_n, src->height, &n) || n > UINT32_MAX || !mul_size (n, 4 * sizeof (uint32_t), &bytes))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "median: image too large");
  uint32_t *block = malloc (bytes);
  uint32_t *ranks = malloc (n * sizeof *ranks);
  uint32_t *count = malloc ((1 << 11) * sizeof *count);
  float *values = NULL;
  cudafx_status status = CUDAFX_ERR_NO_MEMORY;
  if (!block || !ranks || !count)
    goto out;
  uint32_t *keys = block, *idx = block + n, *keys2 = block + 2 * n, *idx2 = block + 3 * n;
  for (int y = 0; y < src->height; y++)
    {
      const float *row = (const float *) cudafx_row (src, y);
      for (size_t i = 0; i < row_n; i++)
        {
          keys[y * row_n + i] = median_known_key (row[i]);
          idx[y * row_n + i] = (uint32_t) (y * row_n + i);
        }
    }
  for (int shift = 0; shift < 32; shift += 11)
    {
      memset (count, 0, (1 << 11) * sizeof *count);
      for (size_t i = 0; i < n; i++)
        count[(keys[i] >> shift) & 0x7ff]++;
      uint32_t sum = 0;
      for (int b = 0; b < 1 << 11; b++)
        {
          uint32_t t = count[b];
          count[b] = sum;
          sum += t;
        }
      for (size_t i = 0; i < n; i++)
        {
          uint32_t at = count[(keys[i] >> shift) & 0x7ff]++;
          keys2[at] = keys[i];
          idx2[at] = idx[i];
        }
      uint32_t *t = keys; keys = keys2; keys2 = t;
      t = idx; idx = idx2; idx2 = t;
    }
  uint32_t d = 0;
  for (size_t i = 0; i < n; i++)
    {
      if (i && keys[i] != keys[i - 1])
        d++;
      ranks[idx[i]] = d;
    }
  *n_distinct = d + 1;
  /* every non-finite value has the largest key: the last rank is theirs */
  *unknown_rank = keys[n - 1] == MEDIAN_UNKNOWN_KEY ? d : UINT32_MAX;
  values = malloc ((size_t) (d + 1) * sizeof *values);
  if (!values)
    goto out;
  for (size_t i = 0; i < n; i++)
    {
      size_t at = idx[i];
      values[ranks[at]] = ((const float *) cudafx_row (src, at / row_n))[at % row_n];
    }
  status = CUDAFX_OK;
out:
  free (block);
  free (count);
  if (status)
    {
      free (ranks);
      free (values);
      return cudafx_fail (status, "median: out of memory");
    }
  *ranks_out = ranks;
  *values_out = values;
  return CUDAFX_OK;
}

static cudafx_status
median_histogram (const median_job *job, const cudafx_options *o)
{
  const cudafx_image *src = job->src;
  const median_plan *p = job->p;
  int threads = cudafx_thread_count (o);
  uint32_t *ranks = NULL, n_bins = 256;
  float *values = NULL;
  /* the window is symmetric: row dy's half-width is column dy's half-height */
  hist_ctx ctx = { job, src->data, src->stride, NULL, 0, p->half, p->rank, UINT32_MAX, NULL };
  cudafx_status status;

  if (src->type == CUDAFX_F32)
    {
      status = rank_transform (src, &ranks, &values, &n_bins, &ctx.unknown_bin);
      if (status)
        return status;
      ctx.bins = ranks;
      ctx.bin_stride = (size_t) src->width * src->channels * sizeof *ranks;
      ctx.values = values;
    }
  while (ctx.levels < 2 || ((uint64_t) 1 << (HIST_BITS * ctx.levels)) < n_bins)
    ctx.levels++;

  status = CUDAFX_ERR_NO_MEMORY;
  ctx.hists = calloc (threads, sizeof *ctx.hists);
  if (!ctx.hists)
    goto out;
  for (int t = 0; t < threads; t++)
    {
      ctx.hists[t].levels = ctx.levels;
      for (int l = 0; l < ctx.levels; l++)
        if (!(ctx.hists[t].level[l] = calloc ((size_t) 1 << (HIST_BITS * (l + 1)), sizeof (uint16_t))))
          goto out;
    }
  status = cudafx_parallel_rows (src->height, hist_rows, &ctx, o, 0, 1);
out:
  if (ctx.hists)
    for (int t = 0; t < threads; t++)
      for (int l = 0; l < ctx.levels; l++)
        free (ctx.hists[t].level[l]);
  free (ctx.hists);
  free (ranks);
  free (values);
  if (status == CUDAFX_ERR_NO_MEMORY)
    return cudafx_fail (status, "median: out of memory");
  return status;
}

/* ==== column histograms (u8, square) ======================================= */

/* Perreault and Hébert, "Median filtering in constant time" (IEEE TIP 16(9),
 * 2007): one histogram per column of the image, kept for the window's height
 * and moved down one row with one removal and one addition; the window's
 * coarse histogram (16 bins) slides along x by adding one column's and
 * subtracting another's, and the fine histogram (16 bins) of a coarse bin is
 * brought up to date only when the wanted rank falls in that bin. Columns
 * are processed in strips narrow enough for their histograms to stay in cache. */
#define STRIP_ELEMENTS 768

typedef struct {
  const median_job *job;
  int               rank;
  int               strip;      /* pixels per strip */
  uint16_t        **work;       /* per thread: coarse and fine column histograms */
} columns_ctx;

/* 16 bins of 16 bits: one AVX2 register, added and subtracted whole. */
typedef uint16_t bins16 __attribute__ ((vector_size (32)));

static inline bins16
load_bins (const uint16_t *p)
{
  bins16 v;
  memcpy (&v, p, sizeof v);
  return v;
}

/* Adds one source row's values to (delta 1) or removes them from (delta −1)
 * the histograms of the strip's columns. */
static void
columns_update (uint16_t *coarse, uint16_t *fine, const uint8_t *row, int from_px, int n_px,
                int w, int c, int delta)
{
  for (int k = 0; k < n_px; k++)
    {
      const uint8_t *px = row + (size_t) clamp_int (from_px + k, 0, w - 1) * c;
      for (int ch = 0; ch < c; ch++)
        {
          int j = k * c + ch;
          coarse[j * 16 + (px[ch] >> 4)] += delta;
          fine[j * 256 + px[ch]] += delta;
        }
    }
}

CUDAFX_CPU_CLONES static void
columns_rows (void *ctx_, int y0, int y1)
{
  const columns_ctx *ctx = ctx_;
  const cudafx_image *src = ctx->job->src;
  int w = src->width, h = src->height, c = src->channels, r = ctx->job->p->radius;
  int cols = (ctx->strip + 2 * r) * c;    /* columns of a strip with its halo */
  uint16_t *coarse = ctx->work[omp_get_thread_num ()];
  uint16_t *fine = coarse + (size_t) cols * 16;

  for (int sx = 0; sx < w; sx += ctx->strip)
    {
      int sw = w - sx < ctx->strip ? w - sx : ctx->strip;
      int n_px = sw + 2 * r;
      /* Column k·c + ch holds channel ch of pixel sx − r + k (clamped). */
      memset (coarse, 0, (size_t) n_px * c * 16 * sizeof *coarse);
      memset (fine, 0, (size_t) n_px * c * 256 * sizeof *fine);
      for (int dy = -r; dy <= r; dy++)
        columns_update (coarse, fine, cudafx_row (src, clamp_int (y0 + dy, 0, h - 1)),
                        sx - r, n_px, w, c, 1);
      for (int y = y0; y < y1; y++)
        {
          if (y > y0)
            {
              columns_update (coarse, fine, cudafx_row (src, clamp_int (y - r - 1, 0, h - 1)),
                              sx - r, n_px, w, c, -1);
              columns_update (coarse, fine, cudafx_row (src, clamp_int (y + r, 0, h - 1)),
                              sx - r, n_px, w, c, 1);
            }
          uint8_t *drow = cudafx_row (ctx->job->dst, y) + (size_t) sx * c;
          for (int ch = 0; ch < c; ch++)
            {
              bins16 wc = { 0 }, wf[16];
              int valid[16];
              for (int b = 0; b < 16; b++)
                valid[b] = -1;
              for (int k = 0; k <= 2 * r; k++)
                wc += load_bins (coarse + (k * c + ch) * 16);
              for (int x = 0; x < sw; x++)
                {
                  /* The window of output x holds columns x .. x + 2r. */
                  if (x > 0)
                    wc += load_bins (coarse + ((x + 2 * r) * c + ch) * 16)
                          - load_bins (coarse + ((x - 1) * c + ch) * 16);
                  uint16_t counts[16];
                  memcpy (counts, &wc, sizeof counts);
                  int b = 0, below = 0;
                  while (below + counts[b] <= ctx->rank)
                    below += counts[b++];
                  const uint16_t *fb = fine + ch * 256 + b * 16;
                  size_t step = (size_t) c * 256;
                  if (valid[b] < 0 || x - valid[b] > 2 * r)
                    {
                      bins16 f = { 0 };
                      for (int k = x; k <= x + 2 * r; k++)
                        f += load_bins (fb + k * step);
                      wf[b] = f;
                    }
                  else
                    for (int k = valid[b] + 1; k <= x; k++)
                      wf[b] += load_bins (fb + (k + 2 * r) * step) - load_bins (fb + (k - 1) * step);
                  valid[b] = x;
                  memcpy (counts, &wf[b], sizeof counts);
                  int i = 0;
                  while (below + counts[i] <= ctx->rank)
                    below += counts[i++];
                  drow[x * c + ch] = (uint8_t) (b * 16 + i);
                }
            }
        }
    }
}

static cudafx_status
median_columns (const median_job *job, const cudafx_options *o)
{
  const cudafx_image *src = job->src;
  int r = job->p->radius, c = src->channels, threads = cudafx_thread_count (o);
  columns_ctx ctx = { job, job->p->rank,
                      0, NULL };
  ctx.strip = STRIP_ELEMENTS / c - 2 * r;
  if (ctx.strip < 32)
    ctx.strip = 32;
  size_t bytes = (size_t) (ctx.strip + 2 * r) * c * (16 + 256) * sizeof (uint16_t);
  cudafx_status status = CUDAFX_ERR_NO_MEMORY;
  ctx.work = calloc (threads, sizeof *ctx.work);
  if (!ctx.work)
    goto out;
  for (int t = 0; t < threads; t++)
    if (!(ctx.work[t] = malloc (bytes)))
      goto out;
  status = cudafx_parallel_rows (src->height, columns_rows, &ctx, o, 0, 1);
out:
  if (ctx.work)
    for (int t = 0; t < threads; t++)
      free (ctx.work[t]);
  free (ctx.work);
  if (status == CUDAFX_ERR_NO_MEMORY)
    return cudafx_fail (status, "median: out of memory");
  return status;
}

/* ==== entry points ========================================================= */

/* The CPU backend's median (core/cpu.c's table). */
cudafx_status
cudafx_median_cpu (const cudafx_image *src, cudafx_image *dst, const median_plan *plan,
                   const cudafx_options *o)
{
  median_job job = { src, dst, plan, NULL };
  if (plan->radius <= NETWORK_MAX_RADIUS)
    {
      /* f32: the rows holding a non-finite value, whose windows known_row
       * takes again */
      uint8_t *unknown = NULL;
      if (src->type == CUDAFX_F32)
        {
          int any = 0;
          if (!(unknown = calloc (src->height, 1)))
            return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "median: out of memory");
          for (int y = 0; y < src->height; y++)
            {
              const float *row = (const float *) cudafx_row (src, y);
              for (size_t i = 0; i < (size_t) src->width * src->channels && !unknown[y]; i++)
                unknown[y] = !isfinite (row[i]);
              any |= unknown[y];
            }
          job.unknown_rows = any ? unknown : NULL;
        }
      cudafx_status s = median_network (&job, o);
      free (unknown);
      return s;
    }
  if (src->type == CUDAFX_U8 && plan->shape == CUDAFX_SHAPE_SQUARE)
    return median_columns (&job, o);
  return median_histogram (&job, o);
}

typedef struct {
  const cudafx_image *src;
  cudafx_image       *dst;
  median_plan         plan;
} median_call;

static cudafx_status
median_run (const cudafx_backend_ops *b, void *call_, const cudafx_options *o)
{
  median_call *call = call_;
  return b->median (call->src, call->dst, &call->plan, o);
}

void
cudafx_median_params_init (cudafx_median_params *p)
{
  cudafx_params_defaults (CUDAFX_FILTER_MEDIAN, p);
}

cudafx_status
cudafx_median (const cudafx_image *src, cudafx_image *dst,
               const cudafx_median_params *p, const cudafx_options *o)
{
  cudafx_status s;
  if (!p)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "median: params is NULL");
  if ((s = cudafx_check_pair ("median", src, dst))
      || (s = cudafx_params_check (CUDAFX_FILTER_MEDIAN, p)))
    return s;
  median_call call = { src, dst, { p->radius, p->shape, p->percentile, 0, 0, { 0 } } };
  for (int dx = -p->radius; dx <= p->radius; dx++)
    call.plan.half[dx + p->radius] = window_extent (p->radius, dx, p->shape);
  call.plan.n = window_size (p->radius, p->shape);
  call.plan.rank = median_window_rank (p->percentile, call.plan.n);
  return cudafx_dispatch ("median", median_run, &call, src, dst, 1, o);
}
