#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Procedure arguments given by name, as GIMP 2.10 Script-Fu or CLI arguments,
read from the plug-in's own procedure table ($CUDAFX_PROC_LIB, default
build/libcudafx-procedures.so: the engine's arguments, then the GIMP hosts'
own from ui/common/procedures.c) so the order and defaults are the plug-in's.

  procargs.py scheme FILTER [name=value ...]
      The arguments after run-mode, image and drawable, positional, in table
      order; missing ones get the table's default. Choices by nick become
      their index, booleans TRUE/FALSE, the kernel (comma-separated values)
      its count and a vector, the palette a GIMP palette's name ("" for none).
  procargs.py cli FILTER [name=value ...]
      The same values as options of `cudafx FILTER`, one per line; the GIMP
      hosts' own arguments (create-palette...) have no option and are left out;
      palette=NAME becomes --palette with the file of GIMP's palette NAME
      ($GIMP_PALETTES/NAME.gpl, default /usr/share/gimp/2.0/palettes).
"""
import ctypes as C
import math
import os
import sys


# Plain python3 and ctypes only (install.sh runs this on a fresh machine).
class ArgDesc(C.Structure):
    _fields_ = [("name", C.c_char_p), ("label", C.c_char_p), ("blurb", C.c_char_p),
                ("type", C.c_int), ("min", C.c_double), ("max", C.c_double),
                ("default", C.c_double), ("choices", C.c_void_p), ("n_choices", C.c_int)]

INT, DOUBLE, BOOLEAN, CHOICE, ARRAY, PALETTE = range(6)


class FilterDesc(C.Structure):
    _fields_ = [("name", C.c_char_p), ("procedure", C.c_char_p), ("menu_label", C.c_char_p),
                ("menu_path", C.c_char_p), ("blurb", C.c_char_p), ("help", C.c_char_p),
                ("args", C.POINTER(ArgDesc)), ("n_args", C.c_int),
                ("params_offset", C.c_size_t), ("params_size", C.c_size_t)]


class Choice(C.Structure):
    _fields_ = [("nick", C.c_char_p), ("label", C.c_char_p)]


def table_args(filter_name):
    """The procedure's arguments, each with whether the engine (the CLI) has it."""
    lib = C.CDLL(os.environ.get("CUDAFX_PROC_LIB", "build/libcudafx-procedures.so"))
    lib.cudafx_proc_arg.restype = C.POINTER(ArgDesc)
    lib.cudafx_filter_find.restype = C.POINTER(FilterDesc)
    desc = lib.cudafx_filter_find(filter_name.encode())
    if not desc:
        sys.exit(f"no filter {filter_name}")
    first = C.addressof(FilterDesc.in_dll(lib, "cudafx_filters"))
    f = (C.addressof(desc.contents) - first) // C.sizeof(FilterDesc)
    return [(lib.cudafx_proc_arg(f, i).contents, i < desc.contents.n_args)
            for i in range(lib.cudafx_proc_n_args(f))]


def nicks(arg):
    choices = C.cast(arg.choices, C.POINTER(Choice))
    return [choices[i].nick.decode() for i in range(arg.n_choices)]


def scheme(args, given):
    out = []
    for arg, _ in args:
        name = arg.name.decode()
        value = given.pop(name, None)
        if arg.type == ARRAY:
            taps = value.split(",") if value else []
            out += [str(len(taps)), "(vector " + " ".join(taps) + ")"]
        elif arg.type == CHOICE:
            # A number stays as it is: out-of-range indices test the plug-in.
            out.append(value if value and value.lstrip("-").isdigit() else
                       str(nicks(arg).index(value) if value else int(arg.default)))
        elif arg.type == BOOLEAN:
            out.append(("TRUE" if value == "true" else "FALSE") if value else
                       ("TRUE" if arg.default else "FALSE"))
        elif arg.type == PALETTE:
            out.append('"%s"' % (value or ""))
        elif arg.type == INT:
            out.append(value or str(int(arg.default)))
        else:
            out.append(value or repr(float(arg.default)))
    return " ".join(out)


def cli(args, given):
    out = []
    for arg, engine in args:
        name = arg.name.decode()
        value = given.pop(name, None)
        if value is None or not engine:
            continue
        if arg.type == BOOLEAN:
            out.append(f"--{name}" if value == "true" else f"--no-{name}")
        elif arg.type == ARRAY:
            taps = value.split(",")
            n = math.isqrt(len(taps))
            out += [f"--{name}", ";".join(",".join(taps[i * n:(i + 1) * n]) for i in range(n))]
        elif arg.type == PALETTE:
            folder = os.environ.get("GIMP_PALETTES", "/usr/share/gimp/2.0/palettes")
            out += [f"--{name}", os.path.join(folder, value + ".gpl")]
        else:
            out += [f"--{name}", value]
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("scheme", "cli"):
        sys.exit(__doc__)
    given = dict(pair.split("=", 1) for pair in sys.argv[3:])
    text = (scheme if sys.argv[1] == "scheme" else cli)(table_args(sys.argv[2]), given)
    if given:
        sys.exit(f"{sys.argv[2]} has no argument {', '.join(given)}")
    print(text)
