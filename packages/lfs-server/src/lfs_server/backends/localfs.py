"""The local object store: `<data>/repos/<repo>.git/objects/aa/bb/<oid>`.

Objects are published only after their size and SHA-256 are checked: the bytes are
fsynced, then renamed into place (same filesystem, so the rename is atomic), then the
directory is fsynced. Readers therefore see either nothing or a complete, verified object.
nginx serves them from the folder itself (`nginx_redirect`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from lfs_server.backends.base import (
    LOCAL_LOCATION,
    ObjectReader,
    StoredObject,
    StoreUnavailable,
    UnsafeStorePath,
    VerifyError,
)
from lfs_server.backends.shared import open_regular, sha256_file, spooled_upload, verify_file
from lfs_server.fsmode import SHARED_DIR, make_dir
from lfs_server.validation import OID_RE, check_oid, normalize_repo

if TYPE_CHECKING:
    from lfs_server.config import Config


class Store:
    """Objects of every repository under one root directory."""

    kind = "local"
    in_data_folder = True  # the objects are under DATA/repos
    uploads_verified_by_put = True  # PUT -> publish: verified, renamed, fsynced

    def __init__(self, repos_dir: Path, tmp_dir: Path) -> None:
        self.repos_dir = repos_dir
        self.tmp_dir = tmp_dir
        self.location = str(repos_dir)

    @classmethod
    def from_config(cls, config: Config) -> Store:
        """The store under the data folder (`DATA/repos`, bodies spooled in `DATA/tmp`)."""
        return cls(config.repos_dir, config.tmp_dir)

    def check(self) -> None:
        """Raise StoreUnavailable if the store's directory cannot be used."""
        if not os.access(self.repos_dir, os.R_OK | os.X_OK):
            raise StoreUnavailable("the object store's directory is not readable")

    def cleanup(self) -> int:
        """Nothing to clean: abandoned bodies are removed by `serve` before it starts."""
        return 0

    def hash_object(self, obj: StoredObject) -> tuple[str, int]:
        """(hex SHA-256, size) of a stored object's bytes."""
        assert obj.path is not None
        return sha256_file(obj.path)

    def repo_dir(self, repo: str) -> Path:
        """The directory of *repo* (a name already passed through normalize_repo)."""
        return self.repos_dir / f"{normalize_repo(repo)}.git"

    def relative_path(self, repo: str, oid: str) -> str:
        """The object's path relative to repos_dir (what nginx's internal location serves)."""
        check_oid(oid)
        return f"{normalize_repo(repo)}.git/objects/{oid[:2]}/{oid[2:4]}/{oid}"

    def object_path(self, repo: str, oid: str) -> Path:
        """Where object *oid* of *repo* lives (whether or not it exists)."""
        return self.repos_dir / self.relative_path(repo, oid)

    def repo_exists(self, repo: str) -> bool:
        """Whether *repo* has been created."""
        return self.repo_dir(repo).is_dir()

    def create_repo(self, repo: str) -> None:
        """Create *repo*'s directory (idempotent)."""
        os.close(self._open_dir(f"{normalize_repo(repo)}.git/objects"))

    def list_repos(self) -> list[str]:
        """All repository names."""
        found = []
        if self.repos_dir.is_dir():
            for dirpath, dirnames, _files in os.walk(self.repos_dir):
                for name in list(dirnames):
                    if name.endswith(".git"):
                        rel = os.path.relpath(Path(dirpath) / name, self.repos_dir)
                        found.append(rel[: -len(".git")].replace(os.sep, "/"))
                        dirnames.remove(name)
        return sorted(found)

    def stored_size(self, repo: str, oid: str) -> int | None:
        """The size of the stored object, or None if it is not stored.

        Only a regular file reached without symbolic links counts: a link planted in the
        store (to a file elsewhere, or a linked directory) is never served.
        """
        path = self.object_path(repo, oid)
        try:
            info = os.lstat(path)
            self.check_no_links(path.parent)
        except (FileNotFoundError, NotADirectoryError, UnsafeStorePath):
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def stored_sizes(self, repo: str, oids: list[str]) -> dict[str, int | None]:
        """`stored_size` of each oid (a batch's look-up)."""
        return {oid: self.stored_size(repo, oid) for oid in oids}

    def open_object(
        self, repo: str, oid: str, start: int = 0, stop: int | None = None
    ) -> ObjectReader:
        """The stored bytes [start, stop) as a file; never through a link in the store."""
        path = self.object_path(repo, oid)
        self.check_no_links(path.parent)
        try:
            fd = open_regular(path)
        except VerifyError as exc:
            raise UnsafeStorePath(f"object {oid} in the store: {exc}") from None
        fh = open(fd, "rb")  # noqa: SIM115 (the caller closes it)
        if start:
            fh.seek(start)
        if stop is None:
            return fh
        return _Slice(fh, stop - start)

    def nginx_redirect(self, repo: str, oid: str) -> str:
        """nginx's internal location over `repos_dir`, then the object's relative path."""
        return LOCAL_LOCATION + self.relative_path(repo, oid)

    def direct_download_url(self, repo: str, oid: str, expires_in: int) -> str | None:
        """None: clients always download through us."""
        del repo, oid, expires_in
        return None

    def check_no_links(self, path: Path) -> None:
        """Raise UnsafeStorePath if a component of *path* below repos_dir is a link."""
        relative = path.relative_to(self.repos_dir)
        current = self.repos_dir
        for part in relative.parts:
            current = current / part
            try:
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    raise UnsafeStorePath(
                        f"{current.relative_to(self.repos_dir)} in the store is a symbolic link;"
                        " lfs-server never follows links there (an administrator must remove it)"
                    )
            except FileNotFoundError:
                return

    def publish(self, source: Path, repo: str, oid: str, size: int) -> None:
        """Verify *source* holds object (oid, size) and move it into the store.

        *source* must be on the store's filesystem; it is renamed, not copied. On any
        mismatch VerifyError is raised and nothing is stored (the caller owns *source*).
        """
        verify_file(source, oid, size)
        # nginx workers (often another user) read objects: world-readable, writable by no
        # one. A root server takes the body file over from the worker user ('nobody') that
        # wrote it, so a process running as that user cannot rewrite stored objects.
        if os.geteuid() == 0 and source.stat().st_uid != 0:
            os.chown(source, 0, 0)
        source.chmod(0o444)
        self._install(source, repo, oid)

    def publish_stream(self, stream: BinaryIO, repo: str, oid: str, size: int) -> None:
        """Write *stream* to a temp file next to the store, verify it, publish it."""
        with spooled_upload(stream, self.tmp_dir, oid, size, sync=True) as tmp:
            self._install(tmp, repo, oid)

    def _install(self, source: Path, repo: str, oid: str) -> None:
        """Rename the verified, fsynced *source* to its oid, then fsync the directory."""
        dir_fd = self._object_dir(repo, oid)
        try:
            os.rename(source, oid, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _object_dir(self, repo: str, oid: str) -> int:
        """A descriptor of the folder object *oid* goes in (created if missing)."""
        return self._open_dir(self.relative_path(repo, oid).rpartition("/")[0])

    def _open_dir(self, relative: str) -> int:
        """Open (creating what is missing, 0755) *relative* under repos_dir, reached
        without a symbolic link: UnsafeStorePath otherwise.

        Renaming into the descriptor cannot be redirected by a link planted after the
        check, and no folder is ever created through a link.
        """
        try:
            return _open_dir_beneath(self.repos_dir, relative)
        except _LinkInPath:
            self.check_no_links(self.repos_dir / relative)  # names the link, if still there
            raise UnsafeStorePath(
                f"{relative} in the store passes through a symbolic link"
            ) from None

    def iter_objects(self, repo: str | None = None) -> Iterator[StoredObject]:
        """Every stored object (of one repo, or of all), in a stable order."""
        repos = [repo] if repo else self.list_repos()
        for name in repos:
            objects = self.repo_dir(name) / "objects"
            if not objects.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(objects):
                dirnames.sort()
                for filename in sorted(filenames):
                    if OID_RE.fullmatch(filename):
                        path = Path(dirpath) / filename
                        # lstat: a link is listed as itself (fsck reports it), never followed.
                        yield StoredObject(name, filename, path, path.lstat().st_size)

    def quarantine(self, obj: StoredObject, quarantine_dir: Path) -> str:
        """Move a bad object out of the store so that a new upload can replace it."""
        dest = quarantine_dir / f"{obj.repo}.git" / obj.oid
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(obj.path), dest)
        return str(dest)


class _LinkInPath(Exception):
    """A component of a path in the store is a symbolic link."""


class _OpenHow(ctypes.Structure):
    """Linux's `struct open_how`, openat2's argument."""

    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_SYS_OPENAT2 = 437  # one number on every Linux architecture (system calls since 5.1 share them)
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# openat2 checks a whole path for links in one call; None once it is found missing (kernels
# before 5.6, other systems, seccomp filters that refuse it).
_libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _open_dir_beneath(root: Path, relative: str) -> int:
    """Open the directory *root*/*relative*, creating missing folders, never following a
    link below *root* (_LinkInPath if a component is one)."""
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        make_dir(root)
        root_fd = os.open(root, _DIR_FLAGS)
    try:
        parts = relative.split("/")
        # The deepest folder that exists (a new object's fan-out folder usually does not),
        # then one component at a time below it, each opened from its parent's descriptor.
        for depth in range(len(parts), 0, -1):
            fd = _openat2_beneath(root_fd, "/".join(parts[:depth]))
            if fd >= 0:
                break
        else:
            fd, depth = os.dup(root_fd), 0
        try:
            for part in parts[depth:]:
                child = _open_or_make_child(fd, part, relative)
                os.close(fd)
                fd = child
            found, fd = fd, -1
            return found
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(root_fd)


def _openat2_beneath(root_fd: int, relative: str) -> int:
    """openat2 of *relative* with no link and no `..` allowed: the descriptor, or -1 when
    a component is missing or openat2 is not available."""
    global _libc
    if _libc is None:
        return -1
    how = _OpenHow(_DIR_FLAGS, 0, _RESOLVE_NO_SYMLINKS | _RESOLVE_BENEATH)
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(root_fd),
        ctypes.c_char_p(os.fsencode(relative)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ELOOP, errno.EXDEV):
        raise _LinkInPath(relative)
    if err in (errno.ENOSYS, errno.EPERM):
        _libc = None
    elif err != errno.ENOENT:
        raise OSError(err, os.strerror(err), relative)
    return -1


def _open_or_make_child(parent_fd: int, name: str, relative: str) -> int:
    """Open folder *name* in *parent_fd* without following a link, creating it if missing
    with mode 0755 whatever the umask (nginx's workers, another user, must enter it)."""
    flags = _DIR_FLAGS | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
            os.lstat(name, dir_fd=parent_fd).st_mode
        ):
            raise _LinkInPath(relative) from None
        raise
    with contextlib.suppress(FileExistsError):  # another request made it meanwhile
        os.mkdir(name, SHARED_DIR, dir_fd=parent_fd)
    fd = os.open(name, flags, dir_fd=parent_fd)
    os.fchmod(fd, SHARED_DIR)
    return fd


class _Slice:
    """The next *length* bytes of *fh* (a Range of a stored object)."""

    def __init__(self, fh: BinaryIO, length: int) -> None:
        self._fh = fh
        self._left = length

    def read(self, size: int = -1, /) -> bytes:
        """Up to *size* bytes of the slice."""
        want = self._left if size < 0 else min(size, self._left)
        data = self._fh.read(want) if want else b""
        self._left -= len(data)
        return data

    def close(self) -> None:
        """Close the file."""
        self._fh.close()
