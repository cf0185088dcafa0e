#!/usr/bin/env python3
"""Benchmark lfs-server against plain nginx, measured in the same run (ratios, medians).

    tools/bench/lfs_server.py [--size-mib 300] [--repeats 5] [--no-git] [--json FILE]

1. GET of one object through lfs-server (token check in Flask, then nginx sendfile via
   X-Accel-Redirect) vs the same file from a plain nginx static location.
2. PUT of the object through lfs-server (nginx writes the body, Flask checks size and
   SHA-256, fsyncs, renames) vs nginx writing the body (WebDAV PUT) plus hashlib over it.
3. git-lfs push and a fresh clone of 20 x 10 MiB + 1 x <size> MiB through lfs-server.

Goals (issue 4): GET >= 0.9x plain nginx; PUT >= 0.7x the nginx-write-plus-hash limit.
Each pair is timed by curl (`time_total`), alternating the two sides in one run so that the
machine's other load hits both alike; the ratio is of medians (best-of also printed).
`--json FILE` writes every timing as a pyperf benchmark suite, so two runs (before and
after a change) compare with `python -m pyperf compare_to before.json after.json`, and
`python -m pyperf stats FILE` describes one.
Needs nginx, curl, git and git-lfs; run as a user that can start nginx.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyperf
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import free_port, wait_http  # tools/common.py

MIB = 1 << 20
SCRIPT = str(Path(sys.executable).parent / "lfs-server")
USER, PASSWORD = "bench", "bench-pw"


def write_random(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        left = size
        while left:
            chunk = os.urandom(min(left, 8 * MIB))
            digest.update(chunk)
            fh.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def curl(*args: str) -> float:
    """Run curl; return its time_total (seconds). Fails on any HTTP error."""
    out = subprocess.run(
        ["curl", "-sS", "--fail", "-o", "/dev/null", "-H", "Expect:", "-w", "%{time_total}", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(4 * MIB)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            digest.update(view[:n])
    return digest.hexdigest()


PLAIN_NGINX = """
worker_processes auto;
events {{ worker_connections 256; }}
http {{
    sendfile on; tcp_nopush on;
    access_log off;
    client_body_temp_path {work}/dav-tmp;
    proxy_temp_path {work}/nginx-tmp; fastcgi_temp_path {work}/nginx-tmp;
    uwsgi_temp_path {work}/nginx-tmp; scgi_temp_path {work}/nginx-tmp;
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 0;
        location /static/ {{ alias {work}/static/; }}
        location /put/ {{ alias {work}/dav/; dav_methods PUT; create_full_put_path on; }}
    }}
}}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-git", action="store_true", help="skip the git-lfs push/clone part")
    parser.add_argument(
        "--json", metavar="FILE", help="also write the timings to FILE as a pyperf suite"
    )
    args = parser.parse_args(argv)
    for tool in ("nginx", "curl", "git", "git-lfs"):
        if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin"):
            raise SystemExit(f"{tool} is needed for this benchmark")
    nginx = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")
    assert nginx
    size = args.size_mib * MIB
    work = Path(tempfile.mkdtemp(prefix="lfs-bench-", dir="/tmp"))
    work.chmod(0o755)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        return run(args, nginx, size, work, procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if proc.args[0] == SCRIPT else signal.SIGQUIT)
                proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def run(
    args: argparse.Namespace,
    nginx: str,
    size: int,
    work: Path,
    procs: list[subprocess.Popen[bytes]],
) -> int:
    data = work / "data"
    env = {**os.environ, "LFS_DATA_DIR": str(data)}
    subprocess.run(
        [SCRIPT, "user", "add", USER, "--grant", "*=write", "--password-stdin"],
        input=PASSWORD + "\n",
        text=True,
        env=env,
        check=True,
        capture_output=True,
    )
    lfs_port, plain_port = free_port(), free_port()
    env["LFS_LISTEN"] = f"127.0.0.1:{lfs_port}"
    env["LFS_WORKERS"] = "2"
    lfs_log = open(work / "serve.log", "wb")  # noqa: SIM115
    procs.append(
        subprocess.Popen([SCRIPT, "serve"], env=env, stdout=lfs_log, stderr=subprocess.STDOUT)
    )
    lfs = f"http://127.0.0.1:{lfs_port}"
    wait_http(lfs + "/healthz", procs[-1], 60, lambda: (work / "serve.log").read_text()[-2000:])

    for sub in ("static", "dav", "dav-tmp", "nginx-tmp"):
        (work / sub).mkdir()
        (work / sub).chmod(0o777)
    (work / "static/ready").write_text("ok\n")
    conf = work / "plain.conf"
    conf.write_text(PLAIN_NGINX.format(work=work, port=plain_port))
    procs.append(
        subprocess.Popen(
            [
                nginx,
                "-p",
                f"{work}/",
                "-c",
                str(conf),
                "-e",
                f"{work}/plain-error.log",
                "-g",
                f"daemon off; pid {work}/plain.pid;",
            ]
        )
    )
    plain = f"http://127.0.0.1:{plain_port}"
    wait_http(plain + "/static/ready", procs[-1], 60)

    payload = work / "payload.bin"
    print(f"writing a {size // MIB} MiB random object ...", flush=True)
    oid = write_random(payload, size)
    payload.chmod(0o644)
    auth = (USER, PASSWORD)
    repo = f"{lfs}/bench/objects.git/info/lfs"

    def batch(operation: str) -> dict:
        r = requests.post(
            f"{repo}/objects/batch",
            auth=auth,
            timeout=60,
            json={"operation": operation, "objects": [{"oid": oid, "size": size}]},
        )
        r.raise_for_status()
        return r.json()["objects"][0]

    up = batch("upload")["actions"]["upload"]
    put_header = f"Authorization: {up['header']['Authorization']}"
    curl("-T", str(payload), "-H", put_header, up["href"])  # first upload: publishes the object
    down = batch("download")["actions"]["download"]
    get_header = f"Authorization: {down['header']['Authorization']}"
    stored = data / "repos/bench/objects.git/objects" / oid[:2] / oid[2:4] / oid
    os.link(stored, work / "static/payload.bin")  # the very same bytes for both servers

    # GET: alternate the two servers so drift in machine load hits both alike.
    lfs_get, plain_get, batch_times = [], [], []
    curl("-H", get_header, down["href"])
    curl(plain + "/static/payload.bin")
    for _ in range(args.repeats):
        started = time.perf_counter()
        batch("download")
        batch_times.append(time.perf_counter() - started)
        lfs_get.append(curl("-H", get_header, down["href"]))
        plain_get.append(curl(plain + "/static/payload.bin"))

    # PUT: lfs-server verifies and republishes the object each time (the repair path).
    lfs_put, plain_put, plain_write, plain_hash = [], [], [], []
    for i in range(max(3, args.repeats - 2)):
        # Start each timed write with no dirty pages left over from the previous one, so
        # one side's background writeback does not slow the other's.
        os.sync()
        lfs_put.append(curl("-T", str(payload), "-H", put_header, up["href"]))
        os.sync()
        write = curl("-T", str(payload), f"{plain}/put/body{i}.bin")
        started = time.perf_counter()
        assert sha256_file(work / f"dav/body{i}.bin") == oid
        hashed = time.perf_counter() - started
        plain_write.append(write)
        plain_hash.append(hashed)
        plain_put.append(write + hashed)
        (work / f"dav/body{i}.bin").unlink()
    assert sha256_file(stored) == oid

    def line(label: str, seconds: list[float], extra: str = "") -> None:
        median, best = statistics.median(seconds), min(seconds)
        print(
            f"{label:<44} {median:7.3f} s  {size / median / 1e9:5.2f} GB/s"
            f"  (best {size / best / 1e9:5.2f} GB/s){extra}"
        )

    def verdict(name: str, ratio: float, goal: float) -> None:
        met = "met" if ratio >= goal else "NOT met"
        print(f"{name:<22} {ratio:.2f}x  (goal >= {goal:.2f}x: {met})")

    print()
    print(f"object: {size // MIB} MiB, median of {len(lfs_get)} GETs / {len(lfs_put)} PUTs (curl)")
    line("GET  lfs-server (X-Accel-Redirect)", lfs_get)
    line("GET  plain nginx static", plain_get)
    print(f"     (batch request before each GET: {statistics.median(batch_times) * 1000:.1f} ms)")
    line("PUT  lfs-server (write+sha256+fsync+rename)", lfs_put)
    write, hashed = statistics.median(plain_write), statistics.median(plain_hash)
    line(
        "PUT  nginx DAV write + hashlib",
        plain_put,
        f"  (write {write:.3f} s + hash {hashed:.3f} s)",
    )
    verdict("GET ratio lfs/nginx", statistics.median(plain_get) / statistics.median(lfs_get), 0.9)
    verdict("PUT ratio lfs/limit", statistics.median(plain_put) / statistics.median(lfs_put), 0.7)
    best_get, best_put = min(plain_get) / min(lfs_get), min(plain_put) / min(lfs_put)
    print(f"(best-of ratios: GET {best_get:.2f}x, PUT {best_put:.2f}x;")
    print(f" load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")

    timings = {
        "get.lfs-server": lfs_get,
        "get.nginx": plain_get,
        "batch.download": batch_times,
        "put.lfs-server": lfs_put,
        "put.nginx-write+hashlib": plain_put,
    }
    if not args.no_git:
        timings.update(git_bench(work, lfs, payload))
    if args.json:
        write_suite(args.json, timings, {"size_mib": size // MIB})
    return 0


def write_suite(path: str, timings: dict[str, list[float]], metadata: dict[str, int]) -> None:
    """*timings* (seconds) as one pyperf benchmark each, in a suite written to *path*."""
    benchmarks = [
        pyperf.Benchmark(
            [
                pyperf.Run(
                    values,
                    metadata={"name": name, "unit": "second", "loops": 1, **metadata},
                    collect_metadata=False,
                )
            ]
        )
        for name, values in timings.items()
    ]
    pyperf.BenchmarkSuite(benchmarks).dump(path, replace=True)


def git_bench(work: Path, lfs: str, payload: Path) -> dict[str, list[float]]:
    """git-lfs push and a fresh clone of 20 x 10 MiB + the payload; their seconds."""
    home = work / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }

    def git(*args: str, cwd: Path | None = None) -> float:
        started = time.perf_counter()
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
        return time.perf_counter() - started

    git("lfs", "install")
    creds = home / ".git-credentials"
    creds.write_text(f"http://{USER}:{PASSWORD}@{lfs.split('://')[1]}\n")
    for key, value in (
        ("user.name", "bench"),
        ("user.email", "b@example.com"),
        ("credential.helper", f"store --file={creds}"),
        ("init.defaultBranch", "main"),
        ("lfs.locksverify", "true"),
    ):
        git("config", "--global", key, value)
    bare, src, dst = work / "remote.git", work / "src", work / "clone"
    git("init", "--bare", str(bare))
    git("init", str(src))
    git("lfs", "track", "*.bin", cwd=src)
    (src / ".lfsconfig").write_text(f"[lfs]\n\turl = {lfs}/bench/game.git/info/lfs\n")
    for i in range(20):
        write_random(src / f"asset{i:02d}.bin", 10 * MIB)
    shutil.copy(payload, src / "big.bin")
    git("add", ".", cwd=src)
    git("commit", "-m", "assets", cwd=src)
    git("remote", "add", "origin", str(bare), cwd=src)
    push = git("push", "origin", "main", cwd=src)
    clone = git("clone", str(bare), str(dst))
    for name in ["big.bin", *(f"asset{i:02d}.bin" for i in range(20))]:
        assert sha256_file(src / name) == sha256_file(dst / name), name
    total = (20 * 10 * MIB + payload.stat().st_size) // MIB
    big = payload.stat().st_size // MIB
    print(f"git-lfs push  20 x 10 MiB + 1 x {big} MiB ({total} MiB)  {push:6.2f} s")
    print(f"git clone (smudge downloads all, checksums equal)       {clone:6.2f} s")
    print("(issue's reference for giftless on the same data set: push 2.3-3.9 s, pull 9.5-12 s)")
    return {"git.push": [push], "git.clone": [clone]}


if __name__ == "__main__":
    sys.exit(main())
