"""OpenVINO against onnxruntime: the same inputs through both, per-output error metrics.

:func:`compare_arrays` is a pure function of two arrays; :func:`compare_with_onnxruntime`
runs both engines (onnxruntime is the optional ``onnxruntime`` extra).

Metrics per output: max absolute error; max relative error over the elements whose
reference magnitude exceeds ``atol`` (elsewhere a relative error means nothing); cosine
similarity of the flattened outputs; and, for classification-shaped outputs ``(N, C)``
(trailing 1-sized dimensions ignored), top-1 agreement and top-k overlap per row. An output
passes when ``|actual - expected| <= atol + rtol * |expected|`` everywhere (numpy's
``allclose`` rule) and the shapes match.

A failing output that an ONNX ``Softmax`` produces gets a note (:func:`softmax_note`): both
engines are run once more with the softmax's input exposed, and the note says whether that
input (the logits) matches and whether the softmax is ill-conditioned. A softmax turns a
logit difference ``d`` into output ratios of up to ``e**(2*d)``; with logits of ~1e10 (the
onnx wheel's light models have constant weights) one f32 step is ~1e3, so summation order
alone decides the outputs, and no tolerance on them means anything.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from openvino_runner.errors import MissingDependencyError, ModelFileError, RunnerError
from openvino_runner.inputs import Feeds, ImageOptions
from openvino_runner.runner import Runner

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3
DEFAULT_TOP_K = 5


@dataclass(frozen=True)
class OutputComparison:
    """How one OpenVINO output compares with the reference."""

    name: str
    shape: list[int]
    reference_shape: list[int]
    max_abs: float
    max_rel: float
    cosine: float
    top1_agreement: float | None
    topk_overlap: float | None
    k: int | None
    passed: bool
    note: str | None = None  # why it failed, when that can be told (see softmax_note)


@dataclass(frozen=True)
class CompareReport:
    """All outputs compared; ``passed`` is true when every output passed."""

    model: str
    reference: str
    precision: str
    atol: float
    rtol: float
    outputs: list[OutputComparison]
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)


def classification_rows(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """``(N, C)`` scores when *array* is classification-shaped, else ``None``."""
    shape = list(array.shape)
    while len(shape) > 2 and shape[-1] == 1:
        shape.pop()
    if len(shape) != 2 or shape[1] < 2:
        return None
    return array.reshape(shape)


def compare_arrays(
    name: str,
    actual: np.ndarray[Any, Any],
    expected: np.ndarray[Any, Any],
    *,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    top_k: int = DEFAULT_TOP_K,
) -> OutputComparison:
    """Compare one output (*actual*) with its reference (*expected*)."""
    if actual.shape != expected.shape:
        return OutputComparison(
            name,
            list(actual.shape),
            list(expected.shape),
            float("inf"),
            float("inf"),
            0.0,
            None,
            None,
            None,
            False,
        )
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    diff = np.abs(a - e)
    max_abs = float(diff.max()) if diff.size else 0.0
    significant = np.abs(e) > atol
    max_rel = (
        float((diff[significant] / np.abs(e[significant])).max()) if significant.any() else 0.0
    )
    norms = float(np.linalg.norm(a) * np.linalg.norm(e))
    cosine = float(np.dot(a, e) / norms) if norms > 0 else float(max_abs == 0)
    # Equal infinities and NaN in both places count as agreement.
    close = (diff <= atol + rtol * np.abs(e)) | (a == e) | (np.isnan(a) & np.isnan(e))
    passed = bool(close.all())
    top1 = overlap = None
    k = None
    rows_a, rows_e = classification_rows(actual), classification_rows(expected)
    if rows_a is not None and rows_e is not None:
        k = min(top_k, rows_a.shape[1])
        top1 = float(np.mean(rows_a.argmax(axis=1) == rows_e.argmax(axis=1)))
        top_a = np.argsort(-rows_a, axis=1, kind="stable")[:, :k]
        top_e = np.argsort(-rows_e, axis=1, kind="stable")[:, :k]
        overlap = float(
            np.mean([len(set(ra) & set(re_)) / k for ra, re_ in zip(top_a, top_e, strict=True)])
        )
    return OutputComparison(
        name,
        list(actual.shape),
        list(expected.shape),
        max_abs,
        max_rel,
        cosine,
        top1,
        overlap,
        k,
        passed,
    )


def run_onnxruntime(
    model: str | bytes,
    feeds: Mapping[str, np.ndarray[Any, Any]],
    *,
    label: str | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """Run *model* (a path, or serialized ONNX bytes named *label* in errors) once on
    onnxruntime's CPU provider; ``(name, array)`` in model order.

    Bytes whose weights are external data (``MODEL.onnx.data``, what torch's dynamo
    exporter writes) find them in *base_dir*: onnxruntime otherwise looks in the working
    directory and refuses any other path.
    """
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError(
            "comparing needs onnxruntime: pip install 'openvino-runner[onnxruntime]'"
        ) from None
    what = label or (model if isinstance(model, str) else "the model")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if isinstance(model, bytes) and base_dir is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(base_dir)
        )
    try:
        session = onnxruntime.InferenceSession(
            model, sess_options=options, providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
    except Exception as exc:  # onnxruntime raises its own exception types
        raise RunnerError(f"onnxruntime cannot run {what}: {str(exc).strip()[:500]}") from None
    for port in session.get_inputs():
        _check_fixed_shape(port.name, port.shape, feeds.get(port.name), what)
    try:
        outputs = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:
        raise RunnerError(f"onnxruntime cannot run {what}: {str(exc).strip()[:500]}") from None
    return [(n, np.asarray(o)) for n, o in zip(names, outputs, strict=True)]


def _check_fixed_shape(name: str, fixed: Sequence[Any], feed: Any, what: str) -> None:
    """Refuse a feed whose shape the ONNX file's fixed dimensions (ints; names and None are
    free) do not allow: a --shape reshapes OpenVINO's copy of the model, not onnxruntime's.
    An input of unknown rank (onnxruntime reports []) takes any shape."""
    if feed is None or not fixed:
        return
    shape = list(np.shape(feed))
    if len(shape) == len(fixed) and all(
        not isinstance(d, int) or d == got for d, got in zip(fixed, shape, strict=True)
    ):
        return
    file_shape = ",".join(str(d) if isinstance(d, int) else "?" for d in fixed)
    raise RunnerError(
        f"input {name!r} is [{','.join(map(str, shape))}] but {what} fixes it at "
        f"[{file_shape}], and onnxruntime runs the file as it is; give inputs of that shape"
        " (--shape, --input), or a model exported with dynamic axes"
    )


def f32_step(magnitude: float) -> float:
    """The gap between adjacent float32 values at *magnitude* (one rounding step)."""
    return float(np.spacing(np.float32(abs(magnitude))))


def softmax_note(
    name: str,
    logits_name: str,
    actual: np.ndarray[Any, Any],
    expected: np.ndarray[Any, Any],
    *,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> str:
    """Explain a failing softmax output *name* from its input *logits_name* in both engines.

    *actual* and *expected* are the logits (OpenVINO's and the reference's). The note says
    how far apart they are (in f32 steps at their magnitude, and relatively), what that
    difference can do to a softmax (outputs scale by up to ``e**(2*d)`` for a logit
    difference ``d``), and, when the logits pass the tolerance, that the mismatch is the
    softmax's conditioning rather than a conversion error.
    """
    if actual.shape != expected.shape:
        return (
            f"{name} is Softmax({logits_name!r}), whose shapes differ too: "
            f"{list(actual.shape)} vs reference {list(expected.shape)}"
        )
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    if a.size == 0:
        return f"{name} is Softmax({logits_name!r}), which is empty"
    magnitude = float(np.abs(e).max())
    step = f32_step(magnitude)
    diff = float(np.abs(a - e).max())
    spread = float(e.max() - e.min())
    parts = [
        f"{name} is Softmax({logits_name!r}); the reference's logits reach {magnitude:.4g}, "
        f"where one f32 step is {step:.3g}"
    ]
    if spread <= 4 * step:
        parts.append(
            f"they are all equal within f32 rounding (spread {spread:.4g} = "
            f"{spread / step:.0f} steps), so their softmax is decided by rounding"
        )
    if 2 * step >= rtol:
        parts.append(
            "the softmax is ill-conditioned: a difference of one f32 step in the logits "
            f"scales its outputs by up to e^{2 * step:.3g}"
        )
    rel = diff / magnitude if magnitude > 0 else 0.0
    logits_pass = bool(np.all(np.abs(a - e) <= atol + rtol * np.abs(e)))
    parts.append(
        f"the logits differ by at most {diff:.4g} ({diff / step if step else 0:.0f} f32 steps, "
        f"max rel {rel:.3g})"
    )
    if logits_pass:
        parts.append(
            f"they match within the tolerance (atol {atol:g}, rtol {rtol:g}): the mismatch is "
            "f32 summation order amplified by the softmax, not a conversion error; compare "
            "the logits, not the probabilities"
        )
    else:
        parts.append("they do not match within the tolerance either: the difference starts earlier")
    return "; ".join(parts)


def softmax_inputs(path: Path) -> dict[str, str]:
    """``{graph output: Softmax input}`` for each graph output an ONNX ``Softmax`` produces.

    Empty when the optional ``onnx`` package is missing, the file cannot be parsed, or the
    model keeps weights in external data (a rewritten copy could not find them).
    """
    try:
        import onnx
    except ImportError:
        return {}
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # only extra detail for a report: never worth failing over
        return {}
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        return {}
    outputs = {o.name for o in model.graph.output}
    return {
        node.output[0]: node.input[0]
        for node in model.graph.node
        if node.op_type == "Softmax"
        and node.domain in ("", "ai.onnx")
        and node.output
        and node.output[0] in outputs
        and node.input[0] not in outputs  # already compared as an output of its own
    }


def with_extra_outputs(path: Path, tensors: Iterable[str]) -> bytes:
    """The ONNX model at *path* with the tensors *tensors* appended to its outputs,
    serialized. The new outputs carry no type: both engines infer it."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    present = {o.name for o in model.graph.output}
    for tensor in tensors:
        if tensor not in present:
            model.graph.output.append(onnx.ValueInfoProto(name=tensor))
            present.add(tensor)
    return bytes(model.SerializeToString())


def explain_softmax_failures(
    runner: Runner,
    feeds: Mapping[str, np.ndarray[Any, Any]],
    results: list[OutputComparison],
    *,
    atol: float,
    rtol: float,
) -> list[OutputComparison]:
    """*results* with a :func:`softmax_note` on each failed output that a Softmax produces.

    Both engines run the model once more, with the softmax inputs as extra outputs.
    """
    producers = softmax_inputs(runner.path)
    failed = {r.name: producers[r.name] for r in results if not r.passed and r.name in producers}
    if not failed:
        return results
    data = with_extra_outputs(runner.path, failed.values())
    with tempfile.TemporaryDirectory(prefix="openvino-runner-") as folder:
        copy = Path(folder) / runner.path.name
        copy.write_bytes(data)
        extra_runner = Runner(
            copy,
            runner.device,
            runner.precision,
            shapes=runner.shapes,
            config=runner.extra_config,
        )
        got = list(extra_runner.run(feeds).values())
    reference = run_onnxruntime(
        data,
        feeds,
        label=f"{runner.path} (logits exposed)",
        base_dir=runner.path.resolve().parent,
    )
    # The extra outputs come last, in the order given (both engines keep ONNX's order);
    # OpenVINO may name a tensor differently, so match by position.
    extra = len(failed)
    logits_of = dict(
        zip(failed, zip(got[-extra:], (a for _, a in reference[-extra:]), strict=True), strict=True)
    )
    explained = []
    for result in results:
        if result.name in logits_of:
            ov_logits, ref_logits = logits_of[result.name]
            note = softmax_note(
                result.name, failed[result.name], ov_logits, ref_logits, atol=atol, rtol=rtol
            )
            result = replace(result, note=note)
        explained.append(result)
    return explained


def compare_with_onnxruntime(
    runner: Runner,
    inputs: Feeds | None = None,
    *,
    seed: int = 0,
    image: ImageOptions | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    top_k: int = DEFAULT_TOP_K,
    reference: str | os.PathLike[str] | None = None,
) -> CompareReport:
    """Run *runner*'s model on OpenVINO and an ONNX model on onnxruntime, same inputs.

    The ONNX model is *reference* when given (e.g. the source of an IR that *runner*
    reads), else *runner*'s own model, which must then be ONNX. Outputs are matched by
    position (IR written from an ONNX model and both engines keep ONNX's output order).
    """
    onnx_path = Path(reference) if reference is not None else runner.path
    if onnx_path.suffix.lower() != ".onnx":
        if reference is not None:
            raise RunnerError(f"--reference must be an .onnx model, got {onnx_path.name}")
        raise RunnerError(
            f"comparing against onnxruntime needs an .onnx model, got {runner.path.name}; "
            "for an IR (.xml), name its ONNX source with --reference MODEL.onnx"
        )
    if not onnx_path.is_file():
        raise ModelFileError(f"reference model {str(onnx_path)!r} does not exist")
    feeds = runner.prepare(inputs, seed=seed, image=image)
    actual = runner.run(feeds)
    expected = run_onnxruntime(str(onnx_path), feeds)
    if len(expected) != len(actual):
        raise RunnerError(
            f"OpenVINO gives {len(actual)} outputs and onnxruntime {len(expected)}; "
            "cannot compare them"
        )
    results = [
        compare_arrays(name, got, ref, atol=atol, rtol=rtol, top_k=top_k)
        for (name, ref), got in zip(expected, actual.values(), strict=True)
    ]
    if reference is None:
        results = explain_softmax_failures(runner, feeds, results, atol=atol, rtol=rtol)
    precision = runner.properties().get("INFERENCE_PRECISION_HINT", runner.precision or "default")
    return CompareReport(
        model=str(runner.path),
        reference=f"onnxruntime ({onnx_path})" if reference is not None else "onnxruntime",
        precision=precision,
        atol=atol,
        rtol=rtol,
        outputs=results,
        passed=all(r.passed for r in results),
    )
