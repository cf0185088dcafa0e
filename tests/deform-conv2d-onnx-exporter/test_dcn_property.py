"""Property test: random valid configurations, every path, both runtimes."""

from __future__ import annotations

import math

import pytest
from dcn_support import (
    RUNTIMES,
    Case,
    assert_matches_torchvision,
    check_valid,
    dynamo_export,
    torchscript_export,
)
from deform_conv2d_onnx_exporter import lower_deform_conv
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

pairs = st.tuples


@st.composite
def cases(draw: st.DrawFn) -> Case:
    groups = draw(st.sampled_from([1, 2]))
    offset_groups = draw(st.sampled_from([1, 2]))
    channels = math.lcm(groups, offset_groups) * draw(st.integers(1, 2))
    case = Case(
        name="drawn",
        n=draw(st.integers(1, 2)),
        c=channels,
        co=groups * draw(st.integers(1, 2)),
        h=draw(st.integers(3, 9)),
        w=draw(st.integers(3, 9)),
        kernel=draw(pairs(st.integers(1, 3), st.integers(1, 3))),
        stride=draw(pairs(st.integers(1, 2), st.integers(1, 2))),
        padding=draw(pairs(st.integers(0, 2), st.integers(0, 2))),
        dilation=draw(pairs(st.integers(1, 2), st.integers(1, 2))),
        groups=groups,
        offset_groups=offset_groups,
        mask=draw(st.booleans()),
        bias=draw(st.booleans()),
    )
    assume(min(case.out_hw(case.h, case.w)) >= 1)
    return case


@pytest.mark.parametrize("runtime", RUNTIMES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_random_configurations(case: Case, runtime: str) -> None:
    if runtime == "openvino":
        from components import require_module

        require_module("openvino")
    models = {
        "lower-gridsample": lower_deform_conv(case.onnx_deform_conv(19), 19),
        "lower-gathernd": lower_deform_conv(case.onnx_deform_conv(19), 13),
        "lower-matmul": lower_deform_conv(case.onnx_deform_conv(19), 17, columns="matmul"),
        "torchscript-17": torchscript_export(case, 17),
        "dynamo-20": dynamo_export(case, 20),
    }
    for label, model in models.items():
        check_valid(model)
        try:
            assert_matches_torchvision(case, runtime, model, table=False)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from exc
