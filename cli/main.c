/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the command-line host of the engine.
 *
 *   cudafx FILTER [OPTIONS] IN OUT                  (median, nl-means, quantize, convolve, nl-bayes)
 *   cudafx FILTER [OPTIONS] IN... --output-dir DIR
 *   cudafx info
 *
 * Options, their ranges, defaults and --help text come from the engine's
 * argument table (cudafx_filters in core/params.c), so the CLI, the GIMP
 * procedures and the engine's validation agree by construction. Like
 * G'MIC-qt's "none" host, the CLI only fetches pixels, runs the engine and
 * posts the result. Its files, each one job:
 *   main.c            the commands, `info`, the translations' set-up;
 *   options.c         a filter's command line (usage errors: exit 2);
 *   help.c            --help;
 *   messages.c        usage and runtime errors (runtime: exit 1);
 *   run.c             a filter's run over its files;
 *   stages.c          one file's load, filter and save;
 *   batch.c           the pipeline that overlaps those stages across files;
 *   backend_choice.c  CUDA's start and the rule --backend auto follows;
 *   json.c            --json;
 *   image_io.c        image files: the format told, the codec chosen
 *                     (io_png.c, io_jpeg.c, io_tiff.c, io_webp.c and
 *                     io_pnm.c through their libraries, io_gegl.c other
 *                     formats through GEGL; io_common.c what they share);
 *   io_output.c       OUT written to a temporary file in its directory and
 *                     renamed into place, so it is never left half-written;
 *   image_pool.c      a batch's reused image memory;
 *   timeline.c        CUDAFX_BATCH_TIMELINE.
 * Messages and --help are translated (gettext domain cudafx, catalogs in
 * locale/ beside the executable).
 */
#include "../core/cudafx.h"
#include "backend_choice.h"
#include "help.h"
#include "image_io.h"
#include "json.h"
#include "messages.h"
#include "options.h"
#include "run.h"
#include "timeline.h"

#define GETTEXT_PACKAGE "cudafx"
#include <glib.h>
#include <glib/gi18n-lib.h>

#include <locale.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
      cli_json_string (backends);
      printf (", \"cuda_devices\": [");
      if (device)
        cli_json_string (device);
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
      cli_print_main_help ();
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

  int status = cli_parse_command (&command, argc - 2, argv + 2);
  /* A command line refused before it was understood: --json still gets
   * its one object, the error. */
  if (status == EXIT_USAGE)
    for (int i = 2; i < argc && strcmp (argv[i], "--"); i++)
      if (!strcmp (argv[i], "--json"))
        {
          printf ("{\"error\": ");
          cli_json_string (cli_usage_message ());
          printf (", \"status\": %d}\n", EXIT_USAGE);
          break;
        }
  if (status == 0)
    status = cli_run_filter (&command);
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
