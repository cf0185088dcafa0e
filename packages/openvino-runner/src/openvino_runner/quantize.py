"""Post-training INT8 quantization with NNCF, and what it costs and gains, in one run.

:func:`quantize_model` reads calibration samples (:func:`load_samples`: images, ``.npy``,
``.npz``), keeps the last ones aside (held out: never seen by calibration), quantizes the
model with ``nncf.quantize``, writes the INT8 IR atomically (as ``convert`` does), then

* runs the f32 model and the INT8 IR on the held-out samples: per output max abs error,
  worst cosine similarity and, for classifier-shaped outputs ``(N, C)``, top-1 agreement;
  ``drop`` is the share of held-out samples whose top-1 class changed (classifiers), else
  ``1 - worst cosine``;
* times both, interleaved (f32, INT8, INT8, f32, ... over ``rounds``), for latency (one
  request back to back) and throughput (the throughput hint's parallel requests).

NNCF is the optional ``quantize`` extra. Whether INT8 pays depends on the CPU (VNNI, AMX,
or neither): the report carries the CPU's flags rather than assuming them.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openvino_runner.benchmark import machine_info, measure
from openvino_runner.compare import classification_rows
from openvino_runner.convert import check_writable, ir_paths, save_ir
from openvino_runner.errors import InputError, MissingDependencyError, RunnerError
from openvino_runner.inputs import IMAGE_SUFFIXES, ImageOptions, InputSpec, check_array, load_image
from openvino_runner.runner import Runner, _contiguous, _openvino

PRESETS = ("performance", "mixed")
DEFAULT_SUBSET = 300


@dataclass(frozen=True)
class OutputAccuracy:
    """One output of the INT8 model against the f32 model on the held-out samples."""

    name: str
    max_abs: float
    worst_cosine: float
    top1_agreement: float | None  # classifier-shaped outputs only


@dataclass(frozen=True)
class Speed:
    """Median latency (one request) and throughput (parallel requests) of one model."""

    latency_ms: float
    throughput_fps: float


@dataclass(frozen=True)
class QuantizeReport:
    """What :func:`quantize_model` wrote and measured."""

    source: str
    xml: str
    bin: str
    preset: str
    calibration_samples: int
    held_out_samples: int
    ignored_scope: dict[str, list[str]]
    fake_quantize_ops: int
    outputs: list[OutputAccuracy]
    drop: float
    max_drop: float | None
    f32: Speed
    int8: Speed
    latency_speedup: float  # f32 latency / INT8 latency
    throughput_speedup: float  # INT8 throughput / f32 throughput
    rounds: int
    cpu: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True unless *max_drop* was given and the drop exceeds it."""
        return self.max_drop is None or self.drop <= self.max_drop

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (``passed`` included)."""
        data = asdict(self)
        data["passed"] = self.passed
        return data


Sample = dict[str, np.ndarray[Any, Any]]


def _split_stack(spec: InputSpec, array: np.ndarray[Any, Any], source: str) -> list[Any]:
    """Samples from one array: ``(N, *input_shape)`` stacked, or batch-1 slices of an array
    of the input's own rank (N samples along the first axis)."""
    rank = len(spec.dims) if spec.dims is not None else array.ndim - 1
    if array.ndim == rank + 1:
        samples = [array[i] for i in range(array.shape[0])]
    elif array.ndim == rank:
        samples = [array[i : i + 1] for i in range(array.shape[0])]
    else:
        raise InputError(
            f"{source}: input {spec.name!r} has rank {rank}; give samples stacked as "
            f"(N, ...) with rank {rank + 1}, or of rank {rank} split along the first axis, "
            f"got shape {list(array.shape)}"
        )
    for sample in samples:
        check_array(spec, sample, source)
    return samples


def load_samples(
    specs: Sequence[InputSpec], data: str | os.PathLike[str], image: ImageOptions | None = None
) -> list[Sample]:
    """Calibration samples from *data*: a folder of images (or ``.npy`` files, one sample
    each) for a one-input model, an ``.npy`` (one-input model) or an ``.npz`` whose arrays
    are named after the inputs, each array holding N samples (see :func:`_split_stack`)."""
    path = Path(data)
    if not path.exists():
        raise InputError(f"--data {path}: does not exist")
    names = ", ".join(repr(s.name) for s in specs)
    if path.is_dir() or path.suffix.lower() == ".npy":
        if len(specs) != 1:
            raise InputError(
                f"--data {path}: the model has {len(specs)} inputs ({names}); give an .npz "
                "with one array per input name"
            )
        spec = specs[0]
        if path.is_file():
            return [{spec.name: s} for s in _split_stack(spec, np.load(path), str(path))]
        files = sorted(
            p
            for p in path.iterdir()
            if p.is_file() and (p.suffix.lower() in IMAGE_SUFFIXES or p.suffix.lower() == ".npy")
        )
        if not files:
            raise InputError(
                f"--data {path}: no images ({' '.join(sorted(IMAGE_SUFFIXES))}) or .npy files"
            )
        samples = []
        for file in files:
            if file.suffix.lower() == ".npy":
                array = np.load(file)
                check_array(spec, array, str(file))
            else:
                array = load_image(file, spec, image or ImageOptions())
            samples.append({spec.name: array})
        return samples
    if path.suffix.lower() != ".npz":
        raise InputError(f"--data {path}: expected a folder of images, an .npy or an .npz")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    # By name only, as `run -i` matches an .npz: an array under another name is a mistake.
    missing = [s.name for s in specs if s.name not in arrays]
    unknown = [n for n in arrays if n not in {s.name for s in specs}]
    if missing or unknown:
        problem = f"no array named {missing[0]!r}" if missing else f"an array {unknown[0]!r}"
        raise InputError(
            f"--data {path}: {problem}; the model's inputs are {names}, "
            f"the file holds {', '.join(map(repr, arrays)) or 'nothing'}"
        )
    stacks = {s.name: _split_stack(s, arrays[s.name], f"{path}[{s.name}]") for s in specs}
    counts = {len(v) for v in stacks.values()}
    if len(counts) != 1:
        raise InputError(f"--data {path}: the arrays hold different numbers of samples")
    return [{n: stacks[n][i] for n in stacks} for i in range(counts.pop())]


def _nncf() -> Any:
    try:
        import nncf  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise MissingDependencyError(
            "quantizing needs NNCF: pip install 'openvino-runner[quantize]'"
        ) from None
    import logging

    nncf.set_log_level(logging.ERROR)
    return nncf


def _accuracy(
    f32: Runner, int8: Runner, held_out: Sequence[Sample]
) -> tuple[list[OutputAccuracy], float]:
    names = f32.output_names()
    got: dict[str, list[np.ndarray[Any, Any]]] = {n: [] for n in names}
    want: dict[str, list[np.ndarray[Any, Any]]] = {n: [] for n in names}
    for sample in held_out:
        for name, a, b in zip(
            names, int8.run(sample).values(), f32.run(sample).values(), strict=True
        ):
            got[name].append(a.astype(np.float64))
            want[name].append(b.astype(np.float64))
    outputs = []
    drops = []
    for name in names:
        cosines = []
        agree: list[bool] = []
        max_abs = 0.0
        for a, b in zip(got[name], want[name], strict=True):
            max_abs = max(max_abs, float(np.abs(a - b).max()) if a.size else 0.0)
            norm = float(np.linalg.norm(a) * np.linalg.norm(b))
            cosines.append(float(np.dot(a.ravel(), b.ravel()) / norm) if norm > 0 else 1.0)
            rows_a, rows_b = classification_rows(a), classification_rows(b)
            if rows_a is not None and rows_b is not None and rows_a.shape[1] > 1:
                agree.extend(bool(x) for x in rows_a.argmax(axis=1) == rows_b.argmax(axis=1))
        top1 = sum(agree) / len(agree) if agree else None
        outputs.append(OutputAccuracy(name, max_abs, min(cosines), top1))
        drops.append(1.0 - top1 if top1 is not None else 1.0 - min(cosines))
    return outputs, max(drops)


def _speed(
    models: Mapping[str, Runner], sample: Sample, *, rounds: int, time_s: float
) -> dict[str, Speed]:
    """Latency and throughput of each model, measured in turns that alternate the order."""
    ov = _openvino()
    core = next(iter(models.values())).core
    tensors = {n: ov.Tensor(_contiguous(a)) for n, a in sample.items()}
    compiled: dict[tuple[str, str], tuple[Any, int]] = {}
    for key, runner in models.items():
        for hint in ("LATENCY", "THROUGHPUT"):
            config = {**runner.compile_config(), "PERFORMANCE_HINT": hint}
            try:
                model = core.compile_model(runner.model, runner.device, config)
            except RuntimeError as exc:
                reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
                raise RunnerError(
                    f"OpenVINO cannot compile the {key} model for timing: {reason}"
                ) from None
            requests = 1
            if hint == "THROUGHPUT":
                requests = int(model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
            compiled[(key, hint)] = (model, max(requests, 1))
    latency: dict[str, list[float]] = {k: [] for k in models}
    throughput: dict[str, list[float]] = {k: [] for k in models}
    order = list(models)
    for turn in range(rounds):
        for key in order if turn % 2 == 0 else order[::-1]:
            model, _ = compiled[(key, "LATENCY")]
            seen = measure(ov, model, tensors, requests=1, iterations=None, time_s=time_s)
            latency[key].append(statistics.median(seen.latencies_ms))
            model, requests = compiled[(key, "THROUGHPUT")]
            seen = measure(ov, model, tensors, requests=requests, iterations=None, time_s=time_s)
            throughput[key].append(seen.iterations / seen.duration_s)
    return {
        k: Speed(statistics.median(latency[k]), statistics.median(throughput[k])) for k in models
    }


def quantize_model(
    runner: Runner,
    output: str | os.PathLike[str],
    data: str | os.PathLike[str],
    *,
    subset: int = DEFAULT_SUBSET,
    held_out: int | None = None,
    preset: str = "performance",
    ignored_names: Sequence[str] = (),
    ignored_types: Sequence[str] = (),
    ignored_patterns: Sequence[str] = (),
    image: ImageOptions | None = None,
    max_drop: float | None = None,
    rounds: int = 3,
    time_s: float = 1.0,
) -> QuantizeReport:
    """Quantize *runner*'s model to INT8 at *output* (``.xml``) and measure the cost and
    the speed-up (see the module doc). *held_out* samples (default: a fifth, at least one)
    are taken from the end of *data* and never calibrate; at most *subset* of the others do.
    """
    if preset not in PRESETS:
        raise RunnerError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    xml, bin_ = ir_paths(output)
    check_writable(xml)
    if xml.resolve() == runner.path.resolve():
        raise InputError(f"{xml} is the source model; write the INT8 IR under another name")
    nncf = _nncf()
    samples = load_samples(runner.input_specs(), data, image)
    keep = held_out if held_out is not None else max(1, len(samples) // 5)
    if len(samples) < 2 or keep < 1 or keep >= len(samples):
        raise InputError(
            f"--data has {len(samples)} samples: at least 2 are needed, some to calibrate and "
            f"some ({keep} asked) held out to measure the accuracy cost"
        )
    calibration, evaluation = samples[:-keep], samples[-keep:]
    calibration = calibration[:subset]
    scope = {"names": list(ignored_names), "types": list(ignored_types)}
    scope["patterns"] = list(ignored_patterns)
    with contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars: never on stdout
        try:
            quantized = nncf.quantize(
                runner.model.clone(),
                nncf.Dataset(calibration),
                preset=getattr(nncf.QuantizationPreset, preset.upper()),
                subset_size=len(calibration),
                ignored_scope=nncf.IgnoredScope(
                    names=list(ignored_names),
                    types=list(ignored_types),
                    patterns=list(ignored_patterns),
                ),
            )
        except (
            RuntimeError,
            ValueError,
            nncf.errors.ValidationError,
            nncf.errors.UnsupportedModelError,
            nncf.errors.ParameterNotSupportedError,
        ) as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
            raise RunnerError(f"NNCF cannot quantize {runner.path}: {reason}") from None
    save_ir(quantized, xml, compress_to_fp16=False)
    int8 = Runner(xml, runner.device, runner.precision, config=runner.extra_config)
    fake = sum(1 for op in int8.model.get_ordered_ops() if op.get_type_name() == "FakeQuantize")
    outputs, drop = _accuracy(runner, int8, evaluation)
    speeds = _speed({"f32": runner, "int8": int8}, evaluation[0], rounds=rounds, time_s=time_s)
    f32, q = speeds["f32"], speeds["int8"]
    return QuantizeReport(
        source=str(runner.path),
        xml=str(xml),
        bin=str(bin_),
        preset=preset,
        calibration_samples=len(calibration),
        held_out_samples=len(evaluation),
        ignored_scope=scope,
        fake_quantize_ops=fake,
        outputs=outputs,
        drop=drop,
        max_drop=max_drop,
        f32=f32,
        int8=q,
        latency_speedup=f32.latency_ms / q.latency_ms if q.latency_ms > 0 else 0.0,
        throughput_speedup=q.throughput_fps / f32.throughput_fps if f32.throughput_fps else 0.0,
        rounds=rounds,
        cpu=machine_info(runner.core)["cpu"],
    )
