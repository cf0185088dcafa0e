"""What went wrong reading a model: OpenVINO's conversion report parsed into ops and nodes.

OpenVINO reports a failed conversion as one long text (failed ops with their messages, or
"No conversion rule found for operations: ..."); :func:`conversion_failures` turns it into
``(op, node, reason)`` triples and :func:`conversion_error` into the error a user reads.
Node names come from the ONNX file itself when the optional ``onnx`` package is there
(:func:`onnx_nodes`). Pure functions over text and files; nothing here imports OpenVINO.
"""

from __future__ import annotations

import mmap
import os
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


# ONNX files are one protobuf ModelProto; its field 7 is the graph.
_ONNX_GRAPH_FIELD = 7
#: ModelProto's field numbers and their protobuf wire types (0 varint, 2 length-delimited),
#: from onnx.proto. A field that overruns the file is "truncated" only when it is one of
#: these; any other number there means the bytes were never an ONNX model.
_ONNX_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


def _varint(data: bytes | mmap.mmap, pos: int) -> tuple[int, int]:
    """Decode a protobuf varint at *pos*; ``(value, next position)``; IndexError at EOF."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def onnx_file_problem(path: Path) -> str | None:
    """Why the ``.onnx`` file at *path* cannot be an ONNX model, or ``None``.

    The file is mapped, not read: only the few top-level field headers are touched.
    """
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return "the file is empty"
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return onnx_bytes_problem(data)


def onnx_bytes_problem(data: bytes | mmap.mmap) -> str | None:
    """Why *data* (an ``.onnx`` file's bytes) cannot be an ONNX model, or ``None``.

    Walks the top-level protobuf fields only (no ``onnx`` package needed): a field that
    runs past the end means the file is truncated; a malformed tag means it is not
    protobuf at all. OpenVINO itself reads some truncated files without complaint (weights
    missing) and answers others with every frontend's log noise.
    """
    if not data:
        return "the file is empty"
    pos, size, fields = 0, len(data), set()
    try:
        while pos < size:
            tag, pos = _varint(data, pos)
            number, wire = tag >> 3, tag & 7
            if number == 0:
                return "it is not an ONNX model (not protobuf: field number 0)"
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                length, pos = _varint(data, pos)
                pos += length
            elif wire == 5:
                pos += 4
            else:
                return f"it is not an ONNX model (not protobuf: wire type {wire})"
            fields.add(number)
            if pos > size:
                if _ONNX_MODEL_FIELDS.get(number) != wire:
                    head = bytes(data[:512])
                    text = all(32 <= b < 127 or b in b"\t\n\r" for b in head)
                    kind = "it looks like a text file" if text else "not protobuf-encoded ONNX"
                    return (
                        f"it is not an ONNX model (field {number}, wire type {wire}, is no "
                        f"ONNX model field; {kind})"
                    )
                return (
                    f"the file is truncated: a field needs {pos - size} more bytes than the "
                    f"{size} there are (an interrupted download or copy?)"
                )
    except IndexError:
        return f"the file is truncated: it ends inside a field header ({size} bytes)"
    except ValueError:
        return "it is not an ONNX model (not protobuf: a malformed number)"
    if _ONNX_GRAPH_FIELD not in fields:
        return "it is not an ONNX model (it has no graph)"
    return None
