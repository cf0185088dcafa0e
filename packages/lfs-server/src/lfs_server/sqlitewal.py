"""The SQLite files one node's worker processes share (locks, metrics, the auth cache)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from pathlib import Path


def use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put *conn*'s database in WAL mode, retrying for up to *timeout* seconds.

    gunicorn starts a node's workers together, and each opens the same new file. When two
    connections switch it to WAL at once, SQLite answers one of them "database is locked"
    at once, without waiting for its busy timeout (each holds the shared lock the other
    must see released). The mode is stored in the file, so a retry finds the other's switch
    done. Measured before this: 3 of 80 rounds of 8 processes opening a fresh metrics file
    together failed, and a worker failing to boot stops the whole gunicorn (the node died).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def connect_shared(path: Path, timeout: float, schema: str) -> sqlite3.Connection:
    """Open (creating it 0600) a node-local file the workers share: WAL, no fsync per write.

    These files hold counters and caches that a crash may lose; the objects themselves
    are fsynced by the store.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    use_wal(conn, timeout)
    conn.execute("PRAGMA synchronous=OFF")
    conn.executescript(schema)
    return conn


# Below this much free space an SQLite I/O error is taken for a full disk: SQLite reports
# a full tmpfs as SQLITE_IOERR_SHMSIZE or _WRITE rather than SQLITE_FULL.
_NEARLY_FULL = 1 << 20


def classify_db_error(exc: sqlite3.Error, db_path: Path) -> str | None:
    """'busy' (another writer holds the database), 'full' (no disk space) or None."""
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc).lower()
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
        return "busy"
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return "full"
    if name.startswith("SQLITE_IOERR") or "disk i/o error" in text:
        with contextlib.suppress(OSError):
            if shutil.disk_usage(db_path.parent).free < _NEARLY_FULL:
                return "full"
    return None
