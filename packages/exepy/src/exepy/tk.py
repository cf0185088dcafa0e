"""tkinter for standalone apps: Tcl/Tk added to a runtime, and to the apps that import it.

python.org's embeddable CPython has no tkinter. ``exepy runtime tk VERSION`` adds it to a
cached runtime, in ``<runtime>/tk/`` (a Windows CPython install's layout: ``DLLs/``
with ``_tkinter.pyd`` and the Tcl/Tk DLLs, ``tcl/`` with ``tcl8.6``, ``tk8.6`` and
``tcl8``, ``Lib/tkinter``, ``LICENSES/``), either built here from Debian's sources
(:mod:`exepy.tkbuild`: 3.11 and 3.13) or copied ``--from`` a Windows CPython install of
the same version. The runtime's own files are untouched, so apps that do not import
tkinter stay as small as before.

An app whose bundled sources import ``tkinter`` (or ``_tkinter``) gets, from :func:`plan`:
``Lib/tkinter`` in its bundle; the DLLs beside the exe (``--onedir``) or in the runtime
payload (``--onefile``); ``tcl/`` trimmed to what tkinter and ttk need (``tcl8.6``,
``tk8.6`` and ``tcl8`` without time zones, message catalogues or demos), with Tcl's and
Tk's licence texts, beside the exe (``--onedir``) or zipped in the bundle (``--onefile``).
A small bundled module, ``_exepy_tk``, imported on the line of ``tkinter/__init__.py``
that imports ``_tkinter`` (so no line number moves), sets ``TCL_LIBRARY`` to that ``tcl/``
folder before Tcl starts; in ``--onefile`` it first unpacks the zip once per user into the
runtime's cache folder (``%LOCALAPPDATA%\\exepy\\runtimes\\<key>\\tcl``, a temporary
folder renamed into place), checked at each start by a stamp and a few files' sizes.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from exepy.runtime import PythonRuntimeError, Runtime

__all__ = [
    "TkError",
    "TkPlan",
    "TkRuntime",
    "app_uses_tkinter",
    "build_tk",
    "find_tk",
    "install_tk_from",
    "installed_python",
    "plan",
]

TK_FOLDER = "tk"
"""The folder inside a cached runtime that holds its tkinter parts."""
_MANIFEST = "exepy-tk.json"
_HOOK = "_exepy_tk"
_TCL_ZIP = "_exepy_tk.tcl.zip"
_STAMP = "exepy-tcl.txt"
_KEPT = ("tcl8.6", "tk8.6", "tcl8")
"""The folders of ``tcl/`` an app gets by default (not dde, reg, tix, itcl, sqlite...)."""
_TRIMMED = ("tcl8.6/tzdata", "tcl8.6/msgs", "tk8.6/demos", "tk8.6/images", "tk8.6/msgs")
"""Left out of those unless asked: tkinter and ttk read none of them."""
# Checked at each start of a --onefile app: the scripts Tcl, Tk and ttk load first.
_KEY_FILES = ("tcl8.6/init.tcl", "tk8.6/tk.tcl", "tk8.6/ttk/ttk.tcl")


class TkError(PythonRuntimeError):
    """Tcl/Tk cannot be added to a runtime; the message says why and what would do."""


@dataclass(frozen=True)
class TkRuntime:
    """The tkinter parts of one runtime (``<runtime>/tk``)."""

    folder: Path
    source: str

    @property
    def dlls(self) -> list[Path]:
        """``_tkinter.pyd`` and the DLLs it loads, sorted."""
        return sorted(p for p in (self.folder / "DLLs").iterdir() if p.is_file())

    @property
    def tcl(self) -> Path:
        """The Tcl/Tk script library (``tcl8.6``, ``tk8.6``, ``tcl8``)."""
        return self.folder / "tcl"

    @property
    def tkinter(self) -> Path:
        """CPython's ``Lib/tkinter`` of the same version."""
        return self.folder / "Lib" / "tkinter"

    def tcl_files(self, *, full: bool = False) -> list[tuple[str, Path]]:
        """``(relative posix path, file)`` for ``tcl/``, trimmed unless *full*, licences in."""
        found = []
        # Sorted by the posix name, not the Path (Windows' compares case-insensitively):
        # the same order, hence the same exe, on every OS.
        for path in sorted(self.tcl.rglob("*"), key=lambda p: p.relative_to(self.tcl).as_posix()):
            relative = path.relative_to(self.tcl).as_posix()
            if not path.is_file() or path.suffix.lower() in (".lib", ".a"):
                continue
            if not full and (
                relative.split("/")[0] not in _KEPT
                or any(relative.startswith(f"{cut}/") for cut in _TRIMMED)
            ):
                continue
            found.append((relative, path))
        for licence in sorted((self.folder / "LICENSES").glob("*")):
            found.append((f"LICENSES/{licence.name}", licence))
        return found


def find_tk(runtime: Runtime) -> TkRuntime | None:
    """The tkinter parts added to *runtime*, or ``None`` if it has none."""
    folder = runtime.path / TK_FOLDER
    try:
        manifest = json.loads((folder / _MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not (folder / "DLLs" / "_tkinter.pyd").is_file():
        return None
    return TkRuntime(folder, str(manifest.get("source", "?")))


def _check_minor(runtime: Runtime) -> None:
    if runtime.minor == "3.12":
        from exepy.tkbuild import _unsupported

        raise TkError(_unsupported(runtime.version))


def _pe_imports(path: Path) -> list[str]:
    """The DLL names *path* imports (lower case); it must be an x64 DLL."""
    import pefile

    try:
        pe = pefile.PE(str(path), fast_load=True)
        pe.parse_data_directories(
            directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]]
        )
    except pefile.PEFormatError as exc:
        raise TkError(f"{path} is not a Windows DLL: {exc}") from None
    if pe.FILE_HEADER.Machine != pefile.MACHINE_TYPE["IMAGE_FILE_MACHINE_AMD64"]:
        raise TkError(f"{path} is not for x64 (AMD64): take it from a 64-bit Python install")
    imports = getattr(pe, "DIRECTORY_ENTRY_IMPORT", [])
    return [entry.dll.decode("ascii", "replace").lower() for entry in imports]


def _install(runtime: Runtime, fill: Callable[[Path], str]) -> TkRuntime:
    """Fill a temporary folder with *fill* (which returns the source's description), check
    it, and rename it into ``<runtime>/tk`` (replacing one that is there)."""
    final = runtime.path / TK_FOLDER
    staging = Path(tempfile.mkdtemp(prefix=".tk-", dir=runtime.path))
    try:
        source = fill(staging)
        _check_folder(staging, runtime)
        (staging / _MANIFEST).write_text(
            json.dumps({"source": source, "python": runtime.version}, indent=1) + "\n"
        )
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = find_tk(runtime)
    assert found is not None
    return found


def _check_folder(folder: Path, runtime: Runtime) -> None:
    """The parts are complete and ``_tkinter.pyd`` is for this runtime's DLL."""
    pyd = folder / "DLLs" / "_tkinter.pyd"
    scripts = [folder / "tcl" / "tcl8.6" / "init.tcl", folder / "tcl" / "tk8.6" / "tk.tcl"]
    for needed in (pyd, *scripts):
        if not needed.is_file():
            raise TkError(f"no {needed.relative_to(folder)} in the Tcl/Tk parts")
    if not (folder / "Lib" / "tkinter" / "__init__.py").is_file():
        raise TkError("no Lib/tkinter/__init__.py in the Tcl/Tk parts")
    imports = _pe_imports(pyd)
    if runtime.dll.lower() not in imports:
        python = [name for name in imports if name.startswith("python3")]
        raise TkError(
            f"_tkinter.pyd was built for {' '.join(python) or 'no python3XY.dll'}, not "
            f"{runtime.dll} (Python {runtime.version}): take it from a Python {runtime.minor} "
            "install"
        )
    for name in imports:
        if re.match(r"^(tcl|tk)\d+t?\.dll$", name) and not (folder / "DLLs" / name).is_file():
            raise TkError(f"_tkinter.pyd imports {name}, which is not in DLLs/")


def install_tk_from(runtime: Runtime, install: Path) -> TkRuntime:
    """Copy the tkinter parts of a Windows CPython install (*install*) into *runtime*.

    *install* holds ``DLLs\\_tkinter.pyd``, ``DLLs\\tcl86t.dll``, ``DLLs\\tk86t.dll``,
    ``tcl\\`` and ``Lib\\tkinter`` (python.org's installer's layout), of the same
    CPython minor version as *runtime*.
    """
    install = Path(install)
    if not (install / "DLLs" / "_tkinter.pyd").is_file():
        raise TkError(
            f"{install} has no DLLs/_tkinter.pyd: give the folder of a Windows CPython "
            f"{runtime.minor} install (it holds DLLs, Lib and tcl)"
        )

    def fill(staging: Path) -> str:
        pyd = install / "DLLs" / "_tkinter.pyd"
        (staging / "DLLs").mkdir()
        # _tkinter.pyd and the DLLs it loads, directly or through Tcl (zlib), that the
        # install has and the runtime has not (python3XY.dll and vcruntime140.dll it has).
        present = {p.name.lower(): p for p in (install / "DLLs").iterdir()}
        own = {p.name.lower() for p in runtime.path.iterdir()}
        todo, done = [pyd], set()
        while todo:
            path = todo.pop()
            shutil.copy2(path, staging / "DLLs" / path.name)
            done.add(path.name.lower())
            for name in _pe_imports(path):
                if name in present and name not in own and name not in done:
                    todo.append(present[name])
        if not (install / "tcl").is_dir():
            raise TkError(f"{install} has no tcl folder (Tcl/Tk's script library)")
        shutil.copytree(
            install / "tcl", staging / "tcl", ignore=shutil.ignore_patterns("*.lib", "*.a")
        )
        shutil.copytree(
            install / "Lib" / "tkinter",
            staging / "Lib" / "tkinter",
            ignore=shutil.ignore_patterns("__pycache__", "test"),
        )
        licences = staging / "LICENSES"
        licences.mkdir()
        for found in sorted((install / "tcl").rglob("license.terms")):
            where = found.parent.relative_to(install / "tcl").as_posix().replace("/", "-")
            shutil.copy2(found, licences / f"{where}.license.terms")
        if (install / "LICENSE.txt").is_file():
            shutil.copy2(install / "LICENSE.txt", licences / "python.LICENSE.txt")
        return f"--from {install}"

    return _install(runtime, fill)


def installed_python(runtime: Runtime) -> Path | None:
    """On Windows, the folder of an installed CPython of *runtime*'s version with tkinter
    (this interpreter, else the one ``py -3.X`` starts); ``None`` elsewhere or if none."""
    if sys.platform != "win32":
        return None
    candidates = []
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == runtime.minor:
        candidates.append(Path(sys.base_prefix))
    launcher = shutil.which("py")
    if launcher is not None:
        asked = subprocess.run(
            [launcher, f"-{runtime.minor}", "-c", "import sys; print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if asked.returncode == 0 and asked.stdout.strip():
            candidates.append(Path(asked.stdout.strip()))
    for folder in candidates:
        if (folder / "DLLs" / "_tkinter.pyd").is_file() and (folder / "tcl").is_dir():
            return folder
    return None


def build_tk(runtime: Runtime, log: Callable[[str], None] = lambda _: None) -> TkRuntime:
    """Build Tcl/Tk and ``_tkinter.pyd`` for *runtime* here (:mod:`exepy.tkbuild`)."""
    from exepy import tkbuild

    _check_minor(runtime)

    def fill(staging: Path) -> str:
        try:
            tkbuild.build_tk_folder(runtime, staging, log)
        except tkbuild.TkBuildError as exc:
            raise TkError(str(exc)) from None
        return f"built here: Tcl {tkbuild.TCL_VERSION}, Tk {tkbuild.TK_VERSION} (mingw-w64)"

    return _install(runtime, fill)


def _imports_tkinter(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", ""))
            in (
                "import_module",
                "__import__",
            )
        ):
            names = [node.args[0].value]
        else:
            continue
        if any(name.split(".")[0] in ("tkinter", "_tkinter") for name in names):
            return True
    return False


def app_uses_tkinter(contents: Sequence[tuple[str, bytes]]) -> bool:
    """Whether a bundled ``.py`` file imports tkinter (``import``, ``from``, or
    ``importlib.import_module``/``__import__`` with a literal name)."""
    for name, data in contents:
        if not name.endswith(".py") or b"tkinter" not in data:
            continue
        try:
            tree = ast.parse(data, name)
        except (SyntaxError, ValueError):
            continue
        if _imports_tkinter(tree):
            return True
    return False


@dataclass(frozen=True)
class TkPlan:
    """What an app that imports tkinter gets (see the module's docstring)."""

    bundle: list[tuple[str, bytes]]
    """Files for the bundle: ``tkinter/...``, ``_exepy_tk.py`` and, onefile, the tcl zip."""
    binaries: list[Path]
    """``_tkinter.pyd`` and the DLLs, beside the exe or in the runtime payload."""
    folder: list[tuple[str, Path]]
    """``--onedir`` only: ``(relative posix path, file)`` to copy beside the exe."""


_HOOK_SOURCE = '''\
"""exepy: point Tcl at this app's tcl folder before _tkinter starts it (see exepy.tk)."""

import os

TCL_ZIP = {zip_name!r}
DIGEST = {digest!r}
KEY_FILES = {key_files!r}


def _intact(tcl):
    try:
        with open(os.path.join(tcl, {stamp!r}), encoding="ascii") as stamp:
            if stamp.read() != DIGEST:
                return False
        return all(
            os.stat(os.path.join(tcl, name)).st_size == size for name, size in KEY_FILES.items()
        )
    except OSError:
        return False


def _unpack(tcl):
    """Unpack the bundled zip beside *tcl* and rename it into place (or over a damaged one)."""
    import io
    import shutil
    import zipfile

    staging = "%s.%d.tmp" % (tcl, os.getpid())
    with zipfile.ZipFile(io.BytesIO(__loader__.get_data(TCL_ZIP))) as archive:
        archive.extractall(staging)
    with open(os.path.join(staging, {stamp!r}), "w", encoding="ascii") as stamp:
        stamp.write(DIGEST)
    try:
        os.rename(staging, tcl)
        return tcl
    except OSError:
        pass
    if _intact(tcl):  # another first run won the race
        shutil.rmtree(staging, ignore_errors=True)
        return tcl
    old = "%s.%d.old" % (tcl, os.getpid())
    try:
        os.rename(tcl, old)
        os.rename(staging, tcl)
    except OSError:
        return staging  # in use elsewhere: run from our own copy
    shutil.rmtree(old, ignore_errors=True)
    return tcl


def _setup():
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("_tkinter")
    if spec is None or not spec.origin:
        return
    tcl = os.path.join(os.path.dirname(spec.origin), "tcl")
    if DIGEST is not None and not _intact(tcl):
        tcl = _unpack(tcl)
    if os.path.isdir(tcl):
        os.environ["TCL_LIBRARY"] = os.path.join(tcl, "tcl8.6")
        os.environ["TK_LIBRARY"] = os.path.join(tcl, "tk8.6")


_setup()
'''


def _tcl_zip(files: list[tuple[str, Path]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for relative, path in files:
            # Fixed time, mode and system: the same bytes whatever the machine and OS.
            info = zipfile.ZipInfo(relative, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            archive.writestr(info, path.read_bytes())
    return out.getvalue()


def _patched_tkinter(source: bytes) -> bytes:
    """``import _tkinter`` becomes ``import _exepy_tk; import _tkinter`` on the same line."""
    hooked = b"import " + _HOOK.encode() + b"; import _tkinter"
    patched, count = re.subn(rb"^import _tkinter\b", hooked, source, count=1, flags=re.M)
    if count != 1:
        raise TkError("tkinter/__init__.py has no 'import _tkinter' line to hook Tcl's folder to")
    return patched


def plan(
    runtime: Runtime,
    contents: Sequence[tuple[str, bytes]],
    *,
    onefile: bool,
    full_tcl: bool = False,
    own: int | None = None,
) -> TkPlan | None:
    """What to add for an app with *contents*; ``None`` when it does not import tkinter.

    The first *own* entries of *contents* (default: all) are the app's own files. When
    they import tkinter and *runtime* has no Tcl/Tk, :class:`TkError` names the command
    that adds it; when only the rest (a library's optional import) does, the app is built
    without tkinter, as an embeddable CPython has none.
    """
    if not app_uses_tkinter(contents) or any(name.startswith("tkinter/") for name, _ in contents):
        return None
    tk = find_tk(runtime)
    if tk is None and own is not None and not app_uses_tkinter(contents[:own]):
        return None
    if tk is None:
        if runtime.minor == "3.12":
            _check_minor(runtime)
        raise TkError(
            f"the app imports tkinter, but runtime {runtime.version} has no Tcl/Tk: run "
            f"'exepy runtime tk {runtime.minor}' (builds it; or --from a Windows Python "
            f"{runtime.minor} install) first"
        )
    bundle = []
    for path in sorted(tk.tkinter.rglob("*.py"), key=lambda p: p.relative_to(tk.tkinter).parts):
        relative = PurePosixPath("tkinter", path.relative_to(tk.tkinter).as_posix())
        if "__pycache__" in relative.parts or "test" in relative.parts:
            continue
        data = path.read_bytes()
        if relative.as_posix() == "tkinter/__init__.py":
            data = _patched_tkinter(data)
        bundle.append((relative.as_posix(), data))
    files = tk.tcl_files(full=full_tcl)
    digest = None
    if onefile:
        archive = _tcl_zip(files)
        digest = hashlib.sha256(archive).hexdigest()[:16]
        bundle.append((_TCL_ZIP, archive))
    sizes = {name: path.stat().st_size for name, path in files if name in _KEY_FILES}
    hook = _HOOK_SOURCE.format(zip_name=_TCL_ZIP, digest=digest, key_files=sizes, stamp=_STAMP)
    bundle.append((f"{_HOOK}.py", hook.encode()))
    folder = [] if onefile else [(f"tcl/{name}", path) for name, path in files]
    return TkPlan(bundle, tk.dlls, folder)


def describe(runtime: Runtime) -> str:
    """One line: whether *runtime* has Tcl/Tk and where it came from."""
    tk = find_tk(runtime)
    return "no tkinter" if tk is None else f"tkinter ({tk.source})"


def _human(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def summary(tk: TkRuntime) -> str:
    """What ``exepy runtime tk`` prints once done."""
    dlls = sum(p.stat().st_size for p in tk.dlls)
    full = tk.tcl_files(full=True)
    trimmed = tk.tcl_files()
    return (
        f"{tk.folder}: {', '.join(p.name for p in tk.dlls)} ({_human(dlls)}); tcl "
        f"{len(trimmed)} files {_human(sum(p.stat().st_size for _, p in trimmed))} as apps get "
        f"it ({len(full)} files {_human(sum(p.stat().st_size for _, p in full))} in all); "
        f"{tk.source}"
    )
