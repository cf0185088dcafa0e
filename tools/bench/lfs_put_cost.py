#!/usr/bin/env python3
"""Where a small upload's CPU goes: the budget behind `lfs_push.py`'s ratio, in one process.

    tools/bench/lfs_put_cost.py [--objects 2000] [--size-kib 4] [--repeats 5] [--json FILE]

Measures CPU time per object (time.process_time, one thread, so other load on the machine
moves it little), the four parts interleaved --repeats times, medians:

- **app**: lfs-server's WSGI app answering the request nginx sends for a small upload (the
  body inline, the proxy secret, an action token), as gunicorn calls it: routing, the token
  and user checks, the durable publish, the access log line (to a file) and the metrics;
- **store**: the local store's `publish_stream` alone (write, hash, fsync, rename into the
  object's folder, fsync that folder), into a fresh repository like the app's;
- **syscalls**: the same durable publish as bare `os` calls in a loop (create, write,
  fsync, rename, fsync the folder): what any server that keeps the object safe pays;
- **floor**: `lfs_push.py`'s trivial app answering the same request (reads the body,
  stores nothing).

`lfs_push.py` measures the whole stack (git-lfs, nginx, gunicorn) against that floor; this
shows which part of the difference is the app's own Python (app - store), the store's
bookkeeping (store - syscalls) and the durability every correct server pays (syscalls).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This folder's lfs_server.py (another bench) would shadow the lfs_server package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
from common import write_json  # noqa: E402 (tools/common.py)

USER = "bench"
PARTS = ("app", "store", "syscalls", "floor")


class Workload:
    """N random objects, and for each the WSGI environ nginx would send for its PUT."""

    def __init__(self, work: Path, objects: int, size: int) -> None:
        from lfs_server.app import create_app
        from lfs_server.config import Config
        from lfs_server.users import load_users

        config = Config(
            data_dir=work / "data", body_mode="nginx", access_log=str(work / "access.log")
        )
        users = load_users(config)
        users.add(USER, "unused-password", {"*": "write"})
        users.save()
        self.app = create_app(config)
        self.services = self.app.extensions["lfs"]
        self.bodies = [os.urandom(size) for _ in range(objects)]
        self.oids = [hashlib.sha256(b).hexdigest() for b in self.bodies]
        self.round = 0

    def environs(self, repo: str) -> list[dict[str, Any]]:
        """One upload request per object into *repo* (tokens issued now, valid an hour)."""
        expires = int(time.time()) + 3600
        signer = self.services.signer
        out = []
        for body, oid in zip(self.bodies, self.oids, strict=True):
            token = signer.issue(repo, "upload", oid, len(body), USER, expires)
            out.append(
                {
                    "REQUEST_METHOD": "PUT",
                    "SCRIPT_NAME": "",
                    "PATH_INFO": f"/{repo}.git/info/lfs/upload/{oid}/{len(body)}",
                    "QUERY_STRING": "",
                    "SERVER_NAME": "127.0.0.1",
                    "SERVER_PORT": "8080",
                    "SERVER_PROTOCOL": "HTTP/1.1",
                    "REMOTE_ADDR": "127.0.0.1",
                    "wsgi.url_scheme": "http",
                    "wsgi.version": (1, 0),
                    "wsgi.errors": sys.stderr,
                    "wsgi.multithread": True,
                    "wsgi.multiprocess": True,
                    "wsgi.run_once": False,
                    "CONTENT_LENGTH": str(len(body)),
                    "CONTENT_TYPE": "application/octet-stream",
                    "HTTP_HOST": "127.0.0.1:8080",
                    "HTTP_AUTHORIZATION": f"Bearer {token}",
                    "HTTP_X_REQUEST_ID": os.urandom(16).hex(),
                    "HTTP_X_FORWARDED_FOR": "127.0.0.1",
                    "HTTP_X_LFS_PROXY_AUTH": self.services.proxy_secret,
                    "HTTP_X_LFS_BODY_INLINE": "1",
                }
            )
        return out


def serve_all(app: Callable[..., Iterable[bytes]], workload: Workload, repo: str) -> float:
    """CPU seconds for *app* to answer every object's PUT into *repo* (each must be 200)."""
    environs = workload.environs(repo)
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        statuses.append(status)

    started = time.process_time()
    for environ, body in zip(environs, workload.bodies, strict=True):
        environ["wsgi.input"] = io.BytesIO(body)
        answer = app(environ, start_response)
        for _chunk in answer:
            pass
        close = getattr(answer, "close", None)
        if close is not None:
            close()
    seconds = time.process_time() - started
    if any(not s.startswith("200") for s in statuses):
        raise SystemExit(f"{repo}: not every PUT was answered 200: {sorted(set(statuses))}")
    return seconds


def store_all(workload: Workload, repo: str) -> float:
    """CPU seconds for the local store to publish every object into *repo*."""
    store = workload.services.store
    started = time.process_time()
    for body, oid in zip(workload.bodies, workload.oids, strict=True):
        store.publish_stream(io.BytesIO(body), repo, oid, len(body))
    return time.process_time() - started


def syscalls_all(workload: Workload, folder: Path) -> float:
    """CPU seconds for bare create/write/fsync/rename/fsync-folder of every object, each
    into its own new fan-out folder pair as the store's layout gives most small objects."""
    tmp = folder / "tmp"
    tmp.mkdir(parents=True)
    started = time.process_time()
    for body, oid in zip(workload.bodies, workload.oids, strict=True):
        name = tmp / oid
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        os.write(fd, body)
        os.fsync(fd)
        os.close(fd)
        target = folder / oid[:2] / oid[2:4]
        target.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
        os.rename(name, oid, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        os.close(dir_fd)
    return time.process_time() - started


def _load_floor_app() -> Callable[..., Iterable[bytes]]:
    """lfs_push.py's floor app, loaded by path (this folder is not on sys.path)."""
    spec = importlib.util.spec_from_file_location("lfs_push", HERE / "lfs_push.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app: Callable[..., Iterable[bytes]] = module.floor_app
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=2000, help="objects per part (2000)")
    parser.add_argument("--size-kib", type=int, default=4, help="object size in KiB (4)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    args = parser.parse_args(argv)
    if args.objects < 1 or args.repeats < 1 or not 1 <= args.size_kib <= 97:
        parser.error("--objects and --repeats must be >= 1, --size-kib 1..97 (a small upload)")

    floor_app = _load_floor_app()
    with tempfile.TemporaryDirectory(prefix="lfs-put-cost-") as tmp:
        work = Path(tmp)
        workload = Workload(work, args.objects, args.size_kib * 1024)
        samples: dict[str, list[float]] = {part: [] for part in PARTS}
        for r in range(args.repeats):
            per_object = {
                "app": serve_all(workload.app, workload, f"bench/app{r}"),
                "store": store_all(workload, f"bench/store{r}"),
                "syscalls": syscalls_all(workload, work / f"bare{r}"),
                "floor": serve_all(floor_app, workload, f"bench/floor{r}"),
            }
            for part, seconds in per_object.items():
                samples[part].append(1000 * seconds / args.objects)
            print(
                f"round {r + 1}: "
                + "  ".join(f"{p} {samples[p][-1]:.3f}" for p in PARTS)
                + " ms CPU/object",
                flush=True,
            )
    med = {part: statistics.median(values) for part, values in samples.items()}
    print(f"\n{args.objects} x {args.size_kib} KiB, {args.repeats} rounds; medians, ms CPU/object:")
    print(f"  app       {med['app']:.3f}  (lfs-server's answer to one small PUT)")
    print(f"  store     {med['store']:.3f}  (of which the durable publish through the store)")
    print(f"  syscalls  {med['syscalls']:.3f}  (of which the bare system calls of that publish)")
    print(f"  floor     {med['floor']:.3f}  (the trivial app's answer)")
    print(
        f"  the app's own Python (app - store) {med['app'] - med['store']:.3f},"
        f" the store's bookkeeping (store - syscalls) {med['store'] - med['syscalls']:.3f}"
    )
    if args.json:
        write_json(args.json, {"args": vars(args), "samples": samples, "medians": med})
    return 0


if __name__ == "__main__":
    sys.exit(main())
