"""What every object store shares: the stored-object record, the errors, the `ObjectStore`
Protocol and the verify-then-publish helpers (hashing, spooling a stream).

Its own module so that the stores (`storage.Store`, `s3store.S3Store`) import it and
`storage.open_store` imports the stores, without an import cycle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 1 << 20
# From this size on, verify_file flushes a body in a second thread while hashing it.
_FLUSH_WHILE_HASHING = 4 << 20


class VerifyError(Exception):
    """The uploaded bytes are not the object they claim to be (message says how)."""


class UnsafeStorePath(Exception):
    """A path in the store is a symbolic link (or leads outside it): never followed."""


class StoreUnavailable(Exception):
    """The object store cannot be reached or refused to work; nothing was changed.

    The message is safe to show to clients: it names no endpoint, path or credential.
    """


@dataclasses.dataclass(frozen=True)
class StoredObject:
    """One object found by `Store.iter_objects`."""

    repo: str
    oid: str
    path: Path | None
    size: int
    key: str = ""


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


@contextlib.contextmanager
def spooled_upload(stream: BinaryIO, tmp_dir: Path, oid: str, size: int) -> Iterator[Path]:
    """Write *stream* to a temporary file in *tmp_dir*, hashing it on the way, and yield
    the file once it holds exactly object (oid, size); remove it afterwards if still there.

    Raises VerifyError (nothing yielded) on a body of the wrong length or hash; a body
    longer than *size* is refused as soon as it passes *size*.
    """
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="upload-", dir=tmp_dir)
    tmp = Path(name)
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            while True:
                chunk = stream.read(CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                if written > size:
                    raise VerifyError(f"body is longer than the object's size {size}")
                digest.update(chunk)
                out.write(chunk)
        if written != size:
            raise VerifyError(f"body is {written} bytes but the object's size is {size}")
        if digest.hexdigest() != oid:
            raise VerifyError(f"body's SHA-256 is {digest.hexdigest()}, not the oid {oid}")
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


class ObjectStore(Protocol):
    """What the API needs from a store of objects: `Store` (local disk) or `S3Store`.

    Every implementation publishes an object under its oid only after its size and
    SHA-256 were checked, so readers see nothing or a complete, verified object.
    """

    kind: str
    tmp_dir: Path

    def repo_exists(self, repo: str) -> bool: ...
    def create_repo(self, repo: str) -> None: ...
    def list_repos(self) -> list[str]: ...
    def stored_size(self, repo: str, oid: str) -> int | None: ...
    def stored_sizes(self, repo: str, oids: list[str]) -> dict[str, int | None]: ...
    def publish(self, source: Path, repo: str, oid: str, size: int) -> None: ...
    def publish_stream(self, stream: BinaryIO, repo: str, oid: str, size: int) -> None: ...
    def iter_objects(self, repo: str | None = None) -> Iterator[StoredObject]: ...
    def hash_object(self, obj: StoredObject) -> tuple[str, int]: ...
    def quarantine(self, obj: StoredObject, quarantine_dir: Path) -> str: ...
    def check(self) -> None: ...
    def cleanup(self) -> int: ...
