/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's operations (core/backend.h's interface), each defined
 * in its filter's file (probe: context.cu) and gathered into
 * cudafx_cuda_backend by cuda/backend.cu. They return a status and never
 * exit. */
#ifndef CUDAFX_CUDA_H
#define CUDAFX_CUDA_H

#include "../core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

CUDAFX_BACKEND_DECLARE (cuda)

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_CUDA_H */
