/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — a GIMP 3 procedure config read back into argument values by the
 * table's names: what a run and the dialog's preview both filter with. */
#ifndef CUDAFX_ARGS_H
#define CUDAFX_ARGS_H

#include <libgimp/gimp.h>

#include "procedures.h"

/* Fills args (initialised for its filter) from config. */
gboolean cudafx_config_read_args (GimpProcedureConfig *config, cudafx_proc_args *args,
                                  GError **error);

#endif /* CUDAFX_ARGS_H */
