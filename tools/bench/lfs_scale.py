#!/usr/bin/env python3
"""Benchmark lfs-server beyond one machine: S3 (Ceph RGW) + PostgreSQL, one node vs two.

    tools/bench/lfs_scale.py [--runs 5] [--big-mib 300] [--small 500] [--medium 20]
                             [--skip-git] [--skip-get] [--clients 32] [--duration 20]
                             [--workers 4] [--repeat 1] [--json PATH]

Starts its own engines (a single-node Ceph cluster with the RADOS Gateway, PostgreSQL 15;
tools/lfs_engines.py, as the tests do) and lfs-server nodes on loopback, then measures,
in the same run so that the ratios compare like with like:

1. GET of one --big-mib object: through a node in proxy mode (nginx streams from the
   store via X-Accel-Redirect) vs a direct presigned GET from the store, in pairs whose
   order alternates, with the CPU each GET cost the node, Ceph and the client.
   Goal: proxy >= 0.9x direct (median of --runs).
2. git push + fresh clone of --small x 4 KiB and --medium x 10 MiB objects through a
   front nginx (as deploy/lb-nginx.conf) to one node vs to two nodes: objects/s.
3. tools/bench/lfs_load.py's mixed load (--clients, --duration, objects up to
   --max-size-kib) on S3 + PostgreSQL, two pairs, interleaved --repeat times:
   - one node of --workers workers vs two nodes of --workers/2 each: the same processes
     split over two nodes, on the same cores (what a second node costs or saves when it
     brings no CPU of its own);
   - one node pinned to CPU 0 vs two nodes pinned to CPU 0 and CPU 1: each node has a
     core of its own, as on separate machines (the engines and the load generator run on
     both cores either way). Goal: two nodes serve more requests/s than one.
   with requests/s, the worst API p99, the server CPU per request and the load average.

Prints a table and exits 1 if the GET goal is missed. Loopback only; 2 cores are shared
by the engines, the nodes and the clients, so absolute numbers are what this box gives.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import lfs_load  # noqa: E402  (tools/bench/lfs_load.py, next to this file)
from common import free_port, stop_process, wait_http, write_json  # noqa: E402  (tools/common.py)
from lfs_engines import Ceph, Postgres, start_ceph, start_postgres  # noqa: E402  (tools/)

MIB = 1 << 20
SCRIPT = str(Path(sys.executable).parent / "lfs-server")
USER, PASSWORD = "bench", "bench-pw"


class Node:
    """One `lfs-server serve` on the shared engines (lfs_load.start_server starts it)."""

    def __init__(self, root: Path, name: str, workers: int) -> None:
        self.data = root / name
        self.data.mkdir(mode=0o755)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = lfs_load.start_server(self.data, self.port, workers, 0, add_users=False)

    def stop(self) -> None:
        stop_process(self.proc)


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
        wait_http(self.url + "/healthz", self.proc, 90, lambda: lfs_load.log_tail(d / "error.log"))

    def stop(self) -> None:
        stop_process(self.proc)


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


def bench_get(node: Node, ceph: Ceph, bucket: str, big_mib: int, runs: int) -> dict[str, Any]:
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
    # CPU seconds per GET of: the node's processes (nginx; the app's one request), Ceph's
    # daemons (radosgw, OSD), and this client (requests + SHA-256): what the proxy adds.
    cpu: dict[str, list[tuple[float, float, float]]] = {"proxy": [], "direct": []}
    engines = [psutil.Process(pid) for pid in ceph.pids.values()]

    def measured(which: str, url: str, headers: dict[str, str]) -> float:
        before = (lfs_load.tree_cpu([node.proc.pid]), _cpu(engines), time.process_time())
        speed = big_mib / timed_get(url, headers, oid)
        after = (lfs_load.tree_cpu([node.proc.pid]), _cpu(engines), time.process_time())
        node_cpu = sum(after[0].values()) - sum(before[0].values())
        cpu[which].append((node_cpu, after[1] - before[1], after[2] - before[2]))
        return speed

    for run in range(runs):
        action = batch(node.url, "bench/big", "download", [{"oid": oid, "size": big_mib * MIB}])
        dl = action[0]["actions"]["download"]
        # Alternating which goes first, so that neither side always finds the gateway and
        # the OSD warmed up by the other.
        for which in ("proxy", "direct") if run % 2 == 0 else ("direct", "proxy"):
            if which == "proxy":
                proxy.append(measured(which, dl["href"], dl["header"]))
            else:
                direct.append(measured(which, presigned, {}))
    return {
        "proxy_mib_s": statistics.median(proxy),
        "direct_mib_s": statistics.median(direct),
        "pair_ratio": statistics.median(p / d for p, d in zip(proxy, direct, strict=True)),
        "proxy_runs": proxy,
        "direct_runs": direct,
        **{
            f"{which}_cpu_s": {
                part: statistics.median(c[i] for c in cpu[which])
                for i, part in enumerate(("node", "engines", "client"))
            }
            for which in cpu
        },
    }


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


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


# The load pairs: (label, nodes, workers per node as a share of --workers, pin nodes).
LOAD_SETUPS = (
    ("1 node, all workers", 1, 1.0, False),
    ("2 nodes, half the workers each", 2, 0.5, False),
    ("1 node on CPU 0", 1, 1.0, True),
    ("2 nodes on CPU 0 and 1", 2, 1.0, True),
)


def bench_load(args: argparse.Namespace) -> list[dict[str, object]]:
    """lfs_load.py's mixed load in each of LOAD_SETUPS, interleaved --repeat times."""
    rows: list[dict[str, object]] = []
    for _ in range(args.repeat):
        for label, nodes, share, pin in LOAD_SETUPS:
            load_args = argparse.Namespace(
                **{**lfs_load.NODE_DEFAULTS, **vars(args)},
            )
            load_args.nodes, load_args.pin_nodes, load_args.repeat = nodes, pin, 1
            load_args.workers = max(1, round(args.workers * share))
            for result in lfs_load.run(load_args):
                rows.append(
                    {
                        "setup": label,
                        **dataclasses.asdict(result),
                        "worst_p99_ms": result.worst_goal_p99_ms,
                    }
                )
    return rows


def load_summary(rows: list[dict[str, object]]) -> dict[str, dict[str, float]]:
    """Medians per setup, printed as a table with the pairs' ratios."""
    summary: dict[str, dict[str, float]] = {}
    print("\nload on S3 + PostgreSQL (medians over the repeats):")
    print(f"{'setup':34s} {'req/s':>8s} {'worst p99 ms':>13s} {'server ms/req':>14s} "
          f"{'load avg':>9s}  lost/corrupted")  # fmt: skip
    for label, *_ in LOAD_SETUPS:
        mine = [r for r in rows if r["setup"] == label]
        med = {
            key: statistics.median(float(r[key]) for r in mine)  # type: ignore[arg-type]
            for key in ("requests_s", "worst_p99_ms", "server_cpu_ms", "load_end")
        }
        med["lost"] = sum(float(r["lost"]) + float(r["corrupted"]) for r in mine)  # type: ignore[arg-type]
        summary[label] = med
        print(f"{label:34s} {med['requests_s']:8.1f} {med['worst_p99_ms']:13.1f} "
              f"{med['server_cpu_ms']:14.2f} {med['load_end']:9.2f}  "
              f"{med['lost']:.0f}")  # fmt: skip
    labels = [label for label, *_ in LOAD_SETUPS]
    for one, two in ((labels[0], labels[1]), (labels[2], labels[3])):
        ratio = summary[two]["requests_s"] / summary[one]["requests_s"]
        print(f"{two} / {one}: {ratio:.2f}x requests/s")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[lfs_load.load_arguments()],
    )
    parser.add_argument("--runs", type=int, default=5, help="GET repetitions (median; 5)")
    parser.add_argument("--big-mib", type=int, default=300, help="size of the GET object (300)")
    parser.add_argument("--small", type=int, default=500, help="4 KiB objects to push (500)")
    parser.add_argument("--medium", type=int, default=20, help="10 MiB objects to push (20)")
    parser.add_argument("--skip-get", action="store_true", help="skip the proxy/presigned GET")
    parser.add_argument("--skip-git", action="store_true", help="skip the push/clone rows")
    parser.add_argument("--skip-load", action="store_true", help="skip the load pairs")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    # The load part's own defaults: 20 s runs of 256 KiB objects at most.
    parser.set_defaults(duration=20.0, max_size_kib=256)
    args = parser.parse_args(argv)
    lfs_load.check_arguments(parser, args)

    root = Path(tempfile.mkdtemp(prefix="lfs-scale-", dir="/tmp"))
    root.chmod(0o755)
    ceph: Ceph | None = None
    pg: Postgres | None = None
    nodes: list[Node] = []
    fronts: list[Front] = []
    results: dict[str, object] = {}
    ok = True
    try:
        t0 = time.monotonic()
        ceph = start_ceph()
        pg = start_postgres(fsync=True)
        print(f"lfs_scale: engines up in {time.monotonic() - t0:.1f} s", flush=True)
        bucket = ceph.create_bucket("lfs-bench")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
        env.update(ceph.s3_env(bucket))
        env["LFS_DATABASE_URL"] = pg.create_database("lfs_bench")
        env["LFS_SECRET_KEY_FILE"] = str(root / "secret.key")
        os.environ.update(env)
        subprocess.run([SCRIPT, "user", "add", USER, "--grant", "*=write", "--password-stdin",
                        "--data", str(root / "cli")], input=PASSWORD, text=True, env=env,
                       check=True, capture_output=True)  # fmt: skip
        if not (args.skip_get and args.skip_git):
            nodes = [Node(root, f"node{i}", args.workers) for i in range(2)]

        if not args.skip_get:
            get = bench_get(nodes[0], ceph, bucket, args.big_mib, args.runs)
            ratio = get["proxy_mib_s"] / get["direct_mib_s"]
            results["get"] = {**get, "ratio": ratio, "load_average": os.getloadavg()[0]}
            ok = ratio >= 0.9
            print(f"GET {args.big_mib} MiB: proxy {get['proxy_mib_s']:.0f} MiB/s, direct "
                  f"presigned {get['direct_mib_s']:.0f} MiB/s: {ratio:.2f}x (goal >= 0.9x: "
                  f"{'met' if ok else 'NOT met'}; load average "
                  f"{os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
            print("GET runs (MiB/s, proxy/direct): " + "  ".join(
                f"{p:.0f}/{d:.0f}" for p, d in zip(get["proxy_runs"], get["direct_runs"],
                                                   strict=True)
            ) + f"; median of the pairs' ratios {get['pair_ratio']:.2f}x", flush=True)  # fmt: skip
            for which in ("proxy", "direct"):
                c = get[f"{which}_cpu_s"]
                print(f"GET CPU s per {which} GET (medians): node (nginx + app) "
                      f"{c['node']:.3f}, radosgw + OSD {c['engines']:.3f}, client "
                      f"{c['client']:.3f}; total {sum(c.values()):.3f}", flush=True)  # fmt: skip

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
                          f"{row['clone_obj_s']:.1f} obj/s (load average "
                          f"{os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
            results["git"] = rows
        for front in fronts:
            front.stop()
        for node in nodes:
            node.stop()
        fronts, nodes = [], []

        if not args.skip_load:
            rows = bench_load(args)
            results["load"] = rows
            results["load_summary"] = load_summary(rows)
            ok = ok and all(r["lost"] == 0 and r["corrupted"] == 0 for r in rows)
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
        write_json(args.json, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
