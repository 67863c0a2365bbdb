/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 3 procedures through the GEGL operations (cudafx:median,
 * ...) when GEGL has loaded the cudafx module: GIMP computes the pixels in its
 * own process instead of sending them to the plug-in and back. */
#ifndef CUDAFX_LIVE_H
#define CUDAFX_LIVE_H

#include <libgimp/gimp.h>

#include "procedures.h"

/* Whether GEGL knows the filter's operation (the module is installed). */
gboolean cudafx_live_available (int filter);

/* Adds the filter's operation with args to drawable as a live filter
 * (keep_live) or merges it (one undo step). The operation filters what GIMP
 * hands a filter: the selection's bounding box. GIMP itself is asked whether
 * it has the operation (the plug-in does not start GEGL for it): *available
 * FALSE, and nothing done, when it has not. */
gboolean cudafx_live_apply (GimpDrawable *drawable, const cudafx_proc_args *args,
                            gboolean keep_live, gboolean *available, GError **error);

#endif /* CUDAFX_LIVE_H */
