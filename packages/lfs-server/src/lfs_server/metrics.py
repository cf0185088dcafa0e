"""`/metrics`: the metric names and help, recording a request, the scrape-time gauges.

Built on prometheus_client. Under gunicorn each worker is a process, so the client runs in
its multiprocess mode: every worker keeps its samples in memory-mapped files of its own in
`DATA/run/prometheus/` (mode 0700), and a scrape, whichever worker answers it, merges them
all. Recording a request is a few writes into the worker's own mapped memory: no lock
shared between workers, no database, no system call. gunicorn's configuration
(gunicorn_conf.py) empties the folder at start and drops a dead worker's in-flight gauge.
Without PROMETHEUS_MULTIPROC_DIR (the app in one process, as tests build it) the samples
live in the app's own registry.

The store's gauges are a collector asked at scrape time: the reachability of the store and
the lock database, and the store's inventory, counted at most once a minute per node
(counting lists every object; on S3 a whole-bucket listing).

prometheus_client decides between the two modes when it is first imported, from the
environment: this module imports it only inside functions, after `prepare_multiprocess_dir`
(gunicorn_conf.py, wsgi.py) has set the variable.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The classic text format: every Prometheus version reads it.
CONTENT_TYPE = "text/plain; version=0.0.4"  # Flask adds the charset

# name -> (Prometheus type, help): the one table of what /metrics shows.
METRICS: dict[str, tuple[str, str]] = {
    "lfs_requests_total": ("counter", "HTTP requests answered, by endpoint, method and status"),
    "lfs_errors_total": (
        "counter",
        "requests answered with a 4xx/5xx status, by endpoint and status",
    ),
    "lfs_request_duration_seconds": (
        "histogram",
        "time from the app receiving a request to its answer, by endpoint, method and status",
    ),
    "lfs_requests_in_flight": ("gauge", "requests the app's workers are answering right now"),
    "lfs_upload_bytes_total": ("counter", "bytes of objects verified and stored"),
    "lfs_download_bytes_total": (
        "counter",
        "bytes of objects handed out for download (full size per request)",
    ),
    "lfs_objects_uploaded_total": ("counter", "objects verified and stored"),
    "lfs_objects_stored": ("gauge", "objects in the store (counted at most once a minute)"),
    "lfs_stored_bytes": ("gauge", "bytes in the store (counted at most once a minute)"),
    "lfs_store_up": ("gauge", "1 when the object store answered at this scrape, else 0"),
    "lfs_lock_database_up": (
        "gauge",
        "1 when the lock database answered at this scrape, else 0",
    ),
}

# Seconds: our API answers in 1-10 ms; a large upload's verification takes seconds.
DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
)  # fmt: skip

# The store's inventory (objects and bytes stored) is counted at most this often per
# node: counting lists every object, a whole-bucket listing on S3, too much for every
# scrape (Prometheus asks every 15-60 s, from every node).
INVENTORY_SECONDS = 60.0


def multiprocess_dir(run_dir: Path) -> Path:
    """The folder the workers of the server whose run folder is *run_dir* share."""
    return run_dir / "prometheus"


def prepare_multiprocess_dir(run_dir: Path, *, clear: bool) -> Path:
    """Create the workers' metrics folder (0700: only the server reads its samples), empty
    it when *clear* (a new server: the counters start again, as Prometheus expects after a
    restart), and name it in PROMETHEUS_MULTIPROC_DIR for this process and its children."""
    path = multiprocess_dir(run_dir)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    if clear:
        for old in path.glob("*.db"):
            old.unlink(missing_ok=True)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def mark_worker_dead(pid: int) -> None:
    """Forget a dead worker's live gauges (its requests in flight); counters stay summed."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, path)


class Metrics:
    """The request metrics of one app; shared by its workers through the multiprocess
    folder when PROMETHEUS_MULTIPROC_DIR names one."""

    def __init__(self, run_dir: Path) -> None:
        import prometheus_client
        from prometheus_client import values

        self.run_dir = run_dir
        self.path = os.environ.get(MULTIPROC_ENV) or None
        if self.path and not getattr(values.ValueClass, "_multiprocess", False):
            raise RuntimeError(
                f"prometheus_client was imported before {MULTIPROC_ENV} was set; each gunicorn"
                " worker would count alone (import lfs_server.metrics's users after"
                " prepare_multiprocess_dir)"
            )
        # A worker that could not reserve its files' space (a full disk) counts nothing
        # rather than die of SIGBUS on its first new sample.
        self.recording = self.path is None or _reserve_files(Path(self.path), os.getpid())
        # `_created` samples: not kept in multiprocess mode, so not in the other either.
        prometheus_client.disable_created_metrics()
        self.registry = prometheus_client.CollectorRegistry(auto_describe=False)
        if self.recording:
            self._create(self.registry)

    def _create(self, reg: Any) -> None:
        """The metric objects, in *reg* (in multiprocess mode: their files too)."""
        import prometheus_client

        def help_(name: str) -> str:
            return METRICS[name][1]

        by_request = ("endpoint", "method", "status")
        self._requests = prometheus_client.Counter(
            "lfs_requests_total", help_("lfs_requests_total"), by_request, registry=reg
        )
        self._errors = prometheus_client.Counter(
            "lfs_errors_total", help_("lfs_errors_total"), ("endpoint", "status"), registry=reg
        )
        self._duration = prometheus_client.Histogram(
            "lfs_request_duration_seconds",
            help_("lfs_request_duration_seconds"),
            by_request,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self._in_flight = prometheus_client.Gauge(
            "lfs_requests_in_flight",
            help_("lfs_requests_in_flight"),
            registry=reg,
            multiprocess_mode="livesum",
        )
        self._upload_bytes = prometheus_client.Counter(
            "lfs_upload_bytes_total", help_("lfs_upload_bytes_total"), registry=reg
        )
        self._download_bytes = prometheus_client.Counter(
            "lfs_download_bytes_total", help_("lfs_download_bytes_total"), registry=reg
        )
        self._uploaded = prometheus_client.Counter(
            "lfs_objects_uploaded_total", help_("lfs_objects_uploaded_total"), registry=reg
        )

    def record_request(
        self, endpoint: str, method: str, status: int, nbytes: int, seconds: float = 0.0
    ) -> None:
        """Count one answered request, its duration and the object bytes it moved."""
        if not self.recording:
            return
        if method not in _METHODS:
            method = "other"  # a client's invented methods must not grow the files
        code = str(status)
        self._requests.labels(endpoint, method, code).inc()
        self._duration.labels(endpoint, method, code).observe(seconds)
        if status >= 400:
            self._errors.labels(endpoint, code).inc()
        elif endpoint == "transfer.upload":
            self._upload_bytes.inc(nbytes)
            self._uploaded.inc()
        elif endpoint == "transfer.download":
            self._download_bytes.inc(nbytes)

    def count_in_flight(
        self, wsgi_app: Callable[[dict[str, Any], Any], Iterable[bytes]]
    ) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
        """*wsgi_app*, counted in lfs_requests_in_flight until its answer is sent."""
        if not self.recording:
            return wsgi_app
        from werkzeug.wsgi import ClosingIterator

        gauge = self._in_flight

        def counted(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            gauge.inc()
            try:
                answer = wsgi_app(environ, start_response)
            except BaseException:
                gauge.dec()
                raise
            return ClosingIterator(answer, [gauge.dec])

        return counted

    def render(self, *collectors: Any) -> bytes:
        """The whole `/metrics` page: every worker's samples plus *collectors*' (asked now)."""
        from prometheus_client import generate_latest

        source: Any = self.registry
        if self.path:
            from prometheus_client import multiprocess

            source = multiprocess.MultiProcessCollector(None, self.path)
        # One scrape's collectors, not registered anywhere: scrapes may run at once.
        return generate_latest(_Chain([source, *collectors]))


# Methods counted under their own name; any other is "other".
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

# prometheus_client's files per worker (`<kind>_<pid>.db`) and the space reserved for each:
# a value written into a page of a sparse mapped file that the full disk cannot back kills
# the process (SIGBUS), so the pages are allocated at start. A histogram series of ours
# takes ~3 KB (16 buckets): 1 MiB holds ~300, several times what our endpoints, methods
# and statuses make (a file that fills up still grows, unreserved).
_RESERVED_BYTES = {"counter": 1 << 18, "gauge_livesum": 1 << 16, "histogram": 1 << 20}


def _reserve_files(folder: Path, pid: int) -> bool:
    """Create and allocate this process's metric files before prometheus_client maps
    them (it keeps an existing file's size; zeros are its empty file); False when the
    disk cannot hold them."""
    for kind, size in _RESERVED_BYTES.items():
        path = folder / f"{kind}_{pid}.db"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            if os.fstat(fd).st_size < size:
                os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            return False
        os.close(fd)
    return True


class _Chain:
    """The samples of several collectors, as generate_latest reads a registry."""

    def __init__(self, collectors: list[Any]) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


class StoreCollector:
    """The scrape-time gauges: store and lock database reachability, the store's inventory.

    *check_store* and *check_locks* raise when their part does not answer; *count* returns
    (objects, bytes) and is asked at most once per INVENTORY_SECONDS per node, the answer
    kept in *cache* (a small JSON file in the run folder, written only by scrapes).
    """

    def __init__(
        self,
        check_store: Callable[[], None],
        check_locks: Callable[[], None],
        count: Callable[[], tuple[int, int]],
        cache: Path,
    ) -> None:
        self.check_store, self.check_locks, self.count, self.cache = (
            check_store,
            check_locks,
            count,
            cache,
        )

    def collect(self) -> Iterator[Metric]:
        """Gauges asked now (the inventory from the cache when it is fresh)."""
        from prometheus_client.core import GaugeMetricFamily

        store_up = _answers(self.check_store)
        locks_up = _answers(self.check_locks)
        yield GaugeMetricFamily("lfs_store_up", METRICS["lfs_store_up"][1], value=store_up)
        yield GaugeMetricFamily(
            "lfs_lock_database_up", METRICS["lfs_lock_database_up"][1], value=locks_up
        )
        if store_up:
            objects, nbytes = self.inventory()
            for name, value in (("lfs_objects_stored", objects), ("lfs_stored_bytes", nbytes)):
                yield GaugeMetricFamily(name, METRICS[name][1], value=value)

    def inventory(self) -> tuple[int, int]:
        """(objects, bytes) in the store, counted again only once the last count is
        INVENTORY_SECONDS old (any worker of this node may have counted)."""
        now = time.time()
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            cached = json.loads(self.cache.read_text())
            if 0 <= now - float(cached["counted_at"]) < INVENTORY_SECONDS:
                return int(cached["objects"]), int(cached["bytes"])
        objects, nbytes = self.count()
        record = {"objects": objects, "bytes": nbytes, "counted_at": now}
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(prefix=".inventory-", dir=self.cache.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump(record, fh)
            Path(tmp).replace(self.cache)
        return objects, nbytes


def _answers(check: Callable[[], None]) -> int:
    try:
        check()
    except Exception:  # any failure is "down"; /healthz logs the details
        return 0
    return 1
