"""Build Tcl/Tk and ``_tkinter.pyd`` for an embeddable CPython, from Debian's source packages.

python.org's embeddable distribution has no tkinter, and no package registry carries a
Windows Tcl/Tk for CPython 3.12 or 3.13. Debian does carry the sources: Tcl/Tk 8.6.13
(bookworm) and CPython 3.11 (bookworm) and 3.13 (trixie); no Debian suite has CPython
3.12's. The recipe, run where ``apt-get`` and mingw-w64 exist:

1. ``apt-get source --download-only`` with a private apt state holding ``deb-src``
   entries for the machine's own Debian mirror (``/etc`` is not touched);
2. Tcl and Tk with mingw-w64 (``win/configure --host=x86_64-w64-mingw32``), cached in
   ``~/.cache/exepy/tcltk/tcl8.6.13-tk8.6.13`` (one build per machine, ~100-190 s);
3. ``_tkinter.pyd`` from that CPython's ``Modules/_tkinter.c`` + ``tkappinit.c``, linked
   against the runtime's own ``python3XY.dll`` (~2 s per runtime).

The result is a folder in the layout :func:`exepy.tk.install_tk_from` reads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from exepy.runtime import Runtime, cache_root

__all__ = ["SOURCE_SUITES", "TCL_VERSION", "TK_VERSION", "TkBuildError", "build_tk_folder"]

TCL_VERSION = "8.6.13"
TK_VERSION = "8.6.13"
_TCL_PACKAGE = "tcl8.6=8.6.13+dfsg-2"
_TK_PACKAGE = "tk8.6=8.6.13-2"
SOURCE_SUITES = {11: "bookworm", 13: "trixie"}
"""The Debian suite whose ``python3.X`` source package builds ``_tkinter`` for 3.X."""
_MINGW = "x86_64-w64-mingw32"

# 3.13.5's _tkinter.c reads sys attributes through _PySys_GetOptionalAttrString, which
# the DLLs of 3.13.0-3.13.3 do not export: a local one (same contract: a new reference or
# NULL, no exception) links against every 3.13 DLL.
_SYS_SHIM = """\
#include "Python.h"
#include "pycore_sysmodule.h"
static int exepy_sys_get(const char *name, PyObject **result)
{
    PyObject *value = PySys_GetObject(name);
    *result = Py_XNewRef(value);
    return value != NULL;
}
#define _PySys_GetOptionalAttrString exepy_sys_get
"""

Log = Callable[[str], None]


class TkBuildError(ValueError):
    """The recipe cannot run here or failed; the message names the step and what to do."""


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise TkBuildError(
            f"building Tcl/Tk needs {name} (Debian: apt-get install {package}); or give a "
            "Windows CPython install with 'exepy runtime tk VERSION --from FOLDER'"
        )
    return found


def _run(command: list[str], cwd: Path, step: str, log_file: Path) -> None:
    with open(log_file, "ab") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log_file.read_text("utf-8", "replace").splitlines()[-15:]
        raise TkBuildError(f"{step} failed (exit {done.returncode}):\n" + "\n".join(tail))


def debian_mirror() -> str:
    """The Debian archive this machine's apt uses (``$EXEPY_DEBIAN_MIRROR`` wins)."""
    chosen = os.environ.get("EXEPY_DEBIAN_MIRROR")
    if chosen:
        return chosen
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            texts.append(path.read_text("utf-8", "replace"))
        except OSError:
            continue
    for text in texts:
        for uri in re.findall(r"^\s*(?:URIs:|deb(?:-src)?)\s+(\S+)", text, re.MULTILINE):
            if uri.rstrip("/").endswith("/debian") and "security" not in uri:
                return uri
    return "http://deb.debian.org/debian"


def download_sources(packages: list[str], target: Path, log: Log) -> None:
    """``apt-get source --download-only PACKAGES`` into *target*, apt's state kept private."""
    apt = _tool("apt-get", "apt")
    state = target / ".apt"
    for sub in ("state/lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    suites = sorted({"bookworm", *SOURCE_SUITES.values()})
    (state / "sources.list").write_text(
        "".join(f"deb-src {mirror} {suite} main\n" for suite in suites)
    )
    options = [
        f"-oDir::State={state / 'state'}",
        f"-oDir::Cache={state / 'cache'}",
        f"-oDir::Etc::sourcelist={state / 'sources.list'}",
        "-oDir::Etc::sourceparts=/nonexistent",
        "-oDebug::NoLocking=1",
        "-oAPT::Sandbox::User=root" if os.geteuid() == 0 else "-oAPT::Get::Assume-Yes=1",
    ]
    log(f"apt-get source {' '.join(packages)} from {mirror} ({', '.join(suites)})")
    log_file = target / "apt.log"
    _run([apt, *options, "-q", "update"], target, "apt-get update (deb-src)", log_file)
    _run(
        [apt, *options, "-q", "source", "--download-only", *packages],
        target,
        "apt-get source",
        log_file,
    )


def _orig(folder: Path, package: str) -> Path:
    """The upstream tarball of *package* that apt-get source downloaded (not its .asc)."""
    found = [p for p in folder.glob(f"{package}_*.orig.tar.*") if p.suffix in (".gz", ".xz")]
    if len(found) != 1:
        raise TkBuildError(f"apt-get source gave no {package} upstream tarball in {folder}")
    return found[0]


def _unpack(archive: Path, target: Path, members: Callable[[str], bool] | None = None) -> Path:
    """Unpack *archive* (or the members *members* accepts) into *target*; its top folder."""
    with tarfile.open(archive) as tar:
        chosen = [m for m in tar.getmembers() if members is None or members(m.name)]
        tar.extractall(target, members=chosen, filter="data")
        top = chosen[0].name.split("/")[0]
    return target / top


def tcltk_cache() -> Path:
    """Where the mingw build of Tcl/Tk is kept, keyed by the Tcl and Tk versions."""
    return cache_root().parent / "tcltk" / f"tcl{TCL_VERSION}-tk{TK_VERSION}"


def build_tcltk(log: Log) -> Path:
    """Tcl and Tk built with mingw-w64 and installed into the cache; that folder.

    A folder already there is used as it is (the build takes minutes); it is written
    through a temporary folder renamed into place, so a half-built one is never used.
    """
    final = tcltk_cache()
    if (final / "bin" / "tk86.dll").is_file():
        return final
    _tool(f"{_MINGW}-gcc", "gcc-mingw-w64-x86-64")
    make = _tool("make", "make")
    final.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".build-", dir=final.parent) as scratch:
        work = Path(scratch)
        download_sources([_TCL_PACKAGE, _TK_PACKAGE], work, log)
        tcl = _unpack(_orig(work, "tcl8.6"), work)
        tk = _unpack(_orig(work, "tk8.6"), work)
        prefix = work / "install"
        jobs = f"-j{os.cpu_count() or 1}"
        common = ["--enable-64bit", "--enable-threads", f"--host={_MINGW}", f"--prefix={prefix}"]
        log_file = work / "build.log"
        for name, source, extra in (
            ("Tcl", tcl, []),
            ("Tk", tk, [f"--with-tcl={work / 'build-tcl'}"]),
        ):
            build = work / f"build-{name.lower()}"
            build.mkdir()
            log(f"building {name} {TCL_VERSION} with mingw-w64")
            _run(
                ["sh", str(source / "win" / "configure"), *common, *extra],
                build,
                f"{name} configure",
                log_file,
            )
            _run([make, jobs], build, f"{name} make", log_file)
            _run([make, "install"], build, f"{name} make install", log_file)
        # Tcl's tarball carries zlib1.dll prebuilt for win64: tcl86.dll imports it.
        shutil.copy2(tcl / "compat" / "zlib" / "win64" / "zlib1.dll", prefix / "bin")
        licences = prefix / "licenses"
        licences.mkdir()
        shutil.copy2(tcl / "license.terms", licences / "tcl.license.terms")
        shutil.copy2(tk / "license.terms", licences / "tk.license.terms")
        shutil.copy2(tcl / "compat" / "zlib" / "README", licences / "zlib.README")
        (prefix / "build-seconds.txt").write_text(f"{time.monotonic() - started:.1f}\n")
        _rename_unless_there(prefix, final, final / "bin" / "tk86.dll")
    log(f"Tcl/Tk built in {time.monotonic() - started:.0f} s: {final}")
    return final


def cpython_sources(minor: int, log: Log) -> Path:
    """The parts of Debian's CPython 3.*minor* source that build ``_tkinter``, cached."""
    root = cache_root().parent / "tcltk"
    found = sorted(root.glob(f"cpython-3.{minor}.*"))
    if found:
        return found[-1]
    root.mkdir(parents=True, exist_ok=True)
    wanted = re.compile(
        r"^[^/]+/(Include/.*|PC/pyconfig\.h(\.in)?|Lib/tkinter/.*|LICENSE"
        r"|Modules/(_tkinter\.c|tkinter\.h|tkappinit\.c|clinic/_tkinter\.c\.h))$"
    )
    with tempfile.TemporaryDirectory(prefix=".python-", dir=root) as scratch:
        work = Path(scratch)
        download_sources([f"python3.{minor}"], work, log)
        archive = _orig(work, f"python3.{minor}")
        top = _unpack(archive, work / "src", lambda name: bool(wanted.match(name)))
        version = top.name.removeprefix("Python-")
        final = root / f"cpython-{version}"
        _rename_unless_there(top, final, final / "Modules" / "_tkinter.c")
    return final


def _rename_unless_there(folder: Path, final: Path, marker: Path) -> None:
    """Rename *folder* to *final*; if another build got there first (*marker* exists),
    keep that one: two first builds at once are safe."""
    try:
        folder.rename(final)
    except OSError:
        if not marker.is_file():
            raise


def build_pyd(runtime: Runtime, source: Path, tcltk: Path, target: Path) -> None:
    """Compile ``_tkinter.pyd`` into *target* against *runtime*'s own ``python3XY.dll``."""
    gcc = _tool(f"{_MINGW}-gcc", "gcc-mingw-w64-x86-64")
    with tempfile.TemporaryDirectory(prefix="exepy-tkinter-") as scratch:
        work = Path(scratch)
        config = source / "PC" / "pyconfig.h"
        if not config.is_file():
            config = source / "PC" / "pyconfig.h.in"
        shutil.copy2(config, work / "pyconfig.h")
        extra: list[str] = []
        module = (source / "Modules" / "_tkinter.c").read_text("utf-8")
        if "_PySys_GetOptionalAttrString" in module:
            (work / "shim.h").write_text(_SYS_SHIM)
            extra = ["-DPy_BUILD_CORE_MODULE=1", "-include", str(work / "shim.h")]
        command = [
            gcc,
            "-shared",
            "-O2",
            "-s",
            f"-I{work}",
            f"-I{source / 'Include'}",
            f"-I{source / 'Include' / 'internal'}",
            f"-I{source / 'Modules'}",
            f"-I{tcltk / 'include'}",
            "-DWITH_APPINIT",
            "-DNDEBUG",
            *extra,
            str(source / "Modules" / "_tkinter.c"),
            str(source / "Modules" / "tkappinit.c"),
            str((runtime.path / runtime.dll).resolve()),
            str(tcltk / "lib" / "libtcl86.dll.a"),
            str(tcltk / "lib" / "libtk86.dll.a"),
            "-o",
            str(target.resolve()),
        ]
        _run(command, work, f"compiling _tkinter.pyd for Python {runtime.version}", work / "log")


def build_tk_folder(runtime: Runtime, target: Path, log: Log) -> None:
    """Fill *target* with a Windows CPython install's tkinter parts, built here.

    The layout is the one a python.org install has: ``DLLs/`` (``_tkinter.pyd`` and the
    DLLs it loads), ``tcl/`` (``tcl8.6``, ``tk8.6``, ``tcl8``), ``Lib/tkinter``, plus
    ``LICENSES/`` with Tcl's, Tk's and zlib's licence texts.
    """
    minor = int(runtime.minor.split(".")[1])
    if minor not in SOURCE_SUITES:
        raise TkBuildError(_unsupported(runtime.version))
    tcltk = build_tcltk(log)
    source = cpython_sources(minor, log)
    log(f"compiling _tkinter.pyd from {source.name} against {runtime.dll} {runtime.version}")
    (target / "DLLs").mkdir(parents=True)
    build_pyd(runtime, source, tcltk, target / "DLLs" / "_tkinter.pyd")
    for dll in ("tcl86.dll", "tk86.dll", "zlib1.dll"):
        shutil.copy2(tcltk / "bin" / dll, target / "DLLs" / dll)
    for library in ("tcl8.6", "tk8.6", "tcl8", "dde1.4", "reg1.3"):
        shutil.copytree(tcltk / "lib" / library, target / "tcl" / library)
    shutil.copytree(source / "Lib" / "tkinter", target / "Lib" / "tkinter")
    shutil.copytree(tcltk / "licenses", target / "LICENSES")
    shutil.copy2(source / "LICENSE", target / "LICENSES" / "python.LICENSE")


def _unsupported(version: str) -> str:
    return (
        f"no Tcl/Tk build for Python {version}: exepy builds _tkinter from Debian's CPython "
        "sources, which exist for 3.11 (bookworm) and 3.13 (trixie) only; use 3.11 or 3.13, "
        "or give a Windows CPython install of the same version with --from FOLDER"
    )
