"""Real git + git-lfs against real nginx + gunicorn: push, fresh clone, pull, checksums."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from lfs_testlib import Server, SlowFirstPutRelay, make_git_env, push_lfs_repo, start_server

pytestmark = [pytest.mark.nginx, pytest.mark.gitlfs]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_push_clone_pull_roundtrip(server: Server, tmp_path: Path) -> None:
    g = make_git_env(tmp_path, server.url, "alice")
    files = {f"asset{i}.bin": os.urandom(50_000 + i * 7919) for i in range(4)}
    files["sub/big.bin"] = os.urandom(3 << 20)
    bare, _work = push_lfs_repo(g, tmp_path, server.lfs("team/game"), files)

    # Stored under the repo, verified, one per object.
    for data in files.values():
        oid = hashlib.sha256(data).hexdigest()
        stored = server.data / "repos/team/game.git/objects" / oid[:2] / oid[2:4] / oid
        assert stored.read_bytes() == data

    clone = tmp_path / "clone"
    g2 = make_git_env(tmp_path, server.url, "reader")
    g2.git("clone", str(bare), str(clone))
    for name, data in files.items():
        assert sha(clone / name) == hashlib.sha256(data).hexdigest(), name

    # git lfs pull into a clone made without smudging.
    lazy = tmp_path / "lazy"
    g2.git("clone", str(bare), str(lazy), env={"GIT_LFS_SKIP_SMUDGE": "1"})
    assert (lazy / "sub/big.bin").read_bytes().startswith(b"version https://git-lfs")
    g2.git("lfs", "pull", cwd=lazy)
    for name, data in files.items():
        assert (lazy / name).read_bytes() == data, name


def test_expired_action_token_makes_client_ask_again(tmp_path: Path) -> None:
    # Tokens live 6 s; git-lfs treats actions expiring within 5 s as stale, so it sends
    # this one, but the relay holds the upload for 7.5 s: the server sees an expired token,
    # answers 403, and the client must request a new batch and succeed.
    srv = start_server(extra_env={"LFS_TOKEN_TTL": "6"})
    relay = SlowFirstPutRelay(int(srv.url.rsplit(":", 1)[1]), delay=7.5)
    try:
        url = f"http://127.0.0.1:{relay.port}"
        g = make_git_env(tmp_path, url, "alice")
        data = os.urandom(100_000)
        push_lfs_repo(g, tmp_path, f"{url}/slow/net.git/info/lfs", {"a.bin": data})
        assert relay.delayed >= 2
        oid = hashlib.sha256(data).hexdigest()
        assert (
            srv.data / "repos/slow/net.git/objects" / oid[:2] / oid[2:4] / oid
        ).read_bytes() == data
        log = (srv.data / "serve.log").read_text()
        # nginx's log: the stale token is refused by the upload check, before any body.
        access = (srv.data / "run/nginx-access.log").read_text()
        upload_lines = [line for line in access.splitlines() if f"/upload/{oid}/" in line]
        assert "status=403" in upload_lines[0] and "status=200" in upload_lines[-1], upload_lines
        assert log.count("/objects/batch") >= 2
    finally:
        relay.close()
        assert srv.stop() == 0
