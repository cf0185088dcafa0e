"""Users and their per-repository permissions: the model and the users file live in
`userbase` (re-exported here); `load_users` picks the file or PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lfs_server.userbase import (
    LEVELS,
    User,
    UserDB,
    UsersError,
    check_name,
    level_rank,
    parse_grant,
)

if TYPE_CHECKING:
    from lfs_server.config import Config

__all__ = [
    "LEVELS",
    "User",
    "UserDB",
    "UsersError",
    "check_name",
    "level_rank",
    "load_users",
    "parse_grant",
]


def load_users(config: Config) -> UserDB:
    """The users *config* names: PostgreSQL (LFS_DATABASE_URL) or the users file."""
    if config.database_url:
        from lfs_server.pgdb import PgUserDB

        return PgUserDB.load_url(config.database_url)
    return UserDB.load(config.users_path)
