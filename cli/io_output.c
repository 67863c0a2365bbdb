/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Output files (image_io.h): a temporary file beside the final one, flushed
 * to disk and renamed into place, removed when the run fails or is
 * interrupted. */
#define _GNU_SOURCE /* mkostemps */
#include "io_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct cfx_output {
  char *path;   /* the name as given, for messages */
  char *target; /* the file replaced: path, or what its symbolic links lead to */
  char *temp;
  FILE *file;
  cfx_output *prev, *next; /* in live_outputs while temp exists */
};

/* Every temporary file that exists, so that an interrupted run removes
 * them: each is created, renamed into place or removed with temp_lock
 * held, and the signal thread (cfx_output_guard_signals) removes them with
 * it held, so none is made or renamed while it does. */
static pthread_mutex_t temp_lock = PTHREAD_MUTEX_INITIALIZER;
static cfx_output     *live_outputs;

/* With temp_lock held. */
static void
live_add (cfx_output *o)
{
  o->prev = NULL;
  o->next = live_outputs;
  if (live_outputs)
    live_outputs->prev = o;
  live_outputs = o;
}

/* With temp_lock held. */
static void
live_remove (cfx_output *o)
{
  if (o->prev)
    o->prev->next = o->next;
  else if (live_outputs == o)
    live_outputs = o->next;
  if (o->next)
    o->next->prev = o->prev;
  o->prev = o->next = NULL;
}

static void *
signal_thread (void *data)
{
  sigset_t *set = data;
  int sig = 0;

  while (sigwait (set, &sig))
    ;
  /* Never unlocked: no thread makes or renames a temporary file after this. */
  pthread_mutex_lock (&temp_lock);
  for (cfx_output *o = live_outputs; o; o = o->next)
    unlink (o->temp);
  fprintf (stderr, "cudafx: interrupted by %s; no output written\n",
           sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
  /* Dies of the signal itself, so the caller's status says so (128 + n in a shell). */
  signal (sig, SIG_DFL);
  pthread_sigmask (SIG_UNBLOCK, set, NULL);
  raise (sig);
  _exit (128 + sig);
}

static sigset_t guarded_signals;

/* A child (ImageMagick, which GEGL runs for formats it lacks) gets the
 * signals back: blocked, they would reach it no more. */
static void
unblock_in_child (void)
{
  pthread_sigmask (SIG_UNBLOCK, &guarded_signals, NULL);
}

int
cfx_output_guard_signals (void)
{
  static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
  sigset_t *set = &guarded_signals;
  pthread_t thread;

  sigemptyset (set);
  /* A signal the caller ignores (nohup's SIGHUP, a background job's SIGINT)
   * stays ignored. */
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
    {
      struct sigaction now;
      if (!sigaction (signals[i], NULL, &now) && now.sa_handler != SIG_IGN)
        sigaddset (set, signals[i]);
    }
  /* Blocked here, before any other thread exists, so every thread made
   * later (the pipeline's, OpenMP's, GEGL's) inherits the mask and the
   * signals reach signal_thread alone, outside any signal handler. */
  if (pthread_sigmask (SIG_BLOCK, set, NULL))
    return -1;
  if (pthread_create (&thread, NULL, signal_thread, set))
    {
      pthread_sigmask (SIG_UNBLOCK, set, NULL);
      return -1;
    }
  pthread_detach (thread);
  pthread_atfork (NULL, NULL, unblock_in_child);
  return 0;
}

/* Follows symbolic links from path to the file they name (which need not
 * exist yet), so that the link stays and its target is replaced. */
static char *
resolve_links (const char *path)
{
  char *target = g_strdup (path);
  for (int hops = 0; hops < 40; hops++)
    {
      struct stat st;
      if (lstat (target, &st) || !S_ISLNK (st.st_mode))
        break;
      char *link = g_file_read_link (target, NULL);
      if (!link)
        break;
      char *next;
      if (g_path_is_absolute (link))
        next = g_strdup (link);
      else
        {
          char *dir = g_path_get_dirname (target);
          next = g_build_filename (dir, link, NULL);
          g_free (dir);
        }
      g_free (link);
      g_free (target);
      target = next;
    }
  return target;
}

cfx_output *
cfx_output_open (const char *path, char **error)
{
  cfx_output *o = g_new0 (cfx_output, 1);
  struct stat old;

  *error = NULL;
  o->path = g_strdup (path);
  o->target = resolve_links (path);
  char *dir = g_path_get_dirname (o->target);
  char *base = g_path_get_basename (o->target);
  char *dot = strrchr (base, '.');
  int stem = dot && dot != base ? (int) (dot - base) : (int) strlen (base);
  const char *ext = base + stem;
  /* Hidden, named after the file it will become and marked as ours, so a
   * killed run's leftover says what it was: ".photo.cudafx-XXXXXX.jpg". The
   * extension stays last for GEGL, which picks loaders by it. */
  o->temp = g_strdup_printf ("%s/.%.*s.cudafx-XXXXXX%s", dir, stem, base, ext);
  pthread_mutex_lock (&temp_lock);
  int fd = mkostemps (o->temp, (int) strlen (ext), O_CLOEXEC), saved = errno;
  if (fd >= 0)
    live_add (o);
  pthread_mutex_unlock (&temp_lock);
  long name_max = fd < 0 && saved == ENAMETOOLONG ? pathconf (dir, _PC_NAME_MAX) : -1;
  size_t base_len = strlen (base);
  g_free (dir);
  g_free (base);
  if (fd < 0)
    {
      /* A name that fits but leaves no room for the temporary one's
       * 15 more bytes: say so, rather than that the name is too long. */
      if (name_max > 0 && base_len <= (size_t) name_max)
        io_fail (error, "cannot write '%s': its name is %zu bytes, and the temporary file written "
                 "beside it first (\".NAME.cudafx-XXXXXX\", 15 bytes longer) would pass the "
                 "limit of %ld bytes",
                 path, base_len, name_max);
      else
        io_fail (error, "cannot write '%s': %s", path, strerror (saved));
      g_free (o->temp);
      o->temp = NULL;
      cfx_output_discard (o);
      return NULL;
    }
  /* mkstemp makes the file 0600: give it the mode of the file it replaces,
   * or the one a new file would get. */
  if (stat (o->target, &old) == 0)
    fchmod (fd, old.st_mode & 07777);
  else
    {
      mode_t mask = umask (0);
      umask (mask);
      fchmod (fd, 0666 & ~mask);
    }
  o->file = fdopen (fd, "wb");
  if (!o->file)
    {
      io_fail (error, "cannot write '%s': %s", path, strerror (errno));
      close (fd);
      cfx_output_discard (o);
      return NULL;
    }
  return o;
}

FILE *
cfx_output_file (cfx_output *o)
{
  return o->file;
}

int
cfx_output_save_image (cfx_output *o, const cfx_picture *pic, int strip, char **error)
{
  return io_encode (o->file, o->temp, o->path, pic, strip, error);
}


int
cfx_output_commit (cfx_output *o, char **error)
{
  int status = 0;
  *error = NULL;
  /* Every byte on the disk before the rename, so that a crash leaves the old
   * file or the new one, never an empty new one. */
  if (fflush (o->file) || fsync (fileno (o->file)))
    status = io_fail (error, "cannot write '%s': %s", o->path, strerror (errno));
  if (fclose (o->file) && !status)
    status = io_fail (error, "cannot write '%s': %s", o->path, strerror (errno));
  o->file = NULL;
  pthread_mutex_lock (&temp_lock);
  if (!status && rename (o->temp, o->target))
    status = io_fail (error, "cannot write '%s': %s", o->path, strerror (errno));
  if (!status)
    live_remove (o);
  pthread_mutex_unlock (&temp_lock);
  if (!status)
    {
      g_free (o->temp);
      o->temp = NULL;
      char *dir = g_path_get_dirname (o->target);
      int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0)
        {
          fsync (fd); /* the rename itself; a failure here changes nothing written */
          close (fd);
        }
      g_free (dir);
    }
  cfx_output_discard (o);
  return status;
}

void
cfx_output_discard (cfx_output *o)
{
  if (!o)
    return;
  if (o->file)
    fclose (o->file);
  if (o->temp)
    {
      pthread_mutex_lock (&temp_lock);
      unlink (o->temp);
      live_remove (o);
      pthread_mutex_unlock (&temp_lock);
    }
  g_free (o->temp);
  g_free (o->target);
  g_free (o->path);
  g_free (o);
}
