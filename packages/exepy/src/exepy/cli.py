"""The `exepy` console script: a thin shell over :mod:`exepy.build` and the resource editor."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    build = commands.add_parser(
        "build",
        help="copy a base exe and add MAIN.py and other files as resources",
        description=(
            "Copy BASE.exe to OUT.exe with MAIN.py and the given files and folders stored as "
            "a bundle resource (RT_RCDATA 200) and the command line '-m MAIN' (RT_RCDATA 201). "
            "Paths must lie inside the current directory; names are stored relative to it."
        ),
    )
    build.add_argument("output", metavar="OUT.exe", type=Path, help="the executable to write")
    build.add_argument("main", metavar="MAIN.py", type=Path, help="the script the exe runs")
    build.add_argument(
        "inputs", metavar="FILE_OR_DIR", type=Path, nargs="*", help="more files or folders"
    )
    build.add_argument(
        "--base",
        metavar="BASE.exe",
        type=Path,
        help="the executable to copy (default on Windows: this Python's python.exe)",
    )
    build.add_argument(
        "--no-command", action="store_true", help="do not store the '-m MAIN' command line"
    )
    build.add_argument("--icon", metavar="APP.ico", type=Path, help="replace the application icon")
    build.add_argument(
        "--version-info",
        metavar="KEY=VALUE",
        nargs="+",
        default=[],
        help="version resource strings, e.g. FileVersion=1.2.3 ProductName=App",
    )
    build.add_argument(
        "--manifest", metavar="FILE", type=Path, help="replace the application manifest"
    )
    build.add_argument(
        "--windowed", action="store_true", help="build a GUI-subsystem exe (no console window)"
    )
    build.add_argument("--force", action="store_true", help="overwrite OUT.exe if it exists")

    listing = commands.add_parser("list", help="print the resource tree of an exe or dll")
    listing.add_argument("exe", metavar="EXE", type=Path)

    extract = commands.add_parser(
        "extract", help="write the bundled files of an exe and print its stored command line"
    )
    extract.add_argument("exe", metavar="EXE", type=Path)
    extract.add_argument(
        "-o", "--output", metavar="DIR", type=Path, default=Path(), help="where to write (.)"
    )
    extract.add_argument("--force", action="store_true", help="overwrite existing files")

    bat = commands.add_parser(
        "bat",
        help="write a double-clickable .bat that runs SCRIPT.py with the python.exe next to it",
    )
    bat.add_argument("script", metavar="SCRIPT.py", type=Path)
    bat.add_argument("--admin", action="store_true", help="ask for administrator rights first")
    bat.add_argument("-o", "--output", metavar="OUT.bat", type=Path, help="default: SCRIPT.bat")
    bat.add_argument("--force", action="store_true", help="overwrite OUT.bat if it exists")
    return parser


def _version_strings(pairs: Sequence[str]) -> dict[str, str]:
    from exepy.build import BuildError

    strings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BuildError(f"--version-info takes KEY=VALUE pairs, got {pair!r}")
        strings[key.strip()] = value
    return strings


def _run(args: argparse.Namespace) -> int:
    from exepy import build, restree
    from exepy.editor import ResourceEditor

    if args.command == "build":
        result = build.build_exe(
            args.output,
            args.main,
            args.inputs,
            base=args.base,
            command=not args.no_command,
            icon=args.icon,
            version=_version_strings(args.version_info),
            manifest=args.manifest,
            windowed=args.windowed,
            force=args.force,
        )
        for message in result.warnings:
            print(f"exepy: warning: {message}", file=sys.stderr)
        command = " ".join(result.command) if result.command else "none"
        print(f"wrote {args.output}: {len(result.files)} files, command line: {command}")
    elif args.command == "list":
        editor = ResourceEditor.open(args.exe)
        print(f"{'TYPE':<20} {'NAME':<24} {'LANG':>6} {'SIZE':>10}")
        for info in editor.entries():
            print(
                f"{restree.format_id(info.type, types=True):<20} "
                f"{restree.format_id(info.name):<24} {info.language:>6} {info.size:>10}"
            )
    elif args.command == "extract":
        found = build.extract(args.exe, args.output, force=args.force)
        for name, content in found.files:
            print(f"{name} ({len(content)} bytes)")
        if found.command is None:
            print("command line: none stored")
        else:
            print("command line: " + " ".join(f'"{arg}"' for arg in found.command))
    elif args.command == "bat":
        written = build.write_bat(args.script, args.output, admin=args.admin, force=args.force)
        print(f"wrote {written}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `exepy` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from exepy.build import BuildError
    from exepy.image import PEError
    from exepy.restree import ResourceTreeError

    try:
        return _run(args)
    except (BuildError, PEError, ResourceTreeError) as exc:
        print(f"exepy {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(f"exepy {args.command}: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
