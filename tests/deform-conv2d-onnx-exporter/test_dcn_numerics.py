"""The configuration table against torchvision, for lower_deform_conv and both exporters."""

from __future__ import annotations

import pytest
from dcn_support import (
    CASES,
    Case,
    assert_matches_torchvision,
    case_ids,
    check_valid,
    dynamo_export,
    torchscript_export,
)
from deform_conv2d_onnx_exporter import lower_deform_conv


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
