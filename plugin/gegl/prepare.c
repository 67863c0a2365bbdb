/* SPDX-License-Identifier: GPL-3.0-or-later */
/* What GEGL asks before it renders (operation.h): the format, the regions
 * required and cached, whether the whole input fits, the settings checked
 * with a one-pixel run, CUDA started. */
#include "operation.h"

/* Whether the filter has an automatic mode (nl-means, nl-bayes: their
 * "auto" argument), whose noise estimate this operation makes on the whole
 * input. */
gboolean
op_has_automatic (int filter)
{
  return cudafx_proc_arg_index (filter, "auto") >= 0;
}

gboolean
op_automatic_noise (CudafxOp *self, int filter)
{
  return op_has_automatic (filter) && self->args.values[cudafx_proc_arg_index (filter, "auto")] != 0;
}

/* Whether every region reads the whole input: for the noise estimate, and
 * for nl-bayes, whose halo at a level of detail can be more than the
 * level-0 halo GEGL prepared at that scale (its plan follows the noise,
 * not the scale). */
gboolean
op_whole_input (CudafxOp *self, int filter)
{
  return op_automatic_noise (self, filter) || filter == CUDAFX_FILTER_NLBAYES;
}

/* Whether each output pixel depends on the whole input: the whole output is
 * then computed at once, and GEGL caches all of it. */
gboolean
op_whole_output (CudafxOp *self, int filter)
{
  return filter == CUDAFX_FILTER_QUANTIZE
         || (filter == CUDAFX_FILTER_CONVOLVE
             && self->args.values[cudafx_proc_arg_index (filter, "border")]
                  == CUDAFX_BORDER_WRAP);
}

static gpointer
warm_up (gpointer data)
{
  cudafx_backend_warm_up ();
  return NULL;
}

/* The engine's start-up (for CUDA a few hundred milliseconds) on a thread
 * of its own, once per process, so that it overlaps what GEGL does before
 * the first region reaches the engine; that call waits for it to finish. */
static void
start_engine (void)
{
  static gsize started = 0;

  if (g_once_init_enter (&started))
    {
      GThread *thread = g_thread_try_new ("cudafx-warm-up", warm_up, NULL, NULL);

      if (thread)
        g_thread_unref (thread);
      g_once_init_leave (&started, 1);
    }
}

/* The largest input a filter that computes its whole output at once (or
 * automatic nl-means, which estimates the noise on all of it) takes: GIMP's
 * own largest image side, and a gigapixel. Beyond them, and for an input
 * without bounds (gegl:checkerboard, say), the output is the error
 * pattern at once, instead of a render that copies or allocates for
 * minutes, or for ever. */
#define WHOLE_MAX_SIDE   524288
#define WHOLE_MAX_PIXELS ((gint64) 1 << 30)

/* Why a whole-input filter cannot take an input of box, or NULL. Free with g_free. */
gchar *
op_unbounded_input (CudafxOp *self, const GeglRectangle *box)
{
  int filter = FILTER_OF (self);

  if (!box || !(op_whole_output (self, filter) || op_whole_input (self, filter)))
    return NULL;
  if (gegl_rectangle_is_infinite_plane (box))
    return g_strdup_printf (_("cudafx:%s: the input has no bounds (an endless source such as "
                              "gegl:checkerboard), and this filter needs all of it: crop it first"),
                            cudafx_filters[filter].name);
  if (box->width > WHOLE_MAX_SIDE || box->height > WHOLE_MAX_SIDE
      || (gint64) box->width * box->height > WHOLE_MAX_PIXELS)
    return g_strdup_printf (_("cudafx:%s: the input is %d×%d pixels; this filter computes the "
                              "whole of it at once, at most %d pixels a side and %d megapixels"),
                            cudafx_filters[filter].name, box->width, box->height, WHOLE_MAX_SIDE,
                            (int) (WHOLE_MAX_PIXELS / 1000000));
  return NULL;
}

/* Whether a filter that reads its whole input (whole_output, automatic
 * nl-means) can take all of box at once: memory for its input and output
 * regions can be had (address space, as ulimit -v limits it: taking it
 * without touching it costs nothing). Asked by get_required_for_output,
 * whose answer holds for the render (whole_failed): when it cannot, GEGL
 * is asked for the region wanted only, and process fills that with the
 * error pattern, so that neither the input nor the pattern is made larger
 * than what was wanted (filling a whole large image could need the memory
 * that was missing). */
static gboolean
whole_fits (CudafxOp *self, const GeglRectangle *box)
{
  const Babl *format = self->format ? self->format : babl_format ("R'G'B'A float");
  gsize       bytes;
  gpointer    room = NULL;

  gboolean    fits = FALSE;

  if (g_size_checked_mul (&bytes, (gsize) box->width * 2,
                          (gsize) box->height * babl_format_get_bytes_per_pixel (format)))
    {
      /* The scratch kept from an earlier render is reused: memory that
       * is already there need not be found again. A glance without the
       * lock: at worst memory is asked for that was not needed. */
      fits = self->scratch_size[0] >= bytes / 2 && self->scratch_size[1] >= bytes / 2;
      if (!fits && (room = g_try_malloc (bytes)))
        fits = TRUE;
      g_free (room);
    }
  g_mutex_lock (&self->lock);
  self->whole_failed = !fits;
  self->whole_failed_box = *box;
  g_mutex_unlock (&self->lock);
  return fits;
}

/* Whether the whole of box was found not to fit (whole_fits, or a run that
 * ran out of memory). */
gboolean
op_whole_failed (CudafxOp *self, const GeglRectangle *box)
{
  gboolean failed;

  g_mutex_lock (&self->lock);
  failed = self->whole_failed && gegl_rectangle_equal (&self->whole_failed_box, box);
  g_mutex_unlock (&self->lock);
  return failed;
}

/* Whether the kernel text is the default one (the identity), by its taps:
 * any other is a kernel given. */
static gboolean
default_kernel (const gchar *text)
{
  double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  double def[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int    size = 0, def_size = 0;
  gchar *def_text = op_default_kernel_text ();
  gboolean same;

  same = !text || !*text
         || (cudafx_kernel_parse (text, taps, &size) == CUDAFX_OK
             && cudafx_kernel_parse (def_text, def, &def_size) == CUDAFX_OK && size == def_size
             && memcmp (taps, def, sizeof taps[0] * size * size) == 0);
  g_free (def_text);
  return same;
}

/* The settings run on one pixel of format, on the CPU: the engine's own
 * checks of what depends on more than one value (a divisor too small for
 * the kernel, a colour palette on a grey image), found when the settings
 * are made rather than by each region. Remembered for the settings and
 * format last probed. NULL, or why they cannot run (free with g_free). */
static gchar *
probe_settings (CudafxOp *self, const Babl *format)
{
  int              filter = FILTER_OF (self);
  cudafx_proc_args args = self->args;
  float            in[4] = { 0.5f, 0.5f, 0.5f, 1 }, out[4];
  guint8           in8[4] = { 128, 128, 128, 255 }, out8[4];
  gboolean         u8 = babl_format_get_type (format, 0) == babl_type ("u8");
  cudafx_image     src = { 0 }, dst;
  cudafx_options   options;
  GError          *error = NULL;

  if (filter != CUDAFX_FILTER_CONVOLVE && filter != CUDAFX_FILTER_QUANTIZE)
    return NULL;
  args.values[cudafx_proc_arg_index (filter, "backend")] = CUDAFX_BACKEND_CPU;
  if (self->probed && self->probed_format == format
      && memcmp (&self->probed_args, &args, sizeof args) == 0)
    return g_strdup (self->probed_error);
  src.data = u8 ? (void *) in8 : (void *) in;
  src.width = src.height = 1;
  src.channels = babl_format_get_n_components (format);
  src.has_alpha = babl_format_has_alpha (format);
  src.type = u8 ? CUDAFX_U8 : CUDAFX_F32;
  src.stride = (gsize) babl_format_get_bytes_per_pixel (format);
  dst = src;
  dst.data = u8 ? (void *) out8 : (void *) out;
  cudafx_options_init (&options);
  options.threads = 1;
  g_free (self->probed_error);
  self->probed_error = NULL;
  if (!cudafx_proc_run (&args, &src, &dst, &options, NULL, &error))
    {
      self->probed_error = g_strdup (error->message);
      g_error_free (error);
    }
  self->probed_args = args;
  self->probed_format = format;
  self->probed = TRUE;
  return g_strdup (self->probed_error);
}

void
op_prepare (GeglOperation *operation)
{
  CudafxOp                *self = CUDAFX_OP (operation);
  GeglOperationAreaFilter *area = GEGL_OPERATION_AREA_FILTER (operation);
  const Babl              *source = gegl_operation_get_source_format (operation, "input");
  GError                  *error = NULL;
  int                      halo = 0;

  start_engine ();
  g_clear_pointer (&self->invalid, g_free);
  self->format = cudafx_region_format_of (source ? source : babl_format ("R'G'B'A float"),
                                          &error);
  if (!self->format)
    self->format = babl_format ("R'G'B'A float");
  if (!error && FILTER_OF (self) == CUDAFX_FILTER_CONVOLVE
      && self->args.values[cudafx_proc_arg_index (CUDAFX_FILTER_CONVOLVE, "preset")] != CUDAFX_PRESET_CUSTOM
      && !default_kernel (self->kernel_text))
    {
      /* As the CLI's --kernel with another --preset: the kernel would be
       * ignored without a word. */
      const cudafx_arg *preset = cudafx_arg_find (&cudafx_filters[CUDAFX_FILTER_CONVOLVE], "preset");

      g_set_error (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("a kernel is given with preset %s, which has its own: set preset to custom to "
                     "use the kernel, or the kernel back to its default to use the preset"),
                   preset->choices[(int) self->args.values[preset - cudafx_filters[CUDAFX_FILTER_CONVOLVE].args]].nick);
    }
  if (!error && FILTER_OF (self) == CUDAFX_FILTER_CONVOLVE)
    {
      double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
      int    size = 0;

      if (self->kernel_text && *self->kernel_text
          && cudafx_kernel_parse (self->kernel_text, taps, &size) != CUDAFX_OK)
        g_set_error_literal (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                             cudafx_error_message ());
      else
        cudafx_proc_set_kernel (&self->args, taps, (gsize) size * size, &error);
    }
  self->args.has_palette = FALSE;
  if (!error && FILTER_OF (self) == CUDAFX_FILTER_QUANTIZE && self->palette_path && *self->palette_path)
    {
      if (cudafx_gpl_load (self->palette_path, &self->args.palette) != CUDAFX_OK)
        g_set_error_literal (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG, cudafx_error_message ());
      else
        self->args.has_palette = TRUE;
    }
  if (!error)
    cudafx_proc_halo (&self->args, &halo, &error);
  if (!error)
    {
      gchar *why = probe_settings (self, self->format);

      if (why)
        g_set_error_literal (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG, why);
      g_free (why);
    }
  if (error)
    {
      self->invalid = g_strdup_printf ("cudafx:%s: %s", cudafx_filters[FILTER_OF (self)].name,
                                       op_without_name (FILTER_OF (self), error->message));
      g_error_free (error);
      halo = 0;
    }
  area->left = area->right = area->top = area->bottom = halo;
  gegl_operation_set_format (operation, "input", self->format);
  gegl_operation_set_format (operation, "output", self->format);
}

GeglRectangle
op_get_required_for_output (GeglOperation *operation, const gchar *input_pad,
                            const GeglRectangle *roi)
{
  CudafxOp      *self = CUDAFX_OP (operation);
  GeglRectangle *in_box = gegl_operation_source_get_bounding_box (operation, "input");

  gchar         *unbounded = op_unbounded_input (self, in_box);

  /* An input it cannot take is never asked for whole (process refuses it). */
  if (unbounded)
    {
      g_free (unbounded);
      return *roi;
    }
  if (in_box && (op_whole_output (self, FILTER_OF (self)) || op_whole_input (self, FILTER_OF (self))))
    return whole_fits (self, in_box) ? *in_box : *roi;
  return GEGL_OPERATION_CLASS (op_parent_class)->get_required_for_output (operation, input_pad, roi);
}

/* The input's extent: the filters keep the image's size (an area filter's
 * default would grow it by the halo). */
GeglRectangle
op_get_bounding_box (GeglOperation *operation)
{
  GeglRectangle *in_box = gegl_operation_source_get_bounding_box (operation, "input");

  return in_box ? *in_box : (GeglRectangle) { 0, 0, 0, 0 };
}

/* The region GEGL keeps: all of the output where it is computed whole,
 * else the region asked for. */
GeglRectangle
op_get_cached_region (GeglOperation *operation, const GeglRectangle *roi)
{
  CudafxOp      *self = CUDAFX_OP (operation);
  GeglRectangle  box = gegl_operation_get_bounding_box (operation);
  gchar         *unbounded = op_unbounded_input (self, &box);


  /* Caching the whole output makes GEGL ask process for all of it. */
  if (!op_whole_output (self, FILTER_OF (self)) || unbounded || !whole_fits (self, &box))
    {
      g_free (unbounded);
      return *roi;
    }
  return box;
}
