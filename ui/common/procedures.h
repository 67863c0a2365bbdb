/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — host-neutral procedure glue shared by the GIMP 3 and 2.10 front ends.
 *
 * A procedure's argument values are kept by table position (the order of
 * cudafx_filters[f].args), so a host fills them by walking the table and
 * asking its own config for each name. From the values this file builds the
 * engine's parameter structs, computes how far a filter reads beyond a pixel
 * (the halo a selection needs) and runs the engine. The engine validates. */
#ifndef CUDAFX_PROCEDURES_H
#define CUDAFX_PROCEDURES_H

#include <glib.h>

#include "cudafx.h"

/* Errors of the glue and the engine: the code is the cudafx_status, so a host
 * can tell a bad argument (a calling error) from a failed run. */
#define CUDAFX_PROC_ERROR (cudafx_proc_error_quark ())
GQuark cudafx_proc_error_quark (void);
/* Beyond the statuses: GIMP itself refused a step of the run (palette, mode). */
#define CUDAFX_PROC_ERR_GIMP 100

#define CUDAFX_PROC_MAX_ARGS 16

typedef struct {
  int    filter;                       /* CUDAFX_FILTER_* */
  double values[CUDAFX_PROC_MAX_ARGS]; /* int, double, boolean 0/1, choice index */
  /* The one array argument (convolution kernel), row-major n*n values. */
  double kernel[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int    kernel_length;                /* 0: the engine's default kernel */
  /* Automatic nl-means and nl-bayes: > 0 is the noise sigma nl-means'
   * estimator found on the whole run's area, so that a dialog's preview or a
   * GEGL region of part of it filters as the run will. */
  double nlmeans_sigma;
  cudafx_noise_model nlmeans_noise; /* the noise model found with nlmeans_sigma */
  /* Where the pixels filtered lie in the whole image (their top-left), for a
   * filter whose output depends on the position (nl-bayes' grid of reference
   * patches): a part then equals the same part of a whole-image run. */
  int    origin_x, origin_y;
  /* Quantize's palette argument, when one was given: the colours to map to,
   * and the host's name for them (GIMP 2.10 keeps it with the last values). */
  cudafx_palette palette;
  gboolean       has_palette;
  gchar          palette_name[256];
} cudafx_proc_args;

/* A procedure's arguments are the engine's table (cudafx_filters[filter].args)
 * followed by the host's own: what only a GIMP run can do, such as creating a
 * palette resource. Both GIMP front ends register all of them, in this order,
 * and a dialog can show them like the others. */
int               cudafx_proc_n_args (int filter);
const cudafx_arg *cudafx_proc_arg (int filter, int index);

/* The defaults of every argument of filter. */
void cudafx_proc_args_init (cudafx_proc_args *args, int filter);

/* Position of an argument among the procedure's, or -1. */
int cudafx_proc_arg_index (int filter, const char *name);

/* Whether the filter's halo follows the noise it finds and the noise is not
 * known yet (automatic nl-bayes without nlmeans_sigma): its halo is then the
 * largest any noise gives, and a host that estimates the noise first (on what
 * that halo reads, as the run would) can read less. */
gboolean cudafx_proc_halo_follows_noise (const cudafx_proc_args *args);

/* Stores the kernel; more values than the largest kernel holds is an error naming "kernel". */
gboolean cudafx_proc_set_kernel (cudafx_proc_args *args, const double *values, gsize length,
                                 GError **error);

/* Pixels the filter reads beyond the pixel it computes, in each direction:
 * what a selection's region must be widened by so that its edge sees real
 * neighbours. Quantize works on the selection alone (0). */
gboolean cudafx_proc_halo (const cudafx_proc_args *args, int *halo, GError **error);

/* The kernel a convolution's values filter with (the preset's, or the custom
 * one): size*size taps (room for CUDAFX_MAX_KERNEL_SIZE² values) and size.
 * What the halo is sized by and what the dialogs' kernel grids show. */
gboolean cudafx_proc_kernel (const cudafx_proc_args *args, double *taps, int *size,
                             GError **error);

/* Runs the filter on src into dst with the progress callback of options (its
 * backend comes from the backend argument). The engine validates every value;
 * its message becomes the error. result may be NULL. */
gboolean cudafx_proc_run (const cudafx_proc_args *args, const cudafx_image *src,
                          cudafx_image *dst, const cudafx_options *options,
                          cudafx_run_result *result, GError **error);

/* Quantize's host arguments: create a palette resource of the colours found;
 * convert the image to indexed mode with it (which implies creating it);
 * and leave out the colours no pixel took. */
gboolean cudafx_proc_creates_palette (const cudafx_proc_args *args);
gboolean cudafx_proc_converts_indexed (const cudafx_proc_args *args);
gboolean cudafx_proc_removes_unused (const cudafx_proc_args *args);

/* What both GIMPs refuse before a run touches the image, from what each
 * found of it with its own API (an error naming the filter and the fix):
 * a layer group or an indexed drawable, a selection outside the drawable
 * (touches FALSE); for convert-indexed, an image holding layer groups. */
gboolean cudafx_proc_check_drawable (const char *filter, gboolean is_group, gboolean is_indexed, gboolean touches,
                                     GError **error);
gboolean cudafx_proc_check_indexable (gboolean has_groups, GError **error);
/* GIMP refused the conversion to indexed mode; gimp_error its PDB's message. */
gboolean cudafx_proc_indexed_failed (const char *gimp_error, GError **error);

/* Quantize's palette argument from a host's palette: count colours as R'G'B'
 * on the 0..1 scale. No colours (none chosen) leaves the palette to k-means;
 * more than the engine takes is an error naming the palette. */
gboolean cudafx_proc_set_palette (cudafx_proc_args *args, const double (*rgb)[3], int count,
                                  const char *name, GError **error);

/* Keeps the entries of palette that some pixel of image (a quantize run's
 * output) holds, in their order; returns how many were dropped. */
int cudafx_proc_palette_keep_used (cudafx_palette *palette, const cudafx_image *image);

/* The name to ask GIMP for, "cudafx 16 colors" (GIMP makes it unique). Free with g_free. */
gchar *cudafx_proc_palette_name (const cudafx_palette *palette);

/* Entry index of palette as R'G'B' on the 0..1 scale (grey repeated), and
 * its name, "#rrggbb" as in the CLI's palette files. */
void cudafx_proc_palette_entry (const cudafx_palette *palette, int index, double rgb[3],
                                char name[8]);

/* Binds the gettext domain "cudafx" to locale/ in the folder of executable,
 * where the plug-in is installed with its catalogs; returns that folder (free
 * with g_free), or NULL if there is none (the plug-in runs untranslated). */
gchar *cudafx_proc_bind_translations (const gchar *executable);

#endif /* CUDAFX_PROCEDURES_H */
