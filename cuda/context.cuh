/* Shared CUDA machinery for every filter: error checking into engine
 * statuses, a cache of device buffers reused across calls (dialog previews
 * call the engine many times), a device-memory budget (CUDAFX_CUDA_MEM_LIMIT
 * caps it so tests can force striping), fault injection for fallback tests
 * (CUDAFX_CUDA_FAIL), and the stripe runner that feeds kernels rows with
 * halos so an image larger than device memory still works. */
#ifndef CUDAFX_CONTEXT_CUH
#define CUDAFX_CONTEXT_CUH

#include "../core/engine.h"
#include "cudafx_cuda.h"

#include <cuda_runtime.h>
#include <mutex>

/* Turns a CUDA error into CUDAFX_ERR_CUDA with "filter: what: reason". */
cudafx_status cfx_check (cudaError_t err, const char *filter, const char *what);
/* Checks the last launch (and the CUDAFX_CUDA_FAIL=launch injection). */
cudafx_status cfx_check_launch (const char *filter, const char *kernel);

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

/* Runs fn over the image in stripes sized to the device-memory budget,
 * copying each stripe (with halo rows made up by `border`) to the device and
 * its result back (dst NULL: nothing comes back, fn only reads). Holds the
 * process-wide GPU lock for the whole call. */
cudafx_status cfx_run_stripes (const char *filter, const cudafx_image *src, cudafx_image *dst,
                               int halo, cudafx_border border, size_t scratch_row_bytes,
                               cfx_stripe_fn fn, void *ctx, const cudafx_options *o);

/* The pieces cfx_run_stripes is made of, for filters whose passes do not fit
 * it (k-means visits the whole image once per iteration). Hold cfx_lock
 * around every use of the others. */
std::unique_lock<std::mutex> cfx_lock ();
/* Grow-only device buffers kept across calls (dialog previews call often);
 * AUX for a filter's small extras (nl-means' noise histograms). */
enum cfx_slot { CFX_SLOT_SRC, CFX_SLOT_DST, CFX_SLOT_SCRATCH, CFX_SLOT_AUX, CFX_N_SLOTS };
cudafx_status cfx_buffer (cfx_slot slot, size_t bytes, void **out, const char *filter);
/* After a CUDA fault: the next call starts from fresh buffers. */
void cfx_release_buffers ();
/* Bytes a call may hold on the device (CUDAFX_CUDA_MEM_LIMIT caps it). */
size_t cfx_memory_budget ();
/* Rows per stripe cfx_run_stripes would use for src with halo and scratch
 * (at most the image's height; 0: not even one row fits), with the budget
 * and the bytes of a one-row stripe. */
int cfx_stripe_rows (const cudafx_image *src, int halo, size_t scratch_row_bytes, size_t *budget,
                     size_t *need);
/* 1 when CUDAFX_CUDA_FAIL names this point (alloc, launch, stripeN). */
int cfx_inject (const char *point);

#endif /* CUDAFX_CONTEXT_CUH */
