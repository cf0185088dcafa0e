"""The configuration table against torchvision, for lower_deform_conv and both exporters."""

from __future__ import annotations

import numpy as np
import pytest
from dcn_support import (
    ATOL,
    CASES,
    Case,
    assert_matches_torchvision,
    case_ids,
    check_valid,
    dynamo_export,
    run_model,
    torchscript_export,
)
from deform_conv2d_onnx_exporter import lower_deform_conv
from onnx import helper


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
@pytest.mark.parametrize(
    ("opset", "columns"),
    [(19, "conv"), (22, "matmul"), (16, "matmul"), (13, "conv")],
    ids=["gridsample-19-conv", "gridsample-22-matmul", "gridsample-16-matmul", "gathernd-13-conv"],
)
def test_lower_deform_conv(case: Case, opset: int, columns: str, runtime: str) -> None:
    lowered = lower_deform_conv(case.onnx_deform_conv(max(opset, 19)), opset, columns=columns)
    check_valid(lowered)
    ops = {n.op_type for n in lowered.graph.node}
    assert ("GridSample" in ops) == (opset >= 16)
    assert ("MatMul" in ops) == (columns == "matmul")
    assert_matches_torchvision(case, runtime, lowered)


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
@pytest.mark.parametrize("opset", [12, 15, 16, 20])
def test_torchscript_exporter(case: Case, opset: int, runtime: str) -> None:
    model = torchscript_export(case, opset)
    check_valid(model)
    assert model.opset_import[0].version == opset
    assert_matches_torchvision(case, runtime, model)


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
@pytest.mark.parametrize("opset", [18, 20])
def test_dynamo_exporter(case: Case, opset: int, runtime: str) -> None:
    model = dynamo_export(case, opset)
    check_valid(model)
    assert model.opset_import[0].version == opset
    assert "GridSample" in {n.op_type for n in model.graph.node}
    assert_matches_torchvision(case, runtime, model)


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_grid_arithmetic_before_the_pair_moves_last(static: bool, runtime: str) -> None:
    """The offsets meet the grid's scale and base while (x, y) is an axis of its own.

    Issue 17: with the pair last, the Mul and Add broadcast 2 elements wide (onnxruntime's Mul
    took ~1 ms per 64x64 layer). Only the Transpose moves the pair last, and only a Reshape
    lies between it and GridSample.
    """
    case = CASES[0]
    model = case.onnx_deform_conv(19)
    feeds = case.inputs(seed=7)
    if static:
        for value in model.graph.input:
            sizes = feeds[value.name].shape
            for dim, size in zip(value.type.tensor_type.shape.dim, sizes, strict=True):
                dim.Clear()
                dim.dim_value = size
    lowered = lower_deform_conv(model, 20)
    check_valid(lowered)
    producer = {out: node for node in lowered.graph.node for out in node.output}
    sample = next(n for n in lowered.graph.node if n.op_type == "GridSample")
    reshape = producer[sample.input[1]]
    transpose = producer[reshape.input[0]]
    add = producer[transpose.input[0]]
    assert [reshape.op_type, transpose.op_type, add.op_type] == ["Reshape", "Transpose", "Add"]
    assert helper.get_attribute_value(transpose.attribute[0]) == [0, 1, 3, 4, 2]
    assert {producer[i].op_type for i in add.input} >= {"Mul"}
    error = np.abs(run_model(runtime, lowered, feeds) - case.reference(feeds)).max()
    assert error <= ATOL
