#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs a cudafx plug-in executable with its translations into a GIMP
# plug-in folder (…/plug-ins/cudafx): DEST/cudafx and
# DEST/locale/<ll>/LC_MESSAGES/cudafx.mo, where both front ends look (GIMP 3:
# libgimp's default for a plug-in; 2.10: locale/ beside the executable).
#   tools/install-plugin.sh EXECUTABLE LOCALE_DIR DEST
set -eu
exe=$1 locale=$2 dest=$3
mkdir -p "$dest"
install -m 755 "$exe" "$dest/cudafx"
rm -rf "$dest/locale"
if [ -d "$locale" ]; then
  cp -R "$locale" "$dest/locale"
fi
