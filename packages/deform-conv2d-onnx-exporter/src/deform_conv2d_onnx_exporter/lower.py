"""Rewrite DeformConv nodes into standard operators (:func:`lower_deform_conv`).

Two kinds of node are rewritten: ONNX ``DeformConv`` (opset 19/22) and the custom nodes
mmdeploy writes for mmcv's layers, ``mmcv::MMCVDeformConv2d(input, offset, weight)`` and
``mmcv::MMCVModulatedDeformConv2d(input, offset, mask, weight[, bias])`` (attributes
``stride``, ``padding``, ``dilation`` as 2-int lists, ``groups``, ``deform_groups`` or
``deformable_groups``; mmcv's offset and mask layout is torchvision's and ONNX's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deform_conv2d_onnx_exporter.graph import (
    MIN_OPSET,
    DeformConvSpec,
    build_deform_conv,
    columns_for_output_size,
)

_DEFAULT_DOMAINS = ("", "ai.onnx")
#: mmdeploy's custom node types for mmcv's layers (domain ``mmcv``).
MMCV_DOMAIN = "mmcv"
MMCV_DEFORM_CONV = ("MMCVDeformConv2d", "MMCVModulatedDeformConv2d")


class LoweringError(ValueError):
    """A DeformConv node cannot be rewritten (the message names the node and the problem)."""


class NodeListEmitter:
    """An :class:`~deform_conv2d_onnx_exporter.graph.Emitter` producing ``NodeProto`` objects.

    Values are tensor names; every name starts with *prefix* and is checked against *taken*
    so the rewritten graph never reuses a name.
    """

    def __init__(self, prefix: str, taken: set[str]) -> None:
        self.prefix = prefix
        self.taken = taken
        self.nodes: list[onnx.NodeProto] = []
        self._count = 0

    def _fresh(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"{self.prefix}/{hint}_{self._count}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        """Append node *op_type*; return the name of its output."""
        output = self._fresh(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=output, **attrs))
        return output

    def const(self, value: np.ndarray) -> str:
        """Append a ``Constant`` node holding *value*; return its output name."""
        output = self._fresh("Constant")
        tensor = numpy_helper.from_array(np.asarray(value), name=output)
        self.nodes.append(helper.make_node("Constant", [], [output], name=output, value=tensor))
        return output


def check_target_opset(opset: int) -> None:
    """Raise ValueError, naming the accepted range, unless *opset* can be lowered to.

    The decomposition needs opset 12 or later; the installed onnx's version converter (which
    brings the model's other operators along) knows opsets up to ``onnx_opset_version()``.
    """
    highest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= highest:
        raise ValueError(
            f"opset {opset!r} is not supported: expected {MIN_OPSET} to {highest} (the "
            f"decomposition needs opset >= {MIN_OPSET}; onnx {onnx.__version__} knows opsets "
            f"up to {highest})"
        )


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return int(entry.version)
    raise LoweringError("the model imports no default ONNX opset")


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """*graph* and every subgraph (If/Loop/Scan bodies) below it."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


def count_deform_conv(model: onnx.ModelProto) -> int:
    """Number of ONNX ``DeformConv`` nodes in *model*'s graph and subgraphs."""
    return sum(
        n.op_type == "DeformConv" and n.domain in _DEFAULT_DOMAINS
        for g in _graphs(model.graph)
        for n in g.node
    )


def count_custom_deform_conv(model: onnx.ModelProto) -> int:
    """Number of mmdeploy ``mmcv::MMCVDeformConv2d``/``MMCVModulatedDeformConv2d`` nodes."""
    return sum(
        n.op_type in MMCV_DEFORM_CONV and n.domain == MMCV_DOMAIN
        for g in _graphs(model.graph)
        for n in g.node
    )


def _is_onnx_deform_conv(node: onnx.NodeProto) -> bool:
    return node.op_type == "DeformConv" and node.domain in _DEFAULT_DOMAINS


def _is_mmcv_deform_conv(node: onnx.NodeProto) -> bool:
    return node.op_type in MMCV_DEFORM_CONV and node.domain == MMCV_DOMAIN


def _onnx_form(node: onnx.NodeProto) -> onnx.NodeProto:
    """*node* as an ONNX ``DeformConv`` (inputs X, W, offset, B, mask; ONNX attribute names).

    mmdeploy's nodes carry ``stride``/``padding``/``dilation`` (symmetric padding),
    ``groups`` and ``deform_groups`` (its documentation says ``deformable_groups``: both
    are read), and a different input order.
    """
    if _is_onnx_deform_conv(node):
        return node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    label = f"{node.op_type} node {node.name or '(unnamed)'!r}"
    inputs = list(node.input)
    if node.op_type == "MMCVModulatedDeformConv2d":
        if len(inputs) < 4:
            raise LoweringError(
                f"{label} needs inputs (input, offset, mask, weight[, bias]), got {inputs}"
            )
        x, offset, mask, weight = inputs[:4]
        bias = inputs[4] if len(inputs) > 4 else ""
    else:
        if len(inputs) < 3:
            raise LoweringError(f"{label} needs inputs (input, offset, weight), got {inputs}")
        x, offset, weight = inputs[:3]
        mask, bias = "", ""
    padding = [int(p) for p in attrs.get("padding", [0, 0])]
    groups = attrs.get("deform_groups", attrs.get("deformable_groups", 1))
    converted = helper.make_node(
        "DeformConv",
        [x, weight, offset, bias, mask],
        list(node.output),
        name=node.name,
        strides=[int(v) for v in attrs.get("stride", [1, 1])],
        pads=[*padding, *padding],
        dilations=[int(v) for v in attrs.get("dilation", [1, 1])],
        group=int(attrs.get("groups", 1)),
        offset_group=int(groups),
    )
    return converted


def _check_channels(
    label: str, spec: DeformConvSpec, types: dict[str, onnx.TypeProto], inputs: list[str]
) -> None:
    """Raise LoweringError when static channel counts contradict the attributes.

    onnxruntime's own rule: offset channels = offset_group * 2 * kh * kw, mask channels =
    offset_group * kh * kw; X's channels divide by group and offset_group.
    """
    x_name, w_name, offset_name, _, mask_name = inputs[:5]

    def channels(name: str) -> int | None:
        shape = _static_shape(types.get(name)) if name else None
        return shape[1] if shape is not None and len(shape) == 4 and shape[1] > 0 else None

    og, taps = spec.offset_group, spec.taps
    kh, kw = spec.kernel_shape
    found = channels(offset_name)
    if found is not None and found != og * 2 * taps:
        raise LoweringError(
            f"{label}: the offset has {found} channels; offset_group * 2 * kh * kw = "
            f"{og} * 2 * {kh} * {kw} = {og * 2 * taps} expected"
        )
    found = channels(mask_name)
    if found is not None and found != og * taps:
        raise LoweringError(
            f"{label}: the mask has {found} channels; offset_group * kh * kw = "
            f"{og} * {kh} * {kw} = {og * taps} expected"
        )
    c = channels(x_name)
    w_shape = _static_shape(types.get(w_name))
    if c is not None:
        if c % og or c % spec.group:
            raise LoweringError(
                f"{label}: the input has {c} channels, not divisible by offset_group {og} "
                f"and group {spec.group}"
            )
        if w_shape is not None and len(w_shape) == 4 and 0 < w_shape[1] * spec.group != c:
            raise LoweringError(
                f"{label}: the weight has {w_shape[1]} input channels per group; "
                f"input channels / group = {c} / {spec.group} = {c // spec.group} expected"
            )


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # shape inference is a help, never required: fall back to declared types
        inferred = model
    types: dict[str, onnx.TypeProto] = {}
    for graph in _graphs(inferred.graph):
        for info in [*graph.input, *graph.value_info, *graph.output]:
            types[info.name] = info.type
        for init in graph.initializer:
            types[init.name] = helper.make_tensor_type_proto(init.data_type, list(init.dims))
    return types


def _static_shape(type_proto: onnx.TypeProto | None) -> list[int] | None:
    if type_proto is None or not type_proto.HasField("tensor_type"):
        return None
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    return dims


def _static_hw(type_proto: onnx.TypeProto | None) -> tuple[int | None, int | None] | None:
    shape = _static_shape(type_proto)
    if shape is None or len(shape) != 4:
        return None
    return tuple(d if d > 0 else None for d in shape[2:])  # type: ignore[return-value]


def _inner_size(type_proto: onnx.TypeProto | None) -> int | None:
    """The GEMM inner size C/group * kh * kw from the weight's static shape, if known."""
    shape = _static_shape(type_proto)
    if shape is None or len(shape) != 4 or min(shape[1:]) < 1:
        return None
    return shape[1] * shape[2] * shape[3]


def _input_shape(type_proto: onnx.TypeProto | None) -> tuple[int | None, ...] | None:
    shape = _static_shape(type_proto)
    if shape is None or len(shape) != 4:
        return None
    return tuple(d if d > 0 else None for d in shape)


def _spec_for(
    node: onnx.NodeProto, types: dict[str, onnx.TypeProto], columns: str = "auto"
) -> DeformConvSpec:
    label = f"DeformConv node {node.name or '(unnamed)'!r}"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    inputs = list(node.input) + [""] * (5 - len(node.input))
    x_name, w_name, offset_name, bias_name, mask_name = inputs[:5]
    if not x_name or not w_name or not offset_name:
        raise LoweringError(f"{label} needs inputs X, W and offset, got {list(node.input)}")

    kernel = attrs.get("kernel_shape")
    if kernel is None:
        w_shape = _static_shape(types.get(w_name))
        if w_shape is None or len(w_shape) != 4 or min(w_shape[2:]) < 1:
            raise LoweringError(
                f"{label}: the kernel shape is unknown (no kernel_shape attribute and weight "
                f"{w_name!r} has no static 4-D shape); "
                "only 2-D DeformConv with a known kernel is supported"
            )
        kernel = w_shape[2:]
    if len(kernel) != 2:
        raise LoweringError(
            f"{label}: only 2-D DeformConv is supported, got kernel_shape {list(kernel)}"
        )
    elem = 1
    x_type = types.get(x_name)
    if x_type is not None and x_type.HasField("tensor_type") and x_type.tensor_type.elem_type:
        elem = x_type.tensor_type.elem_type
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
        spec = DeformConvSpec(
            kernel_shape=(int(kernel[0]), int(kernel[1])),
            strides=tuple(attrs.get("strides", [1, 1])),
            pads=tuple(attrs.get("pads", [0, 0, 0, 0])),
            dilations=tuple(attrs.get("dilations", [1, 1])),
            group=int(attrs.get("group", 1)),
            offset_group=int(attrs.get("offset_group", 1)),
            has_mask=bool(mask_name),
            has_bias=bool(bias_name),
            dtype=dtype,
            columns=columns_for_output_size(
                columns, _static_hw(types.get(offset_name)), _inner_size(types.get(w_name))
            ),
            input_shape=_input_shape(types.get(x_name)),  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise LoweringError(f"{label}: {exc}") from exc
    _check_channels(label, spec, types, inputs)
    return spec


def lower_deform_conv(
    model: onnx.ModelProto | str | os.PathLike[str],
    opset: int | None = None,
    *,
    variant: str | None = None,
    columns: str = "auto",
) -> onnx.ModelProto:
    """Return a copy of *model* with every DeformConv node replaced by standard operators.

    Args:
        model: a model that may contain ``DeformConv`` (opset 19/22 semantics) or mmdeploy's
            ``mmcv::MMCVDeformConv2d`` / ``mmcv::MMCVModulatedDeformConv2d`` in its main
            graph or in subgraphs, or the path of such an ``.onnx`` file (its external data
            is read too).
        opset: the default-domain opset of the result. ``None`` keeps the model's own opset
            (12 for a model below 12: mmdeploy writes 11). A model whose opset is below 19
            but still holds ``DeformConv``, as torch's dynamo exporter writes for
            ``opset_version < 19``, becomes valid at that opset.
            A different value converts the rest of the model with
            ``onnx.version_converter``. Must be >= 12.
        variant: ``"gridsample"`` (opset >= 16, default there) or ``"gathernd"`` (default
            at opsets 12-15).
        columns: ``"conv"`` (grouped 1x1 Conv) or ``"matmul"`` for the product of the
            sampled columns and the weight; ``"auto"`` picks from the offset's static size
            (see :func:`~deform_conv2d_onnx_exporter.graph.columns_for_output_size`).

    Raises:
        LoweringError: a node cannot be rewritten (unknown kernel shape, 3-D, offset or mask
            channel counts that contradict the attributes, ...).
        ValueError: *opset* is below 12 or above the installed onnx's highest opset, or the
            other operators cannot be converted to it.
    """
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    elif not isinstance(model, onnx.ModelProto):
        raise TypeError(
            "lower_deform_conv() takes an onnx.ModelProto or the path of an .onnx file, "
            f"got {type(model).__name__}"
        )
    result = onnx.ModelProto()
    result.CopyFrom(model)
    current = _default_opset(result)
    # mmdeploy writes opset 11 by default; the decomposition needs 12.
    target = max(current, MIN_OPSET) if opset is None else opset
    check_target_opset(target)
    if target != current:
        result = _convert_rest(result, target)

    types = _value_types(result)
    taken: set[str] = set()
    for graph in _graphs(result.graph):
        taken.update(n for node in graph.node for n in [*node.input, *node.output, node.name])
        taken.update(i.name for i in graph.initializer)
        taken.update(i.name for i in graph.input)

    lowered = 0
    # Children before parents: rebuilding a parent's node list copies its nodes, so a
    # subgraph rewritten after its parent would be rewritten in a detached copy.
    for graph in reversed(list(_graphs(result.graph))):
        new_nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            if not (_is_onnx_deform_conv(node) or _is_mmcv_deform_conv(node)):
                new_nodes.append(node)
                continue
            node = _onnx_form(node)
            spec = _spec_for(node, types, columns)
            inputs = list(node.input) + [""] * (5 - len(node.input))
            emitter = NodeListEmitter(node.name or f"DeformConv_{lowered}", taken)
            out = build_deform_conv(
                emitter,
                spec,
                inputs[0],
                inputs[1],
                inputs[2],
                mask=inputs[4] or None,
                bias=inputs[3] or None,
                opset=target,
                variant=variant,
            )
            # Keep the node's output name: consumers and graph outputs refer to it.
            emitter.nodes.append(
                helper.make_node(
                    "Identity", [out], [node.output[0]], name=f"{emitter.prefix}/output"
                )
            )
            new_nodes.extend(emitter.nodes)
            lowered += 1
        del graph.node[:]
        graph.node.extend(new_nodes)

    for entry in result.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            entry.version = target
    if not count_custom_deform_conv(result) and not any(
        n.domain == MMCV_DOMAIN for g in _graphs(result.graph) for n in g.node
    ):
        kept = [e for e in result.opset_import if e.domain != MMCV_DOMAIN]
        del result.opset_import[:]
        result.opset_import.extend(kept)
    if lowered:
        _complete_output_types(result)
    return result


def _complete_output_types(model: onnx.ModelProto) -> None:
    """Give graph outputs declared without a type or shape the ones shape inference finds.

    Exporters and hand-made graphs often leave them out; ``onnx.checker`` (full) requires
    them, and after lowering the graph is standard operators, so inference can tell.
    """
    incomplete = [
        o
        for o in model.graph.output
        if not o.type.HasField("tensor_type") or not o.type.tensor_type.HasField("shape")
    ]
    if not incomplete:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference is a help: the checker will name what is still missing
        return
    known = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for output in incomplete:
        found = known.get(output.name)
        if found is None or not found.HasField("tensor_type"):
            continue
        if found.tensor_type.HasField("shape") or not output.type.HasField("tensor_type"):
            output.type.CopyFrom(found)


def _convert_rest(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """Convert every operator but DeformConv to *target* (DeformConv is rewritten afterwards)."""
    from onnx import version_converter

    if count_deform_conv(model):
        # The version converter does not know DeformConv; hide the nodes behind a private
        # domain for the conversion and bring them back afterwards.
        for graph in _graphs(model.graph):
            for node in graph.node:
                if _is_onnx_deform_conv(node):
                    node.domain = "deform_conv2d_onnx_exporter.pending"
        model.opset_import.append(helper.make_opsetid("deform_conv2d_onnx_exporter.pending", 1))
    try:
        converted = version_converter.convert_version(model, target)
    except Exception as exc:
        raise ValueError(
            f"cannot convert the model's other operators from opset "
            f"{_default_opset(model)} to {target}: {exc}"
        ) from exc
    for graph in _graphs(converted.graph):
        for node in graph.node:
            if node.domain == "deform_conv2d_onnx_exporter.pending":
                node.domain = ""
    kept = [e for e in converted.opset_import if e.domain != "deform_conv2d_onnx_exporter.pending"]
    del converted.opset_import[:]
    converted.opset_import.extend(kept)
    return converted
