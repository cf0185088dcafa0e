"""The one graph builder: DeformConv as standard ONNX operators.

This module owns the decomposition itself. It knows nothing about files, torch or
onnxruntime: each builder takes an :class:`Emitter` (something that can append one ONNX
node or one constant and hand back a value) plus a :class:`DeformConvSpec`, and returns the
output value. Three emitters drive it: plain ``NodeProto`` lists (:mod:`.lower`), the
TorchScript exporter's graph context (:mod:`.torchscript`) and onnxscript's tracer inside
the dynamo exporter (:mod:`.dynamo`).

One entry point, :func:`build_deform_conv`, with two sampling variants:

* ``"gridsample"`` (opset >= 16, the fast path). Every kernel tap is
  one bilinear ``GridSample`` lookup (``padding_mode="zeros"``, ``align_corners=0``), which
  is exactly torchvision's border rule. The taps are stacked along the sampled height and
  the offset groups are folded into the batch, so one ``GridSample`` produces the columns
  already in the ``(N, C*K, Ho, Wo)`` layout that a grouped 1x1 ``Conv`` consumes: no
  Transpose touches anything larger than the offsets.
* ``"gathernd"`` (opsets 12-15, no GridSample there). Corner indices
  are ``Clip``-ped into the image and corners outside it get weight zero; the four corners
  come from one ``GatherND`` and are weighted (bilinear weight times mask folded together
  first) before they meet the channels.

Shapes known at export time (:attr:`DeformConvSpec.input_shape`) are folded: the sampling
grid's base, the normalisation and every reshape target become constants, computed in float64
and rounded once. Dimensions that can vary (batch, height, width) come from ``Shape`` ops at
run time through the same formulas.
"""

from __future__ import annotations

from collections.abc import Sequence
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
#: Largest GEMM inner size C/group*kh*kw for which ``"auto"`` picks MatMul.
MATMUL_MAX_INNER = 576

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

    ``pads`` is ``(top, left, bottom, right)``; the leading pads move the sampling grid and
    all four set the output size (computed from the input's height and width).
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
    #: The input's (N, C, H, W) as far as it is known at export time (None: dynamic). Known
    #: dimensions are folded into constants; unknown ones are read with ``Shape`` at run time.
    input_shape: tuple[int | None, int | None, int | None, int | None] | None = None

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
        if self.input_shape is not None and (
            len(self.input_shape) != 4
            or not all(
                d is None or (isinstance(d, int | np.integer) and d >= 1) for d in self.input_shape
            )
        ):
            raise ValueError(
                "DeformConv input_shape must be 4 positive integers or None, "
                f"got {self.input_shape!r}"
            )
        if np.dtype(self.dtype) not in _FLOAT_DTYPES:
            raise ValueError(
                f"DeformConv input dtype must be float16, float32 or float64, got {self.dtype}"
            )

    @classmethod
    def from_torchvision(
        cls,
        kernel_shape: tuple[int, int],
        scalars: Sequence[Any],
        *,
        has_bias: bool,
        dtype: np.dtype[Any],
        columns: str,
        offset_hw: tuple[int | None, int | None] | None,
        input_shape: tuple[int | None, ...] | None,
    ) -> DeformConvSpec:
        """The spec of one ``torchvision::deform_conv2d`` call.

        Both torch front ends (TorchScript symbolic, onnxscript translation) receive
        ``(input, weight, offset, mask, bias, *scalars)``, the nine *scalars* being
        ``(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, offset_groups,
        use_mask)``; this is the one place that maps them. torchvision pads
        symmetrically. *columns* ``"auto"`` is resolved from *offset_hw*.
        """
        stride_h, stride_w, pad_h, pad_w = scalars[:4]
        dilation_h, dilation_w, groups, offset_groups, use_mask = scalars[4:]
        shape = None
        if input_shape is not None and len(input_shape) == 4:
            shape = tuple(d if isinstance(d, int) and d >= 1 else None for d in input_shape)
        channels = None if shape is None else shape[1]
        inner = (
            None
            if channels is None
            else channels // max(int(groups), 1) * int(kernel_shape[0]) * int(kernel_shape[1])
        )
        return cls(
            kernel_shape=(int(kernel_shape[0]), int(kernel_shape[1])),
            strides=(int(stride_h), int(stride_w)),
            pads=(int(pad_h), int(pad_w), int(pad_h), int(pad_w)),
            dilations=(int(dilation_h), int(dilation_w)),
            group=int(groups),
            offset_group=int(offset_groups),
            has_mask=bool(use_mask),
            has_bias=has_bias,
            dtype=np.dtype(dtype),
            columns=columns_for_output_size(columns, offset_hw, inner),
            input_shape=shape,  # type: ignore[arg-type]
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


def columns_for_output_size(
    columns: str, out_hw: tuple[int | None, int | None] | None, inner: int | None = None
) -> str:
    """Resolve ``columns="auto"`` from what is known at export time.

    *out_hw* is the static output size (if known) and *inner* the GEMM's inner size
    ``C/group * kh * kw`` (if known). Measured on this project's CPU (2 threads, per-round
    ratios, S = 64 channels at 64x64, M = 128 channels at 48x48): onnxruntime and OpenVINO run
    the MatMul form faster for small outputs with a short inner size (S: 1.27x vs 1.38x native
    in onnxruntime, and ~0.75x of Conv's time in OpenVINO), but the grouped 1x1 Conv faster once
    the inner size doubles (M: Conv 1.14-1.36x vs MatMul 1.24-1.51x native in onnxruntime, and
    0.73-0.86x of MatMul's time in OpenVINO), and OpenVINO's MatMul also drops from ~65 to
    ~27 GFLOP/s once Ho*Wo reaches ~9000. So "auto" is MatMul when Ho*Wo is known and at most
    :data:`MATMUL_MAX_PIXELS` and the inner size is known and at most
    :data:`MATMUL_MAX_INNER`; Conv otherwise (dynamic sizes included).
    """
    if columns != "auto":
        if columns not in COLUMN_OPS:
            raise ValueError(f"columns must be 'auto', 'conv' or 'matmul', got {columns!r}")
        return columns
    if out_hw is None or out_hw[0] is None or out_hw[1] is None:
        return "conv"
    if inner is None or inner > MATMUL_MAX_INNER:
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


#: A value that is either known at export time (a numpy array, folded into the graph as a
#: constant only where an operator needs it) or computed by the graph at run time.
Maybe = Any


class _Ops(Generic[V]):
    """Small helpers over an emitter that keep the builders readable and opset-correct.

    The arithmetic helpers (:meth:`add`, :meth:`mul`, :meth:`reshape`, ...) fold: when every
    operand is a numpy array they compute in numpy (float64 for the grid, so each constant is
    rounded once) and emit nothing; otherwise they emit the operator. That is how a graph
    exported with static shapes loses its Shape/Range/Concat arithmetic while the dynamic
    graph keeps the same formulas.
    """

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

    def value(self, x: Maybe) -> V:
        """*x* as a graph value (a numpy array becomes a constant of the graph's dtype)."""
        if isinstance(x, np.ndarray):
            if x.dtype.kind == "f":
                return self.fconst(x)
            return self.em.const(x.astype(np.int64))
        return x

    def _fold(self, op_type: str, fn: Any, a: Maybe, b: Maybe) -> Maybe:
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return np.asarray(fn(a, b))
        return self.op(op_type, self.value(a), self.value(b))

    def add(self, a: Maybe, b: Maybe) -> Maybe:
        return self._fold("Add", np.add, a, b)

    def sub(self, a: Maybe, b: Maybe) -> Maybe:
        return self._fold("Sub", np.subtract, a, b)

    def mul(self, a: Maybe, b: Maybe) -> Maybe:
        return self._fold("Mul", np.multiply, a, b)

    def int_div(self, a: Maybe, b: Maybe) -> Maybe:
        return self._fold("Div", np.floor_divide, a, b)

    def div(self, a: Maybe, b: Maybe) -> Maybe:
        return self._fold("Div", np.divide, a, b)

    def gather(self, x: Maybe, indices: list[int]) -> Maybe:
        """``x[indices]`` of a 1-D tensor."""
        if isinstance(x, np.ndarray):
            return x[indices]
        return self.op("Gather", x, self.i64(indices), axis=0)

    def reshape(self, x: Maybe, shape: Maybe) -> Maybe:
        if isinstance(x, np.ndarray) and isinstance(shape, np.ndarray):
            return x.reshape([int(d) for d in shape])
        return self.op("Reshape", self.value(x), self.value(shape))

    def concat(self, *parts: Maybe) -> Maybe:
        """1-D int64 concatenation (shapes)."""
        if all(isinstance(p, np.ndarray) for p in parts):
            return np.concatenate([np.asarray(p, dtype=np.int64).reshape(-1) for p in parts])
        return self.op("Concat", *[self.value(p) for p in parts], axis=0)

    def take(self, x: Maybe, start: int, end: int) -> Maybe:
        """``x[start:end]`` of a 1-D int64 tensor."""
        if isinstance(x, np.ndarray):
            return x[start:end]
        return self.op("Slice", x, self.i64([start]), self.i64([end]), self.i64([0]))

    def to_float(self, x: Maybe) -> Maybe:
        if isinstance(x, np.ndarray):
            return x.astype(np.float64)
        return self.op("Cast", x, to=_NP_TO_ONNX[self.dtype])

    def arange(self, n: Maybe) -> Maybe:
        """``[0, n)`` as floats (n a 1-element int64 tensor)."""
        if isinstance(n, np.ndarray):
            return np.arange(int(n.reshape(-1)[0]), dtype=np.float64)
        scalar = self.op("Gather", n, self.i64(0), axis=0)
        return self.to_float(self.op("Range", self.i64(0), scalar, self.i64(1)))

    def area(self, hw: Maybe) -> Maybe:
        """``[h * w]`` of a 2-element int64 tensor (Mul, not ReduceProd: onnx's version
        converter writes an invalid ReduceProd when bringing opset 18 down)."""
        return self.mul(self.take(hw, 0, 1), self.take(hw, 1, 2))

    def reduce_sum(self, x: V, axis: int) -> V:
        if self.opset >= 13:
            return self.op("ReduceSum", x, self.i64([axis]), keepdims=0)
        return self.op("ReduceSum", x, axes=[axis], keepdims=0)


class _Shape(Generic[V]):
    """The shape of a 4-D input: static dimensions as numpy, the rest from one ``Shape`` op."""

    def __init__(self, o: _Ops[V], x: V, static: tuple[int | None, ...] | None) -> None:
        self.o = o
        self.x = x
        self.static = tuple(static) if static is not None and len(static) == 4 else (None,) * 4
        self._shape: V | None = None

    def dims(self, start: int, end: int) -> Maybe:
        """``shape[start:end]``: a numpy int64 array when all those dims are static."""
        known = self.static[start:end]
        if all(d is not None for d in known):
            return np.array(known, dtype=np.int64)
        if self._shape is None:
            self._shape = self.o.op("Shape", self.x)
        return self.o.take(self._shape, start, end)

    def known(self, axis: int) -> int | None:
        return self.static[axis]


def _output_size(o: _Ops[V], spec: DeformConvSpec, hw: Maybe) -> Maybe:
    """``[Ho, Wo]`` (1-D int64) from the input's height and width, as ONNX Conv defines it.

    Computed from X rather than read off the offset tensor: OpenVINO 2026.4 mis-infers the
    shape of a strided ``Slice`` over dynamic dimensions (``offset[:, :, ::2, ::2]`` reports
    the unsliced size), which broke models that take the offset from such a slice.
    """
    kh, kw = spec.kernel_shape
    extra = np.array(
        [
            spec.pads[0] + spec.pads[2] - spec.dilations[0] * (kh - 1) - 1,
            spec.pads[1] + spec.pads[3] - spec.dilations[1] * (kw - 1) - 1,
        ],
        dtype=np.int64,
    )
    span = o.add(hw, extra)
    return o.add(o.int_div(span, np.array(spec.strides, dtype=np.int64)), np.ones(2, np.int64))


def _base_grid(o: _Ops[V], spec: DeformConvSpec, out_hw: Maybe, axis: int, shift: float) -> Maybe:
    """Per tap and output row (axis 0) or column (axis 1): ``o*stride + tap - pad + shift``.

    Shape (K, Ho) or (K, Wo); numpy when the output size is static.
    """
    taps = spec.taps
    ky, kx = spec.tap_positions()
    tap = (ky if axis == 0 else kx).astype(np.float64).reshape(taps, 1) + shift
    positions = o.mul(o.arange(o.take(out_hw, axis, axis + 1)), np.array(spec.strides[axis], float))
    return o.add(o.reshape(positions, np.array([1, -1], dtype=np.int64)), tap)


def _sampling_coordinates(
    o: _Ops[V], spec: DeformConvSpec, offset: V, out_hw: Maybe
) -> tuple[V, V]:
    """Sampling positions (y, x) in input pixels, each (N*og, K, 1, Ho, Wo) (GatherND variant)."""
    taps = spec.taps
    # (N, og*K*2, Ho, Wo) -> (N*og, K, 2, Ho, Wo): (dy, dx) pairs per tap, per offset group.
    off5 = o.reshape(offset, o.concat(np.array([-1, taps, 2], np.int64), out_hw))
    # Slice, not Gather: OpenVINO 2026.4's Gather dies of SIGFPE on a static empty batch.
    dy = o.op("Slice", o.value(off5), o.i64([0]), o.i64([1]), o.i64([2]))
    dx = o.op("Slice", o.value(off5), o.i64([1]), o.i64([2]), o.i64([2]))
    # base_y[k, 0, ho, 0] = ho*sh + i*dh - pad_top ; base_x[k, 0, 0, wo] = wo*sw + j*dw - pad_left
    base_y = o.reshape(_base_grid(o, spec, out_hw, 0, 0.0), np.array([taps, 1, -1, 1], np.int64))
    base_x = o.reshape(_base_grid(o, spec, out_hw, 1, 0.0), np.array([taps, 1, 1, -1], np.int64))
    return o.op("Add", dy, o.value(base_y)), o.op("Add", dx, o.value(base_x))


def _columns_to_output(
    o: _Ops[V],
    spec: DeformConvSpec,
    cols: V,
    weight: V,
    bias: V | None,
    out_hw: Maybe,
    channels: int | None,
) -> V:
    """Columns (N, C*K, Ho, Wo) times the weight: a grouped 1x1 Conv or a (batched) MatMul."""
    if spec.columns == "conv":
        w2 = o.op("Reshape", weight, o.i64([0, -1, 1, 1]))
        inputs = [cols, w2] if bias is None else [cols, w2, bias]
        return o.op("Conv", *inputs, group=spec.group, kernel_shape=[1, 1])
    g = spec.group
    w2 = o.op("Reshape", weight, o.i64([0, -1]))  # (Co, C/g*K)
    # Every reshape of a batched tensor puts -1 on the batch and gives the other sizes, so
    # that a batch of 0 is well defined (with a 0 batch copied, -1 has no unique value).
    pixels = o.area(out_hw)
    if g == 1:
        cols3 = o.reshape(cols, o.concat(np.array([-1, 0], np.int64), pixels))
        out = o.op("MatMul", w2, o.value(cols3))  # (N, Co, Ho*Wo)
    else:
        per_group: Maybe
        if channels is not None:
            per_group = np.array([channels // g * spec.taps], dtype=np.int64)
        else:
            per_group = o.take(o.op("Shape", w2), 1, 2)
        w3 = o.reshape(w2, o.concat(np.array([g, -1], np.int64), per_group))
        cols4 = o.reshape(cols, o.concat(np.array([-1, g], np.int64), per_group, pixels))
        out = o.op("MatMul", w3, o.value(cols4))  # (N, g, Co/g, Ho*Wo)
    out_channels = o.take(o.op("Shape", weight), 0, 1)
    out = o.reshape(out, o.concat(np.array([-1], np.int64), out_channels, out_hw))
    if bias is not None:
        out = o.op("Add", out, o.op("Reshape", bias, o.i64([-1, 1, 1])))
    return out


def _fold_offset_groups(o: _Ops[V], spec: DeformConvSpec, x: V, shape: _Shape[V]) -> V:
    """(N, C, H, W) -> (N*og, C/og, H, W)."""
    og = spec.offset_group
    n = shape.known(0)
    if n is not None:
        target: Maybe = np.array([n * og, -1, 0, 0], dtype=np.int64)
    else:
        # -1 on the batch and every other size given: a batch of 0 stays well defined.
        target = o.concat(
            np.array([-1]), o.int_div(shape.dims(1, 2), np.array([og])), np.array([0, 0])
        )
    return o.reshape(x, target)


def _unfold_columns(o: _Ops[V], spec: DeformConvSpec, x: V, shape: _Shape[V], out_hw: Maybe) -> V:
    """(N*og, C/og, K*Ho, Wo) or (N*og, C/og, K*Ho*Wo) -> (N, C*K, Ho, Wo)."""
    n = shape.known(0)
    lead: Maybe
    if n is not None:
        lead = np.array([n, -1], dtype=np.int64)
    else:  # -1 on the batch only (see _fold_offset_groups)
        lead = o.concat(np.array([-1]), o.mul(shape.dims(1, 2), np.array([spec.taps])))
    return o.reshape(x, o.concat(lead, out_hw))


@dataclass(frozen=True)
class _Layer(Generic[V]):
    """What both samplers share: the op helpers, the spec, X's shape, ``[H, W]``, ``[Ho, Wo]``."""

    o: _Ops[V]
    spec: DeformConvSpec
    shape: _Shape[V]
    hw: Maybe
    out_hw: Maybe


def _sample_gridsample(layer: _Layer[V], x: V, offset: V, mask: V | None) -> V:
    """The masked columns from one ``GridSample`` (opset >= 16): (N*og, C/og, K*Ho, Wo)."""
    o, spec, shape, hw, out_hw = layer.o, layer.spec, layer.shape, layer.hw, layer.out_hw
    taps = spec.taps
    # Pixel p -> GridSample's normalised coordinate with align_corners=0:
    # g = (p + 0.5) * (2/size) - 1 = offset * (2/size) + base, where
    # base = (tap position + 0.5) * (2/size) - 1 is one constant (rounded once from float64)
    # when the shapes are static. The offsets become (x, y) pairs in one Gather and meet the
    # scale and the base in one Mul and one Add while the pair is still its own axis, so both
    # broadcasts run over whole Ho*Wo planes (with the pair last, onnxruntime's Mul took
    # ~1 ms on S); one Transpose then moves the pair last, as GridSample wants it.
    scale = o.div(np.array([2.0, 2.0]), o.to_float(hw))  # (2/H, 2/W)
    one = np.ones(1)
    gy = o.sub(o.mul(_base_grid(o, spec, out_hw, 0, 0.5), o.gather(scale, [0])), one)  # (K, Ho)
    gx = o.sub(o.mul(_base_grid(o, spec, out_hw, 1, 0.5), o.gather(scale, [1])), one)  # (K, Wo)
    pick_x = np.array([1.0, 0.0]).reshape(1, 1, 2, 1, 1)
    base = o.add(
        o.mul(o.reshape(gx, np.array([1, taps, 1, 1, -1], np.int64)), pick_x),
        o.mul(o.reshape(gy, np.array([1, taps, 1, -1, 1], np.int64)), 1.0 - pick_x),
    )  # (1, K, 2, Ho, Wo): (x, y) on axis 2
    scale_xy = o.reshape(o.gather(scale, [1, 0]), np.array([1, 1, 2, 1, 1], np.int64))

    off5 = o.reshape(offset, o.concat(np.array([-1, taps, 2], np.int64), out_hw))
    # (dx, dy) pairs: a reversing Slice (OpenVINO 2026.4's Gather dies of SIGFPE on a static
    # empty batch; Slice does not).
    dxy = o.op("Slice", o.value(off5), o.i64([-1]), o.i64([-(2**62)]), o.i64([2]), o.i64([-1]))
    grid = o.op("Add", o.op("Mul", dxy, o.value(scale_xy)), o.value(base))
    grid = o.op("Transpose", grid, perm=[0, 1, 3, 4, 2])  # (N*og, K, Ho, Wo, 2)
    # Taps stacked along the sampled height: (N*og, K*Ho, Wo, 2).
    k_out_h = o.mul(o.take(out_hw, 0, 1), np.array([taps], np.int64))
    grid = o.reshape(
        grid, o.concat(np.array([-1], np.int64), k_out_h, o.take(out_hw, 1, 2), np.array([2]))
    )

    folded = _fold_offset_groups(o, spec, x, shape)
    mode = "bilinear" if o.opset < 20 else "linear"
    sampled = o.op(
        "GridSample", folded, o.value(grid), mode=mode, padding_mode="zeros", align_corners=0
    )
    if mask is None:
        return sampled
    mask4 = o.reshape(mask, o.concat(np.array([-1, 1], np.int64), k_out_h, o.take(out_hw, 1, 2)))
    return o.op("Mul", sampled, o.value(mask4))


def _sample_gathernd(layer: _Layer[V], x: V, offset: V, mask: V | None) -> V:
    """The masked columns from ``Clip``-ped indices and one ``GatherND`` (opset >= 12).

    Shape (N*og, C/og, K*Ho*Wo).
    """
    o, spec, shape, hw, out_hw = layer.o, layer.spec, layer.shape, layer.hw, layer.out_hw
    taps = spec.taps
    y, xs = _sampling_coordinates(o, spec, offset, out_hw)

    folded = _fold_offset_groups(o, spec, x, shape)
    h = o.reshape(o.gather(hw, [0]), np.array([], np.int64))
    w = o.reshape(o.gather(hw, [1]), np.array([], np.int64))
    flat = o.reshape(folded, o.concat(np.array([-1, 0], np.int64), o.area(hw)))
    pixels_last = o.op("Transpose", o.value(flat), perm=[0, 2, 1])
    # pixels_last: (N*og, H*W, C/og)

    y0 = o.op("Floor", y)
    x0 = o.op("Floor", xs)
    ly = o.op("Sub", y, y0)
    lx = o.op("Sub", xs, x0)
    one = o.fconst(1.0)
    hy = o.op("Sub", one, ly)
    hx = o.op("Sub", one, lx)
    if mask is not None:
        mask4 = o.reshape(mask, o.concat(np.array([-1, taps, 1], np.int64), out_hw))
        hy = o.op("Mul", hy, o.value(mask4))
        ly = o.op("Mul", ly, o.value(mask4))

    zero_f = o.fconst(0.0)
    h_max = o.value(o.to_float(o.sub(h, np.array(1, np.int64))))
    w_max = o.value(o.to_float(o.sub(w, np.array(1, np.int64))))
    w_v = o.value(w)

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
    row0 = o.op("Mul", iy0, w_v)
    row1 = o.op("Mul", iy1, w_v)
    corners = [(row0, ix0, hy, hx), (row0, ix1, hy, lx), (row1, ix0, ly, hx), (row1, ix1, ly, lx)]
    indices = o.op("Concat", *[o.op("Add", r, c) for r, c, _, _ in corners], axis=1)
    weights = o.op("Concat", *[o.op("Mul", a, b) for _, _, a, b in corners], axis=1)
    # (N*og, 4K, 1, Ho, Wo) -> (N*og, 4*K*Ho*Wo, 1); -1 on the batch (see _columns_to_output)
    samples = o.mul(o.area(out_hw), np.array([4 * taps], np.int64))
    flat_target = o.value(o.concat(np.array([-1], np.int64), samples, np.array([1])))
    indices = o.op("Reshape", indices, flat_target)
    weights = o.op("Reshape", weights, flat_target)
    gathered = o.op("GatherND", pixels_last, indices, batch_dims=1)
    weighted = o.op("Mul", gathered, weights)
    # (N*og, 4, K*Ho*Wo, C/og) summed over the corners.
    c = shape.known(1)
    channels: Maybe
    if c is not None:
        channels = np.array([c // spec.offset_group], np.int64)
    else:
        channels = o.take(o.op("Shape", pixels_last), 2, 3)
    per_corner = o.mul(o.area(out_hw), np.array([taps], np.int64))
    weighted = o.reshape(weighted, o.concat(np.array([-1, 4], np.int64), per_corner, channels))
    summed = o.reduce_sum(o.value(weighted), 1)
    return o.op("Transpose", summed, perm=[0, 2, 1])


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
    """Emit DeformConv for *opset* through *em*; return the output value.

    *variant* ``"gridsample"`` (opset >= 16) or ``"gathernd"`` (opset >= 12) names how the
    columns are sampled; None picks GridSample at opset >= 16 and GatherND below. Both
    variants share everything else: the output size, the offset-group folding, and the product
    of the columns with the weight (``spec.columns``).
    """
    sample = (
        _sample_gridsample if resolve_variant(variant, opset) == "gridsample" else _sample_gathernd
    )
    o = _Ops(em, opset, spec.dtype)
    shape = _Shape(o, x, spec.input_shape)
    hw = shape.dims(2, 4)
    out_hw = _output_size(o, spec, hw)
    columns = sample(_Layer(o, spec, shape, hw, out_hw), x, offset, mask)
    cols = _unfold_columns(o, spec, columns, shape, out_hw)  # (N, C*K, Ho, Wo)
    return _columns_to_output(o, spec, cols, weight, bias, out_hw, shape.known(1))
