/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — what the GIMP 3 and GIMP 2.10 dialogs share beyond the argument
 * table: titles, the backend and noise lines, and the kernel grid's
 * arithmetic. GLib and GEGL only, so either toolkit's dialog can use it. */
#ifndef CUDAFX_DIALOG_COMMON_H
#define CUDAFX_DIALOG_COMMON_H

#include <gegl.h>

#include "procedures.h"

/* The kernel grids edit kernels from 3×3 up to this size (odd sizes); larger
 * kernels (a wide Gaussian, a custom 31×31 from a script) are only named. */
#define CUDAFX_KERNEL_GRID_MAX 7

/* "Median (GPU)" from the menu label "_Median (GPU)...", translated. */
gchar *cudafx_dialog_title (const cudafx_filter_desc *desc);

/* "Backend available: CUDA: <device>" or "… CPU, N threads — no CUDA device (why)". */
gchar *cudafx_dialog_backend_text (void);

/* The noise σ that automatic mode of filter (nl-means, nl-bayes) will find
 * on selection of source (NULL: the selection does not touch the drawable)
 * and what it makes of it, or why it could not be estimated. *sigma is that
 * σ, 0 when unknown, and *noise the noise model found with it (σ in the
 * shadows and highlights when it follows brightness): a preview of part of
 * the selection filters with them, as the run will. */
gchar *cudafx_dialog_noise_text (GeglBuffer *source, const GeglRectangle *selection, int filter,
                                 double *sigma, cudafx_noise_model *noise);

/* When noise looks correlated (a camera's JPEG): how strongly, between
 * neighbouring pixels and between the colour channels, and what automatic
 * mode of filter does about it; NULL for noise that does not. The noise
 * line above ends with it. */
gchar *cudafx_dialog_correlation_note (int filter, const cudafx_noise_model *noise);

/* Why the kernel grid cannot show a size×size kernel, or NULL when it can. */
gchar *cudafx_dialog_kernel_note (int size);

/* taps (n×n) resized to new_n×new_n around the same centre: cut at the
 * edges or padded with zeros. */
void cudafx_kernel_recentre (const double *taps, int n, double *resized, int new_n);

#endif /* CUDAFX_DIALOG_COMMON_H */
