"""Export torchvision DeformConv2d to ONNX and lower ONNX DeformConv nodes to standard operators.

The public API is importable from here without torch: :func:`lower_deform_conv` and the
graph builder are pure ONNX/numpy. The torch-facing entry points
(:func:`register_deform_conv2d_onnx_op`, :func:`export`, :func:`make_deform_conv2d_translation`)
import torch only when called.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deform_conv2d_onnx_exporter.check import CheckReport, check_export
    from deform_conv2d_onnx_exporter.functions import (
        DeformConvCall,
        register_deform_conv_function,
        unregister_deform_conv_function,
    )
    from deform_conv2d_onnx_exporter.graph import DeformConvSpec, build_deform_conv
    from deform_conv2d_onnx_exporter.lower import LoweringError, lower_deform_conv
    from deform_conv2d_onnx_exporter.mmcv_ops import (
        register_mmcv_deform_conv,
        unregister_mmcv_deform_conv,
    )

try:
    __version__: str = version("deform-conv2d-onnx-exporter")
except PackageNotFoundError:  # running from a source tree or a bundle without metadata
    __version__ = "0.0.0"

# numpy and onnx load on first use of these names, so that the console script's --help and
# `python -m deform_conv2d_onnx_exporter --help` import neither.
_LAZY = {
    "CheckReport": "deform_conv2d_onnx_exporter.check",
    "check_export": "deform_conv2d_onnx_exporter.check",
    "DeformConvCall": "deform_conv2d_onnx_exporter.functions",
    "register_deform_conv_function": "deform_conv2d_onnx_exporter.functions",
    "unregister_deform_conv_function": "deform_conv2d_onnx_exporter.functions",
    "DeformConvSpec": "deform_conv2d_onnx_exporter.graph",
    "build_deform_conv": "deform_conv2d_onnx_exporter.graph",
    "LoweringError": "deform_conv2d_onnx_exporter.lower",
    "lower_deform_conv": "deform_conv2d_onnx_exporter.lower",
    "register_mmcv_deform_conv": "deform_conv2d_onnx_exporter.mmcv_ops",
    "unregister_mmcv_deform_conv": "deform_conv2d_onnx_exporter.mmcv_ops",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def _require_torch(entry_point: str) -> None:
    """Raise ImportError naming the `[torch]` extra unless torch, torchvision, onnxscript import."""
    for module in ("torch", "torchvision", "onnxscript"):
        try:
            __import__(module)
        except ImportError as exc:
            raise ImportError(
                f"{entry_point}() needs {module}, which cannot be imported ({exc}): "
                "install the torch extra, pip install 'deform-conv2d-onnx-exporter[torch]' "
                "(lowering ONNX models needs no torch)"
            ) from None


def register_deform_conv2d_onnx_op(
    use_gathernd: bool = True,
    enable_openvino_patch: bool = False,
    *,
    columns: str = "auto",
    variant: str | None = None,
) -> None:
    """Make plain ``torch.onnx.export(...)`` export ``torchvision::deform_conv2d``, both exporters.

    The 1.2.0 call, unchanged; mmcv's DCN layers export too (mmcv's Functions are
    registered, on every export call, once ``mmcv.ops`` is imported). ``dynamo=False``:
    registers the TorchScript symbolic
    (:func:`deform_conv2d_onnx_exporter.torchscript.register_symbolic`, opsets 12 and up).
    The dynamo exporter (torch's default): installs the checked drop-in
    (:mod:`deform_conv2d_onnx_exporter.dropin`), which decomposes at the requested opset and
    raises before writing anything it cannot produce validly.

    Args:
        use_gathernd: kept for compatibility with 1.2.0 (which offered GatherElements as
            the alternative). Both values produce the same graph.
        enable_openvino_patch: kept for compatibility with 1.2.0 (a workaround for
            OpenVINO 2021.4); the graph needs no patch, so it has no effect.
        columns: how the columns meet the weight, for both exporters (see
            :func:`~deform_conv2d_onnx_exporter.torchscript.register_symbolic`).
        variant: the sampling variant, for both exporters (likewise).

    Raises:
        ImportError: torch, torchvision or onnxscript is missing (the ``[torch]`` extra).
    """
    _require_torch("register_deform_conv2d_onnx_op")
    from deform_conv2d_onnx_exporter import dropin
    from deform_conv2d_onnx_exporter.mmcv_ops import register_loaded_mmcv
    from deform_conv2d_onnx_exporter.torchscript import register_symbolic

    del use_gathernd, enable_openvino_patch  # accepted for source compatibility only
    register_symbolic(columns=columns, variant=variant)
    dropin.install(columns=columns, variant=variant)
    register_loaded_mmcv()


def unregister_deform_conv2d_onnx_op() -> None:
    """Undo :func:`register_deform_conv2d_onnx_op` (both exporters, mmcv's Functions)."""
    _require_torch("unregister_deform_conv2d_onnx_op")
    from deform_conv2d_onnx_exporter import dropin
    from deform_conv2d_onnx_exporter.mmcv_ops import unregister_mmcv_deform_conv
    from deform_conv2d_onnx_exporter.torchscript import unregister_symbolic

    unregister_symbolic()
    dropin.uninstall()
    unregister_mmcv_deform_conv()


def export(model: Any, args: tuple[Any, ...], f: Any = None, **kwargs: Any) -> Any:
    """Export *model* to ONNX, never writing an invalid DeformConv.

    See :func:`deform_conv2d_onnx_exporter.dynamo.export` for the keyword arguments.
    """
    _require_torch("export")
    from deform_conv2d_onnx_exporter.dynamo import export as dynamo_export

    return dynamo_export(model, args, f, **kwargs)


def make_deform_conv2d_translation(
    opset: int = 20, columns: str = "auto", variant: str | None = None
) -> Any:
    """Return the onnxscript translation of ``torchvision::deform_conv2d`` for *opset*.

    See :func:`deform_conv2d_onnx_exporter.dynamo.make_deform_conv2d_translation`.
    """
    _require_torch("make_deform_conv2d_translation")
    from deform_conv2d_onnx_exporter.dynamo import make_deform_conv2d_translation as make

    return make(opset, columns, variant)


__all__ = [
    "CheckReport",
    "DeformConvCall",
    "DeformConvSpec",
    "LoweringError",
    "__version__",
    "build_deform_conv",
    "check_export",
    "export",
    "lower_deform_conv",
    "make_deform_conv2d_translation",
    "register_deform_conv2d_onnx_op",
    "register_deform_conv_function",
    "register_mmcv_deform_conv",
    "unregister_deform_conv2d_onnx_op",
    "unregister_deform_conv_function",
    "unregister_mmcv_deform_conv",
]
