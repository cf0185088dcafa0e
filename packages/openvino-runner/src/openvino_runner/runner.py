"""The typed API: :class:`Runner` reads, describes, compiles, runs and benchmarks a model.

This module owns the model's life (read, reshape, compile, infer); reading failures are
explained by :mod:`openvino_runner.diagnostics` and the timing loops live in
:mod:`openvino_runner.benchmark`. Inputs are prepared once (:meth:`Runner.prepare`, rules
in :mod:`openvino_runner.inputs`) and prepared inputs are run as they are
(:meth:`Runner.run`). OpenVINO is imported on first use (``import openvino`` costs ~0.5 s),
so importing this module, and answering ``openvino-runner --help``, stays instant.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openvino_runner.benchmark import (
    MAX_SAMPLES,
    BenchmarkResult,
    Progress,
    check_limits,
    histogram,
    latency_summary,
    machine_info,
    measure,
)
from openvino_runner.deformconv import ONNX_OP_TYPE, deform_conv_extension
from openvino_runner.diagnostics import (
    FORMATS,
    by_count,
    conversion_error,
    conversion_failures,
    model_file_problem,
    onnx_file_problem,
    onnx_nodes,
    source_op_counts,
)
from openvino_runner.errors import InputError, ModelFileError, RunnerError
from openvino_runner.inputs import Dim, Feeds, ImageOptions, InputSpec, prepare_inputs

# Also re-exported here from the modules they moved to: BenchmarkResult, latency_summary
# (benchmark), FORMATS, conversion_failures, onnx_nodes (diagnostics).
__all__ = [
    "FORMATS",
    "HINTS",
    "PRECISIONS",
    "BenchmarkResult",
    "ModelInfo",
    "PortInfo",
    "Runner",
    "conversion_failures",
    "latency_summary",
    "onnx_nodes",
]

PRECISIONS = ("f32", "bf16", "f16")
HINTS = ("latency", "throughput")
# Device properties worth reporting after compilation (what OpenVINO actually chose).
EFFECTIVE_PROPERTIES = (
    "INFERENCE_PRECISION_HINT",
    "PERFORMANCE_HINT",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
    "EXECUTION_DEVICES",
    "ENABLE_HYPER_THREADING",
    "ENABLE_CPU_PINNING",
)


def _openvino() -> Any:
    import openvino

    return openvino


def _read_model(core: Any, path: Path) -> Any:
    """``core.read_model(path)``. A file of no known model suffix is offered to every
    frontend, and each that tries logs its parse errors to fd 2 (TensorFlow's absl lines
    for a text file): for such a file that output is held, replayed unless the read fails
    with the RuntimeError the caller turns into one line."""
    if path.suffix.lower() in FORMATS or not path.is_file():
        return core.read_model(str(path))
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to hold
        return core.read_model(str(path))
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            model = core.read_model(str(path))
        except RuntimeError:
            raise
        except BaseException:
            _replay(held, saved)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        _replay(held, 2)
    return model


def _replay(held: Any, fd: int) -> None:
    """Write what *held* (a file) holds to *fd*."""
    held.seek(0)
    if text := held.read():
        os.write(fd, text)


@dataclass(frozen=True)
class PortInfo:
    """One model input or output: its name, all tensor names, shape and element type."""

    name: str
    names: tuple[str, ...]
    shape: str
    element_type: str


@dataclass(frozen=True)
class ModelInfo:
    """What :meth:`Runner.info` reports about a model (before compilation)."""

    path: str
    format: str
    converted: bool
    inputs: tuple[PortInfo, ...]
    outputs: tuple[PortInfo, ...]
    op_counts: dict[str, int]
    custom_conversions: dict[str, int] = field(default_factory=dict)
    source_op_counts: dict[str, int] | None = None  # ONNX ops, when the onnx package exists

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)


def _dims(partial_shape: Any) -> tuple[Dim, ...] | None:
    if partial_shape.rank.is_dynamic:
        return None
    dims: list[Dim] = []
    for d in partial_shape:
        if d.is_static:
            dims.append((d.get_length(), d.get_length()))
        else:
            hi = d.get_max_length()
            dims.append((max(d.get_min_length(), 0), None if hi < 0 else hi))
    return tuple(dims)


def _blobs(folder: Path) -> set[str]:
    """Compiled-model blobs in OpenVINO's cache folder (other files do not count)."""
    return {p.name for p in folder.glob("*.blob")}


def _contiguous(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """C-contiguous *array*; unlike ``np.ascontiguousarray`` it keeps 0-d arrays 0-d."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _port_name(port: Any, index: int, kind: str) -> str:
    names = port.get_names()
    return str(port.get_any_name()) if names else f"{kind}{index}"


def _dtype(element_type: Any) -> np.dtype[Any]:
    try:
        return np.dtype(element_type.to_dtype())
    except (RuntimeError, TypeError, ValueError):
        return np.dtype(np.float32)  # bf16 and packed types have no numpy dtype


class Runner:
    """Read, inspect, compile, run and benchmark one model with OpenVINO.

    ``precision`` sets ``INFERENCE_PRECISION_HINT`` (``"f32"``, ``"bf16"``, ``"f16"``);
    ``None`` keeps the device default, which on CPUs with AMX is bf16. ``shapes`` reshapes
    dynamic inputs to static shapes before compiling (like benchmark_app's ``-shape``).
    ``hint``, ``streams`` and ``threads`` become ``PERFORMANCE_HINT``, ``NUM_STREAMS`` and
    ``INFERENCE_NUM_THREADS``; ``cache_dir`` enables OpenVINO's model cache. ONNX
    ``DeformConv`` is converted by this package's extension (see
    :func:`openvino_runner.deform_conv_extension`).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        device: str = "CPU",
        precision: str | None = "f32",
        *,
        shapes: Mapping[str, Sequence[int]] | None = None,
        hint: str | None = None,
        streams: int | None = None,
        threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(model)
        if not self.path.exists():
            raise ModelFileError(f"model file {str(self.path)!r} does not exist")
        if precision is not None and precision not in PRECISIONS:
            raise RunnerError(
                f"precision must be one of {', '.join(PRECISIONS)} (or None for the device "
                f"default), got {precision!r}"
            )
        if hint is not None and hint not in HINTS:
            raise RunnerError(f"hint must be one of {', '.join(HINTS)}, got {hint!r}")
        for what, value in (("streams", streams), ("threads", threads)):
            if value is not None and value < 1:
                raise RunnerError(f"{what} must be a positive integer, got {value}")
        self.device = device
        self.precision = precision
        self.shapes = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
        self.hint = hint
        self.streams = streams
        self.threads = threads
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.extra_config = dict(config or {})
        self.compile_time_s: float | None = None
        self.cache_hit: bool | None = None
        self._core: Any = None
        self._model: Any = None
        self._compiled: Any = None
        self._request: Any = None
        self._custom: Counter[str] = Counter()

    # -- reading -----------------------------------------------------------------------
    @property
    def core(self) -> Any:
        """The ``openvino.Core`` (created on first use, with the DeformConv extension)."""
        if self._core is None:
            core = _openvino().Core()
            counts = self._custom

            def converted() -> None:
                counts[f"{ONNX_OP_TYPE} -> DeformableConvolution"] += 1

            core.add_extension(deform_conv_extension(converted))
            self._core = core
        return self._core

    def _read(self) -> Any:
        if self.path.suffix.lower() == ".onnx" and self.path.is_file():
            # OpenVINO reads some truncated files silently, and answers others with every
            # frontend's log noise and "unsupported format": look at the file first.
            try:
                problem = onnx_file_problem(self.path)
            except OSError as exc:
                raise ModelFileError(f"cannot read {self.path}: {exc.strerror or exc}") from None
            if problem is not None:
                raise ModelFileError(f"{self.path} is not a valid ONNX file: {problem}")
        error = model_file_problem(self.path)
        if error is not None:
            raise error
        try:
            model = _read_model(self.core, self.path)
        except RuntimeError as exc:
            raise conversion_error(self.path, exc) from None
        if self.shapes:
            self._apply_shapes(model, self.shapes)
        return model

    def _apply_shapes(self, model: Any, shapes: Mapping[str, tuple[int, ...]]) -> None:
        names = [_port_name(p, i, "input") for i, p in enumerate(model.inputs)]
        unknown = [n for n in shapes if n not in names]
        if unknown:
            raise InputError(
                f"the model has no input named {unknown[0]!r}; its inputs are: "
                + ", ".join(repr(n) for n in names)
            )
        ov = _openvino()
        try:
            model.reshape({n: ov.PartialShape(list(s)) for n, s in shapes.items()})
        except RuntimeError as exc:
            wanted = ", ".join(f"{n}={list(s)}" for n, s in shapes.items())
            reason = str(exc).strip().splitlines()[-1]
            raise InputError(f"cannot reshape the model to {wanted}: {reason}") from None

    def reshape(self, shapes: Mapping[str, Sequence[int]]) -> None:
        """Give inputs static shapes before compiling (drops an earlier compilation)."""
        fixed = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
        self._apply_shapes(self.model, fixed)
        self.shapes.update(fixed)
        self._compiled = None
        self._request = None

    def use_model(self, model: Any) -> None:
        """Run *model* (an ``openvino.Model``, e.g. this file's model cut to other outputs)
        instead of reading the file; drops an earlier compilation."""
        self._model = model
        self._compiled = None
        self._request = None

    @property
    def model(self) -> Any:
        """The ``openvino.Model`` as read (and reshaped), converting it if needed."""
        if self._model is None:
            self._model = self._read()
        return self._model

    def info(self) -> ModelInfo:
        """Inputs, outputs, op counts and how the model's format is converted."""
        model = self.model
        fmt, converted = FORMATS.get(self.path.suffix.lower(), ("unknown", True))
        if self.path.is_dir():
            fmt, converted = "TensorFlow SavedModel", True

        def ports(items: Sequence[Any], kind: str) -> tuple[PortInfo, ...]:
            return tuple(
                PortInfo(
                    name=_port_name(p, i, kind),
                    names=tuple(sorted(p.get_names())),
                    shape=str(p.get_partial_shape()),
                    element_type=p.get_element_type().get_type_name(),
                )
                for i, p in enumerate(items)
            )

        counts = Counter(op.get_type_name() for op in model.get_ordered_ops())
        return ModelInfo(
            path=str(self.path),
            format=fmt,
            converted=converted,
            inputs=ports(model.inputs, "input"),
            outputs=ports(model.outputs, "output"),
            op_counts=by_count(counts),
            custom_conversions=dict(self._custom),
            source_op_counts=source_op_counts(self.path),
        )

    def input_specs(self) -> list[InputSpec]:
        """What each input accepts (after ``shapes`` reshaping)."""
        return [
            InputSpec(
                name=_port_name(p, i, "input"),
                dims=_dims(p.get_partial_shape()),
                dtype=_dtype(p.get_element_type()),
                element_type=p.get_element_type().get_type_name(),
            )
            for i, p in enumerate(self.model.inputs)
        ]

    def output_names(self) -> list[str]:
        """Output names in model order (``output<i>`` for unnamed outputs)."""
        return [_port_name(p, i, "output") for i, p in enumerate(self.model.outputs)]

    # -- compiling ---------------------------------------------------------------------
    def compile_config(self) -> dict[str, Any]:
        """The properties passed to ``compile_model``."""
        config: dict[str, Any] = {}
        if self.precision is not None:
            config["INFERENCE_PRECISION_HINT"] = self.precision
        if self.hint is not None:
            config["PERFORMANCE_HINT"] = self.hint.upper()
        if self.streams is not None:
            config["NUM_STREAMS"] = str(self.streams)
        if self.threads is not None:
            config["INFERENCE_NUM_THREADS"] = self.threads
        config.update(self.extra_config)
        return config

    @property
    def compiled(self) -> Any:
        """The ``openvino.CompiledModel`` (compiled on first use; time and cache hit kept)."""
        if self._compiled is None:
            model = self.model
            before: set[str] = set()
            if self.cache_dir is not None:
                try:
                    self.cache_dir.mkdir(parents=True, exist_ok=True)
                    # A folder OpenVINO cannot write to would make every run a silent cache
                    # miss: --cache-dir asks for caching, so refuse it like an uncreatable one.
                    with tempfile.TemporaryFile(dir=self.cache_dir):
                        pass
                except OSError as exc:
                    reason = "it is a file" if self.cache_dir.is_file() else exc.strerror
                    raise RunnerError(
                        f"cannot use {self.cache_dir} as the model cache folder: {reason}; "
                        "give a folder that exists or can be created, and is writable"
                    ) from None
                before = _blobs(self.cache_dir)
                self.core.set_property({"CACHE_DIR": str(self.cache_dir)})
            started = time.perf_counter()
            try:
                self._compiled = self.core.compile_model(model, self.device, self.compile_config())
            except RuntimeError as exc:
                reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
                raise RunnerError(
                    f"OpenVINO cannot compile {self.path} for {self.device} with "
                    f"{self.compile_config()}: {reason}"
                ) from None
            self.compile_time_s = time.perf_counter() - started
            if self.cache_dir is not None:
                # A hit reads a blob that is there; a miss writes a new one.
                self.cache_hit = bool(before) and not (_blobs(self.cache_dir) - before)
        return self._compiled

    def properties(self) -> dict[str, str]:
        """The effective device properties of the compiled model (what OpenVINO chose)."""
        found: dict[str, str] = {}
        supported = {str(p) for p in self.compiled.get_property("SUPPORTED_PROPERTIES")}
        for name in EFFECTIVE_PROPERTIES:
            if name in supported:
                value = self.compiled.get_property(name)
                found[name] = _property_text(value)
        return found

    # -- running -----------------------------------------------------------------------
    def prepare(
        self,
        inputs: Feeds | None = None,
        *,
        seed: int = 0,
        image: ImageOptions | None = None,
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Checked input arrays: *inputs* (arrays or file paths by name) plus seeded random data."""
        return prepare_inputs(
            self.input_specs(), inputs, shapes=self.shapes, seed=seed, image=image
        )

    def infer(
        self,
        inputs: Feeds | None = None,
        *,
        seed: int = 0,
        image: ImageOptions | None = None,
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Prepare *inputs* and run one inference; returns a copy of every output by name.

        *inputs* maps input names to arrays or ``.npy``/``.npz``/image paths; missing inputs
        get seeded random data (see :mod:`openvino_runner.inputs`). Same as
        ``run(prepare(inputs, seed=seed, image=image))``.
        """
        return self.run(self.prepare(inputs, seed=seed, image=image))

    def run(self, feeds: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        """Run one inference on *feeds* as :meth:`prepare` returned them (not checked again).

        Only the set of names is checked: a compiled model fed a dict that misses an input
        may run on uninitialised memory instead of failing.
        """
        expected = [spec.name for spec in self.input_specs()]
        if sorted(feeds) != sorted(expected):
            raise InputError(
                f"run() needs one prepared array per input ({', '.join(map(repr, expected))}), "
                f"got {', '.join(map(repr, feeds)) or 'none'}; use prepare() or infer()"
            )
        if self._request is None:
            self._request = self.compiled.create_infer_request()
        request = self._request
        try:
            request.infer({name: _contiguous(a) for name, a in feeds.items()})
        except RuntimeError as exc:
            reason = str(exc).strip().splitlines()[-1]
            raise InputError(f"OpenVINO rejected the inputs: {reason}") from None
        return {
            name: np.array(request.get_output_tensor(i).data, copy=True)
            for i, name in enumerate(self.output_names())
        }

    # -- benchmarking ------------------------------------------------------------------
    def benchmark(
        self,
        *,
        iterations: int | None = None,
        time_s: float | None = None,
        requests: int | None = None,
        inputs: Feeds | None = None,
        seed: int = 0,
        image: ImageOptions | None = None,
        progress: Progress | None = None,
    ) -> BenchmarkResult:
        """Measure latency and throughput.

        Runs until *iterations* inferences or *time_s* seconds (default 10 s). With the
        throughput hint, or ``requests > 1``, inferences run through an
        ``openvino.AsyncInferQueue`` of *requests* jobs (default: the device's optimal
        number); otherwise one request runs synchronously in a loop. *progress*, if given,
        is called as ``progress(done, elapsed_s)`` a few times per second.
        """
        check_limits(iterations, time_s, requests)
        feeds = self.prepare(inputs, seed=seed, image=image)
        compiled = self.compiled
        props = self.properties()
        hint = self.hint or props.get("PERFORMANCE_HINT", "").lower() or "latency"
        if requests is None:
            optimal = int(props.get("OPTIMAL_NUMBER_OF_INFER_REQUESTS", "1") or 1)
            requests = optimal if hint == "throughput" else 1
        ov = _openvino()
        tensors = {n: ov.Tensor(_contiguous(a)) for n, a in feeds.items()}
        seen = measure(
            ov,
            compiled,
            tensors,
            requests=requests,
            iterations=iterations,
            time_s=time_s,
            progress=progress,
        )
        assert self.compile_time_s is not None
        settings = {
            "device": self.device,
            "precision": self.precision or "device default",
            "hint": self.hint,
            "requests": requests,
            "streams": self.streams,
            "threads": self.threads,
            "cache_dir": str(self.cache_dir) if self.cache_dir is not None else None,
            "iterations": iterations,
            "time_s": time_s,
            "seed": seed,
            "shapes": {n: list(s) for n, s in self.shapes.items()},
            "config": {k: str(v) for k, v in self.extra_config.items()},
        }
        samples = seen.latencies_ms
        props["REQUESTS"] = str(requests)
        duration = seen.duration_s
        return BenchmarkResult(
            model=str(self.path),
            device=self.device,
            hint=hint,
            requests=requests,
            iterations=seen.iterations,
            duration_s=duration,
            throughput_fps=seen.iterations / duration if duration > 0 else 0.0,
            latency_ms=latency_summary(seen.latencies_ms),
            compile_time_s=self.compile_time_s,
            first_inference_ms=seen.first_inference_ms,
            cache_dir=str(self.cache_dir) if self.cache_dir is not None else None,
            cache_hit=self.cache_hit,
            input_shapes={n: list(a.shape) for n, a in feeds.items()},
            properties=props,
            settings=settings,
            histogram=histogram(samples),
            samples_ms=list(samples) if len(samples) <= MAX_SAMPLES else None,
            environment=machine_info(self.core, self.device),
        )


def _property_text(value: Any) -> str:
    """``f32`` for an element type, ``LATENCY`` for an enum, ``a,b`` for a list."""
    if isinstance(value, (list, tuple)):
        return ",".join(_property_text(v) for v in value)
    if hasattr(value, "get_type_name"):
        return str(value.get_type_name())
    text = str(value)
    return text.rsplit(".", 1)[-1] if type(value).__module__.startswith("openvino") else text
