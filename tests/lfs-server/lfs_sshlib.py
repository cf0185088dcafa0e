"""A real OpenSSH server on a loopback port whose keys run `lfs-server ssh` as their forced
command, and git environments that reach it over `ssh://` remotes."""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from components import require_command
from lfs_testlib import USERS, GitEnv, cli
from support import free_port

# Key name -> the options of `lfs-server ssh` that key's forced command runs with.
KEYS: dict[str, list[str]] = {
    "alice": ["--user", "alice"],
    "bob": ["--user", "bob"],
    "reader": ["--user", "reader"],
    "boss": ["--user", "boss"],
    "teamonly": ["--user", "teamonly"],
    "mallory": ["--user", "mallory"],  # a key whose user lfs-server does not know
}


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
    sshd_bin = require_command("sshd", "openssh-server")
    require_command("ssh", "openssh-client")
    require_command("git")
    require_command("git-lfs", "git-lfs")
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
        for name, (password, grants) in USERS.items():
            args = ["user", "add", name, "--password-stdin"]
            for grant in grants:
                args += ["--grant", grant]
            result = cli(*args, data=data, stdin=password + "\n", env={**os.environ, **(env or {})})
            assert result.returncode == 0, result.stderr
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
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def ssh_git_env(root: Path, sshd: Sshd, key: str) -> GitEnv:
    """git + git-lfs with a private HOME whose ssh uses *key* (and no HTTP credentials)."""
    home = root / f"home-{key}"
    home.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": sshd.ssh_command(key),
    }
    g = GitEnv(home, env)
    g.git("lfs", "install")
    for name, value in (
        ("user.name", key),
        ("user.email", f"{key}@example.com"),
        ("init.defaultBranch", "main"),
        ("lfs.locksverify", "true"),
        ("advice.detachedHead", "false"),
    ):
        g.git("config", "--global", name, value)
    return g
