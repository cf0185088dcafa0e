"""What the SQLite and PostgreSQL lock stores share: the lock record, the errors, the
table's columns and the one listing query.

Its own module so that `pgdb` imports it and `locks.open_lock_db` imports `pgdb`, without
an import cycle.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

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


class LockExists(Exception):
    """Creating a lock failed because *lock* already holds the path."""

    def __init__(self, lock: Lock) -> None:
        super().__init__(f"{lock.path} is already locked by {lock.owner}")
        self.lock = lock


# Below this much free space an SQLite I/O error is taken for a full disk: SQLite reports
# a full tmpfs as SQLITE_IOERR_SHMSIZE or _WRITE rather than SQLITE_FULL.


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
