"""`lfs-server migrate --to s3`: copy a local store's objects into an S3 bucket, verified.

Every object's bytes are hashed on the way (`S3Store.publish` checks size and SHA-256
before it sends anything, and the size in the bucket after): a damaged local object is
reported and not copied, so the bucket only ever receives verified objects. Objects the
bucket already holds with the right size are skipped, so an interrupted migration is
resumed by running it again. The local store is never changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from lfs_server.backends.base import ObjectStore, StoredObject, VerifyError

if TYPE_CHECKING:
    from lfs_server.backends.s3 import S3Store


@dataclasses.dataclass
class MigrateReport:
    """What a migration did."""

    copied: int = 0
    present: int = 0
    bad: list[tuple[StoredObject, str]] = dataclasses.field(default_factory=list)
    bytes_copied: int = 0


def migrate_to_s3(
    source: ObjectStore,
    dest: S3Store,
    repo: str | None = None,
    progress: Callable[[StoredObject, str], None] | None = None,
) -> MigrateReport:
    """Copy every object of *source* (a local store: one repo, or all) into the S3 store
    *dest*."""
    report = MigrateReport()
    repos = [repo] if repo else source.list_repos()
    for name in repos:
        dest.create_repo(name)
        for obj in source.iter_objects(name):
            if dest.stored_size(obj.repo, obj.oid) == obj.size:
                report.present += 1
                outcome = "present"
            else:
                assert obj.path is not None
                try:
                    dest.publish(obj.path, obj.repo, obj.oid, obj.size)
                    dest.check_landed(obj.repo, obj.oid, obj.size)
                except VerifyError as exc:
                    report.bad.append((obj, str(exc)))
                    outcome = "bad"
                else:
                    report.copied += 1
                    report.bytes_copied += obj.size
                    outcome = "copied"
            if progress is not None:
                progress(obj, outcome)
    return report
