/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 3 dialogs: one GimpProcedureDialog per filter, built
 * from the procedure's config, with a live preview through the same engine
 * path as the final render. */
#ifndef CUDAFX_DIALOG_H
#define CUDAFX_DIALOG_H

#include <libgimp/gimp.h>

/* Shows filter's dialog for drawable; TRUE when the user chose OK, with the
 * chosen values in config (which GIMP then remembers as the last values). */
gboolean cudafx_dialog_run (GimpProcedure *procedure, GimpProcedureConfig *config,
                            GimpDrawable *drawable, int filter);

#endif /* CUDAFX_DIALOG_H */
