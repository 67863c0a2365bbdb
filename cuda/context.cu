/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's context: device choice, streams and events, buffer and
 * staging caches, shared-memory attributes, errors, fault injection and the
 * stripe runner. See context.cuh. */
#include "context.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* One context per lane of each device the runtime lists (at most
 * CFX_MAX_DEVICES), and which device calls with options.device 0 get;
 * probed once, into lane 0 and copied to the others. Every field of a
 * context past its lock is guarded by that lock. */
constexpr int CFX_MAX_DEVICES = 64;
constexpr int CFX_LANES = CUDAFX_CUDA_LANES;
static cfx_context contexts[CFX_MAX_DEVICES][CFX_LANES];
static struct
{
  std::once_flag   once;
  int              count;          /* devices in use */
  int              chosen;         /* the default's index, or -1 */
  char             why[256];       /* chosen -1: why no default */
  std::atomic<int> lanes[CFX_MAX_DEVICES]; /* lanes of each device that have begun a call: they share its memory */
} devices;

/* ---- the devices ---------------------------------------------------------------- */

/* Reads the device's properties into its context; 0 when it cannot run
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

/* Every device the runtime lists; the default: CUDAFX_DEVICE=N, else the
 * first that can run kernels. With several, names say which one ran. */
static void
probe (void)
{
  int count = 0;
  devices.chosen = -1;
  cudaError_t err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess)
    {
      snprintf (devices.why, sizeof devices.why, _("no CUDA device (%s)"), cudaGetErrorString (err));
      return;
    }
  if (count == 0)
    {
      snprintf (devices.why, sizeof devices.why, "%s", _("no CUDA device"));
      return;
    }
  devices.count = count < CFX_MAX_DEVICES ? count : CFX_MAX_DEVICES;
  for (int d = 0; d < devices.count; d++)
    {
      cfx_context *cx = &contexts[d][0];
      cx->usable = take_device (cx, d);
      if (cx->usable && devices.count > 1)
        {
          size_t n = strlen (cx->name);
          snprintf (cx->name + n, sizeof cx->name - n, " #%d", d);
        }
      for (int l = 1; l < CFX_LANES; l++)
        {
          cfx_context *other = &contexts[d][l];
          other->usable = cx->usable;
          other->device = cx->device;
          other->sms = cx->sms;
          other->shared_optin = cx->shared_optin;
          memcpy (other->name, cx->name, sizeof cx->name);
          memcpy (other->why, cx->why, sizeof cx->why);
        }
    }
  const char *env = getenv ("CUDAFX_DEVICE");
  if (env && *env)
    {
      char *end;
      long d = strtol (env, &end, 10);
      if (*end || d < 0 || d >= devices.count)
        snprintf (devices.why, sizeof devices.why, _("CUDA device %d unusable (%s)"),
                  (int) (d < 0 || *end ? -1 : d), "CUDAFX_DEVICE");
      else if (contexts[d][0].usable)
        devices.chosen = (int) d;
      else
        snprintf (devices.why, sizeof devices.why, "%s", contexts[d][0].why);
      return;
    }
  for (int d = 0; d < devices.count && devices.chosen < 0; d++)
    if (contexts[d][0].usable)
      devices.chosen = d;
  if (devices.chosen < 0)
    snprintf (devices.why, sizeof devices.why, "%s", contexts[0][0].why);
}

/* The lane-0 context of options.device `device` (0: the default), or NULL
 * with the reason in why. */
static cfx_context *
context_of (int device, char *why, size_t why_size)
{
  std::call_once (devices.once, probe);
  if (device == 0 && devices.chosen < 0)
    snprintf (why, why_size, "%s", devices.why);
  else if (device == 0)
    return &contexts[devices.chosen][0];
  else if (device < 0 || device > devices.count)
    snprintf (why, why_size, _("CUDA device %d unusable (%s)"), device - 1,
              devices.count ? "not among the devices CUDA lists" : devices.why);
  else if (!contexts[device - 1][0].usable)
    snprintf (why, why_size, "%s", contexts[device - 1][0].why);
  else
    return &contexts[device - 1][0];
  return NULL;
}

extern "C" int
cudafx_cuda_probe (int device, char *name, size_t name_size, char *why, size_t why_size)
{
  char reason[256];
  cfx_context *cx = context_of (device, reason, sizeof reason);
  if (name_size)
    snprintf (name, name_size, "%s", cx ? cx->name : "");
  if (why_size)
    snprintf (why, why_size, "%s", cx ? "" : reason);
  return cx != NULL;
}

extern "C" int
cudafx_cuda_device_count (void)
{
  std::call_once (devices.once, probe);
  return devices.count;
}

/* ---- errors and fault injection ------------------------------------------- */

/* CUDAFX_CUDA_FAIL=alloc|launch|seed|stripeN makes the named step fail, so
 * tests can prove the CPU fallback and the forced-cuda error path. */
int
cfx_inject (const char *point)
{
  const char *env = cudafx_test_switch ("CUDAFX_CUDA_FAIL");
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

/* ---- host memory the device copies directly -------------------------------- */

/* The pinned blocks of cudafx_host_alloc (a fixed table: nothing here is
 * destroyed at exit, when a host may still free its blocks), so that the
 * stripe runner knows an image it may copy straight to and from the device;
 * and the device of the first context made ready (-1 before that): pinning
 * needs the driver, and asking for it earlier would wait for CUDA's
 * start-up. `failed`: a pinning failed, so hosts stop asking. */
constexpr int CFX_PINNED_BLOCKS = 256;
static struct
{
  std::mutex        lock;
  unsigned char    *ptr[CFX_PINNED_BLOCKS];
  size_t            size[CFX_PINNED_BLOCKS];
  std::atomic<int>  device{ -1 };
  std::atomic<bool> failed{ false };
} pinned_host;

extern "C" int
cudafx_cuda_host_pinnable (void)
{
  return pinned_host.device.load () >= 0 && !pinned_host.failed.load ();
}

/* A pinned block is the host's memory, its pages made by the host (in
 * 2 MB pages: cudafx_host_alloc_plain), registered with the driver:
 * cudaHostAlloc holds the driver up for the whole of its work, and every
 * other thread's CUDA calls wait for it, while registering pages already
 * there is an order of magnitude quicker (docs/BENCHMARKS.md, "Pinned
 * memory and huge pages"). */
extern "C" int
cudafx_cuda_host_register (void *p, size_t bytes)
{
  if (!p || !bytes || !cudafx_cuda_host_pinnable ())
    return 0;
  {
    std::lock_guard<std::mutex> guard (pinned_host.lock);
    for (int i = 0; i < CFX_PINNED_BLOCKS; i++)
      if (pinned_host.ptr[i] == p)
        return pinned_host.size[i] >= bytes; /* registering it again would fail, and stop all pinning */
  }
  /* Registered without the lock: other threads may be pinning or asking
   * whether their blocks are pinned meanwhile. Portable: pinned for every
   * device's context, whichever one a call uses. */
  if (cudaSetDevice (pinned_host.device.load ()) != cudaSuccess ||
      cudaHostRegister (p, bytes, cudaHostRegisterPortable) != cudaSuccess)
    {
      cudaGetLastError (); /* keep the failure from a later call's check */
      pinned_host.failed.store (true);
      return 0;
    }
  {
    std::lock_guard<std::mutex> guard (pinned_host.lock);
    for (int i = 0; i < CFX_PINNED_BLOCKS; i++)
      if (!pinned_host.ptr[i])
        {
          pinned_host.ptr[i] = (unsigned char *) p;
          pinned_host.size[i] = bytes;
          return 1;
        }
  }
  cudaHostUnregister (p); /* the table is full: plain memory, slower copies, nothing worse */
  cudaGetLastError ();
  return 0;
}

extern "C" int
cudafx_cuda_host_free (void *p)
{
  {
    std::lock_guard<std::mutex> guard (pinned_host.lock);
    int i = 0;
    while (i < CFX_PINNED_BLOCKS && pinned_host.ptr[i] != p)
      i++;
    if (i == CFX_PINNED_BLOCKS)
      return 0;
    pinned_host.ptr[i] = NULL;
    pinned_host.size[i] = 0;
  }
  cudaHostUnregister (p);
  cudaGetLastError ();
  free (p);
  return 1;
}

extern "C" int
cudafx_cuda_host_pinned (const void *p, size_t bytes)
{
  const unsigned char *q = (const unsigned char *) p;
  std::lock_guard<std::mutex> guard (pinned_host.lock);
  for (int i = 0; i < CFX_PINNED_BLOCKS; i++)
    if (pinned_host.ptr[i] && q >= pinned_host.ptr[i] && bytes <= pinned_host.size[i] &&
        (size_t) (q - pinned_host.ptr[i]) <= pinned_host.size[i] - bytes)
      return 1;
  return 0;
}

/* Whether img's rows lie in pinned memory, for copies without staging. */
static bool
host_direct (const cudafx_image *img)
{
  if (!img || img->height < 1)
    return false;
  size_t row_bytes = (size_t) img->width * img->channels * cudafx_type_size (img->type);
  return cudafx_cuda_host_pinned (img->data, (size_t) (img->height - 1) * img->stride + row_bytes);
}

/* ---- a call ---------------------------------------------------------------- */

cudafx_status
cfx_begin (cfx_call &call, const char *filter, const cudafx_options *o, cfx_lanes lanes)
{
  char why[256];
  int lane = o ? o->lane : 0;
  if (lane < 0)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: options.lane %d is negative", filter, lane);
  cfx_context *cx = context_of (o ? o->device : 0, why, sizeof why);
  if (!cx)
    return cudafx_fail (CUDAFX_ERR_NO_DEVICE, "%s: backend cuda: %s", filter, why);
  lane = lanes == CFX_LANE_ASKED ? lane % CFX_LANES : 0;
  cx += lane; /* the device's lanes lie side by side */
  int seen = devices.lanes[cx->device].load ();
  while (seen < lane + 1 && !devices.lanes[cx->device].compare_exchange_weak (seen, lane + 1))
    ;
  call.guard = std::unique_lock<std::mutex> (cx->lock);
  call.cx = cx;
  cudafx_status s = cfx_check (cudaSetDevice (cx->device), filter, "device selection");
  if (s || cx->ready)
    return s;
  /* Streams that never wait for the legacy default stream, nor it for them. */
  cudaStream_t *const streams[] = { &cx->stream, &cx->side, &cx->down, &cx->odd };
  const int n_streams = sizeof streams / sizeof *streams;
  int made = 0, events = 0;
  while (made < n_streams && !s)
    if (!(s = cfx_check (cudaStreamCreateWithFlags (streams[made], cudaStreamNonBlocking), filter,
                         "stream creation")))
      made++;
  while (events < CFX_EVENTS && !s)
    if (!(s = cfx_check (cudaEventCreate (&cx->ev[events]), filter, "event creation")))
      events++;
  if (s)
    {
      while (events > 0)
        cudaEventDestroy (cx->ev[--events]);
      while (made > 0)
        cudaStreamDestroy (*streams[--made]);
      return s;
    }
  cx->ready = true;
  pinned_host.device.store (cx->device);
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
  /* Two lanes at work would otherwise each count on the same free memory. */
  size_t budget = free_b / 10 * 9 / (size_t) devices.lanes[cx->device].load ();
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

/* The kernels' shared-memory limits as set on each device. A limit is the
 * kernel's on the device, not a lane's: it is only ever raised, under the
 * device's lock, so that one lane never lowers it below what a launch on
 * the other lane needs. */
static struct
{
  std::mutex  lock;
  const void *kernel[CFX_SHARED_ATTRIBUTES];
  int         allowed[CFX_SHARED_ATTRIBUTES];
  int         n;
} shared_limits[CFX_MAX_DEVICES];

cudafx_status
cfx_allow_shared (cfx_context *cx, const void *kernel, size_t bytes, const char *filter)
{
  auto &t = shared_limits[cx->device];
  std::lock_guard<std::mutex> guard (t.lock);
  int i = 0;
  while (i < t.n && t.kernel[i] != kernel)
    i++;
  if (i < t.n && t.allowed[i] >= (int) bytes)
    return CUDAFX_OK;
  if (i == CFX_SHARED_ATTRIBUTES)
    {
      /* A full table: the device's own record of the limit instead. */
      cudaFuncAttributes a;
      cudafx_status s = cfx_check (cudaFuncGetAttributes (&a, kernel), filter, "kernel attributes");
      if (s || a.maxDynamicSharedSizeBytes >= (int) bytes)
        return s;
    }
  cudafx_status s = cfx_check (cudaFuncSetAttribute (kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int) bytes),
                               filter, "shared-memory attribute");
  if (s || i == CFX_SHARED_ATTRIBUTES)
    return s;
  t.kernel[i] = kernel;
  t.allowed[i] = (int) bytes;
  if (i == t.n)
    t.n++;
  return CUDAFX_OK;
}

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

/* ---- staging: host copies and the pipeline's events ---------------------------- */

/* Rows between a pageable image and pinned staging memory. */
struct host_rows
{
  const cudafx_image *img;
  unsigned char      *pinned;   /* image row v0 + i at pinned + i * row_bytes */
  int                 v0;       /* may be negative: rows made up by border */
  size_t              row_bytes;
  cudafx_border       border;
  bool                to_pinned;
};

/* memcpy with streaming stores: neither side of a staging copy is read
 * again by this core (the copy engine reads the pinned rows, the host the
 * result much later), so the destination need not be read into the cache
 * first, which saves a third of the copy's memory traffic. */
static void
stream_copy (unsigned char *dst, const unsigned char *src, size_t n)
{
#ifdef __SSE2__
  size_t head = (16 - (uintptr_t) dst % 16) % 16;
  head = head < n ? head : n;
  memcpy (dst, src, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64)
    {
      __m128i v[4];
      for (int j = 0; j < 4; j++)
        v[j] = _mm_loadu_si128 ((const __m128i *) (src + i + 16 * j));
      for (int j = 0; j < 4; j++)
        _mm_stream_si128 ((__m128i *) (dst + i + 16 * j), v[j]);
    }
  memcpy (dst + i, src + i, n - i);
#else
  memcpy (dst, src, n);
#endif
}

static void
copy_host_rows (void *ctx, int i0, int i1)
{
  const host_rows *h = (const host_rows *) ctx;
  for (int i = i0; i < i1; i++)
    {
      unsigned char *p = h->pinned + (size_t) i * h->row_bytes;
      int y = h->v0 + i;
      if (!h->to_pinned)
        stream_copy (cudafx_row (h->img, y), p, h->row_bytes);
      else
        {
          int r = cudafx_border_index (y, h->img->height, h->border);
          if (r < 0)
            memset (p, 0, h->row_bytes);
          else
            stream_copy (p, cudafx_row (h->img, r), h->row_bytes);
        }
    }
#ifdef __SSE2__
  _mm_sfence (); /* the streamed rows visible before the copy engine or another thread reads them */
#endif
}

/* Threads for those copies: one alone moves about 10 GB/s, a fraction of
 * what the two copy engines move at once. */
constexpr int CFX_COPY_THREADS = 16;

/* The context's copy threads. Not an OpenMP team: its threads spin after
 * each parallel region (libgomp's active wait) and the region's end waits
 * for every one of them, so in a CLI batch, whose codec threads keep every
 * core busy, each of a call's copy rounds waited for descheduled team
 * members and the copies took most of the call (docs/BENCHMARKS.md,
 * "Host copies on the context's threads"). These
 * watch briefly for the next round, then sleep on a condition variable
 * (CFX_COPY_SPIN); the caller copies too and
 * waits only for the rows a helper has taken, never for a helper that has
 * not woken up. A round's chunks are handed out by one atomic counter
 * tagged with the round, so a helper that wakes late takes nothing of a
 * later round. */
struct cfx_copy_pool
{
  std::mutex               lock;
  std::condition_variable  wake;     /* a new round */
  std::condition_variable  finished; /* the round's last chunk copied */
  std::vector<std::thread> helpers;
  /* the round, under lock */
  unsigned                 round = 0;
  const host_rows         *job = nullptr;
  int                      rows = 0, chunk = 0, chunks = 0, done = 0;
  std::atomic<uint64_t>    next{ 0 }; /* round << 32 | the next chunk to take */
};

/* Copies chunks of the round until none is left; counts them done. */
static void
copy_chunks (cfx_copy_pool *p, unsigned round, const host_rows *job, int rows, int chunk, int chunks)
{
  int copied = 0;
  uint64_t v = p->next.load ();
  for (;;)
    {
      if ((unsigned) (v >> 32) != round || (int) (uint32_t) v >= chunks)
        break;
      if (!p->next.compare_exchange_weak (v, v + 1))
        continue;
      const int i0 = (int) (uint32_t) v * chunk;
      copy_host_rows ((void *) job, i0, i0 + chunk < rows ? i0 + chunk : rows);
      copied++;
      v = p->next.load ();
    }
  if (copied)
    {
      std::lock_guard<std::mutex> g (p->lock);
      p->done += copied;
      if (p->done == p->chunks)
        p->finished.notify_one ();
    }
}

/* How long a helper watches for the next round before it sleeps: the
 * rounds of one call follow each other within tens of microseconds (a
 * chunk's time on the copy engine), and waking a sleeping helper costs about
 * as long as a u8 round's copying (docs/BENCHMARKS.md, "Host copies on the
 * context's threads", has what helpers that always slept cost a lone call). */
constexpr auto CFX_COPY_SPIN = std::chrono::microseconds (100);

static void
copy_helper (cfx_copy_pool *p)
{
  std::unique_lock<std::mutex> g (p->lock);
  unsigned seen = p->round;
  for (;;)
    {
      p->wake.wait (g, [&] { return p->round != seen; });
      while (p->round != seen)
        {
          seen = p->round;
          const host_rows *job = p->job;
          const int rows = p->rows, chunk = p->chunk, chunks = p->chunks;
          g.unlock ();
          copy_chunks (p, seen, job, rows, chunk, chunks);
          const auto until = std::chrono::steady_clock::now () + CFX_COPY_SPIN;
          for (int i = 0; (unsigned) (p->next.load (std::memory_order_relaxed) >> 32) == seen; i++)
            {
#ifdef __SSE2__
              _mm_pause ();
#endif
              if (i % 64 == 63 && std::chrono::steady_clock::now () > until)
                break;
            }
          g.lock ();
        }
    }
}

/* The context's pool, started on first use with one helper less than the
 * copy threads (the caller is one); NULL when no helper could be started. */
static cfx_copy_pool *
copy_pool (cfx_context *cx)
{
  if (cx->copies)
    return cx->copies->helpers.empty () ? NULL : cx->copies;
  cx->copies = new (std::nothrow) cfx_copy_pool ();
  if (!cx->copies)
    return NULL;
  unsigned cores = std::thread::hardware_concurrency ();
  int helpers = (cores > 1 ? (int) cores : 1) - 1;
  helpers = helpers < CFX_COPY_THREADS - 1 ? helpers : CFX_COPY_THREADS - 1;
  try
    {
      /* They live as long as the process, asleep between calls. */
      for (int i = 0; i < helpers; i++)
        cx->copies->helpers.emplace_back (copy_helper, cx->copies).detach ();
    }
  catch (...)
    {
      /* the threads started still help */
    }
  return cx->copies->helpers.empty () ? NULL : cx->copies;
}

static void
host_copy (cfx_context *cx, const host_rows *h, int rows, const cudafx_options *o)
{
  int threads = cudafx_thread_count (o);
  threads = threads < CFX_COPY_THREADS ? threads : CFX_COPY_THREADS;
  cfx_copy_pool *p = threads > 1 && rows > 1 ? copy_pool (cx) : NULL;
  if (!p)
    {
      copy_host_rows ((void *) h, 0, rows);
      return;
    }
  /* A few chunks a thread: the ones that run take more. */
  const int chunk = rows / (threads * 4) > 1 ? rows / (threads * 4) : 1, chunks = (rows + chunk - 1) / chunk;
  unsigned round;
  {
    std::lock_guard<std::mutex> g (p->lock);
    round = ++p->round;
    p->job = h;
    p->rows = rows;
    p->chunk = chunk;
    p->chunks = chunks;
    p->done = 0;
    p->next.store ((uint64_t) round << 32);
  }
  /* One system call wakes them all when all are wanted. */
  if (threads - 1 >= (int) p->helpers.size ())
    p->wake.notify_all ();
  else
    for (int i = 0; i < threads - 1; i++)
      p->wake.notify_one ();
  copy_chunks (p, round, h, rows, chunk, chunks);
  std::unique_lock<std::mutex> g (p->lock);
  p->finished.wait (g, [&] { return p->done == p->chunks; });
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
      host_rows h = { src, up + (size_t) (v0 + halo) * row_bytes, v0, row_bytes, border, true };
      copy_host_rows (&h, 0, a - v0);
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
      host_rows h = { src, up + (size_t) (halo + b - src->height) * row_bytes, b, row_bytes, border, true };
      copy_host_rows (&h, 0, v1 - b);
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
      host_rows h = { src, up + (size_t) r * row_bytes, v0 + r, row_bytes, border, true };
      host_copy (cx, &h, m, NULL);
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
        host_rows h = { dst, down + (size_t) r * row_bytes, st->y0 + r, row_bytes, CUDAFX_BORDER_CLAMP, false };
        host_copy (cx, &h, m, o);
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
  host_rows h = { src, m->up + (size_t) (u0 + halo) * row_bytes, u0, row_bytes, border, true };
  cudafx_status s = need_rows (filter, src, border, u1, o);
  if (s)
    return s;
  if (!m->src_direct)
    host_copy (cx, &h, u1 - u0, o);
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
      host_rows h = { dst, m->down + (size_t) y0 * row_bytes, y0, row_bytes, CUDAFX_BORDER_CLAMP, false };
      host_copy (cx, &h, n, o);
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
