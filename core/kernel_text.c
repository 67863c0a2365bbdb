/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The convolution kernel as text, "a,b,c;d,e,f;g,h,i" (rows separated by
 * ';', values by ','): how the CLI's --kernel and the GEGL operation's kernel
 * property spell a custom kernel. */
#include "engine.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

cudafx_status
cudafx_kernel_parse (const char *text, double *taps, int *size)
{
  const cudafx_arg *a = cudafx_arg_find (&cudafx_filters[CUDAFX_FILTER_CONVOLVE], "kernel");
  const int capacity = CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE;
  int rows = 0, n = 0, count = 0;
  const char *p = text;

  for (;;)
    {
      int in_row = 0;
      rows++;
      for (;;)
        {
          char *end;
          if (count == capacity)
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                                "%s has more than %d values; the size must be odd, %.0f..%.0f",
                                a->name, capacity, a->min, a->max);
          errno = 0;
          taps[count] = strtod (p, &end);
          /* A number out of double's range is not "not a number": say which end. */
          if (end != p && errno == ERANGE && fabs (taps[count]) > 1)
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                                "%s: value %d of row %d, '%.*s', is too large (beyond ±1.8e308)",
                                a->name, in_row + 1, rows, (int) (end - p > 40 ? 40 : end - p), p);
          if (end != p && errno == ERANGE)
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                                "%s: value %d of row %d, '%.*s', is too small to be told from 0 "
                                "(below 2.2e-308; write 0)",
                                a->name, in_row + 1, rows, (int) (end - p > 40 ? 40 : end - p), p);
          if (end == p || errno || !isfinite (taps[count]))
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                                "%s: value %d of row %d is not a number (near '%.20s')", a->name,
                                in_row + 1, rows, p);
          count++, in_row++;
          p = end;
          while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
          if (*p != ',')
            break;
          p++;
        }
      if (rows == 1)
        n = in_row;
      else if (in_row != n)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                            "%s must be square: row %d has %d values, row 1 has %d", a->name,
                            rows, in_row, n);
      if (*p == '\0')
        break;
      if (*p != ';')
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: unexpected '%c' after value %d of row %d",
                            a->name, *p, in_row, rows);
      p++;
    }
  if (rows != n)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s must be square: %d rows of %d values", a->name,
                        rows, n);
  if (n % 2 == 0 || n < a->min || n > a->max)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s is %dx%d; the size must be odd, %.0f..%.0f",
                        a->name, n, n, a->min, a->max);
  *size = n;
  cudafx_clear_error ();
  return CUDAFX_OK;
}
