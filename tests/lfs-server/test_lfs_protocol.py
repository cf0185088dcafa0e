"""The Git LFS HTTP API: every status code and error body. The app's own answers are
asked in-process (Flask's test client); what nginx does (body limits, body files,
X-Accel downloads, its error pages) through real nginx + gunicorn."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from lfs_testlib import (
    LFS_MEDIA,
    Api,
    InProcess,
    Server,
    assert_lfs_error,
    basic,
    cli,
    in_process,
    make_data_dir,
    oid_of,
    start_server,
)

OID = "a" * 64
# Auto-creation off, objects up to 1000 bytes, 5-object batches, anonymous read.
STRICT = {
    "LFS_AUTO_CREATE": "0",
    "LFS_MAX_OBJECT_SIZE": "1000",
    "LFS_MAX_BATCH_OBJECTS": "5",
    "LFS_ANONYMOUS_READ": "1",
}


@pytest.fixture
def api(app_server: InProcess) -> Api:
    return Api(app_server)


@pytest.fixture
def real_api(server: Server) -> Api:
    return Api(server)


def _strict_data() -> Path:
    data = make_data_dir()
    assert cli("repo", "create", "known.git", data=data).returncode == 0
    return data


@pytest.fixture(scope="module")
def strict() -> Iterator[InProcess]:
    """The STRICT settings, in-process."""
    data = _strict_data()
    yield in_process(data, STRICT)
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def strict_nginx() -> Iterator[Server]:
    """The STRICT settings on real nginx + gunicorn."""
    srv = start_server(_strict_data(), extra_env=STRICT)
    yield srv
    assert srv.stop() == 0
    shutil.rmtree(srv.data, ignore_errors=True)


# --- batch: per-object results ------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "code", "fragment"),
    [
        ({"oid": "../../etc/passwd", "size": 1}, 422, "oid must be 64 lowercase hex"),
        ({"oid": "A" * 64, "size": 1}, 422, "oid must be 64 lowercase hex"),
        ({"oid": OID[:63], "size": 1}, 422, "oid must be 64"),
        ({"oid": OID, "size": -1}, 422, "size must be a non-negative integer"),
        ({"oid": OID, "size": "12"}, 422, "size must be a non-negative integer"),
        ({"oid": OID, "size": True}, 422, "size must be a non-negative integer"),
        ({"oid": OID, "size": 1.5}, 422, "size must be a non-negative integer"),
        ({"oid": OID}, 422, "size must be"),
    ],
)
@pytest.mark.parametrize("operation", ["upload", "download"])
def test_batch_bad_object_is_per_object_422(
    api: Api, operation: str, obj: dict, code: int, fragment: str
) -> None:
    good = {"oid": "b" * 64, "size": 3}
    r = api.batch("proto/objs", {"operation": operation, "objects": [obj, good]})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith(LFS_MEDIA)
    first, second = r.json()["objects"]
    assert first["error"]["code"] == code
    assert fragment in first["error"]["message"]
    assert first["oid"] == obj.get("oid") and first.get("size") == obj.get("size")
    assert "actions" not in first
    # The other object is answered normally.
    assert "error" not in second or second["error"]["code"] == 404


def test_batch_download_missing_is_404_and_upload_gets_actions(api: Api) -> None:
    objects = [{"oid": OID, "size": 10}]
    down = api.batch("proto/missing", {"operation": "download", "objects": objects}).json()
    assert down["objects"][0]["error"]["code"] == 404
    assert down["objects"][0]["oid"] == OID and down["objects"][0]["size"] == 10
    up = api.batch("proto/missing", {"operation": "upload", "objects": objects}).json()
    obj = up["objects"][0]
    assert obj["authenticated"] is True
    # No verify action: our PUT answers 200 only once the object is verified and stored,
    # and git-lfs calls verify only when the batch names it.
    assert set(obj["actions"]) == {"upload"}
    for action in obj["actions"].values():
        assert action["href"].startswith(api.server.url + "/proto/missing.git/info/lfs/")
        assert action["header"]["Authorization"].startswith("Bearer ")
        assert action["expires_in"] > 0


@pytest.mark.parametrize(
    "transfers", [None, ["basic"], ["lfs-standalone-file", "basic", "ssh"], ["tus"]]
)
def test_transfer_is_basic_whatever_the_client_lists(api: Api, transfers: list[str] | None) -> None:
    body: dict = {"operation": "download", "objects": [], "ref": None}
    if transfers is not None:
        body["transfers"] = transfers
    r = api.batch("proto/t", body)
    assert r.status_code == 200, r.text
    assert r.json() == {"transfer": "basic", "objects": [], "hash_algo": "sha256"}


def test_hash_algo_other_than_sha256_is_409_per_object(api: Api) -> None:
    body = {"operation": "upload", "hash_algo": "sha512", "objects": [{"oid": OID, "size": 1}]}
    r = api.batch("proto/h", body)
    assert r.status_code == 200
    payload = r.json()
    assert payload["hash_algo"] == "sha256"
    assert payload["objects"][0]["error"]["code"] == 409
    echoed = api.batch("proto/h", {**body, "hash_algo": "sha256"}).json()
    assert echoed["hash_algo"] == "sha256" and "actions" in echoed["objects"][0]


def test_media_type_with_charset_and_ref_object(api: Api) -> None:
    r = api.batch(
        "proto/c",
        {"operation": "download", "objects": [], "ref": {"name": "refs/heads/main"}},
        headers={
            "Content-Type": LFS_MEDIA + "; charset=utf-8",
            "Accept": LFS_MEDIA + "; charset=utf-8",
        },
    )
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"operation": "delete", "objects": []}, 422, "operation must be 'upload' or 'download'"),
        ({"operation": "upload"}, 422, "objects must be a list"),
        ([], 422, "batch request must be a JSON object"),
        (
            {"operation": "upload", "objects": [], "ref": "main"},
            422,
            "ref must be null or an object",
        ),
        (
            {"operation": "upload", "objects": [], "transfers": "basic"},
            422,
            "transfers must be a list",
        ),
    ],
)
def test_batch_whole_request_errors(api: Api, body: object, status: int, fragment: str) -> None:
    assert_lfs_error(api.batch("proto/e", body), status, fragment)


def test_batch_invalid_json_is_400(api: Api) -> None:
    r = api.session.post(
        api.url("proto/e", "objects/batch"), data=b"{nope", headers=basic("alice"), timeout=10
    )
    assert_lfs_error(r, 400, "must be JSON")


def test_too_many_objects_is_413(strict: InProcess) -> None:
    objects = [{"oid": f"{i:064x}", "size": 1} for i in range(6)]
    r = Api(strict).batch("known", {"operation": "download", "objects": objects})
    assert_lfs_error(r, 413, "at most 5 objects")


def test_object_over_size_limit_is_per_object_422(strict: InProcess) -> None:
    body = {
        "operation": "upload",
        "objects": [{"oid": OID, "size": 1001}, {"oid": "c" * 64, "size": 1000}],
    }
    objs = Api(strict).batch("known", body).json()["objects"]
    assert objs[0]["error"]["code"] == 422 and "up to 1000 bytes" in objs[0]["error"]["message"]
    assert "upload" in objs[1]["actions"]


@pytest.mark.nginx
def test_nginx_refuses_oversized_body_with_json_413(strict_nginx: Server) -> None:
    # Even a hand-made PUT cannot push more than the limit through nginx.
    url = f"{strict_nginx.lfs('known')}/upload/{OID}/5000"
    r = requests.put(url, data=b"x" * 5000, headers={"Authorization": "Bearer x"}, timeout=10)
    assert_lfs_error(r, 413)


def test_unknown_repo_is_404_when_auto_create_is_off(strict: InProcess) -> None:
    api = Api(strict)
    assert_lfs_error(
        api.batch("nope/never", {"operation": "upload", "objects": []}), 404, "does not exist"
    )
    assert not (strict.data / "repos/nope").exists()
    assert api.batch("known", {"operation": "upload", "objects": []}).status_code == 200


def test_anonymous_read_but_not_write(strict: InProcess) -> None:
    api = Api(strict)
    assert (
        api.batch("known", {"operation": "download", "objects": []}, user=None).status_code == 200
    )
    assert_lfs_error(api.batch("known", {"operation": "upload", "objects": []}, user=None), 401)


# --- authentication and authorization -----------------------------------------------


def test_missing_credentials_is_401_with_lfs_authenticate(api: Api) -> None:
    r = api.batch("proto/a", {"operation": "download", "objects": []}, user=None)
    assert_lfs_error(r, 401, "credentials are required")
    assert r.headers["LFS-Authenticate"].startswith("Basic realm=")


def test_wrong_password_is_401(api: Api) -> None:
    r = api.session.post(
        api.url("proto/a", "objects/batch"),
        json={"operation": "download", "objects": []},
        auth=("alice", "wrong"),
        timeout=10,
    )
    assert_lfs_error(r, 401, "wrong user name or password")
    assert "LFS-Authenticate" in r.headers


def test_read_only_user_cannot_upload_403(api: Api) -> None:
    assert (
        api.batch("proto/r", {"operation": "download", "objects": []}, user="reader").status_code
        == 200
    )
    r = api.batch("proto/r", {"operation": "upload", "objects": []}, user="reader")
    assert_lfs_error(r, 403, "read access")


def test_user_without_access_to_repo_is_403(api: Api) -> None:
    assert (
        api.batch("team/x", {"operation": "upload", "objects": []}, user="teamonly").status_code
        == 200
    )
    assert_lfs_error(
        api.batch("other/x", {"operation": "upload", "objects": []}, user="teamonly"),
        403,
        "no access",
    )


# --- transfers ------------------------------------------------------------------------


@pytest.mark.nginx
def test_upload_download_range_verify(real_api: Api, server: Server) -> None:
    api = real_api
    data = os.urandom(200_000)
    oid = oid_of(data)
    obj = api.upload("proto/data", data)
    assert "actions" in obj
    # Already stored: no actions the second time.
    again = api.batch(
        "proto/data", {"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]}
    )
    assert "actions" not in again.json()["objects"][0]
    action = api.download_action("proto/data", oid, len(data))
    full = requests.get(action["href"], headers=action["header"], timeout=30)
    assert full.status_code == 200 and full.content == data
    part = requests.get(
        action["href"], headers={**action["header"], "Range": "bytes=1000-1999"}, timeout=30
    )
    assert part.status_code == 206
    assert part.content == data[1000:2000]
    assert part.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    # Download with a different size than stored is 422.
    r = api.batch("proto/data", {"operation": "download", "objects": [{"oid": oid, "size": 5}]})
    assert r.json()["objects"][0]["error"]["code"] == 422
    # nginx's body files do not outlive their requests.
    assert list((server.data / "tmp/body").iterdir()) == []


@pytest.mark.nginx
def test_put_with_wrong_hash_or_size_is_400_and_stores_nothing(
    real_api: Api, server: Server
) -> None:
    api = real_api
    data = os.urandom(5000)
    oid = oid_of(data)
    actions, r = api.put_one_bit_off("proto/bad", data, 100)
    up = actions["upload"]
    # 400, not 422: git-lfs takes a 422 on upload for a Content-Type hint and pushes on.
    assert_lfs_error(r, 400, "SHA-256")
    r = requests.put(up["href"], data=data[:-1], headers=up["header"], timeout=10)
    assert_lfs_error(r, 400, "Content-Length is '4999'")
    r = requests.put(up["href"], data=data + b"!", headers=up["header"], timeout=10)
    assert_lfs_error(r, 400, "Content-Length is '5001'")
    assert not list((server.data / "repos/proto/bad.git/objects").rglob(oid))
    assert "verify" not in actions
    # A client that verifies anyway is told nothing was stored.
    v = requests.post(
        api.url("proto/bad", "verify"),
        json={"oid": oid, "size": len(data)},
        headers=basic("alice"),
        timeout=10,
    )
    assert_lfs_error(v, 404, "not stored")
    assert list((server.data / "tmp/body").iterdir()) == []
    # Any content type is accepted for the real bytes.
    r = requests.put(
        up["href"], data=data, headers={**up["header"], "Content-Type": "image/png"}, timeout=10
    )
    assert r.status_code == 200, r.text


@pytest.mark.nginx
def test_empty_object_roundtrip(real_api: Api) -> None:
    api = real_api
    api.upload("proto/empty", b"")
    action = api.download_action("proto/empty", oid_of(b""), 0)
    r = requests.get(action["href"], headers=action["header"], timeout=10)
    assert r.status_code == 200 and r.content == b""


# --- JSON everywhere --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/no/such/endpoint", 404),
        ("DELETE", "/proto/x.git/info/lfs/objects/batch", 405),
        ("GET", "/proto/x.git/info/lfs/objects/batch", 422),  # "batch" is not an oid
        ("PUT", f"/proto/x.git/info/lfs/objects/{OID}", 405),
        ("GET", f"/proto/x.git/info/lfs/objects/{OID}", 404),
        ("GET", "/_lfs_store/proto/x.git/objects/aa/aa/" + OID, 404),
    ],
)
@pytest.mark.nginx
def test_errors_are_lfs_json(server: Server, method: str, path: str, status: int) -> None:
    r = requests.request(method, server.url + path, headers=basic("alice"), timeout=10)
    assert_lfs_error(r, status)


def test_healthz_and_metrics(api: Api) -> None:
    api.upload("proto/metrics", b"metrics object")
    r = api.session.get(api.server.url + "/healthz", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    text = api.session.get(api.server.url + "/metrics", timeout=10).text
    assert 'lfs_requests_total{endpoint="batch.batch",method="POST",status="200"}' in text
    assert "lfs_objects_uploaded_total" in text
    stored = [line for line in text.splitlines() if line.startswith("lfs_objects_stored ")]
    assert stored and float(stored[0].split()[1]) >= 1
