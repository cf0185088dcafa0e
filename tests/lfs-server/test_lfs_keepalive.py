"""Connections are kept (issue 25, small objects): git-lfs's to nginx, nginx's to gunicorn.

A push of N small objects used to open one TCP connection per object (git-lfs closes a
verify answer unread, which makes its HTTP client drop the connection), and gunicorn's sync
workers closed nginx's connection after every request. Upload batch answers now name no
verify action (our PUT has verified the object), so a push makes one app request per object.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
from pathlib import Path

import pytest
from lfs_testlib import Server, cli, make_git_env, push_lfs_repo

pytestmark = pytest.mark.nginx


def test_a_git_lfs_push_reuses_its_connections(server: Server, tmp_path: Path) -> None:
    log = server.data / "run/nginx-access.log"
    start = log.stat().st_size
    files = {f"o{i:02d}.bin": os.urandom(1000 + i) for i in range(40)}
    g = make_git_env(tmp_path, server.url, "alice")
    push_lfs_repo(g, tmp_path, server.lfs("keepalive/push"), files)
    with open(log, "rb") as fh:
        fh.seek(start)
        lines = [line for line in fh.read().decode().splitlines() if "/keepalive/push" in line]
    puts = [line for line in lines if '"PUT ' in line and "status=200" in line]
    assert len(puts) == 40, lines
    connections = {m.group(1) for line in lines if (m := re.search(r" conn=(\d+)", line))}
    # git-lfs runs 8 transfers at once; one connection per object was 40 or more.
    assert 0 < len(connections) <= 12, (len(connections), len(lines))


def test_a_git_lfs_push_sends_no_verify_and_every_object_is_intact(
    server: Server, tmp_path: Path
) -> None:
    """Our PUT answers 200 only once the object is verified and stored, so upload batch
    answers name no verify action, and git-lfs (3.3.0) then sends no verify request."""
    log = server.data / "run/nginx-access.log"
    start = log.stat().st_size
    # Small ones go to the app inline, large ones through nginx's body file.
    files = {f"s{i:02d}.bin": os.urandom(3000 + i) for i in range(12)}
    files |= {f"l{i}.bin": os.urandom(300_000 + i) for i in range(3)}
    g = make_git_env(tmp_path, server.url, "alice")
    bare, _ = push_lfs_repo(g, tmp_path, server.lfs("noverify/push"), files)
    with open(log, "rb") as fh:
        fh.seek(start)
        lines = [line for line in fh.read().decode().splitlines() if "/noverify/push" in line]
    puts = [line for line in lines if '"PUT ' in line and "status=200" in line]
    assert len(puts) == len(files), lines
    assert not [line for line in lines if "/info/lfs/verify " in line], lines
    report = cli("fsck", "--repo", "noverify/push", data=server.data)
    assert report.returncode == 0, report.stdout + report.stderr
    assert f"checked {len(files)} objects, 0 bad" in report.stdout, report.stdout
    clone = tmp_path / "clone"
    g.git("clone", str(bare), str(clone))
    g.git("lfs", "fsck", cwd=clone)
    for name, data in files.items():
        assert (clone / name).read_bytes() == data, name


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over gunicorn's unix socket, as nginx talks to it."""

    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self.socket_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.socket_path)


def test_gunicorn_keeps_nginx_connection_open(server: Server) -> None:
    conn = _UnixConnection(server.data / "run/gunicorn.sock")
    try:
        first = None
        for _ in range(3):
            conn.request("GET", "/healthz")
            reply = conn.getresponse()
            reply.read()
            assert reply.status == 200 and not reply.will_close, reply.headers
            first = first or conn.sock
            # http.client reopens a connection the server closed: it must be the same one.
            assert conn.sock is first
    finally:
        conn.close()
