"""ONNX ``DeformConv`` (opsets 19 and 22) for OpenVINO's ONNX frontend.

OpenVINO 2026.4 has no conversion rule for the standard ONNX ``DeformConv`` node that
torch's dynamo exporter emits for ``torchvision.ops.deform_conv2d``. This module owns a
conversion extension that maps it to OpenVINO's ``DeformableConvolution`` (opset 8) with
``bilinear_interpolation_pad=True``: that flag gives torchvision's border rule (samples
that fall partly outside the image interpolate against zeros instead of being dropped),
which is also what ONNX's reference and onnxruntime implement.

ONNX DeformConv inputs: ``X, W, offset[, B][, mask]``; attributes ``dilations``,
``group``, ``kernel_shape``, ``offset_group``, ``pads`` (begins then ends), ``strides``.
The offset layout ``(N, offset_group*kh*kw*2, Ho, Wo)`` as (dy, dx) pairs and the mask
layout ``(N, offset_group*kh*kw, Ho, Wo)`` are the same in both, so no reordering is
needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ONNX_OP_TYPE = "DeformConv"


def _present(output: Any) -> bool:
    """An optional ONNX input left empty arrives as the output of a ``NullNode``."""
    return bool(output.get_node().get_type_name() != "NullNode")


def _ints(node: Any, name: str, default: list[int]) -> list[int]:
    if not node.has_attribute(name):
        return list(default)
    return [int(v) for v in node.get_attribute(name)]


def convert_deform_conv(node: Any) -> list[Any]:
    """Translate one ONNX ``DeformConv`` node (an OpenVINO ``NodeContext``) to OpenVINO ops.

    Returns the outputs that replace the node's single output. Raises ``ValueError`` for
    what OpenVINO's ``DeformableConvolution`` cannot express (anything but 2-D).
    """
    import numpy as np
    import openvino.opset8 as ops

    count = node.get_input_size()
    data, weights, offset = node.get_input(0), node.get_input(1), node.get_input(2)
    bias = node.get_input(3) if count > 3 and _present(node.get_input(3)) else None
    mask = node.get_input(4) if count > 4 and _present(node.get_input(4)) else None

    rank = weights.get_partial_shape().rank
    spatial = rank.get_length() - 2 if rank.is_static else 2
    if spatial != 2:
        raise ValueError(
            f"DeformConv with {spatial} spatial dimensions: OpenVINO's DeformableConvolution "
            "supports 2-D only"
        )
    strides = _ints(node, "strides", [1, 1])
    dilations = _ints(node, "dilations", [1, 1])
    pads = _ints(node, "pads", [0, 0, 0, 0])
    if len(pads) != 4 or len(strides) != 2 or len(dilations) != 2:
        raise ValueError(
            f"DeformConv expects 2 strides, 2 dilations and 4 pads, got strides={strides}, "
            f"dilations={dilations}, pads={pads}"
        )
    group = int(node.get_attribute("group")) if node.has_attribute("group") else 1
    offset_group = (
        int(node.get_attribute("offset_group")) if node.has_attribute("offset_group") else 1
    )
    out = ops.deformable_convolution(
        data,
        offset,
        weights,
        strides=strides,
        pads_begin=pads[:2],
        pads_end=pads[2:],
        dilations=dilations,
        mask=mask,
        auto_pad="explicit",
        group=group,
        deformable_group=offset_group,
        bilinear_interpolation_pad=True,
    )
    if bias is not None:
        shape = ops.constant(np.array([1, -1, 1, 1], dtype=np.int64))
        out = ops.add(out, ops.reshape(bias, shape, special_zero=False))
    return [out.output(0)]


def deform_conv_extension(on_convert: Callable[[], None] | None = None) -> Any:
    """Return an OpenVINO ONNX-frontend extension that converts ONNX ``DeformConv``.

    *on_convert*, if given, is called once per converted node (``Runner`` counts them).

    Register it on a ``openvino.Core`` before reading an ONNX model::

        core = openvino.Core()
        core.add_extension(openvino_runner.deform_conv_extension())
        model = core.read_model("model.onnx")

    ``openvino_runner.Runner`` registers it by itself.
    """
    from openvino.frontend.onnx import ConversionExtension

    if on_convert is None:
        return ConversionExtension(ONNX_OP_TYPE, convert_deform_conv)

    def convert(node: Any) -> list[Any]:
        outputs = convert_deform_conv(node)
        on_convert()
        return outputs

    return ConversionExtension(ONNX_OP_TYPE, convert)
