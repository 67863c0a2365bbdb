/* Shared CUDA machinery: device probe, errors, buffer cache, memory budget,
 * fault injection and the stripe runner. See context.cuh. */
#include "context.cuh"

#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- probe ----------------------------------------------------------------- */

static std::once_flag probe_once;
static int            probe_usable;
static char           probe_name[128];
static char           probe_why[256];

static void
probe_device ()
{
  int count = 0;
  cudaError_t err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess)
    {
      snprintf (probe_why, sizeof probe_why, _("no CUDA device (%s)"), cudaGetErrorString (err));
      return;
    }
  if (count == 0)
    {
      snprintf (probe_why, sizeof probe_why, "%s", _("no CUDA device"));
      return;
    }
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties (&prop, 0);
  if (err != cudaSuccess)
    {
      snprintf (probe_why, sizeof probe_why, _("CUDA device 0 unusable (%s)"), cudaGetErrorString (err));
      return;
    }
  snprintf (probe_name, sizeof probe_name, "%s", prop.name);
  probe_usable = 1;
}

extern "C" int
cudafx_cuda_probe (char *name, size_t name_size, char *why, size_t why_size)
{
  std::call_once (probe_once, probe_device);
  if (name_size)
    snprintf (name, name_size, "%s", probe_name);
  if (why_size)
    snprintf (why, why_size, "%s", probe_why);
  return probe_usable;
}

/* ---- errors and fault injection ------------------------------------------- */

/* CUDAFX_CUDA_FAIL=alloc|launch|stripeN makes the named step fail, so tests
 * can prove the CPU fallback and the forced-cuda error path. */
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

/* ---- buffer cache ---------------------------------------------------------- */

/* Grow-only device buffers kept across calls; freed and reallocated only when
 * a call needs more. Guarded by gpu_lock. */
static void      *slot_ptr[CFX_N_SLOTS];
static size_t     slot_size[CFX_N_SLOTS];
static std::mutex gpu_lock;

std::unique_lock<std::mutex>
cfx_lock ()
{
  return std::unique_lock<std::mutex> (gpu_lock);
}

void
cfx_release_buffers ()
{
  for (int i = 0; i < CFX_N_SLOTS; i++)
    {
      cudaFree (slot_ptr[i]);
      slot_ptr[i] = NULL;
      slot_size[i] = 0;
    }
}

cudafx_status
cfx_buffer (cfx_slot slot, size_t bytes, void **out, const char *filter)
{
  if (bytes == 0)
    bytes = 1;
  if (cfx_inject ("alloc"))
    return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA allocation of %zu bytes failed: injected fault",
                        filter, bytes);
  if (slot_size[slot] < bytes)
    {
      cudaFree (slot_ptr[slot]);
      slot_ptr[slot] = NULL;
      slot_size[slot] = 0;
      cudafx_status s = cfx_check (cudaMalloc (&slot_ptr[slot], bytes), filter, "allocation");
      /* Zeroed once: kernels read whole aligned words that may reach into a
       * row's pitch padding (bytes they discard), which would otherwise never
       * be written; defined padding keeps compute-sanitizer initcheck quiet.
       * Finished before returning: streams created non-blocking (quantize's
       * seeding) do not wait for the legacy stream the memset runs on. */
      if (!s)
        s = cfx_check (cudaMemset (slot_ptr[slot], 0, bytes), filter, "memset");
      if (!s)
        s = cfx_check (cudaStreamSynchronize (0), filter, "memset");
      if (s)
        {
          cudaFree (slot_ptr[slot]);
          slot_ptr[slot] = NULL;
          return s;
        }
      slot_size[slot] = bytes;
    }
  *out = slot_ptr[slot];
  return CUDAFX_OK;
}

/* Bytes a call may hold on the device: free memory (plus what the cache
 * already holds) less a margin, capped by CUDAFX_CUDA_MEM_LIMIT (bytes, with
 * an optional K, M or G suffix). */
size_t
cfx_memory_budget ()
{
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo (&free_b, &total_b) != cudaSuccess)
    free_b = 0;
  for (int i = 0; i < CFX_N_SLOTS; i++)
    free_b += slot_size[i];
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

/* Aligned rows for coalesced access. */
static size_t
stripe_pitch (const cudafx_image *src)
{
  size_t row_bytes = (size_t) src->width * src->channels * cudafx_type_size (src->type);
  return (row_bytes + 255) / 256 * 256;
}

int
cfx_stripe_rows (const cudafx_image *src, int halo, size_t scratch_row_bytes, size_t *budget,
                 size_t *need)
{
  size_t pitch = stripe_pitch (src);
  *budget = cfx_memory_budget ();
  /* Per output row: one input row, one output row, scratch; plus 2*halo rows once. */
  size_t per_row = 2 * pitch + scratch_row_bytes;
  size_t fixed = 2 * (size_t) halo * (pitch + scratch_row_bytes);
  *need = fixed + per_row;
  if (*budget <= *need)
    return 0;
  size_t max_rows = (*budget - fixed) / per_row;
  return max_rows < (size_t) src->height ? (int) max_rows : src->height;
}

cudafx_status
cfx_run_stripes (const char *filter, const cudafx_image *src, cudafx_image *dst, int halo,
                 cudafx_border border, size_t scratch_row_bytes, cfx_stripe_fn fn, void *ctx,
                 const cudafx_options *o)
{
  std::unique_lock<std::mutex> guard = cfx_lock ();
  cudafx_status s = cfx_check (cudaSetDevice (0), filter, "device selection");
  if (s)
    return s;

  size_t row_bytes = (size_t) src->width * src->channels * cudafx_type_size (src->type);
  size_t pitch = stripe_pitch (src), budget, need;
  int rows = cfx_stripe_rows (src, halo, scratch_row_bytes, &budget, &need);
  if (!rows)
    return cudafx_fail (CUDAFX_ERR_CUDA,
                        "%s: CUDA out of memory: %zu bytes of device memory allowed, a stripe needs %zu",
                        filter, budget, need);
  int n_stripes = (src->height + rows - 1) / rows;
  rows = (src->height + n_stripes - 1) / n_stripes; /* even stripes */

  unsigned char *d_src, *d_dst;
  void *d_scratch = NULL;
  if ((s = cfx_buffer (CFX_SLOT_SRC, pitch * (rows + 2 * (size_t) halo), (void **) &d_src, filter)) ||
      (s = cfx_buffer (CFX_SLOT_DST, pitch * rows, (void **) &d_dst, filter)) ||
      (scratch_row_bytes &&
       (s = cfx_buffer (CFX_SLOT_SCRATCH, scratch_row_bytes * (rows + 2 * (size_t) halo), &d_scratch, filter))))
    {
      cfx_release_buffers ();
      return s;
    }

  /* Events around the copies and the kernels: the report separates kernel
   * time from transfer time (benchmarks quote both). */
  static cudaEvent_t ev[4];
  if (!ev[0])
    for (int e = 0; e < 4; e++)
      if ((s = cfx_check (cudaEventCreate (&ev[e]), filter, "event creation")))
        {
          ev[0] = NULL;
          return s;
        }
  cudafx_report *report = o ? o->report : NULL;
  cudaStream_t stream = 0;
  for (int i = 0; i < n_stripes; i++)
    {
      char point[32];
      snprintf (point, sizeof point, "stripe%d", i);
      if (cfx_inject (point))
        return cudafx_fail (CUDAFX_ERR_CUDA, "%s: CUDA stripe %d failed: injected fault", filter, i);
      int y0 = i * rows;
      int n = y0 + rows <= src->height ? rows : src->height - y0;
      cfx_stripe st = { d_src, pitch, d_dst, pitch, y0, n, halo, src->width, src->height,
                        src->channels, src->type, d_scratch, stream };
      float up_ms = 0, kernel_ms = 0, down_ms = 0;
      if ((s = cfx_check (cudaEventRecord (ev[0], stream), filter, "event")) ||
          (s = upload_rows (filter, src, y0 - halo, y0 + n + halo, border, d_src, pitch, row_bytes, stream)) ||
          (s = cfx_check (cudaEventRecord (ev[1], stream), filter, "event")) ||
          (s = fn (ctx, &st)) ||
          (s = cfx_check (cudaEventRecord (ev[2], stream), filter, "event")) ||
          (dst && (s = cfx_check (cudaMemcpy2DAsync (cudafx_row (dst, y0), dst->stride, d_dst, pitch,
                                                     row_bytes, n, cudaMemcpyDeviceToHost, stream),
                                  filter, "copy to host"))) ||
          (s = cfx_check (cudaEventRecord (ev[3], stream), filter, "event")) ||
          (s = cfx_check (cudaStreamSynchronize (stream), filter, "kernel")) ||
          (s = cfx_check (cudaEventElapsedTime (&up_ms, ev[0], ev[1]), filter, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&kernel_ms, ev[1], ev[2]), filter, "event timing")) ||
          (s = cfx_check (cudaEventElapsedTime (&down_ms, ev[2], ev[3]), filter, "event timing")) ||
          (s = cudafx_progress (o, (double) (y0 + n) / src->height)))
        {
          if (s == CUDAFX_ERR_CUDA)
            cfx_release_buffers (); /* after a fault, start the next call from clean buffers */
          return s;
        }
      if (report)
        {
          report->kernel_ms += kernel_ms;
          report->transfer_ms += up_ms + down_ms;
        }
    }
  return CUDAFX_OK;
}
