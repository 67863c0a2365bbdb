/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — a GIMP 3 procedure config read back into argument values by the
 * table's names: what a run and the dialog's preview both filter with. */
#ifndef CUDAFX_ARGS_H
#define CUDAFX_ARGS_H

#include <libgimp/gimp.h>

#include "procedures.h"

/* Quantize's auxiliary argument: the dialog's check box that says whether
 * the palette chooser's palette is the one to map to. */
#define CUDAFX_USE_PALETTE "use-palette"

/* Fills args (initialised for its filter) from config; quantize's palette
 * only with_palette (else none is given: k-means). */
gboolean cudafx_config_read_args (GimpProcedureConfig *config, gboolean with_palette,
                                  cudafx_proc_args *args, GError **error);

/* Whether the dialog's settings map to the chosen palette (config has
 * CUDAFX_USE_PALETTE and it is on). */
gboolean cudafx_config_uses_palette (GimpProcedureConfig *config);

#endif /* CUDAFX_ARGS_H */
