"""`git-lfs-transfer`: the pure SSH protocol of git-lfs, served on stdin/stdout.

The protocol (git-lfs `docs/proposals/ssh_adapter.md`, as git-lfs 3.x speaks it): the
server advertises `version=1` and `locking`, the client sends `version 1`, then requests
(`batch`, `put-object`, `get-object`, `verify-object`, `lock`, `list-lock`, `list-locks`,
`unlock`, `quit`). Every answer starts `status NNN` with HTTP's meaning; an error answer
carries its message after a delimiter. Objects go to and come from the same store as the
HTTP API (the same verified, atomic publish), locks to the same database, within the same
grants and limits. The SSH key already says who the user is, so no tokens are needed.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from lfs_server.backends import open_locks, open_store
from lfs_server.backends.base import (
    CHUNK,
    DatabaseUnavailable,
    Lock,
    LockExists,
    ObjectReader,
    StoreUnavailable,
    UnsafeStorePath,
    VerifyError,
)
from lfs_server.pktline import DELIM, FLUSH, MAX_PAYLOAD, PktLineError, PktReader, PktWriter
from lfs_server.users import level_rank
from lfs_server.validation import (
    HASH_ALGO,
    ApiError,
    check_oid,
    normalize_lock_path,
    parse_cursor,
    parse_limit,
    parse_lock_id,
    parse_lock_path,
    parse_size_text,
)

if TYPE_CHECKING:
    from lfs_server.backends.base import LockStore, ObjectStore
    from lfs_server.config import Config

CAPABILITIES = ("version=1", "locking")


class _Request:
    """One request: its command line, `key=value` arguments, and whether a delimiter
    (and so lines or data) follows."""

    def __init__(self, command: str, args: list[str], delimited: bool) -> None:
        self.command = command
        self.args = args
        self.delimited = delimited
        self.lines: list[str] = []

    def arg(self, key: str) -> str | None:
        prefix = key + "="
        for item in self.args:
            if item.startswith(prefix):
                return item[len(prefix) :]
        return None


class _DataReader:
    """The data packets of a request up to its flush, as a file-like `read(n)`."""

    def __init__(self, reader: PktReader) -> None:
        self._reader = reader
        self._pending = b""
        self.done = False

    def read(self, size: int = -1) -> bytes:
        want = CHUNK if size is None or size < 0 else size
        parts = [self._pending] if self._pending else []
        have = len(self._pending)
        self._pending = b""
        while have < want and not self.done:
            packet = self._reader.read()
            if packet is None:
                raise PktLineError("connection ended inside an object's data")
            if packet == FLUSH:
                self.done = True
                break
            if not isinstance(packet, bytes):
                raise PktLineError("a delimiter packet inside an object's data")
            parts.append(packet)
            have += len(packet)
        data = b"".join(parts)
        if len(data) > want:
            data, self._pending = data[:want], data[want:]
        return data

    def drain(self) -> None:
        """Read (and drop) what is left, so the next request starts at a packet boundary."""
        self._pending = b""
        while not self.done:
            self.read(MAX_PAYLOAD * 16)


class Session:
    """One `git-lfs-transfer` connection of *user* to *repo* for *operation*."""

    def __init__(
        self,
        config: Config,
        user: str,
        level: str,
        repo: str,
        operation: str,
        stdin: BinaryIO,
        stdout: BinaryIO,
    ) -> None:
        self.config = config
        self.user = user
        self.level = level
        self.repo = repo
        self.operation = operation
        self.reader = PktReader(stdin)
        self.writer = PktWriter(stdout)
        self.store: ObjectStore = open_store(config)
        # As `create_app` does: a fresh data dir has no tmp dir (uploads spool there).
        self.store.tmp_dir.mkdir(parents=True, exist_ok=True)
        self._locks: LockStore | None = None
        self._repo_known = False

    # Framing ------------------------------------------------------------------------

    def _read_request(self) -> _Request | None:
        first = self.reader.read_text()
        if first is None:
            return None
        if not isinstance(first, str):
            raise ApiError(400, "expected a command, got an empty message")
        args: list[str] = []
        while True:
            packet = self.reader.read_text()
            if packet is None:
                raise PktLineError("connection ended inside a request")
            if packet == FLUSH:
                return _Request(first, args, False)
            if packet == DELIM:
                return _Request(first, args, True)
            assert isinstance(packet, str)
            args.append(packet)

    def _read_lines(self) -> list[str]:
        lines: list[str] = []
        while True:
            packet = self.reader.read_text()
            if packet is None:
                raise PktLineError("connection ended inside a request")
            if packet == FLUSH:
                return lines
            if packet == DELIM:
                raise ApiError(400, "a second delimiter packet in one request")
            assert isinstance(packet, str)
            lines.append(packet)

    def _status(
        self, status: int, args: Sequence[str] = (), lines: Sequence[str] | None = None
    ) -> None:
        self.writer.text(f"status {status}")
        for item in args:
            self.writer.text(item)
        if lines is not None:
            self.writer.delim()
            for line in lines:
                self.writer.text(line)
        self.writer.flush()

    def _error(self, status: int, message: str, args: Sequence[str] = ()) -> None:
        # One line: the client shows the first line after the delimiter.
        text = " ".join(message.split()) or f"status {status}"
        self._status(status, list(args), [text[:4000]])

    # The loop -----------------------------------------------------------------------

    def run(self) -> int:
        """Serve requests until `quit` or the end of input; the exit status."""
        for capability in CAPABILITIES:
            self.writer.text(capability)
        self.writer.flush()
        negotiated = False
        while True:
            try:
                request = self._read_request()
                if request is None:
                    return 0
                if request.command == "quit":
                    self._status(200)
                    return 0
                if not negotiated:
                    negotiated = self._version(request)
                    continue
                self._dispatch(request)
            except PktLineError as exc:
                # The stream cannot be resynced: say why, then end the connection.
                self._error(400, f"malformed packet: {exc}")
                return 1
            except ApiError as exc:
                self._error(exc.status, exc.message)

    def _version(self, request: _Request) -> bool:
        if request.delimited:
            self._read_lines()
        words = request.command.split(" ")
        if words[0] != "version" or len(words) != 2:
            raise ApiError(400, f"expected 'version 1' first, got {request.command[:80]!r}")
        if words[1] != "1":
            raise ApiError(400, f"protocol version {words[1][:20]!r} is not supported; use 1")
        self._status(200)
        return True

    def _dispatch(self, request: _Request) -> None:
        name, _, rest = request.command.partition(" ")
        handlers: dict[str, Callable[[_Request, str], None]] = {
            "batch": self._batch,
            "put-object": self._put_object,
            "get-object": self._get_object,
            "verify-object": self._verify_object,
            "lock": self._lock,
            "list-lock": self._list_lock,
            "list-locks": self._list_locks,
            "unlock": self._unlock,
        }
        handler = handlers.get(name)
        if handler is None:
            if request.delimited:
                _DataReader(self.reader).drain()
            raise ApiError(400, f"unknown command {name[:40]!r}; this server speaks version 1")
        if request.delimited and name not in ("batch", "put-object"):
            request.lines = self._read_lines()
        try:
            with self._backend_errors():
                handler(request, rest)
        except (ApiError, PktLineError):
            raise
        except Exception as exc:
            self._log_crash(request.command, exc)
            raise ApiError(
                500, "internal server error; the server's ssh-errors.log has the details"
            ) from None

    @contextlib.contextmanager
    def _backend_errors(self) -> Iterator[None]:
        """The store's and the lock database's failures as the HTTP API answers them."""
        try:
            yield
        except (StoreUnavailable, DatabaseUnavailable) as exc:
            raise ApiError(503, str(exc)) from None
        except UnsafeStorePath as exc:
            raise ApiError(403, f"refused, nothing stored: {exc}") from None
        except sqlite3.Error as exc:
            kind = None if self._locks is None else self._locks.classify_error(exc)
            if kind == "busy":
                raise ApiError(
                    503, "the lock database is busy; nothing was changed, retry"
                ) from None
            if kind == "full":
                raise ApiError(507, "insufficient storage: the server's disk is full") from None
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ApiError(
                    507, "insufficient storage: the server's disk is full; nothing was stored"
                ) from None
            raise

    def _log_crash(self, command: str, exc: Exception) -> None:
        with contextlib.suppress(OSError):
            self.config.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.config.run_dir / "ssh-errors.log", "a", encoding="utf-8") as log:
                log.write(
                    f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} user={self.user}"
                    f" repo={self.repo} command={command[:200]!r}\n"
                )
                log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))

    # Access -------------------------------------------------------------------------

    def _need(self, needed: str) -> None:
        if level_rank(self.level) < level_rank(needed):
            raise ApiError(
                403,
                f"user {self.user!r} has {self.level} access to {self.repo!r};"
                f" {needed} access is needed",
            )

    def _need_upload(self) -> None:
        if self.operation != "upload":
            raise ApiError(403, "this connection was opened for download; uploads need 'upload'")
        self._need("write")

    def _existing_repo(self, create: bool = False) -> None:
        """Refuse a missing repository when auto-creation is off (else create it)."""
        if self._repo_known:
            return
        if self.store.repo_exists(self.repo):
            self._repo_known = True
            return
        if not self.config.auto_create:
            raise ApiError(
                404,
                f"repository {self.repo!r} does not exist on this server (auto-creation is off)",
            )
        if create:
            self.store.create_repo(self.repo)
            self._repo_known = True

    # Objects ------------------------------------------------------------------------

    def _batch(self, request: _Request, _rest: str) -> None:
        lines = self._read_lines() if request.delimited else []
        algo = request.arg("hash-algo")
        if algo not in (None, HASH_ALGO):
            raise ApiError(
                409, f"hash-algo {algo[:40]!r} is not supported; this server uses sha256"
            )
        limit = self.config.max_batch_objects
        if len(lines) > limit:
            raise ApiError(413, f"a batch may name at most {limit} objects, got {len(lines)}")
        objects = [self._batch_line(line) for line in lines]
        upload = self.operation == "upload"
        if upload:
            self._need("write")
        self._existing_repo(create=upload)
        sizes = self.store.stored_sizes(self.repo, [oid for oid, _ in objects])
        answer = []
        needed = 0
        missing = [oid for oid, _ in objects if sizes.get(oid) is None]
        if missing and not upload:
            # The protocol has no per-object error. With a 'download' line git-lfs 3.3.0
            # retried get-object for ~45 s and then crashed (nil pointer); a whole-batch
            # 404 names the object and fails in a second (that client can still crash
            # on a failed SSH batch now and then: a race of its own).
            raise ApiError(404, f"object {missing[0]} does not exist in {self.repo!r}")
        for oid, size in objects:
            if not upload:
                answer.append(f"{oid} {size} download")
            elif sizes.get(oid) == size:
                answer.append(f"{oid} {size} noop")
            else:
                answer.append(f"{oid} {size} upload")
                needed += size
        if needed:
            free = shutil.disk_usage(self.store.tmp_dir).free
            if needed > free:
                raise ApiError(
                    507,
                    f"insufficient storage: the upload needs {needed} bytes but the server's"
                    f" disk has {free} bytes free; nothing was stored",
                )
        self._status(200, [f"hash-algo={HASH_ALGO}"], answer)

    def _batch_line(self, line: str) -> tuple[str, int]:
        words = line.split(" ")
        if len(words) < 2:
            raise ApiError(422, f"batch line must be 'OID SIZE', got {line[:100]!r}")
        oid = check_oid(words[0])
        size = parse_size_text(words[1])
        self._check_size_limit(size)
        return oid, size

    def _check_size_limit(self, size: int) -> None:
        limit = self.config.max_object_size
        if limit and size > limit:
            raise ApiError(
                413, f"object is {size} bytes; this server accepts objects up to {limit} bytes"
            )

    def _size_arg(self, request: _Request, fallback: str = "") -> int:
        raw = request.arg("size") or fallback
        if not raw:
            raise ApiError(400, "the request needs a size=BYTES argument")
        return parse_size_text(raw)

    def _put_object(self, request: _Request, rest: str) -> None:
        data = _DataReader(self.reader)
        if not request.delimited:
            data.done = True
        try:
            oid = check_oid(rest)
            size = self._size_arg(request)
            self._need_upload()
            self._check_size_limit(size)
            self._existing_repo(create=True)
            try:
                self.store.publish_stream(data, self.repo, oid, size)  # type: ignore[arg-type]
            except VerifyError as exc:
                raise ApiError(400, f"upload rejected, nothing stored: {exc}") from None
        finally:
            data.drain()
        self._status(200)

    def _get_object(self, request: _Request, rest: str) -> None:
        oid = check_oid(rest)
        self._need("read")
        stored = self.store.stored_size(self.repo, oid)
        if stored is None:
            raise ApiError(404, f"object {oid} does not exist in {self.repo!r}")
        wanted = request.arg("size")
        if wanted is not None and parse_size_text(wanted) != stored:
            raise ApiError(422, f"object {oid} is {stored} bytes, not {wanted}")
        with self._open_object(oid) as source:
            self._status_data_header(stored)
            while chunk := source.read(CHUNK):
                self.writer.data(chunk)
        self.writer.flush()

    def _status_data_header(self, size: int) -> None:
        self.writer.text("status 200")
        self.writer.text(f"size={size}")
        self.writer.delim()

    @contextlib.contextmanager
    def _open_object(self, oid: str) -> Iterator[ObjectReader]:
        try:  # never a link planted in the store (stored_size checked; this holds it)
            body = self.store.open_object(self.repo, oid)
        except UnsafeStorePath as exc:
            raise ApiError(403, f"refused: {exc}") from None
        try:
            yield body
        finally:
            body.close()

    def _verify_object(self, request: _Request, rest: str) -> None:
        words = rest.split(" ")
        oid = check_oid(words[0])
        size = self._size_arg(request, words[1] if len(words) > 1 else "")
        self._need("read")
        stored = self.store.stored_size(self.repo, oid)
        if stored is None:
            raise ApiError(404, f"object {oid} was not stored in {self.repo!r}; upload it again")
        if stored != size:
            raise ApiError(404, f"object {oid} is stored with {stored} bytes, not {size}")
        self._status(200)

    # Locks --------------------------------------------------------------------------

    @property
    def locks(self) -> LockStore:
        if self._locks is None:
            self._locks = open_locks(self.config)
        return self._locks

    @staticmethod
    def _lock_args(lock: Lock) -> list[str]:
        return [
            f"id={lock.id}",
            f"path={lock.path}",
            f"locked-at={lock.locked_at}",
            f"ownername={lock.owner}",
        ]

    def _lock(self, request: _Request, _rest: str) -> None:
        self._need("write")
        path = parse_lock_path(request.arg("path"))
        if "\n" in path or "\r" in path:
            raise ApiError(422, "a lock path over SSH cannot contain a line break")
        self._existing_repo(create=False)
        try:
            lock = self.locks.create(self.repo, path, self.user, request.arg("refname"))
        except LockExists as exc:
            self._error(409, f"already locked by {exc.lock.owner}", self._lock_args(exc.lock))
            return
        self._status(201, self._lock_args(lock))

    def _list(self, request: _Request, verify: bool) -> None:
        self._need("write" if verify else "read")
        self._existing_repo(create=False)
        limit = parse_limit(request.arg("limit"))
        cursor = parse_cursor(request.arg("cursor"))
        path = request.arg("path") or None
        raw_id = request.arg("id") or None
        lock_id = parse_lock_id(raw_id)
        found: list[Lock] = []
        if raw_id is None or lock_id is not None:
            found = self.locks.find(
                self.repo,
                path=None if verify or path is None else normalize_lock_path(path),
                lock_id=None if verify else lock_id,
                cursor=cursor,
                limit=limit + 1,
            )
        args = [f"next-cursor={found[limit].id}"] if len(found) > limit else []
        lines = []
        for lock in found[:limit]:
            lines += [
                f"lock {lock.id}",
                f"path {lock.id} {lock.path}",
                f"locked-at {lock.id} {lock.locked_at}",
                f"ownername {lock.id} {lock.owner}",
                f"owner {lock.id} {'ours' if lock.owner == self.user else 'theirs'}",
            ]
        self._status(200, args, lines)

    def _list_lock(self, request: _Request, _rest: str) -> None:
        self._list(request, verify=False)

    def _list_locks(self, request: _Request, _rest: str) -> None:
        self._list(request, verify=True)

    def _unlock(self, request: _Request, rest: str) -> None:
        self._need("write")
        self._existing_repo(create=False)
        force_arg = request.arg("force")
        if force_arg not in (None, "true", "false"):
            raise ApiError(422, f"force must be true or false, got {force_arg[:20]!r}")
        number = parse_lock_id(rest.strip())
        lock = None if number is None else self.locks.get(self.repo, number)
        if lock is None:
            raise ApiError(404, f"no lock with id {rest[:40]!r} in {self.repo!r}")
        if lock.owner != self.user:
            if force_arg != "true":
                raise ApiError(
                    403,
                    f"{lock.path} is locked by {lock.owner}; only they can unlock it"
                    " (or an admin with --force)",
                )
            if self.level != "admin":
                raise ApiError(
                    403,
                    f"forcing the unlock of {lock.owner}'s lock needs admin access"
                    f" to {self.repo!r}",
                )
        removed = self.locks.delete(self.repo, lock.id)
        if removed is None:
            raise ApiError(404, f"lock {rest[:40]!r} was removed meanwhile")
        self._status(200, self._lock_args(removed))


def serve(
    config: Config,
    user: str,
    level: str,
    repo: str,
    operation: str,
    stdin: BinaryIO,
    stdout: BinaryIO,
) -> int:
    """Serve one `git-lfs-transfer` connection; the process's exit status."""
    try:
        session = Session(config, user, level, repo, operation, stdin, stdout)
        return session.run()
    except BrokenPipeError:
        return 0  # the client went away; nothing is half-published (publish is atomic)
