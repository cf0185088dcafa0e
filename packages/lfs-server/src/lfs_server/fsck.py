"""`lfs-server fsck`: re-hash every stored object and report (or quarantine) bad ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from lfs_server.backends.base import ObjectStore, StoredObject, VerifyError


@dataclasses.dataclass(frozen=True)
class Problem:
    """An object whose bytes do not hash to its name."""

    obj: StoredObject
    actual: str  # the SHA-256 of its bytes, or why they could not be read
    moved_to: str | None = None


def check_store(
    store: ObjectStore, quarantine_dir: Path | None = None, repo: str | None = None
) -> Iterator[tuple[StoredObject, Problem | None]]:
    """Hash each object; yield (object, problem or None); move bad ones if asked."""
    for obj in store.iter_objects(repo):
        try:
            digest, _size = store.hash_object(obj)
        except VerifyError as exc:  # a link, FIFO or device where an object should be
            digest = f"nothing: {exc}"
        if digest == obj.oid:
            yield obj, None
            continue
        moved = store.quarantine(obj, quarantine_dir) if quarantine_dir is not None else None
        yield obj, Problem(obj, digest, moved)
