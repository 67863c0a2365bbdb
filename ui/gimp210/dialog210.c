/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 2.10 dialogs (GTK 2). One dialog per filter with a
 * GimpDrawablePreview and one control per argument of the table
 * (core/params.c): scale entries for ranges a slider covers, spin buttons
 * beyond, combo boxes for choices, check buttons for booleans. The preview
 * is rendered by the same region path as the final run (region.c), so what
 * the preview shows is what OK gives. Extras: the backend line; nl-means
 * and nl-bayes show the estimated noise σ and grey out the manual
 * parameters in automatic mode; convolution has a kernel grid (editing it makes the kernel
 * custom), a normalise switch for the divisor and sigma greyed out unless the
 * preset is Gaussian. Follows GIMP 2.10's filters with previews
 * (plug-ins/common/despeckle.c). */
#include "dialog210.h"

#include <math.h>
#include <string.h>

#include "i18n.h"
#include <libgimp/gimpui.h>

#include "dialog-common.h"
#include "region.h"

#define GRID_MAX    CUDAFX_KERNEL_GRID_MAX
#define SCALE_WIDTH 200
#define SPIN_WIDTH  6

typedef struct {
  gint32                    drawable;
  cudafx_proc_args         *args;
  GtkWidget                *preview;
  GtkWidget                *status;                    /* why the preview failed */
  GeglBuffer               *whole;                     /* quantize: the whole selection filtered, or NULL */
  double                    nlmeans_sigma;             /* the noise σ a run estimates; 0 when unknown */
  cudafx_noise_model        nlmeans_noise;             /* and the noise model found with it */
  /* Per argument, by table position: a number's adjustment (scale entry or
   * spin button), the control (spin, combo, check; NULL for scale entries)
   * and its label. */
  GtkObject                *adjustments[CUDAFX_PROC_MAX_ARGS];
  GtkWidget                *controls[CUDAFX_PROC_MAX_ARGS];
  GtkWidget                *labels[CUDAFX_PROC_MAX_ARGS];
  /* Convolution. */
  GtkWidget                *normalise;
  GtkWidget                *size_combo;
  GtkWidget                *taps[GRID_MAX][GRID_MAX];  /* entries: any number, shown as typed */
  GtkWidget                *kernel_note;
  int                       kernel_size;               /* n of the n×n spins shown */
  gboolean                  syncing;                   /* widgets being matched to args */
} dialog_state;

/* Argument i of the procedure: the engine's table, then the host's own (quantize's palette options). */
static const cudafx_arg *
arg_of (const dialog_state *state, int i)
{
  return cudafx_proc_arg (state->args->filter, i);
}

static int
index_of (dialog_state *state, const char *name)
{
  return cudafx_proc_arg_index (state->args->filter, name);
}

static double
value_of (dialog_state *state, const char *name)
{
  return state->args->values[index_of (state, name)];
}

/* Moves the control of argument i to v; its change handler stores v. */
static void
set_control (dialog_state *state, int i, double v)
{
  switch (arg_of (state, i)->type)
    {
    case CUDAFX_ARG_INT:
    case CUDAFX_ARG_DOUBLE:
      gtk_adjustment_set_value (GTK_ADJUSTMENT (state->adjustments[i]), v);
      break;
    case CUDAFX_ARG_BOOLEAN:
      gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (state->controls[i]), v != 0);
      break;
    case CUDAFX_ARG_CHOICE:
      gimp_int_combo_box_set_active (GIMP_INT_COMBO_BOX (state->controls[i]), (int) v);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
    case CUDAFX_ARG_PALETTE:
      break;
    }
}

static void
set_sensitive (dialog_state *state, const char *name, gboolean sensitive)
{
  int i = index_of (state, name);

  if (state->controls[i])
    {
      gtk_widget_set_sensitive (state->controls[i], sensitive);
      gtk_widget_set_sensitive (state->labels[i], sensitive);
    }
  else
    gimp_scale_entry_set_sensitive (state->adjustments[i], sensitive);
}

/* Controls that mean nothing with the current values are greyed out. */
static void
update_sensitivity (dialog_state *state)
{
  const cudafx_filter_desc *desc = &cudafx_filters[state->args->filter];

  /* What automatic mode chooses, while it is on. */
  for (int i = 0; i < desc->n_args; i++)
    if (desc->args[i].chosen_by_auto)
      set_sensitive (state, desc->args[i].name, value_of (state, "auto") == 0);
  switch (state->args->filter)
    {
    case CUDAFX_FILTER_CONVOLVE:
      set_sensitive (state, "sigma", value_of (state, "preset") == CUDAFX_PRESET_GAUSSIAN);
      set_sensitive (state, "divisor", value_of (state, "divisor") != 0);
      break;
    case CUDAFX_FILTER_QUANTIZE:
      /* a given palette is not computed */
      set_sensitive (state, "colors", !state->args->has_palette);
      set_sensitive (state, "max-iterations", !state->args->has_palette);
      set_sensitive (state, "seed", !state->args->has_palette);
      break;
    }
}

static void
set_status (dialog_state *state, const gchar *text)
{
  gtk_label_set_text (GTK_LABEL (state->status), text ? text : "");
  gtk_widget_set_visible (state->status, text != NULL);
}

/* The selection's bounds in the drawable, or NULL when it does not touch it. */
static const GeglRectangle *
selection_of (gint32 drawable, GeglRectangle *bounds)
{
  return gimp_drawable_mask_intersect (drawable, &bounds->x, &bounds->y, &bounds->width,
                                       &bounds->height) ? bounds : NULL;
}

static void
render_preview (GimpPreview *preview, dialog_state *state)
{
  GeglRectangle    area, bounds;
  GeglBuffer      *source = gimp_drawable_get_buffer (state->drawable), *result = NULL;
  cudafx_proc_args args = *state->args;
  const Babl      *format = cudafx_region_u8_format (source, NULL);
  GError          *error = NULL;

  gimp_preview_get_position (preview, &area.x, &area.y);
  gimp_preview_get_size (preview, &area.width, &area.height);
  args.nlmeans_sigma = state->nlmeans_sigma;
  args.nlmeans_noise = state->nlmeans_noise;
  result = cudafx_region_preview (source, selection_of (state->drawable, &bounds), &area, &args,
                                  &state->whole, NULL, &error);
  if (result)
    {
      int     rowstride = area.width * babl_format_get_bytes_per_pixel (format);
      guchar *pixels = g_malloc ((gsize) rowstride * area.height);

      gegl_buffer_get (result, &area, 1.0, format, pixels, rowstride, GEGL_ABYSS_NONE);
      gimp_preview_draw_buffer (preview, pixels, rowstride);
      g_free (pixels);
      g_object_unref (result);
      set_status (state, NULL);
    }
  else
    {
      gchar *text = g_strdup_printf (_("Preview failed: %s"), error->message);

      set_status (state, text);
      g_free (text);
      g_error_free (error);
    }
  g_object_unref (source);
}

/* The arguments changed: the preview (and quantize's cached palette run) with them. */
static void
settings_changed (dialog_state *state)
{
  g_clear_object (&state->whole);
  gimp_preview_invalidate (GIMP_PREVIEW (state->preview));
}

/* Once the preview has its size: show the middle of the selection, where the
 * subject usually is, rather than its top left corner. */
static void
centre_preview (GtkWidget *area, GtkAllocation *allocation, dialog_state *state)
{
  gint x, y, width, height, shown_width, shown_height;

  g_signal_handlers_disconnect_by_func (area, centre_preview, state);
  /* The preview's bounds are the selection's (GIMP 2.10 has no getter for them). */
  if (!gimp_drawable_mask_intersect (state->drawable, &x, &y, &width, &height))
    return;
  gimp_preview_get_size (GIMP_PREVIEW (state->preview), &shown_width, &shown_height);
  gimp_scrolled_preview_set_position (GIMP_SCROLLED_PREVIEW (state->preview),
                                      x + MAX (0, (width - shown_width) / 2),
                                      y + MAX (0, (height - shown_height) / 2));
}

/* ---- convolution's kernel grid ---------------------------------------------- */

static double
tap_value (dialog_state *state, int i, int j)
{
  return g_strtod (gtk_entry_get_text (GTK_ENTRY (state->taps[i][j])), NULL);
}

/* The n×n taps shown, row-major. */
static void
read_grid (dialog_state *state, double *taps)
{
  int n = state->kernel_size;

  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      taps[i * n + j] = tap_value (state, i, j);
}

static void
show_grid (dialog_state *state, const double *taps, int n)
{
  state->syncing = TRUE;
  state->kernel_size = n;
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      {
        gtk_widget_set_visible (state->taps[i][j], i < n && j < n);
        if (i < n && j < n)
          {
            gchar *text = g_strdup_printf ("%g", taps[i * n + j]);

            gtk_entry_set_text (GTK_ENTRY (state->taps[i][j]), text);
            g_free (text);
          }
      }
  gtk_combo_box_set_active (GTK_COMBO_BOX (state->size_combo), (n - 3) / 2);
  state->syncing = FALSE;
}

static void
set_kernel_note (dialog_state *state, const gchar *note)
{
  gtk_label_set_text (GTK_LABEL (state->kernel_note), note ? note : "");
  gtk_widget_set_visible (state->kernel_note, note != NULL);
}

/* Shows the kernel the values filter with, or says why the grid cannot. */
static void
kernel_to_grid (dialog_state *state)
{
  double  taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int     n;
  GError *error = NULL;
  gchar  *note;

  if (!cudafx_proc_kernel (state->args, taps, &n, &error))
    {
      note = g_strdup (error->message);
      g_error_free (error);
    }
  else if (!(note = cudafx_dialog_kernel_note (n)))
    show_grid (state, taps, n);
  set_kernel_note (state, note);
  g_free (note);
}

/* The grid becomes the custom kernel. */
static void
grid_to_args (dialog_state *state)
{
  double taps[GRID_MAX * GRID_MAX];
  int    n = state->kernel_size;

  read_grid (state, taps);
  cudafx_proc_set_kernel (state->args, taps, (gsize) n * n, NULL);
  set_kernel_note (state, NULL);
  state->syncing = TRUE;
  set_control (state, index_of (state, "preset"), CUDAFX_PRESET_CUSTOM);
  state->syncing = FALSE;
  settings_changed (state);
}

static void
grid_edited (GtkEntry *entry, dialog_state *state)
{
  if (!state->syncing)
    grid_to_args (state);
}

static void
grid_resized (GtkComboBox *combo, dialog_state *state)
{
  double taps[GRID_MAX * GRID_MAX], resized[GRID_MAX * GRID_MAX];
  int    n = state->kernel_size, new_n = 3 + 2 * gtk_combo_box_get_active (combo);

  if (state->syncing || new_n == n)
    return;
  read_grid (state, taps);
  cudafx_kernel_recentre (taps, n, resized, new_n);
  show_grid (state, resized, new_n);
  grid_to_args (state);
}

/* Normalising is divisor 0; switching it off divides by the kernel's sum
 * (1 if that is 0), so the result does not jump. */
static void
normalise_toggled (GtkToggleButton *toggle, dialog_state *state)
{
  double divisor = 0;

  if (state->syncing)
    return;
  if (!gtk_toggle_button_get_active (toggle))
    {
      double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE], sum = 0;
      int    n = 0;

      if (cudafx_proc_kernel (state->args, taps, &n, NULL))
        for (int i = 0; i < n * n; i++)
          sum += taps[i];
      divisor = fabs (sum) > 1e-9 ? sum : 1;
    }
  set_control (state, index_of (state, "divisor"), divisor);
}

/* Size chooser, the grid of taps and a note, in one box for the table. */
static GtkWidget *
kernel_editor (dialog_state *state, const cudafx_arg *arg)
{
  GtkWidget *box = gtk_vbox_new (FALSE, 4), *grid;
  gchar     *label;

  state->size_combo = gtk_combo_box_text_new ();
  for (int n = 3; n <= GRID_MAX; n += 2)
    {
      label = g_strdup_printf (_("%d×%d"), n, n);
      gtk_combo_box_text_append_text (GTK_COMBO_BOX_TEXT (state->size_combo), label);
      g_free (label);
    }
  gimp_help_set_help_data (state->size_combo, _(arg->blurb), NULL);
  gtk_box_pack_start (GTK_BOX (box), state->size_combo, FALSE, FALSE, 0);

  /* Not homogeneous: the rows and columns of hidden taps take no room. */
  grid = gtk_table_new (GRID_MAX, GRID_MAX, FALSE);
  gtk_table_set_row_spacings (GTK_TABLE (grid), 2);
  gtk_table_set_col_spacings (GTK_TABLE (grid), 2);
  for (int i = 0; i < GRID_MAX; i++)
    for (int j = 0; j < GRID_MAX; j++)
      {
        GtkWidget *entry = gtk_entry_new ();

        gtk_entry_set_width_chars (GTK_ENTRY (entry), SPIN_WIDTH);
        gtk_entry_set_alignment (GTK_ENTRY (entry), 1.0);
        /* Only the n×n shown are the kernel: show_all must not reveal the rest. */
        gtk_widget_set_no_show_all (entry, TRUE);
        gtk_table_attach (GTK_TABLE (grid), entry, j, j + 1, i, i + 1, GTK_FILL, GTK_FILL, 0, 0);
        g_signal_connect (entry, "changed", G_CALLBACK (grid_edited), state);
        state->taps[i][j] = entry;
      }
  gtk_box_pack_start (GTK_BOX (box), grid, FALSE, FALSE, 0);

  state->kernel_note = gtk_label_new ("");
  gtk_label_set_line_wrap (GTK_LABEL (state->kernel_note), TRUE);
  gtk_misc_set_alignment (GTK_MISC (state->kernel_note), 0.0, 0.5);
  gtk_widget_set_size_request (state->kernel_note, 360, -1);
  gtk_widget_set_no_show_all (state->kernel_note, TRUE);
  gtk_box_pack_start (GTK_BOX (box), state->kernel_note, FALSE, FALSE, 0);

  /* A 3×3 identity until the values' kernel (when the grid can show it) replaces it. */
  show_grid (state, (const double[9]) { 0, 0, 0, 0, 1, 0, 0, 0, 0 }, 3);
  kernel_to_grid (state);
  g_signal_connect (state->size_combo, "changed", G_CALLBACK (grid_resized), state);
  return box;
}

/* ---- one control per argument ------------------------------------------------ */

static void
argument_changed (dialog_state *state, int i, double v)
{
  const char *name = arg_of (state, i)->name;

  state->args->values[i] = v;
  update_sensitivity (state);
  if (state->args->filter == CUDAFX_FILTER_CONVOLVE && !state->syncing)
    {
      if (!strcmp (name, "preset") || !strcmp (name, "sigma"))
        kernel_to_grid (state);
      else if (!strcmp (name, "divisor"))
        {
          state->syncing = TRUE;
          gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (state->normalise), v == 0);
          state->syncing = FALSE;
        }
    }
  settings_changed (state);
}

static int
arg_index_of_widget (gpointer widget)
{
  return GPOINTER_TO_INT (g_object_get_data (G_OBJECT (widget), "cudafx-arg"));
}

static void
number_changed (GtkAdjustment *adjustment, dialog_state *state)
{
  int    i = arg_index_of_widget (adjustment);
  double v = gtk_adjustment_get_value (adjustment);

  argument_changed (state, i, arg_of (state, i)->type == CUDAFX_ARG_INT ? round (v) : v);
}

static void
boolean_changed (GtkToggleButton *toggle, dialog_state *state)
{
  argument_changed (state, arg_index_of_widget (toggle), gtk_toggle_button_get_active (toggle));
}

static void
choice_changed (GimpIntComboBox *combo, dialog_state *state)
{
  int v;

  if (gimp_int_combo_box_get_active (combo, &v))
    argument_changed (state, arg_index_of_widget (combo), v);
}

/* Decimals and step of a number's control, from its range. */
static void
number_format (const cudafx_arg *arg, int *digits, double *step)
{
  double span = arg->max - arg->min;

  if (arg->type == CUDAFX_ARG_INT)
    *digits = 0, *step = 1;
  else if (span <= 100)
    *digits = 2, *step = 0.1;
  else if (span <= 1000)
    *digits = 1, *step = 1;
  else
    *digits = 3, *step = 1;
}

/* Row row of table for argument i: a scale entry where a slider can cover
 * the range, a spin button beyond it. */
static void
add_number (dialog_state *state, GtkTable *table, int row, int i)
{
  const cudafx_arg *arg = arg_of (state, i);
  double            v = state->args->values[i], step;
  int               digits;
  GtkObject        *adjustment;

  number_format (arg, &digits, &step);
  if (arg->max - arg->min <= 1000)
    adjustment = gimp_scale_entry_new (table, 0, row, _(arg->label), SCALE_WIDTH, SPIN_WIDTH,
                                       v, arg->min, arg->max, step, step * 10, digits,
                                       TRUE, 0, 0, _(arg->blurb), NULL);
  else
    {
      adjustment = gtk_adjustment_new (v, arg->min, arg->max, step, step * 10, 0);
      state->controls[i] = gimp_spin_button_new (GTK_ADJUSTMENT (adjustment), 1, digits);
      gtk_entry_set_width_chars (GTK_ENTRY (state->controls[i]), 12);
      state->labels[i] = gimp_table_attach_aligned (table, 0, row, _(arg->label), 0.0, 0.5,
                                                    state->controls[i], 1, TRUE);
      gimp_help_set_help_data (state->controls[i], _(arg->blurb), NULL);
    }
  state->adjustments[i] = adjustment;
  g_object_set_data (G_OBJECT (adjustment), "cudafx-arg", GINT_TO_POINTER (i));
  g_signal_connect (adjustment, "value-changed", G_CALLBACK (number_changed), state);
}

static void
add_choice (dialog_state *state, GtkTable *table, int row, int i)
{
  const cudafx_arg *arg = arg_of (state, i);
  const gchar      *labels[arg->n_choices];
  GtkWidget        *combo;

  for (int c = 0; c < arg->n_choices; c++)
    labels[c] = _(arg->choices[c].label);
  combo = gimp_int_combo_box_new_array (arg->n_choices, labels);
  gimp_int_combo_box_set_active (GIMP_INT_COMBO_BOX (combo), (int) state->args->values[i]);
  gimp_help_set_help_data (combo, _(arg->blurb), NULL);
  state->labels[i] = gimp_table_attach_aligned (table, 0, row, _(arg->label), 0.0, 0.5,
                                                combo, 2, FALSE);
  state->controls[i] = combo;
  g_object_set_data (G_OBJECT (combo), "cudafx-arg", GINT_TO_POINTER (i));
  g_signal_connect (combo, "changed", G_CALLBACK (choice_changed), state);
}

static void
add_boolean (dialog_state *state, GtkTable *table, int row, int i)
{
  const cudafx_arg *arg = arg_of (state, i);
  GtkWidget        *check = gtk_check_button_new_with_mnemonic (_(arg->label));

  gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (check), state->args->values[i] != 0);
  gimp_help_set_help_data (check, _(arg->blurb), NULL);
  gtk_table_attach (table, check, 0, 3, row, row + 1, GTK_FILL, GTK_FILL, 0, 0);
  /* The check button carries its own label. */
  state->controls[i] = state->labels[i] = check;
  g_object_set_data (G_OBJECT (check), "cudafx-arg", GINT_TO_POINTER (i));
  g_signal_connect (check, "toggled", G_CALLBACK (boolean_changed), state);
}

static void
add_kernel (dialog_state *state, GtkTable *table, int row, int i)
{
  const cudafx_arg *arg = arg_of (state, i);
  GtkWidget        *label = gtk_label_new_with_mnemonic (_(arg->label));
  GtkWidget        *editor = kernel_editor (state, arg);

  gtk_misc_set_alignment (GTK_MISC (label), 0.0, 0.0);
  gtk_label_set_mnemonic_widget (GTK_LABEL (label), state->size_combo);
  gtk_table_attach (table, label, 0, 1, row, row + 1, GTK_FILL, GTK_FILL, 0, 0);
  gtk_table_attach (table, editor, 1, 3, row, row + 1, GTK_FILL, GTK_FILL, 0, 0);
  state->controls[i] = editor;
  state->labels[i] = label;
}

gboolean
cudafx_dialog210_load_palette (const gchar *name, cudafx_proc_args *args, GError **error)
{
  GimpRGB  *colors;
  double  (*rgb)[3];
  gint      n = 0;
  gboolean  ok;

  if (!name || !*name)
    return cudafx_proc_set_palette (args, NULL, 0, NULL, error);
  colors = gimp_palette_get_colors (name, &n);
  if (!colors || n <= 0)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s: there is no palette \"%s\" with colors"), cudafx_filters[args->filter].name,
                   name);
      g_free (colors);
      return FALSE;
    }
  rgb = g_malloc0_n ((gsize) n, sizeof *rgb);
  for (int i = 0; i < n; i++)
    {
      rgb[i][0] = colors[i].r;
      rgb[i][1] = colors[i].g;
      rgb[i][2] = colors[i].b;
    }
  ok = cudafx_proc_set_palette (args, (const double (*)[3]) rgb, n, name, error);
  g_free (rgb);
  g_free (colors);
  return ok;
}

/* The palette chooser: on, map to the palette the button shows; off, k-means. */
static void
palette_changed (dialog_state *state)
{
  int       i = index_of (state, "palette");
  GError   *error = NULL;
  gboolean  on = gtk_toggle_button_get_active (GTK_TOGGLE_BUTTON (state->labels[i]));
  const gchar *name = gimp_palette_select_button_get_palette (GIMP_PALETTE_SELECT_BUTTON (state->controls[i]));

  gtk_widget_set_sensitive (state->controls[i], on);
  if (!cudafx_dialog210_load_palette (on ? name : NULL, state->args, &error))
    {
      set_status (state, error->message);
      g_error_free (error);
      cudafx_proc_set_palette (state->args, NULL, 0, NULL, NULL);
    }
  update_sensitivity (state);
  settings_changed (state);
}

static void
palette_toggled (GtkToggleButton *toggle, dialog_state *state)
{
  palette_changed (state);
}

static void
palette_set (GimpPaletteSelectButton *button, const gchar *name, gboolean closing, dialog_state *state)
{
  palette_changed (state);
}

static void
add_palette (dialog_state *state, GtkTable *table, int row, int i)
{
  const cudafx_arg *arg = arg_of (state, i);
  GtkWidget        *check = gtk_check_button_new_with_mnemonic (_(arg->label));
  const gchar      *name = state->args->has_palette ? state->args->palette_name : NULL;
  GtkWidget        *button = gimp_palette_select_button_new (_(arg->label), name);

  gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (check), state->args->has_palette);
  gimp_help_set_help_data (check, _(arg->blurb), NULL);
  gtk_widget_set_sensitive (button, state->args->has_palette);
  gtk_table_attach (table, check, 0, 1, row, row + 1, GTK_FILL, GTK_FILL, 0, 0);
  gtk_table_attach (table, button, 1, 3, row, row + 1, GTK_FILL, GTK_FILL, 0, 0);
  state->controls[i] = button;
  state->labels[i] = check;
  g_signal_connect (check, "toggled", G_CALLBACK (palette_toggled), state);
  g_signal_connect (button, "palette-set", G_CALLBACK (palette_set), state);
}

/* A line under a control, in the table's control columns. */
static GtkWidget *
add_note (GtkTable *table, int row, const gchar *text)
{
  GtkWidget *label = gtk_label_new (text);

  gtk_label_set_line_wrap (GTK_LABEL (label), TRUE);
  gtk_misc_set_alignment (GTK_MISC (label), 0.0, 0.5);
  gtk_widget_set_size_request (label, 360, -1);
  gimp_label_set_attributes (GTK_LABEL (label), PANGO_ATTR_STYLE, PANGO_STYLE_ITALIC, -1);
  gtk_table_attach (table, label, 0, 3, row, row + 1, GTK_FILL, GTK_FILL, 0, 0);
  return label;
}

/* The noise σ automatic mode will find, under the automatic toggle;
 * kept for the preview, which filters only a part of the selection. */
static gchar *
noise_text (dialog_state *state)
{
  GeglRectangle bounds;
  GeglBuffer   *source = gimp_drawable_get_buffer (state->drawable);
  gchar        *text = cudafx_dialog_noise_text (source, selection_of (state->drawable, &bounds),
                                                 state->args->filter, &state->nlmeans_sigma,
                                                 &state->nlmeans_noise);

  g_object_unref (source);
  return text;
}

/* The table of controls, one row per argument plus the filters' extras. */
static GtkWidget *
controls_table (dialog_state *state)
{
  int       n_args = cudafx_proc_n_args (state->args->filter);
  GtkTable *table = GTK_TABLE (gtk_table_new (n_args + 2, 3, FALSE));
  int       row = 0;

  gtk_table_set_col_spacings (table, 6);
  gtk_table_set_row_spacings (table, 6);
  for (int i = 0; i < n_args; i++, row++)
    {
      const char *name = arg_of (state, i)->name;

      switch (arg_of (state, i)->type)
        {
        case CUDAFX_ARG_INT:
        case CUDAFX_ARG_DOUBLE:
          add_number (state, table, row, i);
          break;
        case CUDAFX_ARG_CHOICE:
          add_choice (state, table, row, i);
          break;
        case CUDAFX_ARG_BOOLEAN:
          add_boolean (state, table, row, i);
          break;
        case CUDAFX_ARG_DOUBLE_ARRAY:
          add_kernel (state, table, row, i);
          break;
        case CUDAFX_ARG_PALETTE:
          add_palette (state, table, row, i);
          break;
        }
      if (arg_of (state, i)->type == CUDAFX_ARG_BOOLEAN && !strcmp (name, "auto"))
        {
          gchar *text = noise_text (state);

          add_note (table, ++row, text);
          g_free (text);
        }
      else if (!strcmp (name, "divisor"))
        {
          state->normalise = gtk_check_button_new_with_mnemonic (_("_Normalise"));
          gimp_help_set_help_data (state->normalise,
                                   _("Divide by the kernel's sum (divisor 0)"), NULL);
          gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (state->normalise),
                                        state->args->values[i] == 0);
          gtk_table_attach (table, state->normalise, 2, 3, row, row + 1, GTK_FILL, GTK_FILL,
                            0, 0);
          g_signal_connect (state->normalise, "toggled", G_CALLBACK (normalise_toggled), state);
        }
    }
  return GTK_WIDGET (table);
}

gboolean
cudafx_dialog210_run (gint32 drawable, cudafx_proc_args *args)
{
  const cudafx_filter_desc *desc = &cudafx_filters[args->filter];
  dialog_state              state = { .drawable = drawable, .args = args };
  GtkWidget                *dialog, *hbox, *left, *right, *backend;
  gchar                    *text;
  gboolean                  ok;

  gimp_ui_init ("cudafx", FALSE);
  text = cudafx_dialog_title (desc);
  dialog = gimp_dialog_new (text, "cudafx", NULL, 0, gimp_standard_help_func, desc->procedure,
                            _("_Cancel"), GTK_RESPONSE_CANCEL, _("_OK"), GTK_RESPONSE_OK,
                            NULL);
  g_free (text);
  gtk_dialog_set_alternative_button_order (GTK_DIALOG (dialog), GTK_RESPONSE_OK,
                                           GTK_RESPONSE_CANCEL, -1);
  gimp_window_set_transient (GTK_WINDOW (dialog));

  hbox = gtk_hbox_new (FALSE, 12);
  gtk_container_set_border_width (GTK_CONTAINER (hbox), 12);
  gtk_box_pack_start (GTK_BOX (gtk_dialog_get_content_area (GTK_DIALOG (dialog))), hbox,
                      TRUE, TRUE, 0);

  left = gtk_vbox_new (FALSE, 6);
  gtk_box_pack_start (GTK_BOX (hbox), left, TRUE, TRUE, 0);
  state.preview = gimp_drawable_preview_new_from_drawable_id (drawable);
  g_signal_connect_after (gimp_preview_get_area (GIMP_PREVIEW (state.preview)), "size-allocate",
                          G_CALLBACK (centre_preview), &state);
  gtk_box_pack_start (GTK_BOX (left), state.preview, TRUE, TRUE, 0);
  state.status = gtk_label_new ("");
  gtk_label_set_line_wrap (GTK_LABEL (state.status), TRUE);
  gtk_widget_set_size_request (state.status, 240, -1);
  gtk_widget_set_no_show_all (state.status, TRUE);
  gtk_box_pack_start (GTK_BOX (left), state.status, FALSE, FALSE, 0);

  right = gtk_vbox_new (FALSE, 12);
  gtk_box_pack_start (GTK_BOX (hbox), right, FALSE, FALSE, 0);
  gtk_box_pack_start (GTK_BOX (right), controls_table (&state), FALSE, FALSE, 0);
  text = cudafx_dialog_backend_text ();
  backend = gtk_label_new (text);
  g_free (text);
  gtk_label_set_line_wrap (GTK_LABEL (backend), TRUE);
  gtk_misc_set_alignment (GTK_MISC (backend), 0.0, 0.5);
  gtk_widget_set_size_request (backend, 360, -1);
  gtk_box_pack_end (GTK_BOX (right), backend, FALSE, FALSE, 0);
  update_sensitivity (&state);

  g_signal_connect (state.preview, "invalidated", G_CALLBACK (render_preview), &state);
  gtk_widget_show_all (dialog);

  ok = gimp_dialog_run (GIMP_DIALOG (dialog)) == GTK_RESPONSE_OK;
  gtk_widget_destroy (dialog);
  g_clear_object (&state.whole);
  return ok;
}
