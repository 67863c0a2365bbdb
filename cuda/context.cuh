/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's context: one object per device and lane, holding what
 * every filter's launcher shares on it. A call picks its device through
 * options.device (0: the default one) and its lane through options.lane, so
 * several threads can each drive their own device at once, as the CLI's
 * batch workers do, and two can share one device: while one call's kernels
 * run, the other's copies and host work proceed (a lone call leaves the GPU
 * idle while its image goes up and comes down).
 * - the device's properties, probed once for all devices: CUDAFX_DEVICE=N
 *   names the default, else the first device that can run kernels (compute
 *   mode not prohibited); multiprocessor count and shared-memory opt-in limit;
 * - four non-blocking streams (the call's work; work beside it such as
 *   quantize's seeding or the stripe runner's uploads; the stripe runner's
 *   downloads, so that a stripe's copy back does not hold up the next
 *   stripe's kernel; the runner's odd stripes' kernels, which start while
 *   the even ones' last blocks still run) and the events that time and
 *   order them; nothing runs on the legacy default stream, which would
 *   synchronise with them;
 * - grow-only device buffers kept across calls (dialog previews call the
 *   engine many times) and a device-memory budget (CUDAFX_CUDA_MEM_LIMIT caps
 *   it so tests can force striping);
 * - pinned host staging buffers, grow-only, mapped into the device's
 *   address space; an image in cudafx_host_alloc's pinned memory needs
 *   none (its blocks are listed in context.cu);
 * - (per device, in context.cu) the kernels' shared-memory limits already set;
 * - the threads that copy between pageable images and the pinned staging
 *   buffers (copy_threads.cu says why they are not OpenMP's);
 * - the lane's lock: one call uses a lane at a time.
 * Also here: CUDA errors into engine statuses, fault injection for the
 * fallback tests (CUDAFX_CUDA_FAIL), and the stripe runner (stripes.cu)
 * that feeds kernels rows with halos, so an image larger than device memory
 * works, and overlaps the copies of one stripe with the kernel of another
 * when the image fits.
 * context.cu holds the device and memory parts; copy_threads.cu and
 * stripes.cu share cfx_host_rows and the two copy functions below. */
#ifndef CUDAFX_CONTEXT_CUH
#define CUDAFX_CONTEXT_CUH

#include "cudafx_cuda.h"

#include <cuda_runtime.h>
#include <mutex>

/* Device buffers of the cache; AUX for a filter's small extras (nl-means'
 * noise histograms, the median's window heights). */
enum cfx_slot { CFX_SLOT_SRC, CFX_SLOT_DST, CFX_SLOT_SCRATCH, CFX_SLOT_AUX, CFX_N_SLOTS };
/* Pinned host buffers: COUNTERS for small values the device writes while
 * the host watches (quantize's dither progress), the others for images. */
enum cfx_staging_slot { CFX_STAGING_UP, CFX_STAGING_DOWN, CFX_STAGING_COUNTERS, CFX_N_STAGING };

/* Stripes of the pipelined runner at most; each has five events (its
 * upload's start and end, its kernel's start and end, its download's end),
 * after the CFX_BASE_EVENTS that cfx_apply and the filters use. */
constexpr int CFX_PIPE_STRIPES = 16;
constexpr int CFX_BASE_EVENTS = 8;
constexpr int CFX_EVENTS = CFX_BASE_EVENTS + 5 * CFX_PIPE_STRIPES;
constexpr int CFX_SHARED_ATTRIBUTES = 64; /* kernels whose shared-memory limit is remembered a device */

struct cfx_copy_pool; /* the staging copies' threads (copy_threads.cu) */

struct cfx_context
{
  std::mutex   lock;
  /* the device, probed once for all (without the lock: hosts ask while a call runs) */
  bool         usable;
  int          device;
  char         name[128], why[256];
  int          sms;          /* multiprocessors */
  int          shared_optin; /* bytes of dynamic shared memory a block may opt in to */
  /* created on the first call, on the device */
  bool         ready;
  cudaStream_t stream;       /* the call's copies and kernels */
  cudaStream_t side;         /* work beside them */
  cudaStream_t down;         /* the stripe pipeline's downloads */
  cudaStream_t odd;          /* the stripe pipeline's odd stripes' kernels */
  cudaEvent_t  ev[CFX_EVENTS];
  bool         upload_timed; /* ev[0..1] hold an upload the next stripe_apply reports */
  /* caches */
  void        *slot_ptr[CFX_N_SLOTS];
  size_t       slot_size[CFX_N_SLOTS];
  void        *staging_ptr[CFX_N_STAGING];
  size_t       staging_size[CFX_N_STAGING];
  cfx_copy_pool *copies;     /* started on the first staging copy */
};

/* A call's hold on the context: the lock, for as long as the object lives. */
struct cfx_call
{
  std::unique_lock<std::mutex> guard;
  cfx_context                 *cx = nullptr;
};

/* Whether a launcher's calls may take the lane the caller asks for: not
 * when its kernels read state that is the device's, not the lane's (the
 * __constant__ memory quantize sets per call), which two calls at once
 * would overwrite for each other; such calls all take lane 0. */
enum cfx_lanes { CFX_LANE_ZERO, CFX_LANE_ASKED };

/* Takes the lock of the context of o's device (o->device; o NULL: the
 * default) and lane (o->lane, as `lanes` allows) and makes it ready on the
 * calling thread (device current, streams, events). Every other function
 * below wants a context so held. */
cudafx_status cfx_begin (cfx_call &call, const char *filter, const cudafx_options *o,
                         cfx_lanes lanes = CFX_LANE_ZERO);

/* Turns a CUDA error into CUDAFX_ERR_CUDA with "filter: what: reason". */
cudafx_status cfx_check (cudaError_t err, const char *filter, const char *what);
/* Checks the last launch (and the CUDAFX_CUDA_FAIL=launch injection). */
cudafx_status cfx_check_launch (const char *filter, const char *kernel);
/* 1 when CUDAFX_CUDA_FAIL names this point (alloc, launch, seed, stripeN). */
int cfx_inject (const char *point);

/* Grow-only device buffer of the slot, zeroed when (re)allocated: kernels
 * read whole aligned words that may reach into a row's pitch padding (bytes
 * they discard), and defined padding keeps compute-sanitizer initcheck quiet. */
cudafx_status cfx_buffer (cfx_context *cx, cfx_slot slot, size_t bytes, void **out, const char *filter);
/* After a CUDA fault: the next call starts from fresh buffers. */
void cfx_release_buffers (cfx_context *cx);
/* Grow-only pinned host buffer, mapped: *device (may be NULL) gets its
 * device address. Contents are undefined. */
cudafx_status cfx_staging (cfx_context *cx, cfx_staging_slot which, size_t bytes, void **host, void **device,
                           const char *filter);
/* Bytes a call may hold on the device: free memory (plus what the cache
 * holds) less a margin, shared among the lanes of the device that have run
 * a call, capped by CUDAFX_CUDA_MEM_LIMIT (K, M or G suffix). */
size_t cfx_memory_budget (cfx_context *cx);
/* Lets kernel use `bytes` of dynamic shared memory (set once per size). */
cudafx_status cfx_allow_shared (cfx_context *cx, const void *kernel, size_t bytes, const char *filter);

/* ---- the copy threads (copy_threads.cu) --------------------------------------- */

/* Rows between a pageable image and pinned staging memory. */
struct cfx_host_rows
{
  const cudafx_image *img;
  unsigned char      *pinned;   /* image row v0 + i at pinned + i * row_bytes */
  int                 v0;       /* may be negative: rows made up by border */
  size_t              row_bytes;
  cudafx_border       border;
  bool                to_pinned;
};

/* Rows [i0, i1) of the cfx_host_rows at ctx, copied on the calling thread. */
void cfx_copy_host_rows (void *ctx, int i0, int i1);
/* The first `rows` rows of h, copied by the context's copy threads and the
 * caller (at most o's thread count of them). */
void cfx_host_copy (cfx_context *cx, const cfx_host_rows *h, int rows, const cudafx_options *o);

/* ---- stripes (stripes.cu) ----------------------------------------------------- */

/* One input stripe on the device: rows [y0 - halo, y0 + rows + halo) of the
 * image, rows outside the image already made up by the border policy; the
 * kernel writes rows [y0, y0 + rows) to dst. Columns are not padded: kernels
 * apply the border policy horizontally themselves. */
struct cfx_stripe
{
  const unsigned char *d_src;
  size_t               src_pitch;
  unsigned char       *d_dst;
  size_t               dst_pitch;
  int                  y0, rows, halo;
  int                  width, height, channels;
  cudafx_type          type;
  void                *d_scratch;  /* scratch_row_bytes * (rows + 2 * halo) bytes */
  cudaStream_t         stream;
};

typedef cudafx_status (*cfx_stripe_fn) (void *ctx, const cfx_stripe *s);

/* Runs fn over the image in stripes, copying each stripe (with halo rows
 * made up by `border`) to the device and its result back (dst NULL: nothing
 * comes back, fn only reads). When the whole image fits the device-memory
 * budget, the stripes are pipelined through pinned staging buffers: a
 * stripe's upload, the previous stripe's kernel and download, and the host's
 * copies between pageable and pinned memory all overlap (CUDAFX_CUDA_STRIPES
 * forces their number, for tests); src or dst in cudafx_host_alloc's pinned
 * memory is copied straight, without the host's copies. Otherwise stripes sized to the budget run
 * one after the other. fn sees the same rows either way and runs on
 * s->stream, stripes in order. Kernel and transfer times go to o's report;
 * each stripe's rows to o's rows_ready once they are in dst (with dst), then
 * progress; o's rows_needed is asked for each stripe's rows, halo included,
 * just before they are read, so the host may still be filling those below. */
cudafx_status cfx_run_stripes (cfx_context *cx, const char *filter, const cudafx_image *src,
                               cudafx_image *dst, int halo, cudafx_border border, size_t scratch_row_bytes,
                               cfx_stripe_fn fn, void *ctx, const cudafx_options *o);
/* The whole image as one stripe with halo rows, uploaded and kept for
 * several cfx_apply calls (o's rows_needed asked for all its rows first);
 * *loaded 0 (nothing done) when it does not fit. */
cudafx_status cfx_load_image (cfx_context *cx, const char *filter, const cudafx_image *src, int halo,
                              cudafx_border border, size_t scratch_row_bytes, cfx_stripe *st, int *loaded,
                              const cudafx_options *o);
/* fn on a loaded stripe, then its rows back to dst (unless NULL) and to
 * o's rows_ready, timed. */
cudafx_status cfx_apply (cfx_context *cx, const char *filter, const cfx_stripe *st, cfx_stripe_fn fn,
                         void *ctx, cudafx_image *dst, const cudafx_options *o);
/* Rows [y0, y0 + rows) of dst from device memory d (pitch), queued on the
 * call's stream and followed by the event done. Where the call reports its
 * rows (o's rows_ready), in chunks, and each chunk reported once it has
 * landed, so that the host passes on the first while the rest come down;
 * then every copy has ended when this returns (else the caller waits). */
cudafx_status cfx_download_rows (cfx_context *cx, const char *filter, const unsigned char *d, size_t pitch,
                                 cudafx_image *dst, int y0, int rows, cudaEvent_t done, const cudafx_options *o);

#endif /* CUDAFX_CONTEXT_CUH */
