/* SPDX-License-Identifier: GPL-3.0-or-later */
/* CUDAFX_BATCH_TIMELINE (timeline.h). The first line says how long the
 * process ran before main (the dynamic loader and the libraries' own
 * constructors: GEGL's, CUDA's), from /proc/self/stat, in the kernel's
 * clock ticks (10 ms). */
#include "timeline.h"
#include "../core/cudafx.h"
#include "batch.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FILE           *out;
static double          origin;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

double
cli_timeline_ms (double stamp)
{
  return stamp > 0 ? stamp - origin : -1;
}

int
cli_timeline_on (void)
{
  return out != NULL;
}

/* Ms the process lived before main, or -1: its start time (field 22 of
 * /proc/self/stat, ticks since boot) against the boot clock now. */
static double
ms_before_main (void)
{
  char buf[1024];
  FILE *f = fopen ("/proc/self/stat", "r");
  size_t n = f ? fread (buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose (f);
  buf[n] = '\0';
  char *p = strrchr (buf, ')'); /* the command's name may hold spaces */
  unsigned long long start = 0;
  for (int field = 2; p && field < 22; field++)
    p = strchr (p + 1, ' ');
  long hz = sysconf (_SC_CLK_TCK);
  struct timespec boot;
  if (!p || sscanf (p, " %llu", &start) != 1 || hz <= 0 || clock_gettime (CLOCK_BOOTTIME, &boot))
    return -1;
  return (boot.tv_sec + boot.tv_nsec / 1e9 - (double) start / hz) * 1e3;
}

void
cli_timeline_init (void)
{
  origin = cli_now_ms ();
  const char *path = cudafx_test_switch ("CUDAFX_BATCH_TIMELINE");
  if (!path || !*path)
    return;
  if (!(out = fopen (path, "w")))
    {
      fprintf (stderr, "cudafx: CUDAFX_BATCH_TIMELINE: cannot write '%s'\n", path);
      return;
    }
  cli_timeline_line ("\"event\": \"main\", \"before_main_ms\": %.0f", ms_before_main ());
}

void
cli_timeline_line (const char *fmt, ...)
{
  if (!out)
    return;
  va_list ap;
  va_start (ap, fmt);
  pthread_mutex_lock (&lock);
  fputc ('{', out);
  vfprintf (out, fmt, ap);
  fputs ("}\n", out);
  pthread_mutex_unlock (&lock);
  va_end (ap);
}

void
cli_timeline_close (void)
{
  if (!out)
    return;
  cli_timeline_line ("\"event\": \"end\", \"t\": %.3f", cli_timeline_ms (cli_now_ms ()));
  fclose (out);
  out = NULL;
}
