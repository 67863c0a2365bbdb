/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A batch's timeline, for finding where its wall time goes:
 * with CUDAFX_BATCH_TIMELINE=FILE the CLI writes FILE, one JSON object a
 * line, times in ms since main began (CLOCK_MONOTONIC). The stamps are taken
 * always (a clock read each); only the writing depends on the variable.
 * bench/batch_timeline.py summarises the file; docs/BENCHMARKS.md
 * ("Batch") says what the parts are. */
#ifndef CUDAFX_CLI_TIMELINE_H
#define CUDAFX_CLI_TIMELINE_H

/* At main's start: the origin of the times; opens the file when asked. */
void   cli_timeline_init (void);
/* 1 when a timeline is being written. */
int    cli_timeline_on (void);
/* A stamp from cli_now_ms (batch.h) as ms since the origin; -1 for 0 (never
 * stamped). */
double cli_timeline_ms (double stamp);
/* Writes one line: fmt gives the object's members without braces
 * (printf-style). Thread-safe; nothing when no timeline is written. */
void   cli_timeline_line (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
/* Closes the file (at the end of main). */
void   cli_timeline_close (void);

#endif /* CUDAFX_CLI_TIMELINE_H */
