/* gettext for the GIMP front ends: _() looks in the "cudafx" domain whatever
 * domain is the process's default (GIMP 3's libgimp makes it the plug-in's
 * only when running a procedure, not while GIMP queries the labels). */
#ifndef CUDAFX_INTL_H
#define CUDAFX_INTL_H

#define GETTEXT_PACKAGE "cudafx"
#include <glib/gi18n-lib.h>

#endif /* CUDAFX_INTL_H */
