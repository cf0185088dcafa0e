"""``lower`` rewrites the custom nodes mmdeploy writes for mmcv's layers.

The files are built from mmdeploy's documented node definitions: ``mmcv::MMCVDeformConv2d(
input, offset, weight)`` and ``mmcv::MMCVModulatedDeformConv2d(input, offset, mask, weight[,
bias])``, attributes ``stride``, ``padding``, ``dilation`` (2-int lists), ``groups``,
``deform_groups`` (its documentation table says ``deformable_groups``), plus ``bias`` and
``im2col_step`` on the first; opset 11, mmdeploy's default. mmcv's offset and mask layout is
torchvision's, so torchvision is the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from dcn_support import ATOL, CASES, Case, case_ids, run_model
from deform_conv2d_onnx_exporter import LoweringError, lower_deform_conv
from deform_conv2d_onnx_exporter.cli import main
from onnx import helper, numpy_helper


def mmdeploy_model(case: Case, groups_name: str = "deform_groups") -> onnx.ModelProto:
    """What mmdeploy writes for one mmcv layer of *case* (modulated when the case has a mask)."""
    weight, bias = case.parameters()
    inits = [numpy_helper.from_array(weight, "weight")]
    attrs = {
        "stride": list(case.stride),
        "padding": list(case.padding),
        "dilation": list(case.dilation),
        "groups": case.groups,
        groups_name: case.offset_groups,
    }
    og_taps = case.offset_groups * case.taps
    inputs = [
        helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["N", case.c, "H", "W"]),
        helper.make_tensor_value_info(
            "offset", onnx.TensorProto.FLOAT, ["N", 2 * og_taps, "h", "w"]
        ),
    ]
    if case.mask:
        names = ["input", "offset", "mask", "weight"]
        inputs.append(
            helper.make_tensor_value_info("mask", onnx.TensorProto.FLOAT, ["N", og_taps, "h", "w"])
        )
        if bias is not None:
            inits.append(numpy_helper.from_array(bias, "bias"))
            names.append("bias")
        node = helper.make_node(
            "MMCVModulatedDeformConv2d", names, ["output"], name="dcn", domain="mmcv", **attrs
        )
    else:
        assert bias is None, "mmcv's DeformConv2d has no bias"
        node = helper.make_node(
            "MMCVDeformConv2d",
            ["input", "offset", "weight"],
            ["output"],
            name="dcn",
            domain="mmcv",
            bias=0,
            im2col_step=32,
            **attrs,
        )
    relu = helper.make_node("Relu", ["output"], ["y"])  # an ordinary node after it, kept
    graph = helper.make_graph(
        [node, relu],
        "mmdeploy",
        inputs,
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", case.co, "h", "w"])],
        inits,
    )
    opsets = [helper.make_opsetid("", 11), helper.make_opsetid("mmcv", 1)]
    return helper.make_model(graph, opset_imports=opsets)


PLAIN = [c for c in CASES if not c.mask and not c.bias] + [
    Case(
        "mmcv-plain-g2-og2-s2",
        2,
        4,
        6,
        9,
        8,
        stride=(2, 2),
        padding=(1, 1),
        groups=2,
        offset_groups=2,
    )
]
MODULATED = [c for c in CASES if c.mask]


@pytest.mark.parametrize("case", PLAIN + MODULATED, ids=case_ids(PLAIN + MODULATED))
@pytest.mark.parametrize("opset", [None, 16])
def test_lowered_mmdeploy_file_matches_torchvision(
    case: Case, opset: int | None, runtime: str
) -> None:
    lowered = lower_deform_conv(mmdeploy_model(case), opset)
    onnx.checker.check_model(lowered, full_check=True)
    assert {n.domain for n in lowered.graph.node} == {""}
    assert [e.domain for e in lowered.opset_import] == [""]
    assert lowered.opset_import[0].version == (opset or 12)  # 11 has no decomposition
    feeds = {"input" if k == "x" else k: v for k, v in case.inputs(seed=5).items()}
    want = np.maximum(case.reference({"x": feeds["input"], **feeds}), 0)
    got = run_model(runtime, lowered, feeds)
    assert float(np.abs(got - want).max()) <= ATOL


def test_deformable_groups_spelling_is_read() -> None:
    case = MODULATED[1]  # offset_groups 4
    assert case.offset_groups > 1
    a = lower_deform_conv(mmdeploy_model(case, "deformable_groups"))
    b = lower_deform_conv(mmdeploy_model(case))
    assert a.graph.SerializeToString() == b.graph.SerializeToString()


def test_cli_lower_counts_mmdeploy_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "mmdeploy.onnx"
    onnx.save(mmdeploy_model(MODULATED[0]), source)
    assert main(["lower", str(source), "-o", str(tmp_path / "out.onnx")]) == 0
    assert "lowered 1 DeformConv node(s)" in capsys.readouterr().out
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)


def test_wrong_offset_and_mask_channels_raise_lowering_error() -> None:
    """onnxruntime's own rule, as a LoweringError with the counts (not an invalid model)."""
    case = MODULATED[0]  # og 1, 3x3 -> offset 18, mask 9
    model = case.onnx_deform_conv(19)
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 16
    with pytest.raises(LoweringError, match=r"offset has 16 channels; .* = 1 \* 2 \* 3 \* 3 = 18"):
        lower_deform_conv(model)
    model = case.onnx_deform_conv(19)
    model.graph.input[2].type.tensor_type.shape.dim[1].dim_value = 18
    with pytest.raises(LoweringError, match=r"mask has 18 channels; .* = 1 \* 3 \* 3 = 9"):
        lower_deform_conv(model)
    mm = mmdeploy_model(case)
    mm.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 9
    with pytest.raises(LoweringError, match=r"MMCVModulatedDeformConv2d|'dcn'.*offset has 9"):
        lower_deform_conv(mm)
