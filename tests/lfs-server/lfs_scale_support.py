"""Session fixtures for the scale-out tests: Ceph RGW and PostgreSQL started once per test
session (conftest imports them; tools/lfs_engines.py starts them), and helpers that start
lfs-server nodes on them.

Off CI a missing engine (or one that cannot start here) skips the tests naming it; with
`CI` set it fails them (tests/components.py).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from components import missing, require_module
from lfs_engines import (
    Ceph,
    EngineError,
    Postgres,
    missing_ceph,
    missing_postgres,
    start_ceph,
    start_postgres,
)
from lfs_testlib import Server, start_server

_names = itertools.count()
E = TypeVar("E", Ceph, Postgres)


def _start_engine(
    name: str, module: str, extra: str, absent: Callable[[], str | None], start: Callable[[], E]
) -> E:
    """Start one engine once its Python client *module* and its programs are present;
    otherwise skip (or, on CI, fail) naming what is missing."""
    require_module(module, extra)
    lacking = absent()
    if lacking:
        missing(lacking, "tools/test installs it as root")
    try:
        return start()
    except EngineError as exc:
        missing(name, f"it did not start: {exc}")
        raise


@pytest.fixture(scope="session")
def ceph() -> Iterator[Ceph]:
    """A single-node Ceph cluster whose RADOS Gateway serves S3 (started once, ~16 s)."""
    cluster = _start_engine("Ceph RGW", "boto3", "'lfs-server[s3]'", missing_ceph, start_ceph)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL 15 server in a temporary folder (started once, ~2 s)."""
    server = _start_engine(
        "PostgreSQL", "psycopg", "'lfs-server[postgres]'", missing_postgres, start_postgres
    )
    yield server
    server.stop()


class Cluster:
    """One bucket, one database and one signing key shared by the nodes started on them."""

    def __init__(self, ceph: Ceph, postgres: Postgres, transfer: str = "proxy") -> None:
        n = next(_names)
        self.ceph = ceph
        self.bucket = ceph.create_bucket(f"lfs-test-{os.getpid()}-{n}")
        self.database_url = postgres.create_database(f"lfs_test_{os.getpid()}_{n}")
        self.shared = Path(tempfile.mkdtemp(prefix="lfs-shared-", dir="/tmp"))
        self.shared.chmod(0o755)
        self.key_file = self.shared / "secret.key"
        self.transfer = transfer
        self.nodes: list[Server] = []

    def env(self) -> dict[str, str]:
        """The LFS_* settings every node of this cluster shares."""
        return {
            **self.ceph.s3_env(self.bucket),
            "LFS_S3_TRANSFER": self.transfer,
            "LFS_DATABASE_URL": self.database_url,
            "LFS_SECRET_KEY_FILE": str(self.key_file),
        }

    def start_node(self, **kw: object) -> Server:
        """Start one more `lfs-server serve` on these engines (users are added once)."""
        extra = {**self.env(), **(kw.pop("extra_env", None) or {})}  # type: ignore[dict-item]
        node = start_server(extra_env=extra, users=not self.nodes, **kw)  # type: ignore[arg-type]
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def s3(self) -> object:
        """A boto3 client for the gateway."""
        return self.ceph.client()

    def bucket_keys(self, prefix: str = "") -> list[str]:
        """Every key in this cluster's bucket (under *prefix*)."""
        client = self.ceph.client()
        pages = client.get_paginator("list_objects_v2").paginate(  # type: ignore[attr-defined]
            Bucket=self.bucket, Prefix=prefix
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]
