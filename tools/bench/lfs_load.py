#!/usr/bin/env python3
"""Load test for lfs-server: concurrent clients, then a check that nothing was lost.

    tools/bench/lfs_load.py [--clients 32] [--duration 60] [--max-size-kib 65536]
                            [--workers 4] [--seed N] [--nodes N]

Starts `lfs-server serve` (nginx + gunicorn) on a loopback port with a temporary data
directory, then runs N client threads for the given time. Each client mixes, like git-lfs:

- upload: batch, PUT, verify of a new object (sizes log-uniform from --min-size-kib to
  --max-size-kib); the first four clients also upload the same object at the same moment
  (a barrier), every fifth operation;
- download: batch, then GET of a stored object, whole or a random Range (bytes compared);
- batch: a download batch naming stored and unknown objects;
- verify: POST verify of a stored object;
- locks: create (racing for a few shared paths: 201 or 409), list, unlock its own.

At the end every object any client was told was stored (PUT + verify 200, or the batch said
the server already has it) is fetched again and re-hashed. Prints requests/s, bytes/s,
p50/p99 latency per operation, responses by status, unexpected statuses, and objects lost
or corrupted; exits 1 if any were lost or corrupted or any status was unexpected.
Needs nginx; loopback only.

The store and database come from the caller's environment (`LFS_STORAGE=s3`, `LFS_S3_*`,
AWS credentials, `LFS_DATABASE_URL`); by default a local store and SQLite. `--nodes N`
starts N servers sharing them and one signing key (it needs S3 and PostgreSQL), spreads
the clients over them round-robin, and re-fetches every object through the last node.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

KIB = 1 << 10
MIB = 1 << 20
SCRIPT = str(Path(sys.executable).parent / "lfs-server")
PASSWORD = "load-pw"
REPO = "load/assets"
EXPECTED = {
    "batch": {200},
    "upload.batch": {200},
    "upload.put": {200},
    "upload.verify": {200},
    "download.batch": {200},
    "download.get": {200},
    "download.range": {206},
    "verify": {200},
    "lock.create": {201, 409},
    "lock.list": {200},
    "lock.unlock": {200},
}


@dataclass
class Stats:
    """Shared by all clients (guarded by a lock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    statuses: dict[str, collections.Counter[int]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    unexpected: list[str] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0
    corrupt_reads: int = 0
    # oid -> (offset into the random buffer, size): what the server said it stored.
    stored: dict[str, tuple[int, int]] = field(default_factory=dict)

    def record(self, op: str, status: int, seconds: float, detail: str = "") -> bool:
        with self.lock:
            self.latencies[op].append(seconds)
            self.statuses[op][status] += 1
            if status not in EXPECTED[op]:
                if len(self.unexpected) < 20:
                    self.unexpected.append(f"{op}: {status} {detail[:200]}")
                return False
        return True


class Client:
    """One simulated git-lfs client with its own HTTP connection pool."""

    def __init__(self, index: int, args: argparse.Namespace, ctx: Context) -> None:
        self.index = index
        self.args = args
        self.ctx = ctx
        self.rng = random.Random(args.seed * 1000 + index)
        self.http = requests.Session()
        # --one-user: every client logs in as load0 (separates password checks from load).
        self.user = "load0" if args.one_user else f"load{index}"
        self.http.auth = (self.user, PASSWORD)
        self.my_locks: list[str] = []
        # With several nodes, clients are spread over them round-robin.
        self.lfs = ctx.node_urls[index % len(ctx.node_urls)]
        self.done = 0

    # -- helpers ---------------------------------------------------------------------
    def call(self, op: str, method: str, url: str, **kw: object) -> requests.Response | None:
        start = time.perf_counter()
        try:
            r = self.http.request(method, url, timeout=300, **kw)  # type: ignore[arg-type]
        except requests.RequestException as exc:
            self.ctx.stats.record(op, 599, time.perf_counter() - start, repr(exc))
            return None
        self.ctx.stats.record(op, r.status_code, time.perf_counter() - start, r.text[:200])
        return r

    def pick_size(self) -> int:
        low, high = math.log(self.args.min_size_kib * KIB), math.log(self.args.max_size_kib * KIB)
        return int(math.exp(self.rng.uniform(low, high)))

    def stored_sample(self) -> tuple[str, int, int] | None:
        with self.ctx.stats.lock:
            if not self.ctx.stats.stored:
                return None
            oid = self.rng.choice(list(self.ctx.stats.stored))
            offset, size = self.ctx.stats.stored[oid]
        return oid, offset, size

    # -- operations ------------------------------------------------------------------
    def upload(self, offset: int, size: int) -> None:
        body = memoryview(self.ctx.buffer)[offset : offset + size]
        oid = hashlib.sha256(body).hexdigest()
        r = self.call(
            "upload.batch",
            "POST",
            self.lfs + "/objects/batch",
            json={"operation": "upload", "objects": [{"oid": oid, "size": size}]},
        )
        if r is None or r.status_code != 200:
            return
        obj = r.json()["objects"][0]
        actions = obj.get("actions")
        if not actions:  # the server already has it
            if "error" not in obj:
                self.remember(oid, offset, size)
            return
        up = actions["upload"]
        put = self.call("upload.put", "PUT", up["href"], data=bytes(body), headers=up["header"])
        if put is None or put.status_code != 200:
            return
        with self.ctx.stats.lock:
            self.ctx.stats.bytes_up += size
        ver = actions["verify"]
        v = self.call(
            "upload.verify",
            "POST",
            ver["href"],
            json={"oid": oid, "size": size},
            headers=ver["header"],
        )
        if v is not None and v.status_code == 200:
            self.remember(oid, offset, size)

    def remember(self, oid: str, offset: int, size: int) -> None:
        with self.ctx.stats.lock:
            self.ctx.stats.stored.setdefault(oid, (offset, size))

    def download(self) -> None:
        sample = self.stored_sample()
        if sample is None:
            return
        oid, offset, size = sample
        r = self.call(
            "download.batch",
            "POST",
            self.lfs + "/objects/batch",
            json={"operation": "download", "objects": [{"oid": oid, "size": size}]},
        )
        if r is None or r.status_code != 200:
            return
        action = r.json()["objects"][0]["actions"]["download"]
        expected = self.ctx.buffer[offset : offset + size]
        if size > 1 and self.rng.random() < 0.4:
            start = self.rng.randrange(size)
            end = self.rng.randrange(start, size)
            got = self.call(
                "download.range",
                "GET",
                action["href"],
                headers={**action["header"], "Range": f"bytes={start}-{end}"},
            )
            want = expected[start : end + 1]
        else:
            got = self.call("download.get", "GET", action["href"], headers=action["header"])
            want = expected
        if got is not None and got.status_code in (200, 206):
            with self.ctx.stats.lock:
                self.ctx.stats.bytes_down += len(got.content)
                if got.content != want:
                    self.ctx.stats.corrupt_reads += 1

    def batch(self) -> None:
        objects = []
        for _ in range(self.rng.randint(1, 20)):
            sample = self.stored_sample()
            if sample is not None and self.rng.random() < 0.7:
                objects.append({"oid": sample[0], "size": sample[2]})
            else:
                objects.append({"oid": f"{self.rng.getrandbits(256):064x}", "size": 10})
        self.call(
            "batch",
            "POST",
            self.lfs + "/objects/batch",
            json={"operation": "download", "objects": objects},
        )

    def verify(self) -> None:
        sample = self.stored_sample()
        if sample is not None:
            self.call(
                "verify",
                "POST",
                self.lfs + "/verify",
                json={"oid": sample[0], "size": sample[2]},
            )

    def locks(self) -> None:
        if self.my_locks and self.rng.random() < 0.5:
            lock_id = self.my_locks.pop()
            self.call("lock.unlock", "POST", f"{self.lfs}/locks/{lock_id}/unlock", json={})
            return
        # A few shared paths everyone races for, and some of one's own.
        path = (
            f"shared/{self.rng.randrange(4)}.psd"
            if self.rng.random() < 0.5
            else f"own/{self.user}/{self.rng.randrange(1000)}.psd"
        )
        r = self.call("lock.create", "POST", self.lfs + "/locks", json={"path": path})
        if r is not None and r.status_code == 201:
            self.my_locks.append(r.json()["lock"]["id"])
        self.call("lock.list", "GET", self.lfs + "/locks", params={"limit": 50})

    def duplicate_upload(self) -> None:
        """The first clients upload the same new object at the same moment."""
        try:
            self.ctx.barrier.wait(timeout=60)
        except threading.BrokenBarrierError:
            return
        round_no = self.done // 5
        rng = random.Random(self.args.seed * 7 + round_no)
        size = int(math.exp(rng.uniform(math.log(KIB), math.log(self.args.max_size_kib * KIB))))
        offset = rng.randrange(len(self.ctx.buffer) - size)
        self.upload(offset, size)

    def login(self) -> None:
        """One authenticated request, not measured."""
        with contextlib.suppress(requests.RequestException):
            self.http.get(self.lfs + "/locks", params={"limit": 1}, timeout=300)

    def run(self) -> None:
        ops = [self.upload] * 35 + [self.download] * 30 + [self.batch] * 10
        ops += [self.verify] * 5 + [self.locks] * 20
        while time.monotonic() < self.ctx.deadline:
            if self.index < self.ctx.dup_clients and self.done % 5 == 4:
                self.duplicate_upload()
            else:
                op = self.rng.choice(ops)
                if op == self.upload:
                    size = self.pick_size()
                    self.upload(self.rng.randrange(len(self.ctx.buffer) - size), size)
                else:
                    op()
            self.done += 1


@dataclass
class Context:
    lfs: str
    buffer: bytes
    deadline: float
    barrier: threading.Barrier
    dup_clients: int
    stats: Stats
    node_urls: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Settings taken from the caller: where the shared store and database are.
BACKEND_VARS = ("LFS_STORAGE", "LFS_S3_", "LFS_DATABASE_URL", "LFS_SECRET_KEY_FILE")


def start_server(
    data: Path,
    port: int,
    workers: int,
    clients: int,
    add_users: bool = True,
    cpus: set[int] | None = None,
) -> subprocess.Popen[bytes]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LFS_") or k.startswith(BACKEND_VARS)
    }
    for i in range(clients if add_users else 0):
        subprocess.run(
            [SCRIPT, "user", "add", f"load{i}", "--grant", "*=write", "--password-stdin",
             "--update", "--data", str(data)],
            input=PASSWORD.encode(), check=True, env=env, capture_output=True,
        )  # fmt: skip
    env.update({"LFS_DATA_DIR": str(data), "LFS_LISTEN": f"127.0.0.1:{port}"})
    log = open(data.parent / f"serve-{port}.log", "wb")  # noqa: SIM115 (lives as long as the server)
    proc = subprocess.Popen(
        [SCRIPT, "serve", "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=log,
        # nginx and gunicorn inherit the affinity: the server stays on its CPUs.
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"lfs-server exited with {proc.returncode}; see {log.name}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).ok:
                return proc
        except (requests.ConnectionError, requests.Timeout):
            pass  # workers still starting
        time.sleep(0.1)
    raise SystemExit("lfs-server did not start")


def final_check(ctx: Context) -> tuple[int, int, int]:
    """Fetch and re-hash every object a client was told was stored: (checked, lost, bad)."""
    http = requests.Session()
    http.auth = ("load0", PASSWORD)
    lost = corrupted = 0
    items = list(ctx.stats.stored.items())
    for start in range(0, len(items), 100):
        chunk = items[start : start + 100]
        r = http.post(
            ctx.lfs + "/objects/batch",
            json={
                "operation": "download",
                "objects": [{"oid": oid, "size": size} for oid, (_off, size) in chunk],
            },
            timeout=60,
        )
        r.raise_for_status()
        for obj in r.json()["objects"]:
            if "actions" not in obj:
                lost += 1
                print(f"LOST {obj['oid']}: {obj.get('error')}", file=sys.stderr)
                continue
            action = obj["actions"]["download"]
            got = http.get(action["href"], headers=action["header"], timeout=300)
            if got.status_code != 200:
                lost += 1
            elif hashlib.sha256(got.content).hexdigest() != obj["oid"]:
                corrupted += 1
                print(f"CORRUPTED {obj['oid']}", file=sys.stderr)
    return len(items), lost, corrupted


# What nginx logged: the request line and $request_time (first byte read to last byte sent).
_LOG_RE = re.compile(r'"(\w+) (\S+) HTTP/[\d.]+" status=(\d+) .* time=([\d.]+)')


def server_op(method: str, path: str) -> str:
    """The operation a logged request was (the client's names, batches together)."""
    if path.endswith("/objects/batch"):
        return "batch (all kinds)"
    if "/upload/" in path:
        return "upload.put"
    if "/info/lfs/objects/" in path:
        return "download.get"
    if path.endswith("/verify") and "/locks/" not in path:
        return "verify"
    if "/locks" in path:
        return "locks (all kinds)"
    return "other"


def server_side(logs: list[tuple[Path, int, int]]) -> dict[str, list[float]]:
    """Latency per operation as the nodes' nginx logged it, between two log offsets."""
    found: dict[str, list[float]] = collections.defaultdict(list)
    for path, start, end in logs:
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                text = fh.read(end - start).decode(errors="replace")
        except FileNotFoundError:
            continue
        for match in _LOG_RE.finditer(text):
            method, url, _status, seconds = match.groups()
            found[server_op(method, url)].append(float(seconds))
    return found


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(ctx: Context, args: argparse.Namespace, elapsed: float, check: tuple[int, int, int],
           leftovers: int) -> int:  # fmt: skip
    stats = ctx.stats
    total = sum(len(v) for v in stats.latencies.values())
    print(
        f"\nlfs_load: {args.clients} clients for {elapsed:.1f} s against {args.nodes} "
        f"{'node' if args.nodes == 1 else 'nodes'} of lfs-server serve "
        f"(nginx + gunicorn, {args.workers} workers each; store "
        f"{os.environ.get('LFS_STORAGE') or 'local'}, database "
        f"{'postgresql' if os.environ.get('LFS_DATABASE_URL') else 'sqlite'}); objects "
        f"{args.min_size_kib} KiB-{args.max_size_kib} KiB"
    )
    print(
        f"requests: {total} ({total / elapsed:.1f}/s); uploaded {stats.bytes_up / MIB:.1f} MiB "
        f"({stats.bytes_up / MIB / elapsed:.1f} MiB/s); downloaded "
        f"{stats.bytes_down / MIB:.1f} MiB ({stats.bytes_down / MIB / elapsed:.1f} MiB/s)"
    )
    print(f"{'operation':16s} {'count':>7s} {'p50 ms':>9s} {'p99 ms':>9s}  statuses")
    for op in sorted(stats.latencies):
        lat = stats.latencies[op]
        counts = dict(sorted(stats.statuses[op].items()))
        print(
            f"{op:16s} {len(lat):7d} {1000 * statistics.median(lat):9.1f} "
            f"{1000 * pct(lat, 0.99):9.1f}  {counts}"
        )
    errors: collections.Counter[int] = collections.Counter()
    for op, counts in stats.statuses.items():
        for status, n in counts.items():
            if status not in EXPECTED[op]:
                errors[status] += n
    print(f"unexpected statuses: {dict(errors) or 'none'}")
    for line in stats.unexpected:
        print(f"  {line}")
    checked, lost, corrupted = check
    stored_bytes = sum(size for _off, size in stats.stored.values())
    print(
        f"objects told stored: {checked} ({stored_bytes / MIB:.1f} MiB); re-fetched and "
        f"re-hashed: {checked}; lost: {lost}; corrupted: {corrupted}; "
        f"corrupted reads during the run: {stats.corrupt_reads}; "
        f"leftover upload temp files: {leftovers}"
    )
    bad = lost or corrupted or stats.corrupt_reads or errors or leftovers
    return 1 if bad else 0


def cpu_list(text: str) -> set[int]:
    """`0,2-3` -> {0, 2, 3}."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (32)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (60)")
    parser.add_argument("--min-size-kib", type=int, default=1, help="smallest object (1 KiB)")
    parser.add_argument(
        "--max-size-kib", type=int, default=64 * 1024, help="largest object (65536 = 64 MiB)"
    )
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers (4)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument(
        "--nodes", type=int, default=1, help="servers sharing store, database and key (1)"
    )
    parser.add_argument(
        "--one-user", action="store_true", help="all clients log in as the same user"
    )
    parser.add_argument("--cold", action="store_true", help="measure the clients' first logins too")
    parser.add_argument(
        "--server-cpus", type=cpu_list, help="pin the server(s) to these CPUs, e.g. 0"
    )
    parser.add_argument(
        "--client-cpus", type=cpu_list, help="pin this load generator to these CPUs, e.g. 1"
    )
    args = parser.parse_args(argv)
    if args.nodes > 1 and not (
        os.environ.get("LFS_STORAGE") == "s3" and os.environ.get("LFS_DATABASE_URL")
    ):
        parser.error(
            "--nodes above 1 needs a shared store and database: set LFS_STORAGE=s3 (with"
            " LFS_S3_*) and LFS_DATABASE_URL"
        )
    if args.clients < 1 or args.duration <= 0 or not 0 < args.min_size_kib <= args.max_size_kib:
        parser.error("need --clients >= 1, --duration > 0, 0 < --min-size-kib <= --max-size-kib")
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        print("lfs_load: nginx is not installed (apt-get install nginx)", file=sys.stderr)
        return 2

    root = Path(tempfile.mkdtemp(prefix="lfs-load-", dir="/tmp"))
    root.chmod(0o755)
    if args.nodes > 1:
        os.environ.setdefault("LFS_SECRET_KEY_FILE", str(root / "secret.key"))
    buffer = os.urandom(max(2 * args.max_size_kib * KIB, 4 * MIB))
    print(f"lfs_load: {len(buffer) // MIB} MiB of random data; objects are slices of it")
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    datas: list[Path] = []
    try:
        users = 1 if args.one_user else args.clients
        for n in range(args.nodes):
            data = root / f"data{n}"
            data.mkdir(mode=0o755)
            ports.append(free_port())
            datas.append(data)
            procs.append(
                start_server(data, ports[-1], args.workers, users, n == 0, args.server_cpus)
            )
        if args.client_cpus:
            # The generator (32 Python threads) is CPU-hungry: keep it off the server's CPUs.
            os.sched_setaffinity(0, args.client_cpus)
        urls = [f"http://127.0.0.1:{port}/{REPO}.git/info/lfs" for port in ports]
        dup = min(4, args.clients)
        ctx = Context(
            lfs=urls[-1],
            node_urls=urls,
            buffer=buffer,
            deadline=time.monotonic() + args.duration,
            barrier=threading.Barrier(dup),
            dup_clients=dup,
            stats=Stats(),
        )
        clients = [Client(i, args, ctx) for i in range(args.clients)]
        # Each client logs in once before the clock starts, as git-lfs does once per push:
        # a password check costs one scrypt per user and node, a one-time cost that would
        # otherwise fill the first seconds' tail (--cold keeps it in).
        if not args.cold:
            logins = [threading.Thread(target=c.login) for c in clients]
            for t in logins:
                t.start()
            for t in logins:
                t.join()
        ctx.deadline = time.monotonic() + args.duration
        starts = [log_size(d / "run/nginx-access.log") for d in datas]
        threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
        started = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(args.duration)
        ctx.barrier.abort()  # release clients waiting for a duplicate round
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        logs = [
            (d / "run/nginx-access.log", start, log_size(d / "run/nginx-access.log"))
            for d, start in zip(datas, starts, strict=True)
        ]
        print("lfs_load: load done; re-fetching every stored object ...")
        check = final_check(ctx)
        leftovers = 0
        for data in datas:
            body_dir = data / "tmp/body"
            leftovers += len(list(body_dir.iterdir())) if body_dir.is_dir() else 0
            leftovers += len(list((data / "tmp").glob("upload-*")))
        status = report(ctx, args, elapsed, check, leftovers)
        served = server_side(logs)
        total = sum(len(v) for v in served.values())
        print(
            f"server side (nginx $request_time, load window): {total} requests "
            f"({total / elapsed:.1f}/s)"
        )
        print(f"{'operation':20s} {'count':>7s} {'p50 ms':>9s} {'p99 ms':>9s}")
        for op in sorted(served):
            lat = served[op]
            print(
                f"{op:20s} {len(lat):7d} {1000 * statistics.median(lat):9.1f} "
                f"{1000 * pct(lat, 0.99):9.1f}"
            )
        return status
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
