/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 3 dialogs: one GimpProcedureDialog per filter, its
 * widgets generated from the argument table (core/params.c) through the
 * procedure config, beside a drawable preview rendered by the same engine
 * path as the final run (region.c: the preview's area plus the filter's
 * halo; quantize's palette from the whole selection, as a run makes it), and
 * lines naming the backend available and the one that rendered the preview.
 * Non-local means and Bayes show the noise σ their automatic mode will find;
 * convolution adds an editable kernel grid and a normalise switch for the
 * divisor.
 * Follows GIMP 3's own filters with previews (plug-ins/common/despeckle.c). */
#include "dialog.h"

#include <math.h>
#include <string.h>

#include "i18n.h"
#include <libgimp/gimpui.h>

#include "args.h"
#include "dialog-common.h"
#include "region.h"

#define GRID_MAX CUDAFX_KERNEL_GRID_MAX
/* Side of the preview area, in screen pixels, when the drawable is larger. */
#define PREVIEW_SIDE 320

typedef struct {
  int                  filter;
  GimpProcedureConfig *config;
  GimpDrawable        *drawable;
  GtkWidget           *preview;
  GtkWidget           *status;           /* what rendered the preview, or why it failed */
  GeglBuffer          *whole;            /* quantize: the whole selection filtered, or NULL */
  double               nlmeans_sigma;    /* the noise σ a run estimates; 0 when unknown */
  cudafx_noise_model   nlmeans_noise;    /* and the noise model found with it */
  /* Convolution's kernel editor. */
  GtkWidget           *size_combo;
  GtkWidget           *grid;
  GtkWidget           *cells[GRID_MAX][GRID_MAX];
  GtkWidget           *kernel_note;
  GtkWidget           *normalise;
  int                  kernel_size;      /* n of the n×n cells shown */
  gboolean             syncing;          /* widgets and config being matched up */
} dialog_state;

/* 8-bit data in the drawable's layout: what gimp_preview_draw_buffer takes. */
static const Babl *
preview_format (GimpDrawable *drawable)
{
  gboolean alpha = gimp_drawable_has_alpha (drawable);

  if (gimp_drawable_is_gray (drawable))
    return babl_format (alpha ? "Y'A u8" : "Y' u8");
  return babl_format (alpha ? "R'G'B'A u8" : "R'G'B' u8");
}

/* "CPU, 2 threads" or "CUDA: NVIDIA H100 80GB HBM3", from a run's report. */
static gchar *
report_text (const cudafx_report *report)
{
  if (report->backend_used == CUDAFX_BACKEND_CUDA)
    return g_strdup_printf (_("CUDA: %s"), report->device);
  return g_strdup_printf (dngettext (CUDAFX_DOMAIN, "CPU, %d thread", "CPU, %d threads",
                                     report->threads_used),
                          report->threads_used);
}

/* The selection's bounds in the drawable, or NULL when it does not touch it. */
static const GeglRectangle *
selection_of (GimpDrawable *drawable, GeglRectangle *bounds)
{
  return gimp_drawable_mask_intersect (drawable, &bounds->x, &bounds->y, &bounds->width,
                                       &bounds->height) ? bounds : NULL;
}

/* area filtered as a run filters the selection (region.c), into a buffer to unref. */
static GeglBuffer *
preview_result (dialog_state *state, GeglBuffer *source, const GeglRectangle *area,
                cudafx_run_result *run, GError **error)
{
  cudafx_proc_args args;
  GeglRectangle    bounds;

  cudafx_proc_args_init (&args, state->filter);
  if (!cudafx_config_read_args (state->config, cudafx_config_uses_palette (state->config), &args,
                                error))
    return NULL;
  args.nlmeans_sigma = state->nlmeans_sigma;
  args.nlmeans_noise = state->nlmeans_noise;
  return cudafx_region_preview (source, selection_of (state->drawable, &bounds), area, &args,
                                &state->whole, run, error);
}

static void
render_preview (GimpPreview *preview, dialog_state *state)
{
  cudafx_run_result run = { 0 };
  GeglRectangle     area;
  GeglBuffer       *source, *result;
  const Babl       *format = preview_format (state->drawable);
  int               bpp = babl_format_get_bytes_per_pixel (format);
  gboolean          cached = state->whole != NULL;
  gint64            start = g_get_monotonic_time ();
  GError           *error = NULL;
  gchar            *text;

  gimp_preview_get_position (preview, &area.x, &area.y);
  gimp_preview_get_size (preview, &area.width, &area.height);
  source = gimp_drawable_get_buffer (state->drawable);
  result = preview_result (state, source, &area, &run, &error);
  if (result)
    {
      guchar *pixels = g_malloc ((gsize) area.width * area.height * bpp);
      gchar  *backend = report_text (&run.report);

      gegl_buffer_get (result, &area, 1.0, format, pixels, area.width * bpp, GEGL_ABYSS_NONE);
      gimp_preview_draw_buffer (preview, pixels, area.width * bpp);
      g_free (pixels);
      if (cached)
        text = NULL;  /* the line still says what made the cached result */
      else
        text = g_strdup_printf (_("Preview: %s, %.0f ms"), backend,
                                (g_get_monotonic_time () - start) / 1000.0);
      g_free (backend);
    }
  else
    {
      text = g_strdup_printf (_("Preview failed: %s"), error->message);
      g_error_free (error);
    }
  if (text)
    gtk_label_set_text (GTK_LABEL (state->status), text);
  g_free (text);
  if (result)
    g_object_unref (result);
  g_object_unref (source);
}

/* GimpPreview sizes its area from a style property whenever the style is
 * updated: ask for a larger area after it. */
static void
size_preview (GtkWidget *preview, dialog_state *state)
{
  gtk_widget_set_size_request (gimp_preview_get_area (GIMP_PREVIEW (preview)),
                               MIN (PREVIEW_SIDE, gimp_drawable_get_width (state->drawable)),
                               MIN (PREVIEW_SIDE, gimp_drawable_get_height (state->drawable)));
}

static void
settings_changed (GObject *config, GParamSpec *pspec, dialog_state *state)
{
  g_clear_object (&state->whole);
  gimp_preview_invalidate (GIMP_PREVIEW (state->preview));
}

/* The noise σ automatic mode will find; kept for the preview, which filters
 * only a part of the selection. */
static gchar *
noise_estimate_text (dialog_state *state)
{
  GeglRectangle bounds;
  GeglBuffer   *source = gimp_drawable_get_buffer (state->drawable);
  gchar        *text = cudafx_dialog_noise_text (source, selection_of (state->drawable, &bounds),
                                                 state->filter, &state->nlmeans_sigma,
                                                 &state->nlmeans_noise);

  g_object_unref (source);
  return text;
}

/* A label of the dialog that wraps rather than widening it. */
static GtkWidget *
add_note (GimpProcedureDialog *dialog, const gchar *id, const gchar *text)
{
  GtkWidget *label = gimp_procedure_dialog_get_label (dialog, id, text, FALSE, FALSE);

  gtk_label_set_line_wrap (GTK_LABEL (label), TRUE);
  gtk_label_set_max_width_chars (GTK_LABEL (label), 48);
  gtk_label_set_xalign (GTK_LABEL (label), 0.0);
  return label;
}

/* ---- convolution's kernel grid ---------------------------------------------- */

/* The kernel the config's values filter with (the preset's, or the custom one). */
static gboolean
config_kernel (dialog_state *state, double *taps, int *size)
{
  cudafx_proc_args     args;
  cudafx_filter_params p;
  int                  n;

  cudafx_proc_args_init (&args, state->filter);
  if (!cudafx_config_read_args (state->config, FALSE, &args, NULL))
    return FALSE;
  n = (int) lround (sqrt ((double) args.kernel_length));
  if (n * n != args.kernel_length)
    return FALSE;
  cudafx_filter_params_from_values (state->filter, args.values, n ? args.kernel : NULL, n, &p);
  return cudafx_convolve_kernel (&p.convolve, taps, size) == CUDAFX_OK;
}

static void
show_grid_size (dialog_state *state, int n)
{
  state->kernel_size = n;
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      gtk_widget_set_visible (state->cells[i][j], i < n && j < n);
  gtk_combo_box_set_active (GTK_COMBO_BOX (state->size_combo), (n - 3) / 2);
}

/* Shows the config's kernel in the grid, or says why it cannot. */
static void
kernel_to_grid (dialog_state *state)
{
  double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int    n = 0;
  gchar *note = NULL;

  state->syncing = TRUE;
  if (!config_kernel (state, taps, &n))
    note = g_strdup (_("The kernel is not valid: see the preview's message."));
  else if (!(note = cudafx_dialog_kernel_note (n)))
    {
      show_grid_size (state, n);
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
          {
            gchar text[G_ASCII_DTOSTR_BUF_SIZE];

            g_ascii_formatd (text, sizeof text, "%.4g", taps[i * n + j]);
            gtk_entry_set_text (GTK_ENTRY (state->cells[i][j]), text);
            gtk_style_context_remove_class (gtk_widget_get_style_context (state->cells[i][j]),
                                            "error");
          }
    }
  if (note)
    gtk_combo_box_set_active (GTK_COMBO_BOX (state->size_combo), -1);
  gtk_widget_set_visible (state->grid, note == NULL);
  gtk_label_set_text (GTK_LABEL (state->kernel_note), note ? note : "");
  gtk_widget_set_visible (state->kernel_note, note != NULL);
  g_free (note);
  state->syncing = FALSE;
}

/* taps (n×n) become the config's custom kernel. */
static void
set_custom_kernel (dialog_state *state, const double *taps, int n)
{
  const cudafx_arg *preset = cudafx_arg_find (&cudafx_filters[state->filter], "preset");
  GValue            value = G_VALUE_INIT;

  g_value_init (&value, GIMP_TYPE_DOUBLE_ARRAY);
  gimp_value_set_double_array (&value, taps, (gsize) n * n);
  g_object_freeze_notify (G_OBJECT (state->config));
  g_object_set_property (G_OBJECT (state->config), "kernel", &value);
  g_object_set (state->config, "preset", preset->choices[CUDAFX_PRESET_CUSTOM].nick, NULL);
  g_object_thaw_notify (G_OBJECT (state->config));
  g_value_unset (&value);
}

/* An edited cell: when every cell holds a number, the grid is the kernel. */
static void
cell_edited (GtkEditable *cell, dialog_state *state)
{
  double taps[GRID_MAX * GRID_MAX];
  int    n = state->kernel_size;
  gboolean all = TRUE;

  if (state->syncing)
    return;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      {
        GtkWidget   *entry = state->cells[i][j];
        const gchar *text = gtk_entry_get_text (GTK_ENTRY (entry));
        gchar       *end;

        taps[i * n + j] = g_ascii_strtod (text, &end);
        if (end == text || *end || !isfinite (taps[i * n + j]))
          {
            gtk_style_context_add_class (gtk_widget_get_style_context (entry), "error");
            all = FALSE;
          }
        else
          gtk_style_context_remove_class (gtk_widget_get_style_context (entry), "error");
      }
  if (!all)
    return;
  state->syncing = TRUE;
  set_custom_kernel (state, taps, n);
  state->syncing = FALSE;
}

/* A chosen size makes a custom kernel of the current one's centre, padded
 * with zeros when it grows. */
static void
size_chosen (GtkComboBox *combo, dialog_state *state)
{
  double old[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  double taps[GRID_MAX * GRID_MAX];
  int    old_n, n = 3 + 2 * gtk_combo_box_get_active (combo);

  if (state->syncing || gtk_combo_box_get_active (combo) < 0 ||
      !config_kernel (state, old, &old_n) || n == old_n)
    return;
  cudafx_kernel_recentre (old, old_n, taps, n);
  set_custom_kernel (state, taps, n);
}

static void
kernel_settings_changed (GObject *config, GParamSpec *pspec, dialog_state *state)
{
  if (!state->syncing)
    kernel_to_grid (state);
}

/* Size chooser, grid of cells and a note, in a frame the dialog knows as "kernel-frame". */
static void
add_kernel_editor (GimpProcedureDialog *dialog, dialog_state *state)
{
  GtkWidget *box, *row, *label;

  gimp_procedure_dialog_get_label (dialog, "kernel-title", _("Kernel"), FALSE, FALSE);
  /* The box is made around the note (a dialog box needs one known widget). */
  state->kernel_note = add_note (dialog, "kernel-note", "");
  gtk_widget_set_no_show_all (state->kernel_note, TRUE);
  box = gimp_procedure_dialog_fill_box (dialog, "kernel-box", "kernel-note", NULL);

  row = gtk_box_new (GTK_ORIENTATION_HORIZONTAL, 6);
  label = gtk_label_new_with_mnemonic (_("Si_ze"));
  state->size_combo = gtk_combo_box_text_new ();
  gtk_label_set_mnemonic_widget (GTK_LABEL (label), state->size_combo);
  for (int n = 3; n <= GRID_MAX; n += 2)
    {
      gchar *text = g_strdup_printf (_("%d×%d"), n, n);

      gtk_combo_box_text_append_text (GTK_COMBO_BOX_TEXT (state->size_combo), text);
      g_free (text);
    }
  gtk_box_pack_start (GTK_BOX (row), label, FALSE, FALSE, 0);
  gtk_box_pack_start (GTK_BOX (row), state->size_combo, FALSE, FALSE, 0);
  gtk_box_pack_start (GTK_BOX (box), row, FALSE, FALSE, 0);
  gtk_box_reorder_child (GTK_BOX (box), row, 0);
  gtk_widget_show_all (row);

  state->grid = gtk_grid_new ();
  gtk_grid_set_row_spacing (GTK_GRID (state->grid), 2);
  gtk_grid_set_column_spacing (GTK_GRID (state->grid), 2);
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      {
        GtkWidget *cell = gtk_entry_new ();

        gtk_entry_set_width_chars (GTK_ENTRY (cell), 5);
        gtk_entry_set_alignment (GTK_ENTRY (cell), 1.0);
        gtk_widget_set_tooltip_text (cell, _("A tap of the kernel: any number"));
        /* Only the n×n shown are the kernel: show_all must not reveal the rest. */
        gtk_widget_set_no_show_all (cell, TRUE);
        gtk_grid_attach (GTK_GRID (state->grid), cell, j, i, 1, 1);
        g_signal_connect (cell, "changed", G_CALLBACK (cell_edited), state);
        state->cells[i][j] = cell;
      }
  gtk_widget_set_no_show_all (state->grid, TRUE);
  gtk_box_pack_start (GTK_BOX (box), state->grid, FALSE, FALSE, 0);
  gtk_box_reorder_child (GTK_BOX (box), state->grid, 1);

  gimp_procedure_dialog_fill_frame (dialog, "kernel-frame", "kernel-title", FALSE, "kernel-box");
  kernel_to_grid (state);
  g_signal_connect (state->size_combo, "changed", G_CALLBACK (size_chosen), state);
  g_signal_connect (state->config, "notify::preset", G_CALLBACK (kernel_settings_changed), state);
  g_signal_connect (state->config, "notify::sigma", G_CALLBACK (kernel_settings_changed), state);
  g_signal_connect (state->config, "notify::kernel", G_CALLBACK (kernel_settings_changed), state);
}

/* ---- convolution's divisor: 0 means "normalise" ------------------------------ */

static void
divisor_changed (GObject *config, GParamSpec *pspec, dialog_state *state)
{
  gdouble divisor;

  g_object_get (config, "divisor", &divisor, NULL);
  state->syncing = TRUE;
  gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (state->normalise), divisor == 0.0);
  state->syncing = FALSE;
}

/* Normalising sets the divisor to 0; leaving it starts from the kernel's sum,
 * which filters the same, or 1 for kernels summing to zero (edge detectors). */
static void
normalise_toggled (GtkToggleButton *toggle, dialog_state *state)
{
  double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE], sum = 0.0;
  int    n;

  if (state->syncing)
    return;
  if (!gtk_toggle_button_get_active (toggle) && config_kernel (state, taps, &n))
    for (int i = 0; i < n * n; i++)
      sum += taps[i];
  g_object_set (state->config, "divisor",
                gtk_toggle_button_get_active (toggle) ? 0.0 : fabs (sum) > 1e-9 ? sum : 1.0,
                NULL);
}

/* The normalise switch above the divisor, which it disables while on. */
static void
add_divisor (GimpProcedureDialog *dialog, dialog_state *state)
{
  GtkWidget *divisor = gimp_procedure_dialog_get_widget (dialog, "divisor",
                                                         GIMP_TYPE_LABEL_SPIN);
  GtkWidget *box = gimp_procedure_dialog_fill_box (dialog, "divisor-box", "divisor", NULL);

  state->normalise = gtk_check_button_new_with_mnemonic (_("_Normalise: divide by the kernel's sum"));
  gtk_box_pack_start (GTK_BOX (box), state->normalise, FALSE, FALSE, 0);
  gtk_box_reorder_child (GTK_BOX (box), state->normalise, 0);
  gtk_widget_show (state->normalise);
  g_object_bind_property (state->normalise, "active", divisor, "sensitive",
                          G_BINDING_SYNC_CREATE | G_BINDING_INVERT_BOOLEAN);
  divisor_changed (G_OBJECT (state->config), NULL, state);
  g_signal_connect (state->normalise, "toggled", G_CALLBACK (normalise_toggled), state);
  g_signal_connect (state->config, "notify::divisor", G_CALLBACK (divisor_changed), state);
}

/* ---- the dialog --------------------------------------------------------------- */

/* Quantize's palette arguments (create a palette, convert to indexed), when
 * the table has them, are grouped in a frame of their own. */
static gboolean
is_palette_argument (int filter, const cudafx_arg *arg)
{
  return filter == CUDAFX_FILTER_QUANTIZE &&
         (!strcmp (arg->name, "palette") || !strcmp (arg->name, "create-palette") ||
          !strcmp (arg->name, "convert-indexed") || !strcmp (arg->name, "remove-unused"));
}

/* The widget of one table argument: scale entries for numbers with a range
 * a slider can cover, spin buttons beyond, combo boxes for choices; GIMP's
 * defaults (check box, palette chooser) for the rest. Returns the id the
 * dialog knows the widget by. */
static const gchar *
argument_widget (GimpProcedureDialog *dialog, const cudafx_arg *arg, dialog_state *state)
{
  if (state->filter == CUDAFX_FILTER_CONVOLVE && !strcmp (arg->name, "divisor"))
    {
      add_divisor (dialog, state);
      return "divisor-box";
    }
  switch (arg->type)
    {
    case CUDAFX_ARG_INT:
    case CUDAFX_ARG_DOUBLE:
      if (arg->max - arg->min <= 1000)
        gimp_procedure_dialog_get_scale_entry (dialog, arg->name, 1.0);
      else
        gimp_procedure_dialog_get_widget (dialog, arg->name, GIMP_TYPE_LABEL_SPIN);
      return arg->name;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      add_kernel_editor (dialog, state);
      return "kernel-frame";
    case CUDAFX_ARG_CHOICE:
      /* GIMP 3.2's default for three choices or fewer is a frame of radio
       * buttons, whose title is no mnemonic label (GIMP warns "no mnemonic
       * for property"): a combo box carries the label's mnemonic, as 3.0's
       * default did for every choice. */
      gimp_procedure_dialog_get_widget (dialog, arg->name, GTK_TYPE_COMBO_BOX);
      return arg->name;
    case CUDAFX_ARG_BOOLEAN:
    case CUDAFX_ARG_PALETTE:
      break;
    }
  return arg->name;
}

/* Widgets that only matter for some values of another argument. */
static void
set_dependencies (GimpProcedureDialog *dialog, dialog_state *state)
{
  if (state->filter == CUDAFX_FILTER_QUANTIZE)
    {
      /* A given palette replaces the one k-means would make. */
      static const char *const kmeans[] = { "colors", "max-iterations", "seed" };

      for (gsize i = 0; i < G_N_ELEMENTS (kmeans); i++)
        gimp_procedure_dialog_set_sensitive (dialog, kmeans[i], TRUE, G_OBJECT (state->config),
                                             CUDAFX_USE_PALETTE, TRUE);
      gimp_procedure_dialog_set_sensitive (dialog, "palette", TRUE, G_OBJECT (state->config),
                                           CUDAFX_USE_PALETTE, FALSE);
    }
  /* What automatic mode chooses, while it is on. */
  for (int i = 0; i < cudafx_filters[state->filter].n_args; i++)
    if (cudafx_filters[state->filter].args[i].chosen_by_auto)
      gimp_procedure_dialog_set_sensitive (dialog, cudafx_filters[state->filter].args[i].name, TRUE,
                                           G_OBJECT (state->config), "auto", TRUE);
  if (state->filter == CUDAFX_FILTER_CONVOLVE)
    {
      const cudafx_arg *preset = cudafx_arg_find (&cudafx_filters[state->filter], "preset");
      GimpValueArray   *gaussian = gimp_value_array_new (1);
      GValue            value = G_VALUE_INIT;

      g_value_init (&value, G_TYPE_STRING);
      g_value_set_static_string (&value, preset->choices[CUDAFX_PRESET_GAUSSIAN].nick);
      gimp_value_array_append (gaussian, &value);
      g_value_unset (&value);
      gimp_procedure_dialog_set_sensitive_if_in (dialog, "sigma", G_OBJECT (state->config),
                                                 "preset", gaussian, TRUE);
    }
}

gboolean
cudafx_dialog_run (GimpProcedure *procedure, GimpProcedureConfig *config,
                   GimpDrawable *drawable, int filter)
{
  const cudafx_filter_desc *desc = &cudafx_filters[filter];
  dialog_state              state = { .filter = filter, .config = config, .drawable = drawable };
  GimpProcedureDialog      *dialog;
  GtkWidget                *box;
  GList                    *options = NULL, *palette = NULL;
  const gchar              *kernel_id = NULL;
  gchar                    *title, *text;
  gboolean                  ok;

  gimp_ui_init ("cudafx");
  title = cudafx_dialog_title (desc);
  dialog = GIMP_PROCEDURE_DIALOG (gimp_procedure_dialog_new (procedure, config, title));
  g_free (title);

  /* Left: the preview and what rendered it. */
  state.preview = gimp_procedure_dialog_get_drawable_preview (dialog, "preview", drawable);
  size_preview (state.preview, &state);
  g_signal_connect_after (state.preview, "style-updated", G_CALLBACK (size_preview), &state);
  state.status = add_note (dialog, "preview-status", "");
  gimp_procedure_dialog_fill_box (dialog, "preview-box", "preview", "preview-status", NULL);

  /* Right: the table's arguments, then the backend available. The kernel
   * grid follows sigma, which shapes the Gaussian preset's kernel. */
  for (int i = 0, n_args = cudafx_proc_n_args (filter); i < n_args; i++)
    {
      const cudafx_arg *arg = cudafx_proc_arg (filter, i);
      const gchar      *id = argument_widget (dialog, arg, &state);

      if (arg->type == CUDAFX_ARG_DOUBLE_ARRAY)
        kernel_id = id;
      else if (is_palette_argument (filter, arg))
        {
          if (arg->type == CUDAFX_ARG_PALETTE)
            palette = g_list_append (palette, CUDAFX_USE_PALETTE);
          palette = g_list_append (palette, (gpointer) id);
        }
      else
        options = g_list_append (options, (gpointer) id);
      if (kernel_id && (!strcmp (arg->name, "sigma") || i == n_args - 1))
        {
          options = g_list_append (options, (gpointer) kernel_id);
          kernel_id = NULL;
        }
      if (arg->type == CUDAFX_ARG_BOOLEAN && !strcmp (arg->name, "auto"))
        {
          text = noise_estimate_text (&state);
          add_note (dialog, "noise-estimate", text);
          g_free (text);
          options = g_list_append (options, "noise-estimate");
        }
    }
  if (palette)
    {
      gimp_procedure_dialog_get_label (dialog, "palette-title", _("Palette"), FALSE, FALSE);
      gimp_procedure_dialog_fill_box_list (dialog, "palette-box", palette);
      gimp_procedure_dialog_fill_frame (dialog, "palette-frame", "palette-title", FALSE,
                                        "palette-box");
      options = g_list_append (options, "palette-frame");
    }
  text = cudafx_dialog_backend_text ();
  add_note (dialog, "backend-label", text);
  g_free (text);
  options = g_list_append (options, "backend-label");
  gimp_procedure_dialog_fill_box_list (dialog, "options-box", options);
  set_dependencies (dialog, &state);

  box = gimp_procedure_dialog_fill_box (dialog, "main-box", "preview-box", "options-box", NULL);
  gtk_orientable_set_orientation (GTK_ORIENTABLE (box), GTK_ORIENTATION_HORIZONTAL);
  gtk_box_set_spacing (GTK_BOX (box), 12);
  gimp_procedure_dialog_fill (dialog, "main-box", NULL);
  g_list_free (options);
  g_list_free (palette);

  g_signal_connect (state.preview, "invalidated", G_CALLBACK (render_preview), &state);
  g_signal_connect (config, "notify", G_CALLBACK (settings_changed), &state);

  ok = gimp_procedure_dialog_run (dialog);
  g_signal_handlers_disconnect_by_data (config, &state);
  gtk_widget_destroy (GTK_WIDGET (dialog));
  if (ok && !cudafx_config_uses_palette (config))
    g_object_set (config, "palette", NULL, NULL); /* the chooser's, not chosen */
  g_clear_object (&state.whole);
  return ok;
}
