/* SPDX-License-Identifier: GPL-3.0-or-later */
/* gettext for the engine and the GIMP front ends: every message lives in the
 * "cudafx" domain whatever domain is the process's default (GIMP 3's libgimp
 * sets its own only when running a procedure, not while GIMP queries the
 * labels). The plug-ins bind the domain to locale/ beside themselves
 * (cudafx_proc_bind_translations), the CLI likewise. Strings in tables are
 * marked N_ and translated by whoever shows them. */
#ifndef CUDAFX_I18N_H
#define CUDAFX_I18N_H

#include <libintl.h>

#define CUDAFX_DOMAIN "cudafx"
#define _(s)  dgettext (CUDAFX_DOMAIN, s)
#define N_(s) (s)

#endif
