"""`lfs-server serve`: run nginx and gunicorn as one supervised unit.

gunicorn listens on a unix socket in the run directory that only nginx uses; nginx listens
on the public address. Both run in their own sessions so a terminal's Ctrl-C reaches only
this supervisor, which then stops them in order. A child that dies on its own is reported
and the other is stopped: the unit never keeps running half-broken.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from lfs_server.accesslog import check_access_log
from lfs_server.authcache import KEY_ENV as AUTH_CACHE_KEY_ENV
from lfs_server.backends import check_components as check_backends
from lfs_server.backends import check_node_files
from lfs_server.backends.base import ObjectStore, StoreUnavailable
from lfs_server.config import CONFIG_FILE_ENV, Config, parse_listen
from lfs_server.fsmode import make_dir
from lfs_server.nginx import find_nginx, render_nginx_config, socket_path
from lfs_server.tokens import load_or_create_key, proxy_secret


class ServeError(Exception):
    """Serving cannot start; the message says why and what to do."""


def prepare(config: Config) -> bytes:
    """Create the data layout and key; return the key."""
    for path in (
        config.root,
        config.repos_dir,
        config.tmp_dir,
        config.run_dir,
        config.body_dir.parent,
    ):
        make_dir(path)
    return load_or_create_key(config.key_path)


def hold_data_folder(config: Config) -> int:
    """Lock DATA/run/serve.lock for as long as this serve runs; return its descriptor.

    A second serve on the same data folder would rewrite the running one's nginx.conf,
    remove its gunicorn socket and delete its uploads in flight as stale.
    """
    make_dir(config.root)
    make_dir(config.run_dir)
    fd = os.open(config.run_dir / "serve.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise ServeError(
            f"another lfs-server serve ({other}) uses the data folder {config.root}; stop it "
            "first, or give this one its own --data"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, listening on {config.listen}".encode())
    return fd


def remove_stale_uploads(config: Config) -> list[Path]:
    """Delete upload bodies a killed nginx or gunicorn left behind; return what was removed.

    nginx deletes a body file when its request ends, and the app deletes its own temp
    files, but a SIGKILL skips both. Called before the children start, so no request can
    be using them.
    """
    removed = []
    candidates = list(config.tmp_dir.glob("upload-*"))
    if config.body_dir.is_dir():
        candidates += list(config.body_dir.iterdir())
    for path in candidates:
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def abort_stale_multipart_uploads(store: ObjectStore) -> str | None:
    """Abort the multipart uploads that nodes killed mid-upload left in *store* (on S3:
    invisible, but billed), as `fsck` does; return a line to print, or None.

    The store decides what is stale (S3: older than an hour, since a younger upload may
    belong to another node uploading right now; a local store has nothing of the kind).
    A store that cannot be asked does not stop serving.
    """
    try:
        aborted = store.cleanup()
    except StoreUnavailable as exc:
        return f"lfs-server: could not look for unfinished uploads in the store ({exc})"
    if not aborted:
        return None
    return f"lfs-server: aborted {aborted} unfinished upload(s) left in the store by stopped nodes"


def check_components(config: Config) -> ObjectStore:
    """Open the store *config* names and return it; raise StoreUnavailable or
    DatabaseUnavailable, as `fsck` and `user` do, when the configuration needs an optional
    component that is not installed (boto3 for LFS_STORAGE=s3, psycopg for
    LFS_DATABASE_URL).

    Only the imports are checked: a bucket or database that does not answer yet does not
    stop serving (the app answers 503 until it does).
    """
    return check_backends(config)  # on S3: imports boto3 and builds a client; sends no request


def check_listen_free(listen: str) -> None:
    """Raise ServeError if nothing could listen on *listen* (HOST:PORT): taken, or not ours.

    Bound with SO_REUSEADDR as nginx and gunicorn bind, so a port held only by connections
    in TIME_WAIT counts as free, but one another program listens on does not. The socket is
    closed at once: a program taking the port in between still fails the start cleanly.
    """
    host, port = parse_listen(listen)
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ServeError(
            f"cannot resolve the host of --listen {listen} ({exc.strerror});"
            " give an address of this machine, e.g. 127.0.0.1:8080"
        ) from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "is already in use by another program; choose another --listen HOST:PORT"
            elif exc.errno == errno.EADDRNOTAVAIL:
                why = "is not an address of this machine; choose another --listen HOST:PORT"
            elif exc.errno == errno.EACCES:
                why = "needs privileges to listen on (ports below 1024); choose a port above 1023"
            else:
                why = f"cannot be listened on ({exc.strerror}); choose another --listen HOST:PORT"
            raise ServeError(f"{listen} {why}") from None


def check_worker_access(config: Config) -> None:
    """As root, nginx workers run as 'nobody': they must be able to enter the data dir."""
    if os.geteuid() != 0:
        return
    for path in [config.root, *config.root.parents]:
        mode = path.stat().st_mode
        if not mode & stat.S_IXOTH:
            raise ServeError(
                f"nginx workers run as 'nobody' and cannot enter {path} "
                f"(mode {stat.filemode(mode)}); "
                f"run `chmod o+x {path}` or choose a --data directory outside it"
            )
    for path in (config.root, config.repos_dir):
        path.chmod(path.stat().st_mode | 0o755)


def private_logs(config: Config) -> None:
    """Make nginx's logs mode 0600 before nginx opens them (it keeps an existing file's mode).

    In proxy mode the error log names the presigned S3 URL of a failed fetch (access key
    id and a signature valid for minutes); nginx itself would create the files 0644.
    """
    for name in ("nginx-error.log", "nginx-access.log"):
        fd = os.open(config.run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)


def write_nginx_config(config: Config, key: bytes) -> Path:
    """Write the generated nginx.conf into the run directory (mode 0600: it holds a secret)."""
    path = config.run_dir / "nginx.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(render_nginx_config(config, proxy_secret(key)))
    return path


def _wait_until(
    check: object, timeout: float, procs: list[tuple[str, subprocess.Popen[bytes]]]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in procs:
            if proc.poll() is not None:
                raise ServeError(f"{name} exited with status {proc.returncode} while starting")
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise ServeError(f"server did not start within {timeout:.0f} s")


def _connectable_unix(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def _connectable_tcp(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=0.5):
            return True
    except OSError:
        return False


class Supervisor:
    """Starts the children, waits for a signal or a crash, stops everything."""

    def __init__(self, config: Config, *, use_nginx: bool, out: TextIO, err: TextIO) -> None:
        self.config = config
        self.use_nginx = use_nginx
        self.out = out
        self.err = err
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stop_signal: int | None = None
        self.lock_fd: int | None = None

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum

    def _gunicorn_cmd(self, bind: str) -> list[str]:
        return [
            sys.executable, "-m", "gunicorn",
            "--bind", bind,
            "--workers", str(self.config.workers),
            # Worker class, threads, keep-alive and the metrics hooks: gunicorn_conf.py.
            "--config", "python:lfs_server.gunicorn_conf",
            "--timeout", "600",
            "--graceful-timeout", "10",
            "--log-level", "warning",
            "--pid", str(self.config.run_dir / "gunicorn.pid"),
            "lfs_server.wsgi:app",
        ]  # fmt: skip

    def start(self) -> None:
        """Start gunicorn (and nginx) and wait until they accept connections."""
        config = self.config
        # Checked before anything is made or started, so a mistake is one line, not
        # the children's logs and tracebacks after "serving".
        store = check_components(config)
        self.lock_fd = hold_data_folder(config)
        check_listen_free(config.listen)
        key = prepare(config)
        problem = check_node_files(config)
        if problem:
            raise ServeError(problem)
        stale = remove_stale_uploads(config)
        if stale:
            print(
                f"lfs-server: removed {len(stale)} unfinished upload(s) left by an earlier crash",
                file=self.out,
                flush=True,
            )
        multipart = abort_stale_multipart_uploads(store)
        if multipart:
            print(multipart, file=self.out, flush=True)
        host, port = parse_listen(config.listen)
        # The workers get every setting as a variable, the file's included: they need not
        # (and, after an edit, must not) read the config file again.
        env = {k: v for k, v in os.environ.items() if k != CONFIG_FILE_ENV}
        env.update(config.to_env())
        # Decided here, where the user's terminal is known: a worker's stderr is the same.
        access_log = config.access_log_target(self.err.isatty())
        check_access_log(access_log, config.root)
        env["LFS_ACCESS_LOG"] = str(access_log)
        # The workers' shared password-check cache is keyed by a secret that lives only in
        # memory, new at every start (authcache.py).
        env[AUTH_CACHE_KEY_ENV] = secrets.token_hex(32)
        if self.use_nginx:
            nginx = find_nginx()
            if nginx is None:
                raise ServeError(
                    "nginx is not installed (apt-get install nginx); install it, or run "
                    "`lfs-server serve --no-nginx` "
                    "(Flask serves bodies itself: slower, for development)"
                )
            check_worker_access(config)
            env["LFS_BODY_MODE"] = "nginx"
            conf = write_nginx_config(config, key)
            sock = socket_path(config)
            Path(sock).unlink(missing_ok=True)
            self._spawn("gunicorn", self._gunicorn_cmd(f"unix:{sock}"), env)
            _wait_until(lambda: _connectable_unix(sock), 60, self.children)
            run = str(config.run_dir)
            private_logs(config)
            self._spawn(
                "nginx",
                [nginx, "-p", run + "/", "-c", str(conf), "-e", f"{run}/nginx-error.log",
                 "-g", f'daemon off; pid "{run}/nginx.pid";'],
                env,
            )  # fmt: skip
        else:
            env["LFS_BODY_MODE"] = "stream"
            self._spawn("gunicorn", self._gunicorn_cmd(f"{host.strip('[]')}:{port}"), env)
        _wait_until(lambda: _connectable_tcp(host, port), 60, self.children)
        mode = "nginx + gunicorn" if self.use_nginx else "gunicorn only (--no-nginx)"
        print(
            f"lfs-server: serving http://{config.listen}/ "
            f"({mode}, {config.workers} workers, data {config.root};"
            f" access log: {access_log})",
            file=self.out,
            flush=True,
        )

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        self.children.append((name, proc))

    def wait(self) -> int:
        """Block until a signal (exit 0) or a child dying on its own (exit 1)."""
        while self.stop_signal is None:
            for name, proc in self.children:
                if proc.poll() is not None:
                    print(
                        f"lfs-server: {name} exited unexpectedly with status {proc.returncode}; "
                        "stopping the server" + self._log_hint(name),
                        file=self.err,
                        flush=True,
                    )
                    return 1
            time.sleep(0.1)
        return 0

    def _log_hint(self, name: str) -> str:
        if name != "nginx":
            return ""
        log = self.config.run_dir / "nginx-error.log"
        try:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            return ""
        return "\n  " + "\n  ".join(tail) if tail else ""

    def stop(self) -> None:
        """Stop nginx first (no new requests), then gunicorn; escalate to SIGKILL after 15 s."""
        for name, proc in reversed(self.children):
            if proc.poll() is None:
                proc.send_signal(signal.SIGQUIT if name == "nginx" else signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            # Each child leads its own process group (start_new_session): a master that
            # crashed leaves its workers running and holding the port, so end the group too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # the data folder is free for another serve
            self.lock_fd = None

    def run(self) -> int:
        """Start, wait, stop; the exit status of `lfs-server serve`."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            self.start()
            status = self.wait()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stop_signal == signal.SIGINT:
            # Ctrl-C: both children were stopped in order; exit like any interrupted tool.
            print("lfs-server: interrupted", file=self.err, flush=True)
            return 130
        if self.stop_signal is not None:
            print("lfs-server: stopped", file=self.out, flush=True)
        return status
