"""The `lfs-server` console script: a thin shell over the package's API."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lfs_server import __version__


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `lfs-server`."""
    parser = argparse.ArgumentParser(prog="lfs-server", description="A Git LFS server: Flask under gunicorn behind nginx.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `lfs-server` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
