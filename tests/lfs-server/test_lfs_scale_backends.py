"""The existing protocol and lock tests, run again against a server whose objects live in
Ceph's RADOS Gateway (S3) and whose locks and users live in PostgreSQL.

The test functions are the very ones of test_lfs_protocol / test_lfs_git_locks (imported,
so pytest collects them here too); this module's `server` fixture gives them an s3 +
postgresql node instead of the local one. Tests that look at the local store's files, or
that need a differently configured server, stay with their own module.
"""

from __future__ import annotations

import io
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from lfs_engines import Ceph, Postgres
from lfs_scale_support import Cluster
from lfs_server.config import Config
from lfs_server.storage import ObjectStore, VerifyError, open_store
from lfs_testlib import Api, Server, assert_lfs_error, cli, oid_of
from test_lfs_git_locks import (  # noqa: F401 (collected here against s3 + postgresql)
    test_lock_list_unlock_with_git_lfs,
    test_locks_api_pagination_and_verify,
    test_pre_receive_hook_enforces_locks_on_non_ascii_and_quoted_paths,
    test_pre_receive_hook_refuses_force_pushes_that_rewind_or_drop_a_locked_file,
    test_pre_receive_hook_refuses_pushes_touching_others_locks,
)
from test_lfs_protocol import (  # noqa: F401 (collected here against s3 + postgresql)
    test_batch_bad_object_is_per_object_422,
    test_batch_download_missing_is_404_and_upload_gets_actions,
    test_batch_whole_request_errors,
    test_empty_object_roundtrip,
    test_errors_are_lfs_json,
    test_healthz_and_metrics,
    test_missing_credentials_is_401_with_lfs_authenticate,
    test_read_only_user_cannot_upload_403,
    test_upload_download_range_verify,
    test_user_without_access_to_repo_is_403,
    test_wrong_password_is_401,
)

pytestmark = [pytest.mark.nginx, pytest.mark.gitlfs]


@pytest.fixture(scope="module")
def server(ceph: Ceph, postgres: Postgres) -> Iterator[Server]:
    """One node with LFS_STORAGE=s3 (proxy downloads) and LFS_DATABASE_URL=postgresql://."""
    cluster = Cluster(ceph, postgres)
    node = cluster.start_node()
    yield node
    cluster.stop()


@pytest.fixture
def api(server: Server) -> Api:
    """The protocol tests' clients, here against the S3 + PostgreSQL node, not in-process."""
    return Api(server)


@pytest.fixture
def real_api(server: Server) -> Api:
    return Api(server)


@pytest.fixture(params=["local", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ObjectStore:
    """The local store in *tmp_path*, or a fresh bucket on the Ceph gateway."""
    env = {"LFS_DATA_DIR": str(tmp_path)}
    if request.param == "s3":
        ceph: Ceph = request.getfixturevalue("ceph")
        env.update(ceph.s3_env(ceph.create_bucket(f"lfs-stream-{secrets.token_hex(6)}")))
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.setenv(var, env[var])
    return open_store(Config.from_env(env))


BODY = os.urandom(3 << 20)  # more than one read of the spooling loop


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (BODY + b"!", "longer than the object's size"),
        (BODY[:-1], f"body is {len(BODY) - 1} bytes but the object's size is {len(BODY)}"),
        (bytes([BODY[0] ^ 1]) + BODY[1:], "SHA-256"),
    ],
    ids=["too long", "too short", "wrong hash"],
)
def test_publish_stream_stores_only_the_right_body(
    store: ObjectStore, body: bytes, fragment: str
) -> None:
    """A streamed upload (--no-nginx, import-seed) is refused whole on either store and
    leaves no temporary file; the right body then lands and hashes to its oid."""
    oid = oid_of(BODY)
    with pytest.raises(VerifyError, match=fragment):
        store.publish_stream(io.BytesIO(body), "stream/r", oid, len(BODY))
    assert store.stored_size("stream/r", oid) is None
    assert list(store.tmp_dir.iterdir()) == []
    store.publish_stream(io.BytesIO(BODY), "stream/r", oid, len(BODY))
    assert list(store.tmp_dir.iterdir()) == []
    [stored] = store.iter_objects("stream/r")
    assert store.hash_object(stored) == (oid, len(BODY))


def test_repository_names_never_enter_the_servers_key_space(server: Server, ceph: Ceph) -> None:
    """Issue 25 M2: one upload to `_repos/evil` (a `*=write` grant) put an object key inside
    the marker prefix; then `fsck` exited 2, `/metrics` was 404 and `repo list` showed junk.
    Such names are refused, and keys an older version let in are skipped."""
    import requests

    client = Api(server)
    for name in ("_repos/evil", "_quarantine/x", "_x"):
        body = {"operation": "upload", "objects": [{"oid": oid_of(b"e"), "size": 1}]}
        assert_lfs_error(client.batch(name, body), 404, "reserved")
    client.upload("m2/real", b"a real object")
    bucket = server.env["LFS_S3_BUCKET"]
    junk = oid_of(b"junk")
    key = f"_repos/evil.git/objects/{junk[:2]}/{junk[2:4]}/{junk}"
    ceph.client().put_object(Bucket=bucket, Key=key, Body=b"junk")  # type: ignore[attr-defined]
    try:
        assert requests.get(f"{server.url}/metrics", timeout=30).status_code == 200
        listed = cli("repo", "list", data=server.data, env=server.env)
        assert listed.returncode == 0 and "m2/real" in listed.stdout, listed.stderr
        assert "evil" not in listed.stdout, listed.stdout
        fsck = cli("fsck", data=server.data, env=server.env)
        assert fsck.returncode == 0 and "0 bad" in fsck.stdout, (fsck.stdout, fsck.stderr)
        refused = cli("repo", "create", "_repos/evil2", data=server.data, env=server.env)
        assert refused.returncode == 2 and "reserved" in refused.stderr, refused.stderr
    finally:
        ceph.client().delete_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]


def test_proxy_downloads_pass_no_client_header_but_range_to_the_store(server: Server) -> None:
    """Issue 25 M6: `If-Match` got S3's XML 412 naming the bucket, and `HEAD` on a download
    URL a 503 "store down" (the presigned URL is signed for GET only)."""
    import requests

    client = Api(server)
    data = os.urandom(10_000)
    client.upload("m6/proxy", data)
    action = client.download_action("m6/proxy", oid_of(data), len(data))
    bucket = server.env["LFS_S3_BUCKET"]
    r = requests.get(action["href"], headers={**action["header"], "If-Match": '"nope"'}, timeout=30)
    assert r.status_code == 200 and r.content == data, (r.status_code, r.text[:300])
    assert bucket not in r.text[:1000] and "xml" not in r.headers["Content-Type"]
    head = requests.head(action["href"], headers=action["header"], timeout=30)
    assert head.status_code == 200, (head.status_code, head.headers)
    assert head.headers["Content-Length"] == str(len(data))
    part = requests.get(action["href"], headers={**action["header"], "Range": "bytes=10-19"},
                        timeout=30)  # fmt: skip
    assert part.status_code == 206 and part.content == data[10:20]


class _Trickle(io.BytesIO):
    """A stream that answers at most 1000 bytes a read, as a socket may."""

    def read(self, size: int | None = -1) -> bytes:
        return super().read(1000 if size is None or size < 0 else min(size, 1000))


SMALL = os.urandom(4096)  # under the S3 store's in-memory limit: no temporary file at all


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (SMALL + b"!", "longer than the object's size"),
        (SMALL[:-1], f"body is {len(SMALL) - 1} bytes but the object's size is {len(SMALL)}"),
        (bytes([SMALL[0] ^ 1]) + SMALL[1:], "SHA-256"),
    ],
    ids=["too long", "too short", "wrong hash"],
)
def test_publish_stream_checks_a_small_body_before_sending_it(
    store: ObjectStore, body: bytes, fragment: str
) -> None:
    """A small streamed upload (nginx's inline upload of a few KiB) is checked in memory
    on S3: the wrong body is refused and nothing is stored; the right one, read in short
    pieces, lands whole."""
    oid = oid_of(SMALL)
    with pytest.raises(VerifyError, match=fragment):
        store.publish_stream(_Trickle(body), "small/r", oid, len(SMALL))
    assert store.stored_size("small/r", oid) is None
    store.publish_stream(_Trickle(SMALL), "small/r", oid, len(SMALL))
    [stored] = store.iter_objects("small/r")
    assert store.hash_object(stored) == (oid, len(SMALL))
    if store.kind == "s3":
        assert not store.tmp_dir.exists() or list(store.tmp_dir.iterdir()) == []


def test_s3_multipart_upload_lands_whole(
    ceph: Ceph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large object goes up in parts (with the CRC32 botocore's default used to add); the
    gateway assembles them into exactly the verified bytes."""
    from boto3.s3.transfer import TransferConfig
    from lfs_server.backends import s3

    env = {"LFS_DATA_DIR": str(tmp_path)}
    env.update(ceph.s3_env(ceph.create_bucket(f"lfs-parts-{secrets.token_hex(6)}")))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, env[var])
    store = open_store(Config.from_env(env))
    # Parts of S3's smallest size, so that 11 MiB makes three of them.
    monkeypatch.setattr(s3, "MULTIPART_THRESHOLD", 5 << 20)
    store._transfer = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)  # type: ignore[attr-defined]
    body = os.urandom(11 << 20)
    source = tmp_path / "body"
    source.write_bytes(body)
    store.publish(source, "parts/r", oid_of(body), len(body))
    key = store.key("parts/r", oid_of(body))  # type: ignore[attr-defined]
    head = ceph.client().head_object(Bucket=env["LFS_S3_BUCKET"], Key=key)  # type: ignore[attr-defined]
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # assembled from 3 parts
    [stored] = store.iter_objects("parts/r")
    assert store.hash_object(stored) == (oid_of(body), len(body))
