/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Minimal self-registering test harness: TEST(name) { ... CHECK(cond, ...); }
 * Each test file registers its tests at load time; main.c runs them all (or
 * those whose name contains one of its arguments; an argument no name
 * contains is a failure) and ends with "N passed, N failed". */
#ifndef CUDAFX_HARNESS_H
#define CUDAFX_HARNESS_H

#include "../../core/cudafx.h"

#include <stdio.h>

typedef void (*harness_test_fn) (void);
void harness_register (const char *name, harness_test_fn fn, int shards);
/* Records a failure of the running test (first few are printed). */
void harness_fail (const char *file, int line, const char *fmt, ...)
  __attribute__ ((format (printf, 3, 4)));
/* Failures so far in the running test: lets a test stop a loop early. */
int harness_failures (void);

#define TEST(name) TEST_SHARDED (name, 1)

/* A test of many independent cases, which may run as `shards` processes
 * ("=NAME@I/N" runs the cases harness_case () gives shard I): under
 * compute-sanitizer one process of such a test ran past ten minutes, split
 * it finishes on as many cores. Without "@", every case runs. */
#define TEST_SHARDED(name, shards)                                        \
  static void test_##name (void);                                         \
  __attribute__ ((constructor)) static void register_##name (void)        \
  { harness_register (#name, test_##name, shards); }                      \
  static void test_##name (void)

/* Whether the running process takes the test's next case: cases are dealt
 * out to the shards in turn. A case skipped must still draw its test data,
 * so that every shard sees the images the whole test would. */
int harness_case (void);

#define CHECK(cond, ...)                                                  \
  do { if (!(cond)) harness_fail (__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* Options for the implementation under test: backend from CUDAFX_TEST_BACKEND
 * (cpu by default; cuda in make check-gpu). */
cudafx_options harness_options (void);
/* Options forcing the CPU: the reference when checking the GPU. */
cudafx_options harness_cpu_options (void);

/* Deterministic pseudo-random numbers for test data (xorshift). */
typedef struct { unsigned long long s; } harness_rng;
unsigned harness_rand (harness_rng *r);
double   harness_uniform (harness_rng *r); /* [0, 1) */
/* A standard normal draw (Box-Muller, two uniform draws). */
double   harness_gauss (harness_rng *r);

/* An owned image: data allocated with a given row padding (bytes). */
cudafx_image harness_image_new (int w, int h, int channels, int has_alpha,
                                cudafx_type type, size_t pad);
void         harness_image_free (cudafx_image *img);
/* Fills with random values (u8: 0..255; f32: 0..1), padding poisoned. */
void         harness_image_random (cudafx_image *img, harness_rng *r);
/* Fills every byte, padding included, with a poison value. */
void         harness_image_poison (cudafx_image *img);
/* Element (channel c of pixel x,y) as double on the 0..255 scale. */
double       harness_get (const cudafx_image *img, int x, int y, int c);
void         harness_set (cudafx_image *img, int x, int y, int c, double v255);
/* Largest absolute difference (0..255 scale) over all elements. */
double       harness_max_diff (const cudafx_image *a, const cudafx_image *b);
/* Share (0..1) of the colour values (alpha aside) of a and b that differ by
 * more than `above` (0..255 scale); NaN differs. */
double       harness_diff_share (const cudafx_image *a, const cudafx_image *b, double above);
/* Rows of a and b (same size and layout) hold the same bytes, padding aside. */
int          harness_same_pixels (const cudafx_image *a, const cudafx_image *b);
/* Elements (alpha included) of img that are NaN or infinite. */
int          harness_count_non_finite (const cudafx_image *img);

/* A source provided as options.rows_needed asks for it (harness_ask_rows,
 * user data a harness_rows): the real image's rows are copied into lazy, a
 * poisoned one of the same layout, as they are asked for, so that a result
 * equal to a run on the whole image shows that every row read, halo
 * included, was asked for first. It counts the asks, those that did not go
 * further than the one before (backwards) or past the image (beyond), and
 * fails the ask numbered fail_at (0: none). rows_ready may note its own
 * calls in `reports`. */
typedef struct {
  const cudafx_image *real;
  cudafx_image       *lazy;
  int                 asked, calls, backwards, beyond, fail_at;
  int                 first_ask;             /* the first call's y */
  int                 reports;               /* rows_ready's calls */
} harness_rows;
int harness_ask_rows (int y, void *rows);

#endif
