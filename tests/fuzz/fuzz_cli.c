/* SPDX-License-Identifier: GPL-3.0-or-later */
/* libFuzzer harness for the CLI's option and kernel parsing (cli/options.c).
 *
 * The input is a command line: NUL-separated words, the first naming the
 * filter (median, nl-means, quantize, convolve; anything else picks one by its
 * first byte). The CLI's files other than main.c are linked in, and only
 * cli_parse_command runs: no GEGL call, no file is touched.
 *
 * Besides ASan and UBSan reports, it aborts when a line the parser accepts
 * leaves a value the engine would reject: every table argument in range (a
 * choice a valid index), a custom kernel odd-sized with finite taps, threads
 * 0..1024, IN and OUT set (or --output-dir and at least one IN), nl-means not both automatic and given manual
 * values. Built and run by `make fuzz`, which closes the target's stdout and
 * stderr (help and usage messages) with -close_fd_mask=3. */
#include "../../cli/messages.h"
#include "../../cli/options.h"

#include <glib.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 64

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (int ok, const char *what)
{
  if (!ok)
    {
      fprintf (stderr, "fuzz_cli: invariant broken: %s\n", what);
      abort ();
    }
}

/* What the engine needs of a command the parser accepted. */
static void
check_accepted (const cli_command *c)
{
  check ((c->in && c->out && c->n_inputs == 1) || (c->output_dir && c->n_inputs >= 1),
         "IN or OUT missing");
  for (int i = 0; i < c->n_inputs; i++)
    check (c->inputs[i] != NULL, "an input missing");
  check (c->threads >= 0 && c->threads <= CLI_MAX_THREADS, "threads out of range");
  for (int i = 0; i < c->filter->n_args; i++)
    {
      const cudafx_arg *a = &c->filter->args[i];
      double v = c->values[i];
      switch (a->type)
        {
        case CUDAFX_ARG_INT:
        case CUDAFX_ARG_DOUBLE:
          check (v >= a->min && v <= a->max, "a number out of its range");
          check (a->type == CUDAFX_ARG_DOUBLE || v == floor (v), "an integer with a fraction");
          break;
        case CUDAFX_ARG_BOOLEAN:
          check (v == 0 || v == 1, "a boolean neither 0 nor 1");
          break;
        case CUDAFX_ARG_CHOICE:
          check (v >= 0 && v < a->n_choices && v == floor (v), "a choice out of range");
          break;
        case CUDAFX_ARG_DOUBLE_ARRAY:
          if (c->kernel_size)
            {
              check (c->kernel_size % 2 == 1 && c->kernel_size >= a->min &&
                     c->kernel_size <= a->max, "kernel size");
              for (int k = 0; k < c->kernel_size * c->kernel_size; k++)
                check (isfinite (c->kernel[k]), "a kernel tap not finite");
            }
          break;
        case CUDAFX_ARG_PALETTE:
          if (c->given[i])
            check (c->palette.colors >= 1 && c->palette.colors <= CUDAFX_MAX_COLORS, "a palette's size");
          break;
        }
    }
  if (c->filter_index == CUDAFX_FILTER_NLMEANS)
    check (!(cli_arg_value (c, "auto") && (cli_arg_given (c, "h") || cli_arg_given (c, "patch-radius") ||
                                          cli_arg_given (c, "search-radius"))),
           "nl-means automatic with manual values");
  if (c->filter_index == CUDAFX_FILTER_CONVOLVE && c->kernel_size)
    check (cli_arg_value (c, "preset") == CUDAFX_PRESET_CUSTOM, "a kernel without preset custom");
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  /* Words are NUL-terminated copies (ASan sees reads past each word). */
  char *words[MAX_WORDS];
  int n = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && n < MAX_WORDS; i++)
    if (i == size || data[i] == '\0')
      {
        words[n] = malloc (i - start + 1);
        memcpy (words[n], data + start, i - start);
        words[n][i - start] = '\0';
        n++;
        start = i + 1;
      }

  cli_command c;
  memset (&c, 0, sizeof c);
  c.filter_index = (int) ((n && words[0][0] ? (unsigned char) words[0][0] : 0) % CUDAFX_N_FILTERS);
  for (int i = 0; i < CUDAFX_N_FILTERS; i++)
    if (!strcmp (words[0], cudafx_filters[i].name))
      c.filter_index = i;
  c.filter = &cudafx_filters[c.filter_index];

  int status = cli_parse_command (&c, n - 1, words + 1);
  check (status == 0 || status == -1 || status == EXIT_USAGE, "parser returned an odd status");
  if (status == 0)
    check_accepted (&c);
  g_free (c.inputs);

  for (int i = 0; i < n; i++)
    free (words[i]);
  return 0;
}
