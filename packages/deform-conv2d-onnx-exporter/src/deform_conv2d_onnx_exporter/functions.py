"""Export a project's own DCN ``torch.autograd.Function`` through the one graph builder.

Most deployed DCN models do not call torchvision's op but a Function of their own
(detectron2's ``_DeformConv`` / ``_ModulatedDeformConv``, CharlesShang's ``_DCNv2``, mmcv's
``DeformConv2dFunction``), whose ``forward`` calls compiled code that neither exporter can
see ("Couldn't export Python operator ..."). Their offset and mask layouts are
torchvision's, so all a user has to say is how the Function's arguments map to
``torchvision.ops.deform_conv2d``'s: :func:`register_deform_conv_function`.

While a model is being exported (``torch.onnx.is_in_onnx_export()`` or
``torch.compiler.is_exporting()``), the registered Function's ``forward`` calls
``torchvision.ops.deform_conv2d`` with the mapped arguments, which both exporters then
lower with this package's translation (TorchScript: the registered symbolic, after torch
inlines the Function; dynamo: the translation table). Outside an export the Function's own
``forward`` runs, so training and eager inference are untouched.

A Function's own ``symbolic`` (mmcv's writes mmdeploy's ``mmcv::`` nodes) would take
precedence in the TorchScript exporter, so it is set aside while the Function is registered
and put back by :func:`unregister_deform_conv_function`.

Only Functions whose ``forward`` takes ``ctx`` first (the classic style all of the above
use) are supported.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_ORIGINAL = "__deform_conv2d_onnx_original_forward__"
_SYMBOLIC = "__deform_conv2d_onnx_original_symbolic__"
#: Functions registered now; and whether they compute through torchvision outside an export.
_registered: set[type] = set()
_through_torchvision = [False]


@dataclass(frozen=True)
class DeformConvCall:
    """One call of ``torchvision.ops.deform_conv2d``, as a registered Function maps onto it.

    ``groups`` and ``offset_groups`` are optional: torchvision derives them from the shapes
    (``groups = C_in / weight.shape[1]``, ``offset_groups = offset.shape[1] / (2 kh kw)``);
    when given they are checked against the shapes, which catches a wrong mapping early.
    """

    input: Any
    offset: Any
    weight: Any
    bias: Any = None
    mask: Any = None
    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0
    dilation: int | tuple[int, int] = 1
    groups: int | None = None
    offset_groups: int | None = None

    def run(self) -> Any:
        """Call ``torchvision.ops.deform_conv2d`` (after checking the group counts)."""
        import torch
        import torchvision

        with warnings.catch_warnings():  # channel counts are static: no TracerWarning
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            self._check_groups()
        return torchvision.ops.deform_conv2d(
            self.input,
            self.offset,
            self.weight,
            self.bias,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            mask=self.mask,
        )

    def _check_groups(self) -> None:
        channels, per_group = int(self.input.shape[1]), int(self.weight.shape[1])
        if self.groups is not None and per_group * int(self.groups) != channels:
            raise ValueError(
                f"deform conv mapping: groups={self.groups} but the input has {channels} "
                f"channels and the weight {per_group} per group"
            )
        taps = int(self.weight.shape[2]) * int(self.weight.shape[3])
        offset_channels = int(self.offset.shape[1])
        if self.offset_groups is not None and offset_channels != 2 * taps * int(self.offset_groups):
            raise ValueError(
                f"deform conv mapping: offset_groups={self.offset_groups} but the offset has "
                f"{offset_channels} channels (2 * kh * kw * offset_groups = "
                f"{2 * taps * int(self.offset_groups)} expected)"
            )


def _exporting() -> bool:
    import torch

    return bool(
        _through_torchvision[0] or torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting()
    )


def registered_functions() -> list[str]:
    """Names of the Functions registered now."""
    return sorted(f.__name__ for f in _registered)


@contextlib.contextmanager
def through_torchvision() -> Iterator[None]:
    """Registered Functions compute through their mapping in eager mode too (a reference for
    checking an export where a Function's own compiled ops are missing)."""
    saved = _through_torchvision[0]
    _through_torchvision[0] = True
    try:
        yield
    finally:
        _through_torchvision[0] = saved


def register_deform_conv_function(
    function: type, to_torchvision: Callable[..., DeformConvCall]
) -> None:
    """Export every call of the autograd *function* as DeformConv, with both exporters.

    Args:
        function: a ``torch.autograd.Function`` subclass whose ``forward(ctx, ...)``
            computes a deformable convolution (e.g. detectron2's ``_DeformConv``).
        to_torchvision: called with the arguments ``function.apply`` receives (without
            ``ctx``); returns the :class:`DeformConvCall` that computes the same result.

    Also call :func:`deform_conv2d_onnx_exporter.register_deform_conv2d_onnx_op` (plain
    ``torch.onnx.export``), or export with :func:`deform_conv2d_onnx_exporter.export`.
    Registering again replaces the mapping; :func:`unregister_deform_conv_function` undoes.

    Raises:
        TypeError: *function* is not an autograd Function with a ``forward(ctx, ...)``.
    """
    import torch

    if not (isinstance(function, type) and issubclass(function, torch.autograd.Function)):
        raise TypeError(f"expected a torch.autograd.Function subclass, got {function!r}")
    original = function.__dict__.get(_ORIGINAL) or function.__dict__.get("forward")
    if original is None:
        raise TypeError(f"{function.__name__} defines no forward of its own")
    forward = original.__func__ if isinstance(original, staticmethod) else original
    parameters = list(inspect.signature(forward).parameters)
    if not parameters or parameters[0] != "ctx":
        raise TypeError(
            f"{function.__name__}.forward must take ctx first (forward(ctx, input, ...)); "
            f"got forward({', '.join(parameters)})"
        )

    def exporting_forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        if not _exporting():
            return forward(ctx, *args, **kwargs)
        call = to_torchvision(*args, **kwargs)
        if not isinstance(call, DeformConvCall):
            raise TypeError(
                f"the mapping registered for {function.__name__} returned "
                f"{type(call).__name__}, not a DeformConvCall"
            )
        return call.run()

    # the descriptor itself, so that unregistering restores exactly what was there
    setattr(function, _ORIGINAL, original if isinstance(original, staticmethod) else forward)
    setattr(function, "forward", staticmethod(exporting_forward))  # noqa: B010
    _registered.add(function)
    if "symbolic" in function.__dict__:  # else the TorchScript exporter never inlines forward
        setattr(function, _SYMBOLIC, function.__dict__["symbolic"])
        delattr(function, "symbolic")


def unregister_deform_conv_function(function: type) -> None:
    """Give *function* its own ``forward`` (and ``symbolic``) back; no-op if not registered."""
    original = function.__dict__.get(_ORIGINAL)
    if original is not None:
        setattr(function, "forward", original)  # noqa: B010
        delattr(function, _ORIGINAL)
    _registered.discard(function)
    symbolic = function.__dict__.get(_SYMBOLIC)
    if symbolic is not None:
        setattr(function, "symbolic", symbolic)  # noqa: B010
        delattr(function, _SYMBOLIC)


__all__ = ["DeformConvCall", "register_deform_conv_function", "unregister_deform_conv_function"]
