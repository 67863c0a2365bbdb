/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Engine plumbing: image validation, the argument table, dispatch, progress. */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

TEST (engine_table_has_every_filter)
{
  const char *names[] = { "median", "nl-means", "quantize", "convolve", "nl-bayes" };
  CHECK (CUDAFX_N_FILTERS == 5, "%d filters in the table, this test knows 5", CUDAFX_N_FILTERS);
  for (int i = 0; i < 5; i++)
    {
      const cudafx_filter_desc *f = cudafx_filter_find (names[i]);
      CHECK (f != NULL, "filter %s missing", names[i]);
      if (!f)
        continue;
      CHECK (cudafx_filter_find (f->procedure) == f, "procedure name of %s not found", names[i]);
      const cudafx_arg *b = cudafx_arg_find (f, "backend");
      CHECK (b && b->type == CUDAFX_ARG_CHOICE && b->n_choices == 3, "%s lacks backend", names[i]);
      for (int a = 0; a < f->n_args; a++)
        {
          CHECK ((f->args[a].min <= f->args[a].def && f->args[a].def <= f->args[a].max)
                 || f->args[a].type == CUDAFX_ARG_DOUBLE_ARRAY,
                 "%s %s default outside its range", names[i], f->args[a].name);
          /* What automatic mode chooses: numbers of a filter that has it. */
          CHECK (!f->args[a].chosen_by_auto
                 || (cudafx_arg_find (f, "auto")
                     && (f->args[a].type == CUDAFX_ARG_INT || f->args[a].type == CUDAFX_ARG_DOUBLE)),
                 "%s %s: chosen by an automatic mode it has not", names[i], f->args[a].name);
        }
      const cudafx_arg *automatic = cudafx_arg_find (f, "auto"), *sigma = cudafx_arg_find (f, "sigma");
      CHECK (!automatic || automatic->type == CUDAFX_ARG_BOOLEAN, "%s: auto is not a boolean", names[i]);
      if (!strcmp (names[i], "nl-bayes"))
        CHECK (automatic && sigma && sigma->chosen_by_auto, "nl-bayes: auto, or sigma chosen by it, missing");
    }
  CHECK (cudafx_filter_find ("nope") == NULL, "unknown filter found");
}

/* Dialogs show every label with its mnemonic: one letter per label, none
 * repeated within a filter, and none of the letters GIMP's procedure dialog
 * takes for itself (_Help, _Cancel, _OK, _Reset, _Load Saved Settings,
 * _Save Settings, and the preview's _Preview toggle). */
TEST (engine_labels_have_distinct_mnemonics)
{
  for (int f = 0; f < CUDAFX_N_FILTERS; f++)
    {
      char taken[64] = "hcorlsp";
      for (int a = 0; a < cudafx_filters[f].n_args; a++)
        {
          const char *label = cudafx_filters[f].args[a].label;
          const char *mark = strchr (label, '_');
          CHECK (mark && mark[1] && !strchr (mark + 1, '_'), "%s: label \"%s\" needs one mnemonic",
                 cudafx_filters[f].name, label);
          if (!mark || !mark[1])
            continue;
          char key = (char) (mark[1] | 0x20);
          CHECK (!strchr (taken, key), "%s: mnemonic '%c' of \"%s\" is already taken",
                 cudafx_filters[f].name, key, label);
          taken[strlen (taken)] = key;
        }
    }
}

TEST (engine_defaults_follow_the_table)
{
  cudafx_median_params m;
  cudafx_median_params_init (&m);
  CHECK (m.radius == 3 && m.percentile == 50 && m.shape == CUDAFX_SHAPE_SQUARE, "median defaults");
  cudafx_nlmeans_params n;
  cudafx_nlmeans_params_init (&n);
  CHECK (n.automatic == 1 && n.h == 10 && n.patch_radius == 1 && n.search_radius == 10, "nl-means defaults");
  cudafx_quantize_params q;
  cudafx_quantize_params_init (&q);
  CHECK (q.colors == 16 && q.dither == CUDAFX_DITHER_NONE && q.seed == 0, "quantize defaults");
  cudafx_convolve_params c;
  cudafx_convolve_params_init (&c);
  CHECK (c.preset == CUDAFX_PRESET_GAUSSIAN && c.sigma == 2 && c.divisor == 0 &&
         c.border == CUDAFX_BORDER_CLAMP, "convolve defaults");
  cudafx_nlbayes_params b;
  cudafx_nlbayes_params_init (&b);
  CHECK (b.automatic == 1 && b.sigma == 10 && b.flat_area == 1 && b.estimate == 0 && b.origin_x == 0
         && b.origin_y == 0, "nl-bayes defaults");
}

/* What the hosts do with cudafx_nlbayes_halo: a part of the image read with
 * that halo and filtered with its origin equals the same part of the whole
 * run, manual (grey) and automatic with the whole image's noise given
 * (colour); without an estimate the halo is the largest. */
TEST (engine_nlbayes_halo_makes_parts_equal)
{
  const int w = 160, h = 150, px = 66, py = 62, pw = 23, ph = 19;
  for (int colours = 1; colours <= 3; colours += 2)
    {
      cudafx_image src = harness_image_new (w, h, colours, 0, CUDAFX_U8, 0);
      cudafx_image whole = harness_image_new (w, h, colours, 0, CUDAFX_U8, 0);
      harness_rng rng = { 77u + colours };
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
          for (int c = 0; c < colours; c++)
            {
              double v = 60 + 0.8 * x + 0.5 * y + 30 * c + 6 * (harness_uniform (&rng) - 0.5) * 3.4;
              harness_set (&src, x, y, c, v < 0 ? 0 : v > 255 ? 255 : (int) v);
            }
      cudafx_nlbayes_params p;
      cudafx_nlbayes_params_init (&p);
      p.automatic = colours == 3;
      p.sigma = 12;
      cudafx_options o = harness_cpu_options ();
      cudafx_nlbayes_info info;
      CHECK (cudafx_nlbayes (&src, &whole, &p, &o, &info) == CUDAFX_OK, "whole run: %s", cudafx_error_message ());
      int largest = cudafx_nlbayes_halo (&p, colours);
      if (p.automatic)
        {
          p.estimate = info.sigma;
          p.noise = info.noise;
          CHECK (largest >= cudafx_nlbayes_halo (&p, colours), "the largest halo %d is below the estimate's", largest);
        }
      int halo = cudafx_nlbayes_halo (&p, colours);
      if (!(halo > 0 && halo <= px && halo <= py && halo <= w - px - pw && halo <= h - py - ph))
        {
          CHECK (0, "%d colours: halo %d too large for the test's image", colours, halo);
          harness_image_free (&src);
          harness_image_free (&whole);
          continue;
        }
      int x0 = px - halo, y0 = py - halo, rw = pw + 2 * halo, rh = ph + 2 * halo;
      cudafx_image part = src, out = harness_image_new (rw, rh, colours, 0, CUDAFX_U8, 0);
      part.data = (uint8_t *) src.data + (size_t) y0 * src.stride + (size_t) x0 * colours;
      part.width = rw;
      part.height = rh;
      p.origin_x = x0;
      p.origin_y = y0;
      CHECK (cudafx_nlbayes (&part, &out, &p, &o, NULL) == CUDAFX_OK, "part: %s", cudafx_error_message ());
      int differ = 0;
      for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++)
          for (int c = 0; c < colours; c++)
            differ += harness_get (&out, x + halo, y + halo, c) != harness_get (&whole, px + x, py + y, c);
      CHECK (differ == 0, "%d colours: %d values of the part differ from the whole run", colours, differ);
      /* The grid matters: the part at origin 0 0 differs. */
      p.origin_x = p.origin_y = 0;
      CHECK (cudafx_nlbayes (&part, &out, &p, &o, NULL) == CUDAFX_OK, "part: %s", cudafx_error_message ());
      differ = 0;
      for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++)
          for (int c = 0; c < colours; c++)
            differ += harness_get (&out, x + halo, y + halo, c) != harness_get (&whole, px + x, py + y, c);
      CHECK (differ > 0, "%d colours: the origin made no difference", colours);
      harness_image_free (&src);
      harness_image_free (&whole);
      harness_image_free (&out);
    }
}

/* Found by tests/fuzz: an f32 view whose stride is not a multiple of 4 made
 * the filters read misaligned floats; a table value no int holds was
 * converted to int (undefined); an unknown backend ran on the CPU silently. */
TEST (engine_rejects_bad_views_and_values)
{
  cudafx_image src = harness_image_new (5, 3, 1, 0, CUDAFX_F32, 8);
  cudafx_image dst = harness_image_new (5, 3, 1, 0, CUDAFX_F32, 8);
  cudafx_median_params p;
  cudafx_median_params_init (&p);
  cudafx_options o = harness_cpu_options ();

  src.stride -= 2;
  CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "stride"), "f32 stride of 22 bytes accepted (%s)",
         cudafx_error_message ());
  src.stride += 2;
  CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_OK, "aligned view rejected");

  o.backend = (cudafx_backend) 7;
  CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "backend 7"), "backend 7 accepted (%s)",
         cudafx_error_message ());

  double values[4] = { 1e300, 50, 0, CUDAFX_BACKEND_CPU };
  cudafx_filter_params fp;
  cudafx_filter_params_from_values (CUDAFX_FILTER_MEDIAN, values, NULL, 0, &fp);
  o = harness_cpu_options ();
  CHECK (cudafx_run_filter (CUDAFX_FILTER_MEDIAN, &fp, &src, &dst, &o, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "radius"), "radius 1e300 accepted (%s)",
         cudafx_error_message ());
  harness_image_free (&src);
  harness_image_free (&dst);
}

#ifndef CUDAFX_HAVE_CUDA
/* A build without nvcc (make check-asan's) has no CUDA backend: backend cuda
 * says so, and auto runs on the CPU with that reason. */
TEST (engine_cuda_not_built)
{
  cudafx_image src = harness_image_new (4, 3, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (4, 3, 3, 0, CUDAFX_U8, 0);
  cudafx_median_params p;
  cudafx_median_params_init (&p);
  cudafx_report report;
  cudafx_options o;
  cudafx_options_init (&o);
  o.report = &report;
  o.backend = CUDAFX_BACKEND_CUDA;
  CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_ERR_CUDA_NOT_BUILT &&
         strstr (cudafx_error_message (), "median: backend cuda: built without CUDA"),
         "backend cuda without CUDA: %s", cudafx_error_message ());
  o.backend = CUDAFX_BACKEND_AUTO;
  CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_OK && report.backend_used == CUDAFX_BACKEND_CPU,
         "auto without CUDA did not run on the CPU (%s)", cudafx_error_message ());
  harness_image_free (&src);
  harness_image_free (&dst);
}

/* Automatic nl-bayes runs nl-means' estimate first: a backend that cannot
 * run it is reported under the name of the filter asked for. */
TEST (engine_cuda_not_built_names_the_filter_asked_for)
{
  cudafx_image src = harness_image_new (16, 16, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (16, 16, 3, 0, CUDAFX_U8, 0);
  cudafx_nlbayes_params p;
  cudafx_nlbayes_params_init (&p);
  cudafx_options o;
  cudafx_options_init (&o);
  o.backend = CUDAFX_BACKEND_CUDA;
  CHECK (p.automatic && cudafx_nlbayes (&src, &dst, &p, &o, NULL) == CUDAFX_ERR_CUDA_NOT_BUILT &&
           strstr (cudafx_error_message (), "nl-bayes: backend cuda: built without CUDA"),
         "automatic nl-bayes on backend cuda without CUDA: %s", cudafx_error_message ());
  harness_image_free (&src);
  harness_image_free (&dst);
}
#endif

static void *
warm_up_thread (void *unused)
{
  cudafx_backend_warm_up ();
  return NULL;
}

/* A host starts the backend on a thread of its own while its first filter
 * call may already run: both at once, the call's pixels are the CPU's, its
 * status and message its own (the warm-up reports nothing), and a filter
 * after a finished warm-up is as right. */
TEST (engine_warm_up_beside_a_filter_call)
{
  harness_rng  rng = { 17 };
  cudafx_image src = harness_image_new (97, 61, 3, 0, CUDAFX_U8, 5);
  cudafx_image ref = harness_image_new (97, 61, 3, 0, CUDAFX_U8, 5);
  cudafx_image dst = harness_image_new (97, 61, 3, 0, CUDAFX_U8, 5);
  cudafx_median_params p;
  cudafx_options o = harness_options (), cpu = harness_cpu_options ();
  pthread_t thread;

  harness_image_random (&src, &rng);
  cudafx_median_params_init (&p);
  p.radius = 2;
  CHECK (cudafx_median (&src, &ref, &p, &cpu) == CUDAFX_OK, "cpu: %s", cudafx_error_message ());
  for (int round = 0; round < 2; round++)
    {
      int started = pthread_create (&thread, NULL, warm_up_thread, NULL) == 0;
      CHECK (started, "no thread");
      harness_image_poison (&dst);
      CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_OK && !*cudafx_error_message (),
             "round %d: %s", round, cudafx_error_message ());
      if (started)
        pthread_join (thread, NULL);
      CHECK (harness_same_pixels (&ref, &dst), "round %d: not the CPU's pixels", round);
    }
  cudafx_backend_warm_up ();
  harness_image_poison (&dst);
  CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_OK && harness_same_pixels (&ref, &dst),
         "after the warm-up: %s", cudafx_error_message ());
  harness_image_free (&src);
  harness_image_free (&ref);
  harness_image_free (&dst);
}

/* cudafx_host_alloc's memory holds images like any other: a filter on it
 * gives the same pixels. Without CUDA, and with CUDAFX_BACKEND=cpu where
 * there is CUDA, nothing is pinned nor pinnable. */
TEST (engine_host_memory)
{
  harness_rng  rng = { 23 };
  cudafx_image src = harness_image_new (53, 37, 3, 0, CUDAFX_U8, 7);
  cudafx_image ref = harness_image_new (53, 37, 3, 0, CUDAFX_U8, 7);
  cudafx_image in = src, out = ref;
  const size_t bytes = src.stride * src.height;
  const char  *env = getenv ("CUDAFX_BACKEND");
  char        *saved = env ? strdup (env) : NULL;
  cudafx_median_params p;
  cudafx_options o = harness_options (), cpu = harness_cpu_options ();

  harness_image_random (&src, &rng);
  cudafx_median_params_init (&p);
  p.radius = 2;
  CHECK (cudafx_median (&src, &ref, &p, &cpu) == CUDAFX_OK, "cpu: %s", cudafx_error_message ());
  in.data = cudafx_host_alloc (bytes);
  out.data = cudafx_host_alloc (bytes);
  CHECK (in.data && out.data, "no host memory");
  if (in.data && out.data)
    {
      memcpy (in.data, src.data, bytes);
      memset (out.data, 0xA5, bytes);
      CHECK (cudafx_median (&in, &out, &p, &o) == CUDAFX_OK && harness_same_pixels (&ref, &out),
             "median on host memory: %s", cudafx_error_message ());
    }
#ifndef CUDAFX_HAVE_CUDA
  CHECK (!cudafx_host_pinnable () && !cudafx_host_pinned (in.data, 1),
         "pinned memory without CUDA");
#endif
  cudafx_host_free (in.data);
  cudafx_host_free (out.data);
  cudafx_host_free (NULL);
  in.data = cudafx_host_alloc (0);
  CHECK (in.data != NULL, "no memory for 0 bytes");
  cudafx_host_free (in.data);

  setenv ("CUDAFX_BACKEND", "cpu", 1);
  in.data = cudafx_host_alloc (bytes);
  CHECK (in.data && !cudafx_host_pinnable () && !cudafx_host_pinned (in.data, bytes),
         "CUDAFX_BACKEND=cpu: pinned memory");
  cudafx_host_free (in.data);
  if (saved)
    setenv ("CUDAFX_BACKEND", saved, 1);
  else
    unsetenv ("CUDAFX_BACKEND");
  free (saved);
  harness_image_free (&src);
  harness_image_free (&ref);
}

/* What options.rows_ready heard: rows in order from 0 (again from 0 after
 * a fallback), each copied out of dst when reported, so that a copy equal
 * to the final dst shows the rows were final then. */
typedef struct {
  const cudafx_image *dst;
  cudafx_image        seen;
  int                 next, calls, restarts, out_of_order;
} rows_heard;

static void
hear_rows (int y0, int y1, void *data)
{
  rows_heard *h = data;
  if (y0 == 0 && h->next > 0)
    h->restarts++;
  else if (y0 != h->next)
    h->out_of_order++;
  if (y0 < 0 || y1 <= y0 || y1 > h->dst->height)
    {
      h->out_of_order++;
      return;
    }
  for (int y = y0; y < y1; y++)
    memcpy ((unsigned char *) h->seen.data + (size_t) y * h->seen.stride,
            (const unsigned char *) h->dst->data + (size_t) y * h->dst->stride, h->seen.stride);
  h->next = y1;
  h->calls++;
}

static cudafx_status
rows_filter (int f, const cudafx_image *src, cudafx_image *dst, const cudafx_options *o)
{
  cudafx_median_params mp;
  cudafx_convolve_params cp;
  cudafx_nlmeans_params np;
  cudafx_quantize_params qp;
  switch (f)
    {
    case 0:
      cudafx_median_params_init (&mp);
      mp.radius = 3;
      return cudafx_median (src, dst, &mp, o);
    case 1:
      cudafx_convolve_params_init (&cp);
      cp.preset = CUDAFX_PRESET_GAUSSIAN;
      cp.sigma = 2;
      return cudafx_convolve (src, dst, &cp, o);
    case 2:
      cudafx_nlmeans_params_init (&np);
      np.sigma = 20; /* automatic with σ given, as the GEGL operation calls it */
      return cudafx_nlmeans (src, dst, &np, o, NULL);
    case 3:
    case 4:
      cudafx_quantize_params_init (&qp);
      qp.colors = 8;
      qp.dither = f == 4 ? CUDAFX_DITHER_FLOYD_STEINBERG : CUDAFX_DITHER_NONE;
      return cudafx_quantize (src, dst, &qp, o, NULL);
    case 5:
      cudafx_convolve_params_init (&cp);
      cp.preset = CUDAFX_PRESET_BLUR_5X5;
      cp.border = CUDAFX_BORDER_WRAP;
      return cudafx_convolve (src, dst, &cp, o);
    case 6:
      cudafx_nlmeans_params_init (&np); /* automatic: the σ found first, on the whole image */
      return cudafx_nlmeans (src, dst, &np, o, NULL);
    }
  return CUDAFX_ERR_INVALID_ARG;
}

/* The CUDA set-ups of the rows tests, by number: the default, 7 or 16
 * pipelined stripes, stripes one after another under a memory cap (more for
 * nl-means' halo and sums, filters 2 and 6), and a fault at stripe 3 that
 * falls back to the CPU (automatic backend); rows_setup_end undoes it.
 * Named in rows_setups. */
static const char *const rows_setups[] = { "default", "stripes 7", "stripes 16", "memory cap", "fault" };

static void
rows_setup (int setup, int f, cudafx_options *o)
{
  if (setup == 1 || setup == 2)
    setenv ("CUDAFX_CUDA_STRIPES", setup == 1 ? "7" : "16", 1);
  if (setup == 3)
    setenv ("CUDAFX_CUDA_MEM_LIMIT", f == 2 || f == 6 ? "1M" : "64K", 1);
  if (setup == 4)
    {
      setenv ("CUDAFX_CUDA_STRIPES", "7", 1);
      setenv ("CUDAFX_CUDA_FAIL", "stripe3", 1);
      o->backend = CUDAFX_BACKEND_AUTO;
    }
}

static void
rows_setup_end (void)
{
  unsetenv ("CUDAFX_CUDA_STRIPES");
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
  unsetenv ("CUDAFX_CUDA_FAIL");
}

/* Every filter reports its rows through options.rows_ready as they become
 * final, in order, all of them by the call's end, in one stripe or many,
 * pipelined or under a memory cap, in plain or pinned memory, and after a
 * fallback to the CPU again from row 0 with the CPU's values; never for a
 * call that fails nor for nl-means' estimate. The GPU's striped runs (make
 * check-gpu) are what this is for; the CPU reports all rows at its end. */
TEST_SHARDED (engine_rows_ready_reports_final_rows_in_order, 8)
{
  static const char *const names[] = { "median", "convolve", "nl-means", "quantize", "quantize F-S" };
  harness_rng rng = { 41 };
  cudafx_image src = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  cudafx_image ref = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  cudafx_image plain = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  rows_heard h = { NULL, harness_image_new (257, 301, 3, 0, CUDAFX_U8, 0), 0, 0, 0, 0 };
  cudafx_image pinned = plain;
  harness_image_random (&src, &rng);
  pinned.data = cudafx_host_alloc (plain.stride * plain.height);
  CHECK (pinned.data != NULL, "out of host memory");
  for (int f = 0; f < 5 && pinned.data; f++)
    for (int setup = 0; setup < 5; setup++)
      for (int memory = 0; memory < 2; memory++)
        {
          if (!harness_case ())
            continue;
          cudafx_image *out = memory ? &pinned : &plain;
          cudafx_options o = harness_options ();
          cudafx_report report, ref_report;
          memset (&ref_report, 0, sizeof ref_report);
          o.report = &ref_report;
          CHECK (rows_filter (f, &src, &ref, &o) == CUDAFX_OK, "%s: %s", names[f], cudafx_error_message ());
          rows_setup (setup, f, &o);
          harness_image_poison (out);
          harness_image_poison (&h.seen);
          h.dst = out;
          h.next = h.calls = h.restarts = h.out_of_order = 0;
          memset (&report, 0, sizeof report);
          o.report = &report;
          o.rows_ready = hear_rows;
          o.rows_user = &h;
          cudafx_status s = rows_filter (f, &src, out, &o);
          rows_setup_end ();
          CHECK (s == CUDAFX_OK, "%s, %s, memory %d: %s", names[f], rows_setups[setup], memory, cudafx_error_message ());
          CHECK (h.next == out->height && h.calls > 0 && !h.out_of_order,
                 "%s, %s, memory %d: rows reported up to %d of %d in %d calls, %d out of order", names[f],
                 rows_setups[setup], memory, h.next, out->height, h.calls, h.out_of_order);
          CHECK (h.restarts == 0 || report.backend_used == CUDAFX_BACKEND_CPU,
                 "%s, %s: rows reported again from 0 without a fallback", names[f], rows_setups[setup]);
          CHECK (harness_same_pixels (&h.seen, out), "%s, %s, memory %d: a row changed after it was reported",
                 names[f], rows_setups[setup], memory);
          /* nl-means on the GPU within ±1 of the CPU: the reference and a
           * fallback may have run on different backends. */
          double tolerance = f == 2 && report.backend_used != ref_report.backend_used ? 1 : 0;
          CHECK (harness_max_diff (&ref, out) <= tolerance, "%s, %s, memory %d: differs from a run without "
                 "rows_ready by %g", names[f], rows_setups[setup], memory, harness_max_diff (&ref, out));
        }

  /* No rows for a call that fails or has no output. */
  cudafx_options o = harness_options ();
  cudafx_median_params mp;
  cudafx_nlmeans_info info;
  cudafx_median_params_init (&mp);
  mp.radius = 1000;
  h.dst = &plain;
  h.calls = 0;
  o.rows_ready = hear_rows;
  o.rows_user = &h;
  CHECK (cudafx_median (&src, &plain, &mp, &o) == CUDAFX_ERR_INVALID_ARG && h.calls == 0,
         "a failed call reported rows");
  CHECK (cudafx_nlmeans_estimate (&src, &o, &info) == CUDAFX_OK && h.calls == 0, "nl-means' estimate reported rows");
  cudafx_host_free (pinned.data);
  harness_image_free (&src);
  harness_image_free (&ref);
  harness_image_free (&plain);
  harness_image_free (&h.seen);
}

/* rows_ready's calls, noted beside options.rows_needed's asks (after a
 * failed first ask no rows must come out). */
static void
note_report (int y0, int y1, void *data)
{
  harness_rows *a = data;
  a->reports++;
}

/* Every filter asks for its source's rows through options.rows_needed before
 * it reads them, with y growing, never beyond the image, all rows by the
 * end: the GPU's stripe pipeline (median, convolve, nl-means with σ given)
 * stripe by stripe (more than one ask, the first for part of the image), in
 * plain or pinned memory, pipelined or under a memory cap; the CPU,
 * quantize (on the GPU in pieces, one for so small an image;
 * gpu_quantize_rows_in_pieces_match_cpu asks for more), the wrap border and
 * nl-means' own σ all rows at once first, and
 * a fallback to the CPU the rest before it starts. On the CPU (make check) only the all-first
 * rule shows; make check-gpu runs the stripes. */
TEST_SHARDED (engine_rows_needed_asks_each_row_before_use, 8)
{
  static const char *const names[] = { "median", "convolve", "nl-means", "quantize", "quantize F-S",
                                       "convolve wrap", "nl-means automatic" };
  static const char *const engine_names[] = { "median", "convolve", "nl-means", "quantize", "quantize",
                                              "convolve", "nl-means" };
  harness_rng rng = { 43 };
  cudafx_image real = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  cudafx_image ref = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  cudafx_image out = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  cudafx_image plain = harness_image_new (257, 301, 3, 0, CUDAFX_U8, 3);
  cudafx_image pinned = plain;
  harness_image_random (&real, &rng);
  pinned.data = cudafx_host_alloc (plain.stride * plain.height);
  CHECK (pinned.data != NULL, "out of host memory");
  for (int f = 0; f < 7 && pinned.data; f++)
    for (int setup = 0; setup < 5; setup++)
      for (int memory = 0; memory < 2; memory++)
        {
          if (!harness_case ())
            continue;
          cudafx_image *lazy = memory ? &pinned : &plain;
          cudafx_options o = harness_options ();
          cudafx_report report, ref_report;
          memset (&ref_report, 0, sizeof ref_report);
          o.report = &ref_report;
          CHECK (rows_filter (f, &real, &ref, &o) == CUDAFX_OK, "%s: %s", names[f], cudafx_error_message ());
          rows_setup (setup, f, &o);
          harness_image_poison (lazy);
          harness_rows a = { &real, lazy, 0, 0, 0, 0, 0, 0, 0 };
          memset (&report, 0, sizeof report);
          o.report = &report;
          o.rows_needed = harness_ask_rows;
          o.rows_ready = note_report;
          o.rows_user = &a;
          cudafx_status s = rows_filter (f, lazy, &out, &o);
          rows_setup_end ();
          CHECK (s == CUDAFX_OK, "%s, %s, memory %d: %s", names[f], rows_setups[setup], memory, cudafx_error_message ());
          CHECK (a.asked == real.height && !a.backwards && !a.beyond,
                 "%s, %s, memory %d: rows asked up to %d of %d in %d calls, %d not growing, %d beyond the image",
                 names[f], rows_setups[setup], memory, a.asked, real.height, a.calls, a.backwards, a.beyond);
          double tolerance = (f == 2 || f == 6) && report.backend_used != ref_report.backend_used ? 1 : 0;
          CHECK (harness_max_diff (&ref, &out) <= tolerance,
                 "%s, %s, memory %d: differs from a run on the whole source by %g (a row read before it was "
                 "asked for)", names[f], rows_setups[setup], memory, harness_max_diff (&ref, &out));
          int streams = report.backend_used == CUDAFX_BACKEND_CUDA && (f <= 2) && (setup == 1 || setup == 2);
          if (streams)
            CHECK (a.calls > 1 && a.first_ask < real.height,
                   "%s, %s, memory %d: on the GPU's stripes, %d asks, the first for %d rows of %d", names[f],
                   rows_setups[setup], memory, a.calls, a.first_ask, real.height);
          if (report.backend_used == CUDAFX_BACKEND_CPU || f == 3 || f == 4 || f == 5)
            CHECK (a.calls == 1 || (setup == 4 && report.backend_used == CUDAFX_BACKEND_CPU),
                   "%s, %s, memory %d: %d asks where all rows are needed first", names[f], rows_setups[setup], memory,
                   a.calls);
        }

  /* A host that cannot provide rows ends the call: on the first ask, with
   * nothing reported; on a later one (the GPU's stripes), without a
   * fallback to the CPU asking again. */
  for (int f = 0; f < 7 && pinned.data; f++)
    for (int fail_at = 1; fail_at <= 3; fail_at += 2)
      {
        if (!harness_case ())
          continue;
        cudafx_options o = harness_options ();
        o.backend = CUDAFX_BACKEND_AUTO;
        harness_rows a = { &real, &plain, 0, 0, 0, 0, fail_at, 0, 0 };
        harness_image_poison (&plain);
        o.rows_needed = harness_ask_rows;
        o.rows_ready = note_report;
        o.rows_user = &a;
        setenv ("CUDAFX_CUDA_STRIPES", "7", 1);
        cudafx_status s = rows_filter (f, &plain, &out, &o);
        unsetenv ("CUDAFX_CUDA_STRIPES");
        if (a.calls < fail_at)
          CHECK (s == CUDAFX_OK, "%s: %s", names[f], cudafx_error_message ());
        else
          CHECK (s == CUDAFX_ERR_CANCELLED && a.calls == fail_at &&
                     strstr (cudafx_error_message (), "could not provide") &&
                     strstr (cudafx_error_message (), engine_names[f]),
                 "%s, failing ask %d: status %d after %d asks, \"%s\"", names[f], fail_at, (int) s, a.calls,
                 cudafx_error_message ());
        if (fail_at == 1)
          CHECK (a.reports == 0, "%s: rows reported after the first ask failed", names[f]);
      }

  /* A call without output (nl-means' estimate) asks for every row first. */
  cudafx_options o = harness_options ();
  cudafx_nlmeans_info whole_info, lazy_info;
  harness_rows a = { &real, &plain, 0, 0, 0, 0, 0, 0, 0 };
  harness_image_poison (&plain);
  CHECK (cudafx_nlmeans_estimate (&real, &o, &whole_info) == CUDAFX_OK, "%s", cudafx_error_message ());
  o.rows_needed = harness_ask_rows;
  o.rows_user = &a;
  CHECK (cudafx_nlmeans_estimate (&plain, &o, &lazy_info) == CUDAFX_OK && a.asked == real.height &&
             lazy_info.sigma == whole_info.sigma,
         "nl-means' estimate: rows asked up to %d, σ %g (%g on the whole source)", a.asked, lazy_info.sigma,
         whole_info.sigma);
  cudafx_host_free (pinned.data);
  harness_image_free (&real);
  harness_image_free (&ref);
  harness_image_free (&out);
  harness_image_free (&plain);
}
