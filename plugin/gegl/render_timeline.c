/* SPDX-License-Identifier: GPL-3.0-or-later */
/* CUDAFX_GEGL_TIMELINE (operation.h). */
#include "operation.h"

/* CUDAFX_GEGL_TIMELINE=1: one line on stderr per region filtered, the
 * milliseconds from its start to each step (the σ, the read, the engine's
 * start, each band written as the engine reports rows, the engine's end),
 * to see where an operation's time goes beyond the GPU's work and the
 * movement it cannot avoid. */
void
op_timeline_start (region_timeline *t, const char *filter, const GeglRectangle *roi)
{
  static int on = -1;

  if (on < 0)
    on = cudafx_test_switch ("CUDAFX_GEGL_TIMELINE") != NULL;
  t->on = on;
  if (!on)
    return;
  t->t0 = g_get_monotonic_time ();
  t->line = g_string_new (NULL);
  g_string_printf (t->line, "cudafx-timeline %s %dx%d+%d+%d:", filter, roi->width, roi->height,
                   roi->x, roi->y);
}

void
op_timeline_mark (region_timeline *t, const char *what)
{
  if (t->on)
    g_string_append_printf (t->line, " %s %.2f", what, (g_get_monotonic_time () - t->t0) / 1000.0);
}

/* The engine's progress as marks ("p0.42 3.10": the fraction it reported
 * and when), so that a call's own steps (quantize's seeding, its Lloyd
 * passes) show between the read and the first rows. The engine calls it on
 * the calling thread. */
int
op_timeline_progress (double fraction, void *data)
{
  char what[16];

  g_snprintf (what, sizeof what, "p%.2f", fraction);
  op_timeline_mark (data, what);
  return 0;
}

void
op_timeline_end (region_timeline *t)
{
  if (!t->on)
    return;
  op_timeline_mark (t, "end");
  g_printerr ("%s\n", t->line->str);
  g_string_free (t->line, TRUE);
}
