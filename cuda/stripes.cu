/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The stripe runner: kernels fed rows with halos, so that an image larger
 * than device memory works, and, when the image fits, a pipeline over four
 * streams that overlaps the copies of one stripe with the kernels of
 * others. See context.cuh. */
#include "context.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>

/* ---- stripes ------------------------------------------------------------------- */

/* A stripe's scratch: scratch_row_bytes for each of its rows and halo rows. */
static size_t
stripe_scratch (int rows, int halo, size_t scratch_row_bytes)
{
  return scratch_row_bytes * (rows + 2 * (size_t) halo);
}

static size_t
row_bytes_of (const cudafx_image *src)
{
  return (size_t) src->width * src->channels * cudafx_type_size (src->type);
}

/* Aligned rows for coalesced access. */
static size_t
stripe_pitch (const cudafx_image *src)
{
  return (row_bytes_of (src) + 255) / 256 * 256;
}

/* Rows per stripe for src with halo and scratch (at most the image's
 * height; 0: not even one row fits), with the budget and the bytes of a
 * one-row stripe. */
static int
stripe_rows (cfx_context *cx, const cudafx_image *src, int halo, size_t scratch_row_bytes, size_t *budget,
             size_t *need)
{
  size_t pitch = stripe_pitch (src);
  *budget = cfx_memory_budget (cx);
  /* Per output row: one input row, one output row, scratch; plus 2*halo rows once. */
  size_t per_row = 2 * pitch + scratch_row_bytes;
  size_t fixed = 2 * (size_t) halo * (pitch + scratch_row_bytes);
  *need = fixed + per_row;
  if (*budget <= *need)
    return 0;
  size_t max_rows = (*budget - fixed) / per_row;
  return max_rows < (size_t) src->height ? (int) max_rows : src->height;
}

/* The buffers of stripes of `rows` rows, into st. */
static cudafx_status
stripe_buffers (cfx_context *cx, const char *filter, const cudafx_image *src, int rows, int halo,
                size_t scratch_row_bytes, cfx_stripe *st)
{
  size_t pitch = stripe_pitch (src);
  unsigned char *d_src, *d_dst;
  void *d_scratch = NULL;
  cudafx_status s;
  if ((s = cfx_buffer (cx, CFX_SLOT_SRC, pitch * (rows + 2 * (size_t) halo), (void **) &d_src, filter)) ||
      (s = cfx_buffer (cx, CFX_SLOT_DST, pitch * rows, (void **) &d_dst, filter)) ||
      (scratch_row_bytes &&
       (s = cfx_buffer (cx, CFX_SLOT_SCRATCH, stripe_scratch (rows, halo, scratch_row_bytes), &d_scratch,
                        filter))))
    {
      cfx_release_buffers (cx);
      return s;
    }
  *st = { d_src, pitch, d_dst, pitch, 0, rows, halo, src->width, src->height,
          src->channels, src->type, d_scratch, cx->stream };
  return CUDAFX_OK;
}

/* ---- copies between the host and a stripe ------------------------------------- */

/* Whether img's rows lie in pinned memory, for copies without staging. */
static bool
host_direct (const cudafx_image *img)
{
  if (!img || img->height < 1)
    return false;
  size_t row_bytes = (size_t) img->width * img->channels * cudafx_type_size (img->type);
  return cudafx_cuda_host_pinned (img->data, (size_t) (img->height - 1) * img->stride + row_bytes);
}

/* Rows [v0, v0 + n) of a src that lies in pinned memory (host_direct) to
 * the device at d (pitch) on stream: the image's own rows straight from src,
 * the rows outside it made up by border in pinned staging `up` first (row
 * v < 0 at up + (v + halo) * row_bytes, row v >= height at up + (halo + v -
 * height) * row_bytes: 2 * halo rows in all, so that concurrent uploads of
 * the top and bottom stripes never share them). Those few rows are copied on
 * this thread: a parallel region costs more than they do, and its threads
 * spin on beside the host's own (a GEGL operation's next gegl_buffer_set). */
static cudafx_status
upload_direct (const char *filter, const cudafx_image *src, cudafx_border border, int halo, int v0, int n,
               unsigned char *up, unsigned char *d, size_t pitch, cudaStream_t stream)
{
  const size_t row_bytes = row_bytes_of (src);
  /* [v0, a) above the image, [a, b) in it, [b, v1) below it. */
  const int v1 = v0 + n, a = v0 > 0 ? (v0 < v1 ? v0 : v1) : (0 < v1 ? 0 : v1);
  const int b = v1 < src->height ? (v1 > a ? v1 : a) : (src->height > a ? src->height : a);
  cudafx_status s = CUDAFX_OK;
  if (v0 < a)
    {
      cfx_host_rows h = { src, up + (size_t) (v0 + halo) * row_bytes, v0, row_bytes, border, true };
      cfx_copy_host_rows (&h, 0, a - v0);
      s = cfx_check (cudaMemcpy2DAsync (d, pitch, h.pinned, row_bytes, row_bytes, a - v0, cudaMemcpyHostToDevice,
                                        stream),
                     filter, "copy to device");
    }
  if (!s && a < b)
    s = cfx_check (cudaMemcpy2DAsync (d + (size_t) (a - v0) * pitch, pitch, cudafx_row (src, a), src->stride,
                                      row_bytes, b - a, cudaMemcpyHostToDevice, stream),
                   filter, "copy to device");
  if (!s && b < v1)
    {
      cfx_host_rows h = { src, up + (size_t) (halo + b - src->height) * row_bytes, b, row_bytes, border, true };
      cfx_copy_host_rows (&h, 0, v1 - b);
      s = cfx_check (cudaMemcpy2DAsync (d + (size_t) (b - v0) * pitch, pitch, h.pinned, row_bytes, row_bytes,
                                        v1 - b, cudaMemcpyHostToDevice, stream),
                     filter, "copy to device");
    }
  return s;
}

/* Each stripe's copies at least this large, so the copy engines run near
 * their peak; more stripes shorten the pipeline's fill and drain. */
constexpr size_t CFX_PIPE_MIN_BYTES = 2u << 20;

/* Whether the pipeline's stripes alternate between two kernel streams
 * (pipe_issue), each stream's with a scratch of their own. Not a pass
 * whose results stay on the device (dst NULL: nl-means' noise counts, which
 * the first stripe zeroes and the last copies out): its stripes follow one
 * another on the call's stream. */
static bool
pipe_alternates (long stripes, const cudafx_image *dst)
{
  return stripes > 1 && dst;
}

/* Stripes of the pipelined runner for src (CUDAFX_CUDA_STRIPES, else by
 * size), or 0 when the whole image does not fit the budget at once. */
static int
pipe_stripes (cfx_context *cx, const cudafx_image *src, int halo, size_t scratch_row_bytes, cudafx_image *dst)
{
  size_t pitch = stripe_pitch (src), bytes = row_bytes_of (src) * src->height;
  long n = (long) (bytes / CFX_PIPE_MIN_BYTES);
  const char *env = cudafx_test_switch ("CUDAFX_CUDA_STRIPES");
  if (env && *env)
    n = strtol (env, NULL, 10);
  n = n < 1 ? 1 : n > CFX_PIPE_STRIPES ? CFX_PIPE_STRIPES : n;
  n = n > src->height ? src->height : n;
  int rows = (int) ((src->height + n - 1) / n);
  size_t need = (src->height + 2 * (size_t) halo) * pitch +
                (pipe_alternates (n, dst) ? 2 : 1) * stripe_scratch (rows, halo, scratch_row_bytes) +
                (dst ? src->height * pitch : 0);
  if (need > cfx_memory_budget (cx))
    return 0;
  return (src->height + rows - 1) / rows;
}

/* Event j of stripe k: 0, 1 its upload's start and end (side stream), 2, 3
 * its kernel's (its kernel stream), 4 its download's end (the download
 * stream; the kernel stream where there is no download). */
static cudaEvent_t
pipe_event (cfx_context *cx, int k, int j)
{
  return cx->ev[CFX_BASE_EVENTS + 5 * k + j];
}

/* Rows a chunk of a staged copy: at least CFX_PIPE_MIN_BYTES, and at most
 * CFX_PIPE_STRIPES chunks (each download chunk has a pipeline event). */
static int
chunk_rows (size_t row_bytes, int rows)
{
  size_t by_size = CFX_PIPE_MIN_BYTES / row_bytes, by_count = (rows + CFX_PIPE_STRIPES - 1) / CFX_PIPE_STRIPES;
  size_t chunk = by_size > by_count ? by_size : by_count;
  return chunk < 1 ? 1 : chunk > (size_t) rows ? rows : (int) chunk;
}

/* Asks the host for src's rows up to v1, the end of a stripe's lower halo,
 * before the stripe's rows are read (options.rows_needed): the wrap
 * border's upper halo is the image's last rows, so with it all at once. */
static cudafx_status
need_rows (const char *filter, const cudafx_image *src, cudafx_border border, int v1, const cudafx_options *o)
{
  return cudafx_source_rows (o, filter, border == CUDAFX_BORDER_WRAP ? src->height : v1);
}

/* Rows [y0 - halo, y0 + n + halo) of src into the stripe through pinned
 * memory, in chunks: the host's copy of one chunk overlaps the upload of the
 * one before. Timed by ev[0..1]. */
static cudafx_status
stripe_upload (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_border border, int y0,
               int n, cfx_stripe *st, const cudafx_options *o)
{
  st->y0 = y0;
  st->rows = n;
  const size_t row_bytes = row_bytes_of (src);
  const int v0 = y0 - st->halo, total = n + 2 * st->halo, chunk = chunk_rows (row_bytes, total);
  const bool direct = host_direct (src);
  unsigned char *up;
  cudafx_status s = need_rows (filter, src, border, v0 + total, o);
  if (s)
    return s;
  s = cfx_staging (cx, CFX_STAGING_UP, row_bytes * (direct ? 2 * st->halo : total), (void **) &up, NULL, filter);
  if (direct && !s && !(s = cfx_check (cudaEventRecord (cx->ev[0], cx->stream), filter, "event")))
    s = upload_direct (filter, src, border, st->halo, v0, total, up, (unsigned char *) st->d_src, st->src_pitch,
                       cx->stream);
  for (int r = 0; r < total && !s && !direct; r += chunk)
    {
      const int m = chunk < total - r ? chunk : total - r;
      cfx_host_rows h = { src, up + (size_t) r * row_bytes, v0 + r, row_bytes, border, true };
      cfx_host_copy (cx, &h, m, NULL);
      if (r == 0 && (s = cfx_check (cudaEventRecord (cx->ev[0], cx->stream), filter, "event")))
        break;
      s = cfx_check (cudaMemcpy2DAsync ((unsigned char *) st->d_src + (size_t) r * st->src_pitch, st->src_pitch,
                                        h.pinned, row_bytes, row_bytes, m, cudaMemcpyHostToDevice, cx->stream),
                     filter, "copy to device");
    }
  if (!s)
    s = cfx_check (cudaEventRecord (cx->ev[1], cx->stream), filter, "event");
  if (s)
    {
      cudaStreamSynchronize (cx->stream); /* no copy from the staging buffer outlives the call */
      return s;
    }
  cx->upload_timed = true;
  return CUDAFX_OK;
}

/* The stripe's output rows into dst through pinned memory, in chunks: the
 * host copies one chunk out while the next comes down. Ends with the stream
 * synchronised. */
static cudafx_status
stripe_download (cfx_context *cx, const char *filter, const cfx_stripe *st, cudafx_image *dst,
                 const cudafx_options *o)
{
  const size_t row_bytes = (size_t) st->width * st->channels * cudafx_type_size (st->type);
  const int chunk = chunk_rows (row_bytes, st->rows);
  if (host_direct (dst))
    {
      cudafx_status s = cfx_check (cudaMemcpy2DAsync (cudafx_row (dst, st->y0), dst->stride, st->d_dst,
                                                      st->dst_pitch, row_bytes, st->rows, cudaMemcpyDeviceToHost,
                                                      cx->stream),
                                   filter, "copy to host");
      if (!s)
        s = cfx_check (cudaEventRecord (cx->ev[4], cx->stream), filter, "event");
      cudafx_status w = cfx_check (cudaStreamSynchronize (cx->stream), filter, "kernel");
      return s ? s : w;
    }
  unsigned char *down;
  cudafx_status s = cfx_staging (cx, CFX_STAGING_DOWN, row_bytes * st->rows, (void **) &down, NULL, filter);
  int issued = 0;
  for (int r = 0; r < st->rows && !s; r += chunk, issued++)
    {
      const int m = chunk < st->rows - r ? chunk : st->rows - r;
      if (!(s = cfx_check (cudaMemcpy2DAsync (down + (size_t) r * row_bytes, row_bytes,
                                              st->d_dst + (size_t) r * st->dst_pitch, st->dst_pitch, row_bytes, m,
                                              cudaMemcpyDeviceToHost, cx->stream),
                           filter, "copy to host")))
        s = cfx_check (cudaEventRecord (pipe_event (cx, issued, 4), cx->stream), filter, "event");
    }
  if (!s)
    s = cfx_check (cudaEventRecord (cx->ev[4], cx->stream), filter, "event");
  for (int c = 0; c < issued && !s; c++)
    if (!(s = cfx_check (cudaEventSynchronize (pipe_event (cx, c, 4)), filter, "copy to host")))
      {
        const int r = c * chunk, m = chunk < st->rows - r ? chunk : st->rows - r;
        cfx_host_rows h = { dst, down + (size_t) r * row_bytes, st->y0 + r, row_bytes, CUDAFX_BORDER_CLAMP, false };
        cfx_host_copy (cx, &h, m, o);
      }
  cudafx_status w = cfx_check (cudaStreamSynchronize (cx->stream), filter, "kernel");
  return s ? s : w;
}

cudafx_status
cfx_apply (cfx_context *cx, const char *filter, const cfx_stripe *st, cfx_stripe_fn fn, void *ctx,
           cudafx_image *dst, const cudafx_options *o)
{
  float up_ms = 0, kernel_ms = 0, down_ms = 0;
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (cx->ev[2], cx->stream), filter, "event")) ||
      (s = fn (ctx, st)) ||
      (s = cfx_check (cudaEventRecord (cx->ev[3], cx->stream), filter, "event")) ||
      (dst && (s = stripe_download (cx, filter, st, dst, o))) ||
      (!dst && (s = cfx_check (cudaEventRecord (cx->ev[4], cx->stream), filter, "event"))) ||
      (s = cfx_check (cudaStreamSynchronize (cx->stream), filter, "kernel")) ||
      (cx->upload_timed &&
       (s = cfx_check (cudaEventElapsedTime (&up_ms, cx->ev[0], cx->ev[1]), filter, "event timing"))) ||
      (s = cfx_check (cudaEventElapsedTime (&kernel_ms, cx->ev[2], cx->ev[3]), filter, "event timing")) ||
      (s = cfx_check (cudaEventElapsedTime (&down_ms, cx->ev[3], cx->ev[4]), filter, "event timing")))
    return s;
  cx->upload_timed = false;
  cudafx_report *report = o ? o->report : NULL;
  if (report)
    {
      report->kernel_ms += kernel_ms;
      report->transfer_ms += up_ms + down_ms;
    }
  if (dst)
    cudafx_rows_final (o, st->y0, st->y0 + st->rows);
  return CUDAFX_OK;
}

cudafx_status
cfx_download_rows (cfx_context *cx, const char *filter, const unsigned char *d, size_t pitch, cudafx_image *dst,
                   int y0, int rows, cudaEvent_t done, const cudafx_options *o)
{
  const size_t row_bytes = row_bytes_of (dst);
  const bool reported = o && o->rows_ready;
  const int chunk = reported ? chunk_rows (row_bytes, rows) : rows;
  int issued = 0;
  cudafx_status s = CUDAFX_OK;
  for (int r = 0; r < rows && !s; r += chunk, issued++)
    {
      const int m = chunk < rows - r ? chunk : rows - r;
      if (!(s = cfx_check (cudaMemcpy2DAsync (cudafx_row (dst, y0 + r), dst->stride, d + (size_t) r * pitch, pitch,
                                              row_bytes, m, cudaMemcpyDeviceToHost, cx->stream),
                           filter, "copy to host")) &&
          reported)
        s = cfx_check (cudaEventRecord (pipe_event (cx, issued, 4), cx->stream), filter, "event");
    }
  if (!s)
    s = cfx_check (cudaEventRecord (done, cx->stream), filter, "event");
  for (int c = 0; c < issued && !s && reported; c++)
    if (!(s = cfx_check (cudaEventSynchronize (pipe_event (cx, c, 4)), filter, "copy to host")))
      {
        const int r = c * chunk;
        cudafx_rows_final (o, y0 + r, y0 + (chunk < rows - r ? r + chunk : rows));
      }
  return s;
}

cudafx_status
cfx_load_image (cfx_context *cx, const char *filter, const cudafx_image *src, int halo, cudafx_border border,
                size_t scratch_row_bytes, cfx_stripe *st, int *loaded, const cudafx_options *o)
{
  size_t budget, need;
  *loaded = 0;
  if (stripe_rows (cx, src, halo, scratch_row_bytes, &budget, &need) < src->height)
    return CUDAFX_OK;
  if (cfx_inject ("stripe0"))
    return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault", filter, 0);
  cudafx_status s;
  if ((s = stripe_buffers (cx, filter, src, src->height, halo, scratch_row_bytes, st)) ||
      (s = stripe_upload (cx, filter, src, border, 0, src->height, st, o)))
    return s;
  *loaded = 1;
  return CUDAFX_OK;
}

/* ---- the pipelined runner ------------------------------------------------------ */

/* Waits for the GPU's side of the pipeline, so no copy into or out of the
 * staging buffers outlives the call. */
static cudafx_status
pipe_finish (cfx_context *cx, const char *filter, cudafx_status s)
{
  cudafx_status w = cfx_check (cudaStreamSynchronize (cx->side), filter, "copy to device");
  cudafx_status k = cfx_check (cudaStreamSynchronize (cx->stream), filter, "kernel");
  cudafx_status o = cfx_check (cudaStreamSynchronize (cx->odd), filter, "kernel");
  cudafx_status d = cfx_check (cudaStreamSynchronize (cx->down), filter, "copy to host");
  return s ? s : w ? w : k ? k : o ? o : d;
}

/* The host side of the pipeline: pinned staging in (up) and out (down),
 * or the image's own rows where they are pinned (then `up` holds only the
 * rows the border makes up, as upload_direct lays them out). */
struct pipe_memory
{
  unsigned char *up, *down;
  bool           src_direct, dst_direct;
};

/* Stripe k of n_stripes through the pipeline: the rows it adds to the device
 * (the input stripe with its lower halo; the first also its upper halo) are
 * copied into pinned memory by threads and uploaded on the side stream; fn
 * waits for them on its kernel stream, then its rows go back into pinned
 * memory on the download stream while the next stripe's kernel runs (on the
 * kernel's stream the copy held that kernel up: docs/BENCHMARKS.md, "Stripe
 * pipeline"). Even stripes' kernels run on the call's stream, odd ones' on
 * the odd stream (pipe_alternates), each stream's with its own scratch, so
 * that a stripe's kernel starts while the last blocks of the one before still
 * run, where on one stream most multiprocessors idled through each stripe's
 * last part-filled wave (docs/BENCHMARKS.md, "Stripe pipeline"). A stripe's
 * kernels write only its own rows of the destination and read rows uploaded
 * before them and never again, so no copy or kernel touches bytes another one
 * in flight writes. The whole image stays on the device, so each stripe's
 * upper halo is already there from the stripe before. */
static cudafx_status
pipe_issue (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_image *dst, cudafx_border border,
            int k, int rows, size_t scratch_row_bytes, cfx_stripe st, const pipe_memory *m, cfx_stripe_fn fn,
            void *ctx, const cudafx_options *o)
{
  const int halo = st.halo, y0 = k * rows, n = rows < src->height - y0 ? rows : src->height - y0;
  const int u0 = k ? y0 + halo : -halo, u1 = y0 + n + halo;
  const size_t row_bytes = row_bytes_of (src);
  cfx_host_rows h = { src, m->up + (size_t) (u0 + halo) * row_bytes, u0, row_bytes, border, true };
  cudafx_status s = need_rows (filter, src, border, u1, o);
  if (s)
    return s;
  if (!m->src_direct)
    cfx_host_copy (cx, &h, u1 - u0, o);
  unsigned char *d_up = (unsigned char *) st.d_src + (size_t) (u0 + halo) * st.src_pitch;
  if (dst && k % 2) /* pipe_alternates */
    {
      st.stream = cx->odd;
      if (st.d_scratch)
        st.d_scratch = (unsigned char *) st.d_scratch + stripe_scratch (rows, halo, scratch_row_bytes);
    }
  st.d_src += (size_t) y0 * st.src_pitch;
  if (dst)
    st.d_dst += (size_t) y0 * st.dst_pitch;
  st.y0 = y0;
  st.rows = n;
  unsigned char *down = m->dst_direct ? cudafx_row (dst, y0) : m->down + (size_t) y0 * row_bytes;
  const size_t down_stride = m->dst_direct ? dst->stride : row_bytes;
  if ((s = cfx_check (cudaEventRecord (pipe_event (cx, k, 0), cx->side), filter, "event")) ||
      (s = m->src_direct ? upload_direct (filter, src, border, halo, u0, u1 - u0, m->up, d_up, st.src_pitch, cx->side)
                         : cfx_check (cudaMemcpy2DAsync (d_up, st.src_pitch, h.pinned, row_bytes, row_bytes, u1 - u0,
                                                         cudaMemcpyHostToDevice, cx->side),
                                      filter, "copy to device")) ||
      (s = cfx_check (cudaEventRecord (pipe_event (cx, k, 1), cx->side), filter, "event")) ||
      (s = cfx_check (cudaStreamWaitEvent (st.stream, pipe_event (cx, k, 1), 0), filter, "event wait")) ||
      (s = cfx_check (cudaEventRecord (pipe_event (cx, k, 2), st.stream), filter, "event")) ||
      (s = fn (ctx, &st)) ||
      (s = cfx_check (cudaEventRecord (pipe_event (cx, k, 3), st.stream), filter, "event")) ||
      (dst && ((s = cfx_check (cudaStreamWaitEvent (cx->down, pipe_event (cx, k, 3), 0), filter, "event wait")) ||
               (s = cfx_check (cudaMemcpy2DAsync (down, down_stride, st.d_dst, st.dst_pitch, row_bytes, n,
                                                  cudaMemcpyDeviceToHost, cx->down),
                               filter, "copy to host")))))
    return s;
  return cfx_check (cudaEventRecord (pipe_event (cx, k, 4), dst ? cx->down : st.stream), filter, "event");
}

/* Stripe k's rows from pinned memory into dst (once its download ended),
 * then progress. */
static cudafx_status
pipe_collect (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_image *dst, int k, int rows,
              const pipe_memory *m, const cudafx_options *o)
{
  const int y0 = k * rows, n = rows < src->height - y0 ? rows : src->height - y0;
  cudafx_status s = cfx_check (cudaEventSynchronize (pipe_event (cx, k, 4)), filter, "kernel");
  if (s)
    return s;
  if (dst && !m->dst_direct)
    {
      const size_t row_bytes = row_bytes_of (src);
      cfx_host_rows h = { dst, m->down + (size_t) y0 * row_bytes, y0, row_bytes, CUDAFX_BORDER_CLAMP, false };
      cfx_host_copy (cx, &h, n, o);
    }
  if (dst)
    cudafx_rows_final (o, y0, y0 + n);
  return cudafx_progress (o, (double) (y0 + n) / src->height);
}

/* A stripe's kernels, ms from the first stripe's start. */
struct span
{
  float start, end;
};

static cudafx_status
run_pipelined (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_image *dst, int halo,
               cudafx_border border, size_t scratch_row_bytes, int n_stripes, cfx_stripe_fn fn, void *ctx,
               const cudafx_options *o)
{
  const int rows = (src->height + n_stripes - 1) / n_stripes;
  const size_t pitch = stripe_pitch (src), row_bytes = row_bytes_of (src);
  const size_t in_rows = src->height + 2 * (size_t) halo;
  unsigned char *d_src, *d_dst = NULL;
  pipe_memory m = { NULL, NULL, host_direct (src), dst && host_direct (dst) };
  void *d_scratch = NULL;
  cudafx_status s;
  if ((s = cfx_buffer (cx, CFX_SLOT_SRC, pitch * in_rows, (void **) &d_src, filter)) ||
      (dst && (s = cfx_buffer (cx, CFX_SLOT_DST, pitch * src->height, (void **) &d_dst, filter))) ||
      (scratch_row_bytes &&
       (s = cfx_buffer (cx, CFX_SLOT_SCRATCH,
                        (pipe_alternates (n_stripes, dst) ? 2 : 1) * stripe_scratch (rows, halo, scratch_row_bytes),
                        &d_scratch, filter))))
    {
      cfx_release_buffers (cx);
      return s;
    }
  if ((s = cfx_staging (cx, CFX_STAGING_UP, row_bytes * (m.src_direct ? 2 * (size_t) halo : in_rows),
                        (void **) &m.up, NULL, filter)) ||
      (dst && !m.dst_direct &&
       (s = cfx_staging (cx, CFX_STAGING_DOWN, row_bytes * src->height, (void **) &m.down, NULL, filter))))
    return s;
  const cfx_stripe whole = { d_src, pitch, d_dst, pitch, 0, rows, halo, src->width, src->height,
                             src->channels, src->type, d_scratch, cx->stream };

  /* The odd stream's kernels after what the filter queued on the call's
   * stream before the stripes (its tables' uploads). */
  if (pipe_alternates (n_stripes, dst) &&
      ((s = cfx_check (cudaEventRecord (pipe_event (cx, 0, 2), cx->stream), filter, "event")) ||
       (s = cfx_check (cudaStreamWaitEvent (cx->odd, pipe_event (cx, 0, 2), 0), filter, "event wait"))))
    return s;

  /* Stripes issued, and collected: a stripe is collected as soon as its
   * download has ended, between the issues of later ones, so the host's
   * copies out overlap its copies in. */
  int issued = 0, collected = 0;
  while (!s && collected < n_stripes)
    {
      if (issued < n_stripes)
        {
          char point[32];
          snprintf (point, sizeof point, "stripe%d", issued);
          if (cfx_inject (point))
            s = cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault", filter, issued);
          else
            s = pipe_issue (cx, filter, src, dst, border, issued, rows, scratch_row_bytes, whole, &m, fn, ctx, o);
          issued++;
          cudaError_t q = cudaSuccess;
          while (!s && collected < issued - 1 &&
                 (q = cudaEventQuery (pipe_event (cx, collected, 4))) != cudaErrorNotReady &&
                 !(s = cfx_check (q, filter, "kernel")))
            s = pipe_collect (cx, filter, src, dst, collected++, rows, &m, o);
          if (q == cudaErrorNotReady)
            cudaGetLastError (); /* "not ready" is no error: keep it from a later launch's check */
        }
      else
        s = pipe_collect (cx, filter, src, dst, collected++, rows, &m, o);
    }
  s = pipe_finish (cx, filter, s);
  if (s)
    {
      if (s == CUDAFX_ERR_CUDA)
        cfx_release_buffers (cx);
      return s;
    }

  /* The copies' times add up; the kernels' is how long any stripe's ran:
   * the two streams' stripes overlap, so their spans (from the first
   * stripe's start) are merged in order of their starts. */
  float up_ms = 0, kernel_ms = 0, down_ms = 0;
  span spans[CFX_PIPE_STRIPES];
  for (int k = 0; k < n_stripes && !s; k++)
    {
      float a = 0, c = 0;
      if (!(s = cfx_check (cudaEventElapsedTime (&a, pipe_event (cx, k, 0), pipe_event (cx, k, 1)), filter,
                           "event timing")) &&
          !(s = cfx_check (cudaEventElapsedTime (&spans[k].start, pipe_event (cx, 0, 2), pipe_event (cx, k, 2)),
                           filter, "event timing")) &&
          !(s = cfx_check (cudaEventElapsedTime (&spans[k].end, pipe_event (cx, 0, 2), pipe_event (cx, k, 3)),
                           filter, "event timing")) &&
          !(s = cfx_check (cudaEventElapsedTime (&c, pipe_event (cx, k, 3), pipe_event (cx, k, 4)), filter,
                           "event timing")))
        {
          up_ms += a;
          down_ms += c;
        }
    }
  if (!s)
    {
      std::sort (spans, spans + n_stripes, [] (const span &x, const span &y) { return x.start < y.start; });
      float covered = spans[0].start;
      for (int k = 0; k < n_stripes; k++)
        if (spans[k].end > covered)
          {
            kernel_ms += spans[k].end - (spans[k].start > covered ? spans[k].start : covered);
            covered = spans[k].end;
          }
    }
  cudafx_report *report = o ? o->report : NULL;
  if (report && !s)
    {
      report->kernel_ms += kernel_ms;
      report->transfer_ms += up_ms + down_ms;
    }
  return s;
}

cudafx_status
cfx_run_stripes (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_image *dst, int halo,
                 cudafx_border border, size_t scratch_row_bytes, cfx_stripe_fn fn, void *ctx,
                 const cudafx_options *o)
{
  int pipelined = pipe_stripes (cx, src, halo, scratch_row_bytes, dst);
  if (pipelined)
    return run_pipelined (cx, filter, src, dst, halo, border, scratch_row_bytes, pipelined, fn, ctx, o);
  size_t budget, need;
  int rows = stripe_rows (cx, src, halo, scratch_row_bytes, &budget, &need);
  if (!rows)
    return cudafx_fail (CUDAFX_ERR_CUDA,
                        "%s: CUDA out of memory: %zu bytes of device memory allowed, a stripe needs %zu",
                        filter, budget, need);
  int n_stripes = (src->height + rows - 1) / rows;
  rows = (src->height + n_stripes - 1) / n_stripes; /* even stripes */

  cfx_stripe st;
  cudafx_status s = stripe_buffers (cx, filter, src, rows, halo, scratch_row_bytes, &st);
  for (int i = 0; i < n_stripes && !s; i++)
    {
      char point[32];
      snprintf (point, sizeof point, "stripe%d", i);
      if (cfx_inject (point))
        return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault", filter, i);
      int y0 = i * rows;
      int n = y0 + rows <= src->height ? rows : src->height - y0;
      if ((s = stripe_upload (cx, filter, src, border, y0, n, &st, o)) ||
          (s = cfx_apply (cx, filter, &st, fn, ctx, dst, o)))
        break;
      s = cudafx_progress (o, (double) (y0 + n) / src->height);
    }
  if (s == CUDAFX_ERR_CUDA)
    cfx_release_buffers (cx); /* after a fault, start the next call from clean buffers */
  return s;
}
