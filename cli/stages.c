/* SPDX-License-Identifier: GPL-3.0-or-later */
/* One file's stages (stages.h): the image read and the output files
 * claimed, the engine run on the worker's device, the result (and
 * quantize's palette) written and committed; each stage's times for
 * CUDAFX_BATCH_TIMELINE. */
#include "stages.h"
#include "backend_choice.h"
#include "batch.h"
#include "image_pool.h"
#include "json.h"
#include "messages.h"
#include "timeline.h"

#include <glib.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Reports an image_io error (which names the file) and frees it. */
static int
io_error (char *message)
{
  int status = runtime_error ("%s", message);
  g_free (message);
  return status;
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

/* The stage's status; a failure's message kept for --json. */
static int
file_failed (cli_file *f, int status)
{
  if (status)
    snprintf (f->error, sizeof f->error, "%s", cli_last_error ());
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

int
cli_file_load (void *ctx, int index)
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

int
cli_file_filter (void *ctx, int index, int worker)
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

int
cli_file_save (void *ctx, int index)
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
void
cli_file_finish (void *ctx, int index, int status)
{
  cli_batch *b = ctx;
  cli_file *f = &b->files[index];

  /* A failed file has its line too, in a batch or alone. */
  if (b->c->json)
    cli_json_file (b->c, f);
  timeline_file (index, f, status);
  cfx_output_discard (f->palette_file);
  cfx_output_discard (f->out_file);
  f->palette_file = f->out_file = NULL;
  cfx_image_free (f->dst.data);
  f->dst.data = NULL;
  cfx_picture_clear (&f->pic);
}
