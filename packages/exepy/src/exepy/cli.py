"""The `exepy` console script: a thin shell over the package's API."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from exepy import __version__


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `exepy`."""
    parser = argparse.ArgumentParser(
        prog="exepy",
        description=(
            "Pack Python sources and data files into a Windows executable's resources, from any OS."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `exepy` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
