"""Fixtures for the lfs-server tests (helpers: lfs_testlib here, over tools/lfs_harness.py)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lfs_scale_support import ceph, postgres  # noqa: F401 (session fixtures: real engines)
from lfs_testlib import InProcess, Server, in_process, make_data_dir, start_server


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """One nginx + gunicorn server for the whole session."""
    srv = start_server()
    yield srv
    status = srv.stop()
    log = (srv.data / "serve.log").read_text()
    shutil.rmtree(srv.data, ignore_errors=True)
    assert status == 0, log


@pytest.fixture(scope="session")
def app_server() -> Iterator[InProcess]:
    """The app in this process for API tests nginx plays no part in (no subprocess start)."""
    data = make_data_dir()
    yield in_process(data)
    shutil.rmtree(data, ignore_errors=True)
