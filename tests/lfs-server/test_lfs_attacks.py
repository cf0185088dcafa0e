"""Attacks the security tests in test_lfs_security.py do not already cover, as tables:
tokens replayed across repository, size, operation or key; links planted in the store;
oversize and malformed requests that must get a JSON 4xx, never a 5xx or a hang.
"""

from __future__ import annotations

import base64
import http.client
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from lfs_server.tokens import TokenSigner
from lfs_testlib import LFS_MEDIA, Api, InProcess, Server, assert_lfs_error, basic, oid_of

HOUR = 3600


@dataclass
class Target:
    server: Server | InProcess
    signer: TokenSigner
    data: bytes
    oid: str
    http: Any  # what sends the requests: the requests module, or the in-process session


def _target(server: Server | InProcess, http: Any) -> Target:
    data = os.urandom(4000)
    api = Api(server)
    for repo in ("atk/one", "atk/two"):
        api.upload(repo, data)
    signer = TokenSigner((server.data / "secret.key").read_bytes())
    return Target(server, signer, data, oid_of(data), http)


@pytest.fixture(scope="module")
def target(server: Server) -> Target:
    """Through real nginx + gunicorn."""
    return _target(server, requests)


@pytest.fixture(scope="module")
def app_target(app_server: InProcess) -> Target:
    """In-process: for what only the app's logic answers (no upload-check, no X-Accel)."""
    return _target(app_server, app_server.session)


def _on(kind: str, request: pytest.FixtureRequest) -> Target:
    return request.getfixturevalue("app_target" if kind == "app" else "target")


def later() -> int:
    return int(time.time()) + HOUR


# --- tokens: (what, operation the token was made for, repo, size, key, expiry) --------

TOKEN_CASES = [
    # name, request, token repo, token operation, size delta, other key, expired, fragment
    ("upload token replayed for another repo", "upload", "atk/one", "upload", 0, False, False),
    ("upload token for another size", "upload", "atk/two", "upload", 1, False, False),
    ("download token used for upload", "upload", "atk/two", "download", 0, False, False),
    ("verify token used for upload", "upload", "atk/two", "verify", 0, False, False),
    ("upload token from a rotated-out key", "upload", "atk/two", "upload", 0, True, False),
    ("expired upload token", "upload", "atk/two", "upload", 0, False, True),
    ("download token replayed for verify", "verify", "atk/two", "download", 0, False, False),
    ("verify token replayed for another repo", "verify", "atk/one", "verify", 0, False, False),
    ("verify token for another size", "verify", "atk/two", "verify", 1, False, False),
    ("verify token from a rotated-out key", "verify", "atk/two", "verify", 0, True, False),
    ("expired verify token", "verify", "atk/two", "verify", 0, False, True),
    ("download token from a rotated-out key", "download", "atk/two", "download", 0, True, False),
]


@pytest.mark.parametrize(
    ("request_kind", "token_repo", "token_op", "size_delta", "other_key", "expired"),
    # A verify is the app's alone; uploads pass nginx's upload-check, downloads X-Accel.
    [
        pytest.param(*case[1:], marks=() if case[1] == "verify" else pytest.mark.nginx)
        for case in TOKEN_CASES
    ],
    ids=[case[0] for case in TOKEN_CASES],
)
def test_token_is_refused_outside_its_scope(
    request: pytest.FixtureRequest,
    request_kind: str,
    token_repo: str,
    token_op: str,
    size_delta: int,
    other_key: bool,
    expired: bool,
) -> None:
    """Every request goes to repo atk/two for the stored object; only the token varies."""
    target = _on("app" if request_kind == "verify" else "nginx", request)
    srv, data, oid, http = target.server, target.data, target.oid, target.http
    signer = TokenSigner(secrets.token_bytes(32)) if other_key else target.signer
    expiry = int(time.time()) - 1 if expired else later()
    token = signer.issue(token_repo, token_op, oid, len(data) + size_delta, "alice", expiry)
    headers = {"Authorization": f"Bearer {token}"}
    base = srv.lfs("atk/two")
    if request_kind == "upload":
        evil = b"\0" * len(data)  # would be refused anyway: the point is the 403 first
        r = http.put(f"{base}/upload/{oid}/{len(data)}", data=evil, headers=headers, timeout=10)
    elif request_kind == "verify":
        r = http.post(
            f"{base}/verify", json={"oid": oid, "size": len(data)}, headers=headers, timeout=10
        )
    else:
        r = http.get(f"{base}/objects/{oid}", headers=headers, timeout=10)
    assert_lfs_error(r, 403, "expired" if expired else "does not grant")
    assert data not in r.content
    # The stored object is untouched.
    good = target.signer.issue("atk/two", "download", oid, len(data), "alice", later())
    got = http.get(f"{base}/objects/{oid}", headers={"Authorization": f"Bearer {good}"}, timeout=10)
    assert got.content == data


@pytest.mark.nginx
def test_forwarded_headers_from_clients_do_not_steer_action_links(target: Target) -> None:
    """nginx sets X-Forwarded-Proto itself; a client's value never reaches the hrefs."""
    srv = target.server
    r = requests.post(
        srv.lfs("atk/two") + "/objects/batch",
        json={"operation": "download", "objects": [{"oid": target.oid, "size": len(target.data)}]},
        headers={**basic("alice"), "X-Forwarded-Proto": "javascript", "X-Lfs-Proxy-Auth": "x"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    href = r.json()["objects"][0]["actions"]["download"]["href"]
    assert href.startswith(srv.url + "/atk/two.git/info/lfs/objects/")


# --- links planted in the store --------------------------------------------------------


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the store that nginx's workers could read (so only the
    refusal to follow links keeps its files from being served)."""
    path = Path(tempfile.mkdtemp(prefix="lfs-outside-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def object_rel(repo: str, oid: str) -> str:
    return f"{repo}.git/objects/{oid[:2]}/{oid[2:4]}/{oid}"


def plant_file_link(srv: Server, outside: Path, repo: str, data: bytes) -> Path:
    """repos/<repo>.git/objects/aa/bb/<oid> -> a file outside the store."""
    secret = outside / "secret.bin"
    secret.write_bytes(data)
    secret.chmod(0o644)
    link = srv.data / "repos" / object_rel(repo, oid_of(data))
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(secret)
    return outside


def plant_repo_link(srv: Server, outside: Path, repo: str, data: bytes) -> Path:
    """repos/<repo>.git -> a directory outside the store holding the object's layout."""
    real = outside / "fake.git"
    obj = real / "objects" / oid_of(data)[:2] / oid_of(data)[2:4] / oid_of(data)
    obj.parent.mkdir(parents=True)
    obj.write_bytes(data)
    for p in [real, *obj.parents]:
        if outside in p.parents:
            p.chmod(0o755)
    obj.chmod(0o644)
    link = srv.data / "repos" / f"{repo}.git"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(real, target_is_directory=True)
    return real


def plant_fanout_link(srv: Server, outside: Path, repo: str, data: bytes) -> Path:
    """repos/<repo>.git/objects/aa -> a directory outside the store."""
    oid = oid_of(data)
    real = outside / "fanout"
    (real / oid[2:4]).mkdir(parents=True)
    (real / oid[2:4] / oid).write_bytes(data)
    objects = srv.data / "repos" / f"{repo}.git" / "objects"
    objects.mkdir(parents=True, exist_ok=True)
    (objects / oid[:2]).symlink_to(real, target_is_directory=True)
    return real


PLANTS: dict[str, Callable[[Server, Path, str, bytes], Path]] = {
    "object file links outside": plant_file_link,
    "repository dir links outside": plant_repo_link,
    "fan-out dir links outside": plant_fanout_link,
}


@pytest.mark.nginx
@pytest.mark.parametrize("plant", list(PLANTS), ids=list(PLANTS))
def test_links_planted_in_the_store_are_never_followed(
    server: Server, outside: Path, plant: str
) -> None:
    repo = f"atk/link{list(PLANTS).index(plant)}"
    secret = os.urandom(2048)
    oid = oid_of(secret)
    real_dir = PLANTS[plant](server, outside, repo, secret)
    before = sorted(p.name for p in real_dir.rglob("*"))
    api = Api(server)
    # Not offered for download...
    r = api.batch(repo, {"operation": "download", "objects": [{"oid": oid, "size": len(secret)}]})
    if r.status_code == 200:
        assert r.json()["objects"][0]["error"]["code"] == 404, r.text
    else:
        assert_lfs_error(r, 403, "symbolic link")
    # ...nor served to a holder of a valid token (nginx refuses links as well).
    signer = TokenSigner((server.data / "secret.key").read_bytes())
    token = signer.issue(repo, "download", oid, len(secret), "alice", later())
    got = requests.get(
        f"{server.lfs(repo)}/objects/{oid}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert got.status_code in (403, 404), got.status_code
    assert got.headers["Content-Type"].startswith(LFS_MEDIA)
    assert secret not in got.content
    # An upload through the link is refused before anything is written outside.
    other = secret
    while plant != "object file links outside" and other == secret:
        candidate = os.urandom(1024)  # another object whose path crosses the same link
        if oid_of(candidate)[:2] == oid[:2]:
            other = candidate
    up_token = signer.issue(repo, "upload", oid_of(other), len(other), "alice", later())
    r = requests.put(
        f"{server.lfs(repo)}/upload/{oid_of(other)}/{len(other)}",
        data=other,
        headers={"Authorization": f"Bearer {up_token}"},
        timeout=10,
    )
    if plant == "object file links outside":
        # Publishing renames over the link itself: the outside file is never written.
        assert r.status_code == 200, r.text
        assert (outside / "secret.bin").read_bytes() == secret
        assert not (server.data / "repos" / object_rel(repo, oid)).is_symlink()
    else:
        assert_lfs_error(r, 403, "symbolic link")
    assert sorted(p.name for p in real_dir.rglob("*")) == before


# --- oversize and malformed requests ---------------------------------------------------


def raw(server: Server, request: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request + body)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, dict(resp.getheaders()), resp.read()


def _head(path: str, extra: str = "", length: int = 0, method: str = "POST") -> bytes:
    auth = base64.b64encode(b"alice:alice-pw").decode()
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


BATCH = "/atk/two.git/info/lfs/objects/batch"
MALFORMED: dict[str, tuple[Callable[[], tuple[bytes, bytes]], int, str]] = {
    "API body over 16m": (
        lambda: (_head(BATCH, length=17 << 20), b"[" * (17 << 20)),
        413,
        "too large",
    ),
    "JSON nested 100000 deep": (
        lambda: (_head(BATCH, length=100000), b"[" * 100000),
        400,
        "nested too deeply",
    ),
    "URL over 8k": (
        lambda: (_head("/atk/" + "a" * 9000 + "/info/lfs/locks", method="GET"), b""),
        414,
        "too long",
    ),
    "header over 8k": (
        lambda: (_head(BATCH, extra="X-Junk: " + "j" * 9000 + "\r\n"), b""),
        400,
        "headers are too large",
    ),
    "control character in a header, 1 MiB body": (
        lambda: (
            _head(BATCH, extra="Content-Type: garbage/\x7f\r\n", length=1 << 20),
            b"{" * (1 << 20),
        ),
        400,
        "",
    ),
    "unknown transfer encoding": (
        lambda: (
            b"POST " + BATCH.encode() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"",
        ),
        501,
        "not implemented",
    ),
    "Range past the end": (
        lambda: (b"", b""),  # built in the test: needs a token
        416,
        "not satisfiable",
    ),
}


@pytest.mark.nginx
@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_and_oversize_requests_get_json_4xx(target: Target, case: str) -> None:
    build, status, fragment = MALFORMED[case]
    srv = target.server
    assert isinstance(srv, Server)  # raw requests to nginx's port
    if case == "Range past the end":
        token = target.signer.issue(
            "atk/two", "download", target.oid, len(target.data), "alice", later()
        )
        r = requests.get(
            f"{srv.lfs('atk/two')}/objects/{target.oid}",
            headers={"Authorization": f"Bearer {token}", "Range": "bytes=999999-"},
            timeout=10,
        )
        got_status, headers, body = r.status_code, dict(r.headers), r.content
    else:
        request, body_bytes = build()
        got_status, headers, body = raw(srv, request, body_bytes)
    assert got_status == status, (got_status, body[:300])
    assert headers["Content-Type"].startswith(LFS_MEDIA), headers
    message = requests.models.complexjson.loads(body)["message"]
    assert fragment in message, message
    # The server is still answering normally afterwards.
    assert requests.get(srv.url + "/healthz", timeout=10).status_code == 200


# Found by the long fuzz run (LFS_FUZZ_EXAMPLES=1500): each was a 500 or a 308. The
# app's own answers in-process; the upload URL (nginx's upload location) on nginx.
FUZZ_FINDINGS = [
    (
        "app",
        "POST",
        "/atk/two.git/info/lfs/locks/9223372036854775808/unlock",
        b"{}",
        404,
        "no lock",
    ),
    ("app", "GET", "/atk/two.git/info/lfs/locks?id=99999999999999999999", b"", 200, ""),
    ("nginx", "PUT", "/atk/two.git/info/lfs/upload/0//0", b"", 404, "no such endpoint"),
    ("app", "POST", "/atk/two.git/info/lfs/verify", b"[" * 50000, 400, "nested too deeply"),
]


@pytest.mark.parametrize(
    ("where", "method", "path", "body", "status", "fragment"),
    [pytest.param(*f, marks=() if f[0] == "app" else pytest.mark.nginx) for f in FUZZ_FINDINGS],
)
def test_fuzz_findings_stay_fixed(
    request: pytest.FixtureRequest,
    where: str,
    method: str,
    path: str,
    body: bytes,
    status: int,
    fragment: str,
) -> None:
    target = _on(where, request)
    r = target.http.request(
        method, target.server.url + path, data=body, headers=basic("alice"), timeout=10
    )
    if status == 200:
        assert r.status_code == 200 and r.json() == {"locks": []}, r.text
    else:
        assert_lfs_error(r, status, fragment)
