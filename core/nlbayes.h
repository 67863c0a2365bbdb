/* SPDX-License-Identifier: GPL-3.0-or-later */
/* NL-Bayes plan: the parameters both backends compute with (engine-internal;
 * core/nlbayes.c makes the plan and is the reference, cuda/nlbayes.cu
 * computes the same groups and estimates). See core/nlbayes.c's header for
 * the method. */
#ifndef CUDAFX_NLBAYES_H
#define CUDAFX_NLBAYES_H

#include "cudafx.h"

/* The largest patch side and search window of the parameter table. */
#define NLBAYES_MAX_PATCH  7
#define NLBAYES_MAX_SEARCH 75
/* Bits of a candidate's index in its window (NLBAYES_MAX_SEARCH^2 < 2^13);
 * above them in a selection key, the squared offset from the reference. */
#define NLBAYES_INDEX_BITS 13

/* The aggregation's sums are fixed point, NLBAYES_FIXED_ONE to a value of
 * the 0..255 scale: an integer sum is the same in any order, so the GPU's
 * atomics give step 1's basic estimate as the CPU's tiles do, bit for bit,
 * and with it step 2's groups. 2^-18 is finer than a float's step at any
 * value above 32. A restored value is clamped to +-NLBAYES_FIXED_MAX (about
 * four million on a float image's 0..1 scale) so that no pixel's sum
 * overflows: fewer than 2^14 restored patches cover a pixel in any plan of
 * the table (the references within a search window and a patch of the
 * pixel, each group holding at most k^2 patches over it), 2^62 in all. */
#define NLBAYES_FIXED_ONE 262144.0f   /* 2^18 */
#define NLBAYES_FIXED_MAX 1073741824.0f /* 2^30 */
#define NLBAYES_FIXED(v) \
  ((long long) llrintf (fminf (fmaxf ((v), -NLBAYES_FIXED_MAX), NLBAYES_FIXED_MAX) * NLBAYES_FIXED_ONE))
/* A pixel's value from its fixed-point sum and its weight, in double on
 * both backends so that the division rounds once. */
#define NLBAYES_UNFIXED(sum, weight) ((float) ((double) (sum) / ((double) (weight) * NLBAYES_FIXED_ONE)))

/* One of the two steps. */
typedef struct {
  int   patch;   /* patch side k */
  int   group;   /* similar patches kept, N (step 2: at least; all closer than tau join) */
  int   search;  /* search window side, odd */
  int   stride;  /* the grid of reference patches: every stride-th position */
  float beta;    /* the noise variance's factor in the Wiener estimate */
  float tau;     /* step 2: patches whose distance (sum of squared differences
                    over the patch and the channels) is below it join the group; 0 in step 1 */
} nlbayes_step;

typedef struct {
  float        sigma;     /* noise sigma of the values denoised, 0..255 scale */
  float        gamma;     /* flat-area test: the group's variance at most gamma sigma^2 */
  int          flat_area;
  int          colours;   /* colour channels denoised (alpha is copied) */
  int          origin_x, origin_y; /* the grid's phase: src's top-left in the whole image */
  nlbayes_step step[2];
} nlbayes_plan;

/* Rows and columns around a pixel that its output depends on: both steps'
 * reach (a reference patch's group lies within its search window, and a
 * pixel is restored by the references whose groups cover it). */
static inline int
nlbayes_halo (const nlbayes_plan *p)
{
  int h = 0;
  for (int s = 0; s < 2; s++)
    h += 2 * (p->step[s].search / 2 + p->step[s].patch);
  return h;
}

#endif /* CUDAFX_NLBAYES_H */
