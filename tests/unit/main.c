/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Test runner: see harness.h. Usage: test-unit [--list] [NAME-PART | =NAME |
 * =NAME@I/N ...]; an argument that selects no test counts as a failed test;
 * --help prints the usage. */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TESTS 512
static struct { const char *name; harness_test_fn fn; int shards; } tests[MAX_TESTS];
static int n_tests;
static int current_failures;
/* The running test's shard ("=NAME@I/N"; N = 0: all cases) and its cases so far. */
static int shard_index, shard_count, cases_seen;

void
harness_register (const char *name, harness_test_fn fn, int shards)
{
  if (n_tests == MAX_TESTS)
    {
      fprintf (stderr, "harness: too many tests\n");
      exit (2);
    }
  tests[n_tests].name = name;
  tests[n_tests].fn = fn;
  tests[n_tests].shards = shards;
  n_tests++;
}

void
harness_fail (const char *file, int line, const char *fmt, ...)
{
  if (++current_failures <= 5)
    {
      va_list ap;
      va_start (ap, fmt);
      fprintf (stderr, "  %s:%d: ", file, line);
      vfprintf (stderr, fmt, ap);
      fputc ('\n', stderr);
      va_end (ap);
    }
}

int
harness_failures (void)
{
  return current_failures;
}

int
harness_case (void)
{
  return shard_count == 0 || cases_seen++ % shard_count == shard_index;
}

static cudafx_options
options_for (cudafx_backend backend)
{
  cudafx_options o;
  cudafx_options_init (&o);
  o.backend = backend;
  return o;
}

cudafx_options
harness_options (void)
{
  const char *b = cudafx_test_switch ("CUDAFX_TEST_BACKEND");
  return options_for (b && !strcmp (b, "cuda") ? CUDAFX_BACKEND_CUDA : CUDAFX_BACKEND_CPU);
}

cudafx_options
harness_cpu_options (void)
{
  return options_for (CUDAFX_BACKEND_CPU);
}

unsigned
harness_rand (harness_rng *r)
{
  unsigned long long x = r->s ? r->s : 0x9E3779B97F4A7C15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  r->s = x;
  return (unsigned) (x >> 32);
}

double
harness_uniform (harness_rng *r)
{
  return harness_rand (r) / 4294967296.0;
}

double
harness_gauss (harness_rng *r)
{
  double u = harness_uniform (r), v = harness_uniform (r);
  return sqrt (-2 * log (1 - u)) * cos (2 * M_PI * v);
}

cudafx_image
harness_image_new (int w, int h, int channels, int has_alpha, cudafx_type type, size_t pad)
{
  cudafx_image img = { 0 };
  img.width = w;
  img.height = h;
  img.channels = channels;
  img.has_alpha = has_alpha;
  img.type = type;
  img.stride = (size_t) w * channels * cudafx_type_size (type) + pad;
  img.data = malloc (img.stride * h);
  if (!img.data)
    {
      fprintf (stderr, "harness: out of memory\n");
      exit (2);
    }
  return img;
}

void
harness_image_free (cudafx_image *img)
{
  free (img->data);
  img->data = NULL;
}

void
harness_image_poison (cudafx_image *img)
{
  memset (img->data, 0xA5, img->stride * img->height);
}

int
harness_ask_rows (int y, void *rows)
{
  harness_rows *a = rows;
  if (++a->calls == a->fail_at)
    return 1;
  if (a->calls == 1)
    a->first_ask = y;
  if (y <= a->asked)
    a->backwards++;
  if (y > a->real->height)
    {
      a->beyond++;
      y = a->real->height;
    }
  for (int r = a->asked; r < y; r++)
    memcpy ((unsigned char *) a->lazy->data + (size_t) r * a->lazy->stride,
            (const unsigned char *) a->real->data + (size_t) r * a->real->stride, a->lazy->stride);
  if (y > a->asked)
    a->asked = y;
  return 0;
}

void
harness_image_random (cudafx_image *img, harness_rng *r)
{
  harness_image_poison (img);
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        harness_set (img, x, y, c, img->type == CUDAFX_U8 ? harness_rand (r) % 256
                                                          : harness_uniform (r) * 255.0);
}

double
harness_get (const cudafx_image *img, int x, int y, int c)
{
  const unsigned char *row = (const unsigned char *) img->data + (size_t) y * img->stride;
  size_t i = (size_t) x * img->channels + c;
  if (img->type == CUDAFX_U8)
    return row[i];
  return ((const float *) row)[i] * 255.0;
}

void
harness_set (cudafx_image *img, int x, int y, int c, double v255)
{
  unsigned char *row = (unsigned char *) img->data + (size_t) y * img->stride;
  size_t i = (size_t) x * img->channels + c;
  if (img->type == CUDAFX_U8)
    row[i] = (unsigned char) (v255 < 0 ? 0 : v255 > 255 ? 255 : lround (v255));
  else
    ((float *) row)[i] = (float) (v255 / 255.0);
}

int
harness_same_pixels (const cudafx_image *a, const cudafx_image *b)
{
  size_t row = (size_t) a->width * a->channels * cudafx_type_size (a->type);
  for (int y = 0; y < a->height; y++)
    if (memcmp ((const char *) a->data + (size_t) y * a->stride,
                (const char *) b->data + (size_t) y * b->stride, row))
      return 0;
  return 1;
}

int
harness_count_non_finite (const cudafx_image *img)
{
  int n = 0;
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        n += !isfinite (harness_get (img, x, y, c));
  return n;
}

double
harness_max_diff (const cudafx_image *a, const cudafx_image *b)
{
  double m = 0;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < a->channels; c++)
        {
          double d = fabs (harness_get (a, x, y, c) - harness_get (b, x, y, c));
          if (!(d <= m))
            m = isnan (d) ? INFINITY : d;
        }
  return m;
}

double
harness_diff_share (const cudafx_image *a, const cudafx_image *b, double above)
{
  const int colours = a->channels - (a->has_alpha ? 1 : 0);
  size_t differ = 0, n = (size_t) a->width * a->height * colours;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < colours; c++)
        differ += !(fabs (harness_get (a, x, y, c) - harness_get (b, x, y, c)) <= above);
  return n ? (double) differ / n : 0;
}

/* Whether test i is selected by argument a: "=NAME" selects that test
 * alone, "=NAME@I/N" its shard I of the N it declares, any other argument
 * the tests whose names contain it. A shard sets shard_index and
 * shard_count. */
static int
selects (const char *a, int i)
{
  if (a[0] != '=')
    return strstr (tests[i].name, a) != NULL;
  size_t n = strlen (tests[i].name);
  if (strncmp (a + 1, tests[i].name, n) != 0)
    return 0;
  if (a[1 + n] == '\0')
    {
      shard_count = 0;
      return 1;
    }
  int index, count, end = 0;
  if (sscanf (a + 1 + n, "@%d/%d%n", &index, &count, &end) != 2 || a[1 + n + end] != '\0'
      || count != tests[i].shards || index < 0 || index >= count)
    return 0;
  shard_index = index;
  shard_count = count;
  return 1;
}

int
main (int argc, char **argv)
{
  int passed = 0, failed = 0;
  /* --list prints the selected tests' names instead of running them, a
   * sharded test's as its shards "NAME@I/N" (the sanitizer runs start one
   * process per test or shard). */
  int list = argc > 1 && strcmp (argv[1], "--list") == 0;
  int first = list ? 2 : 1;
  /* No test name starts with '-': an option other than --list (--help
   * included) is a request for the usage, not a name that selects nothing. */
  for (int a = first; a < argc; a++)
    if (argv[a][0] == '-')
      {
        int help = !strcmp (argv[a], "--help") || !strcmp (argv[a], "-h");
        fprintf (help ? stdout : stderr,
                 "Usage: %s [--list] [NAME-PART | =NAME | =NAME@I/N]...\n"
                 "Runs the tests whose names contain a NAME-PART (all without one), the test\n"
                 "named NAME, or shard I of N of it; --list names them instead. An argument\n"
                 "that selects no test counts as a failure. Ends with \"N passed, N failed\".\n",
                 argv[0]);
        return help ? 0 : 2;
      }
  /* Arguments select the tests whose names contain any of them. An argument
   * that selects nothing is a failure: a misspelt or renamed test in the
   * Makefile or tests/run.sh would otherwise pass by running nothing. */
  for (int a = first; a < argc; a++)
    {
      int matches = 0;
      for (int i = 0; i < n_tests && !matches; i++)
        matches = selects (argv[a], i);
      if (!matches)
        {
          printf (argv[a][0] == '=' ? "FAIL no test is named '%s'\n"
                                    : "FAIL no test name contains '%s'\n",
                  argv[a] + (argv[a][0] == '='));
          failed++;
        }
    }
  for (int i = 0; i < n_tests; i++)
    {
      /* The loop stops at the first argument that chooses the test: its
       * shard, if it names one, is the one run. */
      int selected = argc == first;
      shard_count = 0;
      for (int a = first; a < argc && !selected; a++)
        selected = selects (argv[a], i);
      if (!selected)
        continue;
      if (list)
        {
          if (tests[i].shards == 1)
            printf ("%s\n", tests[i].name);
          else
            for (int k = 0; k < tests[i].shards; k++)
              printf ("%s@%d/%d\n", tests[i].name, k, tests[i].shards);
          continue;
        }
      cases_seen = 0;
      current_failures = 0;
      tests[i].fn ();
      char shard[32] = "";
      if (shard_count)
        snprintf (shard, sizeof shard, "@%d/%d", shard_index, shard_count);
      if (current_failures)
        {
          printf ("FAIL %s%s (%d failed checks)\n", tests[i].name, shard, current_failures);
          failed++;
        }
      else
        {
          printf ("ok   %s%s\n", tests[i].name, shard);
          passed++;
        }
      fflush (stdout);
    }
  if (!list)
    printf ("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
