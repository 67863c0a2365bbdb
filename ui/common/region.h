/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — region I/O through GEGL, shared by the GIMP 3 and 2.10 front ends.
 *
 * Reads a selection's bounding rectangle plus the halo of real neighbouring
 * pixels the filter needs (clamped only at the buffer's edge), runs the
 * engine on it, and writes only the rectangle to the shadow buffer. The host
 * merges the shadow (which applies the selection mask) only when this
 * succeeds, so on any error the image is untouched. */
#ifndef CUDAFX_REGION_H
#define CUDAFX_REGION_H

#include <gegl.h>

#include "procedures.h"

/* The babl format cudafx reads source in: "R'G'B'(A)" or "Y'(A)", u8 for
 * 8-bit buffers and float for every higher precision, in the buffer's colour
 * space (the CLI uses the same formats, so results match). NULL with an error for palette formats. */
const Babl *cudafx_region_format (GeglBuffer *source, GError **error);
/* The same for pixels of format (what a GEGL operation's input pad delivers). */
const Babl *cudafx_region_format_of (const Babl *format, GError **error);

/* The 8-bit format of the same layout and colour space ("R'G'B'(A) u8" or
 * "Y'(A) u8"): what GIMP 2.10's preview draws. */
const Babl *cudafx_region_u8_format (GeglBuffer *source, GError **error);

/* Reads rect of source, in cudafx_region_format, into a new image view whose
 * pixels the caller frees with g_free (image->data). */
gboolean cudafx_region_read (GeglBuffer *source, const GeglRectangle *rect, cudafx_image *image,
                             GError **error);
/* The same in format, one of cudafx_region_format_of's, at a level of
 * detail (0: every pixel; L: 1/2^L scale, rect in that level's coordinates). */
gboolean cudafx_region_read_as (GeglBuffer *source, const GeglRectangle *rect, int level,
                                const Babl *format, cudafx_image *image, GError **error);
/* The same into pixels, rect's rows packed (rect->width times the
 * format's bytes each), which the caller owns. */
void     cudafx_region_read_into (GeglBuffer *source, const GeglRectangle *rect, int level,
                                  const Babl *format, void *pixels, cudafx_image *image);

/* The rectangle a run of args on area reads: area and the filter's halo, cut
 * to the buffer (what automatic nl-means estimates its noise on). */
gboolean cudafx_region_input (GeglBuffer *source, const GeglRectangle *area,
                              const cudafx_proc_args *args, GeglRectangle *read,
                              GError **error);

/* Filters area (in buffer coordinates) of source into shadow, as that part
 * of a whole-buffer run (the filter's origin_x, origin_y set to where the
 * pixels read lie). progress may be NULL; result may be NULL. */
gboolean cudafx_region_process (GeglBuffer *source, GeglBuffer *shadow,
                                const GeglRectangle *area, const cudafx_proc_args *args,
                                cudafx_progress_fn progress, void *user_data,
                                cudafx_run_result *result, GError **error);

/* What a dialog's preview of area shows, filtered exactly as a run filters
 * selection (NULL: the selection does not touch the drawable): area with the
 * filter's halo of real neighbours; for quantize, whose palette depends on
 * all of it, the whole selection, filtered once into *whole and reused until
 * the caller clears *whole (a change of settings). A buffer the size of
 * source holding at least area filtered (unref it), or NULL with an error. */
GeglBuffer *cudafx_region_preview (GeglBuffer *source, const GeglRectangle *selection,
                                   const GeglRectangle *area, const cudafx_proc_args *args,
                                   GeglBuffer **whole, cudafx_run_result *run, GError **error);

/* The noise σ that automatic mode of filter (nl-means or nl-bayes) finds
 * for a run on selection (which estimates it on what it reads: selection and
 * the filter's halo; nl-bayes' largest) and, for nl-means, the parameters it
 * picks from it. */
gboolean cudafx_region_noise (GeglBuffer *source, const GeglRectangle *selection, int filter,
                              cudafx_nlmeans_info *info, GError **error);

#endif /* CUDAFX_REGION_H */
