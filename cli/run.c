/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A filter's run (run.h): the outputs planned, CUDA started while the
 * first file decodes, the files through the pipeline, then the batch's
 * clean-up and timeline. */
#include "run.h"
#include "backend_choice.h"
#include "batch.h"
#include "image_io.h"
#include "image_pool.h"
#include "json.h"
#include "messages.h"
#include "stages.h"
#include "timeline.h"

#include <glib.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* Megapixels of an image file from its header, for the backend rule; 0 when
 * it cannot tell (a format image_io reads through GEGL, a damaged file: the
 * file's own load reports that). */
static double
probe_megapixels (const char *path)
{
  double pixels = 0;
  return cfx_image_probe (path, &pixels) ? 0 : pixels / 1e6;
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

cli_bench_settings cli_bench;

/* A batch on CUDA: the codec threads, as many as the cores, keep every core
 * busy, and a worker woken by the GPU's end of a step may wait for a core's
 * time slice before it gives the GPU its next step; with the codecs at a
 * lower priority it runs first (what that gains: docs/BENCHMARKS.md,
 * "Batch pipeline"). cudafx-bench sets other levels, for that comparison. */
static int
codec_nice (void)
{
  if (cli_bench.codec_nice_given)
    return cli_bench.codec_nice;
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

int
cli_run_filter (const cli_command *c)
{
  cli_batch b = { .c = c, .n = c->n_inputs };
  int n = c->n_inputs, status = 0;

  cudafx_filter_params_from_values (c->filter_index, c->values, c->kernel_size ? c->kernel : NULL,
                                    c->kernel_size, &b.params);
  if (c->filter_index == CUDAFX_FILTER_QUANTIZE && cli_arg_given (c, "palette"))
    b.params.quantize.palette = &c->palette;
  /* --json reports manual nl-means' noise estimate too; without it the
   * estimate would only cost time. */
  b.params.nlmeans.report_noise = c->json;
  double pipeline_end = 0;
  b.codecs_only = cli_bench.codecs_only;
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
                  status == EXIT_USAGE ? cli_usage_message () : cli_last_error ());
        cli_json_file (c, &b.files[i]);
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
      cli_stages stages = { cli_file_load, cli_file_filter, cli_file_save, cli_file_finish, batch_engine, &b };
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
