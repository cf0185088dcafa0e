"""The benchmark loops: one request back to back, or an ``AsyncInferQueue`` of several.

:func:`measure` times a compiled model on prepared tensors; :class:`BenchmarkResult` is
what :meth:`openvino_runner.Runner.benchmark` reports, with what is needed to compare two
runs later: the latency samples (all of them up to ``MAX_SAMPLES``) and a fixed-size
histogram, the settings, the versions and the CPU (model and SIMD flags, never assumed).
:func:`compare_reports` puts saved reports side by side. OpenVINO objects are passed in,
so nothing here imports OpenVINO.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from openvino_runner.errors import RunnerError

DEFAULT_TIME_S = 10.0
_PROGRESS_EVERY_S = 0.25
Progress = Callable[[int, float], None]
MAX_SAMPLES = 20_000  # more samples than this: the JSON keeps the histogram only
HISTOGRAM_BINS = 32  # log-spaced between the fastest and the slowest inference
# CPU flags that decide which kernels OpenVINO can use (x86 SIMD, VNNI, AMX; Arm NEON/SVE).
SIMD_FLAG_PREFIXES = ("sse4", "avx", "fma", "f16c", "amx", "asimd", "sve", "vnni")
VERSIONED = ("openvino-runner", "openvino", "onnxruntime", "numpy", "nncf")


@dataclass(frozen=True)
class BenchmarkResult:
    """What :meth:`Runner.benchmark` measured; times in milliseconds unless named ``_s``."""

    model: str
    device: str
    hint: str
    requests: int
    iterations: int
    duration_s: float
    throughput_fps: float
    latency_ms: dict[str, float]
    compile_time_s: float
    first_inference_ms: float
    cache_dir: str | None
    cache_hit: bool | None
    input_shapes: dict[str, list[int]]
    properties: dict[str, str]
    settings: dict[str, Any] = field(default_factory=dict)
    histogram: dict[str, list[float]] = field(default_factory=dict)
    samples_ms: list[float] | None = None  # None: more than MAX_SAMPLES, see histogram
    environment: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)


@dataclass(frozen=True)
class Measurement:
    """What :func:`measure` saw: the first inference, then the loop's latencies."""

    first_inference_ms: float
    latencies_ms: list[float]
    iterations: int
    duration_s: float


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """Median, p90, p99, min, max and mean of *latencies_ms*."""
    values = np.asarray(latencies_ms, dtype=np.float64)
    if values.size == 0:
        return {}
    return {
        "median": float(np.median(values)),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": float(values.mean()),
    }


def check_limits(iterations: int | None, time_s: float | None, requests: int | None) -> None:
    """Raise :class:`RunnerError` for a limit that cannot be run."""
    if iterations is not None and iterations < 1:
        raise RunnerError(f"iterations must be at least 1, got {iterations}")
    if time_s is not None and time_s <= 0:
        raise RunnerError(f"time must be positive, got {time_s}")
    if requests is not None and requests < 1:
        raise RunnerError(f"requests must be at least 1, got {requests}")


def measure(
    ov: Any,
    compiled: Any,
    tensors: Mapping[str, Any],
    *,
    requests: int,
    iterations: int | None,
    time_s: float | None,
    progress: Progress | None = None,
) -> Measurement:
    """Time *compiled* (an ``openvino.CompiledModel``) on *tensors* (``openvino.Tensor``).

    One timed first inference, then until *iterations* inferences or *time_s* seconds
    (``DEFAULT_TIME_S`` when neither is given): synchronously with ``requests == 1``,
    else through an ``AsyncInferQueue`` of *requests* jobs. *progress*, if given, is called
    as ``progress(done, elapsed_s)`` a few times per second.
    """
    if iterations is None and time_s is None:
        time_s = DEFAULT_TIME_S
    stop_at = float("inf") if time_s is None else time_s
    limit = iterations if iterations is not None else 2**62
    first = compiled.create_infer_request()
    for name, tensor in tensors.items():
        first.set_tensor(name, tensor)
    started = time.perf_counter()
    first.infer()
    first_ms = (time.perf_counter() - started) * 1000.0
    if requests == 1:
        latencies, count, duration = _sync_loop(first, limit, stop_at, progress)
    else:
        latencies, count, duration = _async_loop(
            ov, compiled, tensors, requests, limit, stop_at, progress
        )
    return Measurement(first_ms, latencies, count, duration)


def _sync_loop(
    request: Any,
    limit: int,
    stop_at: float,
    progress: Progress | None,
) -> tuple[list[float], int, float]:
    """One request, inferred back to back; latency is wall time around ``infer()``."""
    clock = time.perf_counter
    infer = request.infer
    latencies: list[float] = []
    record = latencies.append
    count = 0
    start = t0 = clock()
    next_report = start + _PROGRESS_EVERY_S
    while count < limit:
        infer()
        t1 = clock()
        record(t1 - t0)
        count += 1
        t0 = t1
        if t1 - start >= stop_at:
            break
        if progress is not None and t1 >= next_report:
            progress(count, t1 - start)
            next_report = t1 + _PROGRESS_EVERY_S
    duration = clock() - start
    if progress is not None:
        progress(count, duration)
    return [s * 1000.0 for s in latencies], count, duration


def _async_loop(
    ov: Any,
    compiled: Any,
    tensors: Mapping[str, Any],
    requests: int,
    limit: int,
    stop_at: float,
    progress: Progress | None,
) -> tuple[list[float], int, float]:
    """*requests* jobs of an ``AsyncInferQueue``; latency is each request's own ``latency``.

    A request's latency is read when it comes back idle, not in a Python callback: with a
    Python callback set, OpenVINO 2026.4 aborts or hangs at exit after the queue is freed.
    """
    queue = ov.AsyncInferQueue(compiled, requests)
    for i in range(len(queue)):
        for name, tensor in tensors.items():
            queue[i].set_tensor(name, tensor)
    latencies: list[float] = []
    record = latencies.append
    started: set[int] = set()
    clock = time.perf_counter
    start_async = queue.start_async
    idle_request = queue.get_idle_request_id
    count = 0
    start = clock()
    next_report = start + _PROGRESS_EVERY_S
    while count < limit:
        idle = idle_request()
        if idle in started:
            record(queue[idle].latency)
        else:
            started.add(idle)
        start_async()
        count += 1
        now = clock()
        if now - start >= stop_at:
            break
        if progress is not None and now >= next_report:
            progress(count, now - start)
            next_report = now + _PROGRESS_EVERY_S
    queue.wait_all()
    duration = clock() - start
    for idle in sorted(started):
        record(queue[idle].latency)
    if progress is not None:
        progress(count, duration)
    return latencies, count, duration


def histogram(latencies_ms: Sequence[float], bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """``{"edges_ms": [...], "counts": [...]}``: *bins* log-spaced bins from min to max."""
    values = np.asarray(latencies_ms, dtype=np.float64)
    if values.size == 0:
        return {"edges_ms": [], "counts": []}
    low, high = float(values.min()), float(values.max())
    if high <= low or low <= 0:
        edges = np.linspace(low, max(high, low + 1e-9), bins + 1)
    else:
        edges = np.geomspace(low, high, bins + 1)
    counts, _ = np.histogram(values, edges)
    return {"edges_ms": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def text_histogram(latencies_ms: Sequence[float], bins: int = 8, width: int = 40) -> list[str]:
    """A few lines of ``  0.031-0.034 ms  ####### 1234`` (log-spaced bins)."""
    hist = histogram(latencies_ms, bins)
    counts = hist["counts"]
    if not counts:
        return []
    edges = hist["edges_ms"]
    most = max(counts)
    digits = max(3, 4 - math.floor(math.log10(max(edges[-1], 1e-9))))
    lines = []
    for i, count in enumerate(counts):
        bar = "#" * max(1 if count else 0, round(width * count / most))
        lines.append(
            f"  {edges[i]:>9.{digits}f} - {edges[i + 1]:>9.{digits}f} ms {bar:<{width}} {count}"
        )
    return lines


def cpu_flags() -> list[str]:
    """The CPU's SIMD flags from /proc/cpuinfo (Linux); empty where the OS does not say."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return sorted(f for f in value.split() if f.startswith(SIMD_FLAG_PREFIXES))
    except OSError:
        pass
    return []


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(core: Any = None, device: str = "CPU") -> dict[str, Any]:
    """Versions, platform and CPU (model, logical CPUs, SIMD flags, OpenVINO's view of it)."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in VERSIONED:
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    cpu: dict[str, Any] = {
        "model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "flags": cpu_flags(),
    }
    if core is not None:
        for key, prop in (
            ("openvino_name", "FULL_DEVICE_NAME"),
            ("openvino_capabilities", "OPTIMIZATION_CAPABILITIES"),
        ):
            try:
                value = core.get_property("CPU", prop)
            except RuntimeError:
                continue
            cpu[key] = list(value) if isinstance(value, (list, tuple)) else str(value)
        if device != "CPU":
            with contextlib.suppress(RuntimeError):
                cpu["device_name"] = str(core.get_property(device, "FULL_DEVICE_NAME"))
    return {"versions": versions, "platform": platform.platform(), "cpu": cpu}


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


COMPARED = (
    ("latency median (ms)", ("latency_ms", "median"), False),
    ("latency p90 (ms)", ("latency_ms", "p90"), False),
    ("latency p99 (ms)", ("latency_ms", "p99"), False),
    ("latency mean (ms)", ("latency_ms", "mean"), False),
    ("latency min (ms)", ("latency_ms", "min"), False),
    ("throughput (/s)", ("throughput_fps",), True),
    ("compile time (s)", ("compile_time_s",), False),
    ("iterations", ("iterations",), True),
)


def compare_reports(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Saved ``bench --json`` reports side by side: each metric, its ratio to the first
    report, and every setting, property, version or CPU field that differs between them."""
    if len(reports) < 2:
        raise RunnerError("--compare needs at least two bench --json reports")
    rows = []
    for title, path, higher_is_better in COMPARED:
        values: list[float | None] = []
        for _, data in reports:
            value: Any = data
            for key in path:
                value = value.get(key) if isinstance(value, Mapping) else None
            values.append(float(value) if isinstance(value, (int, float)) else None)
        base = values[0]
        ratios = [(v / base) if (v is not None and base not in (None, 0)) else None for v in values]
        rows.append(
            {
                "metric": title,
                "values": values,
                "ratios": ratios,
                "higher_is_better": higher_is_better,
            }
        )
    described = []
    for _, data in reports:
        flat = {"model": data.get("model"), "device": data.get("device"), "hint": data.get("hint")}
        flat["requests"] = data.get("requests")
        flat["input_shapes"] = data.get("input_shapes")
        for group in ("settings", "properties", "environment"):
            if isinstance(data.get(group), Mapping):
                flat.update(_flatten(data[group], f"{group}."))
        described.append(flat)
    keys = sorted(set().union(*described))
    differences = [
        {"key": key, "values": [d.get(key) for d in described]}
        for key in keys
        if len({repr(d.get(key)) for d in described}) > 1
    ]
    return {"reports": [label for label, _ in reports], "rows": rows, "differences": differences}
