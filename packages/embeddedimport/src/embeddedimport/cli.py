"""``python -m embeddedimport APP.exe [ARGS...]``: run a bundle exactly as its exe would.

No subcommands: everything after the executable belongs to the application (options
included), as it does when the exe itself is started.
"""

# ruff: noqa: PTH113
# (os.path on purpose: bundle paths such as <exe>/pkg/mod.py are not filesystem paths, and
# pathlib would add an import to every bundled start-up.)

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m embeddedimport",
        description=(
            "Run the application bundled in a Windows executable (resource RT_RCDATA 200, "
            "command line 201) with this interpreter, on any OS: the same sys.argv, "
            "sys.path and module attributes as the exe gives it."
        ),
        epilog="Example: python -m embeddedimport dist/app.exe --verbose input.txt",
    )
    parser.add_argument(
        "--version", action="store_true", help="print embeddedimport's version and exit"
    )
    parser.add_argument("executable", metavar="APP.exe", help="an executable built by exepy")
    parser.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the application's arguments, passed on untouched",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bundle; returns the exit status (``SystemExit`` from the app propagates)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--version"]:
        from . import __version__

        print(f"embeddedimport {__version__}")
        return 0
    if arguments[:1] in (["-h"], ["--help"]) or not arguments:
        _parser().print_help(sys.stdout if arguments else sys.stderr)
        return 0 if arguments else 2
    options = _parser().parse_args(arguments[:1])
    executable: str = options.executable
    user_args = arguments[1:]

    from .bundle import BundleError
    from .importer import Bundle, BundleNotFoundError
    from .runtime import CommandLineError, exit_status, launch, report

    if not os.path.isfile(executable):
        print(
            f"embeddedimport: error: {executable}: no such file (give an exe built by exepy)",
            file=sys.stderr,
        )
        return 2
    try:
        bundle = Bundle.from_executable(executable)
    except (BundleNotFoundError, BundleError) as exc:
        print(f"embeddedimport: error: {exc}", file=sys.stderr)
        return 2
    try:
        launch(executable, user_args, bundle=bundle, replace_path0=True)
    except CommandLineError as exc:
        print(f"embeddedimport: error: {executable}: {exc}", file=sys.stderr)
        return 2
    except SystemExit:
        raise
    except BaseException as exc:  # the application's own uncaught error
        return exit_status(exc, report)
    return 0
