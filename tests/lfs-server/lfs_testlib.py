"""Test helpers: a real `lfs-server serve` (nginx + gunicorn) on a free loopback port, and
git / git-lfs environments with their own HOME and a credential helper."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from components import require_command
from support import free_port  # one copy for every package's tests (re-exported here)

USERS = {
    "alice": ("alice-pw", ["*=write"]),
    "bob": ("bob-pw", ["*=write"]),
    "reader": ("reader-pw", ["*=read"]),
    "boss": ("boss-pw", ["*=admin"]),
    "teamonly": ("team-pw", ["team/*=write"]),
}
LFS_MEDIA = "application/vnd.git-lfs+json"


def cli(
    *args: str, data: Path, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the console script as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "lfs_server.cli", *args, "--data", str(data)]
        if args and args[0] not in ("pre-receive", "hook")
        else [sys.executable, "-m", "lfs_server.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def make_data_dir() -> Path:
    """A data dir nginx workers (user nobody when we are root) can enter."""
    path = Path(tempfile.mkdtemp(prefix="lfs-test-", dir="/tmp"))
    path.chmod(0o755)
    return path


@dataclasses.dataclass
class Server:
    url: str
    data: Path
    proc: subprocess.Popen[str]
    env: dict[str, str]
    log: Path | None = None

    def log_text(self) -> str:
        return (self.log or self.data / "serve.log").read_text(errors="replace")

    def lfs(self, repo: str) -> str:
        return f"{self.url}/{repo}.git/info/lfs"

    def auth(self, user: str) -> tuple[str, str]:
        return (user, USERS[user][0])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(
    data: Path | None = None,
    *,
    extra_env: dict[str, str] | None = None,
    no_nginx: bool = False,
    users: bool = True,
    log: Path | None = None,
    port: int | None = None,
) -> Server:
    """Start `lfs-server serve` and wait for it to answer /healthz.

    *log* (default DATA/serve.log) receives serve's output; *port* reuses an address,
    as a restarted server does.
    """
    if not no_nginx:
        require_command("nginx")
    data = data or make_data_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    # Tests share servers and all come from 127.0.0.1: one test's wrong passwords must not
    # get another's logins a 429. The limit itself is tested on servers of its own.
    env["LFS_LOGIN_FAILURES"] = "0"
    env.update(extra_env or {})
    if users:
        for name, (password, grants) in USERS.items():
            args = ["user", "add", name, "--password-stdin"]
            for grant in grants:
                args += ["--grant", grant]
            result = cli(*args, data=data, stdin=password + "\n", env=env)
            assert result.returncode == 0, result.stderr
    port = port or free_port()
    # Configured through LFS_* variables, as the Dockerfile does, via the console script.
    env.update({"LFS_DATA_DIR": str(data), "LFS_LISTEN": f"127.0.0.1:{port}", "LFS_WORKERS": "2"})
    cmd = [str(Path(sys.executable).parent / "lfs-server"), "serve"]
    if no_nginx:
        cmd.append("--no-nginx")
    log_path = log or data / "serve.log"
    log_file = open(log_path, "a")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    log_file.close()
    server = Server(f"http://127.0.0.1:{port}", data, proc, env, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"lfs-server exited with {proc.returncode}:\n{server.log_text()}")
        try:
            if requests.get(f"{server.url}/healthz", timeout=10).status_code == 200:
                return server
        except (requests.ConnectionError, requests.Timeout):
            pass  # workers still starting (an S3 store's client takes a moment to build)
        time.sleep(0.1)
    server.stop()
    raise AssertionError(f"lfs-server did not start:\n{server.log_text()}")


@dataclasses.dataclass
class GitEnv:
    """git + git-lfs with a private HOME whose credential helper logs in as `user`."""

    home: Path
    env: dict[str, str]

    def git(
        self,
        *args: str,
        cwd: Path | None = None,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"git {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result


def make_git_env(root: Path, server_url: str, user: str) -> GitEnv:
    require_command("git")
    require_command("git-lfs", "git-lfs")
    home = root / f"home-{user}"
    home.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LFS_SKIP_PUSH_LOCKS_VERIFY": "0",
    }
    g = GitEnv(home, env)
    g.git("lfs", "install")
    creds = home / ".git-credentials"
    host = server_url.split("://", 1)[1]
    creds.write_text(f"http://{user}:{USERS[user][0]}@{host}\n")
    creds.chmod(0o600)
    for key, value in (
        ("user.name", user),
        ("user.email", f"{user}@example.com"),
        ("credential.helper", f"store --file={creds}"),
        ("init.defaultBranch", "main"),
        ("lfs.locksverify", "true"),
        ("advice.detachedHead", "false"),
    ):
        g.git("config", "--global", key, value)
    return g


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

    def __init__(self, server: Server) -> None:
        self.server = server
        self.session = requests.Session()

    def url(self, repo: str, rest: str) -> str:
        return f"{self.server.lfs(repo)}/{rest}"

    def batch(
        self, repo: str, body: object, user: str | None = "alice", **kw: object
    ) -> requests.Response:
        headers = {"Accept": LFS_MEDIA, "Content-Type": LFS_MEDIA}
        if user:
            headers.update(basic(user))
        headers.update(kw.pop("headers", {}) or {})  # type: ignore[arg-type]
        return self.session.post(
            self.url(repo, "objects/batch"), json=body, headers=headers, timeout=30
        )

    def upload(self, repo: str, data: bytes, user: str = "alice") -> dict:
        """Batch + PUT + verify, as the git-lfs client does; returns the batch object."""
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
            ver = actions["verify"]
            v = self.session.post(
                ver["href"], json={"oid": oid, "size": len(data)}, headers=ver["header"], timeout=30
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
