"""Shared fixtures for exepy's tests: one Wine prefix and one compiled harness per session.

Wine's first start of a prefix costs seconds, so the session shares one prefix with a
persistent wineserver, and one resdump.exe compiled from harness/resdump.c.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from components import require_command

# The helpers module sits next to this file; pytest's importlib mode does not add it.
sys.path.insert(0, str(Path(__file__).parent))

from exepy_support import HARNESS_DIR, Harness, Wine


@pytest.fixture(scope="session")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wine]:
    wine_cmd = require_command("wine", "wine")
    server = require_command("wineserver", "wine")
    prefix = tmp_path_factory.mktemp("wineprefix")
    env = {
        **os.environ,
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "DISPLAY": "",
    }
    subprocess.run(
        [server, "-p"],
        env=env,
        check=True,
        timeout=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    work = tmp_path_factory.mktemp("winework")
    try:
        yield Wine(wine_cmd, env, work)
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)


@pytest.fixture(scope="session")
def mingw_gcc() -> str:
    return require_command("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64")


@pytest.fixture(scope="session")
def harness_exe(tmp_path_factory: pytest.TempPathFactory, mingw_gcc: str) -> Path:
    """resdump.exe compiled from harness/resdump.c (an exe with no resource section)."""
    out = tmp_path_factory.mktemp("harness") / "resdump.exe"
    subprocess.run(
        [
            mingw_gcc,
            "-municode",
            "-O2",
            "-Wall",
            "-Werror",
            "-o",
            str(out),
            str(HARNESS_DIR / "resdump.c"),
        ],
        check=True,
        timeout=120,
    )
    return out


@pytest.fixture(scope="session")
def harness(wine: Wine, harness_exe: Path) -> Harness:
    return Harness(wine, harness_exe)


@pytest.fixture(scope="session")
def recorder_exe(tmp_path_factory: pytest.TempPathFactory, mingw_gcc: str) -> Path:
    """recordargs.exe: a stand-in for python.exe/powershell.exe/fltmc.exe that logs its argv."""
    out = tmp_path_factory.mktemp("recorder") / "recordargs.exe"
    subprocess.run(
        [
            mingw_gcc,
            "-municode",
            "-O2",
            "-Wall",
            "-Werror",
            "-o",
            str(out),
            str(HARNESS_DIR / "recordargs.c"),
        ],
        check=True,
        timeout=120,
    )
    return out
