/* SPDX-License-Identifier: GPL-3.0-or-later */
/* How cudafx:nl-means tells GIMP the σ its automatic mode found: GIMP's
 * filter dialog follows "notify::noise-sigma" on the operation's node and
 * reads the value back from it (gimp_operation_config_connect_node). Here a
 * node is rendered as GIMP renders it, and the test plays GIMP's part:
 *
 * - the notify comes once, from the main loop (never during the render),
 *   with the CLI's σ for the same input, even when another thread renders;
 * - rendering the same input again announces nothing (no loop with the
 *   dialog, which re-applies the filter when its settings change);
 * - writing noise-sigma, as GIMP copies every setting onto the operation,
 *   changes nothing and does not make GEGL render the node again (writing h
 *   does: the probe works); another value than the σ found (GIMP's dialog
 *   on Reset) is answered with the σ found, once, from the main loop;
 * - a node freed before the main loop runs is not reached (GIMP frees the
 *   node of a merged filter; a notify on the operation crashed GIMP so);
 * - a zoomed-out render (level 1) shows that level's σ until the full-size
 *   image is rendered; zooming out again keeps the full-size σ;
 * - the first σ found is announced even when it is the property's initial
 *   0 (a flat image), since GIMP's dialog may have started with another;
 * - without a main loop (the gegl command, scripts), a node's operation is
 *   freed with its graph: the announcement waiting for the loop holds
 *   neither it nor its region memory.
 *
 *   test-gegl-sigma IMAGE SIGMA   SIGMA: what `cudafx nl-means --json` finds on IMAGE
 *                                 (GEGL_PATH must reach the module); prints PASS/FAIL lines */
#include <gegl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int failed;

static void
check (gboolean ok, const char *what)
{
  printf ("%s %s\n", ok ? "PASS" : "FAIL", what);
  failed += !ok;
}

typedef struct
{
  int      notified;     /* "notify::noise-sigma" on the node */
  gboolean off_main;     /* one came on another thread than the main one */
  double   value;        /* noise-sigma read back at the last notify, as GIMP does */
  int      invalidated;  /* the node's "invalidated" */
} probe;

static GThread *main_thread;

static void
on_notify (GeglNode *node, GParamSpec *pspec, probe *p)
{
  p->notified++;
  p->off_main |= g_thread_self () != main_thread;
  gegl_node_get (node, "noise-sigma", &p->value, NULL);
}

static void
on_invalidated (GeglNode *node, const GeglRectangle *rect, probe *p)
{
  p->invalidated++;
}

/* load (or, image NULL, a flat grey square) → cudafx:nl-means (automatic),
 * with the probe on the operation's node. */
static GeglNode *
graph_for (const char *image, GeglNode **op, probe *p)
{
  GeglNode *graph = gegl_node_new ();
  GeglNode *load;

  if (image)
    load = gegl_node_new_child (graph, "operation", "gegl:load", "path", image, NULL);
  else
    {
      GeglColor *grey = gegl_color_new ("rgb(0.5, 0.5, 0.5)");

      load = gegl_node_new_child (graph, "operation", "gegl:rectangle", "width", 64.0,
                                  "height", 64.0, "color", grey, NULL);
      g_object_unref (grey);
    }

  *op = gegl_node_new_child (graph, "operation", "cudafx:nl-means", NULL);
  gegl_node_link (load, *op);
  g_signal_connect (*op, "notify::noise-sigma", G_CALLBACK (on_notify), p);
  g_signal_connect (*op, "invalidated", G_CALLBACK (on_invalidated), p);
  return graph;
}

static void
render (GeglNode *op, double scale)
{
  GeglRectangle box = gegl_node_get_bounding_box (op);
  GeglRectangle r = { 0, 0, (int) (box.width * scale), (int) (box.height * scale) };
  guint8 *pixels = g_malloc ((gsize) r.width * r.height * 4);

  gegl_node_blit (op, scale, &r, babl_format ("R'G'B'A u8"), pixels, GEGL_AUTO_ROWSTRIDE,
                  GEGL_BLIT_DEFAULT);
  g_free (pixels);
}

static gpointer
render_thread (gpointer op)
{
  render (op, 1.0);
  return NULL;
}

static void
run_main_loop (void)
{
  while (g_main_context_iteration (NULL, FALSE))
    ;
}

static gboolean
same_sigma (double a, double b)
{
  return fabs (a - b) <= 1e-5 * MAX (1.0, fabs (b)); /* the CLI prints 6 digits */
}

int
main (int argc, char **argv)
{
  const char *image;
  double      cli_sigma, level1_sigma, v;
  GeglNode   *graph, *op;
  probe       p = { 0 };
  char        what[256];

  if (argc != 3)
    {
      fprintf (stderr, "usage: %s IMAGE SIGMA\n", argv[0]);
      return 2;
    }
  setvbuf (stdout, NULL, _IOLBF, 0); /* lines whole among GEGL's messages */
  image = argv[1];
  cli_sigma = g_ascii_strtod (argv[2], NULL);
  g_setenv ("GEGL_MIPMAP_RENDERING", "1", TRUE);
  gegl_init (&argc, &argv);
  main_thread = g_thread_self ();
  if (!gegl_has_operation ("cudafx:nl-means"))
    {
      check (FALSE, "GEGL knows cudafx:nl-means (GEGL_PATH)");
      return 1;
    }

  graph = graph_for (image, &op, &p);
  render (op, 1.0);
  check (p.notified == 0, "no notify during the render");
  run_main_loop ();
  g_snprintf (what, sizeof what, "one notify from the main loop (%d), noise-sigma %.6g = the CLI's %.6g",
              p.notified, p.value, cli_sigma);
  check (p.notified == 1 && !p.off_main && same_sigma (p.value, cli_sigma), what);
  render (op, 1.0);
  run_main_loop ();
  check (p.notified == 1, "the same input rendered again: no new notify");

  p.invalidated = 0;
  gegl_node_get (op, "noise-sigma", &v, NULL);
  gegl_node_set (op, "noise-sigma", v, NULL);
  run_main_loop ();
  check (p.invalidated == 0 && p.notified == 1,
         "noise-sigma written with the σ found: the node not invalidated, no notify");
  gegl_node_set (op, "noise-sigma", 0.0, NULL);
  gegl_node_get (op, "noise-sigma", &v, NULL);
  check (p.invalidated == 0 && p.notified == 1 && same_sigma (v, cli_sigma),
         "noise-sigma written with 0: ignored, the node not invalidated, no notify then");
  run_main_loop ();
  check (p.notified == 2 && !p.off_main && same_sigma (p.value, cli_sigma),
         "then one notify from the main loop, the σ found");
  gegl_node_set (op, "h", 12.0, NULL);
  check (p.invalidated > 0, "h written: the node invalidated");
  g_object_unref (graph);

  /* Rendered on another thread: the notify still comes from the main loop. */
  p = (probe) { 0 };
  graph = graph_for (image, &op, &p);
  g_thread_join (g_thread_new ("render", render_thread, op));
  check (p.notified == 0, "rendered on another thread: no notify there");
  run_main_loop ();
  check (p.notified == 1 && !p.off_main && same_sigma (p.value, cli_sigma),
         "rendered on another thread: one notify, from the main loop, the CLI's σ");
  g_object_unref (graph);

  /* Freed before the main loop runs. */
  p = (probe) { 0 };
  graph = graph_for (image, &op, &p);
  render (op, 1.0);
  g_object_unref (graph);
  run_main_loop ();
  check (p.notified == 0, "node freed before the main loop: not reached, no crash");

  /* Zoomed out, then the full size, then zoomed out again. */
  p = (probe) { 0 };
  graph = graph_for (image, &op, &p);
  render (op, 0.5);
  run_main_loop ();
  level1_sigma = p.value;
  g_snprintf (what, sizeof what, "level 1: one notify, σ %.6g, not the full size's %.6g", level1_sigma,
              cli_sigma);
  check (p.notified == 1 && level1_sigma > 0 && !same_sigma (level1_sigma, cli_sigma), what);
  render (op, 1.0);
  run_main_loop ();
  check (p.notified == 2 && same_sigma (p.value, cli_sigma), "then level 0: one more notify, the CLI's σ");
  render (op, 0.5);
  run_main_loop ();
  gegl_node_get (op, "noise-sigma", &v, NULL);
  check (p.notified == 2 && same_sigma (v, cli_sigma),
         "level 1 again: no notify, noise-sigma stays the full size's");
  g_object_unref (graph);

  /* A flat image: σ 0, announced all the same. */
  p = (probe) { 0 };
  graph = graph_for (NULL, &op, &p);
  gegl_node_set (op, "noise-sigma", 5.0, NULL);
  render (op, 1.0);
  run_main_loop ();
  g_snprintf (what, sizeof what, "flat image: one notify, σ %.6g = 0", p.value);
  check (p.notified == 1 && p.value == 0, what);
  g_object_unref (graph);

  /* No main loop ever runs: each operation goes with its graph. */
  {
    int alive = 0;

    for (int i = 0; i < 3; i++)
      {
        gpointer operation;

        p = (probe) { 0 };
        graph = graph_for (image, &op, &p);
        render (op, 1.0);
        operation = gegl_node_get_gegl_operation (op);
        g_object_add_weak_pointer (G_OBJECT (operation), &operation);
        g_object_unref (graph);
        if (operation)
          {
            alive++;
            g_object_remove_weak_pointer (G_OBJECT (operation), &operation);
          }
      }
    g_snprintf (what, sizeof what, "no main loop: every operation freed with its graph (%d of 3 kept)", alive);
    check (alive == 0 && p.notified == 0, what);
    run_main_loop ();
    check (p.notified == 0, "no main loop: their announcements, run late, reach no freed node");
  }

  gegl_exit ();
  return failed ? 1 : 0;
}
