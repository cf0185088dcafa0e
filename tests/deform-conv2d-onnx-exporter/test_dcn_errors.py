"""Configurations we cannot handle fail early with an error naming the parameter."""

from __future__ import annotations

import io

import onnx
import pytest
from dcn_support import CASES, Case, torchscript_export
from deform_conv2d_onnx_exporter import DeformConvSpec, LoweringError, export, lower_deform_conv
from onnx import helper

CASE = CASES[0]


def test_lower_rejects_opset_below_12() -> None:
    with pytest.raises(ValueError, match=r"opset 11 is not supported.*>= 12"):
        lower_deform_conv(CASE.onnx_deform_conv(19), 11)


def without_kernel_shape() -> onnx.ModelProto:
    """CASE's DeformConv model with no kernel_shape attribute (the weight must tell it)."""
    model = CASE.onnx_deform_conv(19)
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != "kernel_shape"]
    del node.attribute[:]
    node.attribute.extend(kept)
    return model


def test_lower_rejects_unknown_kernel_shape() -> None:
    model = without_kernel_shape()
    # The weight becomes a graph input with free kernel dimensions.
    weight = model.graph.initializer[0]
    model.graph.input.append(
        helper.make_tensor_value_info("W", onnx.TensorProto.FLOAT, [6, 4, "kh", "kw"])
    )
    model.graph.initializer.remove(weight)
    with pytest.raises(LoweringError, match=r"'dcn'.*kernel shape is unknown.*weight 'W'"):
        lower_deform_conv(model)


def test_lower_rejects_3d_deform_conv() -> None:
    model = CASE.onnx_deform_conv(19)
    node = model.graph.node[0]
    for attr in node.attribute:
        if attr.name == "kernel_shape":
            attr.ints.append(3)
    with pytest.raises(
        LoweringError, match=r"only 2-D DeformConv is supported, got kernel_shape \[3, 3, 3\]"
    ):
        lower_deform_conv(model)


def test_lower_takes_kernel_from_weight_and_keeps_other_nodes() -> None:
    model = without_kernel_shape()
    model.graph.node.append(helper.make_node("Relu", ["y"], ["z"]))
    model.graph.output[0].name = "z"
    lowered = lower_deform_conv(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert [n.op_type for n in lowered.graph.node][-1] == "Relu"
    assert "DeformConv" not in {n.op_type for n in lowered.graph.node}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("strides", (0, 1), r"strides must be 2 integers >= 1"),
        ("pads", (1, 1, -1, 0), r"pads must be 4 integers >= 0"),
        ("group", 0, r"group must be an integer >= 1"),
        ("offset_group", 0, r"offset_group must be an integer >= 1"),
    ],
)
def test_spec_validation_names_the_parameter(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DeformConvSpec(kernel_shape=(3, 3), **{field: value})  # type: ignore[arg-type]


def test_torchscript_rejects_opset_below_12() -> None:
    # torch's registry answers for us (the symbolic is registered from opset 12).
    with pytest.raises(Exception, match=r"opset version 11 is not supported.*version 12"):
        torchscript_export(CASE, 11)


def test_torchscript_rejects_dynamic_weight_shape() -> None:
    import torch
    import torchvision
    from deform_conv2d_onnx_exporter import register_deform_conv2d_onnx_op

    class WeightAsInput(torch.nn.Module):
        def forward(
            self, x: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor
        ) -> torch.Tensor:
            return torchvision.ops.deform_conv2d(x, offset, weight, padding=(1, 1))

    register_deform_conv2d_onnx_op()
    args = (*CASE.example_args()[:2], torch.randn(6, 4, 3, 3))
    with pytest.raises(Exception, match=r"weight must have a static 4-D shape"):
        torch.onnx.export(
            WeightAsInput(),
            args,
            io.BytesIO(),
            dynamo=False,
            opset_version=17,
            input_names=["x", "offset", "weight"],
            dynamic_axes={"weight": {2: "kh", 3: "kw"}},
        )


def test_export_refuses_native_below_opset_19() -> None:
    with pytest.raises(
        ValueError, match=r"native DeformConv needs opset >= 19, got opset_version=18"
    ):
        export(CASE.torch_module(), CASE.example_args(), opset_version=18, decompose=False)


def test_export_refuses_opset_below_12() -> None:
    with pytest.raises(ValueError, match=r"opset 11 is not supported"):
        export(CASE.torch_module(), CASE.example_args(), opset_version=11)


def test_case_table_covers_every_parameter_value() -> None:
    """The table is representative: each value from the issue appears at least once."""

    def seen(field: str) -> set[object]:
        return {getattr(c, field) for c in CASES}

    assert {(1, 1), (3, 3), (3, 5)} <= seen("kernel")
    assert {(1, 1), (2, 2), (2, 1)} <= seen("stride")
    assert {(0, 0), (1, 1), (2, 2), (1, 2)} <= seen("padding")
    assert {(1, 1), (2, 2)} <= seen("dilation")
    assert {1, 2, 4} <= seen("groups")
    assert {1, 2, 4} <= seen("offset_groups")
    assert {True, False} == seen("mask") == seen("bias")
    assert {1, 3} <= seen("n")
    assert all(c.h != c.w for c in CASES)
    assert all(isinstance(c, Case) for c in CASES)


def test_export_refuses_to_write_another_opset_than_asked() -> None:
    import torch

    auto = torch.export.Dim.AUTO
    shapes = tuple({0: auto, 2: auto, 3: auto} for _ in CASE.input_names())
    with pytest.raises(
        ValueError,
        match=r"wrote opset 18, not the requested opset 14.*dynamo=False.*opset_version >= 15;",
    ):
        export(CASE.torch_module(), CASE.example_args(), opset_version=14, dynamic_shapes=shapes)


def test_export_advice_opset_15_is_the_lowest_that_works_with_dynamic_shapes() -> None:
    """The advice above is true: opset 15 (one below it fails) exports with dynamic shapes."""
    import numpy as np
    import torch
    from dcn_support import ATOL, run_model
    from deform_conv2d_onnx_exporter.dynamo import CONVERTER_MIN_OPSET

    assert CONVERTER_MIN_OPSET == 15
    auto = torch.export.Dim.AUTO
    shapes = tuple({0: auto, 2: auto, 3: auto} for _ in CASE.input_names())
    buffer = io.BytesIO()
    export(
        CASE.torch_module(), CASE.example_args(), buffer, opset_version=15, dynamic_shapes=shapes
    )
    model = onnx.load_from_string(buffer.getvalue())
    assert model.opset_import[0].version == 15
    onnx.checker.check_model(model, full_check=True)
    assert "DeformConv" not in {n.op_type for n in model.graph.node}
    feeds = CASE.inputs()
    np.testing.assert_allclose(
        run_model("onnxruntime", model, feeds), CASE.reference(feeds), atol=ATOL
    )


def test_lower_repairs_deform_conv_below_opset_19() -> None:
    """What torch's dynamo exporter writes at opset 18 without a translation."""
    model = CASE.onnx_deform_conv(18)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model, full_check=True)
    lowered = lower_deform_conv(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == 18
    assert "GridSample" in {n.op_type for n in lowered.graph.node}


def test_lower_rewrites_deform_conv_inside_subgraphs() -> None:
    import numpy as np
    from dcn_support import ATOL, run_model
    from deform_conv2d_onnx_exporter.lower import count_deform_conv

    inner = CASE.onnx_deform_conv(19).graph
    then_graph = helper.make_graph(list(inner.node), "then", [], list(inner.output))
    relu = helper.make_node("Relu", ["y_else_in"], ["y"])
    else_graph = helper.make_graph(
        [*inner.node[:0], helper.make_node("Neg", ["y_then_copy"], ["y_else_in"]), relu],
        "else",
        [],
        list(inner.output),
    )
    # else: -(DeformConv) through Relu, computed by its own DeformConv copy.
    copy = onnx.NodeProto()
    copy.CopyFrom(inner.node[0])
    copy.output[0] = "y_then_copy"
    copy.name = "dcn_else"
    else_graph.node.insert(0, copy)
    cond = helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)
    graph = helper.make_graph(
        [node], "outer", [*inner.input, cond], list(inner.output), list(inner.initializer)
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model)
    lowered = lower_deform_conv(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert count_deform_conv(model) == 2
    assert count_deform_conv(lowered) == 0
    feeds = CASE.inputs()
    want = CASE.reference(feeds)
    got_then = run_model("onnxruntime", lowered, {**feeds, "cond": np.array(True)})
    got_else = run_model("onnxruntime", lowered, {**feeds, "cond": np.array(False)})
    assert float(np.abs(got_then - want).max()) <= ATOL
    assert float(np.abs(got_else - np.maximum(-want, 0)).max()) <= ATOL


def test_torch_entry_points_name_the_extra_when_torch_is_missing() -> None:
    """Installed without ``[torch]``: an ImportError naming the extra, not a bare one."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "import deform_conv2d_onnx_exporter as d\n"
        "for call in (d.register_deform_conv2d_onnx_op, d.make_deform_conv2d_translation):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout
    for line, name in zip(
        lines, ("register_deform_conv2d_onnx_op", "make_deform_conv2d_translation"), strict=True
    ):
        assert line.startswith(f"ImportError {name}() needs torch"), line
        assert "pip install 'deform-conv2d-onnx-exporter[torch]'" in line


def test_openvino_reason_drops_cpp_source_lines() -> None:
    """OpenVINO's text as it raises it (read_model of a model with DeformConv-19)."""
    from deform_conv2d_onnx_exporter.check import _openvino_reason

    text = (
        "Exception from src/inference/src/cpp/core.cpp:84:\n"
        "Check 'false' failed at src/frontends/common_translators/src/unconverted_ops_report.cpp"
        ":151:\nFrontEnd API failed with OpConversionFailure:\nModel wasn't fully converted.\n"
        "Summary:\n-- No conversion rule found for operations: DeformConv-19\n\n"
    )
    reason = _openvino_reason(RuntimeError(text))
    assert ".cpp" not in reason and "Exception from" not in reason
    assert reason.endswith("No conversion rule found for operations: DeformConv-19")
