"""``exepy build``, ``extract`` and ``bat`` as functions: turn files into an exe and back.

The bundle and command-line formats belong to :mod:`embeddedimport.bundle`; this module
collects the files (relative to a working directory, like the original tool), writes the
resources through :class:`~exepy.editor.ResourceEditor`, and reads them back.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from embeddedimport import bundle

from exepy import image, winres
from exepy.editor import ResourceEditor, SignatureRemovedWarning, write_atomic
from exepy.sign import SignError, SignOptions, sign_bytes


class BuildError(ValueError):
    """The request cannot be carried out; the message says why and what would work."""


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_exe` wrote."""

    output: Path
    files: list[str]
    command: list[str] | None
    warnings: list[str] = field(default_factory=list)


def _absolute(path: Path) -> Path:
    """*path* made absolute with ``..`` removed lexically (symlinks are not followed)."""
    return Path(os.path.normpath(Path(path).absolute()))


def _relative(path: Path, cwd: Path, what: str) -> str:
    """*path* relative to *cwd* with ``/``; BuildError if it lies outside or is not ASCII."""
    absolute = _absolute(cwd / path)
    try:
        relative = absolute.relative_to(cwd)
    except ValueError:
        raise BuildError(
            f"{what} {os.fspath(path)!r} is outside the current directory {os.fspath(cwd)!r}: "
            "the bundle stores paths relative to it; run exepy from a folder that contains it"
        ) from None
    name = relative.as_posix()
    if name in ("", "."):
        raise BuildError(f"{what} {os.fspath(path)!r} is the current directory itself")
    if not name.isascii():
        raise BuildError(
            f"{what} {name!r} has a non-ASCII name; the original bundle format stores ASCII "
            "names only: rename it"
        )
    return name


def import_root(main: Path, cwd: Path) -> Path:
    """The folder bundle names are relative to: MAIN's own folder when it is not a package
    (no ``__init__.py``), as ``python src/main.py`` imports MAIN's siblings from there;
    else *cwd*, so that MAIN runs as ``python -m pkg.main`` with its package around it."""
    cwd = _absolute(cwd)
    folder = _absolute(cwd / main).parent
    if not folder.is_relative_to(cwd) or (folder / "__init__.py").is_file():
        return cwd
    return folder


def collect_files(main: Path | None, inputs: Sequence[Path], cwd: Path) -> list[tuple[str, Path]]:
    """``(bundle name, path)`` for MAIN (if any: an interpreter has none) then each file or
    folder (recursively, sorted).

    Names are relative to :func:`import_root`: ``src/main.py src/helper.py`` are stored
    as ``main.py`` and ``helper.py`` when ``src`` has no ``__init__.py``; a file outside
    that folder is refused, since ``python src/main.py`` could not import it either.
    ``__pycache__`` folders are skipped: their bytecode belongs to the building Python.
    """
    cwd = _absolute(cwd)
    root = cwd if main is None else import_root(main, cwd)
    collected: dict[str, Path] = {}

    def add(path: Path, what: str) -> None:
        name = _relative(path, cwd, what)
        if root != cwd:
            full = cwd / name
            if not full.is_relative_to(root):
                assert main is not None  # a root other than cwd comes from MAIN
                raise BuildError(_outside_root(path, main, root, cwd))
            name = full.relative_to(root).as_posix()
        collected.setdefault(name, root / name)

    if main is not None:
        if not (cwd / main).is_file():
            raise BuildError(f"main script {os.fspath(main)!r} is not a file")
        add(main, "main script")
    for item in inputs:
        full = cwd / item
        if full.is_dir():
            _relative(item, cwd, "folder")
            for found in sorted(full.rglob("*")):
                if found.is_file() and "__pycache__" not in found.relative_to(full).parts:
                    add(found.relative_to(cwd) if found.is_relative_to(cwd) else found, "file")
        elif full.is_file():
            add(item, "file")
        else:
            raise BuildError(f"{os.fspath(item)!r} is neither a file nor a folder")
    return [(name, path) for name, path in collected.items()]


def _outside_root(path: Path, main: Path, root: Path, cwd: Path) -> str:
    folder = root.relative_to(cwd).as_posix()
    module = ".".join(_absolute(cwd / main).relative_to(cwd).with_suffix("").parts)
    return (
        f"{os.fspath(path)!r} is outside {folder}/, the folder of the main script "
        f"{os.fspath(main)!r}: the exe imports from that folder, as 'python "
        f"{main.as_posix()}' does; put it under {folder}/, or add {folder}/__init__.py to "
        f"store names relative to the current directory and run 'python -m {module}'"
    )


def main_module(name: str) -> str:
    """The module ``-m`` runs for the bundle name of MAIN: ``app.py`` -> ``app``."""
    if not name.endswith(".py"):
        raise BuildError(f"main script {name!r} must be a .py file")
    parts = name[: -len(".py")].split("/")
    if not all(part.isidentifier() for part in parts):
        raise BuildError(
            f"main script {name!r} must have a module name (letters, digits, underscores) "
            "so that it can run as 'python -m'"
        )
    return ".".join(parts)


def default_base() -> Path:
    """The running interpreter's executable on Windows; elsewhere there is none."""
    if sys.platform != "win32":
        raise BuildError(
            "--base BASE.exe is required when not running on Windows "
            "(a Windows python.exe, or any PE executable)"
        )
    return Path(getattr(sys, "_base_executable", None) or sys.executable)


def build_exe(
    output: Path,
    main: Path,
    inputs: Sequence[Path] = (),
    *,
    base: Path | None = None,
    command: bool = True,
    icon: Path | None = None,
    version: Mapping[str, str] | None = None,
    manifest: Path | None = None,
    windowed: bool = False,
    force: bool = False,
    cwd: Path | None = None,
    sign: SignOptions | None = None,
) -> BuildResult:
    """Copy *base* to *output* with the bundle of MAIN + inputs and the other resources.

    Nothing is written unless everything succeeds; an existing *output* is replaced
    atomically (*force* is accepted for compatibility and changes nothing). With *sign*,
    the output is signed (Authenticode, :mod:`exepy.sign`) after every edit.
    """
    cwd = _absolute(cwd or Path.cwd())
    output_path = _absolute(cwd / output)
    _check_output_folder(output, output_path)
    base_path = _absolute(cwd / base) if base else default_base()
    if output_path == base_path or (
        output_path.exists() and base_path.exists() and output_path.samefile(base_path)
    ):
        raise BuildError("the output must not be the base executable itself")
    files = collect_files(main, inputs, cwd)
    if output_path in {path for _, path in files}:
        raise BuildError(f"{os.fspath(output)} is also one of the input files")
    contents = read_files(files)
    editor = ResourceEditor.open(base_path)
    argv = set_bundle(editor, contents, command=command)
    apply_app_resources(
        editor, cwd, icon=icon, version=version, manifest=manifest, windowed=windowed
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SignatureRemovedWarning)
        data = editor.to_bytes()
    if sign is not None:
        try:
            data = sign_bytes(data, sign)
        except SignError as exc:
            raise BuildError(str(exc)) from None
    write_output(output_path, data, output)
    return BuildResult(
        output_path, [name for name, _ in files], argv, [str(w.message) for w in caught]
    )


def read_files(files: Sequence[tuple[str, Path]]) -> list[tuple[str, bytes]]:
    """``(bundle name, content)`` of each file :func:`collect_files` found."""
    contents = []
    for name, path in files:
        try:
            contents.append((name, path.read_bytes()))
        except OSError as exc:
            raise BuildError(f"cannot read {name}: {exc.strerror}") from None
    return contents


def set_bundle(
    editor: ResourceEditor, contents: Sequence[tuple[str, bytes]], *, command: bool
) -> list[str] | None:
    """Put the bundle of *contents* (resource 200) into *editor* and, with *command*, the
    command line ``-m MAIN`` that runs the first file (201; any other is removed); return
    that command line. Both the plain and the standalone build write the app this way."""
    try:
        blob = bundle.pack(contents)
    except bundle.BundleError as exc:
        raise BuildError(str(exc)) from None
    argv = ["-m", main_module(contents[0][0])] if command else None
    editor.set(bundle.RT_RCDATA, bundle.BUNDLE_ID, blob)
    editor.remove(bundle.RT_RCDATA, bundle.COMMAND_ID)
    if argv is not None:
        editor.set(bundle.RT_RCDATA, bundle.COMMAND_ID, bundle.pack_command(argv))
    return argv


def write_output(target: Path, data: bytes, given: Path) -> None:
    """Write *target* atomically; an OSError names *given* (the user's path), never the
    temporary file it goes through."""
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise BuildError(f"cannot write {os.fspath(given)}: {exc.strerror or exc}") from None


def _check_output_folder(given: Path, target: Path) -> None:
    """Name the output's folder (not a temporary file in it) when the output cannot go there."""
    if target.is_dir():
        raise BuildError(f"the output {os.fspath(given)} is a folder; give the exe's file name")
    folder = target.parent
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise BuildError(f"the output folder {folder} {what}; create it first")


def apply_app_resources(
    editor: ResourceEditor,
    cwd: Path,
    *,
    icon: Path | None,
    version: Mapping[str, str] | None,
    manifest: Path | None,
    windowed: bool,
) -> None:
    """Put the icon, version info and manifest (paths relative to *cwd*) into *editor*, and
    mark it a GUI program when *windowed*; used by both the plain and the standalone build.
    """
    # Each file's format error names the file: "--icon x.txt: not an .ico file: ...".
    step = ""
    try:
        if icon is not None:
            step = f"--icon {os.fspath(icon)}: "
            winres.apply_icon(editor, _read(icon, cwd, "icon"))
        if version:
            step = ""
            winres.apply_version_info(editor, version)
        if manifest is not None:
            step = f"--manifest {os.fspath(manifest)}: "
            winres.apply_manifest(editor, _read(manifest, cwd, "manifest"))
    except winres.ResourceFormatError as exc:
        raise BuildError(f"{step}{exc}") from None
    if windowed:
        editor.subsystem = image.IMAGE_SUBSYSTEM_WINDOWS_GUI


def _read(path: Path, cwd: Path, what: str) -> bytes:
    try:
        return (cwd / path).read_bytes()
    except OSError as exc:
        raise BuildError(f"cannot read the {what} {os.fspath(path)!r}: {exc.strerror}") from None


@dataclass(frozen=True)
class Extracted:
    """What an exe built by exepy (or the original tool) carries."""

    files: list[tuple[str, bytes]]
    command: list[str] | None


def read_bundle(exe: Path) -> Extracted:
    """The bundled files and the stored command line of *exe*."""
    editor = ResourceEditor.open(exe)
    try:
        blob = editor.get(bundle.RT_RCDATA, bundle.BUNDLE_ID)
    except KeyError:
        raise BuildError(
            f"{os.fspath(exe)} has no exepy bundle (RT_RCDATA resource {bundle.BUNDLE_ID})"
        ) from None
    try:
        files = bundle.unpack(blob)
        command = None
        if editor.find(bundle.RT_RCDATA, bundle.COMMAND_ID):
            command = bundle.unpack_command(editor.get(bundle.RT_RCDATA, bundle.COMMAND_ID))
    except bundle.BundleError as exc:
        raise BuildError(f"{os.fspath(exe)}: {exc}") from None
    return Extracted(files, command)


def default_extract_folder(exe: Path) -> Path:
    """Where ``exepy extract EXE`` writes without ``-o``: ``APP_extracted`` for ``APP.exe``,
    in the working folder (a new folder, never the working folder itself)."""
    return Path(f"{Path(exe).stem}_extracted")


def extract(exe: Path, directory: Path, *, force: bool = False) -> Extracted:
    """Write the bundled files of *exe* under *directory* (created if missing).

    The repository's folder rule: an existing folder that holds anything is written into
    only with *force*, which replaces bundled names found there and keeps other files.
    """
    root = _absolute(directory)
    if root.exists() and not root.is_dir():
        raise BuildError(
            f"-o must be a folder, but {os.fspath(directory)} is a file; "
            "give a folder (it is created if missing)"
        )
    if not force and root.is_dir() and any(root.iterdir()):
        raise BuildError(
            f"the folder {os.fspath(directory)} already exists and is not empty; give a new "
            "or empty folder with -o DIR, or pass --force to write into it (bundled names "
            "there are replaced, other files kept)"
        )
    found = read_bundle(exe)
    targets = []
    for name, content in found.files:
        target = _absolute(root / name)
        if not target.is_relative_to(root):  # bundle.unpack refuses '..' already
            raise BuildError(f"bundled name {name!r} would be written outside {directory}")
        for folder in target.relative_to(root).parents:
            if (root / folder).exists() and not (root / folder).is_dir():
                raise BuildError(f"cannot write {name}: {root / folder} is a file, not a folder")
        if target.is_dir():
            raise BuildError(f"cannot write {name}: {target} is a folder")
        targets.append((target, content))
    for target, content in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_atomic(target, content, mode=0o644)
        except OSError as exc:
            raise BuildError(f"cannot write {target}: {exc.strerror or exc}") from None
    return found


# The batch/Python polyglot -----------------------------------------------------------------

# cmd runs only this first line: python.exe from the .bat's own folder, with -x so that
# Python skips the line, on the .bat itself with all arguments. `goto :eof` ends the batch
# keeping python's exit code (`exit /b` without a number resets it to 0 under Wine's cmd).
BAT_LINE = '@"%~dp0python.exe" -x "%~f0" %* & goto :eof'
# Elevated: `fltmc` succeeds only for administrators; otherwise PowerShell starts this
# batch again through the UAC prompt (Start-Process -Verb RunAs) with the arguments as
# typed. The path and arguments travel in environment variables, so quotes in them do not
# break PowerShell's quoting, and an empty argument list is left out. `if errorlevel`
# rather than `&&`: Wine's cmd runs the right side of `&&` even after a failure.
BAT_ADMIN_LINE = (
    "@setlocal & fltmc >nul 2>&1 & if errorlevel 1 "
    '(set "EXEPY_BAT=%~f0" & set EXEPY_ARGS=%* & '
    "powershell -NoProfile -ExecutionPolicy Bypass -Command "
    "\"$a = @{FilePath = $env:EXEPY_BAT; Verb = 'RunAs'}; $x = ([string]$env:EXEPY_ARGS).Trim(); "
    'if ($x) { $a.ArgumentList = $x }; Start-Process @a" & goto :eof) '
    'else ("%~dp0python.exe" -x "%~f0" %* & goto :eof)'
)


def bat_polyglot(script: bytes, *, admin: bool = False) -> bytes:
    """A .bat that runs *script* (Python source) with the ``python.exe`` next to it."""
    if script.startswith(b"\xef\xbb\xbf"):
        raise BuildError(
            "the script starts with a UTF-8 byte-order mark, which would break the batch "
            "line: save it without BOM"
        )
    line = BAT_ADMIN_LINE if admin else BAT_LINE
    return line.encode("ascii") + b"\r\n" + script


def write_bat(
    script: Path, output: Path | None = None, *, admin: bool = False, force: bool = False
) -> Path:
    """Write the polyglot of *script* to *output* (default: SCRIPT with .bat), replacing an
    existing file atomically (*force* is accepted for compatibility and changes nothing)."""
    if script.suffix != ".py":
        raise BuildError(f"{os.fspath(script)!r} must be a .py file")
    try:
        source = script.read_bytes()
    except OSError as exc:
        raise BuildError(f"cannot read {os.fspath(script)}: {exc.strerror}") from None
    target = output or script.with_suffix(".bat")
    data = bat_polyglot(source, admin=admin)
    try:
        return write_atomic(target, data)
    except OSError as exc:
        raise BuildError(f"cannot write {os.fspath(target)}: {exc.strerror or exc}") from None
