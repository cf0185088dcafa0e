"""Helpers for exepy's tests: real PE files, Wine, and the resdump harness's output."""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from components import missing, require_command
from exepy.corpus import distlib_launchers, wine_binaries
from exepy.restree import ResourceId, ResourceKey

# The C harnesses live in tools/harness/: tools/demo compiles resdump.c too.
HARNESS_DIR = Path(__file__).resolve().parents[2] / "tools" / "harness"


def launcher(name: str) -> Path:
    """One of pip's distlib launchers (t32.exe x86, t64.exe x64, t64-arm.exe ARM64...)."""
    for path in distlib_launchers():
        if path.name == name:
            return path
    missing(f"pip's distlib launcher {name}", "it ships inside pip (pip/_vendor/distlib)")
    raise AssertionError("unreachable: missing() skips or fails")


def wine_binary(name: str) -> Path:
    """One of Wine's own Windows binaries (skips, or fails on CI, without Wine)."""
    for path in wine_binaries():
        if path.name == name and "x86_64" in str(path):
            return path
    require_command("wine64", "wine64")
    missing(f"Wine's {name}", "apt-get install wine64 (it ships the x86_64 Windows binaries)")
    raise AssertionError("unreachable: missing() skips or fails")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def windows_path(path: Path) -> str:
    """The path Wine's Z: drive gives a Unix path."""
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


@dataclass
class Wine:
    """A headless Wine prefix for this session."""

    wine: str
    env: dict[str, str]
    work: Path

    def run(
        self, args: list[str], timeout: float = 60, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a Windows program; output goes through files (wineserver may hold pipes open)."""
        out = self.work / "wine.out"
        err = self.work / "wine.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.run(
                [self.wine, *args],
                env=self.env,
                stdout=o,
                stderr=e,
                timeout=timeout,
                cwd=cwd or self.work,
                check=False,
            )
        return subprocess.CompletedProcess(
            proc.args,
            proc.returncode,
            out.read_bytes().decode("utf-8", "replace"),
            err.read_bytes().decode("utf-8", "replace"),
        )


@contextlib.contextmanager
def headless_wine(
    prefix: Path, work: Path, wine: str = "wine", server: str = "wineserver"
) -> Iterator[Wine]:
    """A Wine prefix with a persistent wineserver (later starts take ~0.05 s), stopped after."""
    env = {
        **os.environ,
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "DISPLAY": "",
    }
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [server, "-p"],
        env=env,
        check=True,
        timeout=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Wine(wine, env, work)
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)


@contextlib.contextmanager
def fresh_windows(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[str], dict[str, str], Path]]:
    """Where exepy's Windows programs run with pipes, as on a PC with no Python installed:
    natively on Windows (with a %LOCALAPPDATA% of its own, so that tests may empty the
    onefile runtime cache), else under Wine in a fresh prefix with a persistent wineserver,
    stopped afterwards. Yields the command's start (``[]`` or ``[wine]``), the environment
    (no ``PYTHONPATH``) and %LOCALAPPDATA% as a local path."""
    if sys.platform == "win32":
        local = tmp_path_factory.mktemp("localappdata")
        env = {**os.environ, "LOCALAPPDATA": str(local)}
        env.pop("PYTHONPATH", None)
        yield [], env, local
        return
    wine = require_command("wine", "wine")
    server = require_command("wineserver", "wine")
    prefix = tmp_path_factory.mktemp("fresh-prefix")
    env = {
        **os.environ,
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "DISPLAY": "",
    }
    env.pop("PYTHONPATH", None)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run([server, "-p"], env=env, check=True, timeout=60, **quiet)  # type: ignore[call-overload]
    try:
        # Create the prefix with no pipes open: the services it starts keep their stdio,
        # and a pipe they held would never close.
        subprocess.run(
            [wine, "cmd", "/c", "exit"],
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=180,
            check=False,
            **quiet,  # type: ignore[call-overload]
        )
        assert not list((prefix / "drive_c").rglob("python*.exe")), "the prefix has a Python"
        users = prefix / "drive_c" / "users"
        found = [p for p in users.glob("*/AppData/Local") if p.parent.parent.name != "Public"]
        assert found, f"no user profile in {users}"
        yield [wine], env, found[0]
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)


def compile_harness(source: str, folder: Path, gcc: str = "x86_64-w64-mingw32-gcc") -> Path:
    """Build harness/<source> with mingw as a Unicode console exe in *folder*."""
    out = folder / (Path(source).stem + ".exe")
    subprocess.run(
        [gcc, "-municode", "-O2", "-Wall", "-Werror", "-o", str(out), str(HARNESS_DIR / source)],
        check=True,
        timeout=120,
    )
    return out


@dataclass
class Dump:
    """What resdump.exe reported: resources found by enumeration, and direct look-ups."""

    resources: dict[tuple[str, str, int], tuple[int, str]]
    found: list[tuple[str, str, int, tuple[int, str] | None]]


def loader_key(key: ResourceKey) -> tuple[str, str, int]:
    """How resdump prints a key: ids as #n, names as stored."""

    def show(value: ResourceId) -> str:
        return f"#{value}" if isinstance(value, int) else value

    return show(key[0]), show(key[1]), key[2]


def expected_dump(
    resources: Mapping[ResourceKey, bytes],
) -> dict[tuple[str, str, int], tuple[int, str]]:
    return {loader_key(k): (len(v), sha256(v)) for k, v in resources.items()}


@dataclass
class Harness:
    """resdump.exe under Wine."""

    wine: Wine
    exe: Path

    def dump(
        self, target: Path | str, lookups: list[tuple[str, str, int]] = (), exe: Path | None = None
    ) -> Dump:  # type: ignore[assignment]
        out = self.wine.work / "dump.txt"
        out.unlink(missing_ok=True)
        args = [
            str(exe or self.exe),
            target if isinstance(target, str) else windows_path(target),
            windows_path(out),
        ]
        for t, n, lang in lookups:
            args += [t, n, str(lang)]
        proc = self.wine.run(args)
        assert out.exists(), (
            f"resdump wrote nothing (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
        lines = out.read_text("utf-8").splitlines()
        assert lines[0] == "OK", lines[0]
        assert lines[-1] == "END", "resdump did not finish"
        resources: dict[tuple[str, str, int], tuple[int, str]] = {}
        found: list[tuple[str, str, int, tuple[int, str] | None]] = []
        for line in lines[1:-1]:
            tag, t, n, lang, *rest = line.split("\t")
            value = None if rest == ["MISSING"] else (int(rest[0]), rest[1])
            if tag == "RES":
                assert value is not None
                resources[t, n, int(lang)] = value
            else:
                found.append((t, n, int(lang), value))
        return Dump(resources, found)


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A minimal valid PNG, for icon images."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    rows = b"".join(b"\0" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def ico(sizes: list[int]) -> bytes:
    images = [png(s, s, (s, 0, 255 - s)) for s in sizes]
    out = bytearray(struct.pack("<HHH", 0, 1, len(images)))
    offset = 6 + 16 * len(images)
    for size, data in zip(sizes, images, strict=True):
        out += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    return bytes(out) + b"".join(images)


@dataclass
class Signer:
    """Authenticode signing with osslsigncode and a throw-away self-signed certificate."""

    tool: str
    key: Path
    cert: Path

    @classmethod
    def create(cls, folder: Path) -> Signer:
        tool = require_command("osslsigncode", "osslsigncode")
        openssl = require_command("openssl", "openssl")
        key, cert = folder / "key.pem", folder / "cert.pem"
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-days",
                "2",
                "-subj",
                "/CN=exepy test",
            ],
            check=True,
            capture_output=True,
        )
        return cls(tool, key, cert)

    def sign(self, source: Path, target: Path) -> None:
        subprocess.run(
            [
                self.tool,
                "sign",
                "-certs",
                str(self.cert),
                "-key",
                str(self.key),
                "-in",
                str(source),
                "-out",
                str(target),
            ],
            check=True,
            capture_output=True,
        )

    def verify(self, path: Path) -> bool:
        command = [self.tool, "verify", "-CAfile", str(self.cert), "-in", str(path)]
        return subprocess.run(command, capture_output=True, check=False).returncode == 0
