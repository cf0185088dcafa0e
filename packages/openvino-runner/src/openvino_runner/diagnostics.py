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
    if path.is_dir() and not (path / "saved_model.pb").is_file():
        # OpenVINO reads a folder as a SavedModel only and answers with its missing
        # saved_model.pb: say what was given, and what is accepted.
        named = f" (named like a {path.suffix} file)" if path.suffix.lower() in FORMATS else ""
        return ModelFileError(
            f"{path} is a folder{named}, not a model file, and no TensorFlow SavedModel "
            f"(it holds no saved_model.pb); {_expected_formats()}"
        )
    if "format" in text.lower() and "supported" in text.lower():
        return ModelFileError(
            f"OpenVINO cannot read {path}: not a model format it knows; {_expected_formats()}"
        )
    external = re.search(r"externally stored data in file \(([^,]+),", text)
    if external and not (path.parent / external.group(1)).exists():
        # OpenVINO says "Invalid usage of method for externally stored data in file (...)"
        return ModelFileError(
            f"OpenVINO cannot read {path}: its external data file "
            f"{path.parent / external.group(1)} does not exist (a model saved with external "
            "data is the .onnx and that file beside it; copy both)"
        )
    weights = path.with_suffix(".bin")
    if path.suffix.lower() == ".xml" and "bin file" in text and not weights.exists():
        # OpenVINO says "Empty weights data in bin file or bin file cannot be found!"
        return ModelFileError(
            f"OpenVINO cannot read {path}: its weights file {weights} does not exist "
            "(an IR is the .xml and the .bin beside it; copy both)"
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


def _expected_formats() -> str:
    known = ", ".join(f"{s} ({n})" for s, (n, _) in FORMATS.items())
    return f"expected one of {known} or a TensorFlow SavedModel folder"


# Leading bytes of common files that are no model format OpenVINO reads. Without this check
# OpenVINO offers them to every frontend, and the TensorFlow one logs its text-format parse
# errors (absl, straight to stderr from C++) before the answer.
_NOT_MODELS = (
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"BM", "a BMP image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "a gzip archive"),
)


def model_file_problem(path: Path) -> ModelFileError | None:
    """The error for a file at *path* that is plainly no model OpenVINO reads, or ``None``.

    Looks before OpenVINO does, so that the user reads one line instead of its frontends'
    log noise: an ``.xml`` must be well-formed XML with an IR root (``<net>``); a file of
    another suffix must not start like a common image, document or archive. ``.onnx`` files
    are checked by :func:`onnx_file_problem`.
    """
    if not path.is_file():
        return None
    if path.suffix.lower() == ".xml":
        import xml.etree.ElementTree as ET

        try:
            # The file is the user's own model, read next by OpenVINO anyway; ElementTree
            # fetches no external entities and expat >= 2.4.1 caps entity amplification.
            events = ET.iterparse(path, events=("start",))  # noqa: S314
            _, root = next(events)
            for _ in events:  # the rest must be well-formed too
                pass
        except ET.ParseError as exc:
            return ModelFileError(
                f"{path} is not a valid OpenVINO IR file: the XML is malformed ({exc}); "
                "expected an IR .xml (root element <net>) next to its .bin"
            )
        except OSError as exc:
            return ModelFileError(f"cannot read {path}: {exc.strerror or exc}")
        if root.tag != "net":
            return ModelFileError(
                f"{path} is not an OpenVINO IR file: its root element is <{root.tag}>; "
                "expected an IR .xml (root element <net>) next to its .bin"
            )
        return None
    if path.suffix.lower() in FORMATS:
        return None
    try:
        with open(path, "rb") as file:
            head = file.read(16)
    except OSError as exc:
        return ModelFileError(f"cannot read {path}: {exc.strerror or exc}")
    kind = next((name for magic, name in _NOT_MODELS if head.startswith(magic)), None)
    if kind is None:
        return None
    return ModelFileError(
        f"OpenVINO cannot read {path}: it is {kind}, not a model; {_expected_formats()}"
    )


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
