#!/usr/bin/env python3
"""git-lfs push and fresh clone of the same objects over HTTP and over SSH remotes.

    tools/bench/lfs_ssh.py [--files 16] [--file-mib 2] [--big-mib 32] [--repeats 3]

Starts one `lfs-server serve` (nginx + gunicorn) and one OpenSSH sshd on loopback whose
keys run `lfs-server ssh` (tools/lfs_harness.py, as the tests do), both on one data
directory. Then, for each repeat and in turn, pushes a fresh repository of FILES x
FILE_MIB MiB + 1 x BIG_MIB MiB of random data and clones it fresh (smudging every
object) through:

- http:         git over a local path, LFS over HTTP (lfs.url, Basic credentials) - the
                baseline;
- ssh-transfer: `ssh://` remote, git-lfs 3.x's pure SSH protocol (git-lfs-transfer);
- ssh-transfer-1: the same with `lfs.concurrenttransfers=1`: git-lfs 3.3.0 opens one SSH
                connection per transfer worker (8 by default), one after another;
- ssh-auth:     `ssh://` remote whose key refuses git-lfs-transfer, so git-lfs falls
                back to git-lfs-authenticate + the HTTP API.

Prints each mode's median seconds and its ratio to http, and MiB/s. Needs nginx, sshd,
git and git-lfs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from lfs_harness import (  # noqa: E402 (tools/lfs_harness.py, after the path set-up)
    GitEnv,
    Sshd,
    make_git_env,
    running_sshd,
    ssh_git_env,
    start_server,
)

MODES = ("http", "ssh-transfer", "ssh-transfer-1", "ssh-auth")


def _make_work(g: GitEnv, root: Path, files: dict[str, bytes], remote: str, lfs_url: str) -> Path:
    work = root / "work"
    g.git("init", str(work))
    g.git("lfs", "track", "*.bin", cwd=work)
    if lfs_url:
        (work / ".lfsconfig").write_text(f"[lfs]\n\turl = {lfs_url}\n")
    for name, data in files.items():
        (work / name).write_bytes(data)
    g.git("add", ".", cwd=work)
    g.git("commit", "-q", "-m", "assets", cwd=work)
    g.git("remote", "add", "origin", remote, cwd=work)
    return work


def _connection_costs(sshd: Sshd, runs: int) -> dict[str, float]:
    """Median seconds of one SSH connection: sshd running `true` (a key added for this),
    and `lfs-server ssh` opening a git-lfs-transfer session (version, quit)."""
    key = sshd.root / "key-plain"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with open(sshd.root / "authorized_keys", "a") as keys:
        keys.write(f'command="true" {key.with_suffix(".pub").read_text().strip()}\n')
    session = b"000eversion 1\n0000" + b"0009quit\n0000"
    costs: dict[str, list[float]] = {"sshd + true": [], "lfs-server ssh git-lfs-transfer": []}
    for _ in range(runs):
        for what, name, command, stdin in (
            ("sshd + true", "plain", "true", b""),
            (
                "lfs-server ssh git-lfs-transfer",
                "alice",
                "git-lfs-transfer /p.git download",
                session,
            ),
        ):
            start = time.perf_counter()
            done = sshd.ssh(name, command, stdin)
            costs[what].append(time.perf_counter() - start)
            assert done.returncode == 0, done.stderr
    return {what: statistics.median(times) for what, times in costs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--file-mib", type=float, default=2)
    parser.add_argument("--big-mib", type=float, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    files = {f"f{i:03d}.bin": os.urandom(int(args.file_mib * (1 << 20))) for i in range(args.files)}
    files["big.bin"] = os.urandom(int(args.big_mib * (1 << 20)))
    total_mib = sum(len(d) for d in files.values()) / (1 << 20)
    scratch = Path(tempfile.mkdtemp(prefix="lfs-ssh-bench-"))
    server = start_server()
    times: dict[str, dict[str, list[float]]] = {m: {"push": [], "clone": []} for m in MODES}
    try:
        keys = {
            "alice": ["--user", "alice"],
            "alice-auth": ["--user", "alice", "--no-transfer", "--url", server.url],
        }
        with running_sshd(scratch / "sshd", server.data, keys, users=False) as sshd:
            envs = {
                "http": make_git_env(scratch / "home-http", server.url, "alice"),
                "ssh-transfer": ssh_git_env(scratch / "home-ssh-transfer", sshd, "alice"),
                "ssh-transfer-1": ssh_git_env(scratch / "home-ssh-transfer-1", sshd, "alice"),
                "ssh-auth": ssh_git_env(scratch / "home-ssh-auth", sshd, "alice-auth"),
            }
            envs["ssh-transfer-1"].git("config", "--global", "lfs.concurrenttransfers", "1")
            connection = _connection_costs(sshd, args.repeats * 3)
            for repeat in range(args.repeats):
                for mode in MODES:
                    g = envs[mode]
                    run_dir = scratch / f"run-{mode}-{repeat}"
                    run_dir.mkdir()
                    repo = f"bench/{mode}/r{repeat}"
                    if mode == "http":
                        bare = run_dir / "remote.git"
                        g.git("init", "-q", "--bare", str(bare))
                        remote, lfs_url = str(bare), f"{server.url}/{repo}.git/info/lfs"
                    else:
                        sshd.make_bare(repo)
                        remote, lfs_url = sshd.url(repo), ""
                    work = _make_work(g, run_dir, files, remote, lfs_url)
                    start = time.perf_counter()
                    g.git("push", "-q", "origin", "main", cwd=work)
                    times[mode]["push"].append(time.perf_counter() - start)
                    start = time.perf_counter()
                    g.git("clone", "-q", remote, str(run_dir / "clone"))
                    times[mode]["clone"].append(time.perf_counter() - start)
                    for name, data in files.items():
                        assert (run_dir / "clone" / name).read_bytes() == data, (mode, name)
                    shutil.rmtree(run_dir)
                    print(
                        f"repeat {repeat + 1} {mode:14s} push {times[mode]['push'][-1]:6.2f} s"
                        f"  clone {times[mode]['clone'][-1]:6.2f} s",
                        flush=True,
                    )
    finally:
        server.stop()
        shutil.rmtree(server.data, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)

    print("\none SSH connection (median of runs): ", end="")
    print(", ".join(f"{what} {secs:.3f} s" for what, secs in connection.items()))
    print(
        f"{len(files)} objects, {total_mib:.0f} MiB; median of {args.repeats}"
        f" (ratio to http; MiB/s)"
    )
    for what in ("push", "clone"):
        base = statistics.median(times["http"][what])
        for mode in MODES:
            med = statistics.median(times[mode][what])
            rate = total_mib / med
            print(f"{what:5s} {mode:14s} {med:6.2f} s  x{med / base:4.2f}  {rate:6.1f} MiB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
