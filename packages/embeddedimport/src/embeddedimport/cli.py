"""``python -m embeddedimport APP.exe [ARGS...]``: run a bundle exactly as its exe would.

No subcommands: everything after the executable belongs to the application (options and
``--`` included, untouched), as it does when the exe itself is started. The CLI rule
(one-line errors, status 2, ``--version``) comes from the shared kit, ``_clikit``.
"""

# ruff: noqa: PTH113
# (os.path on purpose: bundle paths such as <exe>/pkg/mod.py are not filesystem paths.)

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: the usual run imports neither typing nor argparse
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["build_parser", "main"]

PROG = "embeddedimport"


def build_parser(app_args: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; *app_args* are the application's arguments, split off by :func:`main`."""
    import argparse

    from . import _clikit

    parser = argparse.ArgumentParser(
        prog=PROG,
        usage="python -m embeddedimport [-h] [--version] APP.exe [ARGS...]",
        description=(
            "Run the application bundled in a Windows executable (resource RT_RCDATA 200, "
            "command line 201) with this interpreter, on any OS: the same sys.argv, "
            "sys.path and module attributes as the exe gives it."
        ),
        epilog="Example: python -m embeddedimport dist/app.exe --verbose input.txt",
    )
    _clikit.add_version_option(parser, "embeddedimport")
    parser.add_argument("executable", metavar="APP.exe", help="an executable built by exepy")
    parser.add_argument(
        "args",
        nargs="*",
        default=[],  # else argparse reports a missing APP.exe as "required: APP.exe, ARGS"
        metavar="ARGS",
        help="the application's arguments, passed on untouched",
    )
    parser.set_defaults(func=_run, app_args=list(app_args))
    return parser


def _split(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(our options and APP.exe, the application's arguments)``: argparse would drop a
    ``--`` among the application's arguments, so they never go through it."""
    for index, arg in enumerate(arguments):
        if arg == "--":
            return list(arguments[: index + 2]), list(arguments[index + 2 :])
        if not arg.startswith("-") or arg == "-":
            return list(arguments[: index + 1]), list(arguments[index + 1 :])
    return list(arguments), []


def _errors() -> tuple[type[BaseException], ...]:
    from .bundle import BundleError, BundleNotFoundError

    return (BundleError, BundleNotFoundError)


def _cli_error() -> type[Exception]:
    from ._clikit import CliError

    return CliError


def _run(args: argparse.Namespace) -> int:
    return _start(args.executable, args.app_args)


def _start(executable: str, app_args: Sequence[str]) -> int:
    from .importer import Bundle
    from .runtime import CommandLineError, exit_status, launch, report

    if not os.path.isfile(executable):
        from ._clikit import CliError

        raise CliError(f"{executable}: no such file (give an exe built by exepy)")
    bundle = Bundle.from_executable(executable)
    try:
        launch(executable, app_args, bundle=bundle, replace_path0=True)
    except CommandLineError as exc:
        from ._clikit import CliError

        raise CliError(f"{executable}: {exc}") from None
    except SystemExit:
        raise
    except BaseException as exc:  # the application's own uncaught error: CPython's way
        return exit_status(exc, report)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bundle; returns the exit status (``SystemExit`` from the app propagates)."""
    head, app_args = _split(list(sys.argv[1:] if argv is None else argv))
    if len(head) == 1 and not head[0].startswith("-") and os.path.isfile(head[0]):
        # The usual call, APP.exe and its arguments, runs without argparse and the kit's
        # imports (typing, pathlib: ~15 ms); a user error goes through the kit below, which
        # finds it again before anything ran (the command line is parsed before install).
        try:
            return _start(head[0], app_args)
        except SystemExit:  # the app's: before the next clause would import the kit
            raise
        except (*_errors(), _cli_error()):
            pass
    from . import _clikit

    return _clikit.run(lambda: build_parser(app_args), head, errors=_errors)
