"""TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) support.

Registers a symbolic for ``torchvision::deform_conv2d`` that drives the same graph builder as
:func:`~deform_conv2d_onnx_exporter.lower.lower_deform_conv`. torch is imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import numpy as np

from deform_conv2d_onnx_exporter.graph import (
    MIN_OPSET,
    DeformConvSpec,
    build_deform_conv,
    check_opset,
    columns_for_output_size,
)

_SYMBOLIC_NAME = "torchvision::deform_conv2d"
_SCALAR_DTYPES = {"Float": np.float32, "Double": np.float64, "Half": np.float16}


class ExportError(ValueError):
    """A deform_conv2d call cannot be exported (the message names the parameter)."""


def _torchscript_module(name: str) -> Any:
    """Import a TorchScript-exporter helper from where this torch keeps it.

    torch 2.9+ moved them under ``torch.onnx._internal.torchscript_exporter``; older torch
    has them directly under ``torch.onnx``.
    """
    try:
        return importlib.import_module(f"torch.onnx._internal.torchscript_exporter.{name}")
    except ImportError:
        return importlib.import_module(f"torch.onnx.{name}")


class TorchScriptEmitter:
    """An emitter over the TorchScript exporter's graph context ``g``."""

    _SUFFIX: ClassVar[dict[type, str]] = {int: "i", float: "f", str: "s"}

    def __init__(self, g: Any) -> None:
        self.g = g

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        """Append node *op_type* via ``g.op`` (attribute names get their type suffix)."""
        kwargs: dict[str, Any] = {}
        for key, value in attrs.items():
            sample = value[0] if isinstance(value, list | tuple) else value
            kwargs[f"{key}_{self._SUFFIX[type(sample)]}"] = value
        return self.g.op(op_type, *inputs, **kwargs)

    def const(self, value: np.ndarray) -> Any:
        """Append a ``Constant`` node holding *value*."""
        import torch

        return self.g.op("Constant", value_t=torch.from_numpy(np.array(value)))


def _static_hw(helper: Any, value: Any) -> tuple[int | None, int | None] | None:
    sizes = helper._get_tensor_sizes(value)
    if sizes is None or len(sizes) != 4:
        return None
    return tuple(s if isinstance(s, int) else None for s in sizes[2:])  # type: ignore[return-value]


def _static_shape(helper: Any, value: Any) -> tuple[int | None, ...] | None:
    sizes = helper._get_tensor_sizes(value)
    if sizes is None or len(sizes) != 4:
        return None
    return tuple(s if isinstance(s, int) else None for s in sizes)


def _current_opset() -> int:
    return int(_torchscript_module("_globals").GLOBALS.export_onnx_opset_version)


def _deform_conv2d_symbolic(
    columns: str,
    variant: str | None,
    g: Any,
    input: Any,
    weight: Any,
    offset: Any,
    mask: Any,
    bias: Any,
    *scalars: Any,
) -> Any:
    """Emit one ``torchvision::deform_conv2d`` call (*scalars*: see ``from_torchvision``)."""
    helper = _torchscript_module("symbolic_helper")
    sizes = helper._get_tensor_sizes(weight)
    if sizes is None or len(sizes) != 4 or not all(isinstance(s, int) for s in sizes[2:]):
        raise ExportError(
            f"deform_conv2d weight must have a static 4-D shape (out, in/groups, kh, kw) at export "
            f"time, got {sizes!r}; pass the weight as a parameter or constant"
        )
    scalar = input.type().scalarType() if input.type().kind() == "TensorType" else None
    if scalar is not None and scalar not in _SCALAR_DTYPES:
        raise ExportError(f"deform_conv2d input dtype must be float, double or half, got {scalar}")
    opset = _current_opset()
    try:
        check_opset(opset)
        spec = DeformConvSpec.from_torchvision(
            (int(sizes[2]), int(sizes[3])),
            scalars,
            has_bias=True,
            dtype=np.dtype(_SCALAR_DTYPES.get(scalar or "Float", np.float32)),
            columns=columns,
            offset_hw=_static_hw(helper, offset),
            input_shape=_static_shape(helper, input),
        )
    except ValueError as exc:
        raise ExportError(f"cannot export torchvision::deform_conv2d: {exc}") from exc
    emitter = TorchScriptEmitter(g)
    return build_deform_conv(
        emitter,
        spec,
        input,
        weight,
        offset,
        mask if spec.has_mask else None,
        bias,
        opset=opset,
        variant=variant,
    )


def register_symbolic(*, columns: str = "auto", variant: str | None = None) -> None:
    """Register the ONNX symbolic for ``torchvision::deform_conv2d`` (TorchScript exporter).

    Call once before ``torch.onnx.export(..., dynamo=False)``. Works for ``opset_version``
    12 and up, with ``dynamic_axes`` on batch, height and width. At opset >= 16 the graph
    uses ``GridSample``; at opsets 12-15 it uses one ``GatherND``. The public
    :func:`deform_conv2d_onnx_exporter.register_deform_conv2d_onnx_op` (the 1.2.0 call)
    calls it.

    Args:
        columns: ``"conv"``, ``"matmul"`` or ``"auto"`` (by the export-time output size;
            see :func:`~deform_conv2d_onnx_exporter.graph.columns_for_output_size`).
        variant: ``None`` (GridSample at opset >= 16, GatherND below) or ``"gathernd"``
            at every opset (pixel-exact sampling positions, slower).
    """
    columns_for_output_size(columns, None)  # reject bad values now, not at export time
    if variant not in (None, "gathernd"):
        raise ValueError(f"variant must be None or 'gathernd', got {variant!r}")
    import functools

    import torch

    helper = _torchscript_module("symbolic_helper")
    symbolic = helper.parse_args(
        "v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b"
    )(functools.partial(_deform_conv2d_symbolic, columns, variant))
    torch.onnx.register_custom_op_symbolic(_SYMBOLIC_NAME, symbolic, MIN_OPSET)


def unregister_symbolic() -> None:
    """Remove the symbolic registered by :func:`register_symbolic`."""
    import torch

    torch.onnx.unregister_custom_op_symbolic(_SYMBOLIC_NAME, MIN_OPSET)
