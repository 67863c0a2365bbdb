/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's context: device choice, streams and events, buffer and
 * staging caches, shared-memory attributes, errors, fault injection and the
 * stripe runner. See context.cuh. */
#include "context.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The process's one context; every field past the lock is guarded by it. */
static cfx_context context;

/* ---- the device ---------------------------------------------------------------- */

/* Reads the device's properties into the context; 0 when it cannot run
 * kernels (the reason in why). */
static int
take_device (cfx_context *cx, int device)
{
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties (&prop, device);
  if (err != cudaSuccess)
    {
      snprintf (cx->why, sizeof cx->why, _("CUDA device %d unusable (%s)"), device, cudaGetErrorString (err));
      return 0;
    }
  int mode = cudaComputeModeDefault;
  if (cudaDeviceGetAttribute (&mode, cudaDevAttrComputeMode, device) == cudaSuccess &&
      mode == cudaComputeModeProhibited)
    {
      snprintf (cx->why, sizeof cx->why, _("CUDA device %d unusable (%s)"), device, "compute mode prohibited");
      return 0;
    }
  cx->device = device;
  cx->sms = prop.multiProcessorCount;
  cx->shared_optin = (int) prop.sharedMemPerBlockOptin;
  snprintf (cx->name, sizeof cx->name, "%s", prop.name);
  return 1;
}

/* CUDAFX_DEVICE=N picks device N; else the first that can run kernels. */
static void
probe (cfx_context *cx)
{
  int count = 0;
  cudaError_t err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess)
    {
      snprintf (cx->why, sizeof cx->why, _("no CUDA device (%s)"), cudaGetErrorString (err));
      return;
    }
  if (count == 0)
    {
      snprintf (cx->why, sizeof cx->why, "%s", _("no CUDA device"));
      return;
    }
  const char *env = getenv ("CUDAFX_DEVICE");
  if (env && *env)
    {
      char *end;
      long d = strtol (env, &end, 10);
      if (*end || d < 0 || d >= count)
        snprintf (cx->why, sizeof cx->why, _("CUDA device %d unusable (%s)"), (int) (d < 0 || *end ? -1 : d),
                  "CUDAFX_DEVICE");
      else
        cx->usable = take_device (cx, (int) d);
      return;
    }
  for (int d = 0; d < count && !cx->usable; d++)
    cx->usable = take_device (cx, d);
}

extern "C" int
cudafx_cuda_probe (char *name, size_t name_size, char *why, size_t why_size)
{
  cfx_context *cx = &context;
  std::call_once (cx->probed, probe, cx);
  if (name_size)
    snprintf (name, name_size, "%s", cx->usable ? cx->name : "");
  if (why_size)
    snprintf (why, why_size, "%s", cx->usable ? "" : cx->why);
  return cx->usable;
}

/* ---- errors and fault injection ------------------------------------------- */

/* CUDAFX_CUDA_FAIL=alloc|launch|seed|stripeN makes the named step fail, so
 * tests can prove the CPU fallback and the forced-cuda error path. */
int
cfx_inject (const char *point)
{
  const char *env = getenv ("CUDAFX_CUDA_FAIL");
  return env && !strcmp (env, point);
}

cudafx_status
cfx_check (cudaError_t err, const char *filter, const char *what)
{
  if (err == cudaSuccess)
    return CUDAFX_OK;
  cudaGetLastError (); /* clear a sticky non-fatal error so the next call starts clean */
  return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA %s failed: %s", filter, what, cudaGetErrorString (err));
}

cudafx_status
cfx_check_launch (const char *filter, const char *kernel)
{
  if (cfx_inject ("launch"))
    return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA launch of %s failed: injected fault", filter, kernel);
  return cfx_check (cudaGetLastError (), filter, kernel);
}

/* ---- a call ---------------------------------------------------------------- */

cudafx_status
cfx_begin (cfx_call &call, const char *filter)
{
  cfx_context *cx = &context;
  call.guard = std::unique_lock<std::mutex> (cx->lock);
  call.cx = cx;
  std::call_once (cx->probed, probe, cx);
  if (!cx->usable)
    return cudafx_fail (CUDAFX_ERR_NO_DEVICE, "%s: backend cuda: %s", filter, cx->why);
  cudafx_status s = cfx_check (cudaSetDevice (cx->device), filter, "device selection");
  if (s || cx->ready)
    return s;
  /* Streams that never wait for the legacy default stream, nor it for them. */
  if ((s = cfx_check (cudaStreamCreateWithFlags (&cx->stream, cudaStreamNonBlocking), filter,
                      "stream creation")))
    return s;
  if ((s = cfx_check (cudaStreamCreateWithFlags (&cx->side, cudaStreamNonBlocking), filter,
                      "stream creation")))
    {
      cudaStreamDestroy (cx->stream);
      return s;
    }
  int events = 0;
  while (events < CFX_EVENTS && !s)
    if (!(s = cfx_check (cudaEventCreate (&cx->ev[events]), filter, "event creation")))
      events++;
  if (s)
    {
      while (events > 0)
        cudaEventDestroy (cx->ev[--events]);
      cudaStreamDestroy (cx->side);
      cudaStreamDestroy (cx->stream);
      return s;
    }
  cx->ready = true;
  return CUDAFX_OK;
}

/* ---- buffers ---------------------------------------------------------------- */

void
cfx_release_buffers (cfx_context *cx)
{
  for (int i = 0; i < CFX_N_SLOTS; i++)
    {
      cudaFree (cx->slot_ptr[i]);
      cx->slot_ptr[i] = NULL;
      cx->slot_size[i] = 0;
    }
}

cudafx_status
cfx_buffer (cfx_context *cx, cfx_slot slot, size_t bytes, void **out, const char *filter)
{
  if (bytes == 0)
    bytes = 1;
  if (cfx_inject ("alloc"))
    return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA allocation of %zu bytes failed: injected fault",
                        filter, bytes);
  if (cx->slot_size[slot] < bytes)
    {
      cudaFree (cx->slot_ptr[slot]);
      cx->slot_ptr[slot] = NULL;
      cx->slot_size[slot] = 0;
      cudafx_status s = cfx_check (cudaMalloc (&cx->slot_ptr[slot], bytes), filter, "allocation");
      /* Finished before returning: the side stream does not wait for the
       * call's stream, on which the zeroing runs. */
      if (!s)
        s = cfx_check (cudaMemsetAsync (cx->slot_ptr[slot], 0, bytes, cx->stream), filter, "memset");
      if (!s)
        s = cfx_check (cudaStreamSynchronize (cx->stream), filter, "memset");
      if (s)
        {
          cudaFree (cx->slot_ptr[slot]);
          cx->slot_ptr[slot] = NULL;
          return s;
        }
      cx->slot_size[slot] = bytes;
    }
  *out = cx->slot_ptr[slot];
  return CUDAFX_OK;
}

cudafx_status
cfx_staging (cfx_context *cx, cfx_staging_slot which, size_t bytes, void **host, void **device, const char *filter)
{
  if (bytes == 0)
    bytes = 1;
  if (cx->staging_size[which] < bytes)
    {
      cudaFreeHost (cx->staging_ptr[which]);
      cx->staging_ptr[which] = NULL;
      cx->staging_size[which] = 0;
      cudafx_status s = cfx_check (cudaHostAlloc (&cx->staging_ptr[which], bytes, cudaHostAllocMapped), filter,
                                   "host allocation");
      if (s)
        {
          cx->staging_ptr[which] = NULL;
          return s;
        }
      cx->staging_size[which] = bytes;
    }
  *host = cx->staging_ptr[which];
  if (device)
    return cfx_check (cudaHostGetDevicePointer (device, cx->staging_ptr[which], 0), filter, "host mapping");
  return CUDAFX_OK;
}

size_t
cfx_memory_budget (cfx_context *cx)
{
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo (&free_b, &total_b) != cudaSuccess)
    free_b = 0;
  for (int i = 0; i < CFX_N_SLOTS; i++)
    free_b += cx->slot_size[i];
  size_t budget = free_b / 10 * 9;
  const char *env = getenv ("CUDAFX_CUDA_MEM_LIMIT");
  if (env && *env)
    {
      char *end;
      double v = strtod (env, &end);
      double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                  : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
      if (v > 0 && v * unit < (double) budget)
        budget = (size_t) (v * unit);
    }
  return budget;
}

cudafx_status
cfx_allow_shared (cfx_context *cx, const void *kernel, size_t bytes, const char *filter)
{
  int i = 0;
  while (i < cx->n_shared && cx->shared_kernel[i] != kernel)
    i++;
  if (i < cx->n_shared && cx->shared_allowed[i] >= (int) bytes)
    return CUDAFX_OK;
  cudafx_status s = cfx_check (cudaFuncSetAttribute (kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int) bytes),
                               filter, "shared-memory attribute");
  if (s || i == CFX_SHARED_ATTRIBUTES) /* a full table only costs the call again */
    return s;
  cx->shared_kernel[i] = kernel;
  cx->shared_allowed[i] = (int) bytes;
  if (i == cx->n_shared)
    cx->n_shared++;
  return CUDAFX_OK;
}

/* ---- stripes ------------------------------------------------------------------- */

/* Copies virtual rows [v0, v1) of src into the device buffer: in-image runs
 * as one 2-D copy, made-up rows one by one. */
static cudafx_status
upload_rows (const char *filter, const cudafx_image *src, int v0, int v1, cudafx_border border,
             unsigned char *d, size_t pitch, size_t row_bytes, cudaStream_t stream)
{
  int y = v0;
  while (y < v1)
    {
      cudafx_status s;
      if (y >= 0 && y < src->height)
        {
          int end = v1 < src->height ? v1 : src->height;
          s = cfx_check (cudaMemcpy2DAsync (d + (size_t) (y - v0) * pitch, pitch, cudafx_row (src, y),
                                            src->stride, row_bytes, end - y, cudaMemcpyHostToDevice, stream),
                         filter, "copy to device");
          y = end;
        }
      else
        {
          int r = cudafx_border_index (y, src->height, border);
          unsigned char *drow = d + (size_t) (y - v0) * pitch;
          s = r < 0 ? cfx_check (cudaMemsetAsync (drow, 0, row_bytes, stream), filter, "memset")
                    : cfx_check (cudaMemcpyAsync (drow, cudafx_row (src, r), row_bytes,
                                                  cudaMemcpyHostToDevice, stream),
                                 filter, "copy to device");
          y++;
        }
      if (s)
        return s;
    }
  return CUDAFX_OK;
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
       (s = cfx_buffer (cx, CFX_SLOT_SCRATCH, scratch_row_bytes * (rows + 2 * (size_t) halo), &d_scratch,
                        filter))))
    {
      cfx_release_buffers (cx);
      return s;
    }
  *st = { d_src, pitch, d_dst, pitch, 0, rows, halo, src->width, src->height,
          src->channels, src->type, d_scratch, cx->stream };
  return CUDAFX_OK;
}

/* Rows [y0 - halo, y0 + n + halo) of src into the stripe, timed by ev[0..1]. */
static cudafx_status
stripe_upload (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_border border, int y0,
               int n, cfx_stripe *st)
{
  st->y0 = y0;
  st->rows = n;
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (cx->ev[0], cx->stream), filter, "event")) ||
      (s = upload_rows (filter, src, y0 - st->halo, y0 + n + st->halo, border, (unsigned char *) st->d_src,
                        st->src_pitch, row_bytes_of (src), cx->stream)) ||
      (s = cfx_check (cudaEventRecord (cx->ev[1], cx->stream), filter, "event")))
    return s;
  cx->upload_timed = true;
  return CUDAFX_OK;
}

cudafx_status
cfx_apply (cfx_context *cx, const char *filter, const cfx_stripe *st, cfx_stripe_fn fn, void *ctx,
           cudafx_image *dst, const cudafx_options *o)
{
  float up_ms = 0, kernel_ms = 0, down_ms = 0;
  size_t row_bytes = (size_t) st->width * st->channels * cudafx_type_size (st->type);
  cudafx_status s;
  if ((s = cfx_check (cudaEventRecord (cx->ev[2], cx->stream), filter, "event")) ||
      (s = fn (ctx, st)) ||
      (s = cfx_check (cudaEventRecord (cx->ev[3], cx->stream), filter, "event")) ||
      (dst && (s = cfx_check (cudaMemcpy2DAsync (cudafx_row (dst, st->y0), dst->stride, st->d_dst,
                                                 st->dst_pitch, row_bytes, st->rows,
                                                 cudaMemcpyDeviceToHost, cx->stream),
                              filter, "copy to host"))) ||
      (s = cfx_check (cudaEventRecord (cx->ev[4], cx->stream), filter, "event")) ||
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
  return CUDAFX_OK;
}

cudafx_status
cfx_load_image (cfx_context *cx, const char *filter, const cudafx_image *src, int halo, cudafx_border border,
                size_t scratch_row_bytes, cfx_stripe *st, int *loaded)
{
  size_t budget, need;
  *loaded = 0;
  if (stripe_rows (cx, src, halo, scratch_row_bytes, &budget, &need) < src->height)
    return CUDAFX_OK;
  if (cfx_inject ("stripe0"))
    return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault", filter, 0);
  cudafx_status s;
  if ((s = stripe_buffers (cx, filter, src, src->height, halo, scratch_row_bytes, st)) ||
      (s = stripe_upload (cx, filter, src, border, 0, src->height, st)))
    return s;
  *loaded = 1;
  return CUDAFX_OK;
}

cudafx_status
cfx_run_stripes (cfx_context *cx, const char *filter, const cudafx_image *src, cudafx_image *dst, int halo,
                 cudafx_border border, size_t scratch_row_bytes, cfx_stripe_fn fn, void *ctx,
                 const cudafx_options *o)
{
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
      if ((s = stripe_upload (cx, filter, src, border, y0, n, &st)) ||
          (s = cfx_apply (cx, filter, &st, fn, ctx, dst, o)))
        break;
      s = cudafx_progress (o, (double) (y0 + n) / src->height);
    }
  if (s == CUDAFX_ERR_CUDA)
    cfx_release_buffers (cx); /* after a fault, start the next call from clean buffers */
  return s;
}
