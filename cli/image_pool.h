/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Image memory for a batch: the blocks a finished file gives back are kept
 * for the next files, and once CUDA has started they are pinned
 * (cudafx_host_alloc), which the engine copies to and from the device
 * without its own staging copy. A batch of photos of one size thus pins
 * and maps its memory once, not twice a file. */
#ifndef CUDAFX_CLI_IMAGE_POOL_H
#define CUDAFX_CLI_IMAGE_POOL_H

#include <stddef.h>

/* A block of at least bytes, or NULL; thread-safe. */
void *cli_image_pool_take (size_t bytes);
/* Gives back a block from cli_image_pool_take (NULL: nothing). */
void  cli_image_pool_give (void *data);
/* Frees the spare blocks (every block must have been given back). */
void  cli_image_pool_clear (void);

/* What the pool's memory cost, for CUDAFX_BATCH_TIMELINE: blocks made
 * pinned and plain, blocks freed, and the ms spent making and freeing them
 * (cudaHostAlloc and cudaFreeHost for pinned ones). */
typedef struct {
  int    pinned, plain, freed;
  double pin_ms, plain_ms, free_ms;
} cli_image_pool_stats;
void   cli_image_pool_get_stats (cli_image_pool_stats *stats);
/* Ms the calling thread has spent in cli_image_pool_take, waiting for the
 * pool's lock included. */
double cli_image_pool_thread_ms (void);

#endif /* CUDAFX_CLI_IMAGE_POOL_H */
