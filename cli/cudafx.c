/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the command-line host of the engine.
 *
 *   cudafx FILTER [OPTIONS] IN OUT                  (median, nl-means, quantize, convolve, nl-bayes)
 *   cudafx FILTER [OPTIONS] IN... --output-dir DIR
 *   cudafx info
 *
 * Options, their ranges, defaults and --help text come from the engine's
 * argument table (cudafx_filters in core/params.c), so the CLI, the GIMP
 * procedures and the engine's validation agree by construction. Out-of-range
 * or malformed options are usage errors (exit 2) caught before any file is
 * touched; failures while reading, computing or writing are runtime errors
 * (exit 1). Images are read and written by image_io.c (PNG, JPEG, TIFF, WebP
 * and PNM through their libraries, other formats through GEGL); OUT is written
 * to a temporary file in its directory and renamed into place, so it is
 * never left half-written. Messages and --help are translated (gettext
 * domain cudafx, catalogs in locale/ beside the executable). Like G'MIC-qt's
 * "none" host, this file only fetches pixels, runs the engine and posts the
 * result: one file's load, filter and save are the three stages that the
 * pipeline (batch.c) overlaps across files, one file being a batch of one;
 * the backend for --backend auto is chosen in backend.c.
 */
#include "../core/cudafx.h"
#include "backend.h"
#include "batch.h"
#include "image_io.h"
#include "image_pool.h"
#include "timeline.h"

#define GETTEXT_PACKAGE "cudafx"
#include <glib.h>
#include <glib/gi18n-lib.h>

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Enough for every filter's table (checked when parsing starts). */
#define CLI_MAX_ARGS    16
#define CLI_MAX_THREADS 1024
#define CLI_MAX_WORKERS 64
#define KERNEL_CAPACITY (CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE)
/* Larger inputs are refused before their pixels are read unless
 * --max-megapixels says otherwise: 500 MP is beyond any camera's photo and
 * within a workstation's memory (source and result, 8-bit RGB: 3 GB). */
#define CLI_DEFAULT_MAX_MEGAPIXELS 500

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

/* Options the CLI adds to the table's arguments, for --help. */
typedef struct {
  const char *name;
  const char *metavar;     /* NULL for flags */
  const char *blurb;
  int         only_filter; /* -1: every filter */
} cli_option;

static const cli_option cli_options[] = {
  { "palette-out", N_("FILE.gpl"), N_("Also write the palette as a GIMP palette file."),
    CUDAFX_FILTER_QUANTIZE },
  { "output-dir", N_("DIR"), N_("Filter every IN given into DIR, under its own name and in its own format; "
                                 "OUT is not given then."), -1 },
  { "threads", "N", N_("CPU threads; 0 uses all cores. Integer 0..1024, default 0."), -1 },
  { "workers", "N", N_("Files filtered at once with --output-dir, each on its own CUDA device in turn; "
                       "0 runs two per device CUDA lists (CUDA_VISIBLE_DEVICES chooses them), so that "
                       "one file's copies overlap the other's kernels, when the batch runs on CUDA, one "
                       "otherwise. Integer 0..64, default 0."), -1 },
  { "max-megapixels", "N", N_("Refuse inputs larger than N megapixels before reading their "
                              "pixels; 0 for no limit. Default 500."), -1 },
  { "strip", NULL, N_("Leave the input's ICC profile, EXIF and XMP metadata out of OUT."), -1 },
  { "json", NULL, N_("Print one JSON object describing the run on stdout (with --output-dir, "
                     "one line per file)."), -1 },
  { "help", NULL, N_("Show this help and exit."), -1 },
};

/* What the CLI makes of some arguments, beyond the table's blurbs. */
static const char *const filter_notes[CUDAFX_N_FILTERS] = {
  [CUDAFX_FILTER_NLMEANS] =
    N_("Automatic mode is the default. Giving --h, --patch-radius or --search-radius "
       "selects manual mode (those not given keep their defaults), as does --no-auto; "
       "--auto together with any of them is an error."),
  [CUDAFX_FILTER_NLBAYES] =
    N_("Automatic mode is the default. Giving --sigma selects manual mode, as does "
       "--no-auto; --auto together with --sigma is an error."),
  [CUDAFX_FILTER_CONVOLVE] =
    N_("--kernel implies --preset custom; --preset custom without --kernel uses the "
       "3x3 identity. Example: --kernel \"0,-1,0;-1,5,-1;0,-1,0\" sharpens."),
};

/* The last usage error's message, for --json. */
static char usage_message[512];

static int
usage_error (const char *command, const char *fmt, ...)
{
  va_list ap;
  fprintf (stderr, "cudafx%s%s: ", command ? " " : "", command ? command : "");
  va_start (ap, fmt);
  vsnprintf (usage_message, sizeof usage_message, _(fmt), ap); /* xgettext: --keyword=usage_error:2 */
  va_end (ap);
  fputs (usage_message, stderr);
  fputc ('\n', stderr);
  fprintf (stderr, _("Try 'cudafx%s%s --help'."), command ? " " : "", command ? command : "");
  fputc ('\n', stderr);
  return EXIT_USAGE;
}

/* The calling thread's last runtime error, for --json's "error" in batches. */
static __thread char last_error[512];

/* Safe from the pipeline's threads: the message goes out whole, clear of the
 * progress line. */
static int
runtime_error (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (last_error, sizeof last_error, _(fmt), ap); /* xgettext: --keyword=runtime_error:1 */
  va_end (ap);
  fprintf (cli_message_begin (), "cudafx: %s\n", last_error);
  cli_message_end ();
  return EXIT_RUNTIME;
}

/* ---- help -------------------------------------------------------------------- */

/* Prints text word-wrapped to 79 columns, every line indented. */
static void
print_wrapped (int indent, const char *text)
{
  const int width = 79;
  int column = 0;

  while (*text)
    {
      size_t word = strcspn (text, " ");
      /* Count UTF-8 characters, not bytes, for the column. */
      int chars = 0;
      for (size_t i = 0; i < word; i++)
        chars += ((unsigned char) text[i] & 0xC0) != 0x80;
      if (column > indent && column + 1 + chars > width)
        {
          putchar ('\n');
          column = 0;
        }
      if (column == 0)
        column = printf ("%*s", indent, "");
      else
        column += printf (" ");
      fwrite (text, 1, word, stdout);
      column += chars;
      text += word;
      while (*text == ' ')
        text++;
    }
  putchar ('\n');
}

/* The argument's blurb followed by its range and default, as one paragraph. */
static void
print_arg_help (const cudafx_arg *a)
{
  GString *s = g_string_new (_(a->blurb));
  g_string_append (s, ". ");
  switch (a->type)
    {
    case CUDAFX_ARG_INT:
      g_string_append_printf (s, _("Integer %.0f..%.0f, default %.0f."), a->min, a->max, a->def);
      break;
    case CUDAFX_ARG_DOUBLE:
      g_string_append_printf (s, _("Number %g..%g, default %g."), a->min, a->max, a->def);
      break;
    case CUDAFX_ARG_BOOLEAN:
      g_string_append (s, a->def ? _("Default on.") : _("Default off."));
      break;
    case CUDAFX_ARG_CHOICE:
      {
        GString *nicks = g_string_new (NULL);
        for (int i = 0; i < a->n_choices; i++)
          g_string_append_printf (nicks, "%s%s", i ? ", " : "", a->choices[i].nick);
        /* TRANSLATORS: a list of names, then the default name */
        g_string_append_printf (s, _("One of %s; default %s."), nicks->str,
                                a->choices[(int) a->def].nick);
        g_string_free (nicks, TRUE);
      }
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      g_string_append (s, _("Rows are separated by ';', values by ','."));
      break;
    case CUDAFX_ARG_PALETTE:
      g_string_append (s, _("A GIMP palette file (.gpl); --colors, --max-iterations and --seed "
                            "do not apply."));
      break;
    }
  print_wrapped (6, s->str);
  g_string_free (s, TRUE);
}

static void
print_filter_help (const cudafx_filter_desc *filter, int index)
{
  printf (_("Usage: cudafx %s [OPTIONS] IN OUT"), filter->name);
  putchar ('\n');
  printf (_("   or: cudafx %s [OPTIONS] IN... --output-dir DIR"), filter->name);
  printf ("\n\n%s.\n", _(filter->blurb));
  print_wrapped (0, _(filter->help));
  putchar ('\n');
  print_wrapped (0, _("IN and OUT are image files GEGL can load and save (PNG, JPEG, TIFF, PPM, "
                      "EXR, WebP...); OUT keeps IN's bit depth where its format allows."));
  printf ("\n%s\n", _("Options:"));
  for (int i = 0; i < filter->n_args; i++)
    {
      const cudafx_arg *a = &filter->args[i];
      switch (a->type)
        {
        case CUDAFX_ARG_INT:          printf ("  --%s N\n", a->name); break;
        case CUDAFX_ARG_DOUBLE:       printf ("  --%s X\n", a->name); break;
        case CUDAFX_ARG_BOOLEAN:      printf ("  --%s, --no-%s\n", a->name, a->name); break;
        case CUDAFX_ARG_CHOICE:       printf ("  --%s NAME\n", a->name); break;
        case CUDAFX_ARG_DOUBLE_ARRAY: printf ("  --%s \"a,b,c;d,e,f;g,h,i\"\n", a->name); break;
        case CUDAFX_ARG_PALETTE:      printf ("  --%s FILE.gpl\n", a->name); break;
        }
      print_arg_help (a);
    }
  for (size_t i = 0; i < sizeof cli_options / sizeof cli_options[0]; i++)
    {
      const cli_option *c = &cli_options[i];
      if (c->only_filter >= 0 && c->only_filter != index)
        continue;
      printf ("  --%s%s%s\n", c->name, c->metavar ? " " : "", c->metavar ? _(c->metavar) : "");
      print_wrapped (6, _(c->blurb));
    }
  if (filter_notes[index])
    {
      putchar ('\n');
      print_wrapped (0, _(filter_notes[index]));
    }
}

static void
print_main_help (void)
{
  printf ("%s\n%s\n\n%s\n\n%s\n", _("Usage: cudafx COMMAND [OPTIONS] IN OUT"),
          _("   or: cudafx COMMAND [OPTIONS] IN... --output-dir DIR"),
          _("GPU-accelerated image filters (CUDA, with a multithreaded CPU fallback)."),
          _("Commands:"));
  for (int i = 0; i < CUDAFX_N_FILTERS; i++)
    printf ("  %-10s %s\n", cudafx_filters[i].name, _(cudafx_filters[i].blurb));
  printf ("  %-10s %s\n\n", "info", _("Show the version, the backends and the CUDA device"));
  printf ("%s\n", _("Common options: --backend auto|cpu|cuda  --threads N  --json  --help"));
  print_wrapped (0, _("'cudafx COMMAND --help' lists a command's options with ranges and defaults."));
  putchar ('\n');
  print_wrapped (0, _("Environment: CUDAFX_BACKEND=cpu|cuda overrides --backend auto."));
  print_wrapped (0, _("Exit status: 0 success, 1 runtime error (input, output, engine; with "
                      "--output-dir: some files failed, the others were written), "
                      "2 usage error (unknown or out-of-range option)."));
}

/* ---- option parsing ----------------------------------------------------------- */

/* Whole-string number; integers must be whole. Returns 1 when it parses,
 * 0 when it does not, and for a number beyond what a double holds 2 (too
 * large) or 3 (too small to be told from 0), which callers report as such. */
static int
parse_number (const char *text, int integer, double *value)
{
  char *end;
  errno = 0;
  if (integer)
    {
      long long v = strtoll (text, &end, 10);
      *value = (double) v;
    }
  else
    *value = strtod (text, &end);
  int range = errno == ERANGE;
  while (end != text && (*end == ' ' || *end == '\t'))
    end++;
  if (end != text && *end == '\0' && range)
    return integer || fabs (*value) > 1 ? 2 : 3;
  return end != text && *end == '\0' && errno == 0 && isfinite (*value);
}

/* --kernel "a,b,c;d,e,f;g,h,i" into taps (the engine's parser; its message
 * names the kernel argument, the CLI spells it as the option). */
static int
parse_kernel (const char *command, const char *text, double *taps, int *size)
{
  if (cudafx_kernel_parse (text, taps, size) != CUDAFX_OK)
    return usage_error (command, "--%s", cudafx_error_message ());
  return 0;
}

/* Converts and range-checks the text of --NAME for table argument a. */
static int
parse_arg_value (cli_command *c, const cudafx_arg *a, const char *text)
{
  const char *command = c->filter->name;
  int index = (int) (a - c->filter->args);
  double v;

  switch (a->type)
    {
    case CUDAFX_ARG_INT:
    case CUDAFX_ARG_DOUBLE:
      switch (parse_number (text, a->type == CUDAFX_ARG_INT, &v))
        {
        case 0:
          return usage_error (command, a->type == CUDAFX_ARG_INT ? N_("--%s '%s' is not an integer")
                                                                 : N_("--%s '%s' is not a number"),
                              a->name, text);
        case 2:
          return usage_error (command, a->type == CUDAFX_ARG_INT
                                         ? N_("--%s %s is out of range %.0f..%.0f")
                                         : N_("--%s %s is out of range %g..%g"),
                              a->name, text, a->min, a->max);
        case 3:
          return usage_error (command, "--%s %s is too small to be told from 0 (below 2.2e-308); "
                                       "the range is %g..%g", a->name, text, a->min, a->max);
        }
      if (!(v >= a->min && v <= a->max))
        {
          if (a->type == CUDAFX_ARG_INT)
            return usage_error (command, "--%s %s is out of range %.0f..%.0f", a->name, text,
                                a->min, a->max);
          return usage_error (command, "--%s %s is out of range %g..%g", a->name, text, a->min,
                              a->max);
        }
      break;
    case CUDAFX_ARG_CHOICE:
      v = cudafx_choice_find (a, text);
      if (v < 0)
        {
          GString *nicks = g_string_new (NULL);
          for (int i = 0; i < a->n_choices; i++)
            g_string_append_printf (nicks, "%s%s", i ? ", " : "", a->choices[i].nick);
          int status = usage_error (command, N_("--%s '%s' is not one of %s"), a->name, text,
                                    nicks->str);
          g_string_free (nicks, TRUE);
          return status;
        }
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      {
        int status = parse_kernel (command, text, c->kernel, &c->kernel_size);
        if (status)
          return status;
        v = c->kernel_size;
      }
      break;
    case CUDAFX_ARG_PALETTE:
      if (cudafx_gpl_load (text, &c->palette))
        return usage_error (command, "--%s: %s", a->name, cudafx_error_message ());
      v = 1;
      break;
    case CUDAFX_ARG_BOOLEAN:
    default:
      abort (); /* flags take no value: handled by the caller */
    }
  c->values[index] = v;
  c->given[index] = 1;
  return 0;
}

static int
arg_index (const cli_command *c, const char *name)
{
  const cudafx_arg *a = cudafx_arg_find (c->filter, name);
  if (!a)
    abort (); /* the CLI misspelt a table name: a programming error */
  return (int) (a - c->filter->args);
}

static double
arg_value (const cli_command *c, const char *name)
{
  return c->values[arg_index (c, name)];
}

static int
arg_given (const cli_command *c, const char *name)
{
  return c->given[arg_index (c, name)];
}

/* The rules between arguments that the table cannot say. */
static int
check_combinations (cli_command *c)
{
  const char *command = c->filter->name;

  /* Giving a value automatic mode chooses selects manual mode. */
  if (cudafx_arg_find (c->filter, "auto"))
    {
      const char *manual = NULL;
      int automatic = arg_index (c, "auto");
      for (int i = 0; i < c->filter->n_args && !manual; i++)
        if (c->filter->args[i].chosen_by_auto && c->given[i])
          manual = c->filter->args[i].name;
      if (c->given[automatic] && c->values[automatic] && manual)
        return usage_error (command,
                            "--auto cannot be combined with --%s (automatic mode chooses it)", manual);
      if (!c->given[automatic])
        c->values[automatic] = !manual;
    }
  if (c->filter_index == CUDAFX_FILTER_CONVOLVE)
    {
      int preset = arg_index (c, "preset");
      if (c->kernel_size)
        {
          if (c->given[preset] && c->values[preset] != CUDAFX_PRESET_CUSTOM)
            return usage_error (command, "--kernel cannot be combined with --preset %s",
                                c->filter->args[preset].choices[(int) c->values[preset]].nick);
          c->values[preset] = CUDAFX_PRESET_CUSTOM;
        }
    }
  if (c->filter_index == CUDAFX_FILTER_QUANTIZE && arg_given (c, "palette"))
    {
      static const char *const computed[] = { "colors", "max-iterations", "seed" };
      for (size_t i = 0; i < sizeof computed / sizeof computed[0]; i++)
        if (arg_given (c, computed[i]))
          return usage_error (command, "--%s cannot be combined with --palette (the palette is given, "
                                       "not computed)", computed[i]);
    }
  return 0;
}

/* A path's directory with its links resolved, and its name: how two names
 * of a file that need not exist yet compare. NULL when the directory is
 * not there. Free with g_free. */
static char *
resolved_name (const char *path)
{
  char *dir = g_path_get_dirname (path), *base = g_path_get_basename (path);
  char *real = realpath (dir, NULL), *full = real ? g_build_filename (real, base, NULL) : NULL;
  free (real);
  g_free (dir);
  g_free (base);
  return full;
}

/* Whether a and b name one file: the same inode where both exist, else the
 * same name once the directories' links are resolved. */
static int
same_file (const char *a, const char *b)
{
  struct stat sa, sb;
  if (!stat (a, &sa) && !stat (b, &sb))
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  char *ra = resolved_name (a), *rb = resolved_name (b);
  int same = ra && rb && !strcmp (ra, rb);
  g_free (ra);
  g_free (rb);
  return same;
}

/* Returns 0 and fills c, -1 when --help was printed, or an exit status;
 * c->inputs is the caller's to free in every case. */
static int
parse_command (cli_command *c, int argc, char **argv)
{
  const char *command = c->filter->name;
  int positional = 0, options_done = 0;

  c->inputs = g_new0 (const char *, argc + 1);

  if (c->filter->n_args > CLI_MAX_ARGS)
    abort ();
  for (int i = 0; i < c->filter->n_args; i++)
    c->values[i] = c->filter->args[i].def;
  c->max_megapixels = CLI_DEFAULT_MAX_MEGAPIXELS;

  /* --help wins over anything else on the line. */
  for (int i = 0; i < argc && strcmp (argv[i], "--"); i++)
    if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h"))
      {
        print_filter_help (c->filter, c->filter_index);
        return -1;
      }

  for (int i = 0; i < argc; i++)
    {
      const char *arg = argv[i];
      if (options_done || arg[0] != '-' || arg[1] == '\0')
        {
          c->inputs[positional++] = arg;
          continue;
        }
      if (!strcmp (arg, "--"))
        {
          options_done = 1;
          continue;
        }
      if (arg[1] != '-')
        return usage_error (command, "unknown option '%s'", arg);

      /* --name VALUE or --name=VALUE */
      char name[64];
      const char *eq = strchr (arg + 2, '=');
      size_t len = eq ? (size_t) (eq - (arg + 2)) : strlen (arg + 2);
      if (len >= sizeof name)
        return usage_error (command, "unknown option '%s'", arg);
      memcpy (name, arg + 2, len);
      name[len] = '\0';
      const char *value = eq ? eq + 1 : NULL;

      const cudafx_arg *a = cudafx_arg_find (c->filter, name);
      int negated = 0;
      if (!a && !strncmp (name, "no-", 3))
        {
          a = cudafx_arg_find (c->filter, name + 3);
          negated = a && a->type == CUDAFX_ARG_BOOLEAN;
          if (!negated)
            a = NULL;
        }
      if (a && a->type == CUDAFX_ARG_BOOLEAN)
        {
          if (value)
            return usage_error (command, "--%s takes no value", name);
          c->values[a - c->filter->args] = !negated;
          c->given[a - c->filter->args] = 1;
          continue;
        }
      if (!strcmp (name, "json") || !strcmp (name, "strip"))
        {
          if (value)
            return usage_error (command, "--%s takes no value", name);
          if (!strcmp (name, "json"))
            c->json = 1;
          else
            c->strip = 1;
          continue;
        }
      int known = a || !strcmp (name, "threads") || !strcmp (name, "workers") ||
                  !strcmp (name, "output-dir") || !strcmp (name, "max-megapixels") ||
                  (!strcmp (name, "palette-out") && c->filter_index == CUDAFX_FILTER_QUANTIZE);
      if (!known)
        return usage_error (command, "unknown option '--%s'", name);
      if (!value)
        {
          if (i + 1 >= argc)
            return usage_error (command, "--%s needs a value", name);
          value = argv[++i];
        }

      int status = 0;
      if (a)
        status = parse_arg_value (c, a, value);
      else if (!strcmp (name, "threads"))
        {
          double t;
          if (parse_number (value, 1, &t) != 1)
            return usage_error (command, "--threads '%s' is not an integer 0..%d", value, CLI_MAX_THREADS);
          if (t < 0 || t > CLI_MAX_THREADS)
            return usage_error (command, "--threads %s is out of range 0..%d", value, CLI_MAX_THREADS);
          c->threads = (int) t;
        }
      else if (!strcmp (name, "workers"))
        {
          double t;
          if (parse_number (value, 1, &t) != 1)
            return usage_error (command, "--workers '%s' is not an integer 0..%d", value, CLI_MAX_WORKERS);
          if (t < 0 || t > CLI_MAX_WORKERS)
            return usage_error (command, "--workers %s is out of range 0..%d", value, CLI_MAX_WORKERS);
          c->workers = (int) t;
        }
      else if (!strcmp (name, "output-dir"))
        {
          if (!value[0])
            return usage_error (command, "--output-dir needs a directory");
          c->output_dir = value;
        }
      else if (!strcmp (name, "max-megapixels"))
        {
          if (parse_number (value, 0, &c->max_megapixels) != 1 || c->max_megapixels < 0)
            return usage_error (command, "--max-megapixels '%s' is not a number of 0 or more", value);
        }
      else if (!value[0])
        return usage_error (command, "--palette-out needs a file name");
      else
        c->palette_out = value;
      if (status)
        return status;
    }
  /* "-" is no file name a user means: standard input and output are not read or written. */
  for (int i = 0; i < positional; i++)
    if (!strcmp (c->inputs[i], "-"))
      return usage_error (command, "'-': standard input and output are not supported; give IN and "
                                   "OUT as files");
  if (c->output_dir)
    {
      if (positional == 0)
        return usage_error (command, "missing IN (the input images)");
      if (c->palette_out)
        return usage_error (command, "--palette-out takes one input; it cannot be combined with "
                                     "--output-dir");
      c->n_inputs = positional;
      return check_combinations (c);
    }
  if (positional < 2)
    return usage_error (command, positional ? "missing OUT (the output image)"
                                            : "missing IN and OUT (the input and output images)");
  if (positional > 2)
    return usage_error (command, "unexpected argument '%s' (only IN and OUT are taken; "
                                 "--output-dir DIR takes several inputs)", c->inputs[2]);
  c->in = c->inputs[0];
  c->out = c->inputs[1];
  c->n_inputs = 1;
  /* The palette would replace the image it names (IN), or be replaced by
   * it (OUT): both lose a file the user asked for. */
  if (c->palette_out && same_file (c->palette_out, c->in))
    return usage_error (command, "--palette-out '%s' is the input image IN; give the palette a "
                                 "file of its own (.gpl)", c->palette_out);
  if (c->palette_out && same_file (c->palette_out, c->out))
    return usage_error (command, "--palette-out '%s' is the output image OUT; give the palette a "
                                 "file of its own (.gpl)", c->palette_out);
  return check_combinations (c);
}

/* ---- images (image_io.c) and palettes --------------------------------------- */

/* Reports an image_io error (which names the file) and frees it. */
static int
io_error (char *message)
{
  int status = runtime_error ("%s", message);
  g_free (message);
  return status;
}

/* Megapixels of an image file from its header, for the backend rule; 0 when
 * it cannot tell (a format image_io reads through GEGL, a damaged file: the
 * file's own load reports that). */
static double
probe_megapixels (const char *path)
{
  double pixels = 0;
  return cfx_image_probe (path, &pixels) ? 0 : pixels / 1e6;
}

/* GIMP palette format: header, then "R G B<TAB>name" per colour. */
static int
save_palette (const cudafx_palette *palette, const char *path, cfx_output *o)
{
  FILE *f = cfx_output_file (o);
  gchar *name = g_path_get_basename (path);
  char *dot = strrchr (name, '.');

  if (dot && dot != name)
    *dot = '\0';
  fprintf (f, "GIMP Palette\nName: %s\nColumns: %d\n#\n", name,
           palette->colors < 16 ? palette->colors : 16);
  for (int i = 0; i < palette->colors; i++)
    {
      int rgb[3];
      for (int k = 0; k < 3; k++)
        {
          double v = palette->entries[i][palette->channels == 1 ? 0 : k];
          rgb[k] = v <= 0 ? 0 : v >= 255 ? 255 : (int) lround (v);
        }
      fprintf (f, "%3d %3d %3d\t#%02x%02x%02x\n", rgb[0], rgb[1], rgb[2], rgb[0], rgb[1], rgb[2]);
    }
  g_free (name);
  return ferror (f) ? runtime_error ("cannot write '%s': %s", path, strerror (errno)) : 0;
}

/* ---- running a filter --------------------------------------------------------- */

/* s as a JSON string. JSON is UTF-8, file names are bytes: a byte that
 * is not part of valid UTF-8 (a name from another encoding) becomes
 * U+FFFD, so that the line stays valid JSON. */
static void
print_json_string (const char *s)
{
  if (!s)
    {
      fputs ("null", stdout);
      return;
    }
  putchar ('"');
  while (*s)
    {
      unsigned char ch = (unsigned char) *s;
      if (ch >= 0x80)
        {
          const gchar *end;
          if (g_utf8_validate (s, -1, &end))
            end = s + strlen (s);
          if (end == s)
            {
              fputs ("\\ufffd", stdout);
              s++;
            }
          else
            {
              /* The valid run up to the next ASCII byte. */
              const char *p = s;
              while (p < end && (unsigned char) *p >= 0x80)
                p++;
              fwrite (s, 1, (size_t) (p - s), stdout);
              s = p;
            }
          continue;
        }
      if (ch == '"' || ch == '\\')
        printf ("\\%c", ch);
      else if (ch < 0x20)
        printf ("\\u%04x", ch);
      else
        putchar (ch);
      s++;
    }
  putchar ('"');
}

/* One input file on its way through the pipeline. */
typedef struct {
  const char        *in;
  char              *out;
  cfx_picture        pic;
  cudafx_image       dst;
  cfx_output        *out_file, *palette_file; /* NULL: not open */
  cudafx_run_result *result;
  char               why[256]; /* why the engine ran on its backend */
  char               error[512];
  double             ms;       /* engine time */
  /* CUDAFX_BATCH_TIMELINE: each stage's start and end (cli_now_ms),
   * the ms the decode spent taking image memory from the pool and the ms
   * the compute spent pinning it. */
  double             decode[2], compute[2], encode[2];
  double             pool_ms, pin_ms;
} cli_file;

typedef struct {
  const cli_command   *c;
  cudafx_filter_params params;
  cli_file            *files;
  int                  n;        /* files */
  int                  codecs_only;
  int                  devices;  /* CUDA devices the workers take in turn; 0: the default one alone */
} cli_batch;

/* One file's line of --json. A file that failed has "input", "output" and
 * "error" only. */
/* The noise model automatic nl-means or nl-bayes found (manual nl-bayes: the
 * sigma given, flat): "noise_model": {"kind": "flat"}
 * or the signal-dependent one, its variance a x + b per colour channel (x the
 * linear-light value 0..1) and the sigma it gives shadows and highlights;
 * for both, whether the noise looks correlated, its mean correlation with
 * the 4 nearest neighbours, with all 8 (rows dy = -1, 0, 1 of dx = -1, 0, 1)
 * and between the colour channels. */
static void
print_noise_model (double sigma, const cudafx_noise_model *m, double stabilised_sigma)
{
  if (!m->signal_dependent)
    printf (", \"noise_model\": {\"kind\": \"flat\", \"sigma\": %.6g", sigma);
  else
    {
      printf (", \"noise_model\": {\"kind\": \"signal-dependent\", \"a\": [");
      for (int c = 0; c < m->channels; c++)
        printf ("%s%.6g", c ? ", " : "", m->a[c]);
      printf ("], \"b\": [");
      for (int c = 0; c < m->channels; c++)
        printf ("%s%.6g", c ? ", " : "", m->b[c]);
      printf ("], \"sigma_shadows\": %.6g, \"sigma_highlights\": %.6g, \"stabilised_sigma\": %.6g",
              m->sigma_dark, m->sigma_light, stabilised_sigma);
    }
  printf (", \"correlated\": %s, \"correlation\": %.4f, \"spatial_correlation\": [",
          m->correlated ? "true" : "false", m->correlation);
  for (int y = 0; y < 3; y++)
    printf ("%s[%.4f, %.4f, %.4f]", y ? ", " : "", m->spatial_corr[y][0], m->spatial_corr[y][1],
            m->spatial_corr[y][2]);
  printf ("], \"channel_correlation\": %.4f}", m->channel_corr);
}

/* nl-bayes' steps: "patch_size": [step 1, step 2], and so on. */
static void
print_nlbayes (const cli_command *c, const cudafx_nlbayes_info *info)
{
  printf (", \"auto\": %s, \"sigma\": %.6g, \"flat_area\": %s, \"patch_size\": [%d, %d], "
          "\"group_size\": [%d, %d], \"search_size\": [%d, %d]",
          arg_value (c, "auto") ? "true" : "false", info->sigma, info->flat_area ? "true" : "false",
          info->patch_size[0], info->patch_size[1], info->group_size[0], info->group_size[1],
          info->search_size[0], info->search_size[1]);
}

static void
print_json (const cli_command *c, const cli_file *f)
{
  const cudafx_run_result *r = f->result;
  printf ("{\"input\": ");
  print_json_string (f->in);
  printf (", \"output\": ");
  print_json_string (f->out);
  if (f->error[0])
    {
      printf (", \"error\": ");
      print_json_string (f->error);
      printf ("}\n");
      return;
    }
  printf (", \"filter\": ");
  print_json_string (c->filter->name);
  printf (", \"backend\": \"%s\", \"backend_reason\": ",
          r->report.backend_used == CUDAFX_BACKEND_CUDA ? "cuda" : "cpu");
  print_json_string (f->why);
  printf (", \"device\": ");
  print_json_string (r->report.device);
  printf (", \"threads\": %d, \"width\": %d, \"height\": %d, \"ms\": %.3f, \"kernel_ms\": %.3f, "
          "\"transfer_ms\": %.3f", r->report.threads_used, f->pic.image.width, f->pic.image.height, f->ms,
          r->report.kernel_ms, r->report.transfer_ms);
  if (r->report.fallback[0] && arg_value (c, "backend") == CUDAFX_BACKEND_AUTO)
    {
      printf (", \"fallback\": ");
      print_json_string (r->report.fallback);
    }
  if (c->filter_index == CUDAFX_FILTER_NLMEANS)
    printf (", \"auto\": %s, \"sigma\": %.6g, \"h\": %.6g, \"patch_radius\": %d, \"search_radius\": %d"
            ", \"patch_sigma\": %.6g, \"centre_weight\": \"%s\"",
            arg_value (c, "auto") ? "true" : "false", r->nlmeans.sigma, r->nlmeans.h,
            r->nlmeans.patch_radius, r->nlmeans.search_radius, r->nlmeans.patch_sigma,
            r->nlmeans.centre_max ? "max" : "1");
  if (c->filter_index == CUDAFX_FILTER_NLMEANS)
    print_noise_model (r->nlmeans.sigma, &r->nlmeans.noise, r->nlmeans.stabilised_sigma);
  if (c->filter_index == CUDAFX_FILTER_NLBAYES)
    {
      print_nlbayes (c, &r->nlbayes);
      print_noise_model (r->nlbayes.sigma, &r->nlbayes.noise, r->nlbayes.stabilised_sigma);
    }
  if (c->filter_index == CUDAFX_FILTER_QUANTIZE)
    {
      const cudafx_palette *p = &r->palette;
      printf (", \"colors\": %d, \"iterations\": %d, \"palette\": [", p->colors, p->iterations);
      for (int i = 0; i < p->colors; i++)
        {
          const double *e = p->entries[i];
          int grey = p->channels == 1;
          printf ("%s[%.6g, %.6g, %.6g]", i ? ", " : "", e[0], e[grey ? 0 : 1], e[grey ? 0 : 2]);
        }
      putchar (']');
    }
  printf ("}\n");
  fflush (stdout); /* a line per file as it finishes, for whoever reads the pipe */
}

/* ---- one file: load, filter, save ------------------------------------------- *
 * The three stages of one file, which the pipeline (batch.c) overlaps across
 * files: load and save on codec threads, the engine on a worker. A failing
 * stage has reported its error (runtime_error) and the file's later stages
 * are skipped; file_finish releases what the file holds. */

/* The stage's status; a failure's message kept for --json. */
static int
file_failed (cli_file *f, int status)
{
  if (status)
    snprintf (f->error, sizeof f->error, "%s", last_error);
  return status;
}

static int
load_file (cli_batch *b, cli_file *f)
{
  char *error = NULL;

  if (cfx_image_load (f->in, b->c->max_megapixels * 1e6, &f->pic, &error))
    return io_error (error);
  /* Claim the output files before computing, so a bad directory fails fast. */
  if (!(f->out_file = cfx_output_open (f->out, &error)) ||
      (b->c->palette_out && !(f->palette_file = cfx_output_open (b->c->palette_out, &error))))
    return io_error (error);
  f->dst = f->pic.image;
  f->dst.data = NULL;
  if (cfx_image_alloc (&f->dst, f->pic.image.width, f->pic.image.height))
    return runtime_error ("%s: out of memory for a %dx%d image", b->c->filter->name,
                          f->pic.image.width, f->pic.image.height);
  /* Its pages mapped here, on a codec thread: the first write to each page
   * faults, which would otherwise happen while the engine holds a device
   * (and pinning a batch's block, pages there, is quick: image_pool.c). */
  memset (f->dst.data, 0, f->dst.stride * f->dst.height);
  return 0;
}

static int
filter_file (cli_batch *b, cli_file *f, int worker)
{
  cudafx_options options;

  cudafx_options_init (&options);
  options.threads = b->c->threads;
  /* Worker w: device w % devices, its lane w / devices (the engine's lanes
   * of one device run at once). */
  options.device = b->devices ? worker % b->devices + 1 : 0;
  options.lane = b->devices ? worker / b->devices : worker;
  if (b->codecs_only)
    {
      /* bench-e2e's baseline: the same files through the same codecs and
       * threads, the input's pixels written back unfiltered. */
      memcpy (f->dst.data, f->pic.image.data, f->pic.image.stride * f->pic.image.height);
      snprintf (f->why, sizeof f->why, "CUDAFX_BENCH_CODECS_ONLY: no filter");
      snprintf (f->result->report.device, sizeof f->result->report.device, "none");
      return 0;
    }
  double start = cli_now_ms ();
  cudafx_status s = cli_run_engine (b->c->filter_index, &b->params, &f->pic.image, &f->dst, &options,
                                    f->result, f->why, sizeof f->why);
  f->ms = cli_now_ms () - start;
  if (s != CUDAFX_OK)
    {
      const char *message = cudafx_error_message ();
      return runtime_error ("%s: %s", f->in, message[0] ? message : cudafx_status_string (s));
    }
  return 0;
}

static int
save_file (cli_batch *b, cli_file *f)
{
  char *error = NULL;
  int status;

  cfx_image_free (f->pic.image.data); /* save the result in the input's formats */
  f->pic.image.data = f->dst.data;
  f->dst.data = NULL;
  if (cfx_output_save_image (f->out_file, &f->pic, b->c->strip, &error))
    return io_error (error);
  if (b->c->palette_out
      && (status = save_palette (&f->result->palette, b->c->palette_out, f->palette_file)))
    return status;
  /* Committing frees an output whatever happens. */
  cfx_output *palette = f->palette_file, *out = f->out_file;
  f->palette_file = f->out_file = NULL;
  if (palette && cfx_output_commit (palette, &error))
    {
      cfx_output_discard (out);
      return io_error (error);
    }
  if (cfx_output_commit (out, &error))
    return io_error (error);
  return 0;
}

static int
file_load (void *ctx, int index)
{
  cli_batch *b = ctx;
  cli_file *f = &b->files[index];
  double pool_ms = cli_image_pool_thread_ms ();
  f->decode[0] = cli_now_ms ();
  int s = file_failed (f, load_file (b, f));
  f->decode[1] = cli_now_ms ();
  f->pool_ms = cli_image_pool_thread_ms () - pool_ms;
  return s;
}

static int
file_filter (void *ctx, int index, int worker)
{
  cli_batch *b = ctx;
  cli_file *f = &b->files[index];
  double pool_ms = cli_image_pool_thread_ms ();
  f->compute[0] = cli_now_ms ();
  int s = file_failed (f, filter_file (b, f, worker));
  f->compute[1] = cli_now_ms ();
  f->pin_ms = cli_image_pool_thread_ms () - pool_ms;
  return s;
}

static int
file_save (void *ctx, int index)
{
  cli_batch *b = ctx;
  cli_file *f = &b->files[index];
  f->encode[0] = cli_now_ms ();
  int s = file_failed (f, save_file (b, f));
  f->encode[1] = cli_now_ms ();
  return s;
}

/* The file's line of CUDAFX_BATCH_TIMELINE: its stages' [start, end] ms
 * ([-1, -1]: the stage did not run) and the engine's own times. */
static void
timeline_file (int index, const cli_file *f, int status)
{
  const cudafx_report *r = &f->result->report;
  cli_timeline_line ("\"file\": %d, \"status\": %d, \"decode\": [%.3f, %.3f], \"pool_ms\": %.3f, "
                     "\"compute\": [%.3f, %.3f], \"pin_ms\": %.3f, \"engine_ms\": %.3f, \"kernel_ms\": %.3f, "
                     "\"transfer_ms\": %.3f, \"encode\": [%.3f, %.3f], \"finish\": %.3f",
                     index, status, cli_timeline_ms (f->decode[0]), cli_timeline_ms (f->decode[1]), f->pool_ms,
                     cli_timeline_ms (f->compute[0]), cli_timeline_ms (f->compute[1]), f->pin_ms, f->ms, r->kernel_ms,
                     r->transfer_ms, cli_timeline_ms (f->encode[0]), cli_timeline_ms (f->encode[1]),
                     cli_timeline_ms (cli_now_ms ()));
}

/* The batch's own lines of CUDAFX_BATCH_TIMELINE: CUDA's start, the image
 * pool's cost, and when the pipeline and the clean-up after it ended. */
static void
timeline_batch (double pipeline_end)
{
  cli_cuda_times t;
  cli_image_pool_stats p;
  cli_cuda_get_times (&t);
  cli_image_pool_get_stats (&p);
  cli_timeline_line ("\"event\": \"cuda\", \"start\": %.3f, \"counted\": %.3f, \"ready\": %.3f, "
                     "\"all_ready\": %.3f", cli_timeline_ms (t.start), cli_timeline_ms (t.counted),
                     cli_timeline_ms (t.ready), cli_timeline_ms (t.all_ready));
  cli_timeline_line ("\"event\": \"pool\", \"pinned\": %d, \"pin_ms\": %.3f, \"plain\": %d, "
                     "\"plain_ms\": %.3f, \"freed\": %d, \"free_ms\": %.3f",
                     p.pinned, p.pin_ms, p.plain, p.plain_ms, p.freed, p.free_ms);
  cli_timeline_line ("\"event\": \"batch\", \"pipeline_end\": %.3f, \"cleanup_end\": %.3f",
                     cli_timeline_ms (pipeline_end), cli_timeline_ms (cli_now_ms ()));
}

static void
file_finish (void *ctx, int index, int status)
{
  cli_batch *b = ctx;
  cli_file *f = &b->files[index];

  /* A failed file has its line too, in a batch or alone. */
  if (b->c->json)
    print_json (b->c, f);
  timeline_file (index, f, status);
  cfx_output_discard (f->palette_file);
  cfx_output_discard (f->out_file);
  f->palette_file = f->out_file = NULL;
  cfx_image_free (f->dst.data);
  f->dst.data = NULL;
  cfx_picture_clear (&f->pic);
}

/* ---- the run: every file through the pipeline -------------------------------- */

/* --output-dir's files: DIR/NAME for each input's NAME, two inputs with one
 * name refused before anything is read. */
static int
plan_outputs (const cli_command *c, cli_file *files)
{
  struct stat st;
  if (stat (c->output_dir, &st))
    return runtime_error ("cannot write to '%s': %s", c->output_dir, strerror (errno));
  if (!S_ISDIR (st.st_mode))
    return runtime_error ("cannot write to '%s': %s", c->output_dir, strerror (ENOTDIR));
  GHashTable *seen = g_hash_table_new (g_str_hash, g_str_equal);
  int status = 0;
  for (int i = 0; i < c->n_inputs && !status; i++)
    {
      gchar *name = g_path_get_basename (files[i].in);
      files[i].out = g_build_filename (c->output_dir, name, NULL);
      g_free (name);
      const cli_file *other = g_hash_table_lookup (seen, files[i].out);
      if (other)
        status = usage_error (c->filter->name, "'%s' and '%s' would both be written to '%s'",
                              other->in, files[i].in, files[i].out);
      g_hash_table_insert (seen, files[i].out, &files[i]);
    }
  g_hash_table_destroy (seen);
  return status;
}

/* A batch on CUDA: the codec threads, as many as the cores, keep every core
 * busy, and a worker woken by the GPU's end of a step may wait for a core's
 * time slice before it gives the GPU its next step; with the codecs at a
 * lower priority it runs first (what that gains: docs/BENCHMARKS.md,
 * "Batch pipeline"). CUDAFX_BENCH_CODEC_NICE sets the levels, for that
 * comparison. */
static int
codec_nice (void)
{
  const char *env = getenv ("CUDAFX_BENCH_CODEC_NICE");
  if (env)
    return atoi (env);
  return cli_cuda_devices () > 0 ? 5 : 0;
}

/* The pipeline's engine callback, answered while the first files decode:
 * several files on CUDA get a worker per lane of each device, so that two
 * files are on a device at once and one's copies and host work overlap the
 * other's kernels (a lone worker left the GPU idle for those:
 * docs/BENCHMARKS.md, "Batch pipeline"); --workers may ask
 * for other numbers, or for workers on the CPU. One file needs one worker.
 * Counting the devices waits for CUDA's driver to start. */
static int
batch_engine (void *ctx, int *nice)
{
  cli_batch *b = ctx;
  int workers = b->c->workers;
  if (b->n > 1 && !b->codecs_only)
    b->devices = cli_cuda_devices ();
  if (!workers)
    workers = b->n > 1 && b->devices > 0 ? b->devices * CUDAFX_CUDA_LANES : 1;
  if (workers == 1 || b->devices == 1)
    b->devices = 0; /* the default device, which CUDAFX_DEVICE may name */
  *nice = codec_nice ();
  return workers;
}

static int
run_filter (const cli_command *c)
{
  cli_batch b = { .c = c, .n = c->n_inputs };
  int n = c->n_inputs, status = 0;

  cudafx_filter_params_from_values (c->filter_index, c->values, c->kernel_size ? c->kernel : NULL,
                                    c->kernel_size, &b.params);
  if (c->filter_index == CUDAFX_FILTER_QUANTIZE && arg_given (c, "palette"))
    b.params.quantize.palette = &c->palette;
  double pipeline_end = 0;
  const char *codecs_only = getenv ("CUDAFX_BENCH_CODECS_ONLY");
  b.codecs_only = codecs_only && strcmp (codecs_only, "0");
  /* CUDA starts now, while the first file decodes, if the job is worth it:
   * its size guessed from the first file that tells its own. */
  double megapixels = 0;
  for (int i = 0; i < n && megapixels == 0 && i < 4; i++)
    megapixels = probe_megapixels (c->inputs[i]);
  long cores = sysconf (_SC_NPROCESSORS_ONLN);
  if (!b.codecs_only)
    cli_cuda_start (c->filter_index, &b.params, megapixels * n, n,
                    c->threads ? c->threads : cores > 0 ? (int) cores : 1);

  b.files = g_new0 (cli_file, n);
  for (int i = 0; i < n; i++)
    {
      b.files[i].in = c->inputs[i];
      b.files[i].result = g_new0 (cudafx_run_result, 1);
    }
  if (c->output_dir)
    status = plan_outputs (c, b.files);
  else
    b.files[0].out = g_strdup (c->out);
  /* One file: an output nothing can write is a usage error; in a batch the
   * outputs keep their inputs' formats, and one that fails fails alone. */
  char *error = NULL;
  if (!status && !c->output_dir && !cfx_image_can_save (c->out, &error))
    {
      status = usage_error (c->filter->name, "%s", error);
      g_free (error);
    }

  /* Refused before any file was read: each file's line says why. */
  if (status && c->json)
    for (int i = 0; i < n; i++)
      {
        snprintf (b.files[i].error, sizeof b.files[i].error, "%s",
                  status == EXIT_USAGE ? usage_message : last_error);
        print_json (c, &b.files[i]);
      }

  if (!status)
    {
      /* A batch keeps its image memory for the next files (pinned when a
       * file first takes it to a device); codecs-only runs too, the
       * baseline it is measured by. */
      if (n > 1)
        cfx_image_memory (cli_image_pool_take, cli_image_pool_give);
      /* The codec threads begin decoding now; the workers, once
       * batch_engine knows how many (CUDA's devices counted). */
      cli_stages stages = { file_load, file_filter, file_save, file_finish, batch_engine, &b };
      cli_pipeline_config config = {
        .codec_threads = c->threads ? c->threads : cores > 0 ? (int) cores : 1,
        .progress = c->output_dir && n > 1 && isatty (STDERR_FILENO),
      };
      int failed = cli_pipeline_run (&stages, n, &config);
      pipeline_end = cli_now_ms ();
      if (failed < 0)
        status = runtime_error ("cannot start the threads that read, filter and write the images");
      else if (failed)
        status = EXIT_RUNTIME;
    }

  for (int i = 0; i < n; i++)
    {
      g_free (b.files[i].out);
      g_free (b.files[i].result);
    }
  g_free (b.files);
  cfx_image_memory (NULL, NULL);
  cli_image_pool_clear ();
  cfx_image_io_shutdown ();
  timeline_batch (pipeline_end);
  return status;
}

/* ---- info ---------------------------------------------------------------------- */

static int
run_info (int argc, char **argv)
{
  int json = 0;
  char backends[512];

  for (int i = 0; i < argc; i++)
    {
      if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h"))
        {
          printf ("%s\n\n%s\n", _("Usage: cudafx info [--json]"),
                  _("Shows the version, the backends and the CUDA device the filters would use."));
          return 0;
        }
      if (strcmp (argv[i], "--json"))
        return usage_error ("info", "unknown argument '%s'", argv[i]);
      json = 1;
    }
  cudafx_backend_describe (backends, sizeof backends);
  const char *device = !strncmp (backends, "CUDA: ", 6) ? backends + 6 : NULL;
  int devices = device ? cudafx_cuda_devices () : 0;
  if (json)
    {
      printf ("{\"version\": \"%s\", \"backends\": ", CUDAFX_VERSION);
      print_json_string (backends);
      printf (", \"cuda_devices\": [");
      if (device)
        print_json_string (device);
      printf ("], \"cuda_device_count\": %d}\n", devices);
      return 0;
    }
  printf ("cudafx %s\n", CUDAFX_VERSION);
  printf (_("Backends: %s"), backends);
  putchar ('\n');
  printf (_("CUDA devices: %s"), device ? device : _("none"));
  if (devices > 1)
    printf (_(" (the default of %d; batches run a worker on each)"), devices);
  putchar ('\n');
  printf ("%s", _("Filters:"));
  for (int i = 0; i < CUDAFX_N_FILTERS; i++)
    printf (" %s", cudafx_filters[i].name);
  putchar ('\n');
  return 0;
}

/* Messages in the user's language from locale/ beside the executable; numbers
 * keep the C locale, so "--sigma 1.5" parses the same everywhere. */
static void
init_translations (const char *argv0)
{
  char *exe = g_file_read_link ("/proc/self/exe", NULL);
  char *dir = g_path_get_dirname (exe ? exe : argv0);
  /* Beside the executable in a build tree; PREFIX/share/locale once installed. */
  char *locale_dir = g_build_filename (dir, "locale", NULL);
  if (!g_file_test (locale_dir, G_FILE_TEST_IS_DIR))
    {
      g_free (locale_dir);
      locale_dir = g_build_filename (dir, "..", "share", "locale", NULL);
    }
  setlocale (LC_ALL, "");
  setlocale (LC_NUMERIC, "C");
  bindtextdomain (GETTEXT_PACKAGE, locale_dir);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
  g_free (locale_dir);
  g_free (dir);
  g_free (exe);
}

int
main (int argc, char **argv)
{
  cli_command command;

  /* First, before any thread: an interrupted run leaves no temporary file. */
  cfx_output_guard_signals ();
  cli_timeline_init ();
  init_translations (argv[0]);
  if (argc < 2)
    {
      fprintf (stderr, "%s\n%s\n",
               _("Usage: cudafx COMMAND [OPTIONS] IN OUT (commands: median, nl-means, quantize, "
                 "convolve, nl-bayes, info)"),
               _("Try 'cudafx --help'."));
      return EXIT_USAGE;
    }
  if (!strcmp (argv[1], "--help") || !strcmp (argv[1], "-h") || !strcmp (argv[1], "help"))
    {
      print_main_help ();
      return 0;
    }
  if (!strcmp (argv[1], "--version"))
    {
      printf ("cudafx %s\n", CUDAFX_VERSION);
      return 0;
    }
  if (!strcmp (argv[1], "info"))
    return run_info (argc - 2, argv + 2);

  memset (&command, 0, sizeof command);
  for (int i = 0; i < CUDAFX_N_FILTERS; i++)
    if (!strcmp (argv[1], cudafx_filters[i].name))
      {
        command.filter = &cudafx_filters[i];
        command.filter_index = i;
      }
  if (!command.filter)
    return usage_error (NULL,
                        "unknown command '%s' (median, nl-means, quantize, convolve, nl-bayes, info)",
                        argv[1]);

  int status = parse_command (&command, argc - 2, argv + 2);
  /* A command line refused before it was understood: --json still gets
   * its one object, the error. */
  if (status == EXIT_USAGE)
    for (int i = 2; i < argc && strcmp (argv[i], "--"); i++)
      if (!strcmp (argv[i], "--json"))
        {
          printf ("{\"error\": ");
          print_json_string (usage_message);
          printf (", \"status\": %d}\n", EXIT_USAGE);
          break;
        }
  if (status == 0)
    status = run_filter (&command);
  g_free (command.inputs);
  status = status < 0 ? 0 : status;
  cli_timeline_close ();
  if (cli_cuda_stop ())
    {
      /* CUDA is still starting (the files needed the CPU only): end here
       * rather than wait for it and tear it down again. */
      fflush (stdout);
      fflush (stderr);
      _exit (status);
    }
  return status;
}
