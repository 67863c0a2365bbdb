/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A filter's command line: the engine's argument table (cudafx_filters in
 * core/params.c) as --NAME options, the CLI's own options, IN and OUT or
 * --output-dir's inputs. Out-of-range or malformed options are usage errors
 * (messages.h), caught before any file is touched. */
#ifndef CUDAFX_CLI_OPTIONS_H
#define CUDAFX_CLI_OPTIONS_H

#include "../core/cudafx.h"

/* Enough for every filter's table (checked when parsing starts). */
#define CLI_MAX_ARGS    16
#define CLI_MAX_THREADS 1024
#define CLI_MAX_WORKERS 64
#define KERNEL_CAPACITY (CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE)

/* ---- the command line ------------------------------------------------------ */

typedef struct {
  const cudafx_filter_desc *filter;
  int         filter_index;
  double      values[CLI_MAX_ARGS]; /* by table index; the table's defaults until given */
  int         given[CLI_MAX_ARGS];
  double      kernel[KERNEL_CAPACITY];
  int         kernel_size;          /* 0 unless --kernel was given */
  cudafx_palette palette;           /* --palette FILE.gpl, when given */
  int         threads;
  int         workers;        /* 0: two per CUDA device the batch runs on */
  int         json;
  int         strip;          /* --strip: no metadata in OUT */
  double      max_megapixels; /* 0: no limit */
  const char *palette_out;
  const char *in, *out;     /* one file: IN OUT */
  const char *output_dir;   /* several files: inputs[0..n_inputs) into this directory */
  const char **inputs;      /* owned (g_free) */
  int         n_inputs;
} cli_command;

/* Parses argv (the words after the filter's name) into c, whose filter and
 * filter_index are set and the rest zero. Returns 0 and fills c, -1 when
 * --help was printed, or an exit status; c->inputs is the caller's to free
 * in every case. */
int cli_parse_command (cli_command *c, int argc, char **argv);

/* The value of table argument NAME (the table's default until given), and
 * whether the command line gave it. */
double cli_arg_value (const cli_command *c, const char *name);
int cli_arg_given (const cli_command *c, const char *name);

#endif /* CUDAFX_CLI_OPTIONS_H */
