/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx-bench: the cudafx command, every object of cli/, with the
 * benchmarks' switches, which the shipped cudafx does not read:
 *   CUDAFX_BENCH_CODECS_ONLY=1  the files decoded and written back
 *                               unfiltered, by the same codecs and threads,
 *                               CUDA never started: the baseline a batch is
 *                               measured by (bench/bench_e2e.py,
 *                               bench/batch_fixed_cost.py);
 *   CUDAFX_BENCH_CODEC_NICE=N   a batch's codec threads at nice level N
 *                               instead of the CLI's own choice, to compare
 *                               priorities (docs/BENCHMARKS.md, "Batch
 *                               pipeline").
 * They are read before main, by a constructor, so that the program is the
 * shipped CLI's main and objects unchanged beside this file. */
#include "../cli/run.h"
#include "../core/cudafx.h"

#include <stdlib.h>
#include <string.h>

__attribute__ ((constructor)) static void
read_bench_switches (void)
{
  const char *codecs_only = cudafx_test_switch ("CUDAFX_BENCH_CODECS_ONLY");
  const char *nice = cudafx_test_switch ("CUDAFX_BENCH_CODEC_NICE");

  cli_bench.codecs_only = codecs_only && strcmp (codecs_only, "0");
  if (nice)
    {
      cli_bench.codec_nice_given = 1;
      cli_bench.codec_nice = atoi (nice);
    }
}
