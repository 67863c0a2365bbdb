/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize passes on the GPU: k-means assignment with the centre
 * sums (Lloyd 1982), over every pixel or, for u8 images, over the distinct
 * colours of the voting pixels with their counts (a histogram of colour
 * keys with integer atomics, then CUB's selection of the non-empty bins;
 * see quantize_lloyd.cu), the mapping of every pixel to its nearest palette
 * entry, plain or with Floyd–Steinberg error diffusion, and the seeding
 * attempts on the sample (k-means++ and Lloyd, see quantize_seed.cu),
 * and Lloyd's loop on the image without the host where its passes need no
 * upload (cudafx_quantize_cuda_lloyd: reduce_kernel's last block updates
 * the centres with quantize.h's quantize_move_centre and tests
 * convergence). core/quantize.c drives them (a session of core/backend.h)
 * and stays the reference: the choice of the attempt and the palette run
 * on the host for both backends, the sample there too unless the rows
 * handed over (quantize_rows) give it here, and the per-pixel
 * arithmetic is core/quantize.h's, compiled here without fused multiply-adds
 * (--fmad=false) and with IEEE division, so features, distances, nearest
 * centres and diffused errors equal the CPU's bit for bit.
 *
 * Memory: the image, its features (float planes) and vote flags stay on the
 * device across the iterations when they fit the budget; otherwise every
 * pass uploads the image in stripes and recomputes their features. The
 * seeding's workspace (about 1 MB) is taken first when it costs at most a
 * quarter of the budget; otherwise the host seeds. The distinct colours'
 * buffers (the 2^24 counters, 64 MiB, grey 256; per colour 16 bytes, at
 * most one colour per pixel) come next on the same terms; otherwise Lloyd
 * runs over every pixel. The seeding runs on the context's side stream
 * while a one-stripe image goes up on its main one and its distinct
 * colours are found; a one-stripe u8 image without alpha goes up before,
 * as the engine hands its rows over (cudafx_quantize_cuda_rows, in pieces
 * when the host provides them as asked), its colours counted and its
 * seeding sample gathered (sample_kernel) piece by piece, so that the
 * seeding waits for the last piece alone. When every pixel votes and no
 * dither follows, the mapping reads a table of each distinct colour's
 * entry (map_table_kernel) instead of searching the palette for every
 * pixel, and no pass reads per-pixel features.
 *
 * The files by job: this one drives the passes (the backend session's entry
 * points, the seeding's apart; a pass over the stripes; the selection of
 * the distinct colours), quantize_seed.cu seeds, quantize_lloyd.cu has
 * Lloyd's passes (and why their sums do not depend on the order),
 * quantize_map.cu the mapping, quantize_dither.cu Floyd–Steinberg and the
 * positioned dithers; quantize.cuh what they share. */
#include "quantize.cuh"

#include <cstddef>
#include <cub/device/device_select.cuh>
#include <new>
#include <stdio.h>
#include <thrust/iterator/counting_iterator.h>

namespace {

constexpr int BLOCKS_PER_SM = 4;
constexpr size_t ALIGN = 256;

/* The bins CUB's selection keeps. */
struct bin_filled
{
  const unsigned *bins;
  __device__ bool operator() (unsigned key) const { return bins[key] != 0; }
};

size_t
align_up (size_t bytes)
{
  return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

stripe_view
view_of (const quantize_session *q, int stripe, int *y0)
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
upload_stripe (quantize_session *q, const stripe_view &v, int y0)
{
  q->loaded = -1;
  if (q->arrived == q->src->height)
    return CUDAFX_OK; /* the one stripe, uploaded by quantize_rows */
  return cfx_check (cudaMemcpy2DAsync (q->d_src, q->pitch, cudafx_row (q->src, y0), q->src->stride,
                                       q->row_bytes, v.rows, cudaMemcpyHostToDevice, q->cx->stream),
                    FILTER, "copy to device");
}

cudafx_status
compute_features (quantize_session *q, const stripe_view &v, int i)
{
  if (q->table_map)
    {
      q->loaded = i; /* no pass reads them */
      return CUDAFX_OK;
    }
  cudafx_status s = qz_features (q, v);
  if (!s)
    q->loaded = i;
  return s;
}

/* Faults in every page of dst's rows [y0, y0 + rows) on the host's threads,
 * leaving the bytes as they are (an atomic OR of 0 is a write access). The
 * driver copies device results into pageable memory on one thread, which
 * on a fresh buffer (a new image) would take every page fault itself.
 * Pinned memory (the GEGL module's regions) has its pages: no touch, and
 * no parallel region whose threads, spinning on after it, would compete
 * with the host's own threads for the cores. */
void
touch_pages (cudafx_image *dst, int y0, int rows, size_t row_bytes, int threads)
{
  constexpr size_t PAGE = 4096; /* the smallest page size: larger ones are touched more than once */
#pragma omp parallel for num_threads (threads) schedule (static)
  for (int y = y0; y < y0 + rows; y++)
    {
      unsigned char *row = (unsigned char *) cudafx_row (dst, y);
      for (size_t b = 0; b < row_bytes; b += PAGE)
        __atomic_fetch_or (row + b, (unsigned char) 0, __ATOMIC_RELAXED);
      __atomic_fetch_or (row + row_bytes - 1, (unsigned char) 0, __ATOMIC_RELAXED);
    }
}

enum pass_kind { PASS_ASSIGN, PASS_HISTOGRAM, PASS_MAP, PASS_DITHER, PASS_POSITION };

/* One pass over every stripe: load, the pass's kernels, and for the mapping
 * (plain or dithered) the copy back to dst; kernel and transfer times go to the report. */
cudafx_status
run_pass (quantize_session *q, pass_kind kind, int k, cudafx_image *dst)
{
  cudafx_report *report = q->o ? q->o->report : NULL;
  cudafx_status s = CUDAFX_OK;
  const bool maps = kind != PASS_ASSIGN && kind != PASS_HISTOGRAM;
  const bool touch =
    maps && !cudafx_cuda_host_pinned (dst->data, (size_t) (dst->height - 1) * dst->stride + q->row_bytes);
  for (int i = 0; i < q->n_stripes && !s; i++)
    {
      char point[32];
      snprintf (point, sizeof point, "stripe%d", i);
      if (cfx_inject (point))
        return qz_fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault",
                                             FILTER, i));
      int y0;
      stripe_view v = view_of (q, i, &y0);
      float up_ms = 0, kernel_ms = 0, down_ms = 0;
      int fresh = q->loaded != i; /* else its features are still on the device */
      if ((s = cfx_check (cudaEventRecord (q->cx->ev[0], q->cx->stream), FILTER, "event")) ||
          (fresh && (s = upload_stripe (q, v, y0))) ||
          (s = cfx_check (cudaEventRecord (q->cx->ev[1], q->cx->stream), FILTER, "event")) ||
          (fresh && (kind == PASS_ASSIGN || kind == PASS_MAP || q->table_map) && (s = compute_features (q, v, i))))
        break;
      if (kind == PASS_HISTOGRAM)
        {
          if (i == 0 && (s = cfx_check (cudaMemsetAsync (q->d_bins, 0, (size_t) q->bins * sizeof (unsigned),
                                                         q->cx->stream),
                                        FILTER, "memset")))
            break;
          if ((s = qz_histogram (v, q->d_bins, q->cx->stream)))
            break;
        }
      else if (kind == PASS_ASSIGN)
        {
          if ((s = qz_queue_assign (q, &v, k, 0)))
            break;
        }
      else if (kind == PASS_MAP)
        {
          if (q->table_map && i == 0 && (s = qz_label_colours (q, k)))
            break;
          if ((s = qz_map (q, v, k)))
            break;
        }
      else if (kind == PASS_POSITION)
        {
          if ((s = qz_position (q, v, y0, k)))
            break;
        }
      else if ((s = qz_launch_dither (q, v, i, y0, k)))
        break;
      if ((s = cfx_check (cudaEventRecord (q->cx->ev[2], q->cx->stream), FILTER, "event")))
        break;
      if (maps)
        {
          if (touch)
            touch_pages (dst, y0, v.rows, q->row_bytes, cudafx_thread_count (q->o)); /* as the kernel runs */
          if ((s = cfx_download_rows (q->cx, FILTER, q->d_dst, q->pitch, dst, y0, v.rows, q->cx->ev[3], q->o)))
            break;
        }
      if ((!maps && (s = cfx_check (cudaEventRecord (q->cx->ev[3], q->cx->stream), FILTER, "event"))) ||
          (s = cfx_check (cudaStreamSynchronize (q->cx->stream), FILTER, "kernel")) ||
          (s = cfx_check (cudaEventElapsedTime (&up_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&down_ms, q->cx->ev[2], q->cx->ev[3]), FILTER, "event timing")))
        break;
      if (report)
        {
          report->kernel_ms += kernel_ms;
          report->transfer_ms += up_ms + down_ms;
        }
      if (maps)
        s = cudafx_progress (q->o, 0.9 + 0.1 * (y0 + v.rows) / q->src->height);
    }
  return qz_fail_cuda (q, s);
}

/* Ends a stretch of work on the main stream that began at ev[0]: waits for
 * it and adds its time to the report's kernel time. */
cudafx_status
add_kernel_time (quantize_session *q, const char *what)
{
  float ms = 0;
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[1], q->cx->stream), FILTER, "event")) ||
      (s = cfx_check (cudaEventSynchronize (q->cx->ev[1]), FILTER, what)) ||
      (s = cfx_check (cudaEventElapsedTime (&ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")))
    return s;
  if (q->o && q->o->report)
    q->o->report->kernel_ms += ms;
  return CUDAFX_OK;
}

/* One assignment over the distinct colours into d_totals (found on the
 * first call). */
cudafx_status
assign_colours (quantize_session *q, int k)
{
  cudafx_status s;
  if ((!q->colours && (s = qz_find_colours (q))) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[0], q->cx->stream), FILTER, "event")) ||
      (s = qz_queue_assign (q, NULL, k, 0)))
    return s;
  return add_kernel_time (q, "assign_colours_kernel");
}

} // namespace

cudafx_status
qz_fail_cuda (quantize_session *q, cudafx_status s)
{
  if (s == CUDAFX_ERR_CUDA)
    q->failed = 1;
  return s;
}

/* Stripe 0 of a one-stripe image to the device (unless quantize_rows
 * uploaded it) and its features, on stream 0 while the seeding runs on its
 * own; the passes then find it loaded. Timed by ev[0..2]. */
cudafx_status
qz_preload (quantize_session *q)
{
  int y0;
  stripe_view v = view_of (q, 0, &y0);
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[0], q->cx->stream), FILTER, "event")) ||
      (s = upload_stripe (q, v, y0)) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[1], q->cx->stream), FILTER, "event")) ||
      (s = compute_features (q, v, 0)))
    return s;
  return cfx_check (cudaEventRecord (q->cx->ev[2], q->cx->stream), FILTER, "event");
}

/* Reports the times of quantize_rows' last piece (its upload, ev[0] to
 * ev[1]; its kernels, to ev[2]), waiting for them, before ev[0..2] serve
 * again. */
cudafx_status
qz_report_piece (quantize_session *q)
{
  if (!q->piece_timed)
    return CUDAFX_OK;
  q->piece_timed = false;
  float up_ms = 0, kernel_ms = 0;
  cudafx_status s;
  if ((s = cfx_check (cudaEventSynchronize (q->cx->ev[2]), FILTER, "copy to device")) ||
      (s = cfx_check (cudaEventElapsedTime (&up_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&kernel_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")))
    return s;
  if (q->o && q->o->report)
    {
      q->o->report->transfer_ms += up_ms;
      q->o->report->kernel_ms += kernel_ms;
    }
  return CUDAFX_OK;
}

/* The distinct colours of the voting pixels, once a run: their keys
 * counted stripe by stripe (unless quantize_rows did), CUB's selection of
 * the non-empty bins (keys ascending), then each colour's features and
 * count. */
cudafx_status
qz_find_colours (quantize_session *q)
{
  cudaStream_t stream = q->cx->stream;
  size_t bytes = q->select_bytes;
  int selected = 0;
  cudafx_status s;
  if ((!q->counted && (s = run_pass (q, PASS_HISTOGRAM, 0, NULL))) ||
      (s = cfx_check (cudaEventRecord (q->cx->ev[0], stream), FILTER, "event")) ||
      (s = cfx_check (cub::DeviceSelect::If (q->d_select, bytes, thrust::counting_iterator<unsigned> (0), q->d_keys,
                                             q->d_selected, q->bins, bin_filled { q->d_bins }, stream),
                      FILTER, "selecting the colours")) ||
      (s = cfx_check (cudaMemcpyAsync (&selected, q->d_selected, sizeof selected, cudaMemcpyDeviceToHost, stream),
                      FILTER, "copy to host")) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "selecting the colours")))
    return s;
  /* the kernel time includes the count's copy back, a few bytes */
  if ((s = qz_colours (q, selected)) || (s = add_kernel_time (q, "colours_kernel")))
    return s;
  q->colours = selected;
  return CUDAFX_OK;
}

extern "C" cudafx_status
cudafx_quantize_cuda_open (const quantize_plan *plan, const cudafx_options *o, quantize_session **out)
{
  *out = NULL;
  quantize_session *q = new (std::nothrow) quantize_session ();
  if (!q)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: out of memory", FILTER);
  const cudafx_image *src = plan->src;
  const quantize_space *space = &plan->fs;
  const int everyone_votes = plan->everyone_votes;
  q->src = src;
  q->o = o;
  q->fs = *space;
  q->dims = space->dims;
  q->oklab = space->oklab;
  q->everyone_votes = everyone_votes;
  q->loaded = -1;
  q->samples = plan->sample;
  *out = q;

  cudafx_status s = cfx_begin (q->call, FILTER, o);
  if (s)
    return qz_fail_cuda (q, s);
  q->cx = q->call.cx;
  const int device_sms = q->cx->sms;

  /* Stripe rows from the budget: per row the source and result rows, the
   * feature planes and the vote flags, and the dither's boundary rows (one
   * per DITHER_ROWS rows, and counters); once, the blocks' partial sums (as
   * many blocks as a quarter of the budget allows), the totals, and the
   * dither's two extra boundary rows. */
  q->row_bytes = (size_t) src->width * src->channels * cudafx_type_size (src->type);
  q->pitch = align_up (q->row_bytes);
  size_t budget = cfx_memory_budget (q->cx);
  /* the seeding's workspace when it costs at most a quarter of the budget */
  size_t seed_bytes = align_up (qz_seed_bytes) <= budget / 4 ? align_up (qz_seed_bytes) : 0;
  budget -= seed_bytes;
  /* Lloyd over the distinct colours when their buffers cost at most a
   * quarter of the rest: a counter per key, and per colour (at most one per
   * key or per pixel) its key, then count, and features; CUB's scratch.
   * Else over every pixel, the same sums. */
  size_t colour_bytes = 0, bin_bytes = 0, array_bytes = 0;
  if (plan->distinct)
    {
      q->bins = q->dims == 3 ? 1 << 24 : 256;
      size_t pixels = (size_t) src->width * src->height;
      size_t most = pixels < (size_t) q->bins ? pixels : (size_t) q->bins;
      bin_bytes = align_up ((size_t) q->bins * sizeof (unsigned));
      array_bytes = align_up (most * sizeof (float)); /* and of unsigned: keys, counts */
      if ((s = cfx_check (cub::DeviceSelect::If (nullptr, q->select_bytes, thrust::counting_iterator<unsigned> (0),
                                                 (unsigned *) nullptr, (int *) nullptr, q->bins,
                                                 bin_filled { nullptr }, q->cx->stream),
                          FILTER, "selecting the colours")))
        return qz_fail_cuda (q, s);
      size_t bytes = bin_bytes + (2 + q->dims) * array_bytes + align_up (q->select_bytes) + ALIGN;
      if (bytes <= budget / 4)
        {
          colour_bytes = bytes;
          budget -= bytes;
          q->distinct = 1;
          q->table_map = everyone_votes && plan->dither == CUDAFX_DITHER_NONE;
        }
    }
  size_t block_bytes = COUNTERS * sizeof (long long);
  size_t blocks = (size_t) device_sms * BLOCKS_PER_SM;
  if (blocks * block_bytes > budget / 4)
    blocks = budget / 4 / block_bytes;
  if (blocks < 1)
    blocks = 1;
  q->max_blocks = (int) blocks;
  size_t bound_row = (size_t) src->width * sizeof (float4);
  size_t per_row = 2 * q->pitch + (size_t) src->width * (q->dims * sizeof (float) + !everyone_votes) +
                   bound_row / DITHER_ROWS + 1;
  size_t fixed = (blocks + 1) * block_bytes + sizeof (lloyd_state) + 2 * bound_row + 9 * ALIGN; /* + alignment */
  if (budget <= fixed + per_row)
    return qz_fail_cuda (q, cudafx_fail (CUDAFX_ERR_CUDA,
                                         "%s: CUDA out of memory: %zu bytes of device memory allowed, "
                                         "a stripe needs %zu", FILTER, budget, fixed + per_row));
  size_t max_rows = (budget - fixed) / per_row;
  q->rows = max_rows < (size_t) src->height ? (int) max_rows : src->height;
  q->n_stripes = (src->height + q->rows - 1) / q->rows;
  q->rows = (src->height + q->n_stripes - 1) / q->n_stripes; /* even stripes */

  size_t pixels = (size_t) src->width * q->rows;
  size_t plane_bytes = align_up (pixels * sizeof (float));
  size_t vote_bytes = everyone_votes ? 0 : align_up (pixels);
  size_t bound_bytes = align_up (dither_bound_rows (q->rows) * bound_row);
  size_t scratch = seed_bytes + q->dims * plane_bytes + vote_bytes + blocks * block_bytes + block_bytes +
                   align_up (sizeof (lloyd_state)) + bound_bytes + align_up (dither_bound_rows (q->rows) * sizeof (int));
  unsigned char *d_scratch;
  if ((s = cfx_buffer (q->cx, CFX_SLOT_SRC, q->pitch * q->rows, (void **) &q->d_src, FILTER)) ||
      (s = cfx_buffer (q->cx, CFX_SLOT_DST, q->pitch * q->rows, (void **) &q->d_dst, FILTER)) ||
      (s = cfx_buffer (q->cx, CFX_SLOT_SCRATCH, scratch, (void **) &d_scratch, FILTER)))
    return qz_fail_cuda (q, s);
  q->d_seed = seed_bytes ? d_scratch : NULL;
  d_scratch += seed_bytes;
  for (int c = 0; c < q->dims; c++)
    q->d_plane[c] = (float *) (d_scratch + c * plane_bytes);
  q->d_votes = d_scratch + q->dims * plane_bytes;
  q->d_partials = (long long *) (q->d_votes + vote_bytes);
  q->d_totals = q->d_partials + blocks * COUNTERS;
  q->d_lloyd = (lloyd_state *) (q->d_totals + COUNTERS);
  q->d_bound = (float4 *) ((unsigned char *) q->d_lloyd + align_up (sizeof (lloyd_state)));
  q->d_progress = (int *) ((unsigned char *) q->d_bound + bound_bytes);
  if (q->distinct)
    {
      unsigned char *d_colours;
      if ((s = cfx_buffer (q->cx, CFX_SLOT_AUX, colour_bytes, (void **) &d_colours, FILTER)))
        return qz_fail_cuda (q, s);
      q->d_bins = (unsigned *) d_colours;
      q->d_keys = (unsigned *) (d_colours + bin_bytes);
      q->d_counts = (unsigned *) (d_colours + bin_bytes + array_bytes);
      for (int c = 0; c < q->dims; c++)
        q->d_colour[c] = (float *) (d_colours + bin_bytes + (2 + c) * array_bytes);
      q->d_select = d_colours + bin_bytes + (2 + q->dims) * array_bytes;
      q->d_selected = (int *) ((unsigned char *) q->d_select + align_up (q->select_bytes));
    }

  if ((s = cfx_check (cudaMemsetAsync (q->d_lloyd, 0, sizeof (lloyd_state), q->cx->stream), FILTER, "memset")))
    return qz_fail_cuda (q, s);
  return qz_fail_cuda (q, qz_lloyd_constants (q->cx->stream, space));
}

extern "C" cudafx_status
cudafx_quantize_cuda_rows (quantize_session *q, int y0, int y1, int *sampled)
{
  *sampled = 0;
  if (q->n_stripes > 1)
    return CUDAFX_OK; /* each pass uploads its stripes */
  cfx_context *cx = q->cx;
  const cudafx_image *src = q->src;
  int top;
  stripe_view v = view_of (q, 0, &top);
  v.src += (size_t) y0 * q->pitch;
  v.rows = y1 - y0;
  v.n = (size_t) v.width * v.rows;
  /* the seeding sample's entries in these rows, every pixel voting */
  const unsigned long long n = (unsigned long long) src->width * src->height;
  const unsigned long long j0 = quantize_first_sample ((uint64_t) y0 * src->width, n, q->samples),
                           j1 = quantize_first_sample ((uint64_t) y1 * src->width, n, q->samples);
  cudafx_status s;
  if ((s = qz_report_piece (q)) || (s = cfx_check (cudaEventRecord (cx->ev[0], cx->stream), FILTER, "event")) ||
      (s = cfx_check (cudaMemcpy2DAsync ((unsigned char *) v.src, q->pitch, cudafx_row (src, y0), src->stride,
                                         q->row_bytes, v.rows, cudaMemcpyHostToDevice, cx->stream),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaEventRecord (cx->ev[1], cx->stream), FILTER, "event")))
    return qz_fail_cuda (q, s);
  q->loaded = -1;
  q->arrived = y1;
  q->piece_timed = true;
  if (q->d_seed && q->samples > 0)
    {
      if (j1 > j0 && (s = qz_sample (q, v, y0, n, j0, j1)))
        return qz_fail_cuda (q, s);
      if ((s = cfx_check (cudaEventRecord (cx->ev[3], cx->stream), FILTER, "event")))
        return qz_fail_cuda (q, s);
      *sampled = 1;
    }
  if (q->distinct)
    {
      if (y0 == 0 && (s = cfx_check (cudaMemsetAsync (q->d_bins, 0, (size_t) q->bins * sizeof (unsigned), cx->stream),
                                     FILTER, "memset")))
        return qz_fail_cuda (q, s);
      if (v.n && (s = qz_histogram (v, q->d_bins, cx->stream)))
        return qz_fail_cuda (q, s);
      q->counted = y1 == src->height;
    }
  return qz_fail_cuda (q, cfx_check (cudaEventRecord (cx->ev[2], cx->stream), FILTER, "event"));
}

extern "C" cudafx_status
cudafx_quantize_cuda_assign (quantize_session *q, const float (*centre)[3], int k, quantize_sums *sums,
                             double from, double to)
{
  cudaStream_t stream = q->cx->stream;
  long long totals[COUNTERS];
  cudafx_status s;
  if ((s = qz_report_piece (q)) ||
      (s = cfx_check (cudaMemcpyAsync (q->d_lloyd->centre, centre, (size_t) k * sizeof centre[0],
                                       cudaMemcpyHostToDevice, stream),
                      FILTER, "copy to device")) ||
      (s = cfx_check (cudaMemsetAsync (q->d_totals, 0, 4 * (size_t) k * sizeof (long long), stream), FILTER,
                      "memset")) ||
      (s = q->distinct ? assign_colours (q, k) : run_pass (q, PASS_ASSIGN, k, NULL)) ||
      (s = cfx_check (cudaMemcpyAsync (totals, q->d_totals, 4 * (size_t) k * sizeof (long long),
                                       cudaMemcpyDeviceToHost, stream),
                      FILTER, "copy to host")) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "copy to host")))
    return qz_fail_cuda (q, s);
  for (int j = 0; j < k; j++)
    {
      for (int c = 0; c < 3; c++)
        sums->sums[j][c] = totals[4 * j + c];
      sums->counts[j] = totals[4 * j + 3];
    }
  return cudafx_progress (q->o, to);
}

/* Passes queued between looks at whether the device's Lloyd loop has
 * settled: a look waits for the queue to drain (a host round trip), and a
 * pass queued past the end costs two launches that return at once. */
constexpr int LLOYD_BATCH = 8;

extern "C" cudafx_status
cudafx_quantize_cuda_lloyd (quantize_session *q, int32_t (*centres)[3], int k, int max_iterations, int *iterations,
                            double from, double to, int *ran)
{
  *ran = 0;
  if (!q->distinct && q->n_stripes > 1)
    return CUDAFX_OK; /* each pass uploads the stripes: the host drives them */
  cudaStream_t stream = q->cx->stream;
  cudafx_status s = qz_report_piece (q);
  if (s)
    return qz_fail_cuda (q, s);
  lloyd_state start;
  memset (&start, 0, sizeof start);
  for (int j = 0; j < k; j++)
    for (int c = 0; c < 3; c++)
      {
        start.mean[j][c] = centres[j][c];
        start.centre[j][c] = (float) centres[j][c];
      }
  int y0;
  const stripe_view v = view_of (q, 0, &y0);
  const bool load = !q->distinct && q->loaded != 0; /* the seeding ran on the host: nothing preloaded */
  struct
  {
    int iterations, settled;
  } seen = { 0, 0 }; /* lloyd_state's two, adjacent */
  static_assert (offsetof (lloyd_state, settled) == offsetof (lloyd_state, iterations) + sizeof (int),
                 "iterations and settled are read back together");
  if ((s = cfx_check (cudaMemcpyAsync (q->d_lloyd, &start, sizeof start, cudaMemcpyHostToDevice, stream), FILTER,
                      "copy to device")) ||
      (s = cfx_check (cudaMemsetAsync (q->d_totals, 0, 4 * (size_t) k * sizeof (long long), stream), FILTER,
                      "memset")) ||
      (q->distinct && !q->colours && (s = qz_find_colours (q))) || (load && (s = qz_preload (q))) ||
      (!load && (s = cfx_check (cudaEventRecord (q->cx->ev[2], stream), FILTER, "event"))))
    return qz_fail_cuda (q, s);
  for (int queued = 0; queued < max_iterations && !seen.settled;)
    {
      int batch = max_iterations - queued < LLOYD_BATCH ? max_iterations - queued : LLOYD_BATCH;
      for (int b = 0; b < batch && !s; b++)
        s = qz_queue_assign (q, q->distinct ? NULL : &v, k, max_iterations);
      queued += batch;
      if (s ||
          (s = cfx_check (cudaMemcpyAsync (&seen, &q->d_lloyd->iterations, sizeof seen, cudaMemcpyDeviceToHost,
                                           stream),
                          FILTER, "copy to host")) ||
          (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "Lloyd")) ||
          (s = cudafx_progress (q->o, from + (to - from) * seen.iterations / max_iterations)))
        return qz_fail_cuda (q, s);
    }
  float load_ms = 0, features_ms = 0, lloyd_ms = 0;
  if ((s = cfx_check (cudaEventRecord (q->cx->ev[3], stream), FILTER, "event")) ||
      (s = cfx_check (cudaMemcpyAsync (start.mean, q->d_lloyd->mean, (size_t) k * sizeof start.mean[0],
                                       cudaMemcpyDeviceToHost, stream),
                      FILTER, "copy to host")) ||
      (s = cfx_check (cudaStreamSynchronize (stream), FILTER, "Lloyd")) ||
      (s = cfx_check (cudaEventElapsedTime (&lloyd_ms, q->cx->ev[2], q->cx->ev[3]), FILTER, "event timing")) ||
      (load &&
       ((s = cfx_check (cudaEventElapsedTime (&load_ms, q->cx->ev[0], q->cx->ev[1]), FILTER, "event timing")) ||
        (s = cfx_check (cudaEventElapsedTime (&features_ms, q->cx->ev[1], q->cx->ev[2]), FILTER, "event timing")))))
    return qz_fail_cuda (q, s);
  if (q->o && q->o->report)
    {
      q->o->report->kernel_ms += lloyd_ms + features_ms;
      q->o->report->transfer_ms += load_ms;
    }
  memcpy (centres, start.mean, (size_t) k * sizeof start.mean[0]);
  *iterations = seen.iterations;
  *ran = 1;
  return CUDAFX_OK;
}

extern "C" cudafx_status
cudafx_quantize_cuda_map (quantize_session *q, const quantize_mapping *m, cudafx_image *dst)
{
  cudafx_status s;
  /* the palette into the constant memory of the kernels that will read it */
  if ((s = qz_report_piece (q)) ||
      (s = m->dither == CUDAFX_DITHER_NONE ? qz_map_constants (q->cx->stream, &m->pal)
                                           : qz_dither_constants (q->cx->stream, &q->fs, m)))
    return qz_fail_cuda (q, s);
  q->map = m;
  if (q->table_map && !q->colours && (s = qz_find_colours (q)))
    return qz_fail_cuda (q, s);
  if (m->dither == CUDAFX_DITHER_NONE)
    return run_pass (q, PASS_MAP, m->pal.k, dst);
  if (!quantize_is_diffusion (m->dither))
    return run_pass (q, PASS_POSITION, m->pal.k, dst);
  if ((s = cfx_staging (q->cx, CFX_STAGING_COUNTERS, sizeof (int), (void **) &q->h_rows_done,
                        (void **) &q->d_rows_done, FILTER)))
    return qz_fail_cuda (q, s);
  return run_pass (q, PASS_DITHER, m->pal.k, dst);
}

extern "C" void
cudafx_quantize_cuda_close (quantize_session *q)
{
  if (!q)
    return;
  if (q->failed && q->call.cx)
    cfx_release_buffers (q->call.cx); /* after a fault, start the next call from clean buffers */
  delete q; /* releases the device */
}
