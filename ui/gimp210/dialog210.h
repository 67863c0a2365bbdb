/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 2.10 dialogs (GTK 2): one per filter, its controls made
 * from the argument table, with a live preview through the same engine path
 * as the final run. */
#ifndef CUDAFX_DIALOG210_H
#define CUDAFX_DIALOG210_H

#include <libgimp/gimp.h>

#include "procedures.h"

/* Shows the dialog of args->filter for drawable, starting from args; TRUE
 * when the user chose OK, with the chosen values in args. */
gboolean cudafx_dialog210_run (gint32 drawable, cudafx_proc_args *args);

/* Quantize's palette argument from the GIMP palette called name ("" or
 * NULL: none, k-means computes one). */
gboolean cudafx_dialog210_load_palette (const gchar *name, cudafx_proc_args *args, GError **error);

#endif /* CUDAFX_DIALOG210_H */
