"""What several backends share: verifying a body before it is published (the stores),
the one SQL query that lists locks (SQLite and PostgreSQL), and the users' in-memory model
with its password checks (the users file and PostgreSQL)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, ClassVar, Literal

from lfs_server.backends.base import CHUNK, Lock, User, UsersError, VerifyError, check_name

# From this size on, verify_file flushes a body in a second thread while hashing it.
_FLUSH_WHILE_HASHING = 4 << 20
# The lock table's columns after its id, alike in SQLite and PostgreSQL: both stores
# answer `SqlLocks.find`'s one SELECT.
LOCK_COLUMNS = """
    repo TEXT NOT NULL,
    path TEXT NOT NULL,
    owner TEXT NOT NULL,
    locked_at TEXT NOT NULL,
    ref TEXT,
    UNIQUE (repo, path)
"""


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of *path*; VerifyError unless it is a regular file.

    Links are not followed (a link to /etc/passwd is not served, copied or hashed), and a
    FIFO or device is refused before a read that would block or never end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise VerifyError("it is a symbolic link, not a regular file") from None
        raise
    kind = stat.S_IFMT(os.fstat(fd).st_mode)
    if kind != stat.S_IFREG:
        os.close(fd)
        raise VerifyError(f"it is not a regular file (file type {stat.filemode(kind)[0]!r})")
    return fd


def sha256_file(path: Path | str) -> tuple[str, int]:
    """Return (hex SHA-256, size) of the regular file at *path*, read in 1 MiB chunks."""
    fd = open_regular(path)
    try:
        return _sha256_fd(fd)
    finally:
        os.close(fd)


def _sha256_fd(fd: int) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(fd, "rb", buffering=0, closefd=False) as fh:
        buf = bytearray(CHUNK * 4)
        view = memoryview(buf)
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            size += n
    return digest.hexdigest(), size


def verify_file(source: Path, oid: str, size: int, *, sync: bool = True) -> None:
    """Raise VerifyError unless the file *source* holds exactly object (oid, size).

    With *sync* (a body about to be renamed into the local store) it is also flushed to
    disk: a large one while it is hashed (both release the GIL, so this costs max(hash,
    fsync) rather than their sum), a small one after (a thread costs more than the overlap
    saves). A body that is only read and then deleted (copied into S3) needs no flush. The
    bytes hashed are those of the descriptor checked to be a regular file.
    """
    fd = open_regular(source)
    actual_size = os.fstat(fd).st_size
    if actual_size != size:
        os.close(fd)
        raise VerifyError(f"body is {actual_size} bytes but the object's size is {size}")
    flusher = None
    if sync and size >= _FLUSH_WHILE_HASHING:
        flusher = threading.Thread(target=os.fsync, args=(fd,), daemon=True)
        flusher.start()
    try:
        digest, hashed = _sha256_fd(fd)
    finally:
        if flusher is not None:
            flusher.join()
        elif sync:
            os.fsync(fd)
        os.close(fd)
    if hashed != size:
        raise VerifyError(
            f"body changed while it was verified ({hashed} bytes read, {size} expected)"
        )
    if digest != oid:
        raise VerifyError(f"body's SHA-256 is {digest}, not the oid {oid}")


def verified_chunks(stream: BinaryIO, oid: str, size: int) -> Iterator[bytes]:
    """The chunks of *stream*, raising VerifyError (after the last one) unless they are
    exactly object (oid, size); a body longer than *size* is refused as soon as it passes
    *size*, reading at most one byte past it."""
    digest = hashlib.sha256()
    got = 0
    while got <= size and (chunk := stream.read(min(CHUNK, size + 1 - got))):
        got += len(chunk)
        if got > size:
            raise VerifyError(f"body is longer than the object's size {size}")
        digest.update(chunk)
        yield chunk
    if got != size:
        raise VerifyError(f"body is {got} bytes but the object's size is {size}")
    if digest.hexdigest() != oid:
        raise VerifyError(f"body's SHA-256 is {digest.hexdigest()}, not the oid {oid}")


@contextlib.contextmanager
def spooled_upload(
    stream: BinaryIO, tmp_dir: Path, oid: str, size: int, *, sync: bool = False
) -> Iterator[Path]:
    """Write *stream* to a temporary file in *tmp_dir*, hashing it on the way, and yield
    the file once it holds exactly object (oid, size); remove it afterwards if still there.

    The file is read-only for everyone (0444: what the local store publishes, nginx's
    workers read it); with *sync* it is flushed to disk before it is yielded, so that a
    rename publishes durable bytes. Raises VerifyError (nothing yielded) on a body of the
    wrong length or hash; a body longer than *size* is refused as soon as it passes *size*.
    """
    tmp = tmp_dir / f"upload-{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o444)
    except FileNotFoundError:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, 0o444)
    try:
        try:
            os.fchmod(fd, 0o444)  # whatever the umask
            for chunk in verified_chunks(stream, oid, size):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


class SqlLocks:
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


class UserTable:
    """Users in memory: add, remove, check a password. A user store keeps one of these
    and writes it to its file or database in `save`."""

    users: dict[str, User]

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
