/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GEGL operations timed in a GEGL graph, beside GEGL's nearest
 * built-in operations and the data movement no operation can avoid.
 *
 *   gegl_bench [IMAGE [WIDTHxHEIGHT]]   (default tests/data/astronaut.png tiled to 4000x3000)
 *   GEGL_BENCH_ONLY=TEXT: only the warm operations whose label holds TEXT
 *   (the built-ins take most of a run's time)
 *
 * On a 12 MP "R'G'B' u8" buffer: the first call in the process (CUDA start
 * included) and the same in a second graph; the data movement: reading the
 * region out of GEGL in the operation's format, writing it back, and a
 * pinned host↔device round trip of it (libcudart loaded at run time, so
 * this program builds where there is no CUDA), at once and spread over
 * GEGL's threads in bands, as the operations do, and a set into a new
 * buffer, as an uncached operation's output is; each cudafx operation warm
 * (buffer-source → op → write-buffer, the op's property set again before
 * each run so that no cache answers); GEGL's built-ins in the same graph
 * (GEGL_THREADS from the environment); and a 1920x1080 region of warm
 * nl-means, as a canvas preview asks.
 *
 * Each cudafx operation alternates with the movement it is held to (the
 * get on GEGL's threads, the set into a new buffer on GEGL's threads and
 * the pinned round trip; and, stricter, the same with the set into a
 * buffer's existing tiles), one run of each a round, so that its ratio
 * compares runs made next to one another: GEGL's set alone moves by a few
 * milliseconds over a process's life. Times are medians of RUNS (5) runs,
 * or ROUNDS (9) rounds, after one warm-up, in milliseconds. */
#include <dlfcn.h>
#include <gegl.h>
#include <gegl-plugin.h> /* GeglOperationFilter: the move operation below */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS   5
#define ROUNDS 9

static int W = 4000, H = 3000;

static double
now_ms (void)
{
  return g_get_monotonic_time () / 1000.0;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

static double
median_of (double *t, int n)
{
  qsort (t, n, sizeof *t, cmp_double);
  return t[n / 2];
}

/* The source image tiled over W x H. */
static GeglBuffer *
make_input (const char *path, const Babl *format)
{
  GeglNode     *graph = gegl_node_new (), *load, *sink;
  GeglBuffer   *small = NULL, *big;
  GeglRectangle r;
  guint8       *tile, *pixels;
  int           bpp = babl_format_get_bytes_per_pixel (format);

  load = gegl_node_new_child (graph, "operation", "gegl:load", "path", path, NULL);
  sink = gegl_node_new_child (graph, "operation", "gegl:buffer-sink", "buffer", &small, NULL);
  gegl_node_link (load, sink);
  gegl_node_process (sink);
  g_object_unref (graph);
  if (!small)
    {
      fprintf (stderr, "cannot load %s\n", path);
      exit (1);
    }
  r = *gegl_buffer_get_extent (small);
  tile = g_malloc ((gsize) r.width * r.height * bpp);
  gegl_buffer_get (small, &r, 1.0, format, tile, GEGL_AUTO_ROWSTRIDE, GEGL_ABYSS_NONE);
  pixels = g_malloc ((gsize) W * H * bpp);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      memcpy (pixels + ((gsize) y * W + x) * bpp,
              tile + ((gsize) (y % r.height) * r.width + x % r.width) * bpp, bpp);
  big = gegl_buffer_new (GEGL_RECTANGLE (0, 0, W, H), format);
  gegl_buffer_set (big, GEGL_RECTANGLE (0, 0, W, H), 0, format, pixels, GEGL_AUTO_ROWSTRIDE);
  g_free (tile);
  g_free (pixels);
  g_object_unref (small);
  return big;
}

typedef struct
{
  const char *label;
  const char *op;
  const char *props; /* "name=value name=value", ints, doubles or enum nicks */
} job;

/* Sets "name=value" pairs on node, converting by the property's type. */
static void
set_props (GeglNode *node, const char *props)
{
  gchar **pairs = g_strsplit (props, " ", -1);

  for (int i = 0; pairs[i]; i++)
    {
      gchar     **kv = g_strsplit (pairs[i], "=", 2);
      GParamSpec *pspec;
      GValue      text = G_VALUE_INIT, value = G_VALUE_INIT;

      if (!kv[0] || !*kv[0] || !kv[1])
        {
          g_strfreev (kv);
          continue;
        }
      pspec = gegl_node_find_property (node, kv[0]);
      if (!pspec)
        {
          fprintf (stderr, "%s has no property %s\n", gegl_node_get_operation (node), kv[0]);
          exit (1);
        }
      g_value_init (&value, pspec->value_type);
      if (G_IS_PARAM_SPEC_ENUM (pspec))
        {
          GEnumValue *e = g_enum_get_value_by_nick (G_PARAM_SPEC_ENUM (pspec)->enum_class, kv[1]);
          if (!e)
            {
              fprintf (stderr, "%s: no %s '%s'\n", gegl_node_get_operation (node), kv[0], kv[1]);
              exit (1);
            }
          g_value_set_enum (&value, e->value);
        }
      else if (pspec->value_type == G_TYPE_STRING)
        g_value_set_string (&value, kv[1]);
      else if (pspec->value_type == G_TYPE_BOOLEAN)
        g_value_set_boolean (&value, !strcmp (kv[1], "true"));
      else
        {
          g_value_init (&text, G_TYPE_DOUBLE);
          g_value_set_double (&text, g_ascii_strtod (kv[1], NULL));
          g_value_transform (&text, &value);
        }
      gegl_node_set_property (node, kv[0], &value);
      g_value_unset (&value);
      if (G_IS_VALUE (&text))
        g_value_unset (&text);
      g_strfreev (kv);
    }
  g_strfreev (pairs);
}

/* One run of input → op → a new buffer; returns ms. */
static double
run_graph (GeglBuffer *input, const job *j, GeglNode **op_out)
{
  GeglNode   *graph = gegl_node_new (), *src, *op, *sink;
  GeglBuffer *output = NULL;
  double      t0, t;

  src = gegl_node_new_child (graph, "operation", "gegl:buffer-source", "buffer", input, NULL);
  op = gegl_node_new_child (graph, "operation", j->op, NULL);
  set_props (op, j->props);
  sink = gegl_node_new_child (graph, "operation", "gegl:buffer-sink", "buffer", &output, NULL);
  gegl_node_link_many (src, op, sink, NULL);
  t0 = now_ms ();
  gegl_node_process (sink);
  t = now_ms () - t0;
  if (op_out)
    *op_out = g_object_ref (op);
  g_clear_object (&output);
  g_object_unref (graph);
  return t;
}

/* A warm graph: buffer-source → op → write-buffer into a buffer of its
 * own, processed again and again. */
typedef struct
{
  const job  *j;
  GeglNode   *graph, *op, *sink;
  GeglBuffer *output;
} warm_graph;

static void
warm_graph_init (warm_graph *w, GeglBuffer *input, const job *j)
{
  GeglNode *src;

  w->j = j;
  w->graph = gegl_node_new ();
  src = gegl_node_new_child (w->graph, "operation", "gegl:buffer-source", "buffer", input, NULL);
  w->op = gegl_node_new_child (w->graph, "operation", j->op, NULL);
  w->sink = gegl_node_new_child (w->graph, "operation", "gegl:write-buffer", NULL);
  w->output = gegl_buffer_new (gegl_buffer_get_extent (input), gegl_buffer_get_format (input));
  gegl_node_set (w->sink, "buffer", w->output, NULL);
  gegl_node_link_many (src, w->op, w->sink, NULL);
}

/* One run, the properties set again first (a set invalidates the node, so
 * no cache answers); returns ms. */
static double
warm_graph_run (warm_graph *w)
{
  double t0;

  set_props (w->op, w->j->props);
  t0 = now_ms ();
  gegl_node_process (w->sink);
  return now_ms () - t0;
}

/* The σ automatic nl-means found, else 0. */
static double
warm_graph_sigma (warm_graph *w)
{
  double sigma = 0;

  if (gegl_node_find_property (w->op, "noise-sigma"))
    gegl_node_get (w->op, "noise-sigma", &sigma, NULL);
  return sigma;
}

static void
warm_graph_clear (warm_graph *w)
{
  g_object_unref (w->output);
  g_object_unref (w->graph);
}

/* Median of RUNS warm runs after one. */
static double
warm (GeglBuffer *input, const job *j)
{
  warm_graph w;
  double     t[RUNS];

  warm_graph_init (&w, input, j);
  for (int i = -1; i < RUNS; i++)
    {
      double ms = warm_graph_run (&w);
      if (i >= 0)
        t[i] = ms;
    }
  warm_graph_clear (&w);
  return median_of (t, RUNS);
}

/* gegl_buffer_get or _set of a whole W x H region, band by band on GEGL's
 * threads, as the operations move their regions. */
typedef struct
{
  GeglBuffer *buffer;
  const Babl *format;
  guint8     *pixels;
  gboolean    set;
} band_move;

static void
move_band (const GeglRectangle *band, gpointer data)
{
  const band_move *m = data;
  gsize            bpp = babl_format_get_bytes_per_pixel (m->format), stride = (gsize) W * bpp;
  guint8          *p = m->pixels + (gsize) band->y * stride + (gsize) band->x * bpp;

  if (m->set)
    gegl_buffer_set (m->buffer, band, 0, m->format, p, stride);
  else
    gegl_buffer_get (m->buffer, band, 1.0, m->format, p, stride, GEGL_ABYSS_NONE);
}

/* One move of the whole region; buffer NULL: a set into a new buffer, as
 * an operation's output in a graph is; threaded: in bands on GEGL's
 * threads, else at once. Returns ms. */
static double
one_move (GeglBuffer *buffer, const Babl *format, guint8 *pixels, gboolean set, gboolean threaded)
{
  band_move m = { buffer ? buffer : gegl_buffer_new (GEGL_RECTANGLE (0, 0, W, H), format), format, pixels, set };
  double    t0 = now_ms (), ms;

  if (threaded)
    gegl_parallel_distribute_area (GEGL_RECTANGLE (0, 0, W, H), 64 * 1024, GEGL_SPLIT_STRATEGY_HORIZONTAL,
                                   move_band, &m);
  else
    move_band (GEGL_RECTANGLE (0, 0, W, H), &m);
  ms = now_ms () - t0;
  if (!buffer)
    g_object_unref (m.buffer);
  return ms;
}

/* Median of RUNS moves after one. */
static double
timed_move (GeglBuffer *buffer, const Babl *format, guint8 *pixels, gboolean set, gboolean threaded)
{
  double t[RUNS];

  for (int i = -1; i < RUNS; i++)
    {
      double ms = one_move (buffer, format, pixels, set, threaded);
      if (i >= 0)
        t[i] = ms;
    }
  return median_of (t, RUNS);
}

/* ---- a filter that only moves its region, in the graph -------------------- */

/* cudafx-bench:move reads its whole region out of GEGL and sets it into its
 * output, band by band on GEGL's threads, in a graph like the cudafx
 * operations' (buffer-source → op → write-buffer): the data movement plus
 * what GEGL does around any filter's process() (its output buffer, kept
 * between runs as the cudafx operations' is, and the write into the sink's
 * buffer). "run" only invalidates the node between runs, as the other
 * jobs' properties do. */
typedef struct
{
  GeglOperationFilter parent_instance;
  int                 run;
  guint8             *pixels; /* one region's, kept across runs as the cudafx operations keep theirs */
} BenchMove;
typedef struct
{
  GeglOperationFilterClass parent_class;
} BenchMoveClass;

G_DEFINE_TYPE (BenchMove, bench_move, GEGL_TYPE_OPERATION_FILTER)

static void
bench_move_set_property (GObject *object, guint id, const GValue *value, GParamSpec *pspec)
{
  ((BenchMove *) object)->run = g_value_get_int (value);
}

static void
bench_move_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  g_value_set_int (value, ((BenchMove *) object)->run);
}

static void
bench_move_finalize (GObject *object)
{
  g_free (((BenchMove *) object)->pixels);
  G_OBJECT_CLASS (bench_move_parent_class)->finalize (object);
}

static void
bench_move_prepare (GeglOperation *operation)
{
  gegl_operation_set_format (operation, "input", babl_format ("R'G'B' u8"));
  gegl_operation_set_format (operation, "output", babl_format ("R'G'B' u8"));
}

static gboolean
bench_move_process (GeglOperation *operation, GeglBuffer *input, GeglBuffer *output,
                    const GeglRectangle *result, gint level)
{
  BenchMove *self = (BenchMove *) operation;
  const Babl *format = babl_format ("R'G'B' u8");

  if (result->x || result->y || result->width != W || result->height != H)
    return FALSE; /* the benchmark asks for the whole image only */
  if (!self->pixels)
    self->pixels = g_malloc ((gsize) W * H * 3);
  gegl_parallel_distribute_area (result, 64 * 1024, GEGL_SPLIT_STRATEGY_HORIZONTAL, move_band,
                                 &(band_move) { input, format, self->pixels, FALSE });
  gegl_parallel_distribute_area (result, 64 * 1024, GEGL_SPLIT_STRATEGY_HORIZONTAL, move_band,
                                 &(band_move) { output, format, self->pixels, TRUE });
  return TRUE;
}

static GeglRectangle
bench_move_cached_region (GeglOperation *operation, const GeglRectangle *roi)
{
  return *roi;
}

static void
bench_move_class_init (BenchMoveClass *klass)
{
  GObjectClass       *object_class = G_OBJECT_CLASS (klass);
  GeglOperationClass *operation_class = GEGL_OPERATION_CLASS (klass);

  object_class->set_property = bench_move_set_property;
  object_class->get_property = bench_move_get_property;
  object_class->finalize = bench_move_finalize;
  g_object_class_install_property (object_class, 1,
                                   g_param_spec_int ("run", "run", "run", 0, G_MAXINT, 0,
                                                     G_PARAM_READWRITE | GEGL_PARAM_PAD_INPUT));
  operation_class->prepare = bench_move_prepare;
  operation_class->threaded = FALSE; /* one process() over the whole region, as the cudafx operations ask */
  operation_class->get_cached_region = bench_move_cached_region;      /* its output kept, as theirs is */
  GEGL_OPERATION_FILTER_CLASS (klass)->process = bench_move_process;
  gegl_operation_class_set_keys (operation_class, "name", "cudafx-bench:move", "categories", "hidden",
                                 "description", "the region read and set, nothing else", NULL);
}

static void
bench_move_init (BenchMove *self)
{
}

/* ---- the pinned host<->device round trip, through libcudart loaded here --- */

typedef int (*host_alloc_fn) (void **, size_t, unsigned);
typedef int (*malloc_fn) (void **, size_t);
typedef int (*memcpy_fn) (void *, const void *, size_t, int);
typedef int (*sync_fn) (void);

typedef struct
{
  memcpy_fn copy;
  sync_fn   sync;
  void     *host, *device;
  size_t    bytes;
} round_trip;

/* FALSE where there is no CUDA to time. */
static gboolean
round_trip_init (round_trip *r, size_t bytes)
{
  const char *names[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                          "/usr/local/cuda/lib64/libcudart.so" };
  void *lib = NULL;

  for (size_t i = 0; !lib && i < G_N_ELEMENTS (names); i++)
    lib = dlopen (names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return FALSE;
  host_alloc_fn host_alloc = (host_alloc_fn) dlsym (lib, "cudaHostAlloc");
  malloc_fn     dmalloc = (malloc_fn) dlsym (lib, "cudaMalloc");
  r->copy = (memcpy_fn) dlsym (lib, "cudaMemcpy");
  r->sync = (sync_fn) dlsym (lib, "cudaDeviceSynchronize");
  r->bytes = bytes;
  if (!host_alloc || !dmalloc || !r->copy || !r->sync || host_alloc (&r->host, bytes, 0) ||
      dmalloc (&r->device, bytes))
    return FALSE;
  memset (r->host, 1, bytes);
  return TRUE;
}

/* One host→device→host round trip of the region; ms. */
static double
round_trip_run (const round_trip *r)
{
  double t0 = now_ms ();

  r->copy (r->device, r->host, r->bytes, 1 /* host to device */);
  r->copy (r->host, r->device, r->bytes, 2 /* device to host */);
  r->sync ();
  return now_ms () - t0;
}

/* Whether GEGL_BENCH_ONLY lets this job run. */
static gboolean
selected (const job *j)
{
  const char *only = g_getenv ("GEGL_BENCH_ONLY");
  return !only || strstr (j->label, only);
}

int
main (int argc, char **argv)
{
  const char *path = argc > 1 ? argv[1] : "tests/data/astronaut.png";
  const Babl *format;
  GeglBuffer *input;
  size_t      bytes;
  double      t[RUNS], get_ms, set_ms, first_ms, pinned_ms = -1, sigma = 0;
  guint8     *pixels;
  GeglBuffer *copy;
  GeglNode   *first_op = NULL;
  round_trip  trip;
  gboolean    have_cuda;

  setvbuf (stdout, NULL, _IOLBF, 0);
  if (argc > 2 && sscanf (argv[2], "%dx%d", &W, &H) != 2)
    {
      fprintf (stderr, "size '%s' is not WIDTHxHEIGHT\n", argv[2]);
      return 2;
    }
  bytes = (size_t) W * H * 3;
  gegl_init (&argc, &argv);
  format = babl_format ("R'G'B' u8");
  input = make_input (path, format);
  printf ("image %dx%d R'G'B' u8 (%.1f MP), GEGL threads %s\n", W, H, W * H / 1e6,
          g_getenv ("GEGL_THREADS") ? g_getenv ("GEGL_THREADS") : "default");

  /* First: nothing has started CUDA in this process yet. */
  first_ms = run_graph (input, &(job) { "median r1", "cudafx:median", "radius=1" }, &first_op);
  printf ("first call, cudafx:median radius 1 (CUDA start included): %.1f ms\n", first_ms);
  g_clear_object (&first_op);
  /* The same in a new graph with CUDA started: what a first call costs
   * beyond the engine's start-up (a new node's memory, GEGL's output). */
  printf ("second graph, cudafx:median radius 1 (new node, CUDA started): %.1f ms\n",
          run_graph (input, &(job) { "median r1", "cudafx:median", "radius=1" }, NULL));

  /* The data movement an operation cannot avoid. */
  pixels = g_malloc (bytes);
  copy = gegl_buffer_new (GEGL_RECTANGLE (0, 0, W, H), format);
  have_cuda = round_trip_init (&trip, bytes);
  get_ms = timed_move (input, format, pixels, FALSE, FALSE);
  set_ms = timed_move (copy, format, pixels, TRUE, FALSE);
  if (have_cuda)
    {
      for (int i = -1; i < RUNS; i++)
        {
          double ms = round_trip_run (&trip);
          if (i >= 0)
            t[i] = ms;
        }
      pinned_ms = median_of (t, RUNS);
    }
  printf ("data movement: gegl_buffer_get %.1f ms + gegl_buffer_set %.1f ms + pinned H2D+D2H %.1f ms"
          " = %.1f ms\n", get_ms, set_ms, pinned_ms, get_ms + set_ms + (pinned_ms > 0 ? pinned_ms : 0));
  /* The same get and set in bands on GEGL's threads, as the operations
   * move their regions: what is left of the data movement that way. */
  get_ms = timed_move (input, format, pixels, FALSE, TRUE);
  set_ms = timed_move (copy, format, pixels, TRUE, TRUE);
  printf ("data movement on GEGL's threads: get %.1f ms + set %.1f ms + pinned H2D+D2H %.1f ms = %.1f ms\n",
          get_ms, set_ms, pinned_ms, get_ms + set_ms + (pinned_ms > 0 ? pinned_ms : 0));
  /* An operation's output in a graph is a new buffer: its set allocates
   * the tiles. */
  printf ("gegl_buffer_set into a new buffer: %.1f ms, on GEGL's threads %.1f ms\n",
          timed_move (NULL, format, pixels, TRUE, FALSE), timed_move (NULL, format, pixels, TRUE, TRUE));

  g_type_class_unref (g_type_class_ref (bench_move_get_type ())); /* its name known to GEGL */
  const job ours[] = {
    { "cudafx floor: read + set in a graph", "cudafx-bench:move", "run=1" },
    { "cudafx:median r1 square", "cudafx:median", "radius=1" },
    { "cudafx:convolve blur 5x5", "cudafx:convolve", "preset=blur-5x5" },
    { "cudafx:convolve gaussian sigma 5", "cudafx:convolve", "preset=gaussian sigma=5" },
    { "cudafx:nl-means automatic", "cudafx:nl-means", "auto=true" },
    { "cudafx:nl-bayes automatic", "cudafx:nl-bayes", "auto=true" },
    { "cudafx:quantize 16 colors", "cudafx:quantize", "colors=16" },
  };
  const job builtins[] = {
    { "gegl:median-blur r1 square", "gegl:median-blur", "radius=1 neighborhood=square" },
    { "gegl:convolution-matrix 5x5", "gegl:convolution-matrix",
      "a1=1 a2=1 a3=1 a4=1 a5=1 b1=1 b2=1 b3=1 b4=1 b5=1 c1=1 c2=1 c3=1 c4=1 c5=1 "
      "d1=1 d2=1 d3=1 d4=1 d5=1 e1=1 e2=1 e3=1 e4=1 e5=1 normalize=true" },
    { "gegl:gaussian-blur sigma 5", "gegl:gaussian-blur", "std-dev-x=5 std-dev-y=5" },
    { "gegl:noise-reduction", "gegl:noise-reduction", "" },
  };
  /* Each cudafx operation in rounds with its movement: a round moves the
   * region (get, and set into a new buffer, on GEGL's threads, and the
   * pinned round trip), then runs the operation once. The operations set
   * into the tiles their cached output already has, which costs less than
   * a new buffer's: the row also gives the ratio to the movement with the
   * set into a buffer's existing tiles (ratio_kept), the stricter one. One
   * graph at a time: several would hold more tiles than GEGL's cache
   * keeps. */
  for (size_t k = 0; k < G_N_ELEMENTS (ours); k++)
    {
      warm_graph graph;
      double     move[ROUNDS], kept[ROUNDS], ms[ROUNDS], ratio[ROUNDS], ratio_kept[ROUNDS], s;

      if (!selected (&ours[k]))
        continue;
      warm_graph_init (&graph, input, &ours[k]);
      warm_graph_run (&graph);
      for (int r = 0; r < ROUNDS; r++)
        {
          double get = one_move (input, format, pixels, FALSE, TRUE);
          double trip_ms = have_cuda ? round_trip_run (&trip) : 0;

          move[r] = get + one_move (NULL, format, pixels, TRUE, TRUE) + trip_ms;
          kept[r] = get + one_move (copy, format, pixels, TRUE, TRUE) + trip_ms;
          ms[r] = warm_graph_run (&graph);
          ratio[r] = ms[r] / move[r];
          ratio_kept[r] = ms[r] / kept[r];
        }
      printf ("warm %-34s %8.1f ms  %.2fx its rounds' movement (%.1f ms), %.2fx with the set into kept tiles (%.1f ms)",
              ours[k].label, median_of (ms, ROUNDS), median_of (ratio, ROUNDS), median_of (move, ROUNDS),
              median_of (ratio_kept, ROUNDS), median_of (kept, ROUNDS));
      if ((s = warm_graph_sigma (&graph)) > 0)
        printf ("  (noise sigma found %.2f)", s), sigma = s;
      printf ("\n");
      warm_graph_clear (&graph);
    }
  g_free (pixels);
  g_object_unref (copy);

  for (size_t i = 0; i < G_N_ELEMENTS (builtins); i++)
    if (selected (&builtins[i]))
      printf ("warm %-34s %8.1f ms\n", builtins[i].label, warm (input, &builtins[i]));

  /* A 1920x1080 region of each warm denoiser, as the canvas asks for a preview. */
  static const char *const previews[] = { "cudafx:nl-means", "cudafx:nl-bayes" };
  for (size_t k = 0; k < G_N_ELEMENTS (previews); k++)
    {
      const job preview = { previews[k], previews[k], "auto=true" };
      GeglNode *graph = gegl_node_new (), *src, *op;
      guint8   *region = g_malloc ((size_t) 1920 * 1080 * 3);
      GeglRectangle rect = { 1000, 900, 1920, 1080 };

      if (!selected (&preview))
        {
          g_free (region);
          g_object_unref (graph);
          continue;
        }
      src = gegl_node_new_child (graph, "operation", "gegl:buffer-source", "buffer", input, NULL);
      op = gegl_node_new_child (graph, "operation", previews[k], NULL);
      gegl_node_link (src, op);
      for (int i = -1; i < RUNS; i++)
        {
          double t0;

          set_props (op, "auto=true"); /* as a slider's move does: the node's cache answers nothing */
          t0 = now_ms ();
          gegl_node_blit (op, 1.0, &rect, format, region, GEGL_AUTO_ROWSTRIDE, GEGL_BLIT_DEFAULT);
          if (i >= 0)
            t[i] = now_ms () - t0;
        }
      printf ("warm %s automatic, 1920x1080 region preview: %.1f ms (sigma %.2f)\n", previews[k],
              median_of (t, RUNS), sigma);
      g_free (region);
      g_object_unref (graph);
    }
  g_object_unref (input);
  gegl_exit ();
  return 0;
}
