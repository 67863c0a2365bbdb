/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's two kinds of failure and their messages: a usage error (exit 2),
 * caught before any file is touched, and a runtime error (exit 1) while
 * reading, computing or writing. Both are translated and kept, for the
 * "error" that --json prints. */
#ifndef CUDAFX_CLI_MESSAGES_H
#define CUDAFX_CLI_MESSAGES_H

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Prints "cudafx COMMAND: MESSAGE" and the --help hint on stderr (command
 * NULL: the program's own line); fmt is an untranslated printf format
 * (xgettext: --keyword=usage_error:2). Returns EXIT_USAGE. */
int usage_error (const char *command, const char *fmt, ...);

/* The last usage error's message. */
const char *cli_usage_message (void);

/* Prints "cudafx: MESSAGE" on stderr, clear of the progress line; safe from
 * the pipeline's threads (xgettext: --keyword=runtime_error:1). Returns
 * EXIT_RUNTIME. */
int runtime_error (const char *fmt, ...);

/* The calling thread's last runtime error's message. */
const char *cli_last_error (void);

#endif /* CUDAFX_CLI_MESSAGES_H */
