/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The error pattern (operation.h): what a render that cannot run writes,
 * so that a live filter never silently does nothing. */
#include "operation.h"

/* The error pattern's cells: ERROR_CELL pixels square, opaque magenta and
 * black, on the level's pixel grid. */
#define ERROR_CELL 16

static inline int
error_cell (int v)
{
  return (v >= 0 ? v : v - (ERROR_CELL - 1)) / ERROR_CELL;
}

/* Pixels x, y of the pattern (level coordinates) into rgba, as R'G'B'A float. */
static void
error_pixels (float *rgba, int x, int y, int width, int height)
{
  static const float magenta[4] = { 1, 0, 1, 1 }, black[4] = { 0, 0, 0, 1 };

  for (int j = 0; j < height; j++)
    for (int i = 0; i < width; i++)
      memcpy (rgba + ((gsize) j * width + i) * 4,
              (error_cell (x + i) + error_cell (y + j)) & 1 ? black : magenta, sizeof magenta);
}

/* Fills roi (level-0 coordinates) of output at level with the error
 * pattern: a filter that cannot run shows that it did not, where GIMP's
 * canvas and a saved file show it, instead of the unfiltered input that
 * looks like a filter doing nothing (GEGL's own gegl:load likewise shows a
 * message in place of a file it cannot read). Needs little memory, since
 * memory may be what failed. */
void
op_error_output (GeglBuffer *output, const GeglRectangle *roi, int level)
{
  GeglRectangle r = op_at_level (roi, level);
  const Babl   *rgba = babl_format ("R'G'B'A float");
  float        *band;
  int           rows = ERROR_CELL;

  if (gegl_rectangle_is_empty (&r))
    return;
  if (level == 0)
    {
      /* A tile of the pattern repeated: GEGL copies it tile by tile, quick
       * even over a whole-output filter's region of hundreds of megapixels. */
      gint          tile_width = 0, tile_height = 0;
      GeglRectangle tile = { 0, 0, 2 * ERROR_CELL, 2 * ERROR_CELL };
      float        *pixels;

      g_object_get (output, "tile-width", &tile_width, "tile-height", &tile_height, NULL);
      if (tile_width > 0 && tile_width % (2 * ERROR_CELL) == 0 && tile_width <= 4096)
        tile.width = tile_width;
      if (tile_height > 0 && tile_height % (2 * ERROR_CELL) == 0 && tile_height <= 4096)
        tile.height = tile_height;
      pixels = g_try_malloc ((gsize) tile.width * tile.height * 4 * sizeof (float));
      if (pixels)
        {
          GeglBuffer *pattern = gegl_buffer_new (&tile, gegl_buffer_get_format (output));

          error_pixels (pixels, 0, 0, tile.width, tile.height);
          gegl_buffer_set (pattern, &tile, 0, rgba, pixels, GEGL_AUTO_ROWSTRIDE);
          g_free (pixels);
          gegl_buffer_set_pattern (output, &r, pattern, 0, 0);
          g_object_unref (pattern);
          return;
        }
    }
  /* At a level of detail (or without memory for a tile): a band of rows at a time. */
  band = g_try_malloc ((gsize) r.width * rows * 4 * sizeof (float));
  if (!band && (rows = 1))
    band = g_try_malloc ((gsize) r.width * 4 * sizeof (float));
  if (!band)
    return;
  for (int y = r.y; y < r.y + r.height; y += rows)
    {
      int           n = MIN (rows, r.y + r.height - y);
      GeglRectangle part = { r.x, y, r.width, n };

      error_pixels (band, r.x, y, r.width, n);
      gegl_buffer_set (output, &part, level, rgba, band, GEGL_AUTO_ROWSTRIDE);
    }
  g_free (band);
}
