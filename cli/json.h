/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's --json output: one object per line on stdout. */
#ifndef CUDAFX_CLI_JSON_H
#define CUDAFX_CLI_JSON_H

#include "options.h"
#include "stages.h"

/* s as a JSON string (NULL: null). JSON is UTF-8, file names are bytes: a
 * byte that is not part of valid UTF-8 (a name from another encoding)
 * becomes U+FFFD, so that the line stays valid JSON. */
void cli_json_string (const char *s);

/* One file's line of --json. A file that failed has "input", "output" and
 * "error" only. */
void cli_json_file (const cli_command *c, const cli_file *f);

#endif /* CUDAFX_CLI_JSON_H */
