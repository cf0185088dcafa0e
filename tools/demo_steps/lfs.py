"""Step 3: version the models through a real Git LFS server: over HTTP (lfs-server serve +
git lfs) and over an SSH remote (OpenSSH on loopback running `lfs-server ssh`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import lfs_harness
from common import free_port, serve, sh, tool

from .report import Settings, Summary


def git_lfs_roundtrip(settings: Settings, files: dict[str, Path], summary: Summary) -> None:
    work = settings.out / "lfs"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = work / "server-data"
    user, password = "demo", "demo-password-123"
    sh(
        [
            tool("lfs-server"),
            "user",
            "add",
            user,
            "--data",
            data,
            "--grant",
            "demo/*=admin",
            "--password-stdin",
        ],
        input=password + "\n",
    )
    home = work / "home"
    home.mkdir()
    env = dict(
        os.environ,
        HOME=str(home),
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME="Demo",
        GIT_AUTHOR_EMAIL="demo@example.com",
        GIT_COMMITTER_NAME="Demo",
        GIT_COMMITTER_EMAIL="demo@example.com",
    )
    sh(["git", "lfs", "install", "--skip-repo"], env=env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve_cmd = [tool("lfs-server"), "serve", "--data", data, "--listen", f"127.0.0.1:{port}"]
    with serve(serve_cmd, f"{url}/healthz", work / "server.log"):
        (home / ".git-credentials").write_text(f"http://{user}:{password}@127.0.0.1:{port}\n")
        sh(["git", "config", "--global", "credential.helper", "store"], env=env)
        remote = work / "remote.git"
        sh(["git", "init", "-q", "--bare", "-b", "main", remote], env=env)
        repo = work / "repo"
        sh(["git", "init", "-q", "-b", "main", repo], env=env)
        lfs_url = f"{url}/demo/models.git/info/lfs"
        sh(["git", "-C", repo, "config", "-f", ".lfsconfig", "lfs.url", lfs_url], env=env)
        sh(["git", "-C", repo, "lfs", "track", "*.onnx"], env=env)
        digests = {}
        for path in files.values():
            shutil.copy(path, repo / path.name)
            digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        sh(["git", "-C", repo, "add", "."], env=env)
        sh(["git", "-C", repo, "commit", "-qm", "models"], env=env)
        sh(["git", "-C", repo, "remote", "add", "origin", remote], env=env)
        started = time.monotonic()
        sh(["git", "-C", repo, "push", "-q", "origin", "main"], env=env)
        push_s = time.monotonic() - started
        clone = work / "clone"
        started = time.monotonic()
        sh(["git", "clone", "-q", remote, clone], env=env)
        clone_s = time.monotonic() - started
        for name, digest in digests.items():
            got = hashlib.sha256((clone / name).read_bytes()).hexdigest()
            if got != digest:
                raise RuntimeError(f"{name}: cloned bytes differ from pushed ones")
        name = next(iter(digests))
        sh(["git", "-C", clone, "lfs", "lock", name], env=env)
        locks = sh(["git", "-C", clone, "lfs", "locks"], env=env)
        if name not in locks:
            raise RuntimeError(f"lock on {name} not listed: {locks}")
        sh(["git", "-C", clone, "lfs", "unlock", name], env=env)
        left = sh(["git", "-C", clone, "lfs", "locks"], env=env)
        if name in left:
            raise RuntimeError(f"lock on {name} still listed after unlock")
        latency = request_latency(url)
    summary.facts["lfs"] = {
        "objects": len(digests),
        "bytes": sum(p.stat().st_size for p in files.values()),
        "push_s": round(push_s, 2),
        "clone_s": round(clone_s, 2),
        "checksums_equal": True,
        "lock_released": True,
        "ssh": ssh_roundtrip(work, data, user, files, digests, env),
        "latency": latency,
    }


def request_latency(url: str) -> dict[str, Any]:
    """The server's request-duration histogram from its /metrics (Prometheus text): how
    many of the requests above took at most each bucket's time, and each endpoint's mean."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    buckets: dict[float, float] = {}
    endpoints: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "lfs_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_bucket"):
                le = float(labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
            elif sample.name.endswith(("_count", "_sum")):
                key = f"{labels['method']} {labels['endpoint']} {labels['status']}"
                count_sum = endpoints.setdefault(key, [0.0, 0.0])
                count_sum[sample.name.endswith("_sum")] += sample.value
    return {
        "requests_at_most_ms": {
            ("inf" if le == float("inf") else f"{le * 1000:g}"): int(n)
            for le, n in sorted(buckets.items())
        },
        "mean_ms_by_endpoint": {
            key: round(1000 * total / count, 1)
            for key, (count, total) in sorted(endpoints.items())
            if count
        },
    }


def ssh_roundtrip(
    work: Path,
    data: Path,
    user: str,
    files: dict[str, Path],
    digests: dict[str, str],
    env: dict[str, str],
) -> dict[str, object]:
    """The same models over an `ssh://` remote: sshd on loopback whose key runs
    `lfs-server ssh --user USER` (git-lfs speaks git-lfs-transfer; no lfs.url, no HTTP)."""
    keys = {user: ["--user", user]}
    with lfs_harness.running_sshd(work / "sshd", data, keys, users=False) as sshd:
        env = dict(env, GIT_SSH_COMMAND=sshd.ssh_command(user))
        sh(["git", "init", "-q", "--bare", "-b", "main", sshd.git_root / "demo/models-ssh.git"])
        repo = work / "repo-ssh"
        sh(["git", "init", "-q", "-b", "main", repo], env=env)
        sh(["git", "-C", repo, "lfs", "track", "*.onnx"], env=env)
        for path in files.values():
            shutil.copy(path, repo / path.name)
        sh(["git", "-C", repo, "add", "."], env=env)
        sh(["git", "-C", repo, "commit", "-qm", "models"], env=env)
        sh(["git", "-C", repo, "remote", "add", "origin", sshd.url("demo/models-ssh")], env=env)
        started = time.monotonic()
        sh(["git", "-C", repo, "push", "-q", "origin", "main"], env=env)
        push_s = time.monotonic() - started
        clone = work / "clone-ssh"
        started = time.monotonic()
        sh(["git", "clone", "-q", sshd.url("demo/models-ssh"), clone], env=env)
        clone_s = time.monotonic() - started
        for name, digest in digests.items():
            if hashlib.sha256((clone / name).read_bytes()).hexdigest() != digest:
                raise RuntimeError(f"{name}: bytes cloned over SSH differ from pushed ones")
        name = next(iter(digests))
        sh(["git", "-C", clone, "lfs", "lock", name], env=env)
        if name not in sh(["git", "-C", clone, "lfs", "locks"], env=env):
            raise RuntimeError(f"lock on {name} over SSH not listed")
        sh(["git", "-C", clone, "lfs", "unlock", name], env=env)
        if name in sh(["git", "-C", clone, "lfs", "locks"], env=env):
            raise RuntimeError(f"lock on {name} over SSH still listed after unlock")
    return {
        "push_s": round(push_s, 2),
        "clone_s": round(clone_s, 2),
        "checksums_equal": True,
        "lock_released": True,
    }
