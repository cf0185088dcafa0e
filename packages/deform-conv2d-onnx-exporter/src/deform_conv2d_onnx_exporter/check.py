"""Run one ONNX model in onnxruntime and (when installed) OpenVINO and compare the outputs."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

#: Used for a dimension that has no fixed size and no ``--shape`` override.
DEFAULT_DIM = 8


class CheckError(ValueError):
    """The model cannot be checked (bad shape override, a runtime refused it, ...)."""


@dataclass
class CheckReport:
    """What :func:`compare_runtimes` saw."""

    inputs: dict[str, tuple[int, ...]]
    outputs: dict[str, tuple[int, ...]]
    openvino_version: str | None = None
    openvino_precision: str | None = None
    #: Max abs difference per output between onnxruntime and OpenVINO.
    max_abs_error: dict[str, float] = field(default_factory=dict)
    #: Max |value| per output in onnxruntime's result (the scale for relative errors).
    max_abs_output: dict[str, float] = field(default_factory=dict)

    @property
    def worst(self) -> float | None:
        """The largest absolute error over all outputs (None for a model without outputs)."""
        return max(self.max_abs_error.values()) if self.max_abs_error else None

    def relative_error(self, name: str) -> float:
        """Max abs error of output *name* divided by its max |value| (0 for an all-zero output)."""
        scale = self.max_abs_output[name]
        return self.max_abs_error[name] / scale if scale > 0 else 0.0


def random_inputs(
    model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random feeds for every graph input that is not an initializer.

    Unknown dimensions are :data:`DEFAULT_DIM` unless *shapes* names the input.
    """
    shapes = dict(shapes or {})
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        if value.name in shapes:
            shape = [int(d) for d in shapes.pop(value.name)]
        else:
            shape = [
                d.dim_value if d.HasField("dim_value") else DEFAULT_DIM for d in tensor.shape.dim
            ]
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 4, shape).astype(dtype)
        else:
            raise CheckError(
                f"input {value.name!r} has element type {dtype}; "
                "only numeric inputs can be randomised"
            )
    if shapes:
        known = [v.name for v in model.graph.input if v.name not in initializers]
        raise CheckError(
            f"--shape names unknown input(s) {sorted(shapes)}; the model's inputs are {known}"
        )
    return feeds


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def openvino_available() -> bool:
    """True when the ``openvino`` package can be imported."""
    return _importable("openvino")


def missing_runtimes() -> list[str]:
    """The runtimes :func:`compare_runtimes` needs that cannot be imported (pip names)."""
    return [m for m in ("onnxruntime", "openvino") if not _importable(m)]


def _openvino_reason(exc: BaseException) -> str:
    """The informative part of an OpenVINO exception (not its C++ source locations)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    kept = [
        line
        for line in lines
        if not line.startswith(("Exception from src/", "Check '")) and line != "Summary:"
    ]
    return " ".join(kept or lines) or type(exc).__name__


def compare_runtimes(
    model: onnx.ModelProto | str, shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0
) -> CheckReport:
    """Run *model* on random inputs in onnxruntime and OpenVINO (f32); report the max errors.

    OpenVINO runs with ``INFERENCE_PRECISION_HINT=f32`` (its default on CPUs with AMX is
    bf16, which differs by ~1e-2). Raises :class:`CheckError` naming a runtime that is missing.
    """
    missing = missing_runtimes()
    if missing:
        raise CheckError(
            f"comparing needs {' and '.join(missing)} (pip install {' '.join(missing)})"
        )
    import onnxruntime as ort

    proto = onnx.load(model) if isinstance(model, str) else model
    feeds = random_inputs(proto, shapes, seed)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # the error is reported once, below
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        reference = dict(zip(names, session.run(None, feeds), strict=True))
    except Exception as exc:
        raise CheckError(f"onnxruntime could not run the model: {exc}") from exc
    report = CheckReport(
        inputs={k: tuple(v.shape) for k, v in feeds.items()},
        outputs={k: tuple(np.asarray(v).shape) for k, v in reference.items()},
    )
    import openvino as ov

    try:
        core = ov.Core()
        ov_model = core.read_model(proto.SerializeToString(), b"")
        compiled = core.compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        effective = compiled.get_property("INFERENCE_PRECISION_HINT")
        precision = effective.to_string() if hasattr(effective, "to_string") else str(effective)
        results = compiled(feeds)
    except Exception as exc:
        from deform_conv2d_onnx_exporter.lower import count_deform_conv

        if count_deform_conv(proto):
            raise CheckError(
                "OpenVINO cannot read the model's ONNX DeformConv node(s) (it has no conversion "
                "rule for DeformConv); run `deform-conv2d-onnx lower IN -o OUT` first and check "
                "the lowered model, or run this one with openvino-runner, whose DeformConv "
                "extension reads it"
            ) from exc
        raise CheckError(f"OpenVINO could not run the model: {_openvino_reason(exc)}") from exc
    report.openvino_version = ov.get_version()
    report.openvino_precision = precision
    for index, name in enumerate(names):
        got = np.asarray(results[compiled.output(index)])
        want = np.asarray(reference[name])
        if got.shape != want.shape:
            raise CheckError(
                f"output {name!r}: onnxruntime shape {want.shape}, OpenVINO shape {got.shape}"
            )
        report.max_abs_error[name] = (
            float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        )
        report.max_abs_output[name] = float(np.max(np.abs(want))) if want.size else 0.0
    return report
