/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A region's rows moved between a buffer and memory (operation.h), on
 * GEGL's threads a column of tiles each. */
#include "operation.h"

/* A region's rows moved between a buffer and memory. With the GPU's work
 * a millisecond or two, these moves take most of a call: spread over
 * GEGL's threads they run several times faster than one thread's
 * gegl_buffer_get or _set. Each thread takes whole columns of the buffer's
 * tiles, so that no tile is shared: a band of rows a few tall on each
 * thread, as the GPU's stripes written one by one would have it, had
 * several threads write each tile of a new buffer and took twice as long
 * as the whole region at once (docs/BENCHMARKS.md, "GEGL operations:
 * moving rows").
 * On the CPU, where the filter keeps every core busy and the moves are a
 * small part, one thread moves them: threads making the tiles of a new
 * output buffer contend, and on a busy machine of few cores that set took
 * ten times longer (docs/BENCHMARKS.md, "GEGL operations: moving rows"). */
typedef struct
{
  GeglBuffer          *buffer;
  const GeglRectangle *rect;   /* at level */
  int                  level;
  const Babl          *format;
  guint8              *pixels; /* rect's first pixel */
  gsize                stride;
  gboolean             to_buffer;
  int                  tile_width, first_column, columns; /* rect's tile columns */
} region_move;

static void
move_band (const GeglRectangle *band, const region_move *m)
{
  int     bpp = babl_format_get_bytes_per_pixel (m->format);
  guint8 *p = m->pixels + (gsize) (band->y - m->rect->y) * m->stride
              + (gsize) (band->x - m->rect->x) * bpp;

  if (m->to_buffer)
    gegl_buffer_set (m->buffer, band, m->level, m->format, p, m->stride);
  else
    gegl_buffer_get (m->buffer, band, 1.0 / (1 << m->level), m->format, p, m->stride,
                     GEGL_ABYSS_NONE);
}

/* Thread i of n: its share of the tile columns. */
static void
move_columns (gint i, gint n, gpointer data)
{
  const region_move   *m = data;
  const GeglRectangle *r = m->rect;
  int x0 = MAX (r->x, (m->first_column + m->columns * i / n) * m->tile_width);
  int x1 = MIN (r->x + r->width, (m->first_column + m->columns * (i + 1) / n) * m->tile_width);
  GeglRectangle band = { x0, r->y, x1 - x0, r->height };

  if (x1 > x0)
    move_band (&band, m);
}

/* a / b rounded down, b > 0. */
static int
floor_div (int a, int b)
{
  return a / b - (a % b < 0);
}

void
op_move_region (GeglBuffer *buffer, const GeglRectangle *rect, int level, const Babl *format,
                guint8 *pixels, gsize stride, gboolean to_buffer, gboolean threaded)
{
  region_move m = { buffer, rect, level, format, pixels, stride, to_buffer, 1, 0, 1 };
  gint64      n = 1;

  if (threaded)
    {
      g_object_get (buffer, "tile-width", &m.tile_width, NULL);
      m.tile_width = MAX (m.tile_width, 1);
      m.first_column = floor_div (rect->x, m.tile_width);
      m.columns = floor_div (rect->x + rect->width - 1, m.tile_width) + 1 - m.first_column;
      n = MIN ((gint64) m.columns, (gint64) rect->width * rect->height / MOVE_THREAD_COST);
    }
  if (n > 1)
    gegl_parallel_distribute ((gint) n, move_columns, &m);
  else
    move_band (rect, &m);
}
