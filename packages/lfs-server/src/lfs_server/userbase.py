"""Users and their per-repository permissions, kept in a JSON file managed by the CLI.

(The model and the file store; `users.load_users` picks the file or PostgreSQL. Its own
module so that `pgdb` imports it and `users` imports `pgdb`, without an import cycle.)

File format (version 1)::

    {"version": 1,
     "users": {"alice": {"password": "<werkzeug hash>",
                         "permissions": {"team/*": "write", "docs": "admin"}}}}

Permission patterns are shell-style (fnmatch) patterns over canonical repository names;
the highest level any matching pattern grants wins. Levels: read < write < admin.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

LEVELS = ("read", "write", "admin")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class UsersError(ValueError):
    """A bad user name, level or users file; the message says what is accepted."""


def level_rank(level: str | None) -> int:
    """0 for none, 1 read, 2 write, 3 admin."""
    return 0 if level is None else LEVELS.index(level) + 1


def check_name(name: str) -> str:
    """Return *name* if it is a valid user name."""
    if not _NAME_RE.fullmatch(name):
        raise UsersError(
            f"user name must be 1-64 characters of letters, digits, '.', '_', '@', '-' "
            f"starting with a letter or digit, got {name!r}"
        )
    return name


def parse_grant(text: str) -> tuple[str, str]:
    """Parse `PATTERN=LEVEL` (e.g. `team/*=write`)."""
    pattern, sep, level = text.rpartition("=")
    if not sep or not pattern or level not in LEVELS:
        raise UsersError(
            f"grant must be PATTERN=LEVEL with LEVEL one of {', '.join(LEVELS)}, got {text!r}"
        )
    return pattern.strip("/"), level


@dataclasses.dataclass
class User:
    """One account."""

    name: str
    password_hash: str
    permissions: dict[str, str]

    def level_for(self, repo: str) -> str | None:
        """The highest level this user holds on *repo*, or None."""
        best: str | None = None
        for pattern, level in self.permissions.items():
            if fnmatch.fnmatchcase(repo, pattern) and level_rank(level) > level_rank(best):
                best = level
        return best


class UserDB:
    """The users file, loaded into memory; `save` writes it back atomically."""

    def __init__(self, path: Path, users: dict[str, User] | None = None) -> None:
        self.path = path
        self.users: dict[str, User] = users or {}

    @classmethod
    def load(cls, path: Path) -> UserDB:
        """Read *path* (a missing file means no users)."""
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path)
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
        return cls(path, users)

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

    def add(
        self, name: str, password: str, grants: dict[str, str], *, replace: bool = False
    ) -> User:
        """Add (or with *replace*, update) a user with a hashed *password*."""
        check_name(name)
        if not password:
            raise UsersError("password must not be empty")
        if name in self.users and not replace:
            raise UsersError(f"user {name!r} already exists; use --update to change it")
        permissions = dict(self.users[name].permissions) if name in self.users else {}
        permissions.update(grants)
        from werkzeug.security import generate_password_hash

        user = User(name, generate_password_hash(password), permissions)
        self.users[name] = user
        return user

    def remove(self, name: str) -> None:
        """Delete a user."""
        if name not in self.users:
            raise UsersError(f"no user named {name!r}; `lfs-server user list` shows them")
        del self.users[name]

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if *password* is theirs, else None."""
        # Imported here: werkzeug costs every `lfs-server ssh` connection ~0.1 s at start.
        from werkzeug.security import check_password_hash

        user = self.users.get(name)
        if user is None or not user.password_hash:
            # Same cost as a real check, so timing does not reveal which names exist.
            check_password_hash(_DUMMY_HASH, password)
            return None
        return user if check_password_hash(user.password_hash, password) else None


_DUMMY_HASH = "scrypt:32768:8:1$saltsaltsaltsalt$" + "0" * 128
