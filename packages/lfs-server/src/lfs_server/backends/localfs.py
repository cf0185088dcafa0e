"""The local object store: `<data>/repos/<repo>.git/objects/aa/bb/<oid>`.

Objects are published only after their size and SHA-256 are checked: the bytes are
fsynced, then renamed into place (same filesystem, so the rename is atomic), then the
directory is fsynced. Readers therefore see either nothing or a complete, verified object.
nginx serves them from the folder itself (`nginx_redirect`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
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
        path = self.repo_dir(repo)
        self.check_no_links(path / "objects")
        (path / "objects").mkdir(parents=True, exist_ok=True)
        _make_traversable(self.repos_dir, path / "objects")

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
        self._install(source, repo, oid, synced=True)

    def publish_stream(self, stream: BinaryIO, repo: str, oid: str, size: int) -> None:
        """Write *stream* to a temp file next to the store, verify it, publish it."""
        with spooled_upload(stream, self.tmp_dir, oid, size) as tmp:
            self._install(tmp, repo, oid, synced=False)

    def _install(self, source: Path, repo: str, oid: str, *, synced: bool) -> None:
        target = self.object_path(repo, oid)
        self.check_no_links(target.parent)
        self.create_repo(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        _make_traversable(self.repo_dir(repo), target.parent)
        # nginx workers (often another user) read objects: world-readable, writable by no
        # one. A root server takes the body file over from the worker user ('nobody') that
        # wrote it, so a process running as that user cannot rewrite stored objects.
        if os.geteuid() == 0 and source.stat().st_uid != 0:
            os.chown(source, 0, 0)
        source.chmod(0o444)
        if not synced:
            fd = os.open(source, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        source.replace(target)
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

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


def _make_traversable(top: Path, leaf: Path) -> None:
    """chmod 0755 every directory from *top* down to *leaf* (nginx workers must enter them)."""
    current = leaf
    while True:
        with contextlib.suppress(PermissionError):
            mode = stat.S_IMODE(current.stat().st_mode)
            if (mode & 0o755) != 0o755 or mode & 0o022:  # enterable, writable by us alone
                current.chmod((mode | 0o755) & ~0o022)
        if current == top or current.parent == current or top not in current.parents:
            break
        current = current.parent


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
