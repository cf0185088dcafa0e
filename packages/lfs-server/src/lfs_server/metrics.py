"""Request metrics for `/metrics`: the metric names and help, recording, rendering.

This module owns everything about metrics. Counters live in their own small SQLite file
(`DATA/run/metrics.sqlite3`), so that every gunicorn worker of one server adds to the same
numbers without the lock database (which may be PostgreSQL, shared between nodes) counting
requests. Each node counts its own requests; Prometheus sums over nodes as usual.

Recording is best effort: a request never waits long for bookkeeping, and a failure to
count never fails a request (the caller logs it).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from lfs_server.sqlitewal import use_wal

# name -> (Prometheus type, help): the one table of what /metrics may show.
METRICS: dict[str, tuple[str, str]] = {
    "lfs_requests_total": ("counter", "HTTP requests answered, by endpoint, method and status"),
    "lfs_errors_total": (
        "counter",
        "requests answered with a 4xx/5xx status, by endpoint and status",
    ),
    "lfs_upload_bytes_total": ("counter", "bytes of objects verified and stored"),
    "lfs_download_bytes_total": (
        "counter",
        "bytes of objects handed out for download (full size per request)",
    ),
    "lfs_objects_uploaded_total": ("counter", "objects verified and stored"),
    "lfs_objects_stored": ("gauge", "objects in the store (counted at most once a minute)"),
    "lfs_stored_bytes": ("gauge", "bytes in the store (counted at most once a minute)"),
}

CONTENT_TYPE = "text/plain; version=0.0.4"

# A request waits at most this long for another worker's counter update.
_RECORD_TIMEOUT = 0.25

# The store's inventory (objects and bytes stored) is counted at most this often per
# node: counting lists every object, a whole-bucket listing on S3, too much for every
# scrape (Prometheus asks every 15-60 s, from every node).
INVENTORY_SECONDS = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (name, labels)
);
CREATE TABLE IF NOT EXISTS inventory (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    objects INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    counted_at REAL NOT NULL
);
"""


def request_increments(
    endpoint: str, method: str, status: int, nbytes: int
) -> list[tuple[str, str, float]]:
    """The counter increments (name, labels, amount) one answered request makes."""
    increments = [
        (
            "lfs_requests_total",
            _labels(endpoint=endpoint, method=method, status=str(status)),
            1.0,
        )
    ]
    if status >= 400:
        increments.append(("lfs_errors_total", _labels(endpoint=endpoint, status=str(status)), 1.0))
    elif endpoint == "transfer.upload":
        increments += [
            ("lfs_upload_bytes_total", "", float(nbytes)),
            ("lfs_objects_uploaded_total", "", 1.0),
        ]
    elif endpoint == "transfer.download":
        increments.append(("lfs_download_bytes_total", "", float(nbytes)))
    return increments


def render(counters: Iterable[tuple[str, str, float]], gauges: dict[str, float]) -> str:
    """Prometheus text format for *counters* (name, labels, value) and *gauges*."""
    lines: list[str] = []
    seen: set[str] = set()
    samples = [*counters, *((name, "", value) for name, value in gauges.items())]
    for name, labels, value in samples:
        if name not in seen:
            seen.add(name)
            kind, help_text = METRICS.get(name, ("untyped", name))
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{{{labels}}} {value:.0f}" if labels else f"{name} {value:.0f}")
    return "\n".join(lines) + "\n"


def _labels(**values: str) -> str:
    """`k="v",...` with the label values escaped as Prometheus requires."""
    return ",".join(f'{key}="{_escape(value)}"' for key, value in values.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counters shared by the workers of one server, in the SQLite file at *path*."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        with self._connect(10.0) as conn:
            use_wal(conn, 10.0)
            conn.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self, timeout: float) -> Iterator[sqlite3.Connection]:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            conn.execute("PRAGMA synchronous=OFF")
            self._local.conn, self._local.pid = conn, os.getpid()
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        yield conn

    def record_request(self, endpoint: str, method: str, status: int, nbytes: int) -> None:
        """Count one answered request (and the object bytes it moved)."""
        self.add(request_increments(endpoint, method, status, nbytes))

    def add(self, increments: list[tuple[str, str, float]]) -> None:
        """Add each (name, labels, amount) to its counter; *name* must be in METRICS."""
        for name, _labels_text, _amount in increments:
            if name not in METRICS:
                raise ValueError(f"unknown metric {name!r}; add it to lfs_server.metrics.METRICS")
        with self._connect(_RECORD_TIMEOUT) as conn:
            conn.executemany(
                "INSERT INTO counters (name, labels, value) VALUES (?, ?, ?) "
                "ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value",
                increments,
            )

    def counters(self) -> list[tuple[str, str, float]]:
        """All counters as (name, labels, value), sorted."""
        with self._connect(10.0) as conn:
            return list(
                conn.execute("SELECT name, labels, value FROM counters ORDER BY name, labels")
            )

    def inventory(self, count: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        """(objects, bytes) in the store: *count()*'s answer, asked again only once the last
        one is INVENTORY_SECONDS old (any worker of this node may have asked)."""
        now = time.time()
        with self._connect(10.0) as conn:
            row = conn.execute("SELECT objects, bytes, counted_at FROM inventory").fetchone()
            if row is not None and 0 <= now - row[2] < INVENTORY_SECONDS:
                return int(row[0]), int(row[1])
        objects, nbytes = count()
        with contextlib.suppress(sqlite3.Error), self._connect(_RECORD_TIMEOUT) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO inventory (id, objects, bytes, counted_at) "
                "VALUES (1, ?, ?, ?)",
                (objects, nbytes, now),
            )
        return objects, nbytes

    def render(self, objects_stored: int, stored_bytes: int) -> str:
        """The whole `/metrics` page: counters plus the store's gauges."""
        return render(
            self.counters(),
            {"lfs_objects_stored": objects_stored, "lfs_stored_bytes": stored_bytes},
        )
