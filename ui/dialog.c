/* cudafx — the GIMP 3 dialogs: one GimpProcedureDialog per filter, its
 * widgets generated from the argument table (core/params.c) through the
 * procedure config, a drawable preview rendered by the same engine path as
 * the final run (region.c: the preview's area plus the filter's halo), and a
 * line naming the backend. Non-local means adds the estimated noise σ beside
 * its automatic toggle; convolution adds an editable kernel grid.
 * Follows GIMP 3's own filters with previews (plug-ins/common/despeckle.c). */
#include "dialog.h"

#include <math.h>
#include <string.h>

#include <glib/gi18n.h>
#include <libgimp/gimpui.h>

#include "args.h"
#include "region.h"

/* The kernel grid edits kernels up to this size (odd sizes from 3). */
#define GRID_MAX 7

typedef struct {
  int                  filter;
  GimpProcedureConfig *config;
  GimpDrawable        *drawable;
  GtkWidget           *status;                    /* why the preview failed, or empty */
  /* Convolution's kernel editor. */
  GtkWidget           *size_combo;
  GtkWidget           *spins[GRID_MAX][GRID_MAX];
  GtkWidget           *kernel_note;
  int                  kernel_size;               /* n of the n×n spins shown */
  gboolean             syncing;                   /* grid and config being matched up */
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

/* Filters the preview's area into a scratch buffer (sparse: only the tiles
 * written take memory) exactly as a run filters the selection. */
static void
render_preview (GimpPreview *preview, dialog_state *state)
{
  cudafx_proc_args args;
  GeglRectangle    area;
  GeglBuffer      *source, *result;
  const Babl      *format = preview_format (state->drawable);
  int              bpp = babl_format_get_bytes_per_pixel (format);
  guchar          *pixels;
  GError          *error = NULL;

  gimp_preview_get_position (preview, &area.x, &area.y);
  gimp_preview_get_size (preview, &area.width, &area.height);
  cudafx_proc_args_init (&args, state->filter);
  source = gimp_drawable_get_buffer (state->drawable);
  result = gegl_buffer_new (gegl_buffer_get_extent (source), gegl_buffer_get_format (source));
  if (cudafx_config_read_args (state->config, &args, &error) &&
      cudafx_region_process (source, result, &area, &args, NULL, NULL, NULL, &error))
    {
      pixels = g_malloc ((gsize) area.width * area.height * bpp);
      gegl_buffer_get (result, &area, 1.0, format, pixels, area.width * bpp, GEGL_ABYSS_NONE);
      gimp_preview_draw_buffer (preview, pixels, area.width * bpp);
      g_free (pixels);
      gtk_label_set_text (GTK_LABEL (state->status), "");
    }
  else
    {
      gchar *text = g_strdup_printf (_("Preview failed: %s"), error->message);

      gtk_label_set_text (GTK_LABEL (state->status), text);
      g_free (text);
      g_error_free (error);
    }
  g_object_unref (result);
  g_object_unref (source);
}

/* The noise σ of the selection and what automatic mode makes of it. */
static gchar *
noise_estimate_text (GimpDrawable *drawable)
{
  GeglRectangle       area;
  GeglBuffer         *buffer;
  cudafx_image        image = { 0 };
  cudafx_options      options;
  cudafx_nlmeans_info info;
  GError             *error = NULL;
  gchar              *text;

  if (!gimp_drawable_mask_intersect (drawable, &area.x, &area.y, &area.width, &area.height))
    return g_strdup (_("Noise σ: the selection is empty"));
  buffer = gimp_drawable_get_buffer (drawable);
  if (!cudafx_region_read (buffer, &area, &image, &error))
    text = g_strdup_printf (_("Noise σ could not be estimated: %s"), error->message);
  else
    {
      cudafx_options_init (&options);
      if (cudafx_nlmeans_estimate (&image, &options, &info) == CUDAFX_OK)
        text = g_strdup_printf (_("Estimated noise σ: %.1f — automatic mode uses strength %.1f, "
                                  "patch radius %d, search radius %d"),
                                info.sigma, info.h, info.patch_radius, info.search_radius);
      else
        text = g_strdup_printf (_("Noise σ could not be estimated: %s"), cudafx_error_message ());
    }
  g_clear_error (&error);
  g_free (image.data);
  g_object_unref (buffer);
  return text;
}

/* ---- convolution's kernel grid ---------------------------------------------- */

static void
show_grid_size (dialog_state *state, int n)
{
  state->kernel_size = n;
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      gtk_widget_set_visible (state->spins[i][j], i < n && j < n);
  gtk_combo_box_set_active (GTK_COMBO_BOX (state->size_combo), (n - 3) / 2);
}

/* The kernel the config's values filter with (the preset's, or the custom one). */
static gboolean
config_kernel (dialog_state *state, double *taps, int *size)
{
  cudafx_proc_args     args;
  cudafx_filter_params p;
  int                  n;

  cudafx_proc_args_init (&args, state->filter);
  if (!cudafx_config_read_args (state->config, &args, NULL))
    return FALSE;
  n = (int) lround (sqrt ((double) args.kernel_length));
  if (n * n != args.kernel_length)
    return FALSE;
  cudafx_filter_params_from_values (state->filter, args.values, n ? args.kernel : NULL, n, &p);
  return cudafx_convolve_kernel (&p.convolve, taps, size) == CUDAFX_OK;
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
    note = g_strdup (_("The kernel is not valid: see the preview's message"));
  else if (n < 3 || n > GRID_MAX)
    note = g_strdup_printf (_("This kernel is %d×%d; the grid edits kernels from 3×3 to %d×%d. "
                              "Editing the grid makes a custom kernel."), n, n,
                            GRID_MAX, GRID_MAX);
  else
    {
      show_grid_size (state, n);
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
          gtk_spin_button_set_value (GTK_SPIN_BUTTON (state->spins[i][j]), taps[i * n + j]);
    }
  gtk_label_set_text (GTK_LABEL (state->kernel_note), note ? note : "");
  gtk_widget_set_visible (state->kernel_note, note != NULL);
  g_free (note);
  state->syncing = FALSE;
}

/* The grid becomes the config's custom kernel. */
static void
grid_to_config (dialog_state *state)
{
  const cudafx_arg *preset = cudafx_arg_find (&cudafx_filters[state->filter], "preset");
  double            taps[GRID_MAX * GRID_MAX];
  int               n = state->kernel_size;
  GValue            value = G_VALUE_INIT;

  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      taps[i * n + j] = gtk_spin_button_get_value (GTK_SPIN_BUTTON (state->spins[i][j]));
  g_value_init (&value, GIMP_TYPE_DOUBLE_ARRAY);
  gimp_value_set_double_array (&value, taps, (gsize) n * n);
  state->syncing = TRUE;
  g_object_set_property (G_OBJECT (state->config), "kernel", &value);
  g_object_set (state->config, "preset", preset->choices[CUDAFX_PRESET_CUSTOM].nick, NULL);
  gtk_widget_set_visible (state->kernel_note, FALSE);
  state->syncing = FALSE;
  g_value_unset (&value);
}

static void
grid_edited (GtkSpinButton *spin, dialog_state *state)
{
  if (!state->syncing)
    grid_to_config (state);
}

/* A new size keeps the kernel centred: taps are cut or padded with zeros. */
static void
grid_resized (GtkComboBox *combo, dialog_state *state)
{
  int    old_n = state->kernel_size, n = 3 + 2 * gtk_combo_box_get_active (combo);
  int    shift = (n - old_n) / 2;
  double taps[GRID_MAX][GRID_MAX] = { { 0 } };

  if (state->syncing || n == old_n)
    return;
  for (int i = 0; i < old_n; i++)
    for (int j = 0; j < old_n; j++)
      if (i + shift >= 0 && i + shift < n && j + shift >= 0 && j + shift < n)
        taps[i + shift][j + shift] =
          gtk_spin_button_get_value (GTK_SPIN_BUTTON (state->spins[i][j]));
  state->syncing = TRUE;
  show_grid_size (state, n);
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      gtk_spin_button_set_value (GTK_SPIN_BUTTON (state->spins[i][j]), taps[i][j]);
  state->syncing = FALSE;
  grid_to_config (state);
}

static void
kernel_settings_changed (GObject *config, GParamSpec *pspec, dialog_state *state)
{
  if (!state->syncing)
    kernel_to_grid (state);
}

/* Size chooser, grid of taps and a note, in the box the dialog knows as "kernel-box". */
static void
add_kernel_editor (GimpProcedureDialog *dialog, dialog_state *state)
{
  GtkWidget *box, *grid;
  gchar     *label;

  gimp_procedure_dialog_get_label (dialog, "kernel-title", _("Kernel (editing makes it custom)"),
                                   FALSE, FALSE);
  box = gimp_procedure_dialog_fill_box (dialog, "kernel-box", "kernel-title", NULL);

  state->size_combo = gtk_combo_box_text_new ();
  for (int n = 3; n <= GRID_MAX; n += 2)
    {
      label = g_strdup_printf (_("%d×%d"), n, n);
      gtk_combo_box_text_append_text (GTK_COMBO_BOX_TEXT (state->size_combo), label);
      g_free (label);
    }
  gtk_box_pack_start (GTK_BOX (box), state->size_combo, FALSE, FALSE, 0);

  grid = gtk_grid_new ();
  gtk_grid_set_row_spacing (GTK_GRID (grid), 2);
  gtk_grid_set_column_spacing (GTK_GRID (grid), 2);
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      {
        GtkWidget *spin = gtk_spin_button_new_with_range (-1000, 1000, 1);

        gtk_spin_button_set_digits (GTK_SPIN_BUTTON (spin), 3);
        gtk_entry_set_width_chars (GTK_ENTRY (spin), 6);
        /* Only the n×n shown are the kernel: show_all must not reveal the rest. */
        gtk_widget_set_no_show_all (spin, TRUE);
        gtk_grid_attach (GTK_GRID (grid), spin, j, i, 1, 1);
        g_signal_connect (spin, "value-changed", G_CALLBACK (grid_edited), state);
        state->spins[i][j] = spin;
      }
  gtk_box_pack_start (GTK_BOX (box), grid, FALSE, FALSE, 0);
  gtk_widget_show (grid);

  state->kernel_note = gtk_label_new ("");
  gtk_label_set_line_wrap (GTK_LABEL (state->kernel_note), TRUE);
  gtk_label_set_xalign (GTK_LABEL (state->kernel_note), 0.0);
  gtk_label_set_max_width_chars (GTK_LABEL (state->kernel_note), 50);
  gtk_widget_set_no_show_all (state->kernel_note, TRUE);
  gtk_box_pack_start (GTK_BOX (box), state->kernel_note, FALSE, FALSE, 0);
  gtk_widget_show (state->size_combo);

  show_grid_size (state, 3);
  kernel_to_grid (state);
  g_signal_connect (state->size_combo, "changed", G_CALLBACK (grid_resized), state);
  g_signal_connect (state->config, "notify::preset", G_CALLBACK (kernel_settings_changed), state);
  g_signal_connect (state->config, "notify::sigma", G_CALLBACK (kernel_settings_changed), state);
  g_signal_connect (state->config, "notify::kernel", G_CALLBACK (kernel_settings_changed), state);
}

/* ---- the dialog --------------------------------------------------------------- */

/* "Median (GPU)" from "_Median (GPU)...". */
static gchar *
dialog_title (const cudafx_filter_desc *desc)
{
  gchar *title = gimp_strip_uline (_(desc->menu_label));

  if (g_str_has_suffix (title, "..."))
    title[strlen (title) - 3] = '\0';
  else if (g_str_has_suffix (title, "…"))
    title[strlen (title) - strlen ("…")] = '\0';
  return title;
}

/* The widget of one table argument: scale entries for numbers with a range
 * a slider can cover, spin buttons beyond; GIMP's defaults (check, combo)
 * for the rest. Returns the id the dialog knows the widget by. */
static const gchar *
argument_widget (GimpProcedureDialog *dialog, const cudafx_arg *arg, dialog_state *state)
{
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
      return "kernel-box";
    case CUDAFX_ARG_BOOLEAN:
    case CUDAFX_ARG_CHOICE:
      break;
    }
  return arg->name;
}

gboolean
cudafx_dialog_run (GimpProcedure *procedure, GimpProcedureConfig *config,
                   GimpDrawable *drawable, int filter)
{
  const cudafx_filter_desc *desc = &cudafx_filters[filter];
  dialog_state              state = { .filter = filter, .config = config, .drawable = drawable };
  GimpProcedureDialog      *dialog;
  GtkWidget                *preview;
  GList                    *ids = NULL;
  gchar                    *title, *text;
  char                      backend[256];
  gboolean                  ok;

  gimp_ui_init ("cudafx");
  title = dialog_title (desc);
  dialog = GIMP_PROCEDURE_DIALOG (gimp_procedure_dialog_new (procedure, config, title));
  g_free (title);

  preview = gimp_procedure_dialog_get_drawable_preview (dialog, "preview", drawable);
  ids = g_list_append (ids, "preview");
  state.status = gimp_procedure_dialog_get_label (dialog, "preview-status", "", FALSE, FALSE);
  ids = g_list_append (ids, "preview-status");

  for (int i = 0; i < desc->n_args; i++)
    {
      ids = g_list_append (ids, (gpointer) argument_widget (dialog, &desc->args[i], &state));
      if (filter == CUDAFX_FILTER_NLMEANS && !strcmp (desc->args[i].name, "auto"))
        {
          text = noise_estimate_text (drawable);
          gimp_procedure_dialog_get_label (dialog, "noise-estimate", text, FALSE, FALSE);
          g_free (text);
          ids = g_list_append (ids, "noise-estimate");
        }
    }
  if (filter == CUDAFX_FILTER_NLMEANS)
    {
      static const char *const manual[] = { "h", "patch-radius", "search-radius" };

      for (gsize i = 0; i < G_N_ELEMENTS (manual); i++)
        gimp_procedure_dialog_set_sensitive (dialog, manual[i], TRUE, G_OBJECT (config), "auto",
                                             TRUE);
    }

  cudafx_backend_describe (backend, sizeof backend);
  text = g_strdup_printf (_("Backend available: %s"), backend);
  gimp_procedure_dialog_get_label (dialog, "backend-label", text, FALSE, FALSE);
  g_free (text);
  ids = g_list_append (ids, "backend-label");
  gimp_procedure_dialog_fill_list (dialog, ids);
  g_list_free (ids);

  g_signal_connect (preview, "invalidated", G_CALLBACK (render_preview), &state);
  g_signal_connect_object (config, "notify", G_CALLBACK (gimp_preview_invalidate), preview,
                           G_CONNECT_SWAPPED);

  ok = gimp_procedure_dialog_run (dialog);
  g_signal_handlers_disconnect_by_data (config, &state);
  gtk_widget_destroy (GTK_WIDGET (dialog));
  return ok;
}
