"""Check ONNX models: a file against the PyTorch module it came from, or two runtimes.

One tolerance rule everywhere, the same as openvino-runner's ``compare``: an output passes
when ``|actual - expected| <= atol + rtol * |expected|`` for every element (numpy's
``allclose`` rule), with ``atol = 1e-4`` and ``rtol = 1e-3`` by default, and the shapes match.

* :func:`check_export` runs the exported file in onnxruntime and, when installed, OpenVINO
  (f32) and compares each with the module's own output (PyTorch is the source of truth).
* :func:`compare_runtimes` runs one file in onnxruntime and OpenVINO on random inputs (the
  console script's ``check``; a lowered file can be checked against its native source).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from deform_conv2d_onnx_exporter._clikit import fill_free_dims

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3


class CheckError(ValueError):
    """The model cannot be checked (bad shape override, a runtime refused it, ...)."""


@dataclass(frozen=True)
class OutputError:
    """How one output of one runtime compares with its reference."""

    name: str
    runtime: str
    shape: tuple[int, ...]
    max_abs_error: float
    #: Max relative error over the elements whose reference magnitude exceeds atol.
    max_rel_error: float
    max_abs_reference: float
    passed: bool


@dataclass
class CheckReport:
    """What :func:`compare_runtimes` or :func:`check_export` saw."""

    reference: str
    inputs: dict[str, tuple[int, ...]]
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    outputs: list[OutputError] = field(default_factory=list)
    openvino_version: str | None = None
    #: Optional runtimes not run: not importable, or (OpenVINO) unable to read the model.
    skipped: list[str] = field(default_factory=list)
    #: Why each skipped runtime was not run, where it is not "not installed".
    skip_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when every output of every runtime is within the tolerance."""
        return all(o.passed for o in self.outputs)

    @property
    def worst(self) -> float | None:
        """The largest absolute error over all outputs (None for a model without outputs)."""
        return max((o.max_abs_error for o in self.outputs), default=None)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        data = asdict(self)
        data["passed"] = self.passed
        return data


def compare_output(
    name: str,
    runtime: str,
    actual: np.ndarray,
    expected: np.ndarray,
    *,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> OutputError:
    """Compare one output with its reference under the one tolerance rule (see the module)."""
    if not (np.isfinite(atol) and np.isfinite(rtol) and atol >= 0 and rtol >= 0):
        raise CheckError(f"atol and rtol must be finite numbers >= 0, got {atol:g} and {rtol:g}")
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return OutputError(
            name, runtime, tuple(actual.shape), float("inf"), float("inf"), 0.0, False
        )
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    diff = np.abs(a - e)
    significant = np.abs(e) > atol
    rel = float((diff[significant] / np.abs(e[significant])).max()) if significant.any() else 0.0
    close = (diff <= atol + rtol * np.abs(e)) | (a == e) | (np.isnan(a) & np.isnan(e))
    return OutputError(
        name=name,
        runtime=runtime,
        shape=tuple(actual.shape),
        max_abs_error=float(diff.max()) if diff.size else 0.0,
        max_rel_error=rel,
        max_abs_reference=float(np.abs(e).max()) if e.size else 0.0,
        passed=bool(close.all()),
    )


def input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str | None, Sequence[int]] | None = None
) -> dict[str, tuple[int, ...]]:
    """The shape of every graph input: *shapes* first, free dimensions 1 (first) or 224.

    A key of None in *shapes* names the model's only input.
    """
    shapes = dict(shapes or {})
    initializers = {i.name for i in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in initializers]
    if None in shapes:
        if len(names) != 1:
            raise CheckError(
                f"a --shape without a name needs a model with one input; this one has {names}: "
                "give NAME=D0,D1,..."
            )
        unnamed = tuple(int(d) for d in shapes.pop(None))
        named = shapes.get(names[0])
        if named is not None and tuple(int(d) for d in named) != unnamed:
            # the unnamed one replaced the named one silently
            raise CheckError(
                f"--shape for {names[0]!r} given twice: {names[0]}={','.join(map(str, named))} "
                f"and {','.join(map(str, unnamed))} (no NAME: the model's only input); give one"
            )
        shapes[names[0]] = unnamed
    unknown = sorted(str(k) for k in shapes if k not in names)
    if unknown:
        raise CheckError(
            f"--shape names unknown input(s) {unknown}; the model's inputs are {names}"
        )
    result: dict[str, tuple[int, ...]] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.name in shapes:
            result[value.name] = tuple(int(d) for d in shapes[value.name])
            continue
        dims = [
            d.dim_value if d.HasField("dim_value") else None
            for d in value.type.tensor_type.shape.dim
        ]
        result[value.name] = fill_free_dims(dims)
    return result


def random_inputs(
    model: onnx.ModelProto,
    shapes: Mapping[str | None, Sequence[int]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Random feeds for every graph input that is not an initializer (see :func:`input_shapes`)."""
    rng = np.random.default_rng(seed)
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    feeds: dict[str, np.ndarray] = {}
    for name, shape in input_shapes(model, shapes).items():
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(types[name]))
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 4, shape).astype(dtype)
        else:
            raise CheckError(
                f"input {name!r} has element type {dtype}; only numeric inputs can be randomised"
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


def _model_bytes(model: onnx.ModelProto | str | os.PathLike[str]) -> tuple[onnx.ModelProto, Any]:
    """The proto, and what a runtime should read (a path keeps external data beside it)."""
    if isinstance(model, onnx.ModelProto):
        return model, model.SerializeToString()
    return onnx.load(os.fspath(model), load_external_data=False), os.fspath(model)


def run_onnxruntime(
    model: onnx.ModelProto | str | os.PathLike[str], feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run *model* on onnxruntime's CPU provider; outputs by name."""
    import onnxruntime as ort

    _, source = _model_bytes(model)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # the error is reported once, below
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        values = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:
        raise CheckError(f"onnxruntime could not run the model: {exc}") from exc
    return dict(zip(names, (np.asarray(v) for v in values), strict=True))


def run_openvino(
    model: onnx.ModelProto | str | os.PathLike[str], feeds: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], str]:
    """Run *model* on OpenVINO's CPU at f32 (its default on AMX CPUs is bf16); outputs by name.

    Returns the outputs (in the model's output order, named by the ONNX graph) and
    OpenVINO's version.
    """
    import openvino as ov

    proto, source = _model_bytes(model)
    try:
        core = ov.Core()
        if isinstance(source, bytes):
            ov_model = core.read_model(source, b"")
        else:
            ov_model = core.read_model(source)
        compiled = core.compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        port_names = [next(iter(sorted(p.get_names()))) for p in compiled.inputs]
        wanted = {
            name: feeds[next((n for n in sorted(p.get_names()) if n in feeds), name)]
            for name, p in zip(port_names, compiled.inputs, strict=True)
        }
        results = compiled(wanted)
    except Exception as exc:
        if _has_native_deform_conv(proto):
            raise CheckError(
                "OpenVINO cannot read the model's DeformConv node(s) (it has no conversion "
                "rule for DeformConv); run `deform-conv2d-onnx lower IN -o OUT` first and check "
                "the lowered model, or run this one with openvino-runner, whose DeformConv "
                "extension reads it"
            ) from exc
        raise CheckError(f"OpenVINO could not run the model: {_openvino_reason(exc)}") from exc
    names = [o.name for o in proto.graph.output]
    outputs = {
        name: np.asarray(results[compiled.output(index)]) for index, name in enumerate(names)
    }
    return outputs, ov.get_version()


def _check_same_interface(model: onnx.ModelProto, source: onnx.ModelProto | str) -> None:
    """Raise :class:`CheckError` unless *source* has *model*'s input and output names."""
    if isinstance(source, str):
        source = onnx.load(source, load_external_data=False)

    def names(proto: onnx.ModelProto) -> tuple[list[str], list[str]]:
        weights = {i.name for i in proto.graph.initializer}
        inputs = [i.name for i in proto.graph.input if i.name not in weights]
        return inputs, [o.name for o in proto.graph.output]

    for kind, mine, theirs in zip(("inputs", "outputs"), names(model), names(source), strict=True):
        if sorted(mine) != sorted(theirs):
            raise CheckError(
                f"the source model's {kind} {theirs} are not the model's {mine}: the source "
                "must be the model this one was lowered from"
            )


def compare_runtimes(
    model: onnx.ModelProto | str,
    shapes: Mapping[str | None, Sequence[int]] | None = None,
    seed: int = 0,
    *,
    source: onnx.ModelProto | str | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> CheckReport:
    """Run *model* on random inputs in onnxruntime and OpenVINO (f32) and compare them.

    The reference is onnxruntime on *model*, or onnxruntime on *source* when given (a model
    holding native ``DeformConv`` that *model* was lowered from: the lowered file is then
    checked against what it replaces, in both runtimes). Raises :class:`CheckError` naming a
    runtime that is missing.
    """
    missing = missing_runtimes()
    if missing:
        raise CheckError(
            f"comparing needs {' and '.join(missing)} (pip install {' '.join(missing)})"
        )
    proto = onnx.load(model) if isinstance(model, str) else model
    feeds = random_inputs(proto, shapes, seed)
    if source is None:
        reference = run_onnxruntime(proto, feeds)
        report = CheckReport(
            "onnxruntime", {k: tuple(v.shape) for k, v in feeds.items()}, atol, rtol
        )
    else:
        _check_same_interface(proto, source)
        reference = run_onnxruntime(source, feeds)
        report = CheckReport(
            "onnxruntime on the source", {k: tuple(v.shape) for k, v in feeds.items()}, atol, rtol
        )
        for name, got in run_onnxruntime(proto, feeds).items():
            report.outputs.append(
                compare_output(name, "onnxruntime", got, reference[name], atol=atol, rtol=rtol)
            )
    got_ov, report.openvino_version = run_openvino(proto, feeds)
    for name, got in got_ov.items():
        if name not in reference:
            raise CheckError(f"output {name!r} is not an output of the reference model")
        report.outputs.append(
            compare_output(name, "openvino", got, reference[name], atol=atol, rtol=rtol)
        )
    return report


def _torch_outputs(module: Any, args: tuple[Any, ...]) -> tuple[list[np.ndarray], str]:
    """The module's outputs and what computed them.

    A module whose registered DCN Functions cannot run here (mmcv without its compiled ops,
    the usual export machine) is run with those Functions computing through their
    torchvision mapping, and the reference says so.
    """
    import torch

    from deform_conv2d_onnx_exporter.functions import registered_functions, through_torchvision

    reference = "torch"
    with torch.no_grad():
        try:
            result = module(*args)
        except Exception as exc:
            names = registered_functions()
            if not names:
                raise
            with through_torchvision():
                result = module(*args)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            reference = f"torch, {', '.join(names)} through torchvision ({reason})"
    flat = result if isinstance(result, list | tuple) else [result]
    return [t.detach().cpu().numpy() for t in flat], reference


def _has_native_deform_conv(proto: onnx.ModelProto) -> bool:
    from deform_conv2d_onnx_exporter.lower import count_custom_deform_conv, count_deform_conv

    return bool(count_deform_conv(proto) or count_custom_deform_conv(proto))


def check_export(
    module: Any,
    args: tuple[Any, ...] | Any,
    path: onnx.ModelProto | str | os.PathLike[str],
    *,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    runtimes: Sequence[str] | None = None,
) -> CheckReport:
    """Run the exported *path* on *args* and compare it with ``module(*args)`` (PyTorch).

    Where a registered DCN Function's own forward cannot run (its compiled ops are missing),
    the reference computes it through its torchvision mapping, and ``report.reference`` says
    so.

    Args:
        module: the ``torch.nn.Module`` the file was exported from.
        args: the inputs (a tensor or a tuple of tensors), fed to the file's inputs in order.
        path: the exported model (a path, its external data beside it, or a ModelProto).
        runtimes: ``("onnxruntime", "openvino")`` by default, OpenVINO only when installed
            and the model has no native ``DeformConv`` (which it cannot read; listed in
            ``report.skipped`` otherwise); name them to require them.

    Returns:
        A :class:`CheckReport`; ``report.passed`` tells whether every output of every
        runtime is within ``atol + rtol * |torch|`` element-wise.
    """
    import torch

    if isinstance(args, torch.Tensor):
        args = (args,)
    proto, _ = _model_bytes(path)
    want, reference = _torch_outputs(module, tuple(args))
    initializers = {i.name for i in proto.graph.initializer}
    names = [v.name for v in proto.graph.input if v.name not in initializers]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if len(tensors) != len(names):
        raise CheckError(
            f"the model has {len(names)} input(s) {names} but {len(tensors)} tensor argument(s) "
            "were given"
        )
    feeds = {n: t.detach().cpu().numpy() for n, t in zip(names, tensors, strict=True)}
    outputs = [o.name for o in proto.graph.output]
    if len(outputs) != len(want):
        raise CheckError(
            f"the model has {len(outputs)} output(s) but the module returned {len(want)}"
        )
    report = CheckReport(reference, {k: tuple(v.shape) for k, v in feeds.items()}, atol, rtol)
    asked = list(runtimes) if runtimes is not None else ["onnxruntime", "openvino"]
    for runtime in asked:
        if runtime not in ("onnxruntime", "openvino"):
            raise CheckError(f"unknown runtime {runtime!r}: expected onnxruntime or openvino")
        if not _importable(runtime):
            if runtimes is not None:
                raise CheckError(f"{runtime} cannot be imported (pip install {runtime})")
            report.skipped.append(runtime)
            continue
        if runtime == "openvino" and runtimes is None and _has_native_deform_conv(proto):
            report.skipped.append(runtime)
            report.skip_reasons[runtime] = "cannot read native DeformConv (lower the model)"
            continue
        if runtime == "onnxruntime":
            got = run_onnxruntime(path, feeds)
        else:
            got, report.openvino_version = run_openvino(path, feeds)
        for name, expected in zip(outputs, want, strict=True):
            report.outputs.append(
                compare_output(name, runtime, got[name], expected, atol=atol, rtol=rtol)
            )
    return report


def format_report(report: CheckReport) -> list[str]:
    """Human-readable lines: the inputs, then one line per output and runtime."""
    lines = [f"input  {name}: {list(shape)}" for name, shape in report.inputs.items()]
    if report.openvino_version:
        lines.append(f"OpenVINO {report.openvino_version} at f32")
    for o in report.outputs:
        verdict = "ok" if o.passed else "BEYOND TOLERANCE"
        lines.append(
            f"{o.runtime} vs {report.reference}, {o.name} {list(o.shape)}: max abs error "
            f"{o.max_abs_error:.3g}, max rel error {o.max_rel_error:.3g} "
            f"(max |reference| {o.max_abs_reference:.3g}): {verdict}"
        )
    for runtime in report.skipped:
        why = report.skip_reasons.get(runtime, "not installed")
        lines.append(f"{runtime}: {why}, not checked")
    return lines
