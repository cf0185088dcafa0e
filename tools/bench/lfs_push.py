#!/usr/bin/env python3
"""Small objects through a real `git lfs push`: lfs-server against a trivial-app floor.

    tools/bench/lfs_push.py [--objects 500] [--size-kib 4] [--rounds 3] [--workers 2]
                            [--s3] [--json FILE]

Makes one git repository holding N random objects of the given size (tracked by git-lfs),
then, --rounds times, pushes them all with `git lfs push --all` (git-lfs's own 8 transfers
in flight) to two servers, alternating which goes first so the machine's other load hits
both alike:

- **lfs-server**: `lfs-server serve` (nginx + gunicorn, local store and SQLite unless the
  caller's `LFS_STORAGE`/`LFS_S3_*`/`LFS_DATABASE_URL` say otherwise), into a new repository
  each round, so every object is uploaded, verified and published; the bench checks that
  every object of the round was stored;
- **floor**: a trivial WSGI app (below: it answers batch (naming no verify action, as
  lfs-server does), the upload check, PUT and lock verification with canned JSON and
  stores nothing) behind the same nginx configuration and the same gunicorn command line
  as `serve` uses: what the HTTP stack and the client cost without our app.

Prints objects/s for each (median over the rounds), their ratio (issue 25's goal: local
>= 0.6x the floor), the CPU per object of each server's process tree (psutil) and of the
git-lfs client, and the TCP connections nginx saw per round (`conn=` in its access log,
where the configuration logs it). `--json FILE` writes every number.
Needs nginx, git and git-lfs; loopback only.

`--s3` starts its own Ceph RADOS Gateway and PostgreSQL (tools/lfs_engines.py, as the
tests do) and runs lfs-server on them (S3 store, proxy mode, one node). Each round then
also measures **boto3's floor**: in this process, single-threaded, the boto3 calls one
pushed object must cost (the batch's HEAD of a missing key, then one PUT of the body from
a file), made with lfs-server's own S3 client (`S3Store`), timed with `time.process_time`.
It prints the app's CPU per object (the gunicorn workers only: not nginx, not the
gunicorn master, not radosgw), the floor, and the difference against issue 25's goal
(app <= floor + 3 ms). The floor with boto3's default client configuration is printed too.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This folder's lfs_server.py (another bench) would shadow the lfs_server package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
from common import free_port, wait_http, write_json  # noqa: E402 (tools/common.py)

SCRIPT = str(Path(sys.executable).parent / "lfs-server")
USER, PASSWORD = "push", "push-pw"
MEDIA_TYPE = "application/vnd.git-lfs+json"
SIDES = ("lfs-server", "floor")
BACKEND_VARS = ("LFS_STORAGE", "LFS_S3_", "LFS_DATABASE_URL", "LFS_SECRET_KEY_FILE")


# --- the floor: a WSGI app that answers git-lfs's requests and does nothing else -----------


def floor_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Canned answers to batch, upload check, PUT, verify (unused) and lock verification."""
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    body = environ["wsgi.input"].read() if method in ("POST", "PUT") else b""
    status, payload, headers = "404 Not Found", {"message": "not found"}, []
    if method == "POST" and path.endswith("/objects/batch"):
        base = f"http://{environ.get('HTTP_HOST', '')}{path[: -len('/objects/batch')]}"
        auth = {"Authorization": "Bearer floor"}
        objects = [
            {
                "oid": o["oid"],
                "size": o["size"],
                "authenticated": True,
                "actions": {
                    "upload": {
                        "href": f"{base}/upload/{o['oid']}/{o['size']}",
                        "header": auth,
                        "expires_in": 3600,
                    },
                    # No verify action, as lfs-server whose PUT verifies: the same requests.
                },
            }
            for o in json.loads(body)["objects"]
        ]
        status = "200 OK"
        payload = {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}
    elif path == "/_lfs/upload-check":
        start_response("204 No Content", [("X-Lfs-Status", "204")])
        return [b""]
    elif method == "PUT" and "/upload/" in path:
        status, payload = "200 OK", {}
    elif method == "POST" and path.endswith("/locks/verify"):
        status, payload = "200 OK", {"ours": [], "theirs": []}
    elif method == "POST" and path.endswith("/verify"):
        # Empty, as lfs-server answers: git-lfs keeps its connection only then.
        start_response("200 OK", [("Content-Length", "0")])
        return [b""]
    data = json.dumps(payload).encode()
    headers += [("Content-Type", MEDIA_TYPE), ("Content-Length", str(len(data)))]
    start_response(status, headers)
    return [data]


# --- servers -------------------------------------------------------------------------------


class Side:
    """One server under test: its processes, access log and base URL."""

    def __init__(self, name: str, url: str, procs: list[subprocess.Popen[bytes]], log: Path):
        self.name, self.url, self.procs, self.log = name, url, procs, log

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def server_env() -> dict[str, str]:
    """The caller's environment without LFS_* settings other than the backend's."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LFS_") or k.startswith(BACKEND_VARS)
    }


def start_lfs_server(work: Path, workers: int) -> Side:
    data = work / "lfs-data"
    env = {**server_env(), "LFS_DATA_DIR": str(data)}
    subprocess.run(
        [SCRIPT, "user", "add", USER, "--grant", "*=write", "--password-stdin"],
        input=PASSWORD + "\n", text=True, env=env, check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    env["LFS_LISTEN"] = f"127.0.0.1:{port}"
    log = work / "lfs-serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [SCRIPT, "serve", "--workers", str(workers)], env=env, stdout=out, stderr=out
        )
    side = Side("lfs-server", f"http://127.0.0.1:{port}", [proc], data / "run/nginx-access.log")
    wait_http(side.url + "/healthz", proc, 60, lambda: log.read_text(errors="replace")[-2000:])
    return side


def start_floor(work: Path, workers: int) -> Side:
    """The trivial app behind the nginx config and gunicorn command `serve` would use."""
    from lfs_server.config import Config
    from lfs_server.nginx import find_nginx, render_nginx_config
    from lfs_server.serve import Supervisor, check_worker_access, prepare
    from lfs_server.tokens import proxy_secret

    port = free_port()
    config = Config(data_dir=work / "floor-data", listen=f"127.0.0.1:{port}", workers=workers)
    key = prepare(config)
    check_worker_access(config)
    sock = config.run_dir / "floor.sock"
    conf = config.run_dir / "nginx.conf"
    conf.write_text(render_nginx_config(config, proxy_secret(key), upstream=f"unix:{sock}"))
    cmd = Supervisor(config, use_nginx=True, out=sys.stdout, err=sys.stderr)._gunicorn_cmd(
        f"unix:{sock}"
    )
    assert cmd[-1] == "lfs_server.wsgi:app", cmd  # serve's own command, app swapped
    # gunicorn imports this file as a module from a folder holding nothing else.
    (work / "floor-app").mkdir()
    (work / "floor-app" / "lfs_push.py").symlink_to(Path(__file__).resolve())
    cmd[-1:] = ["--pythonpath", str(work / "floor-app"), "lfs_push:floor_app"]
    env = {**server_env(), **config.to_env(), "LFS_BODY_MODE": "nginx"}
    log = work / "floor.log"
    procs = []
    with open(log, "wb") as out:
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=out))
        deadline = time.monotonic() + 60
        while not sock.exists():
            if procs[0].poll() is not None or time.monotonic() > deadline:
                raise SystemExit("floor gunicorn did not start:\n" + log.read_text()[-2000:])
            time.sleep(0.05)
        nginx = find_nginx()
        assert nginx, "nginx is needed"
        run = str(config.run_dir)
        nginx_cmd = [nginx, "-p", run + "/", "-c", str(conf), "-e", f"{run}/nginx-error.log"]
        nginx_cmd += ["-g", f'daemon off; pid "{run}/nginx.pid";']
        procs.append(subprocess.Popen(nginx_cmd, stdout=out, stderr=out))
    side = Side("floor", f"http://127.0.0.1:{port}", procs, config.run_dir / "nginx-access.log")
    # Any answer will do: the floor has no /healthz, only nginx must be listening.
    deadline = time.monotonic() + 60
    while not listening(port):
        if time.monotonic() > deadline or procs[1].poll() is not None:
            raise SystemExit("floor nginx did not start:\n" + log.read_text()[-2000:])
        time.sleep(0.05)
    return side


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:*port*."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


# --- git -------------------------------------------------------------------------------------


class Git:
    """git and git-lfs in a HOME of their own, logging in with the bench user."""

    def __init__(self, work: Path, urls: list[str]) -> None:
        home = work / "home"
        home.mkdir()
        self.env = {
            "HOME": str(home),
            "PATH": os.environ["PATH"],
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
        }
        creds = home / ".git-credentials"
        creds.write_text("".join(f"http://{USER}:{PASSWORD}@{u.split('://')[1]}\n" for u in urls))
        self("lfs", "install")
        for key, value in (
            ("user.name", "bench"),
            ("user.email", "bench@example.com"),
            ("credential.helper", f"store --file={creds}"),
            ("init.defaultBranch", "main"),
        ):
            self("config", "--global", key, value)

    def __call__(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=self.env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise SystemExit(f"git {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout


def make_repo(git: Git, work: Path, objects: int, size: int) -> Path:
    src = work / "src"
    git("init", str(src))
    git("lfs", "track", "*.bin", cwd=src)
    for i in range(objects):
        (src / f"o{i:05d}.bin").write_bytes(os.urandom(size))
    git("add", ".", cwd=src)
    git("commit", "-q", "-m", "objects", cwd=src)
    bare = work / "remote.git"
    git("init", "--bare", str(bare))
    git("remote", "add", "origin", str(bare), cwd=src)
    return src


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def connections(log: Path, start: int) -> int | None:
    """Distinct nginx connection numbers in *log* after byte *start* (None: not logged)."""
    with open(log, "rb") as fh:
        fh.seek(start)
        lines = fh.read().decode(errors="replace").splitlines()
    seen = {word for line in lines for word in line.split() if word.startswith("conn=")}
    return len(seen) if seen else None


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds of *roots* and their descendants (tools/bench/lfs_load.py's count)."""
    spec = importlib.util.spec_from_file_location("lfs_load", HERE / "lfs_load.py")
    assert spec and spec.loader
    if "lfs_load" not in sys.modules:
        module = importlib.util.module_from_spec(spec)
        sys.modules["lfs_load"] = module
        spec.loader.exec_module(module)
    return float(sum(sys.modules["lfs_load"].tree_cpu(roots).values()))


def push_round(git: Git, src: Path, side: Side, repo: str, objects: int) -> dict[str, Any]:
    """One `git lfs push --all` of every object to *side*; its numbers."""
    git("config", "lfs.url", f"{side.url}/{repo}.git/info/lfs", cwd=src)
    roots = [p.pid for p in side.procs]
    log_start = side.log.stat().st_size if side.log.exists() else 0
    server_before, client_before = tree_cpu(roots), children_cpu()
    app_before = worker_cpu(roots)
    started = time.perf_counter()
    git("lfs", "push", "--all", "origin", cwd=src)
    seconds = time.perf_counter() - started
    client = children_cpu() - client_before
    server = tree_cpu(roots) - server_before
    app = worker_cpu(roots) - app_before
    return {
        "side": side.name,
        "repo": repo,
        "seconds": seconds,
        "objects_per_s": objects / seconds,
        "server_cpu_ms_per_object": 1000 * server / objects,
        "app_cpu_ms_per_object": 1000 * app / objects,
        "client_cpu_ms_per_object": 1000 * client / objects,
        "connections": connections(side.log, log_start) if side.log.exists() else None,
    }


def stored_objects(work: Path, repo: str) -> int:
    """Objects lfs-server's local store holds for *repo* (-1 when it is not local)."""
    if os.environ.get("LFS_STORAGE", "local") != "local":
        return -1
    folder = work / "lfs-data" / "repos" / f"{repo}.git" / "objects"
    return sum(1 for p in folder.rglob("*") if p.is_file())


# --- S3 mode: engines, the boto3 floor, the gunicorn workers' CPU ---------------------------

S3_GOAL_MS = 3.0  # issue 25: app CPU per object <= boto3's floor + 3 ms


def start_engines(work: Path) -> tuple[Any, Any]:
    """Ceph RGW and PostgreSQL (tools/lfs_engines.py); the S3 + database settings go into
    os.environ, which lfs-server inherits."""
    from lfs_engines import start_ceph, start_postgres

    ceph = start_ceph()
    try:
        pg = start_postgres(fsync=True)
    except BaseException:
        ceph.stop()
        raise
    bucket = ceph.create_bucket("lfs-push")
    os.environ.update(ceph.s3_env(bucket))
    os.environ["LFS_DATABASE_URL"] = pg.create_database("lfs_push")
    os.environ["LFS_SECRET_KEY_FILE"] = str(work / "secret.key")
    return ceph, pg


def s3_store(work: Path) -> Any:
    """lfs-server's S3 store (its client, its configuration) for the caller's settings."""
    from lfs_server.backends.s3 import S3Store

    return S3Store(
        os.environ["LFS_S3_BUCKET"],
        tmp_dir=work / "floor-tmp",
        prefix=os.environ.get("LFS_S3_PREFIX", ""),
        endpoint=os.environ["LFS_S3_ENDPOINT"],
        region=os.environ.get("LFS_S3_REGION", "us-east-1"),
    )


def default_client() -> Any:
    """boto3's client with its default configuration (path-style addressing only)."""
    import boto3
    from botocore.config import Config as BotoConfig

    return boto3.session.Session().client(
        "s3",
        endpoint_url=os.environ["LFS_S3_ENDPOINT"],
        region_name=os.environ.get("LFS_S3_REGION", "us-east-1"),
        config=BotoConfig(s3={"addressing_style": "path"}),
    )


def boto3_floor(client: Any, store: Any, src: Path, repo: str, objects: int) -> float:
    """CPU ms per object of exactly the S3 calls one pushed object costs, in this process
    and thread: HEAD of the (missing) key, as the upload batch asks, then one PUT of the
    file's bytes, as the upload does."""
    import botocore.exceptions

    files = sorted(src.glob("o*.bin"))[:objects]
    oids = [hashlib.sha256(path.read_bytes()).hexdigest() for path in files]
    keys = [store.key(repo, oid) for oid in oids]  # the store's own layout
    bucket = store.bucket
    client.head_bucket(Bucket=bucket)  # connection made before the clock starts
    started = time.process_time()
    for path, key in zip(files, keys, strict=True):
        # 404: not stored yet, as for every object of a push.
        with contextlib.suppress(botocore.exceptions.ClientError):
            client.head_object(Bucket=bucket, Key=key)
        with open(path, "rb") as body:
            client.put_object(
                Bucket=bucket,
                Key=key,
                Body=body,
                ContentLength=path.stat().st_size,
                ContentType="application/octet-stream",
            )
    return 1000 * (time.process_time() - started) / len(files)


def s3_stored(client: Any, bucket: str, repo: str) -> int:
    """Objects the bucket holds under *repo*'s object keys."""
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{repo}.git/objects/"
    )
    return sum(len(page.get("Contents", [])) for page in pages)


def worker_cpu(roots: list[int]) -> float:
    """CPU seconds of the gunicorn workers under *roots* (processes whose parent is the
    gunicorn master): the app's own time, without nginx or gunicorn's master."""
    import psutil

    total = 0.0
    for root in roots:
        try:
            tree = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for proc in tree:
            try:
                with proc.oneshot():
                    parent = proc.parent()
                    if parent is None or "gunicorn" not in " ".join(parent.cmdline()):
                        continue
                    times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            total += times.user + times.system
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=500, help="objects per push (500)")
    parser.add_argument("--size-kib", type=int, default=4, help="object size in KiB (4)")
    parser.add_argument("--rounds", type=int, default=3, help="pushes to each server (3)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (2)")
    parser.add_argument(
        "--s3",
        action="store_true",
        help="run lfs-server on its own Ceph RGW + PostgreSQL and measure boto3's floor",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    args = parser.parse_args(argv)
    if args.objects < 1 or args.size_kib < 1 or args.rounds < 1 or args.workers < 1:
        parser.error("--objects, --size-kib, --rounds and --workers must be 1 or more")
    for tool in ("nginx", "git", "git-lfs"):
        if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin"):
            print(f"lfs_push: {tool} is needed for this benchmark", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="lfs-push-", dir="/tmp"))
    work.chmod(0o755)
    sides: list[Side] = []
    engines: tuple[Any, ...] = ()
    floors: list[dict[str, float]] = []
    try:
        if args.s3:
            engines = start_engines(work)
            store, plain = s3_store(work), default_client()
        sides = [start_lfs_server(work, args.workers), start_floor(work, args.workers)]
        git = Git(work, [s.url for s in sides])
        src = make_repo(git, work, args.objects, args.size_kib << 10)
        load_start = os.getloadavg()[0]
        rounds: list[dict[str, Any]] = []
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                result = push_round(git, src, side, f"bench/push{r}", args.objects)
                if side.name == "lfs-server":
                    result["stored"] = stored_objects(work, f"bench/push{r}")
                    if args.s3:
                        result["stored"] = s3_stored(store.client, store.bucket, f"bench/push{r}")
                    if result["stored"] not in (-1, args.objects):
                        raise SystemExit(
                            f"round {r}: lfs-server stored {result['stored']} of"
                            f" {args.objects} objects"
                        )
                rounds.append(result)
                print(
                    f"round {r + 1} {side.name:<10} {result['objects_per_s']:7.1f} obj/s"
                    f"  server {result['server_cpu_ms_per_object']:5.2f} ms CPU/object"
                    f"  client {result['client_cpu_ms_per_object']:5.2f}"
                    f"  connections {result['connections']}",
                    flush=True,
                )
            if args.s3:
                # The same objects, the same calls, single-threaded in this process; the
                # two clients alternate who goes first.
                clients = [("floor_ms", store.client), ("default_ms", plain)]
                floor: dict[str, float] = {}
                for label, client in clients if r % 2 == 0 else clients[::-1]:
                    repo = f"bench/boto{r}-{label}"
                    floor[label] = boto3_floor(client, store, src, repo, args.objects)
                app = next(x for x in reversed(rounds) if x["side"] == "lfs-server")
                floor["app_ms"] = app["app_cpu_ms_per_object"]
                floors.append(floor)
                print(
                    f"round {r + 1} boto3 floor {floor['floor_ms']:5.2f} ms CPU/object"
                    f" (default client {floor['default_ms']:5.2f});"
                    f" app (gunicorn workers) {floor['app_ms']:5.2f}",
                    flush=True,
                )
        load_end = os.getloadavg()[0]
    finally:
        for side in sides:
            side.stop()
        for engine in reversed(engines):
            engine.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, Any] = {}
    for name in SIDES:
        mine = [r for r in rounds if r["side"] == name]
        summary[name] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("objects_per_s", "server_cpu_ms_per_object", "client_cpu_ms_per_object")
        }
    ratio = summary["lfs-server"]["objects_per_s"] / summary["floor"]["objects_per_s"]
    store = os.environ.get("LFS_STORAGE", "local")
    print(
        f"\n{args.objects} x {args.size_kib} KiB, {args.rounds} rounds, {args.workers} workers,"
        f" store {store}; medians:"
    )
    for name in SIDES:
        s = summary[name]
        print(
            f"  {name:<10} {s['objects_per_s']:7.1f} obj/s  server"
            f" {s['server_cpu_ms_per_object']:5.2f} ms CPU/object  client"
            f" {s['client_cpu_ms_per_object']:5.2f} ms CPU/object"
        )
    goal = "met" if ratio >= 0.6 else "NOT met"
    print(f"  ratio lfs-server/floor {ratio:.2f}x (goal >= 0.60x for the local store: {goal})")
    s3: dict[str, float] = {}
    if args.s3:
        s3 = {key: statistics.median(f[key] for f in floors) for key in floors[0]}
        s3["over_floor_ms"] = s3["app_ms"] - s3["floor_ms"]
        met = "met" if s3["over_floor_ms"] <= S3_GOAL_MS else "NOT met"
        print(
            f"  S3: app (gunicorn workers) {s3['app_ms']:5.2f} ms CPU/object, boto3 floor"
            f" {s3['floor_ms']:5.2f} (HEAD + PUT with lfs-server's client; default client"
            f" {s3['default_ms']:5.2f})"
        )
        print(
            f"  S3: app - floor = {s3['over_floor_ms']:+.2f} ms/object"
            f" (goal <= +{S3_GOAL_MS:.0f} ms: {met})"
        )
    print(f"  load average {load_start:.2f} -> {load_end:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        write_json(
            args.json,
            {
                "objects": args.objects,
                "size_kib": args.size_kib,
                "workers": args.workers,
                "store": store,
                "rounds": rounds,
                "summary": summary,
                "ratio": ratio,
                "load_average": [load_start, load_end],
                **({"s3": s3, "s3_rounds": floors} if args.s3 else {}),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
