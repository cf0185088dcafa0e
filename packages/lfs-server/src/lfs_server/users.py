"""Users and their grants: the names other modules have imported from here, kept.

The model lives in `lfs_server.backends.base`, the stores in `lfs_server.backends`
(`userfile.UserDB`, `postgres.PgUserDB`), chosen by `backends.open_users`.
"""

from __future__ import annotations

from lfs_server.backends import open_users as load_users
from lfs_server.backends.base import (
    LEVELS,
    User,
    UsersError,
    UserStore,
    check_name,
    level_rank,
    parse_grant,
)
from lfs_server.backends.userfile import UserDB

__all__ = [
    "LEVELS",
    "User",
    "UserDB",
    "UserStore",
    "UsersError",
    "check_name",
    "level_rank",
    "load_users",
    "parse_grant",
]
