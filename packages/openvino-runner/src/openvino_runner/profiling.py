"""Where the time goes: OpenVINO's per-layer performance counters, summed and ranked.

:func:`profile_model` compiles the model twice, with and without ``PERF_COUNT``, and runs
the two alternately (the order flips each round, so drift on a shared machine hits both
alike). From the counted one it keeps each layer's real and CPU time (median over the
rounds, robust to a shared machine's spikes), executed kernel and runtime precision. From
the pair it states the counters' own overhead (median latency with counters / without,
minus 1) and how much of the latency the layers explain (their sum / the median latency;
on tiny models the time outside layers dominates). Like benchmark_app's ``-pc``,
``-pcsort`` and ``-exec_graph_path``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from openvino_runner.errors import RunnerError
from openvino_runner.inputs import Feeds, ImageOptions
from openvino_runner.runner import Runner, _contiguous, _openvino

DEFAULT_ITERATIONS = 50
WARMUP = 3


@dataclass(frozen=True)
class LayerTime:
    """One executed layer: median real (wall) and CPU time per inference, in milliseconds."""

    name: str
    type: str  # the layer's type in the executed graph (Convolution, Reorder, ...)
    exec_type: str  # the kernel that ran, e.g. brgconv_avx512_f32, jit_avx2_i8
    precision: str  # runtime precision of the layer (f32, bf16, i8, u8, ...)
    real_ms: float
    cpu_ms: float


@dataclass(frozen=True)
class TypeTime:
    """All executed layers of one type: their count, summed real time and share of the sum."""

    type: str
    count: int
    real_ms: float
    share: float


@dataclass(frozen=True)
class ProfileReport:
    """What :func:`profile_model` measured; times in milliseconds per inference."""

    model: str
    device: str
    precision: str
    iterations: int
    input_shapes: dict[str, list[int]]
    latency_ms: float  # median latency with the counters on
    latency_without_counters_ms: float  # median latency of the same model without them
    counters_overhead: float  # latency_ms / latency_without_counters_ms - 1
    layers_total_ms: float  # sum of every layer's real time
    coverage: float  # layers_total_ms / latency_ms
    layers: list[LayerTime]  # executed layers, slowest first
    by_type: list[TypeTime]  # slowest type first
    not_run: int  # layers OpenVINO fused away or did not execute
    exec_graph: str | None = None
    cpu: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)


def _ms(delta: Any) -> float:
    return float(delta.total_seconds()) * 1000.0


def _precisions(compiled: Any) -> dict[str, str]:
    """``{layer name: runtime precision}`` from the executed graph's runtime info."""
    found: dict[str, str] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "runtimePrecision" in info:
            found[op.get_friendly_name()] = str(info["runtimePrecision"].astype(str))
    return found


def save_exec_graph(compiled: Any, target: str | os.PathLike[str]) -> Path:
    """Write the executed graph (``get_runtime_model()``) as ``.xml`` + ``.bin`` atomically."""
    ov = _openvino()
    xml = Path(target)
    if xml.suffix.lower() != ".xml":
        raise RunnerError(f"--exec-graph must name an .xml file (a .bin goes beside it), got {xml}")
    tmp_xml = xml.parent / f".{xml.stem}.{os.getpid()}.{secrets.token_hex(4)}.partial.xml"
    tmp_bin = tmp_xml.with_suffix(".bin")
    try:
        ov.serialize(compiled.get_runtime_model(), str(tmp_xml), str(tmp_bin))
        tmp_bin.replace(xml.with_suffix(".bin"))
        tmp_xml.replace(xml)  # the .xml last: a reader never sees it beside an old .bin
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[-1]
        raise RunnerError(f"cannot write --exec-graph {xml}: {reason}") from None
    finally:
        for leftover in (tmp_xml, tmp_bin):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
    return xml


def profile_model(
    runner: Runner,
    inputs: Feeds | None = None,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    seed: int = 0,
    image: ImageOptions | None = None,
    exec_graph: str | os.PathLike[str] | None = None,
) -> ProfileReport:
    """Per-layer times of *runner*'s model over *iterations* inferences (see module doc)."""
    if iterations < 1:
        raise RunnerError(f"iterations must be at least 1, got {iterations}")
    feeds = runner.prepare(inputs, seed=seed, image=image)
    plain = runner.compiled
    config = {**runner.compile_config(), "PERF_COUNT": True}
    try:
        counted = runner.core.compile_model(runner.model, runner.device, config)
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
        raise RunnerError(
            f"OpenVINO cannot compile {runner.path} with PERF_COUNT: {reason}"
        ) from None
    ov = _openvino()
    tensors = {n: ov.Tensor(_contiguous(a)) for n, a in feeds.items()}
    requests = {"off": plain.create_infer_request(), "on": counted.create_infer_request()}
    for request in requests.values():
        for name, tensor in tensors.items():
            request.set_tensor(name, tensor)
        for _ in range(WARMUP):
            request.infer()
    times: dict[str, list[float]] = {"off": [], "on": []}
    real: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    meta: dict[str, tuple[str, str]] = {}
    not_run: set[str] = set()
    clock = time.perf_counter
    for i in range(iterations):
        for key in ("off", "on") if i % 2 == 0 else ("on", "off"):
            started = clock()
            requests[key].infer()
            times[key].append((clock() - started) * 1000.0)
        for info in requests["on"].get_profiling_info():
            name = info.node_name
            if info.status != info.Status.EXECUTED:
                not_run.add(name)
                continue
            real[name].append(_ms(info.real_time))
            cpu[name].append(_ms(info.cpu_time))
            meta[name] = (info.node_type, info.exec_type)
    precisions = _precisions(counted)
    layers = sorted(
        (
            LayerTime(
                name=name,
                type=meta[name][0],
                exec_type=meta[name][1],
                precision=precisions.get(name, meta[name][1].rsplit("_", 1)[-1]),
                real_ms=statistics.median(real[name]),
                cpu_ms=statistics.median(cpu[name]),
            )
            for name in meta
        ),
        key=lambda layer: -layer.real_ms,
    )
    total = sum(layer.real_ms for layer in layers)
    groups: dict[str, list[LayerTime]] = defaultdict(list)
    for layer in layers:
        groups[layer.type].append(layer)
    by_type = sorted(
        (
            TypeTime(
                type=kind,
                count=len(members),
                real_ms=sum(m.real_ms for m in members),
                share=sum(m.real_ms for m in members) / total if total > 0 else 0.0,
            )
            for kind, members in groups.items()
        ),
        key=lambda group: -group.real_ms,
    )
    on = statistics.median(times["on"])
    off = statistics.median(times["off"])
    written = str(save_exec_graph(counted, exec_graph)) if exec_graph is not None else None
    from openvino_runner.benchmark import machine_info

    return ProfileReport(
        model=str(runner.path),
        device=runner.device,
        precision=str(runner.properties().get("INFERENCE_PRECISION_HINT", "?")),
        iterations=iterations,
        input_shapes={n: list(a.shape) for n, a in feeds.items()},
        latency_ms=on,
        latency_without_counters_ms=off,
        counters_overhead=on / off - 1.0 if off > 0 else 0.0,
        layers_total_ms=total,
        coverage=total / on if on > 0 else 0.0,
        layers=layers,
        by_type=by_type,
        not_run=len(not_run - set(meta)),
        exec_graph=written,
        cpu=machine_info(runner.core)["cpu"],
    )
