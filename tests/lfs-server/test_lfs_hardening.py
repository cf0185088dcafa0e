"""Issue 13: what a hostile review found, each checked against the real nginx + gunicorn
server with real git 2.39 / git-lfs 3.3 or raw HTTP (SECURITY.md lists them)."""

from __future__ import annotations

import os
import pwd
import socket
import stat
import time
import urllib.parse
from pathlib import Path

import pytest
import requests
from lfs_testlib import (
    Api,
    Server,
    assert_lfs_error,
    basic,
    make_git_env,
    oid_of,
    push_lfs_repo,
)

pytestmark = pytest.mark.nginx


@pytest.fixture
def api(server: Server) -> Api:
    return Api(server)


def _descendants(pid: int) -> list[int]:
    """*pid*'s child processes, their children, and so on (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def body_dir_bytes(server: Server) -> int:
    """Bytes nginx holds in its body temp folder right now, counting the temporary files it
    has already unlinked but keeps open (a buffered API body is such a file)."""
    body = server.data / "tmp/body"
    total = sum(p.stat().st_size for p in body.rglob("*") if p.is_file())
    for pid in _descendants(server.proc.pid):
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
                if target.startswith(f"{body}/") and target.endswith(" (deleted)"):
                    total += fd.stat().st_size
            except OSError:
                continue
    return total


# --- 1. a rejected upload makes `git push` fail and leaves the remote ref alone ----------


@pytest.mark.gitlfs
def test_push_of_a_corrupt_local_object_fails_and_keeps_the_remote_ref(
    server: Server, tmp_path: Path
) -> None:
    g = make_git_env(tmp_path, server.url, "alice")
    bare, work = push_lfs_repo(g, tmp_path, server.lfs("harden/push"), {"a.bin": b"first\n"})
    before = g.git("rev-parse", "main", cwd=bare).stdout
    data = os.urandom(3000)
    (work / "b.bin").write_bytes(data)
    g.git("add", "b.bin", cwd=work)
    g.git("commit", "-m", "b", cwd=work)
    oid = oid_of(data)
    local = work / ".git/lfs/objects" / oid[:2] / oid[2:4] / oid
    local.chmod(0o644)
    corrupt = bytearray(local.read_bytes())
    corrupt[1000] ^= 0xFF  # same size: only the server's hash check can notice
    local.write_bytes(bytes(corrupt))

    push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0, push.stdout + push.stderr
    assert g.git("rev-parse", "main", cwd=bare).stdout == before, "the remote ref moved"
    assert not list((server.data / "repos/harden/push.git").rglob(oid))


def test_upload_whose_bytes_changed_is_400_not_422(api: Api, server: Server) -> None:
    """A file changed while uploading: same size, other bytes. git-lfs 3.3 takes a 422 on
    upload for a Content-Type hint and lets the push succeed, so the answer is 400."""
    data = os.urandom(5000)
    oid = oid_of(data)
    up = api.upload_action("harden/changed", oid, len(data))["upload"]
    changed = data[:2500] + os.urandom(2500)
    r = requests.put(up["href"], data=changed, headers=up["header"], timeout=10)
    assert_lfs_error(r, 400, "SHA-256")
    assert not list((server.data / "repos/harden/changed.git").rglob(oid))


# --- 2. nothing on disk from an upload that will be refused ------------------------------


def raw_put(server: Server, path: str, headers: dict[str, str], length: int) -> tuple[str, int]:
    """PUT with a Content-Length of *length*, send 2 MiB of it, then wait for an answer
    while the connection stays open; return (status line, bytes in the body folder)."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode("latin-1"))
        sock.settimeout(0.5)
        chunk = b"\0" * 65536
        sent = 0
        try:
            while sent < 2 << 20:
                sent += sock.send(chunk)
        except (TimeoutError, OSError):
            pass  # the server stopped reading: the answer comes first
        sock.settimeout(8)
        answer = b""
        try:
            while b"\r\n" not in answer:
                more = sock.recv(4096)
                if not more:
                    break
                answer += more
        except TimeoutError:
            pass
        return answer.split(b"\r\n", 1)[0].decode("latin-1"), body_dir_bytes(server)


def test_refused_uploads_write_nothing_to_disk(api: Api, server: Server) -> None:
    big = 300 << 20
    oid = oid_of(b"x" * 10)
    other = oid_of(b"y" * 10)
    token = api.upload_action("harden/disk", oid, 10)["upload"]["header"]
    base = "/harden/disk.git/info/lfs/upload"
    cases = [
        ("no credentials", f"{base}/{oid}/{big}", {}, big, "401"),
        ("invalid token", f"{base}/{oid}/{big}", {"Authorization": "Bearer 1.YQ.00"}, big, "403"),
        ("token for another object", f"{base}/{other}/10", token, big, "403"),
        ("token for another size", f"{base}/{oid}/{big}", token, big, "403"),
        ("Content-Length is not the size", f"{base}/{oid}/10", token, big, "400"),
        ("over the size limit", f"{base}/{oid}/{1 << 50}", basic("alice"), 1 << 50, "413"),
    ]
    for what, path, headers, length, expected in cases:
        status, on_disk = raw_put(server, path, headers, length)
        assert status.split(" ")[1:2] == [expected], (what, status)
        assert on_disk == 0, f"{what}: nginx wrote {on_disk} bytes before refusing"


def test_refused_upload_answers_are_lfs_json(api: Api, server: Server) -> None:
    oid = oid_of(b"z" * 10)
    url = f"{server.lfs('harden/json')}/upload/{oid}/10"
    r = requests.put(url, data=b"z" * 10, timeout=10)
    body = assert_lfs_error(r, 401, "credentials are required")
    assert r.headers["LFS-Authenticate"].startswith("Basic")
    assert body["request_id"]
    r = requests.put(url, data=b"z" * 11, headers=basic("alice"), timeout=10)
    assert_lfs_error(r, 400, "Content-Length")
    r = requests.put(url, data=b"z" * 10, headers={"Authorization": "Bearer 1.YQ.00"}, timeout=10)
    assert_lfs_error(r, 403, "action token")
    # The internal check location is not reachable from outside.
    r = requests.get(server.url + "/_lfs/upload-check", headers=basic("alice"), timeout=10)
    assert r.status_code == 404


def test_expect_continue_on_a_refused_upload_writes_nothing(server: Server) -> None:
    """Issue 25 (low, SECURITY.md): nginx sends `100 Continue` before an error_page's answer,
    so the 401 follows it; what must hold is that the body the client then sends is dropped
    as it arrives, never written, and the answer is still LFS JSON."""
    oid = oid_of(b"e" * 10)
    length = 64 << 20
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"PUT /harden/expect.git/info/lfs/upload/{oid}/{length} HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nContent-Length: {length}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        answer = b""
        while b'"request_id"' not in answer:
            more = sock.recv(4096)
            assert more, answer
            answer += more
        final = answer.split(b"\r\n\r\n", 1)[1] if answer.startswith(b"HTTP/1.1 100 ") else answer
        head, body = final.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 401 "), answer
        assert b"application/vnd.git-lfs+json" in head and b"credentials" in body, answer
        sock.settimeout(0.5)
        sent, chunk = 0, b"\0" * 65536
        try:
            while sent < 8 << 20:
                sent += sock.send(chunk)
        except OSError:
            pass  # nginx closed the connection: nothing more to drop
        assert body_dir_bytes(server) == 0, f"nginx wrote the refused body ({sent} bytes sent)"


# --- 4. no 5xx from any header ------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        b"Bearer \xb9.YQ.00",
        b"Bearer \xc2\xb9.YQ.00",
        b"Bearer \xff\xfe",
        b"Basic \xb9\xb9\xb9",
        b"\xb9",
    ],
)
def test_non_ascii_authorization_is_never_5xx(server: Server, api: Api, header: bytes) -> None:
    data = b"stored for the header test"
    api.upload("harden/hdr", data)
    oid = oid_of(data)
    port = int(server.url.rsplit(":", 1)[1])
    for method, path in (
        ("GET", f"/harden/hdr.git/info/lfs/objects/{oid}"),
        ("PUT", f"/harden/hdr.git/info/lfs/upload/{oid}/{len(data)}"),
        ("GET", "/harden/hdr.git/info/lfs/locks?limit=%C2%B9"),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
                + b"Authorization: "
                + header
                + b"\r\nContent-Length: 0\r\n\r\n"
            )
            answer = b""
            while more := sock.recv(4096):
                answer += more
        status = int(answer.split(b" ", 2)[1])
        assert status < 500, (method, path, header, answer[:300])


def test_superscript_limit_is_422(server: Server) -> None:
    r = requests.get(
        server.lfs("harden/lim") + "/locks", params={"limit": "¹"}, headers=basic("alice")
    )
    assert_lfs_error(r, 422, "limit")


# --- 5. stored objects are read-only and not owned by nginx's worker user ----------------


def test_stored_objects_are_read_only_and_not_the_workers(api: Api, server: Server) -> None:
    data = os.urandom(4096)
    api.upload("harden/owner", data)
    oid = oid_of(data)
    path = server.data / "repos/harden/owner.git/objects" / oid[:2] / oid[2:4] / oid
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) & 0o222 == 0, oct(info.st_mode)
    if os.geteuid() == 0:
        assert info.st_uid == 0, "a root server keeps objects owned by root"
        assert info.st_uid != pwd.getpwnam("nobody").pw_uid


# --- 6. no existence oracle for callers without read access -------------------------------


def test_answers_without_read_access_do_not_depend_on_existence(api: Api, server: Server) -> None:
    data = b"an object someone may probe for"
    api.upload("harden/oracle", data)
    stored, missing = oid_of(data), oid_of(b"never stored")
    forged = {"Authorization": f"Bearer {int(time.time()) + 600}.YWxpY2U.{'0' * 64}"}
    for who, headers in (
        ("anonymous", {}),
        ("no grant on the repository", basic("teamonly")),
        ("forged token", forged),
        ("wrong password", {"Authorization": "Basic YWxpY2U6d3Jvbmc="}),
    ):
        answers = []
        for oid in (stored, missing):
            r = requests.get(
                f"{server.lfs('harden/oracle')}/objects/{oid}", headers=headers, timeout=10
            )
            answers.append((r.status_code, r.json()["message"].replace(oid, "<oid>")))
        assert answers[0] == answers[1], (who, answers)
        assert answers[0][0] in (401, 403), (who, answers)


# --- 7. the low items -----------------------------------------------------------------


def test_request_path_cannot_forge_access_log_lines(server: Server) -> None:
    forged = 'forged request_id=x user=root "GET /secret" status=200'
    path = "/x%0a" + urllib.parse.quote(forged) + "%0d%0a/info/lfs/locks"
    requests.get(server.url + path, headers=basic("alice"), timeout=10)
    time.sleep(0.5)
    lines = server.log_text().splitlines()
    assert not [line for line in lines if line.startswith("forged")], lines[-5:]
    assert any("\\nforged request_id=x" in line for line in lines), lines[-5:]


def test_healthz_names_no_path(server: Server) -> None:
    r = requests.get(server.url + "/healthz", timeout=10)
    assert r.status_code == 200
    assert str(server.data) not in r.text and "/repos" not in r.text, r.text


def test_absurd_size_is_a_per_object_error(api: Api) -> None:
    small = b"a normal object"
    r = api.batch(
        "harden/huge",
        {
            "operation": "upload",
            "objects": [
                {"oid": oid_of(small), "size": len(small)},
                {"oid": oid_of(b"huge"), "size": 2**70},
            ],
        },
    )
    assert r.status_code == 200, r.text
    first, second = r.json()["objects"]
    assert "upload" in first["actions"]
    assert second["error"]["code"] == 422 and "actions" not in second


def test_batch_body_is_not_parsed_before_credentials(server: Server) -> None:
    junk = b"[" * (900 << 10)  # 900 KiB that is not JSON (API bodies may have 1 MiB)
    url = server.lfs("harden/big") + "/objects/batch"
    r = requests.post(url, data=junk, headers={"Content-Type": "application/json"}, timeout=60)
    assert_lfs_error(r, 401, "credentials")
    r = requests.post(url, data=junk, headers=basic("teamonly"), timeout=60)
    assert_lfs_error(r, 403, "no access")


def test_options_answers_lfs_json_405(server: Server) -> None:
    r = requests.options(server.lfs("harden/opt") + "/locks", headers=basic("alice"), timeout=10)
    assert_lfs_error(r, 405, "OPTIONS")
    assert "GET" in r.headers["Allow"]


def test_namespace_grant_covers_every_depth_below_it(server: Server, api: Api) -> None:
    """Decided and documented (README, SECURITY.md): `team/*` is a namespace grant and
    reaches repositories at any depth below team/, but nothing beside it."""
    data = b"deep in the team namespace"
    api.upload("team/a/b/c", data, user="teamonly")
    oid = oid_of(data)
    r = api.batch(
        "teamx/a", {"operation": "download", "objects": [{"oid": oid, "size": 1}]}, "teamonly"
    )
    assert_lfs_error(r, 403, "no access")


def test_chunked_upload_without_length_is_refused_before_its_body(api: Api, server: Server) -> None:
    oid = oid_of(b"c" * 10)
    header = api.upload_action("harden/chunked", oid, 10)["upload"]["header"]
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = f"PUT /harden/chunked.git/info/lfs/upload/{oid}/10 HTTP/1.1\r\nHost: x\r\n"
        head += f"Authorization: {header['Authorization']}\r\nTransfer-Encoding: chunked\r\n\r\n"
        sock.sendall(head.encode() + b"100000\r\n" + b"\0" * (1 << 20))
        sock.settimeout(8)
        answer = sock.recv(4096)
        on_disk = body_dir_bytes(server)
    assert answer.split(b" ")[1] == b"411", answer[:300]
    assert on_disk == 0


# --- issue 25 M1: no unauthenticated body reaches the disk -------------------------------


def test_unauthenticated_api_bodies_never_reach_the_disk(server: Server) -> None:
    """20 connections without a login each send most of an API body and keep it open:
    nginx used to spill each to a (deleted) temporary file in the body folder, up to 16 MiB
    a request; now the whole allowance fits its memory buffer and a larger one is 413
    before its body is read."""
    port = int(server.url.rsplit(":", 1)[1])
    path = "/harden/m1.git/info/lfs/objects/batch"
    length = (1 << 20) - 100
    socks = []
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(sock)
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
            sock.sendall(head.encode() + b"[" * (length - 1000))
        time.sleep(0.5)
        held = body_dir_bytes(server)
        assert held == 0, f"nginx holds {held} bytes of unauthenticated bodies on disk"
        for sock in socks:
            sock.sendall(b"[" * 1000)
            assert sock.recv(4096).split(b" ")[1] == b"401"
    finally:
        for sock in socks:
            sock.close()
    status, on_disk = raw_post(server, path, 15 << 20)
    assert status.split(" ")[1:2] == ["413"] and on_disk == 0, (status, on_disk)


@pytest.mark.parametrize("variant", [";x", "/", "UPPER", "+"])
def test_upload_path_variants_are_refused_before_their_body(
    api: Api, server: Server, variant: str
) -> None:
    """Paths beside the upload location (`;x`, a trailing `/`, an upper-case oid, `+size`)
    fell through to the API location, which wrote their bodies to disk."""
    oid = oid_of(b"v" * 10)
    size = 10 << 20
    base = "/harden/variants.git/info/lfs/upload"
    path = {
        ";x": f"{base}/{oid}/{size};x",
        "/": f"{base}/{oid}/{size}/",
        "UPPER": f"{base}/{oid.upper()}/{size}",
        "+": f"{base}/{oid}/+{size}",
    }[variant]
    status, on_disk = raw_put(server, path, {}, size)
    assert status.split(" ")[1:2] == ["404"], status
    assert on_disk == 0, f"nginx wrote {on_disk} bytes of a body it then refused"


def raw_post(server: Server, path: str, length: int) -> tuple[str, int]:
    """POST without a login declaring *length* bytes; (status line, bytes in the body folder)."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        sock.settimeout(8)
        answer = sock.recv(4096)
        return answer.split(b"\r\n", 1)[0].decode("latin-1"), body_dir_bytes(server)
