"""Locks and users in PostgreSQL (psycopg 3), for several nodes sharing one database.

The same semantics as the SQLite lock database and the users file: a lock is exclusive
through UNIQUE(repo, path); every change is one statement or one transaction, so a
failure leaves the database as it was. Users keep the users file's model (a name, a
password hash, pattern=level grants); a version counter bumped by each change lets every
node notice an update within a second.

Any failure to reach the database becomes `DatabaseUnavailable` (the app answers 503 with
Retry-After); its message never includes the URL, which may carry a password.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from lfs_server.backends.base import DatabaseUnavailable, Lock, LockExists, User
from lfs_server.backends.shared import LOCK_COLUMNS, SqlLocks, UserTable

if TYPE_CHECKING:
    from lfs_server.config import Config

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS lfs_locks (id BIGSERIAL PRIMARY KEY,{LOCK_COLUMNS});
CREATE TABLE IF NOT EXISTS lfs_users (
    name TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    permissions JSONB NOT NULL
);
CREATE TABLE IF NOT EXISTS lfs_meta (
    key TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
"""
# Several workers of several nodes start at once: CREATE TABLE IF NOT EXISTS is not safe
# against itself, so schema creation takes this advisory lock first.
_SCHEMA_LOCK = 0x6C6673  # "lfs"
T = TypeVar("T")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise DatabaseUnavailable(
            "LFS_DATABASE_URL needs psycopg 3: pip install 'lfs-server[postgres]'"
        ) from None
    return psycopg


class _Connections:
    """One autocommit connection per thread and process, reopened after a failure."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._local = threading.local()
        self._psycopg = _psycopg()
        self._schema_ready = False

    @contextlib.contextmanager
    def connection(self, what: str) -> Iterator[Any]:
        psycopg = self._psycopg
        conn = getattr(self._local, "conn", None)
        try:
            if conn is None or conn.closed or self._local.pid != os.getpid():
                conn = psycopg.connect(
                    self.url,
                    autocommit=True,
                    connect_timeout=max(1, int(self.timeout)),
                    options=f"-c lock_timeout={int(self.timeout * 1000)}",
                )
                self._local.conn, self._local.pid = conn, os.getpid()
                if not self._schema_ready:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                        conn.execute(_SCHEMA)
                    self._schema_ready = True
            yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.close()
            raise DatabaseUnavailable(
                f"the database did not answer while {what}; nothing was changed, retry in a moment"
            ) from exc

    def run(self, what: str, work: Callable[[Any], T]) -> T:
        """*work(connection)*; a pooled connection the server dropped is replaced once.

        After PostgreSQL restarts, every worker's idle connection is dead and only says so
        when used. The statement never reached a live server then, so running it again on
        a fresh connection is safe; a fresh connection that fails is a real outage.
        """
        for attempt in (1, 2):
            pooled = self._pooled()
            try:
                with self.connection(what) as conn:
                    return work(conn)
            except DatabaseUnavailable as exc:
                if attempt == 2 or not pooled or not self._dropped(exc.__cause__):
                    raise
        raise AssertionError("unreachable")

    def _pooled(self) -> bool:
        conn = getattr(self._local, "conn", None)
        return conn is not None and not conn.closed and self._local.pid == os.getpid()

    def _dropped(self, exc: BaseException | None) -> bool:
        """A connection the server closed (or shut down: SQLSTATE 57P01-57P03)?"""
        if not isinstance(exc, (self._psycopg.OperationalError, self._psycopg.InterfaceError)):
            return False
        sqlstate = getattr(exc, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith("57P")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class PgLockDB(SqlLocks):
    """Locks in the PostgreSQL database at *url* (the interface of `sqlite.LockDB`)."""

    kind = "postgresql"
    in_data_folder = False
    _table = "lfs_locks"
    _mark = "%s"

    def __init__(self, url: str, busy_timeout: float = 10.0) -> None:
        self._db = _Connections(url, busy_timeout)
        with self._db.connection("preparing the lock table"):
            pass

    @classmethod
    def from_config(cls, config: Config) -> PgLockDB:
        """The database of LFS_DATABASE_URL."""
        return cls(config.database_url, busy_timeout=config.db_busy_timeout)

    @staticmethod
    def require_driver() -> None:
        """Raise DatabaseUnavailable unless psycopg is installed (sends nothing)."""
        _psycopg()

    def classify_error(self, exc: Exception) -> str | None:
        """None: psycopg's failures already arrive as DatabaseUnavailable."""
        del exc
        return None

    def close(self) -> None:
        """Close this thread's connection (it reopens on the next use)."""
        self._db.close()

    def check(self) -> None:
        """Raise DatabaseUnavailable unless the database answers."""
        self._db.run("checking the database", lambda conn: conn.execute("SELECT 1"))

    def create(self, repo: str, path: str, owner: str, ref: str | None = None) -> Lock:
        """Lock *path* in *repo* for *owner*; raise LockExists with the holder if taken."""
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
        for _attempt in range(5):
            row = self._db.run(
                "creating a lock",
                lambda conn: conn.execute(
                    "INSERT INTO lfs_locks (repo, path, owner, locked_at, ref)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (repo, path) DO NOTHING"
                    " RETURNING id",
                    (repo, path, owner, now, ref),
                ).fetchone(),
            )
            if row is not None:
                return Lock(int(row[0]), repo, path, owner, now)
            existing = self.find(repo, path=path, limit=1)
            if existing:
                raise LockExists(existing[0])
            # Unlocked between the INSERT and the SELECT: try again.
        raise DatabaseUnavailable(f"{path} is being locked and unlocked too fast; retry")

    def _select(self, sql: str, args: list[object]) -> list[Lock]:
        rows = self._db.run("reading locks", lambda conn: conn.execute(sql, args).fetchall())
        return [Lock(int(r[0]), *r[1:]) for r in rows]

    def delete(self, repo: str, lock_id: int) -> Lock | None:
        """Remove a lock; return it, or None if it did not exist."""
        row = self._db.run(
            "removing a lock",
            lambda conn: conn.execute(
                "DELETE FROM lfs_locks WHERE repo = %s AND id = %s"
                " RETURNING id, repo, path, owner, locked_at",
                (repo, lock_id),
            ).fetchone(),
        )
        return None if row is None else Lock(int(row[0]), *row[1:])


class PgUserDB(UserTable):
    """The users of a PostgreSQL database; `save` writes them back in one transaction.

    A version counter bumped by every save, read at most once a second by `refresh`,
    tells every node about a change made through any of them.
    """

    kind = "postgresql"
    in_data_folder = False

    def __init__(self, url: str, users: dict[str, User] | None = None) -> None:
        self.users: dict[str, User] = users or {}
        self._db = _Connections(url, 10.0)
        self._version = PgUsersVersion(url)
        self._seen = -1
        self._checked = -1.0

    @classmethod
    def from_config(cls, config: Config) -> PgUserDB:
        """The users in the database of LFS_DATABASE_URL."""
        return cls.load_url(config.database_url)

    def refresh(self) -> bool:
        """Re-read the users when the version counter moved (asked at most once a second)."""
        now = time.monotonic()
        if now - self._checked < 1.0:
            return False
        self._checked = now  # a database that is down is asked again a second later
        version = self._version()
        if version == self._seen:
            return False
        self._read()
        self._seen = version
        return True

    @classmethod
    def load_url(cls, url: str) -> PgUserDB:
        """All users of the database at *url*."""
        db = cls(url)
        db._seen = db._version()  # before reading: a save meanwhile is seen by `refresh`
        db._checked = time.monotonic()
        db._read()
        return db

    def _read(self) -> None:
        rows = self._db.run(
            "reading users",
            lambda conn: conn.execute(
                "SELECT name, password_hash, permissions FROM lfs_users ORDER BY name"
            ).fetchall(),
        )
        users = {}
        for name, password_hash, permissions in rows:
            grants = permissions if isinstance(permissions, dict) else json.loads(permissions)
            users[name] = User(name, password_hash, dict(grants))
        self.users = users
        self._db.close()  # reopened by save(); a node reloads users rarely

    def save(self) -> None:
        """Make the database's users exactly this object's users (one transaction)."""

        def write(conn: Any) -> None:
            with conn.transaction():
                names = list(self.users)
                conn.execute("DELETE FROM lfs_users WHERE NOT (name = ANY(%s))", (names,))
                for user in self.users.values():
                    conn.execute(
                        "INSERT INTO lfs_users (name, password_hash, permissions)"
                        " VALUES (%s, %s, %s::jsonb) ON CONFLICT (name) DO UPDATE SET"
                        " password_hash = excluded.password_hash,"
                        " permissions = excluded.permissions",
                        (
                            user.name,
                            user.password_hash,
                            json.dumps(user.permissions, sort_keys=True),
                        ),
                    )
                conn.execute(
                    "INSERT INTO lfs_meta (key, value) VALUES ('users_version', 1)"
                    " ON CONFLICT (key) DO UPDATE SET value = lfs_meta.value + 1"
                )

        self._db.run("saving users", write)
        self._db.close()


class PgUsersVersion:
    """Reads the users' version counter (changes whenever any node saves users)."""

    def __init__(self, url: str) -> None:
        self._db = _Connections(url, 10.0)

    def __call__(self) -> int:
        """The current version (0 before the first save)."""
        row = self._db.run(
            "reading users",
            lambda conn: conn.execute(
                "SELECT value FROM lfs_meta WHERE key = 'users_version'"
            ).fetchone(),
        )
        return 0 if row is None else int(row[0])
