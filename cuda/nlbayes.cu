/* SPDX-License-Identifier: GPL-3.0-or-later */
/* NL-Bayes on the GPU: not yet written. The launcher reports a CUDA failure,
 * so that automatic backend choice runs the CPU reference and says why. */
#include "cudafx_cuda.h"

extern "C" cudafx_status
cudafx_nlbayes_cuda (const cudafx_image *src, cudafx_image *dst, const nlbayes_plan *plan,
                     const cudafx_options *o)
{
  (void) src;
  (void) dst;
  (void) plan;
  (void) o;
  return cudafx_fail (CUDAFX_ERR_CUDA, "nl-bayes: the CUDA backend has no NL-Bayes yet");
}
