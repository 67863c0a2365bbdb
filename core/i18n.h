/* gettext for the engine: its messages live in the "cudafx" domain whatever
 * domain the host has made the default (GIMP binds it for the plug-in, the
 * CLI binds it itself). Strings in tables are marked N_ and translated by
 * whoever shows them. */
#ifndef CUDAFX_I18N_H
#define CUDAFX_I18N_H

#include <libintl.h>

#define CUDAFX_DOMAIN "cudafx"
#define _(s)  dgettext (CUDAFX_DOMAIN, s)
#define N_(s) (s)

#endif
