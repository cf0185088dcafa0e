"""The `openvino-runner` console script: a thin shell over the package's API."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from openvino_runner import __version__


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `openvino-runner`."""
    parser = argparse.ArgumentParser(prog="openvino-runner", description="Inspect, run, compare and benchmark models on OpenVINO.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `openvino-runner` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
