#!/usr/bin/env python3
"""Load test for lfs-server: concurrent clients, then a check that nothing was lost.

    tools/bench/lfs_load.py [--clients 32] [--duration 60] [--max-size-kib 65536]
                            [--workers 4] [--seed N] [--nodes N] [--repeat R]

Starts `lfs-server serve` (nginx + gunicorn) on a loopback port with a temporary data
directory, then runs N client threads for the given time. Each client mixes, like git-lfs:

- upload: batch, PUT (and verify, when the batch names it) of a new object (sizes
  log-uniform from --min-size-kib to --max-size-kib); the first four clients also upload
  the same object at the same moment (a barrier), every fifth operation;
- download: batch, then GET of a stored object, whole or a random Range (bytes compared);
- batch: a download batch naming stored and unknown objects;
- verify: POST verify of a stored object;
- locks: create (racing for a few shared paths: 201 or 409), list, unlock its own.

Transfers use the action's token (as git-lfs does); batch and lock calls log in with Basic
credentials. At the end every object any client was told was stored (PUT 200, plus
verify 200 where the batch named it, or the batch said the server already has it) is
fetched again and re-hashed: the oracle, our own, that nothing acknowledged was lost or
corrupted. Exits 1 if anything was lost or corrupted or any status was unexpected.
Needs nginx; loopback only.

What is measured against what: requests/s and p50/p99 latency per operation as the
clients saw them, against the same requests' time as the node's nginx logged it
($request_time: the server's share of the latency, without the generator's queueing);
the CPU time (psutil, user + system, reaped children included) of the server's process
tree per request, against the CPU this generator spent per request (they share the
machine's cores); and the machine's load average at the start and end, since other jobs
on a shared machine move every number. Percentiles come from tools/common.py. `--json
FILE` writes every number (tests read that, never the printed text).

The HTTP client is urllib3 (one keep-alive connection per host and client, as git-lfs
keeps; no retries, so every failure is counted). It costs the generator more CPU than
bare http.client did: 0.69 vs 0.42 ms per request at 8 clients (server 2.1 vs 2.0 ms per
request; 2026-12-04, 2 shared cores at load 9-11), which is why "load generator
ms/request" is printed next to the server's own: compare runs made with the same client.

`--clients 8,32,64 --repeat 3` runs the client counts one after another against the same
server(s), interleaved R times (so a change in the machine's other load hits every count
alike), and ends with the median requests/s and p99 per count and their ratio to the first.

The store and database come from the caller's environment (`LFS_STORAGE=s3`, `LFS_S3_*`,
AWS credentials, `LFS_DATABASE_URL`); by default a local store and SQLite. `--nodes N`
starts N servers sharing them and one signing key (it needs S3 and PostgreSQL), spreads
the clients over them round-robin, and re-fetches every object through the last node.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import free_port, percentile, wait_http, write_json  # tools/common.py

KIB = 1 << 10
MIB = 1 << 20
SCRIPT = str(Path(sys.executable).parent / "lfs-server")
PASSWORD = "load-pw"
REPO = "load/assets"
MEDIA_TYPE = "application/vnd.git-lfs+json"
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
# The request kinds whose p99 the goal "p99 <= 100 ms at 32 clients" is about.
GOAL_KINDS = ("batch", "download.batch", "upload.batch", "lock.list", "lock.create", "verify")


@dataclass
class Reply:
    """A whole HTTP answer."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Http:
    """One simulated client's HTTP: urllib3 pools of one keep-alive connection per host."""

    def __init__(self, user: str, password: str, timeout: float = 300.0) -> None:
        self.basic = urllib3.make_headers(basic_auth=f"{user}:{password}")["authorization"]
        # retries=False: a failed request is counted (status 599), never silently re-sent.
        self.pools = urllib3.PoolManager(maxsize=1, timeout=timeout, retries=False)

    def request(
        self,
        method: str,
        url: str,
        *,
        json_body: object = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, object] | None = None,
    ) -> Reply:
        """Send one request (Basic credentials unless *headers* carry their own
        Authorization); raise urllib3's HTTPError or OSError when it fails."""
        if params:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        head = {"Authorization": self.basic}  # the action's own header replaces it
        if json_body is not None:
            data = json.dumps(json_body).encode()
            head["Content-Type"] = MEDIA_TYPE
        head.update(headers or {})
        answer = self.pools.request(method, url, body=data, headers=head)
        return Reply(answer.status, answer.data)

    def close(self) -> None:
        self.pools.clear()


# What a failed request raises (connection refused or reset, timeouts, bad answers).
HTTP_ERRORS = (urllib3.exceptions.HTTPError, OSError)


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


@dataclass
class Context:
    """What one load phase's clients share."""

    buffer: bytes
    deadline: float
    barrier: threading.Barrier
    dup_clients: int
    stats: Stats
    node_urls: list[str]


class Client:
    """One simulated git-lfs client with its own keep-alive connections."""

    def __init__(self, index: int, args: argparse.Namespace, ctx: Context) -> None:
        self.index = index
        self.args = args
        self.ctx = ctx
        self.rng = random.Random(args.seed * 1000 + index)
        # --one-user: every client logs in as load0 (separates password checks from load).
        self.user = "load0" if args.one_user else f"load{index}"
        self.http = Http(self.user, PASSWORD)
        self.my_locks: list[str] = []
        # With several nodes, clients are spread over them round-robin.
        self.lfs = ctx.node_urls[index % len(ctx.node_urls)]
        self.done = 0

    # -- helpers ---------------------------------------------------------------------
    def call(self, op: str, method: str, url: str, **kw: Any) -> Reply | None:
        start = time.perf_counter()
        try:
            r = self.http.request(method, url, **kw)
        except HTTP_ERRORS as exc:
            self.ctx.stats.record(op, 599, time.perf_counter() - start, repr(exc))
            return None
        self.ctx.stats.record(op, r.status_code, time.perf_counter() - start, r.text[:200])
        return r

    def batch_call(self, op: str, operation: str, objects: list[dict[str, object]]) -> Reply | None:
        """POST a batch request; the answer when it is a 200."""
        r = self.call(
            op,
            "POST",
            self.lfs + "/objects/batch",
            json_body={"operation": operation, "objects": objects},
        )
        return r if r is not None and r.status_code == 200 else None

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
        r = self.batch_call("upload.batch", "upload", [{"oid": oid, "size": size}])
        if r is None:
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
        ver = actions.get("verify")
        if ver is None:  # as git-lfs: no verify action, the PUT's 200 means stored
            self.remember(oid, offset, size)
            return
        v = self.call(
            "upload.verify",
            "POST",
            ver["href"],
            json_body={"oid": oid, "size": size},
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
        r = self.batch_call("download.batch", "download", [{"oid": oid, "size": size}])
        if r is None:
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
        objects: list[dict[str, object]] = []
        for _ in range(self.rng.randint(1, 20)):
            sample = self.stored_sample()
            if sample is not None and self.rng.random() < 0.7:
                objects.append({"oid": sample[0], "size": sample[2]})
            else:
                objects.append({"oid": f"{self.rng.getrandbits(256):064x}", "size": 10})
        self.batch_call("batch", "download", objects)

    def verify(self) -> None:
        sample = self.stored_sample()
        if sample is not None:
            self.call(
                "verify",
                "POST",
                self.lfs + "/verify",
                json_body={"oid": sample[0], "size": sample[2]},
            )

    def locks(self) -> None:
        if self.my_locks and self.rng.random() < 0.5:
            lock_id = self.my_locks.pop()
            self.call("lock.unlock", "POST", f"{self.lfs}/locks/{lock_id}/unlock", json_body={})
            return
        # A few shared paths everyone races for, and some of one's own.
        path = (
            f"shared/{self.rng.randrange(4)}.psd"
            if self.rng.random() < 0.5
            else f"own/{self.user}/{self.rng.randrange(1000)}.psd"
        )
        r = self.call("lock.create", "POST", self.lfs + "/locks", json_body={"path": path})
        if r is not None and r.status_code == 201:
            self.my_locks.append(r.json()["lock"]["id"])
        self.call("lock.list", "GET", self.lfs + "/locks", params={"limit": 50})

    def release_locks(self) -> None:
        """Unlock what this client still holds, so the next phase starts from no locks."""
        for lock_id in self.my_locks:
            with contextlib.suppress(*HTTP_ERRORS):
                self.http.request("POST", f"{self.lfs}/locks/{lock_id}/unlock", json_body={})
        self.my_locks.clear()

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
        with contextlib.suppress(*HTTP_ERRORS):
            self.http.request("GET", self.lfs + "/locks", params={"limit": 1})

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
    """`lfs-server serve` on *port* with users load0..load{clients-1}; returns once healthy."""
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
    log = data.parent / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [SCRIPT, "serve", "--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=out,
            # nginx and gunicorn inherit the affinity: the server stays on its CPUs.
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, 60, lambda: log_tail(log))
    except AssertionError as exc:
        proc.kill()
        raise SystemExit(f"lfs_load: lfs-server did not start: {exc}") from None
    return proc


def log_tail(path: Path) -> str:
    """The end of a server's log, for a message saying why it did not start."""
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


def final_check(ctx: Context) -> tuple[int, int, int]:
    """Fetch and re-hash every object a client was told was stored: (checked, lost, bad)."""
    client = Http("load0", PASSWORD)
    lfs = ctx.node_urls[-1]
    lost = corrupted = 0
    items = list(ctx.stats.stored.items())
    for start in range(0, len(items), 100):
        chunk = items[start : start + 100]
        objects = [{"oid": oid, "size": size} for oid, (_off, size) in chunk]
        r = client.request(
            "POST",
            lfs + "/objects/batch",
            json_body={"operation": "download", "objects": objects},
        )
        if r.status_code != 200:
            raise SystemExit(f"lfs_load: the final batch answered {r.status_code}: {r.text}")
        for obj in r.json()["objects"]:
            if "actions" not in obj:
                lost += 1
                print(f"LOST {obj['oid']}: {obj.get('error')}", file=sys.stderr)
                continue
            action = obj["actions"]["download"]
            got = client.request("GET", action["href"], headers=action["header"])
            if got.status_code != 200:
                lost += 1
            elif hashlib.sha256(got.content).hexdigest() != obj["oid"]:
                corrupted += 1
                print(f"CORRUPTED {obj['oid']}", file=sys.stderr)
    client.close()
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


def tree_cpu(roots: list[int]) -> dict[str, float]:
    """CPU seconds (user + system, reaped children included) used so far by *roots* and
    their descendants, by program (nginx, gunicorn, other): the server's own time, not that
    of the machine's other jobs."""
    found: dict[str, float] = collections.defaultdict(float)
    for root in roots:
        try:
            tree = [psutil.Process(root)]
            tree += tree[0].children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for proc in tree:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cmdline = " ".join(proc.cmdline())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # ended meanwhile: its parent's children_* times hold it once reaped
            kind = (
                "nginx" if "nginx" in cmdline else "gunicorn" if "gunicorn" in cmdline else "other"
            )
            found[kind] += times.user + times.system + times.children_user + times.children_system
    return dict(found)


def own_cpu() -> float:
    """CPU seconds this process (the load generator: all client threads) has used."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def load_average() -> float:
    """The machine's 1-minute load average (printed next to every number)."""
    return os.getloadavg()[0]


@dataclass
class Servers:
    """The lfs-server node(s) a load runs against, sharing store, database and key."""

    root: Path
    procs: list[subprocess.Popen[bytes]]
    datas: list[Path]
    urls: list[str]

    def access_logs(self) -> list[Path]:
        return [d / "run/nginx-access.log" for d in self.datas]

    def leftover_uploads(self) -> int:
        """Upload bodies and temp files still on the nodes' disks."""
        leftovers = 0
        for data in self.datas:
            body_dir = data / "tmp/body"
            leftovers += len(list(body_dir.iterdir())) if body_dir.is_dir() else 0
            leftovers += len(list((data / "tmp").glob("upload-*")))
        return leftovers

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def start_servers(args: argparse.Namespace, users: int) -> Servers:
    """Start --nodes servers with --workers each (and *users* users) in a temporary folder."""
    root = Path(tempfile.mkdtemp(prefix="lfs-load-", dir="/tmp"))
    root.chmod(0o755)
    if args.nodes > 1:
        os.environ.setdefault("LFS_SECRET_KEY_FILE", str(root / "secret.key"))
    servers = Servers(root, [], [], [])
    try:
        for n in range(args.nodes):
            data = root / f"data{n}"
            data.mkdir(mode=0o755)
            port = free_port()
            # --pin-nodes: node n gets CPU n alone, as if each node were its own machine.
            cpus = {n % (os.cpu_count() or 1)} if args.pin_nodes else args.server_cpus
            servers.procs.append(start_server(data, port, args.workers, users, n == 0, cpus))
            servers.datas.append(data)
            servers.urls.append(f"http://127.0.0.1:{port}/{REPO}.git/info/lfs")
    except BaseException:
        servers.stop()
        raise
    return servers


@dataclass
class LoadResult:
    """One load phase's numbers, as printed."""

    clients: int
    nodes: int
    workers: int
    seconds: float
    requests: int
    requests_s: float
    p50_ms: dict[str, float]
    p99_ms: dict[str, float]
    nginx_p99_ms: dict[str, float]
    unexpected: int
    stored: int
    lost: int
    corrupted: int
    corrupt_reads: int
    leftovers: int
    server_cpu_ms: float  # CPU per request: the node(s)' nginx + gunicorn
    generator_cpu_ms: float  # CPU per request: this load generator
    load_start: float
    load_end: float

    counts: dict[str, int] = field(default_factory=dict)  # requests per operation
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)  # op -> status -> count
    unexpected_statuses: dict[str, int] = field(default_factory=dict)  # status -> count

    @property
    def ok(self) -> bool:
        bad = self.lost or self.corrupted or self.corrupt_reads or self.unexpected
        return not (bad or self.leftovers)

    @property
    def worst_goal_p99_ms(self) -> float:
        """The highest client-side p99 over the API kinds of GOAL_KINDS."""
        return max((self.p99_ms[k] for k in GOAL_KINDS if k in self.p99_ms), default=math.nan)


def run_phase(servers: Servers, args: argparse.Namespace, clients: int) -> LoadResult:
    """Run *clients* clients for --duration seconds against *servers*; print the report."""
    buffer = os.urandom(max(2 * args.max_size_kib * KIB, 4 * MIB))
    dup = min(4, clients)
    ctx = Context(
        node_urls=servers.urls,
        buffer=buffer,
        deadline=time.monotonic() + args.duration,
        barrier=threading.Barrier(dup),
        dup_clients=dup,
        stats=Stats(),
    )
    phase = argparse.Namespace(**{**vars(args), "clients": clients})
    workers = [Client(i, phase, ctx) for i in range(clients)]
    # Each client logs in once before the clock starts, as git-lfs does once per push:
    # a password check costs one scrypt per user and node, a one-time cost that would
    # otherwise fill the first seconds' tail (--cold keeps it in).
    if not args.cold:
        logins = [threading.Thread(target=c.login) for c in workers]
        for t in logins:
            t.start()
        for t in logins:
            t.join()
    logs = servers.access_logs()
    starts = [log_size(path) for path in logs]
    threads = [threading.Thread(target=c.run, daemon=True) for c in workers]
    roots = [proc.pid for proc in servers.procs]
    load_start = load_average()
    cpu_before, own_before = tree_cpu(roots), own_cpu()
    ctx.deadline = time.monotonic() + args.duration
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(args.duration)
    ctx.barrier.abort()  # release clients waiting for a duplicate round
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    cpu_after, own_after = tree_cpu(roots), own_cpu()
    load_end = load_average()
    windows = [(path, start, log_size(path)) for path, start in zip(logs, starts, strict=True)]
    for c in workers:
        c.release_locks()
        c.http.close()
    print("lfs_load: load done; re-fetching every stored object ...", flush=True)
    checked, lost, corrupted = final_check(ctx)
    stats = ctx.stats
    total = sum(len(v) for v in stats.latencies.values())
    used = {k: cpu_after.get(k, 0.0) - cpu_before.get(k, 0.0) for k in cpu_after}
    unexpected = sum(unexpected_by_status(stats).values())
    served = server_side(windows)
    result = LoadResult(
        clients=clients,
        nodes=args.nodes,
        workers=args.workers,
        seconds=elapsed,
        requests=total,
        requests_s=total / elapsed,
        p50_ms={op: 1000 * statistics.median(v) for op, v in stats.latencies.items()},
        p99_ms={op: 1000 * percentile(v, 99) for op, v in stats.latencies.items()},
        nginx_p99_ms={op: 1000 * percentile(v, 99) for op, v in served.items()},
        unexpected=unexpected,
        stored=checked,
        lost=lost,
        corrupted=corrupted,
        corrupt_reads=stats.corrupt_reads,
        leftovers=servers.leftover_uploads(),
        server_cpu_ms=1000 * sum(used.values()) / max(1, total),
        generator_cpu_ms=1000 * (own_after - own_before) / max(1, total),
        load_start=load_start,
        load_end=load_end,
        counts={op: len(v) for op, v in stats.latencies.items()},
        statuses={
            op: {str(s): n for s, n in sorted(c.items())} for op, c in stats.statuses.items()
        },
        unexpected_statuses=unexpected_by_status(stats),
    )
    report(result, stats, served, used, args)
    return result


def unexpected_by_status(stats: Stats) -> dict[str, int]:
    """How many answers had a status the operation does not expect, by status."""
    errors: collections.Counter[str] = collections.Counter()
    for op, counts in stats.statuses.items():
        for status, n in counts.items():
            if status not in EXPECTED[op]:
                errors[str(status)] += n
    return dict(sorted(errors.items()))


def report(
    result: LoadResult,
    stats: Stats,
    served: dict[str, list[float]],
    cpu: dict[str, float],
    args: argparse.Namespace,
) -> None:
    elapsed = result.seconds
    print(
        f"\nlfs_load: {result.clients} clients for {elapsed:.1f} s against {result.nodes} "
        f"{'node' if result.nodes == 1 else 'nodes'} of lfs-server serve "
        f"(nginx + gunicorn, {result.workers} workers each; store "
        f"{os.environ.get('LFS_STORAGE') or 'local'}, database "
        f"{'postgresql' if os.environ.get('LFS_DATABASE_URL') else 'sqlite'}); objects "
        f"{args.min_size_kib} KiB-{args.max_size_kib} KiB"
    )
    print(
        f"requests: {result.requests} ({result.requests_s:.1f}/s); uploaded "
        f"{stats.bytes_up / MIB:.1f} MiB ({stats.bytes_up / MIB / elapsed:.1f} MiB/s); "
        f"downloaded {stats.bytes_down / MIB:.1f} MiB "
        f"({stats.bytes_down / MIB / elapsed:.1f} MiB/s)"
    )
    print(f"{'operation':16s} {'count':>7s} {'p50 ms':>9s} {'p99 ms':>9s}  statuses")
    for op in sorted(stats.latencies):
        counts = dict(sorted(stats.statuses[op].items()))
        print(
            f"{op:16s} {len(stats.latencies[op]):7d} {result.p50_ms[op]:9.1f} "
            f"{result.p99_ms[op]:9.1f}  {counts}"
        )
    print(f"unexpected statuses: {result.unexpected_statuses or 'none'}")
    for line in stats.unexpected:
        print(f"  {line}")
    stored_bytes = sum(size for _off, size in stats.stored.values())
    print(
        f"objects told stored: {result.stored} ({stored_bytes / MIB:.1f} MiB); re-fetched and "
        f"re-hashed: {result.stored}; lost: {result.lost}; corrupted: {result.corrupted}; "
        f"corrupted reads during the run: {result.corrupt_reads}; "
        f"leftover upload temp files: {result.leftovers}"
    )
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
            f"{1000 * percentile(lat, 99):9.1f}"
        )
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(cpu.items()))
    print(
        f"CPU in the load window ({elapsed:.1f} s wall): server(s) {sum(cpu.values()):.1f} s "
        f"({parts}): {result.server_cpu_ms:.2f} ms/request; load generator "
        f"{result.generator_cpu_ms:.2f} ms/request"
    )
    print(
        f"worst p99 of the API calls ({', '.join(GOAL_KINDS)}): "
        f"{result.worst_goal_p99_ms:.1f} ms (goal at 32 clients on one node: <= 100 ms)"
    )
    print(
        f"machine: load average {result.load_start:.2f} at the start, {result.load_end:.2f} "
        f"at the end, {os.cpu_count()} CPUs"
    )


def sweep_summary(results: list[LoadResult]) -> None:
    """Medians and bests per client count over the repeats, and ratios to the first count.

    On a machine shared with other jobs the best run is the least disturbed one: the
    closest to what the server can do. The server's CPU per request does not depend on
    what the other jobs take, so it shows whether more clients make the server work harder.
    """
    by_clients: dict[int, list[LoadResult]] = collections.defaultdict(list)
    for r in results:
        by_clients[r.clients].append(r)
    counts = list(by_clients)
    first = by_clients[counts[0]]
    base_median = statistics.median(r.requests_s for r in first)
    base_best = max(r.requests_s for r in first)
    print(f"\nlfs_load sweep: {len(first)} interleaved run(s) per client count")
    print(
        f"{'clients':>7s} {'median req/s':>13s} {'ratio':>6s} {'best req/s':>11s} {'ratio':>6s} "
        f"{'p99 ms (median)':>16s} {'server ms/req':>14s} {'gen ms/req':>11s} "
        f"{'load avg':>9s}  runs: req/s (worst API p99 ms)"
    )
    medians, bests = [], []
    for n in counts:
        runs = by_clients[n]
        median = statistics.median(r.requests_s for r in runs)
        best = max(r.requests_s for r in runs)
        medians.append(median)
        bests.append(best)
        print(
            f"{n:7d} {median:13.1f} {median / base_median:5.2f}x {best:11.1f} "
            f"{best / base_best:5.2f}x "
            f"{statistics.median(r.worst_goal_p99_ms for r in runs):16.1f} "
            f"{statistics.median(r.server_cpu_ms for r in runs):14.2f} "
            f"{statistics.median(r.generator_cpu_ms for r in runs):11.2f} "
            f"{statistics.median(r.load_end for r in runs):9.2f}  "
            + ", ".join(f"{r.requests_s:.1f} ({r.worst_goal_p99_ms:.0f})" for r in runs)
        )
    path = " -> ".join(str(n) for n in counts)
    for label, values in (("medians", medians), ("bests", bests)):
        rises = all(b >= a for a, b in itertools.pairwise(values))
        print(f"requests/s ({label}) {'never fall' if rises else 'FALL'} as clients grow ({path})")


def cpu_list(text: str) -> set[int]:
    """`0,2-3` -> {0, 2, 3}."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def client_counts(text: str) -> list[int]:
    """`8,32,64` -> [8, 32, 64]."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected client counts such as 32 or 8,32,64, got {text!r}"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"client counts must be 1 or more, got {text!r}")
    return counts


# The node options of main() and their defaults, for callers that build their own
# namespace from load_arguments() (tools/bench/lfs_scale.py).
NODE_DEFAULTS: dict[str, object] = {
    "nodes": 1,
    "one_user": False,
    "cold": False,
    "server_cpus": None,
    "client_cpus": None,
    "pin_nodes": False,
}


def load_arguments() -> argparse.ArgumentParser:
    """The options of a load run, shared with tools/bench/lfs_scale.py (its load part)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("load")
    group.add_argument(
        "--clients",
        type=client_counts,
        default=[32],
        help="concurrent clients, or a list such as 8,32,64 (32)",
    )
    group.add_argument("--duration", type=float, default=60.0, help="seconds of load (%(default)s)")
    group.add_argument("--min-size-kib", type=int, default=1, help="smallest object (1 KiB)")
    group.add_argument(
        "--max-size-kib", type=int, default=64 * 1024, help="largest object in KiB (%(default)s)"
    )
    group.add_argument("--workers", type=int, default=4, help="gunicorn workers per node (4)")
    group.add_argument("--seed", type=int, default=1, help="random seed (1)")
    group.add_argument(
        "--repeat", type=int, default=1, help="run the client counts this many times (1)"
    )
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """parser.error() for load options out of range."""
    if args.duration <= 0 or args.repeat < 1 or args.workers < 1:
        parser.error("need --duration > 0, --repeat >= 1 and --workers >= 1")
    if not 0 < args.min_size_kib <= args.max_size_kib:
        parser.error("need 0 < --min-size-kib <= --max-size-kib")


def run(args: argparse.Namespace) -> list[LoadResult]:
    """Start the server(s), run every client count --repeat times, stop them."""
    users = 1 if args.one_user else max(args.clients)
    servers = start_servers(args, users)
    results = []
    try:
        if args.client_cpus:
            # The generator (Python threads) is CPU-hungry: keep it off the server's CPUs.
            os.sched_setaffinity(0, args.client_cpus)
        for _ in range(args.repeat):
            for clients in args.clients:
                results.append(run_phase(servers, args, clients))
    finally:
        servers.stop()
    if len(results) > 1:
        sweep_summary(results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[load_arguments()],
    )
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
    parser.add_argument(
        "--pin-nodes", action="store_true", help="pin node N to CPU N (one core per node)"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write every run's numbers to FILE as JSON"
    )
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    if args.nodes > 1 and not (
        os.environ.get("LFS_STORAGE") == "s3" and os.environ.get("LFS_DATABASE_URL")
    ):
        parser.error(
            "--nodes above 1 needs a shared store and database: set LFS_STORAGE=s3 (with"
            " LFS_S3_*) and LFS_DATABASE_URL"
        )
    if shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
        print("lfs_load: nginx is not installed (apt-get install nginx)", file=sys.stderr)
        return 2
    results = run(args)
    ok = all(r.ok for r in results)
    if args.json:
        write_json(args.json, {"ok": ok, "runs": [run_json(r) for r in results]})
    return 0 if ok else 1


def run_json(result: LoadResult) -> dict[str, object]:
    """One run's numbers for --json: the dataclass, its verdict and its worst API p99."""
    return {
        **dataclasses.asdict(result),
        "ok": result.ok,
        "worst_goal_p99_ms": result.worst_goal_p99_ms,
    }


if __name__ == "__main__":
    sys.exit(main())
