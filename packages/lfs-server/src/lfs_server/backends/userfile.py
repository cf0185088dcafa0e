"""Users and their per-repository grants in a JSON file managed by the CLI.

File format (version 1)::

    {"version": 1,
     "users": {"alice": {"password": "<werkzeug hash>",
                         "permissions": {"team/*": "write", "docs": "admin"}}}}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lfs_server.backends.base import User, UsersError
from lfs_server.backends.shared import UserTable

if TYPE_CHECKING:
    from lfs_server.config import Config


class UserDB(UserTable):
    """The users file, loaded into memory; `save` writes it back atomically."""

    kind = "file"
    in_data_folder = True

    def __init__(self, path: Path, users: dict[str, User] | None = None) -> None:
        self.path = path
        self.users: dict[str, User] = users or {}
        self._mtime = -1.0  # the file's mtime when read; never read yet

    @classmethod
    def from_config(cls, config: Config) -> UserDB:
        """The users file of *config* (`DATA/users.json` unless LFS_USERS_FILE says otherwise)."""
        return cls.load(config.users_path)

    def _stat(self) -> float:
        try:
            return self.path.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def refresh(self) -> bool:
        """Re-read the file if its modification time changed (the CLI saved it)."""
        if self._stat() == self._mtime:
            return False
        fresh = type(self).load(self.path)
        self.users, self._mtime = fresh.users, fresh._mtime
        return True

    @classmethod
    def load(cls, path: Path) -> UserDB:
        """Read *path* (a missing file means no users)."""
        empty = cls(path)
        empty._mtime = empty._stat()  # before reading: a change made meanwhile is seen later
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return empty
        except (OSError, ValueError) as exc:
            raise UsersError(f"cannot read users file {path}: {exc}") from None
        if (
            not isinstance(data, dict)
            or data.get("version") != 1
            or not isinstance(data.get("users"), dict)
        ):
            raise UsersError(f"users file {path} is not a version 1 lfs-server users file")
        users = {}
        for name, entry in data["users"].items():
            users[name] = User(
                name, str(entry.get("password", "")), dict(entry.get("permissions", {}))
            )
        empty.users = users
        return empty

    def save(self) -> None:
        """Write the file atomically with mode 0600 (it holds password hashes)."""
        payload = {
            "version": 1,
            "users": {
                name: {
                    "password": user.password_hash,
                    "permissions": dict(sorted(user.permissions.items())),
                }
                for name, user in sorted(self.users.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".users-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=2)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            Path(tmp).chmod(0o600)
            Path(tmp).replace(self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
