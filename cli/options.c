/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A filter's command line parsed and checked (options.h): numbers and
 * choices against the table's ranges, the rules between arguments the table
 * cannot say, and IN, OUT and --palette-out never naming one file twice. */
#include "options.h"
#include "help.h"
#include "messages.h"

#define GETTEXT_PACKAGE "cudafx"
#include <glib.h>
#include <glib/gi18n-lib.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Larger inputs are refused before their pixels are read unless
 * --max-megapixels says otherwise: 500 MP is beyond any camera's photo and
 * within a workstation's memory (source and result, 8-bit RGB: 3 GB). */
#define CLI_DEFAULT_MAX_MEGAPIXELS 500

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

double
cli_arg_value (const cli_command *c, const char *name)
{
  return c->values[arg_index (c, name)];
}

int
cli_arg_given (const cli_command *c, const char *name)
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
  if (c->filter_index == CUDAFX_FILTER_QUANTIZE && cli_arg_given (c, "palette"))
    {
      static const char *const computed[] = { "colors", "max-iterations", "seed" };
      for (size_t i = 0; i < sizeof computed / sizeof computed[0]; i++)
        if (cli_arg_given (c, computed[i]))
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

int
cli_parse_command (cli_command *c, int argc, char **argv)
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
        cli_print_filter_help (c->filter, c->filter_index);
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
