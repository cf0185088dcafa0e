"""Shared cases and helpers for the deform-conv2d-onnx-exporter tests: one configuration
table, one reference (torchvision), two runtimes.

Every exported model is compared with ``torchvision.ops.deform_conv2d`` in float32 at the
size it was exported at and at a second size (batch, height and width all changed).
"""

from __future__ import annotations

import functools
import io
import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from components import require_module
from onnx import helper, numpy_helper

#: fp32 bound from the issue, for outputs of magnitude ~1-10.
ATOL = 1e-5
RUNTIMES = ["onnxruntime", "openvino"]


@dataclass(frozen=True)
class Case:
    """One DeformConv configuration (torchvision argument names)."""

    name: str
    n: int
    c: int
    co: int
    h: int
    w: int
    kernel: tuple[int, int] = (3, 3)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    offset_groups: int = 1
    mask: bool = False
    bias: bool = False

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        def size(length: int, axis: int) -> int:
            span = self.dilation[axis] * (self.kernel[axis] - 1) + 1
            return (length + 2 * self.padding[axis] - span) // self.stride[axis] + 1

        return size(h, 0), size(w, 1)

    def other_size(self) -> tuple[int, int, int]:
        """A second (batch, height, width) to run an exported model at."""
        return (2 if self.n != 2 else 3), self.h + 3, self.w + 2

    def parameters(self) -> tuple[np.ndarray, np.ndarray | None]:
        rng = np.random.default_rng(1234)
        fan_in = self.c // self.groups * self.taps
        weight = rng.uniform(-2, 2, (self.co, self.c // self.groups, *self.kernel)) / math.sqrt(
            fan_in
        )
        bias = rng.uniform(-1, 1, self.co) if self.bias else None
        return weight.astype(np.float32), None if bias is None else bias.astype(np.float32)

    def inputs(
        self, n: int | None = None, h: int | None = None, w: int | None = None, seed: int = 0
    ) -> dict[str, np.ndarray]:
        """Inputs x, offset (large: many samples fall outside the image) and mask."""
        n, h, w = n or self.n, h or self.h, w or self.w
        ho, wo = self.out_hw(h, w)
        rng = np.random.default_rng(seed)
        feeds = {
            "x": rng.standard_normal((n, self.c, h, w)).astype(np.float32),
            "offset": (
                rng.standard_normal((n, 2 * self.offset_groups * self.taps, ho, wo)) * 3
            ).astype(np.float32),
        }
        if self.mask:
            feeds["mask"] = rng.uniform(0, 1, (n, self.offset_groups * self.taps, ho, wo)).astype(
                np.float32
            )
        return feeds

    def reference(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        import torch
        import torchvision

        weight, bias = self.parameters()
        out = torchvision.ops.deform_conv2d(
            torch.from_numpy(feeds["x"]),
            torch.from_numpy(feeds["offset"]),
            torch.from_numpy(weight),
            None if bias is None else torch.from_numpy(bias),
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            mask=torch.from_numpy(feeds["mask"]) if self.mask else None,
        )
        return out.numpy()

    def input_names(self) -> list[str]:
        return ["x", "offset", "mask"] if self.mask else ["x", "offset"]

    # -- model builders -------------------------------------------------------------------

    def onnx_deform_conv(self, opset: int = 19) -> onnx.ModelProto:
        """A model with one native ONNX DeformConv node and dynamic N/H/W."""
        weight, bias = self.parameters()
        inits = [numpy_helper.from_array(weight, "W")]
        names = ["x", "W", "offset", "", ""]
        if bias is not None:
            inits.append(numpy_helper.from_array(bias, "B"))
            names[3] = "B"
        inputs = [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", self.c, "H", "W"]),
            helper.make_tensor_value_info(
                "offset",
                onnx.TensorProto.FLOAT,
                ["N", 2 * self.offset_groups * self.taps, "Ho", "Wo"],
            ),
        ]
        if self.mask:
            names[4] = "mask"
            inputs.append(
                helper.make_tensor_value_info(
                    "mask",
                    onnx.TensorProto.FLOAT,
                    ["N", self.offset_groups * self.taps, "Ho", "Wo"],
                )
            )
        while names[-1] == "":
            names.pop()
        node = helper.make_node(
            "DeformConv",
            names,
            ["y"],
            name="dcn",
            kernel_shape=list(self.kernel),
            strides=list(self.stride),
            pads=[*self.padding, *self.padding],
            dilations=list(self.dilation),
            group=self.groups,
            offset_group=self.offset_groups,
        )
        output = helper.make_tensor_value_info(
            "y", onnx.TensorProto.FLOAT, ["N", self.co, "Ho", "Wo"]
        )
        graph = helper.make_graph([node], "deform_conv", inputs, [output], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    def torch_module(self) -> Any:
        import torch
        import torchvision

        case = self
        weight, bias = self.parameters()

        class DeformConvModule(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.weight = torch.nn.Parameter(torch.from_numpy(weight))
                self.bias = None if bias is None else torch.nn.Parameter(torch.from_numpy(bias))

            def forward(self, x: Any, offset: Any, mask: Any = None) -> Any:
                return torchvision.ops.deform_conv2d(
                    x,
                    offset,
                    self.weight,
                    self.bias,
                    stride=case.stride,
                    padding=case.padding,
                    dilation=case.dilation,
                    mask=mask,
                )

        return DeformConvModule().eval()

    def example_args(self) -> tuple[Any, ...]:
        import torch

        feeds = self.inputs()
        return tuple(torch.from_numpy(feeds[name]) for name in self.input_names())


# Every value of every parameter in the table appears at least once; H != W everywhere.
CASES = [
    Case("k3-s1-p1-mask-bias-n1", 1, 4, 6, 7, 10, padding=(1, 1), mask=True, bias=True),
    Case(
        "k1-s2-p0-g2-og2-bias-n3",
        3,
        4,
        4,
        8,
        5,
        kernel=(1, 1),
        stride=(2, 2),
        groups=2,
        offset_groups=2,
        bias=True,
    ),
    Case(
        "k3x5-s21-p12-d2-g4-og4-mask-n3",
        3,
        8,
        8,
        9,
        11,
        kernel=(3, 5),
        stride=(2, 1),
        padding=(1, 2),
        dilation=(2, 2),
        groups=4,
        offset_groups=4,
        mask=True,
    ),
    Case(
        "k3-s2-p2-d2-og4-mask-bias",
        1,
        4,
        3,
        9,
        6,
        stride=(2, 2),
        padding=(2, 2),
        dilation=(2, 2),
        offset_groups=4,
        mask=True,
        bias=True,
    ),
    Case("k3-s21-p0-g2", 1, 4, 2, 6, 9, stride=(2, 1), groups=2),
    Case(
        "k3x5-p2-og2-mask-bias-n3",
        3,
        4,
        5,
        7,
        8,
        kernel=(3, 5),
        padding=(2, 2),
        offset_groups=2,
        mask=True,
        bias=True,
    ),
]


def case_ids(cases: list[Case]) -> list[str]:
    return [c.name for c in cases]


# -- runtimes --------------------------------------------------------------------------------


@functools.cache
def _ort_session(model_bytes: bytes) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


@functools.cache
def _ov_compiled(model_bytes: bytes) -> Any:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(model_bytes, b""),
        "CPU",
        {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1},
    )
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) in ("<Type: 'float32'>", "f32")
    return compiled


def run_model(runtime: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Run *model* in *runtime* (onnxruntime, or OpenVINO with the f32 precision hint)."""
    data = model.SerializeToString()
    if runtime == "onnxruntime":
        session = _ort_session(data)
        names = [i.name for i in session.get_inputs()]
        return session.run(None, {name: feeds[name] for name in names})[0]
    require_module("openvino")
    compiled = _ov_compiled(data)
    # OpenVINO may give an input several names (an internal node's too): match the feed's.
    names = [next(n for n in sorted(i.get_names()) if n in feeds) for i in compiled.inputs]
    return np.asarray(compiled({name: feeds[name] for name in names})[compiled.output(0)])


def assert_matches_torchvision(
    case: Case, runtime: str, model: onnx.ModelProto, *, table: bool = True
) -> None:
    """Compare at the export size and at another batch/height/width.

    Table cases are also checked to produce outputs of magnitude ~1-10, the scale the
    error bound is stated for; drawn (property) cases may be smaller.
    """
    for size in [(None, None, None), case.other_size()]:
        feeds = case.inputs(*size, seed=7)
        want = case.reference(feeds)
        got = run_model(runtime, model, feeds)
        assert got.shape == want.shape
        if table:
            assert 0.5 < np.abs(want).max() < 20, "a table case should give outputs of ~1-10"
        error = float(np.abs(got - want).max())
        assert error <= ATOL, (
            f"{runtime}: max abs error {error:.3g} > {ATOL} at input size {feeds['x'].shape}"
        )


# -- exporters (cached: one export serves both runtimes) --------------------------------------


def _quiet() -> Any:
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.simplefilter("ignore")
    return context


@functools.cache
def torchscript_export(case: Case, opset: int) -> onnx.ModelProto:
    import torch
    from deform_conv2d_onnx_exporter import register_deform_conv2d_onnx_op

    register_deform_conv2d_onnx_op()
    names = case.input_names()
    buffer = io.BytesIO()
    context = _quiet()
    try:
        torch.onnx.export(
            case.torch_module(),
            case.example_args(),
            buffer,
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=["y"],
            dynamic_axes={name: {0: "n", 2: f"{name}_h", 3: f"{name}_w"} for name in names},
        )
    finally:
        context.__exit__(None, None, None)
    return onnx.load_from_string(buffer.getvalue())


@functools.cache
def dynamo_export(case: Case, opset: int, decompose: bool | None = True) -> onnx.ModelProto:
    import torch
    from deform_conv2d_onnx_exporter import export

    auto = torch.export.Dim.AUTO
    shapes = tuple({0: auto, 2: auto, 3: auto} for _ in case.input_names())
    context = _quiet()
    try:
        return export(
            case.torch_module(),
            case.example_args(),
            opset_version=opset,
            decompose=decompose,
            dynamic_shapes=shapes,
            input_names=case.input_names(),
            output_names=["y"],
        )
    finally:
        context.__exit__(None, None, None)


def check_valid(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    assert all(n.op_type != "DeformConv" for n in model.graph.node)
