"""ONNX DeformConv on OpenVINO through our extension, against torchvision.ops.deform_conv2d.

Table-driven: one helper builds a single-node ONNX model with onnx.helper, runs it on
OpenVINO (f32) and compares with torchvision; a second path exports a torchvision
DeformConv2d module with torch's dynamo exporter and runs it through the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from openvino_runner import Runner, deform_conv_extension
from openvino_runner.cli import main

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("openvino_available", "torch_modules")]
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Case:
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    group: int = 1
    offset_group: int = 1
    mask: bool = True
    bias: bool = True
    kernel: tuple[int, int] = (3, 3)
    size: tuple[int, int] = (9, 8)
    channels: tuple[int, int] = (4, 6)
    batch: int = 2
    opset: int = 19


CASES = {
    "plain": Case(),
    "stride2": Case(stride=(2, 2)),
    "stride_hw": Case(stride=(2, 1)),
    "pad1": Case(pad=(1, 1)),
    "pad_hw": Case(pad=(2, 0)),
    "dilation2": Case(dilation=(2, 2), pad=(2, 2)),
    "groups2": Case(group=2),
    "offset_groups2": Case(offset_group=2),
    "groups_and_offset_groups": Case(group=2, offset_group=2, stride=(2, 2), pad=(1, 1)),
    "no_mask": Case(mask=False),
    "no_bias": Case(bias=False),
    "no_mask_no_bias": Case(mask=False, bias=False),
    "kernel_3x2": Case(kernel=(3, 2)),
    "kernel_1x1": Case(kernel=(1, 1)),
    "opset22": Case(opset=22, offset_group=2, pad=(1, 1)),
}


def build(case: Case, rng: np.random.Generator) -> tuple[bytes, dict[str, np.ndarray], np.ndarray]:
    """A DeformConv model, its inputs, and torchvision's output for them."""
    import torch
    import torchvision
    from onnx import TensorProto, helper

    cin, cout = case.channels
    kh, kw = case.kernel
    h, w = case.size
    ho = (h + 2 * case.pad[0] - case.dilation[0] * (kh - 1) - 1) // case.stride[0] + 1
    wo = (w + 2 * case.pad[1] - case.dilation[1] * (kw - 1) - 1) // case.stride[1] + 1
    k = kh * kw
    feeds = {
        "X": rng.standard_normal((case.batch, cin, h, w)).astype(np.float32),
        "W": rng.standard_normal((cout, cin // case.group, kh, kw)).astype(np.float32),
        # offsets of several pixels, so that many samples land outside the image
        "offset": (rng.standard_normal((case.batch, case.offset_group * k * 2, ho, wo)) * 3).astype(
            np.float32
        ),
    }
    names = ["X", "W", "offset"]
    if case.bias:
        feeds["B"] = rng.standard_normal(cout).astype(np.float32)
        names.append("B")
    elif case.mask:
        names.append("")
    if case.mask:
        feeds["mask"] = rng.random((case.batch, case.offset_group * k, ho, wo)).astype(np.float32)
        names.append("mask")
    node = helper.make_node(
        "DeformConv",
        names,
        ["Y"],
        name="deform0",
        kernel_shape=list(case.kernel),
        strides=list(case.stride),
        pads=[*case.pad, *case.pad],
        dilations=list(case.dilation),
        group=case.group,
        offset_group=case.offset_group,
    )
    graph = helper.make_graph(
        [node],
        "deform",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
            for n, v in feeds.items()
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    t = {n: torch.from_numpy(v) for n, v in feeds.items()}
    expected = torchvision.ops.deform_conv2d(
        t["X"],
        t["offset"],
        t["W"],
        t.get("B"),
        stride=case.stride,
        padding=case.pad,
        dilation=case.dilation,
        mask=t.get("mask"),
    ).numpy()
    return model.SerializeToString(), feeds, expected


@pytest.mark.parametrize("name", list(CASES))
def test_deform_conv_matches_torchvision(
    name: str, tmp_path: Path, rng: np.random.Generator
) -> None:
    model, feeds, expected = build(CASES[name], rng)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    runner = Runner(path, precision="f32")
    got = runner.infer(feeds)["Y"]
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= TOLERANCE
    assert runner.info().custom_conversions == {"DeformConv -> DeformableConvolution": 1}
    assert runner.info().op_counts["DeformableConvolution"] == 1


def test_public_extension_on_a_plain_core(rng: np.random.Generator) -> None:
    import openvino as ov

    model, feeds, expected = build(Case(offset_group=2, pad=(1, 1)), rng)
    core = ov.Core()
    with pytest.raises(RuntimeError, match="DeformConv"):
        core.read_model(model, b"")
    core.add_extension(deform_conv_extension())
    compiled = core.compile_model(
        core.read_model(model, b""), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    got = compiled(feeds)[0]
    assert np.abs(got - expected).max() <= TOLERANCE


def test_three_d_deform_conv_is_refused_clearly(tmp_path: Path) -> None:
    from onnx import TensorProto, helper
    from openvino_runner import ConversionError

    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 4, 4, 4]),
        helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 2, 1, 1, 1]),
        helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 3, 4, 4, 4]),
    ]
    node = helper.make_node("DeformConv", ["X", "W", "offset"], ["Y"], kernel_shape=[1, 1, 1])
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    )
    path = tmp_path / "d3.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    )
    with pytest.raises(ConversionError, match=r"DeformConv \(opset 19\).*2-D only"):
        Runner(path).info()


def test_dynamo_exported_deform_conv_via_cli(
    dynamo_deform_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnx

    ops = {n.op_type for n in onnx.load(str(dynamo_deform_model)).graph.node}
    assert "DeformConv" in ops  # the exporter's native node, not a decomposition
    code = main(["info", str(dynamo_deform_model)])
    out = capsys.readouterr().out
    assert code == 0 and "DeformConv -> DeformableConvolution" in out
    code = main(["compare", str(dynamo_deform_model), "--atol", "1e-5", "--rtol", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS y" in out and "all outputs match" in out
    code = main(["bench", str(dynamo_deform_model), "--iterations", "5", "--no-progress"])
    assert code == 0 and "DeformConv" not in capsys.readouterr().err
