"""Shared fixtures for exepy's tests: one Wine prefix and one compiled harness per session.

Wine's first start of a prefix costs seconds, so the session shares one prefix with a
persistent wineserver, and one resdump.exe compiled from harness/resdump.c.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from components import require_command

# The helpers module sits next to this file; pytest's importlib mode does not add it.
sys.path.insert(0, str(Path(__file__).parent))

from exepy_support import Harness, Wine, compile_harness, headless_wine


@pytest.fixture(scope="session")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wine]:
    wine_cmd = require_command("wine", "wine")
    server = require_command("wineserver", "wine")
    with headless_wine(
        tmp_path_factory.mktemp("wineprefix"), tmp_path_factory.mktemp("winework"), wine_cmd, server
    ) as session:
        yield session


@pytest.fixture(scope="session")
def mingw_gcc() -> str:
    return require_command("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64")


@pytest.fixture(scope="session")
def harness_exe(tmp_path_factory: pytest.TempPathFactory, mingw_gcc: str) -> Path:
    """resdump.exe compiled from harness/resdump.c (an exe with no resource section)."""
    return compile_harness("resdump.c", tmp_path_factory.mktemp("harness"), mingw_gcc)


@pytest.fixture(scope="session")
def harness(wine: Wine, harness_exe: Path) -> Harness:
    return Harness(wine, harness_exe)


@pytest.fixture(scope="session")
def recorder_exe(tmp_path_factory: pytest.TempPathFactory, mingw_gcc: str) -> Path:
    """recordargs.exe: a stand-in for python.exe/powershell.exe/fltmc.exe that logs its argv."""
    return compile_harness("recordargs.c", tmp_path_factory.mktemp("recorder"), mingw_gcc)
