/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A region filtered (operation.h): the rows read as the engine asks for
 * them and written as it finishes them. */
#include "operation.h"

/* The region's rows in and out: the input's rows read as the engine asks for
 * them (its rows_needed), so that with the GPU each stripe's rows are read
 * while the stripes above are computed, and the engine's finished rows
 * written into the output as they come (its rows_ready), each stripe while
 * the stripes below it are still computed and copied back; the operation then
 * takes little more than its reading and writing, or its GPU work
 * (docs/BENCHMARKS.md, "GEGL operations: rows as the GPU asks for them and
 * finishes them"). Rows move whole tile rows at a time, the rest with the
 * next ask or report: a tile moved in two parts costs its copy twice.
 * Finished rows are set an eighth of the region at a time at the least: each
 * set is a round of GEGL's threads, and one per stripe (16 on a large region)
 * cost the whole call more than the later start of the first
 * (docs/BENCHMARKS.md, "GEGL operations: rows as the GPU asks for them and
 * finishes them"). Where the engine needs all of the input first (the CPU,
 * the wrap border, quantize but of a large u8 region without alpha, which it
 * asks for in a few pieces), it asks for all rows at once. */
typedef struct
{
  GeglBuffer          *input, *output;
  const GeglRectangle *out;     /* what is written, at level */
  const GeglRectangle *read;    /* what the engine's rows are, at level */
  int                  level;
  const Babl          *format;
  const cudafx_image  *src, *dst;
  int                  in_tile_height, tile_height;
  int                  in_rows; /* read's rows above this one (from read's top) are in src */
  int                  written; /* out's rows above this row are in output */
  int                  min_set; /* rows a set takes at the least, but the last one */
  gboolean             threaded;
  region_timeline     *timeline;
} region_rows;

/* A tile row's start (tiles from row 0) at or below row y. */
static int
tile_row_up (int y, int tile_height)
{
  return y + (tile_height - (y % tile_height + tile_height) % tile_height) % tile_height;
}

static int
read_rows (int y, void *data)
{
  region_rows  *r = data;
  int           end = MIN (tile_row_up (r->read->y + y, r->in_tile_height), r->read->y + r->read->height);
  GeglRectangle rows = { r->read->x, r->read->y + r->in_rows, r->read->width, end - r->read->y - r->in_rows };

  if (rows.height <= 0)
    return 0;
  op_move_region (r->input, &rows, r->level, r->format, (guint8 *) r->src->data + (gsize) r->in_rows * r->src->stride,
                  r->src->stride, FALSE, r->threaded);
  op_timeline_mark (r->timeline, "read");
  r->in_rows = end - r->read->y;
  return 0;
}

static void
write_rows (int y0, int y1, void *data)
{
  region_rows  *w = data;
  int           bpp = babl_format_get_bytes_per_pixel (w->format);
  int           end = w->read->y + y1, out_end = w->out->y + w->out->height;
  GeglRectangle rows;

  if (y0 == 0)
    w->written = w->out->y; /* the first report, or the engine's start again on the CPU */
  if (end < out_end)
    end -= (end % w->tile_height + w->tile_height) % w->tile_height; /* a tile row's start (tiles from row 0) */
  else
    end = out_end;
  op_timeline_mark (w->timeline, "rows");
  if (end <= w->written || (end < out_end && end - w->written < w->min_set))
    return;
  rows = (GeglRectangle) { w->out->x, w->written, w->out->width, end - w->written };
  op_move_region (w->output, &rows, w->level, w->format,
                  (guint8 *) w->dst->data + (gsize) (rows.y - w->read->y) * w->dst->stride
                                          + (gsize) (rows.x - w->read->x) * bpp,
                  w->dst->stride, TRUE, w->threaded);
  op_timeline_mark (w->timeline, "set");
  w->written = end;
}

/* Filters area of the input (all of it for whole outputs) with its halo of
 * real neighbours, cut only at the input's edge, and writes roi; all of it
 * at level (rectangles in that level's coordinates). *identity: the
 * settings leave nothing to do at that level (nothing written). */
static gboolean
filter_region (CudafxOp *self, GeglBuffer *input, GeglBuffer *output, const GeglRectangle *roi,
               const GeglRectangle *in_box, int level, gboolean *identity, GError **error)
{
  int              filter = FILTER_OF (self);
  cudafx_proc_args args = self->args;
  GeglRectangle    area, read, grown, out;
  cudafx_image     src = { 0 }, dst = { 0 };
  cudafx_options   options;
  region_timeline  tl;
  region_rows      rows = { .input = input, .output = output, .out = &out, .read = &read, .level = level,
                            .format = self->format, .src = &src, .dst = &dst, .timeline = &tl };
  int              halo = GEGL_OPERATION_AREA_FILTER (self)->left;
  int              bpp = babl_format_get_bytes_per_pixel (self->format);
  gboolean         ok = FALSE, locked, src_fresh = FALSE, dst_fresh = FALSE, threaded;
  gsize            stride, bytes, whole;

  *identity = !op_at_level_args (&args, level, halo);
  if (*identity)
    return TRUE;
  if (level > 0 && !cudafx_proc_halo (&args, &halo, error))
    return FALSE;
  area = op_whole_output (self, filter) ? *in_box : *roi;
  if (!gegl_rectangle_intersect (&area, &area, in_box) || !gegl_rectangle_intersect (&out, roi, &area))
    return TRUE;
  op_timeline_start (&tl, cudafx_filters[filter].name, &area);
  locked = g_mutex_trylock (&self->scratch_lock);
  if (!g_size_checked_mul (&whole, (gsize) in_box->width * bpp, (gsize) in_box->height))
    whole = 0;
  if (op_automatic_noise (self, filter)
      && !op_noise_sigma (self, input, in_box, level,
                          locked && whole ? op_region_memory (self, 0, TRUE, whole, whole, &src_fresh)
                                          : NULL,
                          &args.nlmeans_sigma, &args.nlmeans_noise, error))
    goto out;
  /* The whole input is there: the halo the settings and the noise found need. */
  if (op_whole_input (self, filter) && !cudafx_proc_halo (&args, &halo, error))
    goto out;
  op_timeline_mark (&tl, "sigma");
  grown = (GeglRectangle) { area.x - halo, area.y - halo, area.width + 2 * halo,
                            area.height + 2 * halo };
  gegl_rectangle_intersect (&read, &grown, in_box);
  args.origin_x = read.x - in_box->x;
  args.origin_y = read.y - in_box->y;
  if (!g_size_checked_mul (&stride, (gsize) read.width, (gsize) bpp) ||
      !g_size_checked_mul (&bytes, stride, (gsize) read.height) ||
      !(src.data = op_region_memory (self, 0, locked, bytes, whole, &src_fresh)) ||
      !(dst.data = op_region_memory (self, 1, locked, bytes, whole, &dst_fresh)))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_NO_MEMORY,
                   _("not enough memory for a %d×%d region"), read.width, read.height);
      goto out;
    }
  /* Pinned memory: the CUDA backend has started (and runs the filter unless it fails). */
  threaded = cudafx_host_pinned (src.data, bytes) && cudafx_host_pinned (dst.data, bytes);
  rows.threaded = threaded;
  op_timeline_mark (&tl, "memory");
  src.width = read.width;
  src.height = read.height;
  src.channels = babl_format_get_n_components (self->format);
  src.has_alpha = babl_format_has_alpha (self->format);
  src.type = babl_format_get_type (self->format, 0) == babl_type ("u8") ? CUDAFX_U8 : CUDAFX_F32;
  src.stride = stride;
  {
    void *d = dst.data;
    dst = src;
    dst.data = d;
  }
  cudafx_options_init (&options);
  /* A parallel region ends when its last thread does: on a busy machine of
   * few cores, a thread waiting to be scheduled held up the engine's call on
   * the small chunks GIMP's merge starts with many times longer than one
   * thread takes for them (docs/BENCHMARKS.md, "GEGL operations: moving rows"). */
  if ((gint64) read.width * read.height < 2 * MOVE_THREAD_COST)
    options.threads = 1;
  g_object_get (output, "tile-height", &rows.tile_height, NULL);
  g_object_get (input, "tile-height", &rows.in_tile_height, NULL);
  rows.tile_height = MAX (rows.tile_height, 1);
  rows.in_tile_height = MAX (rows.in_tile_height, 1);
  /* nl-means' kernels take several times longer than reading its input: the
   * engine asks for the rows stripe by stripe and the read hides behind them.
   * Quantize asks for a large region in a few pieces, each uploaded and
   * sampled while the next is read. Median's and the convolutions' kernels
   * are shorter than the read and hide nothing, while a read per stripe costs
   * more than one read of the region (docs/BENCHMARKS.md, "GEGL operations:
   * rows as the GPU asks for them and finishes them"), so they read it all
   * first. */
  if (filter == CUDAFX_FILTER_NLMEANS || filter == CUDAFX_FILTER_QUANTIZE)
    options.rows_needed = read_rows;
  else
    read_rows (read.height, &rows);
  if (locked && !threaded
      && op_pin_scratch (self, &src, &dst, bytes, (gsize) rows.in_rows * stride))
    {
      rows.threaded = TRUE;
      op_timeline_mark (&tl, "pinned");
    }
  rows.min_set = tile_row_up (read.height / 8, rows.tile_height);
  options.rows_ready = write_rows;
  options.rows_user = &rows;
  /* Not for nl-means: its kernels wait for each progress report (cancel
   * answers between them), which would slow what the timeline shows. */
  if (tl.on && filter != CUDAFX_FILTER_NLMEANS)
    {
      options.progress = op_timeline_progress;
      options.user_data = &tl;
    }
  ok = cudafx_proc_run (&args, &src, &dst, &options, NULL, error);
out:
  op_timeline_end (&tl);
  if (src_fresh)
    g_free (src.data);
  if (dst_fresh)
    g_free (dst.data);
  if (locked)
    g_mutex_unlock (&self->scratch_lock);
  return ok;
}

gboolean
op_process (GeglOperation *operation, GeglBuffer *input, GeglBuffer *output,
            const GeglRectangle *roi, gint level)
{
  CudafxOp      *self = CUDAFX_OP (operation);
  GeglRectangle *source_box = gegl_operation_source_get_bounding_box (operation, "input");
  GeglRectangle  in_box, at;
  GError        *error = NULL;
  gboolean       identity = FALSE;
  gchar         *unbounded;

  if (!source_box || gegl_rectangle_is_empty (source_box))
    return TRUE;
  in_box = op_at_level (source_box, level);
  at = op_at_level (roi, level);
  if (gegl_rectangle_is_empty (&in_box) || gegl_rectangle_is_empty (&at))
    return TRUE;
  if (self->invalid)
    {
      g_warning ("%s", self->invalid);
      op_error_output (output, roi, level);
      return TRUE;
    }
  unbounded = op_unbounded_input (self, source_box);
  if (unbounded)
    {
      g_warning ("%s", unbounded);
      g_free (unbounded);
      op_error_output (output, roi, level);
      return TRUE;
    }
  if ((op_whole_output (self, FILTER_OF (self)) || op_whole_input (self, FILTER_OF (self)))
      && op_whole_failed (self, source_box))
    {
      /* GEGL was asked for roi only: the input outside it is not there. */
      g_warning (_("cudafx:%s: not enough memory for the whole %d×%d input, which this filter "
                   "needs at once"),
                 cudafx_filters[FILTER_OF (self)].name, in_box.width, in_box.height);
      op_error_output (output, roi, level);
      return TRUE;
    }
  if (!filter_region (self, input, output, &at, &in_box, level, &identity, &error))
    {
      /* The whole output of a large input, asked for at once because it is
       * cached whole, would take as much memory to fill with the pattern
       * as what was missing: it is left empty (transparent) this once, and
       * GEGL asks for the regions it wants from now on. */
      gboolean too_large = error->code == CUDAFX_ERR_NO_MEMORY
                           && (gint64) at.width * at.height > ERROR_FILL_MAX;

      if (error->code == CUDAFX_ERR_NO_MEMORY
          && (op_whole_output (self, FILTER_OF (self)) || op_whole_input (self, FILTER_OF (self))))
        {
          g_mutex_lock (&self->lock);
          self->whole_failed = TRUE;
          self->whole_failed_box = *source_box;
          g_mutex_unlock (&self->lock);
        }
      if (too_large)
        g_warning (_("cudafx:%s: %s; the output is left empty"), cudafx_filters[FILTER_OF (self)].name,
                   op_without_name (FILTER_OF (self), error->message));
      else
        g_warning ("cudafx:%s: %s", cudafx_filters[FILTER_OF (self)].name,
                   op_without_name (FILTER_OF (self), error->message));
      g_error_free (error);
      if (!too_large)
        op_error_output (output, roi, level);
      return TRUE;
    }

  if (identity && !op_pass_through (input, output, roi, level))
    {
      g_warning (_("cudafx:%s: not enough memory for a %d×%d region"),
                 cudafx_filters[FILTER_OF (self)].name, at.width, at.height);
      op_error_output (output, roi, level);
    }
  return TRUE;
}
