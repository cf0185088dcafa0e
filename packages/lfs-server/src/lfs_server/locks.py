"""Lock databases: the names other modules have imported from here, kept.

The databases themselves live in `lfs_server.backends` (`sqlite.LockDB`,
`postgres.PgLockDB`), chosen by `backends.open_locks`.
"""

from __future__ import annotations

from lfs_server.backends import open_locks as open_lock_db
from lfs_server.backends.base import DatabaseUnavailable, Lock, LockExists, LockStore
from lfs_server.backends.sqlite import LockDB

__all__ = ["DatabaseUnavailable", "Lock", "LockDB", "LockExists", "LockStore", "open_lock_db"]
