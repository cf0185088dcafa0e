"""Standalone Windows apps: exepy's launcher + an official CPython runtime + the bundle.

The exe is ``launcher-win-amd64.exe`` (our C, ``packages/exepy/launcher/launcher.c``) with

- resources 200/201: the app's files and command line (the original exepy format, read by
  embeddedimport at run time and by ``exepy extract``);
- resource 202: the runtime configuration (DLL name, mode, cache key), UTF-16LE fields
  each ending in NUL;
- resource 203 (``--onefile`` only): the runtime's DLLs and ``.pyd`` files, raw deflate,
  which the launcher unpacks once per user into ``%LOCALAPPDATA%\\exepy\\runtimes\\<key>``;
- resource 205 (``--onefile`` only, when there are any): the files that must be on disk
  (binary wheels' packages, packages that open data through ``__file__``), unpacked once
  per user into ``<runtime cache>\\packages-<hash>`` (checked by a stamp written last),
  which the launcher puts on ``sys.path``;
- resource 204: the start-up table, embeddedimport's start-up modules and the few standard
  ones they import, compiled by the runtime's own CPython, which the launcher hands to
  Python from memory with resources 200 and 201 (no file is opened to start the app);
- an appended zip: the runtime's compiled standard library plus embeddedimport's sources,
  which the launcher puts first on an isolated ``sys.path`` (zipimport reads archives
  with data in front of them).

``--onedir`` writes a folder with ``NAME.exe`` and the runtime's binaries beside it, and
the files that must be on disk beside them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import embeddedimport
from embeddedimport import bundle

from exepy import tk
from exepy.build import (
    BuildError,
    _absolute,
    apply_app_resources,
    collect_files,
    read_files,
    set_bundle,
    write_output,
)
from exepy.editor import ResourceEditor, SignatureRemovedWarning
from exepy.runtime import Runtime, cache_root
from exepy.sign import SignError, SignOptions, sign_bytes
from exepy.wheels import (
    WheelError,
    binary_wheel_files,
    download_requirements,
    is_pure,
    opens_data_by_file,
    wheel_files,
)

__all__ = [
    "BOOT_ID",
    "CONFIG_ID",
    "PACKAGES_ID",
    "RUNTIME_ID",
    "StandaloneResult",
    "build_standalone",
    "launcher_bytes",
]

CONFIG_ID = 202
"""RT_RCDATA id of the launcher's runtime configuration."""
RUNTIME_ID = 203
"""RT_RCDATA id of the onefile runtime payload."""
BOOT_ID = 204
"""RT_RCDATA id of the start-up table (see :func:`embeddedimport._startup.standalone`)."""
PACKAGES_ID = 205
"""RT_RCDATA id of the onefile packages payload (files that must be on disk)."""
LAUNCHER = "launcher-win-amd64.exe"
_PAYLOAD_MAGIC = b"EXEPYRT1"
_TREE_MAGIC = b"EXEPYRT2"  # names may hold subfolders
_PACKAGES_MAGIC = b"EXEPYPK1"
# The longest path inside resource 205 that fits Windows' 260 characters below
# C:\Users\<name>\AppData\Local\exepy\runtimes\<key>\packages-<hash>.<pid>-<tick>.tmp\
_LONGEST = 130


@dataclass(frozen=True)
class StandaloneResult:
    """What :func:`build_standalone` wrote: the exe, the folder (onedir) and the bundle."""

    exe: Path
    output: Path
    files: list[str]
    command: list[str] | None
    size: int
    warnings: list[str] = field(default_factory=list)


def launcher_bytes() -> bytes:
    """The launcher shipped inside the exepy wheel."""
    return resources.files("exepy").joinpath(LAUNCHER).read_bytes()


def _embeddedimport_sources() -> list[tuple[str, bytes]]:
    """embeddedimport's modules as ``("embeddedimport/x.py", source)``, from this install."""
    folder = Path(embeddedimport.__file__).parent
    return [
        (f"embeddedimport/{path.name}", path.read_bytes()) for path in sorted(folder.glob("*.py"))
    ]


# Run by the runtime's own python.exe: compile each source given as (name, text) into an
# unchecked hash-based .pyc (zipimport then loads it without looking for the source).
_COMPILE = """\
import importlib._bootstrap_external as external, importlib.util, marshal, os, sys, zipfile
source, target = sys.argv[1], sys.argv[2]
boot = {}
with zipfile.ZipFile(target + ".part", "w") as out:
    for name in sorted(os.listdir(source)):
        if name.endswith(".py"):
            with open(os.path.join(source, name), "rb") as handle:
                data = handle.read()
            code = compile(data, "embeddedimport\\\\" + name, "exec", dont_inherit=True)
            pyc = external._code_to_hash_pyc(code, importlib.util.source_hash(data), False)
            out.writestr("embeddedimport/" + name[:-3] + ".pyc", bytes(pyc))
            print("exepy-compiled", name, flush=True)  # the builder's progress bar counts these
            if name[:-3] in BOOT_EMBEDDEDIMPORT:
                module = "embeddedimport" + ("" if name == "__init__.py" else "." + name[:-3])
                boot[module] = ("embeddedimport/" + name, code)
    for name in BOOT_STDLIB:
        spec = importlib.util.find_spec(name)
        package = spec.submodule_search_locations is not None
        path = name.replace(".", "/") + ("/__init__.py" if package else ".py")
        boot[name] = (path, spec.loader.get_code(name))
    out.writestr(BOOT_TABLE, marshal.dumps(boot))
os.replace(target + ".part", target)
"""
# The modules a standalone app's start-up imports: served from one marshalled table (resource
# BOOT_ID, mapped with the exe) instead of one zip read each, which costs ~2 ms per module
# under Wine (see embeddedimport._startup.standalone). In the bytecode cache it is the zip
# entry _BOOT_TABLE.
_BOOT_EMBEDDEDIMPORT = ("__init__", "_startup", "bundle", "importer", "pe", "runtime")
_BOOT_STDLIB = ("__future__", "importlib", "struct", "encodings.utf_16_le")
_BOOT_TABLE = "embeddedimport/_boot.marshal"


def _compile_script() -> str:
    return (
        f"BOOT_EMBEDDEDIMPORT = {_BOOT_EMBEDDEDIMPORT!r}\nBOOT_STDLIB = {_BOOT_STDLIB!r}\n"
        f"BOOT_TABLE = {_BOOT_TABLE!r}\n" + _COMPILE
    )


def _windows_path(path: Path) -> str:
    """*path* as the runtime's python.exe sees it (Wine maps / to the Z: drive)."""
    return str(path) if sys.platform == "win32" else "Z:" + str(path).replace("/", "\\")


def _run_runtime_python(
    runtime: Runtime, args: list[str], scratch: Path, on_line: Callable[[str], None] | None = None
) -> bool:
    """Run the runtime's python.exe (natively on Windows, else under Wine if installed).

    Wine's prefix lives in exepy's cache; where that cannot be written (a read-only home)
    a new one is made in *scratch*, a temporary folder of the caller. *on_line* gets each
    line it prints while it runs.
    """
    command = [str(runtime.path / "python.exe"), "-I", *args]
    env = dict(os.environ)
    if sys.platform != "win32":
        extra = os.pathsep.join([env.get("PATH", ""), "/usr/lib/wine", "/usr/sbin"])
        wine = shutil.which("wine", path=extra)
        if wine is None:
            return False
        prefix = cache_root().parent / "wine"
        try:
            prefix.mkdir(parents=True, exist_ok=True)
        except OSError:
            prefix = scratch / "wine"
        env.update(WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
        command.insert(0, wine)
    # Pipes, not files: CPython under Wine cannot start with a regular file as stdio. Only
    # the exit status is read, so a Wine service that inherits a pipe cannot block us.
    try:
        proc = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        if on_line is not None:
            # A daemon thread: a Wine service may keep the pipe open after python.exe ends.
            stream, report = proc.stdout, on_line
            threading.Thread(
                target=lambda: [report(line.decode("utf-8", "replace")) for line in stream],
                daemon=True,
            ).start()
        return proc.wait(timeout=300) == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        if sys.platform != "win32" and Path(env["WINEPREFIX"]).is_relative_to(scratch):
            # The prefix's wineserver outlives python.exe and keeps writing its registry
            # files there: stop it, or removing the scratch folder races it.
            server = shutil.which("wineserver", path=extra)
            if server is not None:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run([server, "-k"], env=env, timeout=30, check=False)


def embeddedimport_bytecode(
    runtime: Runtime, *, progress: bool = False
) -> list[tuple[str, bytes]] | None:
    """embeddedimport compiled by *runtime*'s own CPython, cached; ``None`` if it cannot run.

    Compiling embeddedimport's sources at every start costs more than CPython's whole
    start-up (about 0.1 s under Wine), and only the runtime's own compiler writes bytecode
    it accepts: python.exe runs natively on Windows and under Wine elsewhere. The result
    is cached per runtime version and source hash in ``~/.cache/exepy/bytecode``; where
    that cannot be written (a read-only home), it is compiled for this build only. With
    *progress*, a bar on stderr counts the compiled modules (the first build's slow step).
    """
    sources = _embeddedimport_sources()
    digest = hashlib.sha256(_compile_script().encode())
    for name, source in sources:
        digest.update(name.encode() + b"\0" + source + b"\0")
    cached = cache_root().parent / "bytecode" / f"{runtime.version}-{digest.hexdigest()[:16]}.zip"
    if cached.is_file():
        return _read_zip(cached)
    with tempfile.TemporaryDirectory(prefix="exepy-compile-", ignore_cleanup_errors=True) as folder:
        target = cached
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            target = Path(folder) / "bytecode.zip"
        (Path(folder) / "src").mkdir()
        for name, source in sources:
            (Path(folder) / "src" / Path(name).name).write_bytes(source)
        script = Path(folder) / "compile.py"
        script.write_text(_compile_script())
        paths = [_windows_path(p) for p in (script, Path(folder) / "src", target)]
        bar: Any = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=len(sources),
                unit="module",
                desc=f"compiling embeddedimport with Python {runtime.version}",
            )
        try:

            def counted(line: str) -> None:  # Wine's own messages share the pipe
                if bar is not None and line.startswith("exepy-compiled "):
                    bar.update()

            ran = _run_runtime_python(
                runtime, paths, Path(folder), None if bar is None else counted
            )
        finally:
            if bar is not None:
                bar.close()
        if not ran or not target.is_file():
            return None
        return _read_zip(target)


def _read_zip(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def stdlib_zip(runtime: Runtime, bytecode: list[tuple[str, bytes]] | None) -> bytes:
    """The runtime's standard library zip with embeddedimport's sources (and bytecode)."""
    try:
        data = io.BytesIO(runtime.stdlib_zip.read_bytes())
    except OSError as exc:
        raise BuildError(f"cannot read {runtime.stdlib_zip}: {exc.strerror}") from None
    stamp = zip_timestamp()
    with zipfile.ZipFile(data, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        present = set(archive.namelist())
        for name, content in [*_embeddedimport_sources(), *(bytecode or [])]:
            if name in present:
                raise BuildError(f"the runtime's standard library already has {name}")
            # A fixed time and mode, not the build's clock and time zone: the same inputs
            # give the same bytes on any machine (reproducible builds).
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # Unix: the mode above is what it says on any OS
            archive.writestr(info, content)
    return data.getvalue()


def zip_timestamp() -> tuple[int, int, int, int, int, int]:
    """The time stored in zip entries exepy adds: ``SOURCE_DATE_EPOCH`` in UTC if set (the
    reproducible-builds convention), else 1980-01-01 (zip's first day); never the clock."""
    import time

    text = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not text:
        return (1980, 1, 1, 0, 0, 0)
    try:
        seconds = int(text)
    except ValueError:
        raise BuildError(
            f"SOURCE_DATE_EPOCH={text!r} is not a number of seconds since 1970"
        ) from None
    # zip can store 1980-2107 only, in 2-second steps (zipfile rounds down).
    stamp = time.gmtime(min(max(seconds, 315532800), 4354819198))
    return (stamp.tm_year, stamp.tm_mon, stamp.tm_mday, stamp.tm_hour, stamp.tm_min, stamp.tm_sec)


@functools.lru_cache(maxsize=4)
def runtime_payload(runtime: Runtime, extra: tuple[Path, ...] = ()) -> bytes:
    """The binaries of *runtime* (and *extra* ones: Tcl/Tk's) in the launcher's resource 203
    format (kept per runtime: compressing 16 MB of DLLs takes seconds)."""
    parts = [_PAYLOAD_MAGIC]
    files = [*runtime.binaries(), *extra]
    parts.append(struct.pack("<I", len(files)))
    parts.extend(_packed(path.name, path.read_bytes()) for path in files)
    return b"".join(parts)


def _packed(name: str, raw: bytes) -> bytes:
    """One payload entry: UTF-16 name, sizes, raw deflate."""
    # Level 6: level 9 takes 2.5 times as long for 0.4 % less.
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed = packer.compress(raw) + packer.flush()
    encoded = name.encode("utf-16-le")
    return (
        struct.pack("<H", len(encoded) // 2)
        + encoded
        + struct.pack("<II", len(raw), len(packed))
        + packed
    )


def _checked_tree(files: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """*files* sorted by folder (the launcher makes each folder once), their names checked
    (relative, no ``..``) and unique as Windows compares them (case-insensitively)."""
    kept: dict[str, tuple[str, bytes]] = {}
    for name, data in files:
        parts = name.split("/")
        if name.startswith("/") or any(p in ("", ".", "..") or ":" in p for p in parts):
            raise BuildError(f"a package file has the unsafe path {name}")
        # Two wheels holding one file (an old-style namespace __init__.py): the later one
        # wins, as when pip installs them in that order.
        kept[name.lower()] = (name, data)
    return sorted(kept.values(), key=lambda item: (item[0].rpartition("/")[0], item[0]))


def packages_payload(files: Sequence[tuple[str, bytes]]) -> tuple[bytes, str]:
    """The launcher's resource 205 for *files* (``(relative posix path, content)``) and its
    key (16 hex digits of its hash: the cache folder ``packages-<key>``)."""
    tree = _checked_tree(files)
    for name, _ in tree:
        if len(name) > _LONGEST:
            raise BuildError(
                f"the package file {name} has a path of {len(name)} characters; in the "
                f"per-user cache Windows takes at most {_LONGEST} (260 in all): use --onedir"
            )
    body = b"".join(
        [_TREE_MAGIC, struct.pack("<I", len(tree))]
        + [_packed(name.replace("/", "\\"), data) for name, data in tree]
    )
    key = hashlib.sha256(body).hexdigest()[:16]
    return _PACKAGES_MAGIC + key.encode("ascii") + body, key


def _config(runtime: Runtime, mode: str, key: str, interpreter: bool = False) -> bytes:
    values = (runtime.dll, mode, key, *(["interpreter"] if interpreter else []))
    return "".join(f"{value}\0" for value in values).encode("utf-16-le")


def build_standalone(
    output: Path,
    main: Path | None,
    inputs: Sequence[Path] = (),
    *,
    runtime: Runtime,
    onefile: bool = False,
    name: str | None = None,
    command: bool = True,
    interpreter: bool = False,
    icon: Path | None = None,
    version: Mapping[str, str] | None = None,
    manifest: Path | None = None,
    windowed: bool = False,
    force: bool = False,
    progress: bool = False,
    sign: SignOptions | None = None,
    cwd: Path | None = None,
    wheels: Sequence[Path] = (),
    requirements: Path | None = None,
    full_tcl: bool = False,
) -> StandaloneResult:
    """Build a standalone app: *output* is the exe (onefile) or a folder (onedir).

    *wheels* (wheel files) and the wheels ``pip download`` finds for *requirements*: pure
    ones go into the bundle next to the app's files (see :mod:`exepy.wheels`); binary ones
    (``cp3XY``/``abi3``, ``win_amd64``) go to disk, since Windows loads extension modules
    only from files: beside the exe in an onedir folder, which is on ``sys.path``; in
    onefile into resource 205, unpacked once per user into the runtime's cache folder and
    put on ``sys.path``. So do pure ones that ship data and use ``__file__``
    (:func:`~exepy.wheels.opens_data_by_file`).
    An app that imports tkinter gets Tcl/Tk from the runtime (:mod:`exepy.tk`; ``tcl/``
    trimmed unless *full_tcl*).
    Nothing is written unless everything succeeds; an existing exe is replaced atomically,
    an existing onedir folder only with *force*. *progress*: bars on stderr for slow steps.
    With *sign*, the exe is signed (Authenticode, :mod:`exepy.sign`) after every edit.
    *interpreter*: the exe is a portable python.exe (python.exe's command line, with the
    bundle importable and no stored command; ``launcher/launcher.c`` says how); *main* may
    then be None (nothing runs at start) and an onedir exe is ``python.exe`` unless *name*.
    """
    if main is None and not interpreter:
        raise BuildError("give the main script: only an interpreter (--interpreter) has none")
    cwd = _absolute(cwd or Path.cwd())
    target = _absolute(cwd / output)
    # An exe is replaced atomically; a folder only when asked (the repository's CLI rule).
    if target.is_dir() and not onefile and not force:
        raise BuildError(
            f"the folder {os.fspath(output)} already exists; pass --force to replace it"
        )
    if not target.parent.is_dir():
        raise BuildError(f"the output folder {target.parent} does not exist; create it first")
    if onefile and target.is_dir():
        raise BuildError(f"the output {os.fspath(output)} is a folder; give the exe's file name")
    if not onefile and target.exists() and not target.is_dir():
        raise BuildError(f"the output {os.fspath(output)} is a file; --onedir writes a folder")
    if interpreter:  # no main to run: MAIN is one more file, names stay cwd-relative
        files = collect_files(None, [p for p in (main, *inputs) if p is not None], cwd)
    else:
        files = collect_files(main, inputs, cwd)
    contents = read_files(files)
    own = len(contents)  # the app's own files (exepy.tk: does the app import tkinter?)
    on_disk: list[tuple[str, bytes]] = []  # files that must be on disk (binary wheels...)

    def add_wheel(wheel: Path, label: str) -> None:
        if is_pure(wheel):
            files = wheel_files(wheel, label)
            # Data opened through __file__ needs files: on disk, like a binary wheel's.
            (on_disk if opens_data_by_file(files) else contents).extend(files)
        else:
            on_disk.extend(binary_wheel_files(wheel, runtime.minor, label))

    try:
        for wheel in wheels:
            add_wheel(cwd / wheel, os.fspath(wheel))
        if requirements is not None:
            with tempfile.TemporaryDirectory(prefix="exepy-wheels-") as downloads:
                found = download_requirements(
                    cwd / requirements,
                    runtime.minor,
                    Path(downloads),
                    version=runtime.version,
                    prefer_pure=onefile,
                )
                for wheel in found:
                    add_wheel(wheel, f"{wheel.name} (from {os.fspath(requirements)})")
    except WheelError as exc:
        raise BuildError(str(exc)) from None
    taken = {path.name.lower() for path in runtime.binaries()}
    clash = sorted({n for n, _ in on_disk if n.split("/")[0].lower() in taken})
    on_disk = _checked_tree(on_disk)
    if clash:
        raise BuildError(f"a binary wheel holds {clash[0]}, a name the runtime's files use")
    try:
        tk_plan = tk.plan(runtime, contents, onefile=onefile, full_tcl=full_tcl, own=own)
    except tk.TkError as exc:
        raise BuildError(str(exc)) from None
    if tk_plan is not None:
        contents.extend(tk_plan.bundle)
    editor = ResourceEditor(launcher_bytes(), source=LAUNCHER)
    argv = set_bundle(editor, contents, command=command and not interpreter)
    if onefile:
        payload = runtime_payload(runtime, tuple(tk_plan.binaries) if tk_plan else ())
        digest = hashlib.sha256(payload).hexdigest()[:16]
        key = f"{Path(runtime.dll).stem}-{runtime.version}-{digest}"
        editor.set(bundle.RT_RCDATA, RUNTIME_ID, payload)
        editor.set(bundle.RT_RCDATA, CONFIG_ID, _config(runtime, "onefile", key, interpreter))
        if on_disk:
            editor.set(bundle.RT_RCDATA, PACKAGES_ID, packages_payload(on_disk)[0])
    else:
        editor.set(bundle.RT_RCDATA, CONFIG_ID, _config(runtime, "onedir", "", interpreter))
    apply_app_resources(
        editor, cwd, icon=icon, version=version, manifest=manifest, windowed=windowed
    )
    bytecode = embeddedimport_bytecode(runtime, progress=progress)
    if bytecode is not None:
        editor.set(bundle.RT_RCDATA, BOOT_ID, dict(bytecode)[_BOOT_TABLE])
        bytecode = [(name, code) for name, code in bytecode if name != _BOOT_TABLE]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SignatureRemovedWarning)
        data = editor.to_bytes() + stdlib_zip(runtime, bytecode)
    notes = [str(w.message) for w in caught]
    if sign is not None:
        try:
            data = sign_bytes(data, sign)
        except SignError as exc:
            raise BuildError(str(exc)) from None
    if bytecode is None:
        notes.append(
            f"could not run Python {runtime.version}'s python.exe here (Wine is missing) to "
            "compile embeddedimport: the app compiles it at every start (about 0.1 s); "
            "install Wine or build on Windows"
        )
    names = [file_name for file_name, _ in contents]

    if onefile:
        write_output(target, data, output)
        return StandaloneResult(target, target, names, argv, len(data), notes)
    exe_name = (name or ("python" if interpreter else Path(names[0]).stem)) + ".exe"
    try:
        extra = [] if tk_plan is None else [(p.name, p) for p in tk_plan.binaries] + tk_plan.folder
        _write_folder(target, exe_name, data, runtime, force=force, extra=extra, files=on_disk)
    except OSError as exc:
        raise BuildError(f"cannot write {os.fspath(output)}: {exc.strerror or exc}") from None
    return StandaloneResult(target / exe_name, target, names, argv, len(data), notes)


def _write_folder(
    target: Path,
    exe_name: str,
    exe: bytes,
    runtime: Runtime,
    *,
    force: bool,
    extra: Sequence[tuple[str, Path]] = (),
    files: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Fill a temporary folder beside *target*, then rename it into place."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old: Path | None = None
    try:
        (staging / exe_name).write_bytes(exe)
        (staging / exe_name).chmod(0o755)
        for path in runtime.binaries():
            shutil.copyfile(path, staging / path.name)
        for relative, path in extra:  # Tcl/Tk's DLLs and tcl/ (exepy.tk)
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, staging / relative)
        for relative_name, content in files:  # binary wheels' packages, on sys.path
            (staging / relative_name).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative_name).write_bytes(content)
        staging.chmod(0o755)
        if target.exists() and force:
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None and not target.exists():
            old.rename(target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
