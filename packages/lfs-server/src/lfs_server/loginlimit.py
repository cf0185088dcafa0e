"""Limits on failed logins, per client address and per user name, shared by a node's workers.

Each wrong password costs the server one scrypt (~50-100 ms of CPU, by design): 8
attackers made 6.1 guesses/s against 2 workers and slowed every other user. After
`per_client` failures from one address, or `per_user` failures for one name, within
`window` seconds, further password checks are answered 429 with `Retry-After` (git-lfs
waits and retries) before any scrypt is run. A user whose password a worker checked a
moment ago is answered from the password cache and never limited.

The failures live in a small SQLite file (mode 0600) in the run directory, so all of a
node's workers count together. Best effort: if the file cannot be used, nothing is limited.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sqlite3
import threading
import time
from pathlib import Path

from lfs_server.sqlitewal import connect_shared
from lfs_server.validation import ApiError

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS failures (who TEXT NOT NULL, at REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS failures_who ON failures (who, at);"
)


class TooManyLogins(ApiError):
    """429: too many failed logins; `retry_after` seconds until the next try may pass."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(429, message)
        self.retry_after = retry_after


class LoginLimiter:
    """Counts failed logins per client and per user over a sliding window."""

    def __init__(
        self, path: Path, per_client: int = 10, per_user: int = 30, window: float = 60.0
    ) -> None:
        self.path = path
        self.limits = {"client": per_client, "user": per_user}
        self.window = window
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = connect_shared(self.path, 1.0, _SCHEMA)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @staticmethod
    def _keys(client: str, user: str) -> dict[str, str]:
        # Names and addresses are stored hashed: the file says nothing about who tried.
        def digest(kind: str, value: str) -> str:
            return hashlib.blake2b(f"{kind}\0{value}".encode(), digest_size=16).hexdigest()

        return {"client": digest("client", client), "user": digest("user", user)}

    def check(self, client: str, user: str) -> None:
        """Raise TooManyLogins if *client* or *user* has used up its failures."""
        now = time.time()
        with contextlib.suppress(sqlite3.Error, OSError):
            conn = self._conn()
            for kind, who in self._keys(client, user).items():
                limit = self.limits[kind]
                rows = conn.execute(
                    "SELECT at FROM failures WHERE who = ? AND at > ? ORDER BY at DESC LIMIT ?",
                    (who, now - self.window, limit),
                ).fetchall()
                if len(rows) >= limit:
                    wait = max(1, math.ceil(rows[-1][0] + self.window - now))
                    what = "this address" if kind == "client" else f"user {user!r}"
                    raise TooManyLogins(
                        f"too many failed logins for {what}; retry in {wait} s", wait
                    )

    def failed(self, client: str, user: str) -> None:
        """Record one failed login of *user* from *client*."""
        now = time.time()
        with contextlib.suppress(sqlite3.Error, OSError):
            conn = self._conn()
            conn.executemany(
                "INSERT INTO failures (who, at) VALUES (?, ?)",
                [(who, now) for who in self._keys(client, user).values()],
            )
            conn.execute("DELETE FROM failures WHERE at < ?", (now - self.window,))
