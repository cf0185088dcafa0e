"""Security rules: traversal, forged/expired/cross-scope tokens, requests that bypass nginx."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import time
from pathlib import Path

import pytest
import requests
from lfs_server.tokens import TokenSigner, proxy_secret
from lfs_testlib import Api, Server, assert_lfs_error, basic, oid_of

pytestmark = pytest.mark.nginx


@pytest.fixture
def api(server: Server) -> Api:
    return Api(server)


def signer(server: Server) -> TokenSigner:
    return TokenSigner((server.data / "secret.key").read_bytes())


class UnixHTTPConnection(http.client.HTTPConnection):
    """Talk to gunicorn's unix socket directly, as a local attacker could."""

    def __init__(self, path: Path) -> None:
        super().__init__("localhost")
        self.unix_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.unix_path)


def direct(
    server: Server, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, str]:
    conn = UnixHTTPConnection(server.data / "run/gunicorn.sock")
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    return resp.status, text


@pytest.mark.parametrize(
    "path",
    [
        "/proto/s.git/info/lfs/objects/..%2f..%2f..%2fetc%2fpasswd",
        "/proto/s.git/info/lfs/objects/" + "%2e%2e%2f" * 5 + "etc%2fpasswd",
        "/proto/s.git/info/lfs/upload/..%2f..%2fsecret.key/10",
    ],
)
def test_traversal_in_oid_is_rejected(server: Server, path: str) -> None:
    method = "PUT" if "/upload/" in path else "GET"
    r = requests.request(
        method, server.url + path, headers=basic("alice"), data=b"x" * 10, timeout=10
    )
    assert r.status_code in (404, 422), r.text
    assert r.headers["Content-Type"].startswith("application/vnd.git-lfs+json")
    assert b"root:" not in r.content


@pytest.mark.parametrize(
    "repo",
    [
        "%2e%2e/%2e%2e/etc",
        "a/%2e%2e/%2e%2e/%2e%2e/tmp/evil",
        ".hidden",
        "a/.git/b",
        "a//b",
        "x.git.git",
    ],
)
def test_traversal_or_odd_repo_paths_are_rejected(server: Server, repo: str) -> None:
    r = requests.post(
        f"{server.url}/{repo}.git/info/lfs/objects/batch",
        json={"operation": "upload", "objects": [{"oid": "a" * 64, "size": 1}]},
        headers=basic("alice"),
        timeout=10,
    )
    assert r.status_code in (400, 404), (repo, r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/vnd.git-lfs+json")
    assert not Path("/tmp/evil.git").exists()
    assert not (server.data / "etc.git").exists()


def test_forged_expired_and_cross_scope_tokens_are_403(api: Api, server: Server) -> None:
    data = os.urandom(3000)
    oid = oid_of(data)
    api.upload("sec/one", data)
    api.upload("sec/two", data)
    good = api.download_action("sec/one", oid, len(data))
    href, token = good["href"], good["header"]["Authorization"].split()[1]
    assert (
        requests.get(href, headers={"Authorization": f"Bearer {token}"}, timeout=10).content == data
    )

    expiry, user, mac = token.split(".")
    forged = f"{expiry}.{user}.{'0' * len(mac)}"
    longer = f"{int(expiry) + 3600}.{user}.{mac}"
    other_user = f"{expiry}.Ym9i.{mac}"  # "bob"
    s = signer(server)
    expired = s.issue("sec/one", "download", oid, len(data), "alice", int(time.time()) - 1)
    other_repo = s.issue("sec/two", "download", oid, len(data), "alice", int(time.time()) + 60)
    upload_tok = s.issue("sec/one", "upload", oid, len(data), "alice", int(time.time()) + 60)
    cases = {
        forged: "does not grant",
        longer: "does not grant",
        other_user: "does not grant",
        other_repo: "does not grant",
        upload_tok: "does not grant",
        expired: "expired",
        "garbage": "malformed",
    }
    for bad, fragment in cases.items():
        r = requests.get(href, headers={"Authorization": f"Bearer {bad}"}, timeout=10)
        assert_lfs_error(r, 403, fragment)
    # The token of repo two works for repo two only.
    two = good["href"].replace("/sec/one.git/", "/sec/two.git/")
    assert (
        requests.get(two, headers={"Authorization": f"Bearer {other_repo}"}, timeout=10).content
        == data
    )


def test_download_token_cannot_upload(api: Api, server: Server) -> None:
    data = os.urandom(1000)
    oid = oid_of(data)
    api.upload("sec/dl", data)
    token = api.download_action("sec/dl", oid, len(data))["header"]["Authorization"]
    evil = os.urandom(1000)
    r = requests.put(
        f"{server.lfs('sec/dl')}/upload/{oid}/{len(data)}",
        data=evil,
        headers={"Authorization": token},
        timeout=10,
    )
    assert_lfs_error(r, 403, "does not grant upload")
    # Nor can a token for one oid upload another.
    other = os.urandom(1000)
    up = api.upload_action("sec/dl", oid_of(other), len(other))["upload"]
    r = requests.put(
        f"{server.lfs('sec/dl')}/upload/{oid_of(evil)}/{len(evil)}",
        data=evil,
        headers=up["header"],
        timeout=10,
    )
    assert_lfs_error(r, 403, "does not grant upload")


def test_direct_gunicorn_requests_cannot_publish_local_files(api: Api, server: Server) -> None:
    victim = server.data / "secret.key"
    data = victim.read_bytes()
    oid = oid_of(data)
    up = api.upload_action("sec/direct", oid, len(data))["upload"]
    path = f"/sec/direct.git/info/lfs/upload/{oid}/{len(data)}"
    base = {
        **up["header"],
        "Host": "x",
        "X-Lfs-Body-File": str(victim),
        "X-Lfs-Content-Length": str(len(data)),
    }
    # No proxy secret: refused before the path is even looked at.
    status, text = direct(server, "PUT", path, base)
    assert status == 403 and "through lfs-server's nginx" in text
    status, text = direct(server, "PUT", path, {**base, "X-Lfs-Proxy-Auth": "guess"})
    assert status == 403 and "through lfs-server's nginx" in text
    # Even with the secret, only files inside nginx's body directory are accepted.
    secret = proxy_secret(victim.read_bytes())
    status, text = direct(server, "PUT", path, {**base, "X-Lfs-Proxy-Auth": secret})
    assert status == 403 and "inside nginx's body directory" in text
    sneaky = server.data / "tmp/body/../../secret.key"
    status, text = direct(
        server, "PUT", path, {**base, "X-Lfs-Proxy-Auth": secret, "X-Lfs-Body-File": str(sneaky)}
    )
    assert status == 403
    link = server.data / "tmp/body/link"
    link.symlink_to(victim)
    try:
        status, text = direct(
            server, "PUT", path, {**base, "X-Lfs-Proxy-Auth": secret, "X-Lfs-Body-File": str(link)}
        )
        assert status == 403
    finally:
        link.unlink()
    assert not list((server.data / "repos/sec").rglob(oid))
    # A client cannot smuggle the header through nginx either: nginx overwrites it.
    r = requests.put(
        api.server.url + path,
        data=b"x" * len(data),
        headers={**up["header"], "X-Lfs-Body-File": str(victim)},
        timeout=10,
    )
    assert_lfs_error(r, 400, "SHA-256")
    assert not list((server.data / "repos/sec").rglob(oid))


# --- issue 25 M5: modes do not depend on the umask -------------------------------------


def test_nothing_the_server_makes_is_writable_by_others_under_umask_000(tmp_path: Path) -> None:
    """Under umask 000 the data, store and run folders were 0777: a local user replaced
    gunicorn.sock with their own socket and read the next request's Basic credentials."""
    import stat

    from lfs_testlib import make_data_dir, start_server

    parent = make_data_dir()
    data = parent / "data"  # made by lfs-server itself (`user add`, then `serve`)
    old = os.umask(0)
    try:
        server = start_server(data, log=parent / "serve.log")  # the test's file, not ours
    finally:
        os.umask(old)
    try:
        Api(server).upload("umask/repo", b"an object under umask 000")
        writable = []
        for path in [data, *data.rglob("*")]:
            info = path.lstat()
            if stat.S_ISSOCK(info.st_mode) or stat.S_ISLNK(info.st_mode):
                continue  # connecting needs write on a socket; its folder protects it
            if info.st_mode & 0o022:
                writable.append(f"{path.relative_to(data)} {stat.filemode(info.st_mode)}")
        assert not writable, writable
        for folder in (data, data / "run", data / "repos", data / "tmp"):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
    finally:
        server.stop()
        import shutil

        shutil.rmtree(parent, ignore_errors=True)


def test_nginx_logs_are_readable_by_the_server_alone(server: Server, api: Api) -> None:
    """Issue 25 M4: in proxy mode nginx's error log records a failed fetch's presigned S3
    URL (access key id, a signature valid for minutes); it was created 0644."""
    api.upload("logs/private", b"something logged")
    for name in ("nginx-error.log", "nginx-access.log"):
        log = server.data / "run" / name
        assert log.stat().st_mode & 0o077 == 0, (
            name,
            oct(log.stat().st_mode),
        )
        assert log.stat().st_uid == os.geteuid()
    access = (server.data / "run/nginx-access.log").read_text()
    assert "/logs/private.git/info/lfs/upload/" in access  # nginx still writes it


def test_conditional_download_on_the_local_store_is_lfs_json(server: Server, api: Api) -> None:
    """Issue 25 M6: on the local store nginx answered an unmet If-Match with its HTML 412."""
    data = b"conditional"
    api.upload("m6/local", data)
    action = api.download_action("m6/local", oid_of(data), len(data))
    r = requests.get(action["href"], headers={**action["header"], "If-Match": '"nope"'}, timeout=30)
    assert_lfs_error(r, 412, "If-Match")
    head = requests.head(action["href"], headers=action["header"], timeout=30)
    assert head.status_code == 200 and head.headers["Content-Length"] == str(len(data))


# --- issue 25: failed logins are limited; tokens do not outlive their user -------------


def _login(
    server: Server, user: str, password: str, source: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    """A batch request with Basic credentials, sent from loopback address *source*."""
    import base64

    port = int(server.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    body = b'{"operation": "download", "objects": []}'
    headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
    conn.request("POST", "/limits/repo.git/info/lfs/objects/batch", body=body, headers=headers)
    answer = conn.getresponse()
    result = answer.status, dict(answer.getheaders()), answer.read()
    conn.close()
    return result


def test_failed_logins_are_limited_per_client_and_per_user() -> None:
    """8 attackers made 6.1 guesses/s with no lockout; now a client or a user name that
    used up its failures gets 429 with Retry-After (git-lfs waits and retries), without a
    password check, while a user whose login was checked a moment ago goes on working."""
    import json

    from lfs_testlib import start_server

    server = start_server(extra_env={"LFS_LOGIN_FAILURES": "5"})
    try:
        assert _login(server, "alice", "alice-pw")[0] == 200  # remembered for a minute
        for _ in range(5):
            assert _login(server, "bob", "wrong")[0] == 401
        status, headers, body = _login(server, "bob", "wrong")
        assert status == 429 and int(headers["Retry-After"]) >= 1, (status, headers)
        assert headers["Content-Type"].startswith("application/vnd.git-lfs+json")
        assert "too many failed logins" in json.loads(body)["message"]
        assert _login(server, "reader", "reader-pw")[0] == 429  # this address is limited
        assert _login(server, "alice", "alice-pw")[0] == 200  # checked a moment ago
        # Per user: one guess each from five other addresses, then the name is limited.
        for n in range(2, 7):
            assert _login(server, "boss", "wrong", f"127.0.0.{n}")[0] == 401
        status, headers, _body = _login(server, "boss", "boss-pw", "127.0.0.9")
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert _login(server, "reader", "reader-pw", "127.0.0.9")[0] == 200
    finally:
        server.stop()
        shutil.rmtree(server.data, ignore_errors=True)


def test_action_tokens_stop_working_when_their_user_goes(server: Server, api: Api) -> None:
    """A removed user's action token kept working until it expired (the token is signed,
    not stored): the user and the grant are checked again when a token is used."""
    from lfs_testlib import cli

    added = cli("user", "add", "leaver", "--grant", "*=write", "--password-stdin",
                data=server.data, stdin="leaver-pw\n", env=server.env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    data = os.urandom(2000)
    oid = oid_of(data)
    stored = os.urandom(1000)
    api.upload("tokens/leaver", stored)

    def action(operation: str, oid: str, size: int) -> dict:
        r = requests.post(
            server.lfs("tokens/leaver") + "/objects/batch",
            json={"operation": operation, "objects": [{"oid": oid, "size": size}]},
            auth=("leaver", "leaver-pw"),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return r.json()["objects"][0]["actions"][operation]

    up = action("upload", oid, len(data))
    down = action("download", oid_of(stored), len(stored))
    removed = cli("user", "remove", "leaver", data=server.data, env=server.env)
    assert removed.returncode == 0, removed.stderr
    put = requests.put(up["href"], data=data, headers=up["header"], timeout=30)
    assert_lfs_error(put, 403, "no longer valid")
    get = requests.get(down["href"], headers=down["header"], timeout=30)
    assert_lfs_error(get, 403, "no longer valid")
    assert not list((server.data / "repos/tokens/leaver.git").rglob(oid))
