/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 3 dialogs: one GimpProcedureDialog per filter, built
 * from the procedure's config, with a live preview through the same engine
 * path as the final render. They are a module of their own,
 * CUDAFX_DIALOGS_MODULE, installed beside the plug-in and loaded only for an
 * interactive run, so that the non-interactive calls never load libgimpui and
 * GTK; the module takes the engine and the glue from the executable, which
 * exports them. */
#ifndef CUDAFX_DIALOG_H
#define CUDAFX_DIALOG_H

#include <libgimp/gimp.h>

#define CUDAFX_DIALOGS_MODULE "cudafx-dialogs.so"
#define CUDAFX_DIALOG_SYMBOL  "cudafx_dialog_run"

/* Shows filter's dialog for drawable; TRUE when the user chose OK, with the
 * chosen values in config (which GIMP then remembers as the last values). */
gboolean cudafx_dialog_run (GimpProcedure *procedure, GimpProcedureConfig *config,
                            GimpDrawable *drawable, int filter);
typedef gboolean (*cudafx_dialog_fn) (GimpProcedure *procedure, GimpProcedureConfig *config,
                                      GimpDrawable *drawable, int filter);

#endif /* CUDAFX_DIALOG_H */
