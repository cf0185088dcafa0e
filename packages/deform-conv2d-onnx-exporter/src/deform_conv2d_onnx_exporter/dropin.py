"""The drop-in: plain ``torch.onnx.export(...)`` after ``register_deform_conv2d_onnx_op()``.

torch has two exporters and one public registration hook, for the TorchScript one
(``torch.onnx.register_custom_op_symbolic``, used by :mod:`.torchscript`). The dynamo
exporter (the default since torch 2.9) takes custom translations only per call
(``custom_translation_table=``); without one it writes native ``DeformConv`` under whatever
opset was asked for, an invalid model below opset 19. So this module wraps the public
function ``torch.onnx.export`` itself, narrowly:

* ``dynamo=False`` calls pass through untouched (the registered symbolic handles them);
* dynamo calls get our translation for ``torchvision::deform_conv2d`` (unless the caller
  gave one), are exported without writing, checked (:func:`.dynamo.export_checked`: the
  opset asked for, no ``DeformConv`` below 19, ``onnx.checker`` full) and only then written;
  otherwise they raise before anything is written. One exception: when torch cannot convert
  the graph down to a requested opset below 18 (onnx's version converter has no
  down-adapter for ``Reshape`` below 14, nor for ``Shape`` below 15) and no
  ``dynamic_shapes`` were given, the call is repeated with ``dynamo=False`` (a warning
  says so): the TorchScript exporter builds opsets 12-17 directly, which is what the 1.2.0
  usage (``opset_version=12``, written when it was torch's default) asks for;
* only on torch versions this package was tested with (:data:`SUPPORTED_TORCH`) and whose
  ``torch.onnx.export`` has the parameters it relies on; on others a dynamo call raises
  instead of guessing.

Code that bound ``from torch.onnx import export`` before the registration keeps torch's own
function; ``deform_conv2d_onnx_exporter.export(...)`` never depends on the wrapper.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

# One direction only: this module uses dynamo's exporter; dynamo never imports this module.
from deform_conv2d_onnx_exporter.dynamo import DROPIN_MARK, original_torch_onnx_export

#: (major, minor) versions of torch whose dynamo exporter the drop-in is tested with.
SUPPORTED_TORCH = ((2, 14),)
#: Parameters of ``torch.onnx.export`` the wrapper reads or passes.
_REQUIRED_PARAMETERS = (
    "model",
    "args",
    "f",
    "opset_version",
    "dynamo",
    "custom_translation_table",
    "dynamic_shapes",
)
_MARK = DROPIN_MARK
_settings: dict[str, Any] = {"columns": "auto", "variant": None}


def torch_version() -> tuple[int, int]:
    """The installed torch's (major, minor)."""
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def unsupported_reason() -> str | None:
    """Why the drop-in cannot serve dynamo exports on this torch, or None when it can."""
    version = torch_version()
    if version not in SUPPORTED_TORCH:
        tested = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_TORCH)
        return f"torch {version[0]}.{version[1]} (the drop-in is tested on torch {tested})"
    parameters = inspect.signature(original_torch_onnx_export()).parameters
    missing = [p for p in _REQUIRED_PARAMETERS if p not in parameters]
    if missing:
        return f"this torch.onnx.export has no parameter(s) {missing}"
    return None


def install(columns: str = "auto", variant: str | None = None) -> None:
    """Wrap ``torch.onnx.export`` (once); later calls only update *columns*/*variant*."""
    import torch.onnx

    _settings.update(columns=columns, variant=variant)
    if getattr(torch.onnx.export, _MARK, False):
        return
    original = torch.onnx.export

    @functools.wraps(original)
    def export(*args: Any, **kwargs: Any) -> Any:
        return _export(original, args, kwargs)

    setattr(export, _MARK, True)
    torch.onnx.export = export


def uninstall() -> None:
    """Put torch's own ``torch.onnx.export`` back."""
    import torch.onnx

    torch.onnx.export = original_torch_onnx_export()


def _export(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import torch

    from deform_conv2d_onnx_exporter.dynamo import (
        CONVERTER_MIN_OPSET,
        DEFAULT_OPSET,
        RESHAPE_CONVERTER_MIN_OPSET,
        ExportError,
        OpsetConversionError,
        export_checked,
        make_deform_conv2d_translation,
    )
    from deform_conv2d_onnx_exporter.mmcv_ops import register_loaded_mmcv

    register_loaded_mmcv()  # mmcv imported after the registration: its layers export too
    signature = inspect.signature(original)
    bound = signature.bind(*args, **kwargs).arguments
    dynamo_default = (
        signature.parameters["dynamo"].default if "dynamo" in signature.parameters else False
    )
    model = bound.get("model")
    dynamo = bound.get("dynamo", dynamo_default)
    if not dynamo and not isinstance(model, torch.export.ExportedProgram):
        return original(*args, **kwargs)
    reason = unsupported_reason()
    if reason is not None:
        raise ExportError(
            f"deform_conv2d_onnx_exporter cannot check dynamo exports on {reason}; "
            "use deform_conv2d_onnx_exporter.export(...) or torch.onnx.export(..., dynamo=False); "
            "nothing was written"
        )
    opset = bound.pop("opset_version", None) or DEFAULT_OPSET
    dynamic = bound.get("dynamic_shapes") is not None
    if opset < RESHAPE_CONVERTER_MIN_OPSET and not dynamic and isinstance(model, torch.nn.Module):
        # Our graph always holds Reshape, which onnx's version converter cannot bring below
        # opset 14: the dynamo route would fail (after torch prints a long traceback). Take
        # the TorchScript exporter at once, as the 1.2.0 usage meant, and say so once.
        warnings.warn(
            f"opset {opset} is below what torch's dynamo exporter can reach for DeformConv2d "
            f"(onnx's version converter has no Reshape below {RESHAPE_CONVERTER_MIN_OPSET}); "
            "exporting with dynamo=False (the TorchScript exporter)",
            UserWarning,
            stacklevel=3,
        )
        return original(*args, **{**kwargs, "dynamo": False})
    if opset < CONVERTER_MIN_OPSET and dynamic:
        raise OpsetConversionError(
            f"torch's dynamo exporter cannot write a dynamic-shape model at opset {opset} "
            f"(onnx's version converter has no Shape below {CONVERTER_MIN_OPSET}); use "
            f"opset_version >= {CONVERTER_MIN_OPSET}, or dynamo=False with dynamic_axes; "
            "nothing was written"
        )
    try:
        translation = make_deform_conv2d_translation(
            opset, _settings["columns"], _settings["variant"]
        )
    except ValueError as exc:
        raise ExportError(f"cannot export torchvision::deform_conv2d: {exc}") from exc
    table = dict(bound.pop("custom_translation_table", None) or {})
    table.setdefault(torch.ops.torchvision.deform_conv2d.default, translation)
    bound.pop("dynamo", None)
    model = bound.pop("model")
    example = bound.pop("args", ())
    if isinstance(example, torch.Tensor):
        example = (example,)
    f = bound.pop("f", None)
    try:
        return export_checked(model, example, f, opset=opset, table=table, **bound)
    except OpsetConversionError:
        if bound.get("dynamic_shapes") is not None or not isinstance(model, torch.nn.Module):
            raise
        warnings.warn(
            f"torch's dynamo exporter cannot bring this model down to opset {opset} (onnx's "
            "version converter has no down-adapter for Reshape below opset 14 or Shape below "
            "15); exporting with dynamo=False (the TorchScript exporter) instead",
            UserWarning,
            stacklevel=3,
        )
        original(*args, **{**kwargs, "dynamo": False})
        return None
