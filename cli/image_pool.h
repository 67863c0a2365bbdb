/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Image memory for a batch: the blocks a finished file gives back are kept
 * for the next files, and those the engine takes to the device are pinned
 * (cli_image_pool_pin), which it copies to and from the device without its
 * own staging copy. A batch of photos of one size thus pins and maps its
 * memory once, not twice a file. */
#ifndef CUDAFX_CLI_IMAGE_POOL_H
#define CUDAFX_CLI_IMAGE_POOL_H

#include <stddef.h>

/* A block of at least bytes, or NULL; thread-safe. */
void *cli_image_pool_take (size_t bytes);
/* Pins the block from cli_image_pool_take that begins at data, once CUDA
 * has a device ready (cudafx_host_pin); nothing for memory the pool did not
 * make, a block pinned already, or past the pool's share of the machine's
 * memory. Called by the block's holder. */
void  cli_image_pool_pin (const void *data);
/* Gives back a block from cli_image_pool_take (NULL: nothing). */
void  cli_image_pool_give (void *data);
/* Frees the spare blocks (every block must have been given back). */
void  cli_image_pool_clear (void);

/* What the pool's memory cost, for CUDAFX_BATCH_TIMELINE: blocks pinned
 * and made (plain), blocks freed, and the ms spent on each. */
typedef struct {
  int    pinned, plain, freed;
  double pin_ms, plain_ms, free_ms;
} cli_image_pool_stats;
void   cli_image_pool_get_stats (cli_image_pool_stats *stats);
/* Ms the calling thread has spent in cli_image_pool_take and
 * cli_image_pool_pin, waiting for the pool's lock included. */
double cli_image_pool_thread_ms (void);

#endif /* CUDAFX_CLI_IMAGE_POOL_H */
