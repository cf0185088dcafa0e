"""mmcv 2.x's deformable convolutions export through the one graph builder.

``mmcv.ops.DeformConv2d`` / ``DeformConv2dPack`` and ``ModulatedDeformConv2d`` /
``ModulatedDeformConv2dPack`` (and the functional ``deform_conv2d`` /
``modulated_deform_conv2d``) all call two autograd Functions,
``mmcv.ops.deform_conv.DeformConv2dFunction`` and
``mmcv.ops.modulated_deform_conv.ModulatedDeformConv2dFunction``, whose ``forward`` needs
mmcv's compiled ops and whose ``symbolic`` writes mmdeploy's custom ``mmcv::`` nodes.
mmcv's offset and mask layout is torchvision's (checked against mmcv's own test values in
the tests), so both map onto ``torchvision.ops.deform_conv2d`` argument for argument:
``groups`` and ``deform_groups`` are checked against the shapes, ``im2col_step`` only
batches mmcv's work and is dropped. Exporting therefore needs only mmcv's Python code.

:func:`register_mmcv_deform_conv` registers both (importing mmcv.ops);
:func:`register_loaded_mmcv` registers whichever are already imported, which
``register_deform_conv2d_onnx_op()``, ``export()`` and the drop-in do on every call, so a
model built from mmcv's layers exports with no extra line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from deform_conv2d_onnx_exporter.functions import (
    DeformConvCall,
    register_deform_conv_function,
    unregister_deform_conv_function,
)

#: mmcv's modules and the Function each defines.
MMCV_FUNCTIONS = {
    "mmcv.ops.deform_conv": "DeformConv2dFunction",
    "mmcv.ops.modulated_deform_conv": "ModulatedDeformConv2dFunction",
}


def deform_conv2d_call(
    input: Any,
    offset: Any,
    weight: Any,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    deform_groups: int = 1,
    bias: bool = False,
    im2col_step: int = 32,
) -> DeformConvCall:
    """``mmcv.ops.deform_conv2d``'s arguments as torchvision's (mmcv 2.x signature)."""
    if bias:
        raise ValueError("mmcv's deform_conv2d supports only bias=False")
    del im2col_step  # mmcv's batching of its im2col buffer; no effect on the result
    input = input.type_as(offset)  # mmcv's own casts (amp: offset decides the dtype)
    return DeformConvCall(
        input,
        offset,
        weight.type_as(input),
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        offset_groups=deform_groups,
    )


def modulated_deform_conv2d_call(
    input: Any,
    offset: Any,
    mask: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    deform_groups: int = 1,
) -> DeformConvCall:
    """``mmcv.ops.modulated_deform_conv2d``'s arguments as torchvision's (mmcv 2.x)."""
    input = input.type_as(offset)
    return DeformConvCall(
        input,
        offset,
        weight.type_as(input),
        None if bias is None else bias.type_as(input),
        mask.type_as(input),
        stride,
        padding,
        dilation,
        groups=groups,
        offset_groups=deform_groups,
    )


_MAPPINGS: dict[str, Callable[..., DeformConvCall]] = {
    "DeformConv2dFunction": deform_conv2d_call,
    "ModulatedDeformConv2dFunction": modulated_deform_conv2d_call,
}


def _register(module: Any) -> bool:
    name = MMCV_FUNCTIONS[module.__name__]
    function = getattr(module, name, None)
    if function is None:
        return False
    register_deform_conv_function(function, _MAPPINGS[name])
    return True


def register_mmcv_deform_conv() -> None:
    """Export mmcv's DeformConv2d / ModulatedDeformConv2d (and ``*Pack``), both exporters.

    Imports ``mmcv.ops`` (mmcv's compiled ops are not needed to export). Undo with
    :func:`unregister_mmcv_deform_conv`.

    Raises:
        ImportError: mmcv.ops cannot be imported.
    """
    import importlib

    try:
        modules = [importlib.import_module(module) for module in MMCV_FUNCTIONS]
    except ImportError as exc:
        raise ImportError(
            "register_mmcv_deform_conv() needs mmcv 2.x (its Python code; the compiled ops "
            f"are not needed), which cannot be imported here ({exc}); pip install mmcv"
        ) from exc
    for module in modules:
        _register(module)


def register_loaded_mmcv() -> list[str]:
    """Register mmcv's Functions whose modules are already imported; their names."""
    done = []
    for module, name in MMCV_FUNCTIONS.items():
        loaded = sys.modules.get(module)
        if loaded is not None and _register(loaded):
            done.append(name)
    return done


def unregister_mmcv_deform_conv() -> None:
    """Give mmcv's Functions their own ``forward`` and ``symbolic`` back."""
    for module, name in MMCV_FUNCTIONS.items():
        function = getattr(sys.modules.get(module), name, None)
        if function is not None:
            unregister_deform_conv_function(function)


__all__ = [
    "deform_conv2d_call",
    "modulated_deform_conv2d_call",
    "register_loaded_mmcv",
    "register_mmcv_deform_conv",
    "unregister_mmcv_deform_conv",
]
