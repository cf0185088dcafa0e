"""Pure-Python wheels as bundle files: ``exepy build --wheel PKG.whl --requirement FILE``.

A standalone app's bundle is imported by embeddedimport from the exe's resources, which
can hold Python sources and data only: a wheel goes in when it is pure Python (``WHEEL``
says ``Root-Is-Purelib: true`` and every tag is ``*-none-any``, and it holds no compiled
extension); anything else is refused, naming the file. ``--requirement`` resolves with
``pip download`` for the runtime's Windows platform and Python version, so dependencies come
too, and a requirement that only has binary wheels is refused the same way.

pip evaluates environment markers for the machine it runs on (``--platform`` changes only the
wheel tags), so a Linux build would miss ``colorama; sys_platform == "win32"`` and take
``python_version`` from the build's Python. exepy runs pip with the marker environment of the
target instead (:func:`target_environment`: Windows x64 and the runtime's CPython).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from email.parser import Parser
from pathlib import Path

__all__ = [
    "WheelError",
    "binary_wheel_files",
    "download_requirements",
    "is_pure",
    "opens_data_by_file",
    "target_environment",
    "wheel_files",
]

_BINARY_SUFFIXES = (".pyd", ".so", ".dll", ".dylib")


class WheelError(ValueError):
    """A wheel cannot go into a bundle; the message names the file and why."""


def _metadata(archive: zipfile.ZipFile, name: str) -> dict[str, list[str]]:
    dist_info = sorted(
        {n.split("/")[0] for n in archive.namelist() if n.split("/")[0].endswith(".dist-info")}
    )
    if len(dist_info) != 1 or f"{dist_info[0]}/WHEEL" not in archive.namelist():
        raise WheelError(f"{name} is not a wheel: it has no (single) *.dist-info/WHEEL")
    message = Parser().parsestr(archive.read(f"{dist_info[0]}/WHEEL").decode("utf-8", "replace"))
    return {key.lower(): message.get_all(key) or [] for key in message}


def wheel_files(path: Path, label: str | None = None) -> list[tuple[str, bytes]]:
    """The ``(bundle name, content)`` pairs of the pure-Python wheel at *path*.

    ``*.data/purelib`` and ``platlib`` contents go to the top, like an install; the other
    ``.data`` folders (scripts, headers, data) are left out. Raises :class:`WheelError` for
    a binary wheel or a file that is not a wheel, naming the wheel as *label* (default:
    *path*).
    """
    name = label or os.fspath(path)
    try:
        archive = zipfile.ZipFile(path)
    except OSError as exc:
        raise WheelError(f"cannot read the wheel {name}: {exc.strerror or exc}") from None
    except zipfile.BadZipFile:
        raise WheelError(f"{name} is not a wheel (a .whl is a zip file)") from None
    with archive:
        info = _metadata(archive, name)
        tags = info.get("tag", [])
        purelib = [value.strip().lower() for value in info.get("root-is-purelib", [])]
        binary_tags = [tag for tag in tags if not tag.strip().endswith("-none-any")]
        if purelib != ["true"] or binary_tags or not tags:
            shown = ", ".join(tags) or "none"
            raise WheelError(
                f"{name} is a binary wheel (tags: {shown}): a bundle holds pure-Python "
                "wheels only (tag py3-none-any)"
            )
        files = []
        for member in archive.infolist():
            if member.is_dir():
                continue
            target = member.filename
            top = target.split("/")[0]
            if top.endswith(".data"):
                kind, _, rest = target[len(top) + 1 :].partition("/")
                if kind not in ("purelib", "platlib") or not rest:
                    continue
                target = rest
            if target.lower().endswith(_BINARY_SUFFIXES):
                raise WheelError(
                    f"{name} holds the compiled file {member.filename}: a bundle holds "
                    "pure-Python wheels only"
                )
            files.append((target, archive.read(member)))
    return _filter_record(files)


def target_environment(version: str) -> dict[str, str]:
    """The PEP 508 marker environment of the official Windows x64 CPython *version*
    (``3.13.2``), as ``packaging.markers.default_environment()`` returns it there."""
    minor = ".".join(version.split(".")[:2])
    return {
        "implementation_name": "cpython",
        "implementation_version": version,
        "os_name": "nt",
        "platform_machine": "AMD64",
        "platform_release": "10",
        "platform_system": "Windows",
        "platform_version": "10.0.19045",
        "python_full_version": version,
        "platform_python_implementation": "CPython",
        "python_version": minor,
        "sys_platform": "win32",
    }


# Runs pip in this interpreter with the target's marker environment: pip's vendored
# `packaging` evaluates every marker (requirements files and dependencies' metadata)
# through default_environment().
_PIP_FOR_TARGET = """\
import json, sys
import pip._vendor.packaging.markers as markers
target = json.loads(sys.argv.pop(1))
markers.default_environment = lambda: dict(target)
if hasattr(markers, "_cached_default_environment"):
    markers._cached_default_environment = lambda: dict(target)
from pip._internal.cli.main import main
sys.argv[0] = "pip"
sys.exit(main())
"""


_CODE_SUFFIXES = (".py", ".pyi", ".pyc", ".typed")


def opens_data_by_file(files: Sequence[tuple[str, bytes]]) -> bool:
    """Whether a package (its wheel's files) may open data beside its modules by path:
    it ships data files and its code uses ``__file__``. Such a package needs real files
    (``os.path.dirname(__file__)`` names a folder inside the exe otherwise: docutils'
    writer templates, jinja2's ``PackageLoader``); importlib.resources would not."""
    data = [
        name
        for name, _ in files
        if not name.endswith(_CODE_SUFFIXES) and ".dist-info/" not in name and "/" in name
    ]
    return bool(data) and any(
        name.endswith(".py") and b"__file__" in content for name, content in files
    )


def is_pure(path: Path) -> bool:
    """Whether the wheel at *path* says it is pure Python (``*-none-any``, purelib); a file
    that is not a wheel counts as pure, so that :func:`wheel_files` names the problem."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = _metadata(archive, os.fspath(path))
    except (OSError, zipfile.BadZipFile, WheelError):
        return True
    tags = [tag.strip() for tag in info.get("tag", [])]
    purelib = [value.strip().lower() for value in info.get("root-is-purelib", [])]
    return purelib == ["true"] and all(tag.endswith("-none-any") for tag in tags)


def _tag_fits(tag: str, minor: str) -> bool:
    """Whether wheel tag *tag* loads in Windows x64 CPython *minor* (``3.13``)."""
    try:
        python, abi, platform = tag.split("-")
    except ValueError:
        return False
    if platform not in ("win_amd64", "any"):
        return False
    ours = "cp3" + minor.split(".")[1]
    pythons = python.split(".")
    if abi == "abi3":  # the stable ABI: built for cp3Y, loads in every later 3.x
        return any(
            p.startswith("cp3") and p[3:].isdigit() and int(p[3:]) <= int(ours[3:]) for p in pythons
        )
    return (ours in pythons and abi in (ours, "none")) or (abi == "none" and "py3" in pythons)


def binary_wheel_files(path: Path, minor: str, label: str | None = None) -> list[tuple[str, bytes]]:
    """The ``(relative name, content)`` files of a binary wheel for Windows x64 CPython
    *minor*, laid out as pip installs them (``.data/platlib`` and ``purelib`` at the top,
    scripts and headers left out); they go to disk beside the exe, since Windows loads
    extension modules and DLLs only from files. Raises :class:`WheelError` for a wheel
    built for another platform or Python."""
    name = label or os.fspath(path)
    try:
        archive = zipfile.ZipFile(path)
    except OSError as exc:
        raise WheelError(f"cannot read the wheel {name}: {exc.strerror or exc}") from None
    except zipfile.BadZipFile:
        raise WheelError(f"{name} is not a wheel (a .whl is a zip file)") from None
    with archive:
        tags = [tag.strip() for tag in _metadata(archive, name).get("tag", [])]
        if not any(_tag_fits(tag, minor) for tag in tags):
            raise WheelError(
                f"{name} is built for {', '.join(tags) or 'no platform'}; the runtime is "
                f"Windows x64 CPython {minor}: give its cp3{minor.split('.')[1]}-win_amd64 "
                "(or abi3) wheel"
            )
        files = []
        for member in archive.infolist():
            if member.is_dir():
                continue
            target = member.filename
            top = target.split("/")[0]
            if top.endswith(".data"):
                kind, _, rest = target[len(top) + 1 :].partition("/")
                if kind not in ("purelib", "platlib") or not rest:
                    continue
                target = rest
            if ".." in target.split("/") or target.startswith("/"):
                raise WheelError(f"{name} holds the unsafe path {member.filename}")
            files.append((target, archive.read(member)))
    return _filter_record(files)


def _installed_name(recorded: str) -> str:
    """Where a RECORD path lands: ``*.data/purelib|platlib/X`` at the top, as pip puts it."""
    top, _, rest = recorded.partition("/")
    if top.endswith(".data"):
        kind, _, inner = rest.partition("/")
        if kind in ("purelib", "platlib") and inner:
            return inner
    return recorded


def _filter_record(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """*files* with ``*.dist-info/RECORD`` listing exactly the files kept (with their
    hashes and sizes, ``.data`` paths as installed), so ``importlib.metadata.files()``
    names what the app has: scripts and headers left out are not listed."""
    import csv
    import io

    kept = {name for name, _ in files}
    result = []
    for name, content in files:
        top = name.split("/")[0]
        if name == f"{top}/RECORD" and top.endswith(".dist-info"):
            rows = csv.reader(io.StringIO(content.decode("utf-8", "replace")))
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            for row in rows:
                if not row:
                    continue
                row[0] = _installed_name(row[0])
                if row[0] == name:
                    writer.writerow([name, "", ""])  # RECORD cannot hash itself
                elif row[0] in kept:
                    writer.writerow(row)
            if not out.getvalue():
                continue  # an empty RECORD (invalid): embeddedimport lists the files itself
            content = out.getvalue().encode("utf-8")
        result.append((name, content))
    return result


def download_requirements(
    requirements: Path,
    minor: str,
    folder: Path,
    pip: Sequence[str] = (),
    *,
    version: str | None = None,
    prefer_pure: bool = True,
) -> list[Path]:
    """Wheels for *requirements* (a pip requirements file) for Windows x64 CPython *minor*.

    Runs ``pip download --only-binary=:all:`` for that platform into *folder* (the caller
    owns it and removes it), with environment markers evaluated for Windows and CPython
    *version* (default: *minor*.0), unless *pip* names another pip command; raises
    :class:`WheelError` with pip's last line. With *prefer_pure*, a binary wheel whose
    release also has a pure one is replaced by that (for builds that hold pure code only).
    """
    if not requirements.is_file():
        raise WheelError(f"the requirements file {os.fspath(requirements)} does not exist")
    environment = target_environment(version or f"{minor}.0")
    command = list(pip) or [sys.executable, "-c", _PIP_FOR_TARGET, json.dumps(environment)]
    done = subprocess.run(
        [
            *command,
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--platform",
            "win_amd64",
            "--implementation",
            "cp",
            "--python-version",
            minor,
            "-d",
            str(folder),
            "-r",
            str(requirements),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        # Name the target: "no matching distribution" often means no Windows wheel for it.
        raise WheelError(
            f"pip download -r {os.fspath(requirements)} for Windows x64 CPython {minor} "
            f"(binary wheels only) failed: {reason}"
        )
    found = sorted(folder.glob("*.whl"))
    if pip or not prefer_pure:
        return found
    options = _index_options(requirements)
    return [_pure_instead(wheel, minor, command, options) for wheel in found]


_PATH_OPTIONS = ("--find-links", "-f")
_INDEX_OPTIONS = (*_PATH_OPTIONS, "--no-index", "--index-url", "-i", "--extra-index-url")


def _index_options(requirements: Path) -> list[str]:
    """The index options in a requirements file (``--find-links`` made absolute the way pip
    reads it: relative to the file), for a second ``pip download`` of one name."""
    found: list[str] = []
    for line in requirements.read_text(encoding="utf-8", errors="replace").splitlines():
        words = line.split("#")[0].split()
        if not words:
            continue
        option, _, value = words[0].partition("=")
        if option not in _INDEX_OPTIONS:
            continue
        if not value and len(words) > 1:
            value = words[1]
        if option in _PATH_OPTIONS and "://" not in value:
            beside = requirements.parent / value
            value = str(beside.resolve()) if beside.exists() else value
        found += [option, value] if value else [option]
    return found


def _pure_instead(wheel: Path, minor: str, command: Sequence[str], options: list[str]) -> Path:
    """*wheel*, or the same release's ``py3-none-any`` wheel where *wheel* is binary and the
    project publishes a pure one too (charset-normalizer, pyyaml-free speed-ups...): pip's
    ``--platform win_amd64`` always prefers the binary one, which a bundle cannot hold."""
    parts = wheel.name[: -len(".whl")].split("-")
    if len(parts) < 5 or parts[-2:] == ["none", "any"]:
        return wheel
    name, version = parts[0], parts[1]
    pure = wheel.parent / ".pure"
    pure.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            *command,
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "any",
            "--implementation",
            "py",
            "--python-version",
            minor,
            "-d",
            str(pure),
            *options,
            f"{name}=={version}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    candidates = sorted(pure.glob(f"{name}-{version}-*-none-any.whl"))
    return candidates[0] if done.returncode == 0 and candidates else wheel
