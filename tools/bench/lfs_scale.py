#!/usr/bin/env python3
"""Benchmark lfs-server beyond one machine: S3 (Ceph RGW) + PostgreSQL, one node vs two.

    tools/bench/lfs_scale.py [--runs 5] [--big-mib 300] [--small 500] [--medium 20]
                             [--skip-git] [--json PATH]

Starts its own engines (a single-node Ceph cluster with the RADOS Gateway, PostgreSQL 15;
see tests/lfs-server/lfs_engines.py) and lfs-server nodes on loopback, then measures, in
the same run so that the ratios compare like with like:

1. GET of one --big-mib object: through a node in proxy mode (nginx streams from the
   store via X-Accel-Redirect) vs a direct presigned GET from the store.
   Goal: proxy >= 0.9x direct (median of --runs).
2. git push + fresh clone of --small x 4 KiB and --medium x 10 MiB objects through a
   front nginx (as deploy/lb-nginx.conf) to one node vs to two nodes: objects/s.
3. p99 of the batch API (and every operation) under 32 clients of tools/bench/lfs_load.py
   across two nodes (--load-duration seconds).

Prints a table and exits 1 if the GET goal is missed. Loopback only; 2 cores are shared
by the engines, the nodes and the clients, so absolute numbers are what this box gives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests/lfs-server"))

from lfs_engines import Ceph, Postgres, free_port, start_ceph, start_postgres  # noqa: E402

MIB = 1 << 20
SCRIPT = str(Path(sys.executable).parent / "lfs-server")
USER, PASSWORD = "bench", "bench-pw"


class Node:
    """One `lfs-server serve` on the shared engines."""

    def __init__(self, root: Path, env: dict[str, str], name: str, workers: int) -> None:
        self.data = root / name
        self.data.mkdir(mode=0o755)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        node_env = {**env, "LFS_DATA_DIR": str(self.data), "LFS_LISTEN": f"127.0.0.1:{self.port}"}
        node_env["LFS_WORKERS"] = str(workers)
        self.log = open(root / f"{name}.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([SCRIPT, "serve"], env=node_env, stdout=self.log,
                                     stderr=subprocess.STDOUT)  # fmt: skip
        wait_healthy(self.url, self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"lfs_scale: a server exited with {proc.returncode}")
        try:
            if requests.get(url + "/healthz", timeout=10).ok:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass
        time.sleep(0.2)
    raise SystemExit(f"lfs_scale: {url} did not become healthy")


class Front:
    """A load-balancing nginx (like deploy/lb-nginx.conf) in front of some nodes."""

    def __init__(self, root: Path, nodes: list[Node], name: str) -> None:
        self.dir = root / name
        self.dir.mkdir(mode=0o755)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        servers = "\n".join(f"        server 127.0.0.1:{n.port};" for n in nodes)
        d = self.dir
        (d / "nginx.conf").write_text(f"""worker_processes 2;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
    upstream nodes {{
        least_conn;
{servers}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{self.port};
        client_max_body_size 0;
        location / {{
            proxy_pass http://nodes;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_request_buffering off;
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
""")
        nginx = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin") or "nginx"
        self.proc = subprocess.Popen(
            [nginx, "-p", f"{d}/", "-c", f"{d}/nginx.conf", "-e", f"{d}/error.log",
             "-g", f"daemon off; pid {d}/nginx.pid;"],
        )  # fmt: skip
        wait_healthy(self.url, None)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def batch(url: str, repo: str, operation: str, objects: list[dict[str, object]]) -> list[dict]:
    r = requests.post(
        f"{url}/{repo}.git/info/lfs/objects/batch",
        json={"operation": operation, "objects": objects},
        auth=(USER, PASSWORD),
        timeout=120,
    )
    r.raise_for_status()
    return list(r.json()["objects"])


def timed_get(url: str, headers: dict[str, str], expect: str) -> float:
    """Seconds to GET *url* and hash the body (the client verifies what it downloads)."""
    digest = hashlib.sha256()
    start = time.perf_counter()
    with requests.get(url, headers=headers, stream=True, timeout=600) as r:
        r.raise_for_status()
        for chunk in r.iter_content(4 * MIB):
            digest.update(chunk)
    elapsed = time.perf_counter() - start
    if digest.hexdigest() != expect:
        raise SystemExit("lfs_scale: a download did not hash to its oid")
    return elapsed


def bench_get(node: Node, ceph: Ceph, bucket: str, big_mib: int, runs: int) -> dict[str, float]:
    """Median MiB/s of a big GET in proxy mode vs a direct presigned GET."""
    data = os.urandom(big_mib * MIB)
    oid = hashlib.sha256(data).hexdigest()
    obj = batch(node.url, "bench/big", "upload", [{"oid": oid, "size": len(data)}])[0]
    up = obj["actions"]["upload"]
    requests.put(up["href"], data=data, headers=up["header"], timeout=600).raise_for_status()
    del data
    # The same presigned URL a node hands out in direct mode (tools/bench/lfs_server.py
    # shadows the lfs_server package here, so it is signed with boto3 directly).
    key = f"bench/big.git/objects/{oid[:2]}/{oid[2:4]}/{oid}"
    presigned = ceph.client().generate_presigned_url(  # type: ignore[attr-defined]
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600
    )
    proxy, direct = [], []
    for _ in range(runs):
        action = batch(node.url, "bench/big", "download", [{"oid": oid, "size": big_mib * MIB}])
        dl = action[0]["actions"]["download"]
        proxy.append(big_mib / timed_get(dl["href"], dl["header"], oid))
        direct.append(big_mib / timed_get(presigned, {}, oid))
    return {"proxy_mib_s": statistics.median(proxy), "direct_mib_s": statistics.median(direct)}


def git(env: dict[str, str], *args: str, cwd: Path | None = None) -> None:
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=1800, check=False)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"lfs_scale: git {' '.join(args)} failed:\n{result.stderr[-2000:]}")


def bench_git(root: Path, url: str, repo: str, count: int, size: int) -> dict[str, float]:
    """Push *count* objects of *size* bytes through *url*, then a fresh clone: objects/s."""
    work_root = Path(tempfile.mkdtemp(dir=root))
    home = work_root / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "GIT_TERMINAL_PROMPT": "0",
           "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip
    host = url.split("://", 1)[1]
    (home / ".git-credentials").write_text(f"http://{USER}:{PASSWORD}@{host}\n")
    git(env, "lfs", "install")
    for key, value in (("user.name", USER), ("user.email", "b@example.com"),
                       ("credential.helper", "store"), ("init.defaultBranch", "main"),
                       ("lfs.locksverify", "false")):  # fmt: skip
        git(env, "config", "--global", key, value)
    bare, work = work_root / "remote.git", work_root / "work"
    git(env, "init", "--bare", str(bare))
    git(env, "init", str(work))
    git(env, "lfs", "track", "*.bin", cwd=work)
    (work / ".lfsconfig").write_text(f"[lfs]\n\turl = {url}/{repo}.git/info/lfs\n")
    for i in range(count):
        (work / f"f{i:04d}.bin").write_bytes(os.urandom(size))
    git(env, "add", ".", cwd=work)
    git(env, "commit", "-q", "-m", "objects", cwd=work)
    git(env, "remote", "add", "origin", str(bare), cwd=work)
    start = time.perf_counter()
    git(env, "push", "-q", "origin", "main", cwd=work)
    push = time.perf_counter() - start
    start = time.perf_counter()
    git(env, "clone", "-q", str(bare), str(work_root / "clone"))
    clone = time.perf_counter() - start
    shutil.rmtree(work_root, ignore_errors=True)
    return {"push_obj_s": count / push, "clone_obj_s": count / clone}


def bench_load(env: dict[str, str], nodes: int, clients: int, duration: float) -> dict[str, float]:
    """Run lfs_load.py across *nodes* nodes; requests/s and p99 per operation (ms)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench/lfs_load.py"), "--nodes", str(nodes),
         "--clients", str(clients), "--duration", str(duration), "--max-size-kib", "256",
         "--workers", "4"],
        env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    out = result.stdout
    found: dict[str, float] = {"exit": float(result.returncode)}
    match = re.search(r"requests: \d+ \(([\d.]+)/s\)", out)
    if match:
        found["requests_s"] = float(match.group(1))
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] in ("batch", "download.batch", "upload.batch"):
            found[f"{parts[0]}_p99_ms"] = float(parts[3])
    lost = re.search(r"lost: (\d+); corrupted: (\d+);", out)
    if lost:
        found["lost"], found["corrupted"] = float(lost.group(1)), float(lost.group(2))
    if result.returncode != 0:
        print(out[-3000:] + result.stderr[-2000:], file=sys.stderr)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="GET repetitions (median; 5)")
    parser.add_argument("--big-mib", type=int, default=300, help="size of the GET object (300)")
    parser.add_argument("--small", type=int, default=500, help="4 KiB objects to push (500)")
    parser.add_argument("--medium", type=int, default=20, help="10 MiB objects to push (20)")
    parser.add_argument("--skip-git", action="store_true", help="skip the push/clone rows")
    parser.add_argument("--load-duration", type=float, default=20.0, help="load seconds (20)")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers per node (4)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="lfs-scale-", dir="/tmp"))
    root.chmod(0o755)
    ceph: Ceph | None = None
    pg: Postgres | None = None
    nodes: list[Node] = []
    fronts: list[Front] = []
    results: dict[str, object] = {}
    try:
        t0 = time.monotonic()
        ceph = start_ceph()
        pg = start_postgres(fsync=True)
        print(f"lfs_scale: engines up in {time.monotonic() - t0:.1f} s")
        bucket = ceph.create_bucket("lfs-bench")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
        env.update(ceph.s3_env(bucket))
        env["LFS_DATABASE_URL"] = pg.create_database("lfs_bench")
        env["LFS_SECRET_KEY_FILE"] = str(root / "secret.key")
        os.environ.update(env)
        subprocess.run([SCRIPT, "user", "add", USER, "--grant", "*=write", "--password-stdin",
                        "--data", str(root / "cli")], input=PASSWORD, text=True, env=env,
                       check=True, capture_output=True)  # fmt: skip
        nodes = [Node(root, env, f"node{i}", args.workers) for i in range(2)]

        get = bench_get(nodes[0], ceph, bucket, args.big_mib, args.runs)
        ratio = get["proxy_mib_s"] / get["direct_mib_s"]
        results["get"] = {**get, "ratio": ratio}
        print(f"GET {args.big_mib} MiB: proxy {get['proxy_mib_s']:.0f} MiB/s, direct presigned "
              f"{get['direct_mib_s']:.0f} MiB/s: {ratio:.2f}x (goal >= 0.9x)")  # fmt: skip

        if not args.skip_git:
            fronts = [Front(root, nodes[:1], "front1"), Front(root, nodes, "front2")]
            rows = []
            for label, count, size in (("4 KiB", args.small, 4096), ("10 MiB", args.medium,
                                                                         10 * MIB)):  # fmt: skip
                for n, front in ((1, fronts[0]), (2, fronts[1])):
                    repo = f"bench/git-{count}-{n}"
                    row = bench_git(root, front.url, repo, count, size)
                    rows.append({"objects": f"{count} x {label}", "nodes": n, **row})
                    print(f"git {count} x {label} through {n} node(s): push "
                          f"{row['push_obj_s']:.1f} obj/s, fresh clone "
                          f"{row['clone_obj_s']:.1f} obj/s")  # fmt: skip
            results["git"] = rows

        for n in (1, 2):
            # A fresh database per run: lfs_load adds its own users.
            load_env = {**env, "LFS_DATABASE_URL": pg.create_database(f"lfs_load_{n}")}
            load = bench_load(load_env, n, 32, args.load_duration)
            results[f"load_{n}_nodes"] = load
            print(f"load 32 clients, {n} node(s): {load.get('requests_s', 0):.0f} req/s, "
                  f"batch p99 {load.get('batch_p99_ms', float('nan')):.0f} ms, "
                  f"lost {load.get('lost')}, corrupted {load.get('corrupted')}")  # fmt: skip
    finally:
        for front in fronts:
            front.stop()
        for node in nodes:
            node.stop()
        if pg is not None:
            pg.stop()
        if ceph is not None:
            ceph.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    ok = results["get"]["ratio"] >= 0.9  # type: ignore[index]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
