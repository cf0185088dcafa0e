"""What went wrong reading a model: OpenVINO's conversion report parsed into ops and nodes.

OpenVINO reports a failed conversion as one long text (failed ops with their messages, or
"No conversion rule found for operations: ..."); :func:`conversion_failures` turns it into
``(op, node, reason)`` triples and :func:`conversion_error` into the error a user reads.
Node names come from the ONNX file itself when the optional ``onnx`` package is there
(:func:`onnx_nodes`). Pure functions over text and files; nothing here imports OpenVINO.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from openvino_runner.errors import ConversionError, ModelFileError, RunnerError

# Formats OpenVINO reads, by suffix: (format name, whether reading converts it).
FORMATS = {
    ".xml": ("OpenVINO IR", False),
    ".onnx": ("ONNX", True),
    ".pb": ("TensorFlow frozen graph", True),
    ".tflite": ("TensorFlow Lite", True),
    ".pdmodel": ("PaddlePaddle", True),
}

_FAILED_OP = re.compile(
    r"^-- (?P<op>\S+?)-(?P<opset>\d+) with a message:\n(?P<msg>.*?)(?=^-- |^Summary:|\Z)",
    re.M | re.S,
)
_NODE = re.compile(r"<Node\((?P<op>[^)]*)\): (?P<node>[^>]*)>")
_VALIDATING = re.compile(r"^While validating ONNX node '<[^>]*>':\s*")
_NO_RULE = re.compile(r"No conversion rule found for operations: (?P<ops>.*)")


def onnx_nodes(path: Path) -> list[tuple[str, str]] | None:
    """``(op_type, node name or first output)`` of every ONNX node, subgraphs included.

    ``None`` when the optional ``onnx`` package is missing or cannot parse *path*.
    """
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # only extra detail for a report: never worth failing over
        return None
    found: list[tuple[str, str]] = []

    def walk(graph: Any) -> None:
        for node in graph.node:
            found.append((node.op_type, node.name or (node.output[0] if node.output else "?")))
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)

    walk(model.graph)
    return found


def conversion_failures(message: str, path: Path | None = None) -> list[tuple[str, str, str]]:
    """Parse OpenVINO's conversion report into ``(op, node, reason)`` triples."""
    failures: list[tuple[str, str, str]] = []
    for match in _FAILED_OP.finditer(message):
        body = match.group("msg")
        node = _NODE.search(body)
        # A Python converter's error is followed by "At:" and a traceback: keep what precedes.
        head = re.split(r"^\s*At:\s*$", body, maxsplit=1, flags=re.M)[0]
        lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
        reason = _VALIDATING.sub("", lines[-1]).strip() if lines else ""
        failures.append(
            (
                f"{match.group('op')} (opset {match.group('opset')})",
                node.group("node") if node else "?",
                reason,
            )
        )
    rule = _NO_RULE.search(message)
    if rule:
        for item in rule.group("ops").split(","):
            op, _, opset = item.strip().rpartition("-")
            every = (onnx_nodes(path) if path is not None else None) or []
            nodes = [name for op_type, name in every if op_type == op]
            failures.append(
                (
                    f"{op} (opset {opset})",
                    ", ".join(nodes[:5]) or "?",
                    "OpenVINO has no conversion rule for this op",
                )
            )
    return failures


def conversion_error(path: Path, exc: Exception) -> RunnerError:
    """The error to raise when OpenVINO's ``read_model`` of *path* failed with *exc*."""
    text = str(exc)
    failures = conversion_failures(text, path)
    if failures:
        lines = [f"OpenVINO cannot convert {path}:"]
        lines += [f"  op {op} at node {node!r}: {reason}" for op, node, reason in failures]
        return ConversionError("\n".join(lines), failures)
    if "format" in text.lower() and "supported" in text.lower():
        known = ", ".join(f"{s} ({n})" for s, (n, _) in FORMATS.items())
        return ModelFileError(
            f"OpenVINO cannot read {path}: not a model format it knows; expected one of {known} "
            "or a TensorFlow SavedModel folder"
        )
    tail = text.strip().splitlines()[-1] if text.strip() else type(exc).__name__
    return ConversionError(f"OpenVINO cannot read {path}: {tail}")


def by_count(counts: Counter[str]) -> dict[str, int]:
    """*counts* as a dict, most frequent first (ties by name)."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def source_op_counts(path: Path) -> dict[str, int] | None:
    """ONNX op counts of the file at *path* (``None`` for other formats or without onnx)."""
    if path.suffix.lower() != ".onnx":
        return None
    nodes = onnx_nodes(path)
    return None if nodes is None else by_count(Counter(op for op, _ in nodes))
