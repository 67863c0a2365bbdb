#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs a cudafx plug-in executable with its translations into a GIMP
# plug-in folder (…/plug-ins/cudafx): DEST/cudafx, GIMP 3's dialogs module
# DEST/cudafx-dialogs.so when it was built beside EXECUTABLE, and
# DEST/locale/<ll>/LC_MESSAGES/cudafx.mo, where both front ends look (GIMP 3:
# libgimp's default for a plug-in; 2.10: locale/ beside the executable).
#   tools/install-plugin.sh EXECUTABLE LOCALE_DIR DEST
set -eu
exe=$1 locale=$2 dest=$3
mkdir -p "$dest"
install -m 755 "$exe" "$dest/cudafx"
# GIMP 3's dialogs, a module the plug-in loads beside itself (2.10 has none).
if [ -f "$(dirname "$exe")/cudafx-dialogs.so" ]; then
  install -m 644 "$(dirname "$exe")/cudafx-dialogs.so" "$dest/cudafx-dialogs.so"
fi
rm -rf "$dest/locale"
if [ -d "$locale" ]; then
  cp -R "$locale" "$dest/locale"
fi
