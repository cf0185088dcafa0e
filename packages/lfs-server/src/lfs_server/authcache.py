"""A password-check cache shared by the gunicorn workers of one node.

Checking a password costs one scrypt (~50-100 ms of CPU, by design). Each worker already
remembers good checks for a minute, but a worker only learns from its own requests: with
W workers and U users, warming up costs W x U scrypts, and that is what made throughput
fall as clients (each its own user) grew. Measured with tools/bench/lfs_load.py, 32
clients, 4 workers, same machine state: 2.9 requests/s with 32 users against 86.9/s with
one user. With this cache, one scrypt per user and node suffices.

An entry is a keyed BLAKE2b of (user, password, stored password hash) with an expiry.
The key lives only in memory: `serve` makes a random one per start and hands it to its
workers in the environment (`LFS_AUTH_CACHE_KEY`); it is never written to disk. So the
cache file (mode 0600, in the run directory) reveals nothing and cannot be brute-forced
on its own; a changed password changes the stored hash, which no old entry matches.
Best effort: any failure here falls back to the scrypt check.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path

from lfs_server.sqlitewal import connect_shared

KEY_ENV = "LFS_AUTH_CACHE_KEY"
TTL_SECONDS = 60.0
_SCHEMA = "CREATE TABLE IF NOT EXISTS auth (digest TEXT PRIMARY KEY, expires REAL NOT NULL)"


class SharedAuthCache:
    """Good password checks, shared through a small SQLite file by one node's workers."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        self.path = path
        self._key = bytes.fromhex(key) if key else secrets.token_bytes(32)
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = connect_shared(self.path, 0.05, _SCHEMA)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _digest(self, name: str, password: str, password_hash: str) -> str:
        data = "\0".join((name, password, password_hash)).encode()
        return hashlib.blake2b(data, key=self._key, digest_size=32).hexdigest()

    def hit(self, name: str, password: str, password_hash: str) -> bool:
        """Whether another worker checked this exact password for this user a moment ago."""
        digest = self._digest(name, password, password_hash)
        with contextlib.suppress(sqlite3.Error, OSError):
            row = (
                self._conn()
                .execute("SELECT expires FROM auth WHERE digest = ?", (digest,))
                .fetchone()
            )
            return row is not None and row[0] > time.time()
        return False

    def remember(self, name: str, password: str, password_hash: str) -> None:
        """Record a good check (and drop expired entries)."""
        digest = self._digest(name, password, password_hash)
        now = time.time()
        with contextlib.suppress(sqlite3.Error, OSError):
            conn = self._conn()
            conn.execute(
                "INSERT OR REPLACE INTO auth (digest, expires) VALUES (?, ?)",
                (digest, now + TTL_SECONDS),
            )
            conn.execute("DELETE FROM auth WHERE expires < ?", (now,))
