"""Pure-Python wheels as bundle files: ``exepy build --wheel PKG.whl --requirement FILE``.

A standalone app's bundle is imported by embeddedimport from the exe's resources, which
can hold Python sources and data only: a wheel goes in when it is pure Python (``WHEEL``
says ``Root-Is-Purelib: true`` and every tag is ``*-none-any``, and it holds no compiled
extension); anything else is refused, naming the file. ``--requirement`` resolves with
``pip download`` for the runtime's Windows platform and Python version, so dependencies come
too, and a requirement that only has binary wheels is refused the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from email.parser import Parser
from pathlib import Path

__all__ = ["WheelError", "download_requirements", "wheel_files"]

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
            if target.endswith("/RECORD") and top.endswith(".dist-info"):
                continue
            files.append((target, archive.read(member)))
    return files


def download_requirements(
    requirements: Path, minor: str, folder: Path, pip: Sequence[str] = ()
) -> list[Path]:
    """Wheels for *requirements* (a pip requirements file) for Windows x64 CPython *minor*.

    Runs ``pip download --only-binary=:all:`` for that platform into *folder* (the caller
    owns it and removes it); raises :class:`WheelError` with pip's last line.
    """
    if not requirements.is_file():
        raise WheelError(f"the requirements file {os.fspath(requirements)} does not exist")
    command = list(pip) or [sys.executable, "-m", "pip"]
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
        raise WheelError(f"pip download -r {os.fspath(requirements)} failed: {reason}")
    return sorted(folder.glob("*.whl"))
