"""OpenVINO against onnxruntime: the same inputs through both, per-output error metrics.

:func:`compare_arrays` is a pure function of two arrays; :func:`compare_with_onnxruntime`
runs both engines (onnxruntime is the optional ``onnxruntime`` extra).

Metrics per output: max absolute error; max relative error over the elements whose
reference magnitude exceeds ``atol`` (elsewhere a relative error means nothing); cosine
similarity of the flattened outputs; and, for classification-shaped outputs ``(N, C)``
(trailing 1-sized dimensions ignored), top-1 agreement and top-k overlap per row. An output
passes when ``|actual - expected| <= atol + rtol * |expected|`` everywhere (numpy's
``allclose`` rule) and the shapes match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from openvino_runner.errors import MissingDependencyError, RunnerError
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
    model: str, feeds: Mapping[str, np.ndarray[Any, Any]]
) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """Run *model* once on onnxruntime's CPU provider; ``(name, array)`` in model order."""
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError(
            "comparing needs onnxruntime: pip install 'openvino-runner[onnxruntime]'"
        ) from None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(
            model, sess_options=options, providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        outputs = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:  # onnxruntime raises its own exception types
        raise RunnerError(f"onnxruntime cannot run {model}: {str(exc).strip()[:500]}") from None
    return [(n, np.asarray(o)) for n, o in zip(names, outputs, strict=True)]


def compare_with_onnxruntime(
    runner: Runner,
    inputs: Feeds | None = None,
    *,
    seed: int = 0,
    image: ImageOptions | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    top_k: int = DEFAULT_TOP_K,
) -> CompareReport:
    """Run *runner*'s ONNX model on OpenVINO and onnxruntime with the same inputs.

    Outputs are matched by position (both keep the ONNX graph's output order).
    """
    if runner.path.suffix.lower() != ".onnx":
        raise RunnerError(
            f"comparing against onnxruntime needs an .onnx model, got {runner.path.name}"
        )
    feeds = runner.prepare(inputs, seed=seed, image=image)
    actual = runner.infer(feeds)
    expected = run_onnxruntime(str(runner.path), feeds)
    results = [
        compare_arrays(name, got, ref, atol=atol, rtol=rtol, top_k=top_k)
        for (name, ref), got in zip(expected, actual.values(), strict=False)
    ]
    if len(expected) != len(actual):
        raise RunnerError(
            f"OpenVINO gives {len(actual)} outputs and onnxruntime {len(expected)}; "
            "cannot compare them"
        )
    precision = runner.properties().get("INFERENCE_PRECISION_HINT", runner.precision or "default")
    return CompareReport(
        model=str(runner.path),
        reference="onnxruntime",
        precision=precision,
        atol=atol,
        rtol=rtol,
        outputs=results,
        passed=all(r.passed for r in results),
    )
