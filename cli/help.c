/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's --help (help.h), word-wrapped to 79 columns and translated. */
#include "help.h"

#define GETTEXT_PACKAGE "cudafx"
#include <glib.h>
#include <glib/gi18n-lib.h>

#include <stdio.h>
#include <string.h>

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

void
cli_print_filter_help (const cudafx_filter_desc *filter, int index)
{
  printf (_("Usage: cudafx %s [OPTIONS] IN OUT"), filter->name);
  putchar ('\n');
  printf (_("   or: cudafx %s [OPTIONS] IN... --output-dir DIR"), filter->name);
  printf ("\n\n%s.\n", _(filter->blurb));
  print_wrapped (0, _(filter->help));
  putchar ('\n');
  /* What image_io does: the five formats through their own libraries, GEGL
   * for the rest. */
  print_wrapped (0, _("IN and OUT are image files: PNG, JPEG, TIFF, WebP and PNM (PPM, PGM, PAM) "
                      "through their own libraries, other formats GEGL can load and save (EXR...) "
                      "through GEGL; OUT keeps IN's bit depth where its format allows."));
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

void
cli_print_main_help (void)
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
