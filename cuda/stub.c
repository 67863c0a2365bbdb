/* CUDA backend stand-in for builds without nvcc: every entry point reports
 * that CUDA was not built, so auto mode uses the CPU. */
#include "cudafx_cuda.h"

#include <stdio.h>

int
cudafx_cuda_probe (char *name, size_t name_size, char *why, size_t why_size)
{
  if (name_size)
    name[0] = '\0';
  snprintf (why, why_size, "built without CUDA");
  return 0;
}
