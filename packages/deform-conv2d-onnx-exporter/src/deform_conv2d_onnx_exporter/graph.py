"""The one graph builder: DeformConv as standard ONNX operators.

This module owns the decomposition itself. It knows nothing about files, torch or
onnxruntime: each builder takes an :class:`Emitter` (something that can append one ONNX
node or one constant and hand back a value) plus a :class:`DeformConvSpec`, and returns the
output value. Three emitters drive it: plain ``NodeProto`` lists (:mod:`.lower`), the
TorchScript exporter's graph context (:mod:`.torchscript`) and onnxscript's tracer inside
the dynamo exporter (:mod:`.dynamo`).

Two named variants:

* :func:`deform_conv_gridsample_opset16` (opset >= 16, the fast path). Every kernel tap is
  one bilinear ``GridSample`` lookup (``padding_mode="zeros"``, ``align_corners=0``), which
  is exactly torchvision's border rule. The taps are stacked along the sampled height and
  the offset groups are folded into the batch, so one ``GridSample`` produces the columns
  already in the ``(N, C*K, Ho, Wo)`` layout that a grouped 1x1 ``Conv`` consumes: no
  Transpose touches anything larger than the offsets.
* :func:`deform_conv_gathernd_opset12` (opsets 12-15, no GridSample there). Corner indices
  are ``Clip``-ped into the image and corners outside it get weight zero; the four corners
  come from one ``GatherND`` and are weighted (bilinear weight times mask folded together
  first) before they meet the channels.

All shapes that can vary (batch, height, width) come from ``Shape`` ops; only the kernel
shape, strides, pads, dilations and groups are baked in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

V = TypeVar("V")

#: Lowest opset for which a decomposition exists (GatherND's ``batch_dims``).
MIN_OPSET = 12
#: Lowest opset with ``GridSample``.
GRIDSAMPLE_OPSET = 16

#: The two ways the sampled columns meet the weight (see :func:`columns_for_output_size`).
COLUMN_OPS = ("conv", "matmul")
#: Largest Ho*Wo for which ``"auto"`` picks MatMul (see :func:`columns_for_output_size`).
MATMUL_MAX_PIXELS = 4096

_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_FLOAT32 = np.dtype(np.float32)
_ONNX_INT64 = 7
_NP_TO_ONNX = {np.dtype(np.float16): 10, np.dtype(np.float32): 1, np.dtype(np.float64): 11}


class Emitter(Protocol[V]):
    """Appends ONNX nodes to some graph under construction.

    ``op`` appends one node of the default domain with single output and returns that
    output; attribute values are Python ints, floats, strings or lists of ints/floats.
    ``const`` appends a constant tensor (an initializer or a ``Constant`` node).
    """

    def op(self, op_type: str, *inputs: V, **attrs: Any) -> V:
        """Append node *op_type* with *inputs* and *attrs*; return its output."""
        ...

    def const(self, value: np.ndarray) -> V:
        """Return a value holding the constant *value*."""
        ...


@dataclass(frozen=True)
class DeformConvSpec:
    """The static attributes of one DeformConv (ONNX opset 19/22 naming).

    ``pads`` is ``(top, left, bottom, right)``; only the leading pads move the sampling
    grid (the output size is taken from the offset tensor at run time).
    """

    kernel_shape: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    group: int = 1
    offset_group: int = 1
    has_mask: bool = False
    has_bias: bool = False
    dtype: np.dtype[Any] = _FLOAT32
    #: How the columns meet the weight: ``"conv"`` (grouped 1x1 Conv) or ``"matmul"``.
    columns: str = "conv"

    def __post_init__(self) -> None:
        def positive_pair(name: str, value: tuple[int, ...], length: int, minimum: int) -> None:
            if len(value) != length or not all(
                isinstance(v, int | np.integer) and v >= minimum for v in value
            ):
                raise ValueError(
                    f"DeformConv {name} must be {length} integers >= {minimum}, got {value!r}"
                )

        positive_pair("kernel_shape", self.kernel_shape, 2, 1)
        positive_pair("strides", self.strides, 2, 1)
        positive_pair("pads", self.pads, 4, 0)
        positive_pair("dilations", self.dilations, 2, 1)
        for name in ("group", "offset_group"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"DeformConv {name} must be an integer >= 1, got {value!r}")
        if self.columns not in COLUMN_OPS:
            raise ValueError(
                f"DeformConv columns must be one of {COLUMN_OPS}, got {self.columns!r}"
            )
        if np.dtype(self.dtype) not in _FLOAT_DTYPES:
            raise ValueError(
                f"DeformConv input dtype must be float16, float32 or float64, got {self.dtype}"
            )

    @property
    def taps(self) -> int:
        """Number of kernel taps K = kh * kw."""
        return self.kernel_shape[0] * self.kernel_shape[1]

    def tap_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Per tap k = i*kw + j: the grid offsets ``(i*dh - pad_top, j*dw - pad_left)``."""
        kh, kw = self.kernel_shape
        i, j = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
        ky = i.reshape(-1) * self.dilations[0] - self.pads[0]
        kx = j.reshape(-1) * self.dilations[1] - self.pads[1]
        return ky.astype(self.dtype), kx.astype(self.dtype)


def columns_for_output_size(columns: str, out_hw: tuple[int | None, int | None] | None) -> str:
    """Resolve ``columns="auto"`` from the output size known at export time, if any.

    Measured on this project's CPU (AVX2, 1-2 threads): onnxruntime runs both forms at the
    same speed or MatMul slightly faster; OpenVINO runs MatMul ~1.5-2x faster for small
    outputs (no layout Reorder around its 1x1 Convolution) but its MatMul drops from ~65 to
    ~27 GFLOP/s once Ho*Wo grows to ~9000, where the Conv form stays at ~60. So "auto" is
    MatMul when Ho*Wo is known and at most :data:`MATMUL_MAX_PIXELS`, Conv otherwise
    (dynamic sizes included).
    """
    if columns != "auto":
        if columns not in COLUMN_OPS:
            raise ValueError(f"columns must be 'auto', 'conv' or 'matmul', got {columns!r}")
        return columns
    if out_hw is None or out_hw[0] is None or out_hw[1] is None:
        return "conv"
    return "matmul" if out_hw[0] * out_hw[1] <= MATMUL_MAX_PIXELS else "conv"


def check_opset(opset: int) -> None:
    """Raise ValueError unless *opset* has a decomposition."""
    if not isinstance(opset, int) or opset < MIN_OPSET:
        raise ValueError(
            f"opset {opset!r} is not supported: the decomposition needs opset >= {MIN_OPSET} "
            f"(GatherND with batch_dims) and uses GridSample from opset {GRIDSAMPLE_OPSET}"
        )


def resolve_variant(variant: str | None, opset: int) -> str:
    """Check *variant* (None: by opset) against *opset*; return the variant's name."""
    if variant is None:
        return variant_for_opset(opset)
    check_opset(opset)
    if variant not in ("gridsample", "gathernd"):
        raise ValueError(f"unknown variant {variant!r}: expected 'gridsample' or 'gathernd'")
    if variant == "gridsample" and opset < GRIDSAMPLE_OPSET:
        raise ValueError(
            f"the gridsample variant needs opset >= {GRIDSAMPLE_OPSET}, got opset {opset}; "
            "use variant='gathernd' or None"
        )
    return variant


def variant_for_opset(opset: int) -> str:
    """Name the variant used at *opset*: ``"gridsample"`` (>= 16) or ``"gathernd"`` (12-15)."""
    check_opset(opset)
    return "gridsample" if opset >= GRIDSAMPLE_OPSET else "gathernd"


class _Ops(Generic[V]):
    """Small helpers over an emitter that keep the builders readable and opset-correct."""

    def __init__(self, em: Emitter[V], opset: int, dtype: np.dtype[Any]) -> None:
        self.em = em
        self.opset = opset
        self.dtype = np.dtype(dtype)

    def i64(self, values: list[int] | int) -> V:
        return self.em.const(np.array(values, dtype=np.int64))

    def fconst(self, values: Any) -> V:
        return self.em.const(np.asarray(values, dtype=self.dtype))

    def op(self, op_type: str, *inputs: V, **attrs: Any) -> V:
        return self.em.op(op_type, *inputs, **attrs)

    def dims(self, shape: V, start: int, end: int) -> V:
        """``shape[start:end]`` as a 1-D int64 tensor."""
        return self.op("Slice", shape, self.i64([start]), self.i64([end]), self.i64([0]))

    def to_float(self, x: V) -> V:
        return self.op("Cast", x, to=_NP_TO_ONNX[self.dtype])

    def reduce_sum(self, x: V, axis: int) -> V:
        if self.opset >= 13:
            return self.op("ReduceSum", x, self.i64([axis]), keepdims=0)
        return self.op("ReduceSum", x, axes=[axis], keepdims=0)


def _output_size(o: _Ops[V], spec: DeformConvSpec, x_shape: V) -> V:
    """``[Ho, Wo]`` (1-D int64) from the input's height and width, as ONNX Conv defines it.

    Computed from X rather than read off the offset tensor: OpenVINO 2026.4 mis-infers the
    shape of a strided ``Slice`` over dynamic dimensions (``offset[:, :, ::2, ::2]`` reports
    the unsliced size), which broke models that take the offset from such a slice.
    """
    kh, kw = spec.kernel_shape
    extra = [
        spec.pads[0] + spec.pads[2] - spec.dilations[0] * (kh - 1) - 1,
        spec.pads[1] + spec.pads[3] - spec.dilations[1] * (kw - 1) - 1,
    ]
    span = o.op("Add", o.dims(x_shape, 2, 4), o.i64(extra))
    return o.op("Add", o.op("Div", span, o.i64(list(spec.strides))), o.i64([1, 1]))


def _sampling_coordinates(
    o: _Ops[V], spec: DeformConvSpec, offset: V, out_hw: V, shift: float = 0.0
) -> tuple[V, V]:
    """Sampling positions (y, x) in input pixels plus *shift*, each (N*og, K, Ho, Wo).

    Built from the offsets plus a base grid made at run time from ``Range`` over Ho and Wo.
    """
    taps = spec.taps
    # (N, og*K*2, Ho, Wo) -> (N*og, K, 2, Ho, Wo): (dy, dx) pairs per tap, per offset group.
    shape5 = o.op("Concat", o.i64([-1, taps, 2]), out_hw, axis=0)
    off5 = o.op("Reshape", offset, shape5)
    dy = o.op("Gather", off5, o.i64(0), axis=2)
    dx = o.op("Gather", off5, o.i64(1), axis=2)

    zero, one = o.i64(0), o.i64(1)
    out_h = o.op("Gather", out_hw, o.i64(0), axis=0)
    out_w = o.op("Gather", out_hw, o.i64(1), axis=0)
    rows = o.to_float(o.op("Range", zero, out_h, one))
    cols = o.to_float(o.op("Range", zero, out_w, one))
    ky, kx = spec.tap_positions()
    ky, kx = ky + shift, kx + shift
    # base_y[k, ho, 0] = ho*sh + i*dh - pad_top ; base_x[k, 0, wo] = wo*sw + j*dw - pad_left
    base_y = o.op(
        "Add",
        o.op("Reshape", o.op("Mul", rows, o.fconst(spec.strides[0])), o.i64([1, -1, 1])),
        o.fconst(ky.reshape(taps, 1, 1)),
    )
    base_x = o.op(
        "Add",
        o.op("Reshape", o.op("Mul", cols, o.fconst(spec.strides[1])), o.i64([1, 1, -1])),
        o.fconst(kx.reshape(taps, 1, 1)),
    )
    return o.op("Add", dy, base_y), o.op("Add", dx, base_x)


def _columns_to_output(
    o: _Ops[V], spec: DeformConvSpec, cols: V, weight: V, bias: V | None, out_hw: V
) -> V:
    """Columns (N, C*K, Ho, Wo) times the weight: a grouped 1x1 Conv or a (batched) MatMul."""
    if spec.columns == "conv":
        w2 = o.op("Reshape", weight, o.i64([0, -1, 1, 1]))
        inputs = [cols, w2] if bias is None else [cols, w2, bias]
        return o.op("Conv", *inputs, group=spec.group, kernel_shape=[1, 1])
    g = spec.group
    w2 = o.op("Reshape", weight, o.i64([0, -1]))  # (Co, C/g*K)
    if g == 1:
        out = o.op("MatMul", w2, o.op("Reshape", cols, o.i64([0, 0, -1])))  # (N, Co, Ho*Wo)
    else:
        per_group = o.dims(o.op("Shape", w2), 1, 2)
        w3 = o.op("Reshape", w2, o.op("Concat", o.i64([g, -1]), per_group, axis=0))
        cols4 = o.op("Reshape", cols, o.op("Concat", o.i64([0, g]), per_group, o.i64([-1]), axis=0))
        out = o.op("MatMul", w3, cols4)  # (N, g, Co/g, Ho*Wo)
    out = o.op("Reshape", out, o.op("Concat", o.i64([0, -1]), out_hw, axis=0))
    if bias is not None:
        out = o.op("Add", out, o.op("Reshape", bias, o.i64([-1, 1, 1])))
    return out


def deform_conv_gridsample_opset16(
    em: Emitter[V],
    spec: DeformConvSpec,
    x: V,
    weight: V,
    offset: V,
    mask: V | None = None,
    bias: V | None = None,
    *,
    opset: int = GRIDSAMPLE_OPSET,
) -> V:
    """Emit DeformConv with one ``GridSample`` (opset >= 16); return the output value."""
    if opset < GRIDSAMPLE_OPSET:
        raise ValueError(f"the GridSample variant needs opset >= {GRIDSAMPLE_OPSET}, got {opset}")
    o = _Ops(em, opset, spec.dtype)
    og, taps = spec.offset_group, spec.taps
    x_shape = o.op("Shape", x)
    out_hw = _output_size(o, spec, x_shape)
    # Pixel p -> GridSample's normalised coordinate with align_corners=0:
    # g = (p + 0.5) * (2/size) - 1. This form loses half as much precision as
    # p * (2/size) + (1/size - 1) once the runtime maps g back to pixels (measured in
    # onnxruntime: 4.8e-7 vs 9.5e-7 px on a 9-pixel row); the 0.5 rides on the base grid.
    y, xs = _sampling_coordinates(o, spec, offset, out_hw, shift=0.5)
    scale = o.op("Div", o.fconst([2.0, 2.0]), o.to_float(o.dims(x_shape, 2, 4)))
    one = o.fconst(1.0)
    gy = o.op("Sub", o.op("Mul", y, o.op("Gather", scale, o.i64(0), axis=0)), one)
    gx = o.op("Sub", o.op("Mul", xs, o.op("Gather", scale, o.i64(1), axis=0)), one)
    # (N*og, K, Ho, Wo) -> (N*og, K, Ho, Wo, 1), then (x, y) pairs stacked last.
    trailing = o.i64([0, 0, 0, -1, 1])
    grid = o.op("Concat", o.op("Reshape", gx, trailing), o.op("Reshape", gy, trailing), axis=4)
    # Taps stacked along the sampled height: (N*og, K*Ho, Wo, 2).
    out_h = o.dims(out_hw, 0, 1)
    out_w = o.dims(out_hw, 1, 2)
    k_out_h = o.op("Mul", out_h, o.i64([taps]))
    grid = o.op("Reshape", grid, o.op("Concat", o.i64([-1]), k_out_h, out_w, o.i64([2]), axis=0))

    batch = o.dims(x_shape, 0, 1)
    folded = o.op(
        "Reshape", x, o.op("Concat", o.op("Mul", batch, o.i64([og])), o.i64([-1, 0, 0]), axis=0)
    )
    mode = "bilinear" if opset < 20 else "linear"
    sampled = o.op("GridSample", folded, grid, mode=mode, padding_mode="zeros", align_corners=0)
    # sampled: (N*og, C/og, K*Ho, Wo)
    if mask is not None:
        mask4 = o.op("Reshape", mask, o.op("Concat", o.i64([-1, 1]), k_out_h, out_w, axis=0))
        sampled = o.op("Mul", sampled, mask4)
    cols = o.op("Reshape", sampled, o.op("Concat", batch, o.i64([-1]), out_h, out_w, axis=0))
    return _columns_to_output(o, spec, cols, weight, bias, out_hw)


def deform_conv_gathernd_opset12(
    em: Emitter[V],
    spec: DeformConvSpec,
    x: V,
    weight: V,
    offset: V,
    mask: V | None = None,
    bias: V | None = None,
    *,
    opset: int = MIN_OPSET,
) -> V:
    """Emit DeformConv with ``Clip``-ped indices and one ``GatherND`` (opset >= 12)."""
    check_opset(opset)
    o = _Ops(em, opset, spec.dtype)
    og, taps = spec.offset_group, spec.taps
    x_shape = o.op("Shape", x)
    out_hw = _output_size(o, spec, x_shape)
    y, xs = _sampling_coordinates(o, spec, offset, out_hw)

    batch = o.dims(x_shape, 0, 1)
    folded = o.op(
        "Reshape", x, o.op("Concat", o.op("Mul", batch, o.i64([og])), o.i64([-1, 0, 0]), axis=0)
    )
    h = o.op("Gather", x_shape, o.i64(2), axis=0)
    w = o.op("Gather", x_shape, o.i64(3), axis=0)
    pixels_last = o.op("Transpose", o.op("Reshape", folded, o.i64([0, 0, -1])), perm=[0, 2, 1])
    # pixels_last: (N*og, H*W, C/og)

    y0 = o.op("Floor", y)
    x0 = o.op("Floor", xs)
    ly = o.op("Sub", y, y0)
    lx = o.op("Sub", xs, x0)
    one = o.fconst(1.0)
    hy = o.op("Sub", one, ly)
    hx = o.op("Sub", one, lx)
    if mask is not None:
        mask4 = o.op("Reshape", mask, o.i64([-1, taps, 0, 0]))
        hy = o.op("Mul", hy, mask4)
        ly = o.op("Mul", ly, mask4)

    zero_f = o.fconst(0.0)
    h_max = o.to_float(o.op("Sub", h, o.i64(1)))
    w_max = o.to_float(o.op("Sub", w, o.i64(1)))

    def corner(position: V, weight: V, top: V) -> tuple[V, V]:
        """Clipped integer index, and the weight zeroed where the corner lies outside.

        A corner outside the image contributes zero (torchvision's rule); clipping keeps
        the gather in bounds and the equality test drops exactly those corners. (A
        zero-padded image would do the same, but ``Pad`` cannot be converted from opset 18
        down, which the dynamo exporter does for opsets < 18.)
        """
        clipped = o.op("Clip", position, zero_f, top)
        inside = o.to_float(o.op("Equal", clipped, position))
        return o.op("Cast", clipped, to=_ONNX_INT64), o.op("Mul", weight, inside)

    iy0, hy = corner(y0, hy, h_max)
    iy1, ly = corner(o.op("Add", y0, one), ly, h_max)
    ix0, hx = corner(x0, hx, w_max)
    ix1, lx = corner(o.op("Add", x0, one), lx, w_max)
    row0 = o.op("Mul", iy0, w)
    row1 = o.op("Mul", iy1, w)
    corners = [(row0, ix0, hy, hx), (row0, ix1, hy, lx), (row1, ix0, ly, hx), (row1, ix1, ly, lx)]
    indices = o.op("Concat", *[o.op("Add", r, c) for r, c, _, _ in corners], axis=1)
    weights = o.op("Concat", *[o.op("Mul", a, b) for _, _, a, b in corners], axis=1)
    # (N*og, 4K, Ho, Wo) -> (N*og, 4*K*Ho*Wo, 1)
    indices = o.op("Reshape", indices, o.i64([0, -1, 1]))
    weights = o.op("Reshape", weights, o.i64([0, -1, 1]))
    gathered = o.op("GatherND", pixels_last, indices, batch_dims=1)
    weighted = o.op("Mul", gathered, weights)
    # (N*og, 4, K*Ho*Wo, C/og) summed over the corners.
    channels = o.dims(o.op("Shape", pixels_last), 2, 3)
    weighted = o.op("Reshape", weighted, o.op("Concat", o.i64([0, 4, -1]), channels, axis=0))
    summed = o.reduce_sum(weighted, 1)
    channels_first = o.op("Transpose", summed, perm=[0, 2, 1])
    # (N*og, C/og, K*Ho*Wo) -> (N, C*K, Ho, Wo)
    cols = o.op(
        "Reshape",
        channels_first,
        o.op("Concat", batch, o.i64([-1]), out_hw, axis=0),
    )
    return _columns_to_output(o, spec, cols, weight, bias, out_hw)


def build_deform_conv(
    em: Emitter[V],
    spec: DeformConvSpec,
    x: V,
    weight: V,
    offset: V,
    mask: V | None = None,
    bias: V | None = None,
    *,
    opset: int,
    variant: str | None = None,
) -> V:
    """Emit DeformConv for *opset*, choosing the variant (``"gridsample"``/``"gathernd"``).

    *variant* None picks GridSample at opset >= 16 and GatherND below.
    """
    if resolve_variant(variant, opset) == "gridsample":
        return deform_conv_gridsample_opset16(em, spec, x, weight, offset, mask, bias, opset=opset)
    return deform_conv_gathernd_opset12(em, spec, x, weight, offset, mask, bias, opset=opset)
