/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CPU backend's operations, each defined beside its filter's reference
 * code (core/median.c, convolve.c, nlmeans.c, quantize.c) and gathered into
 * the backend table by core/cpu.c. Engine-internal. */
#ifndef CUDAFX_CPU_H
#define CUDAFX_CPU_H

#include "backend.h"
#include "engine.h"

CUDAFX_BACKEND_DECLARE (cpu)

#endif /* CUDAFX_CPU_H */
