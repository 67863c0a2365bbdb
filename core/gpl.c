/* SPDX-License-Identifier: GPL-3.0-or-later */
/* GIMP palette files (.gpl), read for quantize's given palette: the format
 * GIMP writes (app/core/gimppalette-load.c reads the same): a "GIMP Palette"
 * line, optional "Name:" and "Columns:" lines, '#' comments, then one entry a
 * line, "R G B" (decimal 0..255, any blanks) and an optional name. Read
 * leniently where GIMP is (CRLF line ends, a UTF-8 byte order mark, blank
 * lines, comments anywhere), strictly about the numbers: a malformed entry is
 * an error naming the source and the line, never a silently skipped colour. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far above 256 entries with long names (about 20 KiB): a bigger file is not
 * a palette, and reading it would only cost time and memory. */
#define GPL_MAX_BYTES (1u << 20)

static int
is_blank (char c)
{
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Line [p, end) without its trailing blanks. */
static const char *
trim_end (const char *p, const char *end)
{
  while (end > p && is_blank (end[-1]))
    end--;
  return end;
}

/* One entry "R G B [name]" of line `line`; 0 with the error set otherwise. */
static cudafx_status
parse_entry (const char *p, const char *end, const char *source, int line, double rgb[3])
{
  /* TRANSLATORS: the channel named in a .gpl entry's error ("the red value …") */
  static const char *const channel[3] = { N_("red"), N_("green"), N_("blue") };
  for (int c = 0; c < 3; c++)
    {
      while (p < end && is_blank (*p))
        p++;
      long v = 0;
      const char *digits = p;
      while (p < end && *p >= '0' && *p <= '9' && v <= 255)
        v = v * 10 + (*p++ - '0');
      if (p == digits)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                            "%s:%d: expected the %s value of an entry (R G B, each 0..255), found \"%.*s\"",
                            source, line, _(channel[c]), (int) (trim_end (p, end) - p > 20 ? 20 : trim_end (p, end) - p), p);
      if (v > 255 || (p < end && *p >= '0' && *p <= '9'))
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s:%d: %s value \"%.*s\" is out of range 0..255", source,
                            line, _(channel[c]), (int) (p - digits), digits);
      if (p < end && !is_blank (*p))
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                            "%s:%d: the %s value must be a whole number 0..255 followed by a blank, found \"%c\"",
                            source, line, _(channel[c]), *p);
      rgb[c] = (double) v;
    }
  return CUDAFX_OK; /* the rest is the entry's name */
}

cudafx_status
cudafx_gpl_parse (const char *text, size_t length, const char *source, cudafx_palette *out)
{
  if (!text || !out)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "palette: no text to read");
  if (!source)
    source = "palette";
  memset (out, 0, sizeof *out);
  out->channels = 3;
  if (memchr (text, '\0', length))
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: not a GIMP palette (it holds binary data)", source);
  const char *p = text, *end = text + length;
  if (end - p >= 3 && !memcmp (p, "\xEF\xBB\xBF", 3))
    p += 3;
  int line = 0, header = 0;
  while (p < end)
    {
      const char *eol = memchr (p, '\n', (size_t) (end - p));
      const char *stop = eol ? eol : end, *q = p;
      line++;
      while (q < stop && is_blank (*q))
        q++;
      const char *last = trim_end (q, stop);
      if (!header)
        {
          if (last - q != 12 || memcmp (q, "GIMP Palette", 12))
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                                "%s:%d: not a GIMP palette (the first line must be \"GIMP Palette\")", source, line);
          header = 1;
        }
      else if (q == last || *q == '#' || (last - q >= 5 && !memcmp (q, "Name:", 5)))
        ; /* blank, comment or the palette's name */
      else if (last - q >= 8 && !memcmp (q, "Columns:", 8))
        {
          /* Read within the line: the text need not end in a NUL (strtol
           * read past the last line's end). */
          const char *d = q + 8;
          long columns = 0;
          while (d < last && is_blank (*d))
            d++;
          const char *digits = d;
          while (d < last && *d >= '0' && *d <= '9' && columns <= 256)
            columns = columns * 10 + (*d++ - '0');
          if (d == digits || d != last || columns > 256)
            return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s:%d: Columns must be a number 0..256", source, line);
        }
      else if (out->colors == CUDAFX_MAX_COLORS)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s:%d: more than %d entries (a palette holds at most %d)",
                            source, line, CUDAFX_MAX_COLORS, CUDAFX_MAX_COLORS);
      else
        {
          cudafx_status s = parse_entry (q, last, source, line, out->entries[out->colors]);
          if (s)
            return s;
          out->colors++;
        }
      p = eol ? eol + 1 : end;
    }
  if (!header)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: empty file, not a GIMP palette", source);
  if (out->colors == 0)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: the palette has no colors", source);
  return CUDAFX_OK;
}

cudafx_status
cudafx_gpl_load (const char *path, cudafx_palette *out)
{
  /* Opened without blocking and checked before a byte is read: a FIFO (or a
   * device such as /dev/zero) given as a palette would otherwise block the
   * host forever, inside GIMP's own process for the live filter. */
  int fd = open (path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: cannot open the palette: %s", path, strerror (errno));
  if (fstat (fd, &st))
    {
      int e = errno;
      close (fd);
      return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: cannot open the palette: %s", path, strerror (e));
    }
  if (!S_ISREG (st.st_mode))
    {
      close (fd);
      if (S_ISDIR (st.st_mode))
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: is a directory, not a palette file", path);
      return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: not a regular file, not a palette file", path);
    }
  if (st.st_size > (off_t) GPL_MAX_BYTES)
    {
      close (fd);
      return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: larger than %u KiB, not a GIMP palette", path,
                          GPL_MAX_BYTES >> 10);
    }
  char *text = malloc (GPL_MAX_BYTES + 1);
  size_t n = 0;
  int failed = 0;
  /* A regular file never blocks; the limit holds even if it grows meanwhile. */
  while (text && n <= GPL_MAX_BYTES)
    {
      ssize_t got = read (fd, text + n, GPL_MAX_BYTES + 1 - n);
      if (got < 0 && errno == EINTR)
        continue;
      if (got < 0)
        failed = errno;
      if (got <= 0)
        break;
      n += (size_t) got;
    }
  close (fd);
  cudafx_status s;
  if (!text)
    s = cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: out of memory reading the palette", path);
  else if (failed)
    s = cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: cannot read the palette: %s", path, strerror (failed));
  else if (n > GPL_MAX_BYTES)
    s = cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: larger than %u KiB, not a GIMP palette", path,
                     GPL_MAX_BYTES >> 10);
  else
    s = cudafx_gpl_parse (text, n, path, out);
  free (text);
  return s;
}
