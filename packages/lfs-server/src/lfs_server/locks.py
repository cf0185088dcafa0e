"""File locks (the git-lfs locking API) in an SQLite database.

SQLite from the standard library: every gunicorn worker opens its own connection per
request; WAL mode lets readers proceed while one writer commits. The UNIQUE(repo, path)
constraint is what makes a lock exclusive, even between workers racing each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from lfs_server.sqlitewal import use_wal

if TYPE_CHECKING:
    from lfs_server.config import Config
    from lfs_server.pgdb import PgLockDB

# The lock table's columns after its id, alike in SQLite and PostgreSQL (pgdb.py): both
# stores answer `LockStore.find`'s one SELECT.
LOCK_COLUMNS = """
    repo TEXT NOT NULL,
    path TEXT NOT NULL,
    owner TEXT NOT NULL,
    locked_at TEXT NOT NULL,
    ref TEXT,
    UNIQUE (repo, path)
"""
_SCHEMA = f"CREATE TABLE IF NOT EXISTS locks (id INTEGER PRIMARY KEY AUTOINCREMENT,{LOCK_COLUMNS});"


@dataclasses.dataclass(frozen=True)
class Lock:
    """One lock, as the API returns it."""

    id: int
    repo: str
    path: str
    owner: str
    locked_at: str

    def to_json(self) -> dict[str, object]:
        """The lock object of the locking API."""
        return {
            "id": str(self.id),
            "path": self.path,
            "locked_at": self.locked_at,
            "owner": {"name": self.owner},
        }


class DatabaseUnavailable(Exception):
    """The lock/user database cannot be reached; nothing was changed (message is safe to show)."""


def open_lock_db(config: Config) -> LockDB | PgLockDB:
    """The lock database *config* names: PostgreSQL (LFS_DATABASE_URL) or the SQLite file."""
    if config.database_url:
        from lfs_server.pgdb import PgLockDB

        return PgLockDB(config.database_url, busy_timeout=config.db_busy_timeout)
    return LockDB(config.locks_path, busy_timeout=config.db_busy_timeout)


class LockExists(Exception):
    """Creating a lock failed because *lock* already holds the path."""

    def __init__(self, lock: Lock) -> None:
        super().__init__(f"{lock.path} is already locked by {lock.owner}")
        self.lock = lock


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


class LockStore:
    """What the SQLite and PostgreSQL lock stores share: listing locks with one query.

    A store names its lock table and its driver's placeholder (``?`` for sqlite3, ``%s``
    for psycopg) and runs a SELECT in `_select`; `find` and `get` are written once here,
    so the two stores filter (path, id, cursor, limit) alike.
    """

    _table: ClassVar[Literal["locks", "lfs_locks"]]
    _mark: ClassVar[Literal["?", "%s"]]

    def _select(self, sql: str, args: list[object]) -> list[Lock]:
        raise NotImplementedError

    def find(
        self,
        repo: str,
        *,
        path: str | None = None,
        lock_id: int | None = None,
        cursor: int = 0,
        limit: int = 100,
    ) -> list[Lock]:
        """Locks of *repo* (optionally one path or id) with id >= cursor, oldest first."""
        mark = self._mark
        # Only the fixed table names and placeholders above are spliced in; values are bound.
        sql = f"SELECT id, repo, path, owner, locked_at FROM {self._table} WHERE repo = {mark}"  # noqa: S608
        sql += f" AND id >= {mark}"
        args: list[object] = [repo, cursor]
        if path is not None:
            sql += f" AND path = {mark}"
            args.append(path)
        if lock_id is not None:
            sql += f" AND id = {mark}"
            args.append(lock_id)
        sql += f" ORDER BY id LIMIT {mark}"
        args.append(limit)
        return self._select(sql, args)

    def get(self, repo: str, lock_id: int) -> Lock | None:
        """The lock with *lock_id* in *repo*, or None."""
        found = self.find(repo, lock_id=lock_id, limit=1)
        return found[0] if found else None


class LockDB(LockStore):
    """Locks in the SQLite file at *path*.

    A writer waits up to *busy_timeout* seconds for another writer (another worker, or an
    operator's `sqlite3` shell) before `sqlite3.OperationalError("database is locked")`,
    which the app answers 503 with Retry-After. Every change is one transaction, so a
    failure leaves the database as it was.
    """

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
