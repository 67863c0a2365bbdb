/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's --help: the program's, and each filter's from its argument
 * table (blurbs, ranges, defaults) and the CLI's own options. */
#ifndef CUDAFX_CLI_HELP_H
#define CUDAFX_CLI_HELP_H

#include "../core/cudafx.h"

/* `cudafx FILTER --help`: filter is cudafx_filters[index]. */
void cli_print_filter_help (const cudafx_filter_desc *filter, int index);

/* `cudafx --help`. */
void cli_print_main_help (void);

#endif /* CUDAFX_CLI_HELP_H */
