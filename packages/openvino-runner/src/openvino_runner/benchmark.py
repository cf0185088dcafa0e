"""The benchmark loops: one request back to back, or an ``AsyncInferQueue`` of several.

:func:`measure` times a compiled model on prepared tensors; :class:`BenchmarkResult` is
what :meth:`openvino_runner.Runner.benchmark` reports. OpenVINO objects are passed in, so
nothing here imports OpenVINO.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from openvino_runner.errors import RunnerError

DEFAULT_TIME_S = 10.0
_PROGRESS_EVERY_S = 0.25
Progress = Callable[[int, float], None]


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
