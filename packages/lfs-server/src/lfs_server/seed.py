"""`lfs-server import-seed`: bring objects over from the original gitlfs_with_nginx server.

That server kept each object at `DATA/repos/<repo>/.objects/<oid[:2]>/<oid[2:4]>/<oid>`
(`<repo>` is the part of its URL `/lfs/<repo>/info/lfs`, often `GROUP/NAME`). Every file
found there is accounted for: imported (its SHA-256 checked while it is copied, then
published like an upload), already present, or reported with the reason it was not
imported. Nothing is skipped silently and the source is only read.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from lfs_server.backends.base import VerifyError
from lfs_server.backends.shared import open_regular, sha256_file
from lfs_server.validation import OID_RE, ApiError, normalize_repo

SEED_OBJECTS = ".objects"


class SeedTarget(Protocol):
    """What the import needs from a store (the local one or S3)."""

    tmp_dir: Path

    def stored_size(self, repo: str, oid: str) -> int | None: ...
    def publish_stream(self, stream: BinaryIO, repo: str, oid: str, size: int) -> None: ...


class SeedError(Exception):
    """The seed folder cannot be read as the original server's data; says what is expected."""


@dataclasses.dataclass(frozen=True)
class SeedItem:
    """What happened to one file of the seed: `status` is imported, present or refused."""

    path: Path
    repo: str
    oid: str
    status: str
    reason: str = ""


def seed_repos(source: Path) -> Path:
    """The `repos` folder of the original server's data folder *source*."""
    repos = source / "repos"
    if not source.is_dir():
        raise SeedError(f"seed folder {source} does not exist or is not a folder")
    if not repos.is_dir():
        raise SeedError(
            f"{source} has no repos/ folder; give the original server's data folder"
            " (the one holding repos/<repo>/.objects/aa/bb/<oid>)"
        )
    return repos


def import_seed(source: Path, store: SeedTarget, prefix: str = "") -> Iterator[SeedItem]:
    """Import every object under *source*`/repos` into *store*; yield one item per file.

    *prefix* is put before each repository name (`lfs` keeps the old URLs
    `/lfs/<repo>/info/lfs` working unchanged: that is our repository `lfs/<repo>`).
    """
    repos = seed_repos(source)
    for dirpath, dirnames, filenames in os.walk(repos):
        dirnames.sort()
        here = Path(dirpath)
        for name in list(dirnames):
            # os.walk lists a link to a folder but does not enter it: say so, never follow
            # (a linked .objects would copy one repository's objects into another).
            if (here / name).is_symlink():
                dirnames.remove(name)
                yield SeedItem(here / name, "", "", "refused", "a symbolic link (not followed)")
        if SEED_OBJECTS in dirnames:
            dirnames.remove(SEED_OBJECTS)
            yield from _import_repo(repos, here, store, prefix)
        for name in sorted(filenames):
            # Files outside any .objects folder: not objects of the old layout, but said.
            if SEED_OBJECTS not in (here / name).relative_to(repos).parts:
                yield SeedItem(here / name, "", "", "refused", "not inside a .objects folder")


def _import_repo(repos: Path, repo_dir: Path, store: SeedTarget, prefix: str) -> Iterator[SeedItem]:
    relative = repo_dir.relative_to(repos).as_posix()
    objects = repo_dir / SEED_OBJECTS
    try:
        repo = normalize_repo(f"{prefix.strip('/')}/{relative}" if prefix else relative)
    except ApiError as exc:
        for path in sorted(p for p in objects.rglob("*") if not p.is_dir()):
            yield SeedItem(path, relative, "", "refused", f"repository name: {exc.message}")
        return
    for dirpath, dirnames, filenames in os.walk(objects):
        dirnames.sort()
        for name in sorted(filenames):
            yield _import_one(Path(dirpath) / name, objects, repo, store)


def _import_one(path: Path, objects: Path, repo: str, store: SeedTarget) -> SeedItem:
    oid = path.name
    parts = path.relative_to(objects).parts
    if not OID_RE.fullmatch(oid) or parts != (oid[:2], oid[2:4], oid):
        return SeedItem(path, repo, "", "refused", "not at .objects/aa/bb/<64-hex oid>")
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        return SeedItem(path, repo, oid, "refused", "not a regular file (links are not followed)")
    if store.stored_size(repo, oid) == info.st_size:
        return SeedItem(path, repo, oid, "present")
    try:
        # Hashed where it lies first: a wrong file (a 2 GiB sparse one, say) is refused
        # without writing a byte; a right one must fit the store's temporary folder.
        digest, size = sha256_file(path)
        if digest != oid:
            return SeedItem(path, repo, oid, "refused", f"its SHA-256 is {digest}, not its name")
        free = _free_bytes(store.tmp_dir)
        if size > free:
            return SeedItem(
                path, repo, oid, "refused",
                f"{size} bytes do not fit the {free} bytes free at {store.tmp_dir}",
            )  # fmt: skip
        with open(open_regular(path), "rb") as fh:
            store.publish_stream(fh, repo, oid, size)
    except VerifyError as exc:
        return SeedItem(path, repo, oid, "refused", str(exc))
    except OSError as exc:
        return SeedItem(path, repo, oid, "refused", f"cannot read or store it: {exc.strerror}")
    return SeedItem(path, repo, oid, "imported")


def _free_bytes(folder: Path) -> int:
    """Free bytes on the filesystem *folder* is (or will be) on."""
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return shutil.disk_usage(folder).free
