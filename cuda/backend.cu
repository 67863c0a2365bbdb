/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's table (core/backend.h): the launchers of the cuda/ files.
 * The engine lists it only in builds with nvcc (CUDAFX_HAVE_CUDA). */
#include "cudafx_cuda.h"

extern "C" const cudafx_backend_ops cudafx_cuda_backend = CUDAFX_BACKEND_TABLE (cuda);
