"""Object stores: the names other modules have imported from here, kept.

The stores themselves live in `lfs_server.backends` (`localfs.Store`, `s3.S3Store`),
chosen by `backends.open_store`.
"""

from __future__ import annotations

from lfs_server.backends import open_store
from lfs_server.backends.base import (
    CHUNK,
    ObjectStore,
    StoredObject,
    StoreUnavailable,
    UnsafeStorePath,
    VerifyError,
)
from lfs_server.backends.localfs import Store
from lfs_server.backends.shared import open_regular, sha256_file, spooled_upload, verify_file

__all__ = [
    "CHUNK",
    "ObjectStore",
    "Store",
    "StoreUnavailable",
    "StoredObject",
    "UnsafeStorePath",
    "VerifyError",
    "open_regular",
    "open_store",
    "sha256_file",
    "spooled_upload",
    "verify_file",
]
