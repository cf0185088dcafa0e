"""Fixtures for the embeddedimport tests: real PE bases and executables built from them."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest
from components import missing
from embeddedimport_testpe import (  # tools/embeddedimport_testpe.py, shared with the bench
    MakeExe,
    add_resources,
    original_bundle,
    original_command,
    real_pe_files,
)


@pytest.fixture(scope="session")
def pe_bases() -> list[str]:
    """Real PE files to build test executables from (skips if none exist here)."""
    files = real_pe_files()
    if not files:
        missing("real PE files", "apt-get install wine64, or pip (its distlib launchers)")
    return files


@pytest.fixture(scope="session")
def base_exe(pe_bases: list[str]) -> bytes:
    """One real x64 executable with resources and room for a section header."""
    from embeddedimport.pe import read_resources

    preferred = [f for f in pe_bases if f.endswith(("notepad.exe", "t64.exe", "cmd.exe"))]
    for path in preferred + pe_bases:
        if not path.endswith(".exe"):
            continue
        data = Path(path).read_bytes()
        try:
            if not read_resources(data):
                continue
            add_resources(data, {}, {})
        except ValueError:
            continue
        return data
    missing(
        "a real PE executable with resources and room for a section header",
        "apt-get install wine64, or pip (its distlib launchers)",
    )
    raise AssertionError("unreachable: missing() skips or fails")


@pytest.fixture
def make_exe(tmp_path: Path, base_exe: bytes) -> MakeExe:
    """Build ``name`` (an exe in tmp_path) from the real base with a bundle and a command."""
    from embeddedimport.pe import read_resources

    keep = read_resources(base_exe)

    def build(
        files: Iterable[tuple[str, bytes]] | None = None,
        command: Sequence[str] | None = ("-m", "main"),
        name: str = "app.exe",
        bundle: bytes | None = None,
        extra: dict[tuple, bytes] | None = None,
    ) -> Path:
        resources: dict[tuple, bytes] = dict(extra or {})
        if bundle is None and files is not None:
            bundle = original_bundle(list(files))
        if bundle is not None:
            resources[(10, 200, 0)] = bundle
        if command is not None:
            resources[(10, 201, 0)] = original_command(command)
        path = tmp_path / name
        path.write_bytes(add_resources(base_exe, resources, keep))
        return path

    return build


@pytest.fixture
def clean_imports() -> Iterator[None]:
    """Restore the import system's global state after a test."""
    saved_path, saved_hooks = sys.path[:], sys.path_hooks[:]
    saved_meta_path = sys.meta_path[:]
    saved_cache, saved_modules = dict(sys.path_importer_cache), set(sys.modules)
    yield
    sys.path[:] = saved_path
    sys.path_hooks[:] = saved_hooks
    sys.meta_path[:] = saved_meta_path
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(saved_cache)
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]
