"""Objects in an S3 bucket (AWS, Ceph's RADOS Gateway, any S3 server), through boto3.

Keys mirror the local layout: `<prefix><repo>.git/objects/aa/bb/<oid>`, so a migration
is a copy, and `<prefix>_repos/<repo>` marks that a repository exists (object keys always
have `.git/objects/` after the repository name and markers never do, so they cannot meet).

Nothing unverified becomes visible: an upload lands on the node first (nginx's body file,
a temporary file, or memory for a small streamed one), its size and SHA-256 are checked
there, and only then is it put under its oid. A single PUT is atomic in S3; a large object
goes up as a multipart upload, which S3 shows under its key only once completed. A node
killed mid-upload leaves at most an incomplete multipart upload (invisible): `cleanup`
aborts those older than an hour, and `serve` and `fsck` call it.

Credentials come the AWS way (environment, shared files, profiles): boto3's default
chain; nothing here reads or prints them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import datetime
import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

from lfs_server.backends.base import (
    CHUNK,
    S3_LOCATION,
    ObjectReader,
    StoredObject,
    StoreUnavailable,
)
from lfs_server.backends.shared import spooled_upload, verified_chunks, verify_file
from lfs_server.validation import OID_RE, ApiError, check_oid, normalize_repo

if TYPE_CHECKING:
    from lfs_server.config import Config

# Objects at least this large go up in parts (several connections, each part retried alone).
MULTIPART_THRESHOLD = 64 << 20
# An incomplete multipart upload older than this belongs to a node that died.
STALE_UPLOAD_SECONDS = 3600
_REPO_MARKERS = "_repos/"
# How long the presigned URL handed to nginx stays valid (nginx uses it at once).
NGINX_URL_SECONDS = 300
# The batch's HEADs run on one pool per process, made once: a pool per batch cost 16
# thread starts (151 ms of CPU per 100 objects, issue 25).
_HEAD_THREADS = 16
# An object this process stored (and checked) is known for this long without a HEAD: the
# verify that follows its upload need not ask the store again. Objects are never changed
# under their oid; only `fsck --quarantine` removes one, and never one just verified.
_RECENT_SECONDS = 60.0
_RECENT_MAX = 4096
# An upload streamed to the app (nginx's inline small upload, SSH, seed) up to this size is
# checked and sent from memory: no temporary file to create, write, reopen and remove.
_IN_MEMORY_MAX = 1 << 20


def _is_repo_name(name: str) -> bool:
    try:
        return normalize_repo(name) == name
    except ApiError:
        return False


def _missing(exc: Exception) -> bool:
    """Whether a botocore ClientError means 'no such key/bucket' (404)."""
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 404 or code in ("404", "NoSuchKey", "NotFound")


class S3Store:
    """Objects of every repository in one bucket (optionally under a key prefix)."""

    kind = "s3"
    in_data_folder = False
    # Uploads go through our PUT in both transfer modes (direct is for downloads only).
    uploads_verified_by_put = True

    def __init__(
        self,
        bucket: str,
        *,
        tmp_dir: Path,
        prefix: str = "",
        endpoint: str = "",
        region: str = "us-east-1",
        direct: bool = False,
    ) -> None:
        try:
            import boto3  # type: ignore[import-untyped]
            import botocore.exceptions  # type: ignore[import-untyped]
            from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]
            from botocore.config import Config as BotoConfig  # type: ignore[import-untyped]
        except ImportError:
            raise StoreUnavailable(
                "LFS_STORAGE=s3 needs boto3: pip install 'lfs-server[s3]'"
            ) from None
        self.bucket = bucket
        self.prefix = prefix.lstrip("/")
        if self.prefix and not self.prefix.endswith("/"):
            self.prefix += "/"
        self.tmp_dir = tmp_dir
        self.endpoint = endpoint
        self.direct = direct
        self.location = f"bucket {bucket}" + (f" (prefix {self.prefix})" if self.prefix else "")
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._recent: collections.OrderedDict[tuple[str, str], tuple[int, float]] = (
            collections.OrderedDict()
        )
        self._recent_lock = threading.Lock()
        self._errors: tuple[type[Exception], ...] = (
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
        )
        self._client_error = botocore.exceptions.ClientError
        # Few, quick retries: a store that is down answers 503 within seconds, and the
        # git-lfs client retries the transfer itself. Our parameters are built here, never
        # taken from a request: boto3's validation of them cost 0.1 ms a call (issue 25).
        options: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "signature_version": "s3v4",
            "retries": {"max_attempts": 3, "mode": "standard"},
            "connect_timeout": 3,
            "read_timeout": 60,
            "max_pool_connections": 32,
            "parameter_validation": False,
        }
        # botocore >= 1.36 adds a CRC32 to every PUT by default: a second pass over the
        # body that an upload checked against its SHA-256 here does not need (the request
        # is signed with the body's SHA-256 where it has no checksum; S3 checks that).
        # Multipart uploads still send CRC32 (`_put`), where the SHA-256 would cost more.
        self._crc_parts = "request_checksum_calculation" in BotoConfig.OPTION_DEFAULTS
        if self._crc_parts:
            options["request_checksum_calculation"] = "when_required"
        config = BotoConfig(**options)
        self.client: Any = boto3.session.Session().client(
            "s3", endpoint_url=endpoint or None, region_name=region or None, config=config
        )
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=16 << 20
        )

    @classmethod
    def from_config(cls, config: Config) -> S3Store:
        """The store named by LFS_S3_* settings."""
        return cls(
            config.s3_bucket,
            tmp_dir=config.tmp_dir,
            prefix=config.s3_prefix,
            endpoint=config.s3_endpoint,
            region=config.s3_region,
            direct=config.s3_transfer == "direct",
        )

    # Keys
    def key(self, repo: str, oid: str) -> str:
        """The object's key in the bucket."""
        check_oid(oid)
        return f"{self.prefix}{normalize_repo(repo)}.git/objects/{oid[:2]}/{oid[2:4]}/{oid}"

    def _marker(self, repo: str) -> str:
        return f"{self.prefix}{_REPO_MARKERS}{normalize_repo(repo)}"

    @contextlib.contextmanager
    def _calls(self, what: str) -> Iterator[None]:
        """Turn any S3 failure into StoreUnavailable, naming only what was being done."""
        try:
            yield
        except self._errors as exc:
            code = ""
            response = getattr(exc, "response", None)
            if response:
                code = f" ({response.get('Error', {}).get('Code', '')})"
            raise StoreUnavailable(
                f"the object store did not answer while {what}{code}; nothing was changed,"
                " retry in a moment"
            ) from exc

    # Health and housekeeping
    def check(self) -> None:
        """Raise StoreUnavailable unless the bucket answers."""
        with self._calls("checking the bucket"):
            self.client.head_bucket(Bucket=self.bucket)

    def cleanup(self, older_than: float = STALE_UPLOAD_SECONDS) -> int:
        """Abort incomplete multipart uploads under the prefix older than *older_than* s."""
        now = datetime.datetime.now(datetime.timezone.utc)
        aborted = 0
        with self._calls("listing unfinished uploads"):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    if (now - upload["Initiated"]).total_seconds() < older_than:
                        continue
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted += 1
        return aborted

    # Repositories
    def repo_exists(self, repo: str) -> bool:
        """Whether *repo* has been created."""
        with self._calls("looking up a repository"):
            try:
                self.client.head_object(Bucket=self.bucket, Key=self._marker(repo))
            except self._client_error as exc:
                if _missing(exc):
                    return False
                raise
        return True

    def create_repo(self, repo: str) -> None:
        """Create *repo* (idempotent)."""
        with self._calls("creating a repository"):
            self.client.put_object(Bucket=self.bucket, Key=self._marker(repo), Body=b"")

    def list_repos(self) -> list[str]:
        """All repository names."""
        start = f"{self.prefix}{_REPO_MARKERS}"
        return sorted(
            name
            for name in (key[len(start) :] for key, _size in self._list(start))
            if _is_repo_name(name)  # not a key an older version let a user put there
        )

    def _list(self, prefix: str) -> Iterator[tuple[str, int]]:
        with self._calls("listing objects"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    yield item["Key"], int(item["Size"])

    # Objects
    def stored_size(self, repo: str, oid: str) -> int | None:
        """The size of the stored object, or None if it is not stored.

        An object this process stored in the last minute is answered without a HEAD (the
        verify after an upload); a batch (`stored_sizes`) always asks the store, so a
        store that is down is reported before a transfer starts.
        """
        known = self._recently_stored(repo, oid)
        return known if known is not None else self._head_size(repo, oid)

    def _head_size(self, repo: str, oid: str) -> int | None:
        key = self.key(repo, oid)
        with self._calls("looking up an object"):
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=key)
            except self._client_error as exc:
                if _missing(exc):
                    return None
                raise
        return int(head["ContentLength"])

    def stored_sizes(self, repo: str, oids: list[str]) -> dict[str, int | None]:
        """The size of each oid's object, asked of the store concurrently (one HEAD each:
        ~5-10 ms apiece on a gateway, which a 100-object batch would otherwise pay in
        series)."""
        unique = list(dict.fromkeys(oids))
        if len(unique) <= 1:
            return {oid: self._head_size(repo, oid) for oid in unique}
        found = list(self._head_pool().map(lambda oid: self._head_size(repo, oid), unique))
        return dict(zip(unique, found, strict=True))

    def _head_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        # Made on first use in the process that uses it (a gunicorn worker forks after
        # the app is built, and a pool's threads do not survive a fork).
        with self._recent_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=_HEAD_THREADS, thread_name_prefix="s3-head"
                )
            return self._pool

    def _remember(self, repo: str, oid: str, size: int) -> None:
        with self._recent_lock:
            self._recent[(repo, oid)] = (size, time.monotonic() + _RECENT_SECONDS)
            self._recent.move_to_end((repo, oid))
            while len(self._recent) > _RECENT_MAX:
                self._recent.popitem(last=False)

    def _recently_stored(self, repo: str, oid: str) -> int | None:
        with self._recent_lock:
            hit = self._recent.get((repo, oid))
            if hit is None:
                return None
            if hit[1] < time.monotonic():
                del self._recent[(repo, oid)]
                return None
            return hit[0]

    def presigned_get(self, repo: str, oid: str, expires_in: int) -> str:
        """A URL that GETs the object from the store without other credentials."""
        with self._calls("signing a download"):
            url: str = self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self.key(repo, oid)},
                ExpiresIn=expires_in,
            )
        return url

    def open_object(
        self, repo: str, oid: str, start: int = 0, stop: int | None = None
    ) -> ObjectReader:
        """The stored bytes [start, stop): the body of one GET (with a Range when a part)."""
        extra = {}
        if start or stop is not None:
            extra["Range"] = f"bytes={start}-{'' if stop is None else stop - 1}"
        with self._calls("reading an object"):
            answer: dict[str, Any] = self.client.get_object(
                Bucket=self.bucket, Key=self.key(repo, oid), **extra
            )
        body: ObjectReader = answer["Body"]
        return body

    def nginx_redirect(self, repo: str, oid: str) -> str:
        """nginx's location that proxies to the gateway, then a presigned URL's path and
        query: the URL lives only inside nginx for the moment of one request."""
        url = urlsplit(self.presigned_get(repo, oid, NGINX_URL_SECONDS))
        return f"{S3_LOCATION}{url.path.lstrip('/')}?{url.query}"

    def direct_download_url(self, repo: str, oid: str, expires_in: int) -> str | None:
        """With LFS_S3_TRANSFER=direct a presigned URL (no credentials of ours in it; it
        expires with the action), else None: downloads go through nginx."""
        return self.presigned_get(repo, oid, expires_in) if self.direct else None

    def publish(self, source: Path, repo: str, oid: str, size: int) -> None:
        """Verify the local file *source* holds (oid, size), then put it under its key.

        On a mismatch VerifyError is raised and nothing is sent; the caller owns *source*
        (it is read, never moved).
        """
        verify_file(source, oid, size, sync=False)  # read, sent, then deleted: no fsync
        self._put(source, repo, oid, size)
        self._remember(repo, oid, size)

    def _put(self, source: Path, repo: str, oid: str, size: int) -> None:
        key = self.key(repo, oid)
        with self._calls("storing an object"):
            if size < MULTIPART_THRESHOLD:
                # One PUT: S3 shows the object whole once it answers 200, or not at all.
                with open(source, "rb") as body:
                    self.client.put_object(
                        Bucket=self.bucket,
                        Key=key,
                        Body=body,
                        ContentLength=size,
                        ContentType="application/octet-stream",
                    )
            else:
                extra = {"ContentType": "application/octet-stream"}
                if self._crc_parts:
                    extra["ChecksumAlgorithm"] = "CRC32"  # botocore's default before ours
                self.client.upload_file(
                    str(source), self.bucket, key, ExtraArgs=extra, Config=self._transfer
                )

    def check_landed(self, repo: str, oid: str, size: int) -> None:
        """Raise StoreUnavailable unless the store holds *size* bytes under the oid (asks
        the store itself, not what this process remembers storing)."""
        stored = self._head_size(repo, oid)
        if stored != size:
            raise StoreUnavailable(
                f"the object store holds {stored} bytes for {oid} after a {size}-byte upload;"
                " retry the upload"
            )

    def publish_stream(self, stream: BinaryIO, repo: str, oid: str, size: int) -> None:
        """Verify *stream* holds (oid, size), then put it: a small body from memory, a
        larger one spooled to a local temporary file on the way.

        On a mismatch VerifyError is raised and nothing is sent.
        """
        if size <= _IN_MEMORY_MAX:
            body = b"".join(verified_chunks(stream, oid, size))
            with self._calls("storing an object"):
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self.key(repo, oid),
                    Body=body,
                    ContentLength=size,
                    ContentType="application/octet-stream",
                )
        else:
            with spooled_upload(stream, self.tmp_dir, oid, size) as tmp:
                self._put(tmp, repo, oid, size)
        self._remember(repo, oid, size)

    def iter_objects(self, repo: str | None = None) -> Iterator[StoredObject]:
        """Every stored object (of one repo, or of all), in key order."""
        repos = [repo] if repo else self.list_repos()
        for name in repos:
            start = f"{self.prefix}{normalize_repo(name)}.git/objects/"
            for key, size in self._list(start):
                oid = key.rsplit("/", 1)[-1]
                if OID_RE.fullmatch(oid) and key == self.key(name, oid):
                    yield StoredObject(name, oid, None, size, key)

    def hash_object(self, obj: StoredObject) -> tuple[str, int]:
        """(hex SHA-256, size) of the stored bytes, streamed from the store."""
        digest = hashlib.sha256()
        size = 0
        body = self.open_object(obj.repo, obj.oid)
        try:
            with self._calls("reading an object"):
                while chunk := body.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        finally:
            body.close()
        return digest.hexdigest(), size

    def quarantine(self, obj: StoredObject, quarantine_dir: Path) -> str:
        """Move a bad object to `<prefix>_quarantine/<repo>.git/<oid>` in the bucket."""
        del quarantine_dir  # bad objects stay in the bucket, out of every repository
        dest = f"{self.prefix}_quarantine/{obj.repo}.git/{obj.oid}"
        with self._calls("moving a bad object"):
            self.client.copy_object(
                Bucket=self.bucket, Key=dest, CopySource={"Bucket": self.bucket, "Key": obj.key}
            )
            self.client.delete_object(Bucket=self.bucket, Key=obj.key)
        with self._recent_lock:
            self._recent.pop((obj.repo, obj.oid), None)
        return f"s3://{self.bucket}/{dest}"

    def delete(self, repo: str, oid: str) -> None:
        """Remove one object (tests and migrations use it; the API never deletes)."""
        with self._calls("deleting an object"):
            self.client.delete_object(Bucket=self.bucket, Key=self.key(repo, oid))
        with self._recent_lock:
            self._recent.pop((repo, oid), None)
