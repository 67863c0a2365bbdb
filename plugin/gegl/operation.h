/* SPDX-License-Identifier: GPL-3.0-or-later */
/* What the GEGL module's files share: the operation's instance and class
 * (one class for the five filters, its class data the filter), and each
 * file's functions the others call (every function's comment is at its
 * definition). The module is these files linked into one .so
 * (cudafx-gegl.c registers the types). */
#ifndef CUDAFX_GEGL_OPERATION_H
#define CUDAFX_GEGL_OPERATION_H

#include <gegl.h>
#include <gegl-plugin.h>

#include "i18n.h"
#include "procedures.h"
#include "region.h"

typedef struct
{
  GeglOperationAreaFilter parent_instance;

  cudafx_proc_args args;        /* the table's values by position */
  gchar           *kernel_text; /* convolve: "a,b,c;d,e,f;g,h,i", "" for the default */
  gchar           *palette_path; /* quantize: a GIMP palette file (.gpl), "" for none */
  gchar           *invalid;     /* why prepare found the settings unusable, else NULL */
  const Babl      *format;      /* what the engine reads and writes (prepare) */

  /* Automatic nl-means and nl-bayes: the noise σ and model of the input buffer
   * noise_source (held weakly; cleared when it changes or goes), and the σ
   * that the noise-sigma property shows: the one found at the finest level
   * of detail rendered on shown_source (an identity, never dereferenced;
   * shown_level G_MAXINT once that buffer changed or went), so that zooming
   * out keeps the full-size image's σ and zooming in refines it. */
  GMutex           lock;
  GeglBuffer      *noise_source;
  GeglRectangle    noise_extent; /* at noise_level */
  int              noise_level;
  double           noise_sigma;
  cudafx_noise_model noise_model;
  gulong           noise_changed;
  double           sigma_shown;
  gconstpointer    shown_source;
  int              shown_level;

  /* The node this operation is attached to, for announcing a new σ from
   * the main loop: weak, because GIMP may free the node (and with it drop
   * this operation) before the main loop runs (see announce_sigma). */
  GWeakRef         node;
  /* Whether the whole input of this extent (level 0) was found not to fit
   * in memory (whole_fits, or a run that ran out), so that GEGL is asked
   * for the regions wanted only; under lock. */
  gboolean         whole_failed;
  GeglRectangle    whole_failed_box;

  /* The pending announcement (see queue_announce), NULL or destroyed when none. */
  GSource         *announce;

  /* The settings and format prepare last checked with a one-pixel run
   * (probe_settings), and what it found: NULL or why they cannot run. */
  cudafx_proc_args probed_args;
  const Babl      *probed_format;
  gboolean         probed;
  gchar           *probed_error;

  /* The region's pixels in and out, kept between calls: a large region's
   * fresh memory costs its page faults on every call (on a 12 MP image,
   * more than the GPU's work), and pinning it (cudafx_host_alloc, once CUDA
   * has started) lets the GPU copy it without staging. Taken with a
   * try-lock; a second caller at the same time allocates its own. */
  GMutex           scratch_lock;
  guint8          *scratch[2];
  gsize            scratch_size[2];
  gboolean         scratch_pinnable[2]; /* whether pinning was possible when taken */
  gboolean         scratch_pinned_late; /* pin_scratch has run */
} CudafxOp;

typedef struct
{
  GeglOperationAreaFilterClass parent_class;
  int                          filter;
} CudafxOpClass;

/* Property ids: table position + 1, then the noise σ automatic mode found. */
#define PROP_NOISE_SIGMA (CUDAFX_PROC_MAX_ARGS + 1)

/* GeglOperationAreaFilter's class, the operations' parent (cudafx-gegl.c). */
extern gpointer op_parent_class;

/* Each choice argument's enum type, registered with the module (properties.c). */
extern GType op_choice_types[CUDAFX_N_FILTERS][CUDAFX_PROC_MAX_ARGS];

#define CUDAFX_OP(obj) ((CudafxOp *) (obj))
#define FILTER_OF(obj) (((CudafxOpClass *) G_OBJECT_GET_CLASS (obj))->filter)

static inline const cudafx_arg *
table_arg (int filter, guint prop_id)
{
  return &cudafx_filters[filter].args[prop_id - 1];
}

/* Pixels of error pattern written at most where memory failed: 64 MB of
 * R'G'B'A u8. */
#define ERROR_FILL_MAX ((gint64) 16 << 20)

/* Pixels per thread below which another thread costs more than it saves. */
#define MOVE_THREAD_COST (64 * 1024)

/* A region's CUDAFX_GEGL_TIMELINE line in the making (render_timeline.c). */
typedef struct
{
  gboolean on;
  gint64   t0;
  GString *line;
} region_timeline;

/* properties.c */
gchar *op_plain_label (const char *label);
GType op_choice_enum (GTypeModule *module, int filter, const cudafx_arg *arg);
gchar *op_default_kernel_text (void);
GParamSpec *op_arg_pspec (int filter, const cudafx_arg *arg);
void op_queue_announce (CudafxOp *self);
void op_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec);
void op_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec);

/* noise.c */
void op_forget_noise (CudafxOp *self);
gboolean op_noise_sigma (CudafxOp *self, GeglBuffer *input, const GeglRectangle *extent, int level,
                         guint8 *memory, double *sigma, cudafx_noise_model *model, GError **error);
const gchar *op_without_name (int filter, const gchar *message);

/* prepare.c */
gboolean op_has_automatic (int filter);
gboolean op_automatic_noise (CudafxOp *self, int filter);
gboolean op_whole_input (CudafxOp *self, int filter);
gboolean op_whole_output (CudafxOp *self, int filter);
gchar *op_unbounded_input (CudafxOp *self, const GeglRectangle *box);
gboolean op_whole_failed (CudafxOp *self, const GeglRectangle *box);
void op_prepare (GeglOperation *operation);
GeglRectangle op_get_required_for_output (GeglOperation *operation, const gchar *input_pad,
                                          const GeglRectangle *roi);
GeglRectangle op_get_bounding_box (GeglOperation *operation);
GeglRectangle op_get_cached_region (GeglOperation *operation, const GeglRectangle *roi);

/* levels.c */
GeglRectangle op_at_level (const GeglRectangle *r, int level);
gboolean op_at_level_args (cudafx_proc_args *args, int level, int halo);
gboolean op_pass_through (GeglBuffer *input, GeglBuffer *output, const GeglRectangle *roi, int level);

/* error_output.c */
void op_error_output (GeglBuffer *output, const GeglRectangle *roi, int level);

/* render_timeline.c */
void op_timeline_start (region_timeline *t, const char *filter, const GeglRectangle *roi);
void op_timeline_mark (region_timeline *t, const char *what);
int op_timeline_progress (double fraction, void *data);
void op_timeline_end (region_timeline *t);

/* scratch.c */
guint8 *op_region_memory (CudafxOp *self, int i, gboolean locked, gsize bytes, gsize whole,
                          gboolean *fresh);
gboolean op_pin_scratch (CudafxOp *self, const cudafx_image *src, const cudafx_image *dst, gsize bytes,
                         gsize src_written);

/* region_move.c */
void op_move_region (GeglBuffer *buffer, const GeglRectangle *rect, int level, const Babl *format,
                     guint8 *pixels, gsize stride, gboolean to_buffer, gboolean threaded);

/* process.c */
gboolean op_process (GeglOperation *operation, GeglBuffer *input, GeglBuffer *output,
                     const GeglRectangle *roi, gint level);

#endif /* CUDAFX_GEGL_OPERATION_H */
