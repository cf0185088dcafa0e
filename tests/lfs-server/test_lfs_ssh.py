"""SSH remotes with the real parts: OpenSSH's sshd on loopback, whose keys run `lfs-server
ssh --user NAME` as their forced command, and real git + git-lfs 3.x with `ssh://` remotes.

git-lfs tries the pure SSH protocol (`git-lfs-transfer`) first and falls back to
`git-lfs-authenticate` + the HTTP API when that command fails to start: both are covered,
the second with keys whose forced command refuses git-lfs-transfer (exit 127).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lfs_engines import Ceph, Postgres
from lfs_server.locks import LockDB
from lfs_testlib import (
    KEYS,
    LFS_MEDIA,
    GitEnv,
    Server,
    Sshd,
    cli,
    make_data_dir,
    running_sshd,
    ssh_git_env,
    start_server,
)

pytestmark = [pytest.mark.gitlfs]


def stored(data_dir: Path, repo: str, oid: str) -> Path:
    return data_dir / "repos" / f"{repo}.git" / "objects" / oid[:2] / oid[2:4] / oid


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """One sshd for the pure-protocol tests; no HTTP server runs at all."""
    data = make_data_dir()
    try:
        with running_sshd(tmp_path_factory.mktemp("sshd"), data) as server:
            yield server
    finally:
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def http_and_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Sshd]]:
    """The HTTP server (nginx + gunicorn) and an sshd whose keys refuse git-lfs-transfer."""
    server = start_server()
    keys = {name: [*opts, "--no-transfer", "--url", server.url] for name, opts in KEYS.items()}
    try:
        with running_sshd(
            tmp_path_factory.mktemp("sshd-auth"), server.data, keys, users=False
        ) as s:
            yield server, s
    finally:
        status = server.stop()
        log = server.log_text()
        shutil.rmtree(server.data, ignore_errors=True)
        assert status == 0, log


@pytest.fixture(params=["transfer", "authenticate"])
def remote(request: pytest.FixtureRequest) -> Sshd:
    """The sshd git-lfs talks to: over the pure SSH protocol, or through keys that refuse
    git-lfs-transfer, so git-lfs falls back to git-lfs-authenticate and the HTTP API."""
    if request.param == "transfer":
        found: Sshd = request.getfixturevalue("sshd")
        return found
    pair: tuple[Server, Sshd] = request.getfixturevalue("http_and_sshd")
    return pair[1]


def new_work(g: GitEnv, root: Path, sshd: Sshd, repo: str, files: dict[str, bytes]) -> Path:
    """A work tree tracking *.bin in LFS, with *files* committed and `origin` at *repo*."""
    work = root / "work"
    g.git("init", str(work))
    g.git("lfs", "track", "--lockable", "*.bin", cwd=work)
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "assets", cwd=work)
    g.git("remote", "add", "origin", sshd.url(repo), cwd=work)
    return work


def test_push_and_fresh_clone(remote: Sshd, tmp_path: Path) -> None:
    sshd = remote
    bare = sshd.make_bare("team/game")
    alice = ssh_git_env(tmp_path, sshd, "alice")
    files = {f"asset{i}.bin": os.urandom(40_000 + i * 7919) for i in range(3)}
    files["sub/big.bin"] = os.urandom(3 << 20)
    work = new_work(alice, tmp_path, sshd, "team/game", files)
    pushed = alice.git("push", "origin", "main", cwd=work, env={"GIT_TRACE": "1"})
    assert "git-lfs-transfer /team/game.git upload" in pushed.stderr
    if sshd.fallback:
        assert "git-lfs-authenticate /team/game.git upload" in pushed.stderr
        access = (sshd.data / "run/nginx-access.log").read_text()
        assert "/team/game.git/info/lfs/objects/batch" in access
    else:
        # git-lfs spoke the pure protocol: no HTTP endpoint exists here to fall back to.
        assert "git-lfs-authenticate" not in pushed.stderr
    for data in files.values():
        assert stored(sshd.data, "team/game", sha(data)).read_bytes() == data
    assert (bare / "refs/heads/main").is_file()

    reader = ssh_git_env(tmp_path, sshd, "reader")
    clone = tmp_path / "clone"
    reader.git("clone", sshd.url("team/game"), str(clone))
    for name, data in files.items():
        assert (clone / name).read_bytes() == data, name

    # A second push of the same objects sends nothing (the batch says noop).
    (work / "notes.txt").write_text("more\n")
    alice.git("add", "notes.txt", cwd=work)
    alice.git("commit", "-m", "notes", cwd=work)
    again = alice.git("push", "origin", "main", cwd=work, env={"GIT_TRACE": "1"})
    assert "put-object" not in again.stderr and "/upload/" not in again.stderr


def test_lock_and_unlock(remote: Sshd, tmp_path: Path) -> None:
    sshd = remote
    sshd.make_bare("team/locks")
    alice = ssh_git_env(tmp_path, sshd, "alice")
    work = new_work(alice, tmp_path, sshd, "team/locks", {"art.bin": b"layer\n" * 100})
    alice.git("push", "origin", "main", cwd=work)
    locked = alice.git("lfs", "lock", "art.bin", cwd=work)
    assert "Locked art.bin" in locked.stdout, locked.stdout
    db = LockDB(sshd.data / "locks.sqlite3")
    [lock] = db.find("team/locks")
    assert (lock.path, lock.owner) == ("art.bin", "alice")

    bob = ssh_git_env(tmp_path / "b", sshd, "bob")
    bob_clone = tmp_path / "bob"
    bob.git("clone", sshd.url("team/locks"), str(bob_clone))
    listing = bob.git("lfs", "locks", cwd=bob_clone)
    assert "art.bin" in listing.stdout and "alice" in listing.stdout, listing.stdout
    refused = bob.git("lfs", "unlock", "art.bin", cwd=bob_clone, check=False)
    assert refused.returncode != 0
    assert "locked by alice" in refused.stderr, refused.stderr
    # bob's push of a change to alice's locked file is refused by the client's lock check.
    (bob_clone / "art.bin").chmod(0o644)
    (bob_clone / "art.bin").write_bytes(b"bob's layer\n")
    bob.git("commit", "-am", "bob edits", cwd=bob_clone)
    blocked = bob.git("push", "origin", "main", cwd=bob_clone, check=False)
    assert blocked.returncode != 0, blocked.stderr
    assert "Unable to push locked files" in blocked.stdout and "art.bin" in blocked.stdout

    alice.git("lfs", "unlock", "art.bin", cwd=work)
    assert db.find("team/locks") == []


def test_unknown_user_is_refused(remote: Sshd, tmp_path: Path) -> None:
    sshd = remote
    sshd.make_bare("team/secret")
    mallory = ssh_git_env(tmp_path, sshd, "mallory")
    result = mallory.git("clone", sshd.url("team/secret"), str(tmp_path / "c"), check=False)
    assert result.returncode != 0
    assert "'mallory' is not an lfs-server user" in result.stderr, result.stderr
    # Every command of the key is refused the same way, git-lfs's included.
    command = "git-lfs-authenticate" if sshd.fallback else "git-lfs-transfer"
    answer = sshd.ssh("mallory", f"{command} /team/secret.git download")
    assert answer.returncode == 1 and b"not an lfs-server user" in answer.stderr
    assert answer.stdout == b""


def test_commands_other_than_git_and_lfs_are_refused(sshd: Sshd) -> None:
    for command in ("sh -c id", "cat /etc/passwd", "git-upload-archive /team/game.git"):
        answer = sshd.ssh("alice", command)
        assert answer.returncode == 127, (command, answer)
        assert answer.stdout == b""
        assert answer.stderr.decode().count("\n") == 1, answer.stderr
        assert "may run git-upload-pack, git-receive-pack" in answer.stderr.decode()
    # A path that leaves the repositories root is not a repository name.
    answer = sshd.ssh("alice", "git-upload-pack '/team/../../etc.git'")
    assert answer.returncode == 1 and b"is not allowed" in answer.stderr, answer.stderr


def test_grants_refuse_push_and_clone(remote: Sshd, tmp_path: Path) -> None:
    sshd = remote
    bare = sshd.make_bare("team/readonly")
    reader = ssh_git_env(tmp_path, sshd, "reader")
    data = os.urandom(10_000)
    work = new_work(reader, tmp_path, sshd, "team/readonly", {"a.bin": data})
    pushed = reader.git("push", "origin", "main", cwd=work, check=False)
    assert pushed.returncode != 0
    assert "'reader' has read access to 'team/readonly'; write access is needed" in pushed.stderr
    assert not stored(sshd.data, "team/readonly", sha(data)).exists()
    assert not (bare / "refs/heads/main").exists()

    sshd.make_bare("other/place")
    teamonly = ssh_git_env(tmp_path / "t", sshd, "teamonly")
    cloned = teamonly.git("clone", sshd.url("other/place"), str(tmp_path / "o"), check=False)
    assert cloned.returncode != 0
    assert "'teamonly' has no access to 'other/place'" in cloned.stderr, cloned.stderr


@pytest.mark.parametrize("damage", ["hash", "size"])
def test_wrong_object_is_refused_and_push_fails(remote: Sshd, tmp_path: Path, damage: str) -> None:
    sshd = remote
    repo = f"team/damaged-{damage}"
    bare = sshd.make_bare(repo)
    alice = ssh_git_env(tmp_path, sshd, "alice")
    data = os.urandom(200_000)
    work = new_work(alice, tmp_path, sshd, repo, {"a.bin": data})
    oid = sha(data)
    local = work / ".git/lfs/objects" / oid[:2] / oid[2:4] / oid
    local.chmod(0o644)
    if damage == "hash":  # same size, one bit off
        wrong = bytearray(data)
        wrong[1234] ^= 1
        local.write_bytes(bytes(wrong))
    else:
        local.write_bytes(data[:150_000])
    pushed = alice.git("push", "origin", "main", cwd=work, check=False)
    assert pushed.returncode != 0, pushed.stderr
    if damage == "hash":
        assert "not the oid" in pushed.stderr, pushed.stderr
    assert not stored(sshd.data, repo, oid).exists()
    assert not (bare / "refs/heads/main").exists()
    leftovers = list((sshd.data / "tmp").glob("upload-*"))
    assert leftovers == [], leftovers


# The pure protocol byte by byte, for what the client never sends -------------------------


def pkt(text: str | bytes) -> bytes:
    payload = text.encode() + b"\n" if isinstance(text, str) else text
    return b"%04x" % (len(payload) + 4) + payload


FLUSH, DELIM = b"0000", b"0001"


def parse_packets(raw: bytes) -> list[bytes | str]:
    """Packets of *raw*: 'flush'/'delim' markers, else payload bytes."""
    out: list[bytes | str] = []
    pos = 0
    while pos < len(raw):
        length = int(raw[pos : pos + 4], 16)
        if length in (0, 1):
            out.append("flush" if length == 0 else "delim")
            pos += 4
            continue
        out.append(raw[pos + 4 : pos + length])
        pos += length
    return out


def session(sshd: Sshd, key: str, operation: str, *requests_: bytes, repo: str = "team/raw"):
    """Run one git-lfs-transfer connection with *requests_* after version negotiation."""
    stdin = pkt("version 1") + FLUSH + b"".join(requests_)
    answer = sshd.ssh(key, f"git-lfs-transfer /{repo}.git {operation}", stdin)
    return answer, parse_packets(answer.stdout)


def statuses(packets: list[bytes | str]) -> list[str]:
    return [
        p.decode().strip() for p in packets if isinstance(p, bytes) and p.startswith(b"status ")
    ]


def put(oid: str, size: int, body: bytes) -> bytes:
    chunks = b"".join(pkt(body[i : i + 65516]) for i in range(0, len(body), 65516))
    return pkt(f"put-object {oid}") + pkt(f"size={size}") + DELIM + chunks + FLUSH


def test_protocol_refuses_bad_objects_and_keeps_going(sshd: Sshd) -> None:
    good = os.urandom(150_000)
    oid = sha(good)
    wrong_hash = bytearray(good)
    wrong_hash[0] ^= 1
    answer, packets = session(
        sshd,
        "alice",
        "upload",
        put(oid, len(good), good[:-1]),  # too short
        put(oid, len(good), good + b"x"),  # too long
        put(oid, len(good), bytes(wrong_hash)),
        put(oid, len(good) + 1, good),  # the size argument lies
        pkt("frobnicate") + FLUSH,
        pkt(f"verify-object {oid}") + pkt(f"size={len(good)}") + FLUSH,
        put(oid, len(good), good),
        pkt(f"verify-object {oid}") + pkt(f"size={len(good)}") + FLUSH,
        pkt("quit") + FLUSH,
    )
    assert answer.returncode == 0, answer.stderr
    assert packets[:3] == [b"version=1\n", b"locking\n", "flush"]
    assert statuses(packets) == [
        "status 200",  # version
        "status 400",
        "status 400",
        "status 400",
        "status 400",
        "status 400",  # unknown command
        "status 404",  # verify: nothing was stored by the refused uploads
        "status 200",
        "status 200",
        "status 200",  # quit
    ]
    text = answer.stdout.decode(errors="replace")
    assert "upload rejected, nothing stored" in text and "not the oid" in text
    assert "unknown command 'frobnicate'" in text
    assert stored(sshd.data, "team/raw", oid).read_bytes() == good


def test_protocol_download_session_refuses_uploads(sshd: Sshd) -> None:
    data = b"downloadable\n"
    oid = sha(data)
    _answer, packets = session(sshd, "alice", "upload", put(oid, len(data), data))
    assert statuses(packets)[-1] == "status 200"
    missing = "0" * 64
    _answer, packets = session(
        sshd,
        "reader",
        "download",
        put(oid, len(data), data),
        pkt("batch") + pkt("hash-algo=sha256") + DELIM + pkt(f"{oid} {len(data)}") + FLUSH,
        pkt(f"get-object {oid}") + pkt(f"size={len(data)}") + FLUSH,
        pkt(f"get-object {missing}") + pkt("size=1") + FLUSH,
        pkt("batch") + DELIM + pkt(f"{oid} {len(data)}") + pkt(f"{missing} 1") + FLUSH,
        pkt("quit") + FLUSH,
    )
    assert statuses(packets) == [
        "status 200",
        "status 403",
        "status 200",
        "status 200",
        "status 404",
        "status 404",  # a download batch naming a missing object
        "status 200",
    ]
    assert f"object {missing} does not exist in 'team/raw'\n".encode() in packets
    assert f"{oid} {len(data)} download\n".encode() in packets
    get_at = packets.index(b"status 200\n", packets.index(f"{oid} {len(data)} download\n".encode()))
    assert packets[get_at + 1 : get_at + 4] == [f"size={len(data)}\n".encode(), "delim", data]


def test_protocol_malformed_packet_ends_the_session(sshd: Sshd) -> None:
    answer, packets = session(sshd, "alice", "upload", b"zzzzgarbage")
    assert answer.returncode == 1
    assert statuses(packets) == ["status 200", "status 400"]
    assert any(isinstance(p, bytes) and b"malformed packet" in p for p in packets)
    # A packet cut short by the end of input: refused the same way, nothing stored.
    data = os.urandom(5000)
    answer, packets = session(
        sshd,
        "alice",
        "upload",
        pkt(f"put-object {sha(data)}") + pkt("size=5000") + DELIM + pkt(data[:3000])[:-100],
    )
    assert answer.returncode == 1 and statuses(packets)[-1] == "status 400"
    assert not stored(sshd.data, "team/raw", sha(data)).exists()


# Only git-lfs-authenticate: git-lfs falls back to the HTTP API -----------------------------


def test_authenticate_prints_http_credentials(http_and_sshd: tuple[Server, Sshd]) -> None:
    server, sshd = http_and_sshd
    refused = sshd.ssh("alice", "git-lfs-transfer /team/auth.git upload")
    assert refused.returncode == 127 and refused.stdout == b""
    answer = sshd.ssh("reader", "git-lfs-authenticate /team/auth.git download")
    assert answer.returncode == 0, answer.stderr
    creds = json.loads(answer.stdout)
    assert creds["href"] == f"{server.url}/team/auth.git/info/lfs"
    assert set(creds) == {"href", "header", "expires_in"} and creds["expires_in"] > 0
    headers = {**creds["header"], "Accept": LFS_MEDIA, "Content-Type": LFS_MEDIA}
    body = {"operation": "download", "objects": [{"oid": "a" * 64, "size": 1}]}
    ok = requests.post(f"{creds['href']}/objects/batch", json=body, headers=headers, timeout=30)
    assert ok.status_code == 200, ok.text
    # A download token does not upload; nor does it work for another repository.
    up = requests.post(
        f"{creds['href']}/objects/batch",
        json={**body, "operation": "upload"},
        headers=headers,
        timeout=30,
    )
    assert up.status_code == 401, up.text
    other = requests.post(
        f"{server.url}/team/other.git/info/lfs/objects/batch",
        json=body,
        headers=headers,
        timeout=30,
    )
    assert other.status_code == 401, other.text
    # The grant is checked before any token is printed.
    denied = sshd.ssh("reader", "git-lfs-authenticate /team/auth.git upload")
    assert denied.returncode == 1 and denied.stdout == b""
    assert b"write access is needed" in denied.stderr


# The other stores: objects in S3 (Ceph RGW), locks and users in PostgreSQL ------------------


def test_pure_ssh_with_s3_and_postgresql(ceph: Ceph, postgres: Postgres, tmp_path: Path) -> None:
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    bucket = ceph.create_bucket(f"lfs-ssh-{tag}")
    env = {
        **ceph.s3_env(bucket),
        "LFS_DATABASE_URL": postgres.create_database(f"lfs_ssh_{tag.replace('-', '_')}"),
    }
    data = make_data_dir()
    keys = {name: KEYS[name] for name in ("alice", "reader")}
    try:
        with running_sshd(tmp_path / "sshd", data, keys, env=env) as s3sshd:
            s3sshd.make_bare("team/cloud")
            alice = ssh_git_env(tmp_path, s3sshd, "alice")
            files = {"a.bin": os.urandom(70_000), "big.bin": os.urandom(3 << 20)}
            work = new_work(alice, tmp_path, s3sshd, "team/cloud", files)
            alice.git("push", "origin", "main", cwd=work)
            client = ceph.client()
            listed = client.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
            keys_in_bucket = " ".join(item["Key"] for item in listed.get("Contents", []))
            for payload in files.values():
                assert sha(payload) in keys_in_bucket
            assert not (data / "repos" / "team").exists()  # nothing went to the local store

            reader = ssh_git_env(tmp_path, s3sshd, "reader")
            clone = tmp_path / "clone"
            reader.git("clone", s3sshd.url("team/cloud"), str(clone))
            for name, payload in files.items():
                assert (clone / name).read_bytes() == payload, name

            alice.git("lfs", "lock", "a.bin", cwd=work)
            listing = reader.git("lfs", "locks", cwd=clone)
            assert "a.bin" in listing.stdout and "alice" in listing.stdout, listing.stdout
            assert not (data / "locks.sqlite3").exists()  # the locks live in PostgreSQL
            alice.git("lfs", "unlock", "a.bin", cwd=work)
            assert reader.git("lfs", "locks", cwd=clone).stdout.strip() == ""
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_git_hooks_see_the_pusher(sshd: Sshd, tmp_path: Path) -> None:
    # lfs-server's pre-receive hook (and any other) learns the pusher from REMOTE_USER.
    bare = sshd.make_bare("team/hooked")
    seen = tmp_path / "pusher"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\ncat >/dev/null\nprintf %s "$REMOTE_USER" > {seen}\n')
    hook.chmod(0o755)
    bob = ssh_git_env(tmp_path, sshd, "bob")
    work = new_work(bob, tmp_path, sshd, "team/hooked", {"b.bin": b"bob's bytes\n"})
    bob.git("push", "origin", "main", cwd=work)
    assert seen.read_text() == "bob"


def test_protocol_applies_the_servers_limits(tmp_path: Path) -> None:
    env = {"LFS_MAX_OBJECT_SIZE": "1000", "LFS_MAX_BATCH_OBJECTS": "2", "LFS_AUTO_CREATE": "0"}
    data = make_data_dir()
    try:
        with running_sshd(tmp_path / "sshd", data, {"alice": KEYS["alice"]}, env=env) as limited:
            small, big = b"s" * 1000, b"b" * 1001
            lines = [pkt(f"{sha(d)} {len(d)}") for d in (small, big)]
            batch = pkt("batch") + DELIM + b"".join(lines) + FLUSH
            three = pkt("batch") + DELIM + b"".join([*lines, pkt(f"{'1' * 64} 1")]) + FLUSH
            answer, packets = session(
                limited,
                "alice",
                "upload",
                batch,
                three,
                put(sha(small), 1000, small),
                repo="team/absent",
            )
            assert statuses(packets) == ["status 200", "status 413", "status 413", "status 404"]
            text = answer.stdout.decode()
            assert "accepts objects up to 1000 bytes" in text
            assert "at most 2 objects" in text
            assert "does not exist on this server (auto-creation is off)" in text
            cli_env = {**os.environ, **env}
            made = cli("repo", "create", "team/present", data=data, env=cli_env)
            assert made.returncode == 0, made.stderr
            _answer, packets = session(
                limited,
                "alice",
                "upload",
                put(sha(small), 1000, small),
                put(sha(big), 1001, big),
                repo="team/present",
            )
            assert statuses(packets) == ["status 200", "status 200", "status 413"]
            assert stored(data, "team/present", sha(small)).read_bytes() == small
            assert not stored(data, "team/present", sha(big)).exists()
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_protocol_lock_commands(sshd: Sshd) -> None:
    repo = "team/raw-locks"
    lock = pkt("lock") + pkt("path=art/a b.psd") + pkt("refname=refs/heads/main") + FLUSH
    answer, packets = session(sshd, "alice", "upload", lock, lock, repo=repo)
    assert statuses(packets) == ["status 200", "status 201", "status 409"]
    lock_id = next(p for p in packets if isinstance(p, bytes) and p.startswith(b"id="))
    lock_id = lock_id.decode().strip()[3:]
    assert b"path=art/a b.psd\n" in packets and b"ownername=alice\n" in packets
    assert b"already locked by alice" in answer.stdout

    listing = pkt("list-lock") + pkt("path=art/a b.psd") + FLUSH
    verify = pkt("list-locks") + FLUSH
    unlock = pkt(f"unlock {lock_id}") + FLUSH
    answer, packets = session(sshd, "bob", "upload", listing, verify, unlock, repo=repo)
    assert statuses(packets) == ["status 200", "status 200", "status 200", "status 403"]
    assert packets.count(f"lock {lock_id}\n".encode()) == 2
    assert packets.count(f"path {lock_id} art/a b.psd\n".encode()) == 2
    assert packets.count(f"owner {lock_id} theirs\n".encode()) == 2
    assert b"locked by alice; only they can unlock it" in answer.stdout

    # A reader may list but not lock; unknown ids are 404; the owner unlocks.
    answer, packets = session(sshd, "reader", "download", pkt("list-lock") + FLUSH, lock, repo=repo)
    assert statuses(packets) == ["status 200", "status 200", "status 403"]
    answer, packets = session(
        sshd,
        "alice",
        "upload",
        pkt("unlock 999999") + FLUSH,
        unlock,
        pkt("list-lock") + FLUSH,
        repo=repo,
    )
    assert statuses(packets) == ["status 200", "status 404", "status 200", "status 200"]
    assert f"lock {lock_id}\n".encode() not in packets
    assert LockDB(sshd.data / "locks.sqlite3").find(repo) == []


def test_authenticate_tokens_in_the_http_api(tmp_path: Path) -> None:
    """The HTTP side of git-lfs-authenticate's tokens, in-process (Flask's test client)."""
    from lfs_server.app import create_app
    from lfs_server.config import Config
    from lfs_server.ssh import issue_api_token
    from lfs_server.users import UserDB

    data = tmp_path / "data"
    users = UserDB(data / "users.json")
    users.add("alice", "pw", {"team/*": "write"})
    users.add("reader", "pw", {"*": "read"})
    users.save()
    app = create_app(Config(data_dir=data, body_mode="stream"))
    signer = app.extensions["lfs"].signer
    client = app.test_client()

    def batch(token: str, operation: str, repo: str = "team/x") -> int:
        body = {"operation": operation, "objects": [{"oid": "a" * 64, "size": 1}]}
        headers = {"Authorization": f"Bearer {token}"}
        answer = client.post(f"/{repo}.git/info/lfs/objects/batch", json=body, headers=headers)
        return answer.status_code

    soon = int(time.time()) + 60
    upload = issue_api_token(signer, "team/x", "upload", "alice", soon)
    download = issue_api_token(signer, "team/x", "download", "reader", soon)
    assert batch(upload, "upload") == 200
    assert batch(upload, "download") == 200  # an upload token reads too
    assert batch(download, "download") == 200
    assert batch(download, "upload") == 401  # a download token does not write
    assert batch(upload, "upload", "team/y") == 401  # bound to its repository
    assert batch("1.YQ.00", "download") == 401
    stale = issue_api_token(signer, "team/x", "upload", "alice", int(time.time()) - 1)
    answer = client.post(
        "/team/x.git/info/lfs/objects/batch",
        json={"operation": "upload", "objects": []},
        headers={"Authorization": f"Bearer {stale}"},
    )
    assert answer.status_code == 401 and "expired" in answer.get_json()["message"]
    # The user's grant now, not at the time the token was printed, decides.
    users.users["alice"].permissions = {"team/*": "read"}
    users.save()
    later = time.time() + 10
    os.utime(data / "users.json", (later, later))
    assert batch(upload, "upload") == 403
    # With anonymous reads on, a Bearer that is no SSH token still reads, as before.
    anonymous = create_app(Config(data_dir=data, body_mode="stream", anonymous_read=True))
    body = {"operation": "download", "objects": [{"oid": "a" * 64, "size": 1}]}
    answer = anonymous.test_client().post(
        "/team/x.git/info/lfs/objects/batch", json=body, headers={"Authorization": "Bearer x"}
    )
    assert answer.status_code == 200


# Hostile input, in-process: any bytes get a status, never a 500, never a partial object ---

_FUZZ_OBJECT = b"fuzzed object\n"
_WORDS = [
    "batch",
    "put-object",
    "get-object",
    "verify-object",
    "lock",
    "list-lock",
    "list-locks",
    "unlock",
    "version 1",
    "version 2",
    "quit",
    "frobnicate",
    "",
]


@st.composite
def _fuzz_request(draw: st.DrawFn) -> bytes:
    oid = draw(st.sampled_from([sha(_FUZZ_OBJECT), "0" * 64, "xyz", ""]))
    command = draw(st.sampled_from(_WORDS))
    if command.endswith("-object") or command == "unlock":
        command += " " + draw(st.sampled_from([oid, "1", "999", "-1", "\u00e9"]))
    args = draw(
        st.lists(
            st.sampled_from(
                [
                    f"size={len(_FUZZ_OBJECT)}",
                    "size=1",
                    "size=-3",
                    "size=99999999999999999999",
                    "path=a.bin",
                    "path=../x",
                    "path=",
                    "force=true",
                    "force=maybe",
                    "limit=0",
                    "limit=2",
                    "cursor=x",
                    "id=1",
                    "hash-algo=md5",
                    "noequals",
                ]
            ),
            max_size=4,
        )
    )
    out = pkt(command) + b"".join(pkt(a) for a in args)
    if draw(st.booleans()):
        out += DELIM
        body = draw(
            st.sampled_from(
                [
                    _FUZZ_OBJECT,
                    _FUZZ_OBJECT[:-1],
                    _FUZZ_OBJECT + b"!",
                    f"{oid} {len(_FUZZ_OBJECT)}\n".encode(),
                    b"",
                ]
            )
        )
        out += pkt(body) if body else b""
    return out + (FLUSH if draw(st.integers(0, 9)) else b"")


@given(
    requests_=st.lists(_fuzz_request(), max_size=6),
    tail=st.binary(max_size=12),
    operation=st.sampled_from(["upload", "download"]),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_protocol_fuzz_never_fails_badly(
    requests_: list[bytes], tail: bytes, operation: str
) -> None:
    import io
    import tempfile

    from lfs_server.config import Config
    from lfs_server.sshtransfer import serve

    with tempfile.TemporaryDirectory() as scratch:
        config = Config(data_dir=Path(scratch))
        stdin = io.BytesIO(pkt("version 1") + FLUSH + b"".join(requests_) + tail)
        stdout = io.BytesIO()
        status = serve(config, "alice", "write", "team/fuzz", operation, stdin, stdout)
        assert status in (0, 1)
        answers = statuses(parse_packets(stdout.getvalue()))
        assert answers and answers[0] == "status 200", answers
        assert not any(a.startswith("status 5") for a in answers), answers
        assert not (config.run_dir / "ssh-errors.log").exists()
        for path in config.repos_dir.rglob("*"):
            if path.is_file():  # the one valid object, or nothing
                assert path.name == sha(_FUZZ_OBJECT) and path.read_bytes() == _FUZZ_OBJECT
        leftovers = list((config.tmp_dir).glob("upload-*"))
        assert leftovers == [], leftovers
