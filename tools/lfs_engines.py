"""Real engines for lfs-server's scale-out tests and benchmarks: a single-node Ceph cluster
with the RADOS Gateway (an S3 server) and a PostgreSQL 15 server, each started in a
temporary folder on loopback. tests/lfs-server/ and tools/bench/lfs_scale.py import it.

Nothing is installed here: the Debian packages (`ceph-mon ceph-mgr ceph-osd radosgw
ceph-common`, `postgresql`) come from tools/test. Every daemon is started by us, recorded
by its PID and stopped by that PID only; the folders are removed afterwards.

Facts behind the Ceph settings (each one cost time to find): with auth off radosgw must use
`ms mon client mode = crc` or it never serves; the beast frontend needs `tcp_nodelay=1` or
small GETs take ~44 ms each with keep-alive clients; pools of 8 PGs with autoscale off stay
under the per-OSD PG limit of a single OSD.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import requests
from common import free_port

CEPH_COMMANDS = (
    "ceph-mon", "ceph-mgr", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool",
)  # fmt: skip
PG_BIN = Path("/usr/lib/postgresql/15/bin")
ACCESS_KEY = "LFSTESTACCESSKEY0001"
SECRET_KEY = "lfstestsecretkey000000000000000000000001"


class EngineError(Exception):
    """An engine could not start; the message names what is missing or what failed."""


def _wait(what: str, check: object, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():  # type: ignore[operator]
                return
        time.sleep(0.25)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise EngineError(f"timed out after {timeout:.0f} s waiting for {what}{tail}")


def _stop_pid(pid: int, timeout: float = 30.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def missing_ceph() -> str | None:
    """None when every Ceph command is installed, else what to install."""
    path = f"{os.environ.get('PATH', '')}:/usr/bin:/usr/sbin"
    absent = [c for c in CEPH_COMMANDS if shutil.which(c, path=path) is None]
    if absent:
        return (
            f"Ceph ({', '.join(absent)} not found: apt-get install ceph-mon ceph-mgr ceph-osd"
            " radosgw ceph-common)"
        )
    return None


def missing_postgres() -> str | None:
    """None when PostgreSQL 15's server programs are installed, else what to install."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return f"PostgreSQL 15 ({PG_BIN}/initdb not found: apt-get install postgresql)"
    return None


@dataclasses.dataclass
class Ceph:
    """A running single-node Ceph cluster whose RADOS Gateway serves S3 on loopback."""

    base: Path
    rgw_port: int
    pids: dict[str, int]
    conf: Path

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self.rgw_port}"

    def s3_env(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The environment an lfs-server node needs to keep its objects in *bucket*."""
        return {
            "LFS_STORAGE": "s3",
            "LFS_S3_ENDPOINT": self.endpoint,
            "LFS_S3_BUCKET": bucket,
            "LFS_S3_REGION": "us-east-1",
            "LFS_S3_PREFIX": prefix,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def client(self) -> object:
        """A boto3 S3 client for this gateway (path-style: `bucket.localhost` does not resolve)."""
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=BotoConfig(s3={"addressing_style": "path"}),
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket *name* and return it."""
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]
        return name

    def _launch(self, name: str, cmd: list[str]) -> int:
        log = open(self.base / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 (child keeps it)
        proc = subprocess.Popen(
            [*cmd, "-f"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.pids[name] = proc.pid
        return proc.pid

    def stop_gateway(self) -> None:
        """Stop radosgw only (the S3 endpoint goes away; the cluster keeps its data)."""
        pid = self.pids.pop("rgw.a", None)
        if pid is not None:
            _stop_pid(pid)

    def start_gateway(self) -> None:
        """(Re)start radosgw and wait until it answers HTTP."""
        self._launch("rgw.a", ["radosgw", "-c", str(self.conf), "-n", "client.rgw.a"])
        _wait("radosgw to answer HTTP", lambda: requests.get(self.endpoint, timeout=2).ok, 180,
              self.base / "log" / "client.rgw.a.log")  # fmt: skip

    def stop(self) -> None:
        """Stop every daemon (gateway, OSD, manager, monitor) and remove the folder."""
        for name in sorted(self.pids, key=lambda n: ("rgw", "osd", "mgr", "mon").index(n[:3])):
            _stop_pid(self.pids[name])
        self.pids.clear()
        shutil.rmtree(self.base, ignore_errors=True)


def start_ceph(with_mgr: bool = False) -> Ceph:
    """Create and start a fresh cluster (mon, optional mgr, one BlueStore OSD on a sparse
    file, radosgw) in a temporary folder; return it once S3 answers with our user."""
    missing = missing_ceph()
    if missing:
        raise EngineError(f"{missing} is not installed")
    base = Path(tempfile.mkdtemp(prefix="lfs-ceph-"))
    data, log, run = base / "data", base / "log", base / "run"
    for path in (data, log, run, base / "crash"):
        path.mkdir()
    mon_port, rgw_port = free_port(), free_port()
    conf = base / "ceph.conf"
    fsid = str(uuid.uuid4())
    conf.write_text(
        f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = {run}
admin socket = {run}/$cluster-$name.asok
pid file = {run}/$name.pid
log file = {log}/$name.log
mon cluster log file = {log}/cluster.log
crash dir = {base}/crash
keyring = {base}/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 2
mon data avail crit = 1
mgr initial modules = iostat
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false

[mon]
mon data = {data}/mon.$id
[mgr]
mgr data = {data}/mgr.$id
[osd]
osd data = {data}/osd.$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {8 << 30}
bluestore fsck on mkfs = false
bluestore fsck on mount = false
osd memory target = 1073741824
[client.rgw.a]
rgw data = {data}/rgw.a
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw dns name = localhost
ms mon client mode = crc
"""
    )
    ceph = Ceph(base, rgw_port, {}, conf)

    def run_cmd(*cmd: str, timeout: float = 60) -> str:
        result = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if result.returncode != 0:
            raise EngineError(f"{' '.join(cmd[:3])} failed: {result.stderr.strip()[-2000:]}")
        return result.stdout

    try:
        keyring = str(base / "keyring")
        run_cmd("ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.",
                "--cap", "mon", "allow *")  # fmt: skip
        run_cmd("monmaptool", "--create", "--fsid", fsid, "--addv", "a",
                f"[v2:127.0.0.1:{mon_port}]", str(base / "monmap"))  # fmt: skip
        run_cmd("ceph-mon", "-c", str(conf), "-i", "a", "--mkfs", "--monmap",
                str(base / "monmap"), "--keyring", keyring)  # fmt: skip
        ceph._launch("mon.a", ["ceph-mon", "-c", str(conf), "-i", "a"])
        ceph_cli = ["ceph", "-c", str(conf), "--connect-timeout", "10"]
        _wait("the Ceph monitor", lambda: run_cmd(*ceph_cli, "mon", "stat", timeout=15), 60,
              log / "mon.a.log")  # fmt: skip
        if with_mgr:
            (data / "mgr.x").mkdir()
            ceph._launch("mgr.x", ["ceph-mgr", "-c", str(conf), "-i", "x"])
        osd_uuid = str(uuid.uuid4())
        osd_id = run_cmd(*ceph_cli, "osd", "new", osd_uuid).strip()
        (data / f"osd.{osd_id}").mkdir()
        run_cmd("ceph-osd", "-c", str(conf), "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid,
                timeout=120)  # fmt: skip
        ceph._launch(f"osd.{osd_id}", ["ceph-osd", "-c", str(conf), "-i", osd_id])
        _wait("the OSD to come up",
              lambda: '"up":1' in run_cmd(*ceph_cli, "osd", "dump", "-f", "json", timeout=15),
              120, log / f"osd.{osd_id}.log")  # fmt: skip
        (data / "rgw.a").mkdir()
        ceph.start_gateway()
        run_cmd("radosgw-admin", "-c", str(conf), "user", "create", "--uid", "lfs",
                "--display-name", "lfs", "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY,
                timeout=60)  # fmt: skip
    except BaseException:
        ceph.stop()
        raise
    return ceph


@dataclasses.dataclass
class Postgres:
    """A running PostgreSQL 15 server on loopback, owned by a non-root user."""

    base: Path
    port: int
    user: str
    # The server options pg_ctl starts it with (start_postgres sets them).
    options: str = ""

    def url(self, database: str = "postgres") -> str:
        """A libpq URL for *database* (trust authentication on loopback)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database *name*; return its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        return self.url(name)

    def _pg_ctl(self, *args: str) -> None:
        _run_as(self.user, [str(PG_BIN / "pg_ctl"), "-D", str(self.base / "data"), *args])

    def start(self) -> None:
        """Start the server on its data folder (again, after `halt`)."""
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.base / "server.log"),
                     "-o", self.options)  # fmt: skip

    def halt(self) -> None:
        """Stop the server (fast shutdown: connections are closed), keeping its data."""
        self._pg_ctl("stop", "-m", "fast", "-w", "-t", "30")

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        with contextlib.suppress(EngineError, subprocess.SubprocessError):
            self.halt()
        shutil.rmtree(self.base, ignore_errors=True)


def _run_as(user: str, cmd: list[str]) -> None:
    name = Path(cmd[0]).name
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", user, "--", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise EngineError(f"{name} failed: {result.stderr.strip()[-2000:]}")


def start_postgres(*, fsync: bool = False) -> Postgres:
    """initdb + pg_ctl start in a temporary folder; as root, the server runs as `postgres`.

    *fsync* off (the default) suits throwaway test data; benchmarks turn it on.
    """
    missing = missing_postgres()
    if missing:
        raise EngineError(f"{missing} is not installed")
    user = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        user = "postgres"
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise EngineError(
                "PostgreSQL must not run as root and user 'postgres' does not exist"
            ) from None
    base = Path(tempfile.mkdtemp(prefix="lfs-pg-"))
    base.chmod(0o755)
    if os.geteuid() == 0:
        info = pwd.getpwnam(user)
        os.chown(base, info.pw_uid, info.pw_gid)
    port = free_port()
    options = (
        f"-h 127.0.0.1 -p {port} -k {base} -c max_connections=200"
        f" -c fsync={'on' if fsync else 'off'}"
    )
    server = Postgres(base, port, user, options)
    try:
        _run_as(user, [str(PG_BIN / "initdb"), "-D", str(base / "data"), "-U", user,
                       "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])  # fmt: skip
        server.start()
    except BaseException:
        server.stop()
        raise
    return server
