"""lfs-server's harness, shared by its tests and its benchmarks: a real `lfs-server serve`
(nginx + gunicorn) on a free loopback port, git + git-lfs environments with their own HOME,
and an OpenSSH sshd whose keys run `lfs-server ssh` as their forced command.

A missing program raises Missing naming its Debian package; tests/lfs-server/lfs_testlib.py
checks the same NEEDS first, so that a test skips (or, on CI, fails) instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import requests
from common import free_port, stop_process

# What each starter needs: (command, the Debian package that provides it).
SERVER_NEEDS = (("nginx", "nginx"),)
GIT_NEEDS = (("git", "git"), ("git-lfs", "git-lfs"))
SSHD_NEEDS = (("sshd", "openssh-server"), ("ssh", "openssh-client"), *GIT_NEEDS)

USERS = {
    "alice": ("alice-pw", ["*=write"]),
    "bob": ("bob-pw", ["*=write"]),
    "reader": ("reader-pw", ["*=read"]),
    "boss": ("boss-pw", ["*=admin"]),
    "teamonly": ("team-pw", ["team/*=write"]),
}

# Key name -> the options of `lfs-server ssh` that key's forced command runs with.
KEYS: dict[str, list[str]] = {
    "alice": ["--user", "alice"],
    "bob": ["--user", "bob"],
    "reader": ["--user", "reader"],
    "boss": ["--user", "boss"],
    "teamonly": ["--user", "teamonly"],
    "mallory": ["--user", "mallory"],  # a key whose user lfs-server does not know
}


class Missing(RuntimeError):
    """A program the harness needs is not installed; the message names its package."""


def need(needs: Sequence[tuple[str, str]]) -> list[str]:
    """The paths of *needs*' commands ((command, Debian package) pairs); raises Missing
    naming the first one that is not installed."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"])  # nginx, sshd
    found = []
    for command, package in needs:
        where = shutil.which(command, path=path)
        if where is None:
            raise Missing(f"{command} is not installed (apt-get install {package})")
        found.append(where)
    return found


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


def add_users(data: Path, env: dict[str, str] | None) -> None:
    """Add USERS with their passwords and grants to the data dir *data*."""
    for name, (password, grants) in USERS.items():
        args = ["user", "add", name, "--password-stdin"]
        for grant in grants:
            args += ["--grant", grant]
        result = cli(*args, data=data, stdin=password + "\n", env=env)
        assert result.returncode == 0, result.stderr


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
        return stop_process(self.proc)


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
        need(SERVER_NEEDS)
    data = data or make_data_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    # Tests share servers and all come from 127.0.0.1: one test's wrong passwords must not
    # get another's logins a 429. The limit itself is tested on servers of its own.
    env["LFS_LOGIN_FAILURES"] = "0"
    env.update(extra_env or {})
    if users:
        add_users(data, env)
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
    """git + git-lfs with a private HOME (see make_git_env)."""

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


def make_git_env(
    root: Path, server_url: str | None, user: str, extra_env: dict[str, str] | None = None
) -> GitEnv:
    """git + git-lfs with a private HOME (ROOT/home-USER) committing as *user*.

    With *server_url*, a credential helper logs in to it as *user* (USERS' password);
    *extra_env* adds variables, e.g. the GIT_SSH_COMMAND of ssh_git_env.
    """
    need(GIT_NEEDS)
    home = root / f"home-{user}"
    home.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LFS_SKIP_PUSH_LOCKS_VERIFY": "0",
        **(extra_env or {}),
    }
    g = GitEnv(home, env)
    g.git("lfs", "install")
    config = [
        ("user.name", user),
        ("user.email", f"{user}@example.com"),
        ("init.defaultBranch", "main"),
        ("lfs.locksverify", "true"),
        ("advice.detachedHead", "false"),
    ]
    if server_url is not None:
        creds = home / ".git-credentials"
        host = server_url.split("://", 1)[1]
        creds.write_text(f"http://{user}:{USERS[user][0]}@{host}\n")
        creds.chmod(0o600)
        config.append(("credential.helper", f"store --file={creds}"))
    for key, value in config:
        g.git("config", "--global", key, value)
    return g


@dataclasses.dataclass
class Sshd:
    """sshd on 127.0.0.1:port; `data` is lfs-server's data dir, `git_root` the bare repos."""

    root: Path
    port: int
    data: Path
    git_root: Path
    proc: subprocess.Popen[bytes]
    # Every key refuses git-lfs-transfer: git-lfs uses git-lfs-authenticate + HTTP.
    fallback: bool = False

    def key(self, name: str) -> Path:
        return self.root / f"key-{name}"

    def ssh_command(self, key: str) -> str:
        """What GIT_SSH_COMMAND holds for a client with *key*."""
        return shlex.join(
            [
                "ssh",
                "-i",
                str(self.key(key)),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                f"UserKnownHostsFile={self.root / 'known_hosts'}",
                "-o",
                "BatchMode=yes",
                "-o",
                "LogLevel=ERROR",
            ]
        )

    def url(self, repo: str) -> str:
        return f"ssh://{getpass.getuser()}@127.0.0.1:{self.port}/{repo}.git"

    def ssh(self, key: str, command: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """Run *command* over SSH with *key* (what git and git-lfs do)."""
        return subprocess.run(
            [
                *shlex.split(self.ssh_command(key)),
                "-p",
                str(self.port),
                f"{getpass.getuser()}@127.0.0.1",
                command,
            ],
            input=stdin,
            capture_output=True,
            timeout=120,
            check=False,
        )

    def make_bare(self, repo: str) -> Path:
        bare = self.git_root / f"{repo}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
        return bare


def ssh_git_env(root: Path, sshd: Sshd, key: str) -> GitEnv:
    """make_git_env whose ssh uses *key* of *sshd* (and no HTTP credentials)."""
    return make_git_env(root, None, key, {"GIT_SSH_COMMAND": sshd.ssh_command(key)})


def _forced_command(options: list[str], data: Path, git_root: Path, env: dict[str, str]) -> str:
    words = [str(Path(sys.executable).parent / "lfs-server"), "ssh", *options]
    words += ["--data", str(data), "--git-root", str(git_root)]
    prefix = ["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []
    return shlex.join([*prefix, *words])


def write_authorized_keys(
    sshd_root: Path,
    data: Path,
    git_root: Path,
    keys: dict[str, list[str]],
    env: dict[str, str] | None = None,
) -> None:
    """authorized_keys: each key runs `lfs-server ssh` with its options, and nothing else."""
    lines = []
    for name, options in keys.items():
        public = (sshd_root / f"key-{name}.pub").read_text().strip()
        command = _forced_command(options, data, git_root, env or {})
        escaped = command.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'command="{escaped}",no-port-forwarding,no-pty,no-agent-forwarding {public}')
    path = sshd_root / "authorized_keys"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


@contextlib.contextmanager
def running_sshd(
    root: Path,
    data: Path,
    keys: dict[str, list[str]] | None = None,
    env: dict[str, str] | None = None,
    users: bool = True,
) -> Iterator[Sshd]:
    """Start sshd (own host key, own authorized_keys) serving lfs-server's data dir *data*.

    *keys* maps key names to `lfs-server ssh` options; *env* is set for every forced command
    (and for adding the test users), e.g. an S3 store's and PostgreSQL's settings.
    """
    sshd_bin = need(SSHD_NEEDS)[0]
    keys = KEYS if keys is None else keys
    root.mkdir(parents=True, exist_ok=True)
    git_root = root / "git"
    git_root.mkdir(exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "host_ed25519")],
        check=True,
    )
    for name in keys:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / f"key-{name}")],
            check=True,
        )
    if users:
        add_users(data, {**os.environ, **(env or {})})
    write_authorized_keys(root, data, git_root, keys, env)
    port = free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_ed25519'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        f"PidFile {root / 'sshd.pid'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        "LogLevel ERROR\nMaxStartups 100:30:200\nMaxSessions 50\n"
    )
    with contextlib.suppress(PermissionError):  # sshd needs it; tools/test runs as root
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    log = open(root / "sshd.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    fallback = all("--no-transfer" in options for options in keys.values())
    server = Sshd(root, port, data, git_root, proc, fallback)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"sshd exited: {(root / 'sshd.log').read_text()}")
            probe = server.ssh("alice" if "alice" in keys else next(iter(keys)), "true")
            if b"Connection refused" not in probe.stderr:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"sshd did not start: {probe.stderr!r}")
            time.sleep(0.1)
        yield server
    finally:
        stop_process(proc, timeout=10)
        log.close()
