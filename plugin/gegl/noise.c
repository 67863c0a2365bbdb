/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The noise σ of automatic nl-means and nl-bayes (operation.h): estimated
 * once on the whole input, cached until that buffer changes or goes. */
#include "operation.h"

static void
noise_source_gone (gpointer data, GObject *where_it_was)
{
  CudafxOp *self = data;

  g_mutex_lock (&self->lock);
  self->noise_source = NULL;
  self->shown_level = G_MAXINT;
  g_mutex_unlock (&self->lock);
}

/* Called with the lock held. */
void
op_forget_noise (CudafxOp *self)
{
  if (self->noise_source)
    {
      g_signal_handler_disconnect (self->noise_source, self->noise_changed);
      g_object_weak_unref (G_OBJECT (self->noise_source), noise_source_gone, self);
      self->noise_source = NULL;
    }
}

static void
noise_source_changed (GeglBuffer *buffer, const GeglRectangle *rect, CudafxOp *self)
{
  g_mutex_lock (&self->lock);
  op_forget_noise (self);
  self->shown_level = G_MAXINT;
  g_mutex_unlock (&self->lock);
}

/* The noise σ and model of the whole input at level (what a whole-image run
 * on that level's pixels estimates; extent is in its coordinates), from the
 * cache when input, level and extent are those it was found on. memory:
 * room for extent's pixels (the region's scratch, whose pages the first
 * region then reuses), or NULL to take fresh memory. */
gboolean
op_noise_sigma (CudafxOp *self, GeglBuffer *input, const GeglRectangle *extent, int level,
                guint8 *memory, double *sigma, cudafx_noise_model *model, GError **error)
{
  gboolean ok = TRUE, announce = FALSE;

  g_mutex_lock (&self->lock);
  if (self->noise_source != input || self->noise_level != level
      || !gegl_rectangle_equal (&self->noise_extent, extent))
    {
      cudafx_image        image;
      cudafx_options      options;
      cudafx_nlmeans_info info;
      cudafx_status       status;

      op_forget_noise (self);
      if (memory)
        cudafx_region_read_into (input, extent, level, self->format, memory, &image);
      else
        ok = cudafx_region_read_as (input, extent, level, self->format, &image, error);
      if (ok)
        {
          cudafx_options_init (&options);
          status = cudafx_nlmeans_estimate (&image, &options, &info);
          if (!memory)
            g_free (image.data);
          if (status != CUDAFX_OK)
            {
              g_set_error_literal (error, CUDAFX_PROC_ERROR, status, cudafx_error_message ());
              ok = FALSE;
            }
        }
      if (ok)
        {
          self->noise_source = input;
          self->noise_extent = *extent;
          self->noise_level = level;
          self->noise_sigma = info.sigma;
          self->noise_model = info.noise;
          g_object_weak_ref (G_OBJECT (input), noise_source_gone, self);
          self->noise_changed = gegl_buffer_signal_connect (input, "changed",
                                                            G_CALLBACK (noise_source_changed),
                                                            self);
          if (input != self->shown_source || level <= self->shown_level)
            {
              /* The first always: GIMP's dialog may start with another σ. */
              announce = !self->shown_source || info.sigma != self->sigma_shown;
              self->sigma_shown = info.sigma;
              self->shown_source = input;
              self->shown_level = level;
            }
        }
    }
  *sigma = self->noise_sigma;
  *model = self->noise_model;
  g_mutex_unlock (&self->lock);
  if (announce)
    op_queue_announce (self);
  return ok;
}

/* An engine message without the filter's name in front ("convolve: ..."),
 * which the operation's own "cudafx:convolve: " already says. */
const gchar *
op_without_name (int filter, const gchar *message)
{
  gsize n = strlen (cudafx_filters[filter].name);

  if (!strncmp (message, cudafx_filters[filter].name, n) && !strncmp (message + n, ": ", 2))
    return message + n + 2;
  return message;
}
