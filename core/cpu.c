/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CPU backend: the reference implementation of every filter, and the
 * fallback when CUDA is not built, not usable or fails. Always usable. */
#include "cpu.h"

#include <stdio.h>

int
cudafx_cpu_probe (int device, char *name, size_t name_size, char *why, size_t why_size)
{
  (void) device; /* one CPU: every device number means it */
  if (name_size)
    snprintf (name, name_size, "CPU");
  if (why_size)
    why[0] = '\0';
  return 1;
}

int
cudafx_cpu_device_count (void)
{
  return 0; /* nothing to choose: the threads are options.threads */
}

/* The CPU reads and writes host memory where it lies: no blocks of its own. */
int
cudafx_cpu_host_pinnable (void)
{
  return 0;
}

int
cudafx_cpu_host_register (void *p, size_t bytes)
{
  (void) p;
  (void) bytes;
  return 0;
}

int
cudafx_cpu_host_pinned (const void *p, size_t bytes)
{
  (void) p;
  (void) bytes;
  return 0;
}

int
cudafx_cpu_host_free (void *p)
{
  (void) p;
  return 0;
}

const cudafx_backend_ops cudafx_cpu_backend = CUDAFX_BACKEND_TABLE (cpu);
