"""``exepy runtime tk``: the command that adds Tcl/Tk to a cached runtime (:mod:`exepy.tk`).

Kept apart from :mod:`exepy.tk` so that ``exepy --help`` imports nothing but argparse here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_tk_build_option", "add_tk_command"]

_DESCRIPTION = """\
Add tkinter to a cached runtime (python.org's embeddable CPython has none); apps built on
it that import tkinter then get Tcl/Tk with no option. Without --from, Tcl/Tk 8.6.13 and
_tkinter.pyd are built here from Debian's source packages with mingw-w64 (needs apt-get
and gcc-mingw-w64-x86-64; Python 3.11 and 3.13 only; the Tcl/Tk build is cached in
~/.cache/exepy/tcltk and takes a few minutes once). --from takes the folder of a Windows
CPython install of the same version (DLLs\\_tkinter.pyd, tcl86t.dll, tk86t.dll, tcl\\,
Lib\\tkinter); on Windows that is the default: this Python, or the one 'py -3.X' starts."""


def add_tk_build_option(build: argparse.ArgumentParser) -> None:
    """``exepy build --full-tcl``: keep Tcl's time zones, message catalogues and demos."""
    build.add_argument(
        "--full-tcl",
        action="store_true",
        help="with a tkinter app: ship all of tcl/ (time zones, message catalogues, demos), "
        "not only what tkinter and ttk need",
    )


def add_tk_command(runtime_commands: Any) -> None:
    """Add ``tk`` to the ``exepy runtime`` actions (*runtime_commands*: its subparsers)."""
    command = runtime_commands.add_parser(
        "tk",
        help="add tkinter (Tcl/Tk) to a cached runtime: built here, or --from a Windows install",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument(
        "version", metavar="VERSION", help="the cached runtime: 3.11, 3.13 or an exact 3.13.2"
    )
    command.add_argument(
        "--from",
        dest="tk_source",
        metavar="FOLDER",
        type=Path,
        help="a Windows CPython install of the same version to copy tkinter from",
    )
    command.add_argument(
        "-f", "--force", action="store_true", help="rebuild (or copy again) if it has tkinter"
    )
    command.set_defaults(func=_runtime_tk)


def _runtime_tk(args: argparse.Namespace) -> None:
    from exepy import runtime, tk

    found = runtime.find_runtime(args.version)
    present = tk.find_tk(found)
    if present is not None and not args.force and args.tk_source is None:
        sys.stdout.write(f"Python {found.version} has tkinter already (-f builds it again)\n")
        sys.stdout.write(tk.summary(present) + "\n")
        return
    source = args.tk_source if args.tk_source is not None else tk.installed_python(found)
    if source is not None:
        made = tk.install_tk_from(found, source)
    else:

        def log(message: str) -> None:
            sys.stderr.write(f"exepy: {message}\n")
            sys.stderr.flush()

        made = tk.build_tk(found, log)
    sys.stdout.write(tk.summary(made) + "\n")
