/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's context, its device and memory: device choice, streams
 * and events, the buffer and staging caches, pinned host blocks, the memory
 * budget, shared-memory attributes, errors and fault injection. The copy
 * threads are in copy_threads.cu, the stripe runner in stripes.cu. See
 * context.cuh. */
#include "context.cuh"

#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * there is much quicker (docs/BENCHMARKS.md, "Pinned memory and huge
 * pages"). */
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
