"""Locks (the git-lfs locking API) in an SQLite file of the node's data folder.

SQLite from the standard library: every gunicorn worker opens its own connection per
request; WAL mode lets readers proceed while one writer commits. The UNIQUE(repo, path)
constraint is what makes a lock exclusive, even between workers racing each other.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from lfs_server.backends.base import Lock, LockExists
from lfs_server.backends.shared import LOCK_COLUMNS, SqlLocks
from lfs_server.sqlitewal import classify_db_error, use_wal

if TYPE_CHECKING:
    from lfs_server.config import Config

_SCHEMA = f"CREATE TABLE IF NOT EXISTS locks (id INTEGER PRIMARY KEY AUTOINCREMENT,{LOCK_COLUMNS});"


class LockDB(SqlLocks):
    """Locks in the SQLite file at *path*.

    A writer waits up to *busy_timeout* seconds for another writer (another worker, or an
    operator's `sqlite3` shell) before `sqlite3.OperationalError("database is locked")`,
    which the app answers 503 with Retry-After. Every change is one transaction, so a
    failure leaves the database as it was.
    """

    kind = "sqlite"
    in_data_folder = True
    _table = "locks"
    _mark = "?"

    def __init__(self, path: Path, busy_timeout: float = 10.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        path.parent.mkdir(parents=True, exist_ok=True)
        # Only the server reads locks (SQLite gives -wal/-shm the same mode).
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        with self._connect() as conn:
            use_wal(conn, self.busy_timeout)
            conn.executescript(_SCHEMA)

    @classmethod
    def from_config(cls, config: Config) -> LockDB:
        """The node's lock file (`DATA/locks.sqlite3` unless LFS_LOCKS_DB says otherwise)."""
        return cls(config.locks_path, busy_timeout=config.db_busy_timeout)

    @staticmethod
    def require_driver() -> None:
        """Nothing to check: sqlite3 is in the standard library."""

    def classify_error(self, exc: Exception) -> str | None:
        """'busy' or 'full' for an sqlite3 error (of this file, or another on its disk)."""
        return classify_db_error(exc, self.path) if isinstance(exc, sqlite3.Error) else None

    def _connection(self) -> sqlite3.Connection:
        # One connection per thread and process, kept open: while any stays open SQLite
        # keeps the WAL and its shared-memory index, so reads go on working on a full
        # disk (a new connection would have to create them first).
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @contextlib.contextmanager
    def _connect(self, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        wait = self.busy_timeout if timeout is None else timeout
        try:
            conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            yield conn
        except BaseException:
            # Never leave a transaction open on a connection that outlives the request.
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    conn.close()
                    self._local.conn = None
            raise

    def check(self) -> None:
        """Raise sqlite3.Error unless the database answers."""
        with self._connect() as conn:
            conn.execute("SELECT 1 FROM locks LIMIT 1")

    def close(self) -> None:
        """Close this thread's connection (it reopens on the next use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @staticmethod
    def _row(row: tuple[int, str, str, str, str]) -> Lock:
        return Lock(*row)

    def create(self, repo: str, path: str, owner: str, ref: str | None = None) -> Lock:
        """Lock *path* in *repo* for *owner*; raise LockExists with the holder if taken."""
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                cur = conn.execute(
                    "INSERT INTO locks (repo, path, owner, locked_at, ref) VALUES (?, ?, ?, ?, ?)",
                    (repo, path, owner, now, ref),
                )
            except sqlite3.IntegrityError:
                conn.execute("ROLLBACK")
                existing = self.find(repo, path=path)
                if not existing:  # unlocked in between: let the caller retry
                    raise
                raise LockExists(existing[0]) from None
            conn.execute("COMMIT")
            return Lock(int(cur.lastrowid or 0), repo, path, owner, now)

    def _select(self, sql: str, args: list[object]) -> list[Lock]:
        with self._connect() as conn:
            return [self._row(r) for r in conn.execute(sql, args).fetchall()]

    def delete(self, repo: str, lock_id: int) -> Lock | None:
        """Remove a lock; return it, or None if it did not exist."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT id, repo, path, owner, locked_at FROM locks WHERE repo = ? AND id = ?",
                (repo, lock_id),
            ).fetchone()
            if row is not None:
                conn.execute("DELETE FROM locks WHERE id = ?", (lock_id,))
            conn.execute("COMMIT")
        return None if row is None else self._row(row)
