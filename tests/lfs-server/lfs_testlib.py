"""Test helpers: tools/lfs_harness.py's server, git environments and sshd (shared with
the benchmarks), started so that a missing nginx, git, git-lfs or OpenSSH skips the test
(fails it on CI); LFS API clients and assertions."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lfs_harness
import requests
from components import require_command
from lfs_harness import (  # noqa: F401 (the tests import them from here)
    KEYS,
    USERS,
    GitEnv,
    Server,
    Sshd,
    cli,
    make_data_dir,
    ssh_git_env,
)
from support import free_port  # noqa: F401 (one copy for every package's tests, re-exported)

LFS_MEDIA = "application/vnd.git-lfs+json"


def _require(needs: tuple[tuple[str, str], ...]) -> None:
    for command, package in needs:
        require_command(command, package)


def start_server(*args: Any, **options: Any) -> Server:
    """lfs_harness.start_server (same arguments), once nginx is there unless *no_nginx*."""
    if not options.get("no_nginx"):
        _require(lfs_harness.SERVER_NEEDS)
    return lfs_harness.start_server(*args, **options)


class InProcessSession:
    """The requests calls Api makes, answered by Flask's test client (no sockets): each
    answer is a real requests.Response, so the same assertions read it."""

    def __init__(self, client: Any, root: str) -> None:
        self.client = client
        self.root = root

    def request(
        self,
        method: str,
        url: str,
        *,
        data: bytes | None = None,
        json: object = None,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float | None = None,
    ) -> requests.Response:
        assert url.startswith(self.root + "/"), url
        sent = dict(headers or {})
        if auth:
            sent["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        kw: dict[str, Any] = {"data": data} if json is None else {"json": json}
        answer = self.client.open(url[len(self.root) :], method=method, headers=sent, **kw)
        response = requests.Response()
        response.status_code = answer.status_code
        response.headers = requests.structures.CaseInsensitiveDict(answer.headers)
        response._content = answer.get_data()
        response.encoding = "utf-8"
        response.url = url
        return response

    def get(self, url: str, **kw: Any) -> requests.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> requests.Response:
        return self.request("POST", url, **kw)

    def put(self, url: str, **kw: Any) -> requests.Response:
        return self.request("PUT", url, **kw)


@dataclasses.dataclass
class InProcess:
    """The app of a data dir in this process (stream mode: Flask reads and sends bodies);
    what Server offers the API tests (url, data, lfs) plus the session that reaches it."""

    url: str
    data: Path
    session: InProcessSession

    def lfs(self, repo: str) -> str:
        return f"{self.url}/{repo}.git/info/lfs"


_USERS_FILE: list[str] = []


def in_process(data: Path, extra_env: dict[str, str] | None = None) -> InProcess:
    """The app on *data* with USERS and *extra_env*'s LFS_* settings, as start_server
    configures the real server (no login limit: tests share it), but no nginx."""
    from lfs_server.app import create_app
    from lfs_server.config import Config
    from lfs_server.users import load_users

    env = {"LFS_DATA_DIR": str(data), "LFS_LOGIN_FAILURES": "0", **(extra_env or {})}
    config = Config.from_env(env, body_mode="stream")
    if _USERS_FILE:  # the same users as the first app: their scrypt hashes are paid once
        config.users_path.write_text(_USERS_FILE[0])
    else:
        users = load_users(config)
        for name, (password, grants) in USERS.items():
            users.add(name, password, {k: v for k, _, v in (g.partition("=") for g in grants)})
        users.save()
        _USERS_FILE.append(config.users_path.read_text())
    app = create_app(config)
    app.config["TESTING"] = True
    url = "http://localhost"
    return InProcess(url, data, InProcessSession(app.test_client(), url))


def make_git_env(
    root: Path, server_url: str | None, user: str, extra_env: dict[str, str] | None = None
) -> GitEnv:
    """lfs_harness.make_git_env, once git and git-lfs are there."""
    _require(lfs_harness.GIT_NEEDS)
    return lfs_harness.make_git_env(root, server_url, user, extra_env)


def running_sshd(*args: Any, **options: Any) -> contextlib.AbstractContextManager[Sshd]:
    """lfs_harness.running_sshd (same arguments), once OpenSSH, git and git-lfs are there."""
    _require(lfs_harness.SSHD_NEEDS)
    return lfs_harness.running_sshd(*args, **options)


def push_lfs_repo(
    g: GitEnv, root: Path, lfs_url: str, files: dict[str, bytes]
) -> tuple[Path, Path]:
    """Create a bare remote and a work tree tracking *.bin in LFS at *lfs_url*, commit
    *files* and push; return (bare, work)."""
    bare, work = root / "remote.git", root / "work"
    g.git("init", "--bare", str(bare))
    g.git("init", str(work))
    g.git("lfs", "track", "*.bin", cwd=work)
    (work / ".lfsconfig").write_text(f"[lfs]\n\turl = {lfs_url}\n")
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "assets", cwd=work)
    g.git("remote", "add", "origin", str(bare), cwd=work)
    g.git("push", "origin", "main", cwd=work)
    return bare, work


def basic(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{USERS[user][0]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def oid_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Api:
    """Small client for the LFS HTTP API of one server."""

    def __init__(self, server: Server | InProcess) -> None:
        self.server = server
        self.session: requests.Session | InProcessSession = (
            server.session if isinstance(server, InProcess) else requests.Session()
        )

    def url(self, repo: str, rest: str) -> str:
        return f"{self.server.lfs(repo)}/{rest}"

    def batch(
        self,
        repo: str,
        body: Any,
        user: str | None = "alice",
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        sent = {"Accept": LFS_MEDIA, "Content-Type": LFS_MEDIA}
        if user:
            sent.update(basic(user))
        sent.update(headers or {})
        return self.session.post(
            self.url(repo, "objects/batch"), json=body, headers=sent, timeout=30
        )

    def upload(self, repo: str, data: bytes, user: str = "alice") -> dict:
        """Batch + PUT, as the git-lfs client does, then a verify (Basic credentials: the
        batch names no verify action, our PUT verified) as older clients send; returns the
        batch object."""
        oid = oid_of(data)
        r = self.batch(
            repo, {"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]}, user
        )
        assert r.status_code == 200, r.text
        obj = r.json()["objects"][0]
        actions = obj.get("actions", {})
        if "upload" in actions:
            up = actions["upload"]
            put = self.session.put(up["href"], data=data, headers=up["header"], timeout=30)
            assert put.status_code == 200, put.text
            assert "verify" not in actions, actions
            v = self.session.post(
                self.url(repo, "verify"),
                json={"oid": oid, "size": len(data)},
                headers={"Content-Type": LFS_MEDIA, **basic(user)},
                timeout=30,
            )
            assert v.status_code == 200, v.text
        return obj

    def download_action(self, repo: str, oid: str, size: int, user: str = "alice") -> dict:
        r = self.batch(
            repo, {"operation": "download", "objects": [{"oid": oid, "size": size}]}, user
        )
        assert r.status_code == 200, r.text
        return r.json()["objects"][0]["actions"]["download"]

    def upload_action(self, repo: str, oid: str, size: int, user: str = "alice") -> dict:
        r = self.batch(repo, {"operation": "upload", "objects": [{"oid": oid, "size": size}]}, user)
        assert r.status_code == 200, r.text
        return r.json()["objects"][0]["actions"]

    def put_one_bit_off(
        self, repo: str, data: bytes, byte: int, user: str = "alice"
    ) -> tuple[dict, requests.Response]:
        """Ask to upload *data*, then PUT it with one bit of *byte* flipped (the right size,
        the wrong SHA-256); return the upload actions and the PUT's response."""
        actions = self.upload_action(repo, oid_of(data), len(data), user)
        up = actions["upload"]
        wrong = bytearray(data)
        wrong[byte] ^= 1
        put = self.session.put(up["href"], data=bytes(wrong), headers=up["header"], timeout=30)
        return actions, put


def assert_lfs_error(response: requests.Response, status: int, fragment: str = "") -> dict:
    """The response is a JSON error with the git-lfs media type."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"].startswith(LFS_MEDIA), response.headers
    body = response.json()
    assert isinstance(body.get("message"), str) and body["message"], body
    assert "request_id" in body
    assert fragment in body["message"], (fragment, body["message"])
    return body


class SlowFirstPutRelay:
    """A TCP relay in front of the server that holds the first PUT for `delay` seconds.

    It models a slow network between the batch response and the upload, so the action
    token expires in flight; everything else passes straight through.
    """

    def __init__(self, target_port: int, delay: float) -> None:
        import threading

        self.target_port = target_port
        self.delay = delay
        self.delayed = 0
        self._lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                if from_client and chunk.startswith(b"PUT "):
                    with self._lock:
                        first = self.delayed == 0
                        self.delayed += 1
                    if first:
                        time.sleep(self.delay)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()
