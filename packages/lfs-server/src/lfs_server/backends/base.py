"""What every backend implements, and what the API gets from one: the records (a stored
object, a lock, a user), the errors the API turns into answers, and three Protocols,
`ObjectStore`, `LockStore` and `UserStore`, holding every operation the API needs.

Nothing outside `lfs_server.backends` asks which backend it has: a difference between
backends is a method here (where nginx serves an object from, whether a client may fetch
it straight from the store) or an attribute (`kind`, for health answers and messages).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 1 << 20
# nginx's internal locations an object download is redirected to (X-Accel-Redirect): the
# local store's folder, and the S3 gateway (a presigned URL's path and query follow).
LOCAL_LOCATION = "/_lfs_store/"
S3_LOCATION = "/_lfs_s3/"
LEVELS = ("read", "write", "admin")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


# --- errors -------------------------------------------------------------------------


class VerifyError(Exception):
    """The uploaded bytes are not the object they claim to be (message says how)."""


class UnsafeStorePath(Exception):
    """A path in the store is a symbolic link (or leads outside it): never followed."""


class StoreUnavailable(Exception):
    """The object store cannot be reached or refused to work; nothing was changed.

    The message is safe to show to clients: it names no endpoint, path or credential.
    """


class DatabaseUnavailable(Exception):
    """The lock/user database cannot be reached; nothing was changed (message is safe to show)."""


class LockExists(Exception):
    """Creating a lock failed because *lock* already holds the path."""

    def __init__(self, lock: Lock) -> None:
        super().__init__(f"{lock.path} is already locked by {lock.owner}")
        self.lock = lock


class UsersError(ValueError):
    """A bad user name, level or users file; the message says what is accepted."""


# --- records ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StoredObject:
    """One object found by `ObjectStore.iter_objects` (*path* only on a local store)."""

    repo: str
    oid: str
    path: Path | None
    size: int
    key: str = ""


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
    """One account.

    Permission patterns are shell-style (fnmatch) patterns over canonical repository
    names; the highest level any matching pattern grants wins (read < write < admin).
    """

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


# --- the Protocols ------------------------------------------------------------------


class ObjectReader(Protocol):
    """A stored object's bytes being read (a file, or the store's response body)."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to *size* bytes (all that is left when negative); b"" at the end."""

    def close(self) -> None:
        """Release the file or connection."""


class ObjectStore(Protocol):
    """What the API needs from a store of objects (`localfs.Store`, `s3.S3Store`).

    Every implementation publishes an object under its oid only after its size and
    SHA-256 were checked, so readers see nothing or a complete, verified object.
    """

    kind: str  # "local", "s3": named in /healthz
    in_data_folder: bool  # kept under the node's data folder (not shared by nodes)
    location: str  # where the objects are, for messages: a folder or s3://bucket/prefix
    tmp_dir: Path  # node-local scratch space for upload bodies (its disk's free space counts)
    # Every upload reaches the store through our PUT, which answers 200 only once the size
    # and SHA-256 were checked and the object published: a batch then names no verify
    # action (git-lfs skips verify without one: one app request per object, not two).
    uploads_verified_by_put: bool

    def check(self) -> None:
        """Raise StoreUnavailable unless the store can be used."""

    def cleanup(self) -> int:
        """Remove what stopped nodes left (unfinished uploads); return how many."""

    def repo_exists(self, repo: str) -> bool:
        """Whether *repo* has been created."""

    def create_repo(self, repo: str) -> None:
        """Create *repo* (idempotent)."""

    def list_repos(self) -> list[str]:
        """All repository names, sorted."""

    def stored_size(self, repo: str, oid: str) -> int | None:
        """The size of the stored object, or None if it is not stored."""

    def stored_sizes(self, repo: str, oids: list[str]) -> dict[str, int | None]:
        """`stored_size` of each oid (a batch's look-up, concurrent where that pays)."""

    def publish(self, source: Path, repo: str, oid: str, size: int) -> None:
        """Verify the node-local file *source* holds (oid, size), then store it.

        VerifyError on a mismatch (nothing stored). The caller owns *source*: a store may
        rename it into place (it must be on the store's filesystem) or only read it.
        """

    def publish_stream(self, stream: BinaryIO, repo: str, oid: str, size: int) -> None:
        """Store the body read from *stream*, verified on the way (VerifyError if wrong)."""

    def open_object(
        self, repo: str, oid: str, start: int = 0, stop: int | None = None
    ) -> ObjectReader:
        """A readable stream of the stored bytes [start, stop); the caller closes it.

        UnsafeStorePath if what is stored under the oid is not a plain object.
        """

    def nginx_redirect(self, repo: str, oid: str) -> str:
        """The internal URI nginx serves the object from (X-Accel-Redirect)."""

    def direct_download_url(self, repo: str, oid: str, expires_in: int) -> str | None:
        """A URL the client fetches the object from without us, or None (we serve it)."""

    def iter_objects(self, repo: str | None = None) -> Iterator[StoredObject]:
        """Every stored object (of one repo, or of all), in a stable order."""

    def hash_object(self, obj: StoredObject) -> tuple[str, int]:
        """(hex SHA-256, size) of a stored object's bytes (VerifyError if not a plain file)."""

    def quarantine(self, obj: StoredObject, quarantine_dir: Path) -> str:
        """Move a bad object out of its repository; return where it went."""


class LockStore(Protocol):
    """What the locking API needs from a lock database (`sqlite.LockDB`, `postgres.PgLockDB`).

    A lock is exclusive per (repo, path), even between processes and nodes racing.
    """

    kind: str  # "sqlite", "postgresql": named in /healthz
    in_data_folder: bool

    @staticmethod
    def require_driver() -> None:
        """Raise DatabaseUnavailable unless the database's driver is installed."""

    def check(self) -> None:
        """Raise unless the database answers."""

    def close(self) -> None:
        """Close this thread's connection (it reopens on the next use)."""

    def create(self, repo: str, path: str, owner: str, ref: str | None = None) -> Lock:
        """Lock *path* in *repo* for *owner*; raise LockExists with the holder if taken."""

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

    def get(self, repo: str, lock_id: int) -> Lock | None:
        """The lock with *lock_id* in *repo*, or None."""

    def delete(self, repo: str, lock_id: int) -> Lock | None:
        """Remove a lock; return it, or None if it did not exist."""

    def classify_error(self, exc: Exception) -> str | None:
        """'busy', 'full' or None for an error this database's driver raised."""


class UserStore(Protocol):
    """The users and their grants (`userfile.UserDB`, `postgres.PgUserDB`): an in-memory
    copy, `save` to write it back, `refresh` to follow changes made elsewhere."""

    kind: str  # "file", "postgresql"
    in_data_folder: bool
    users: dict[str, User]

    def add(
        self, name: str, password: str, grants: dict[str, str], *, replace: bool = False
    ) -> User:
        """Add (or with *replace*, update) a user with a hashed *password*."""

    def remove(self, name: str) -> None:
        """Delete a user (UsersError if there is none of that name)."""

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if *password* is theirs, else None (same cost either way)."""

    def save(self) -> None:
        """Write the users back (atomically)."""

    def refresh(self) -> bool:
        """Re-read the users if another process changed them; whether they changed.

        Cheap enough to call on every request. DatabaseUnavailable when the source cannot
        be asked (the caller may keep using the copy it has).
        """
