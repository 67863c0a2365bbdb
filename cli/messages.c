/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's usage and runtime errors (messages.h). */
#include "messages.h"
#include "batch.h"

#define GETTEXT_PACKAGE "cudafx"
#include <glib.h>
#include <glib/gi18n-lib.h>

#include <stdarg.h>
#include <stdio.h>

/* The last usage error's message, for --json. */
static char usage_message[512];

int
usage_error (const char *command, const char *fmt, ...)
{
  va_list ap;
  fprintf (stderr, "cudafx%s%s: ", command ? " " : "", command ? command : "");
  va_start (ap, fmt);
  vsnprintf (usage_message, sizeof usage_message, _(fmt), ap); /* xgettext: --keyword=usage_error:2 */
  va_end (ap);
  fputs (usage_message, stderr);
  fputc ('\n', stderr);
  fprintf (stderr, _("Try 'cudafx%s%s --help'."), command ? " " : "", command ? command : "");
  fputc ('\n', stderr);
  return EXIT_USAGE;
}

/* The calling thread's last runtime error, for --json's "error" in batches. */
static __thread char last_error[512];

/* Safe from the pipeline's threads: the message goes out whole, clear of the
 * progress line. */
int
runtime_error (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (last_error, sizeof last_error, _(fmt), ap); /* xgettext: --keyword=runtime_error:1 */
  va_end (ap);
  fprintf (cli_message_begin (), "cudafx: %s\n", last_error);
  cli_message_end ();
  return EXIT_RUNTIME;
}

const char *
cli_usage_message (void)
{
  return usage_message;
}

const char *
cli_last_error (void)
{
  return last_error;
}
