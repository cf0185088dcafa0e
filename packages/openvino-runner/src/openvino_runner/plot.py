"""Latency distributions of ``bench`` reports as a picture (the optional ``plot`` extra).

One step histogram per report on shared log-spaced bins (latencies have long tails), with
each median marked; drawn from the report's samples, or from its fixed histogram when the
run kept more samples than a report stores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from openvino_runner.errors import MissingDependencyError, RunnerError

FORMATS = ("png", "svg", "pdf")


def _values(report: Mapping[str, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(latencies, weights)``: the samples (weight 1), or histogram bin centres weighted by
    their counts."""
    samples = report.get("samples_ms")
    if samples:
        values = np.asarray(samples, dtype=np.float64)
        return values, np.ones_like(values)
    hist = report.get("histogram") or {}
    edges = np.asarray(hist.get("edges_ms") or [], dtype=np.float64)
    counts = np.asarray(hist.get("counts") or [], dtype=np.float64)
    if edges.size < 2 or counts.size != edges.size - 1:
        raise RunnerError(
            f"{report.get('model', 'a report')}: no latency samples or histogram to plot "
            "(written by an older openvino-runner?)"
        )
    return np.sqrt(edges[:-1] * edges[1:]) if edges[0] > 0 else (edges[:-1] + edges[1:]) / 2, counts


def plot_latencies(
    reports: Sequence[tuple[str, Mapping[str, Any]]], target: str | os.PathLike[str]
) -> Path:
    """Draw the latency distribution of each ``(label, bench report)`` into *target*
    (``.png``, ``.svg`` or ``.pdf``), written atomically."""
    from openvino_runner._clikit import atomic_path

    path = Path(target)
    kind = path.suffix.lower().lstrip(".")
    if kind not in FORMATS:
        raise RunnerError(f"--plot {path}: give a .png, .svg or .pdf file name")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError(
            "plotting needs matplotlib: pip install 'openvino-runner[plot]'"
        ) from None
    series = [(label, *_values(report)) for label, report in reports]
    medians = [
        float((report.get("latency_ms") or {}).get("median") or np.median(values))
        for (_, report), (_, values, _) in zip(reports, series, strict=True)
    ]
    low = min(float(v.min()) for _, v, _ in series)
    high = max(float(v.max()) for _, v, _ in series)
    if low > 0 and high > low:
        bins = np.geomspace(low, high, 60)
    else:
        bins = np.linspace(low, max(high, low + 1e-9), 60)
    figure, axes = plt.subplots(figsize=(8, 4.5), layout="constrained")
    try:
        for (label, values, weights), median in zip(series, medians, strict=True):
            (line,) = axes.plot([], [])  # one colour per report for the bars and the median
            axes.hist(
                values,
                bins=list(bins),
                weights=weights,
                histtype="step",
                color=line.get_color(),
                label=f"{label} (median {median:.3g} ms)",
            )
            axes.axvline(median, color=line.get_color(), linestyle="--", linewidth=1)
        if low > 0:
            axes.set_xscale("log")
        axes.set_xlabel("latency (ms)")
        axes.set_ylabel("inferences")
        axes.set_title("openvino-runner bench: latency distribution")
        axes.legend(fontsize="small")
        with atomic_path(path, "--plot") as partial:
            figure.savefig(partial, format=kind, dpi=100)
    finally:
        plt.close(figure)
    return path
