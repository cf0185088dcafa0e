"""An exported file checked against PyTorch, the source of truth: ``check_export`` and
``export(..., check=True)``, with openvino-runner's tolerance rule (element-wise
``|actual - expected| <= atol + rtol * |expected|``, atol 1e-4, rtol 1e-3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from dcn_support import CASES
from deform_conv2d_onnx_exporter import check_export, export
from deform_conv2d_onnx_exporter.check import CheckError, compare_output
from onnx import numpy_helper

CASE = CASES[0]


def test_the_tolerance_rule_is_element_wise_like_openvino_runners() -> None:
    big = np.array([1000.0, 1e-3], np.float32)
    # 0.5 off on 1000 is within 1e-4 + 1e-3 * 1000; the same on the small element is not.
    assert compare_output("y", "rt", big + np.array([0.5, 0.0], np.float32), big).passed
    failing = compare_output("y", "rt", big + np.array([0.0, 0.5], np.float32), big)
    assert not failing.passed and failing.max_abs_error == pytest.approx(0.5)
    assert not compare_output("y", "rt", big[:1], big).passed  # shapes differ
    with pytest.raises(CheckError, match="finite numbers >= 0"):
        compare_output("y", "rt", big, big, atol=float("nan"))


def test_check_export_on_a_written_file(tmp_path: Path) -> None:
    module, args = CASE.torch_module(), CASE.example_args()
    path = tmp_path / "model.onnx"
    export(module, args, path, opset_version=18, decompose=True, input_names=CASE.input_names())
    report = check_export(module, args, path)
    assert report.passed and report.reference == "torch"
    assert {o.runtime for o in report.outputs} == {"onnxruntime", "openvino"}
    assert report.worst is not None and report.worst < 1e-4

    # A wrong weight in the file is found, in both runtimes.
    model = onnx.load(path)
    init = max(model.graph.initializer, key=lambda i: numpy_helper.to_array(i).size)  # W
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.01, init.name))
    onnx.save(model, path)
    report = check_export(module, args, path)
    assert not report.passed
    assert all(not o.passed for o in report.outputs)


def test_check_export_of_the_default_export_skips_openvino_by_name(tmp_path: Path) -> None:
    """The default export writes native DeformConv, which OpenVINO cannot read: with the
    default runtimes that is a skipped runtime, said so, not a CheckError (a new user's
    first `check_export` after `export`); asked for by name, it is still an error."""
    from deform_conv2d_onnx_exporter.check import format_report

    module, args = CASE.torch_module(), CASE.example_args()
    path = tmp_path / "native.onnx"
    export(module, args, path, input_names=CASE.input_names())
    assert any(n.op_type == "DeformConv" for n in onnx.load(path).graph.node)
    report = check_export(module, args, path)
    assert report.passed and {o.runtime for o in report.outputs} == {"onnxruntime"}
    assert report.skipped == ["openvino"]
    assert "openvino: cannot read native DeformConv (lower the model), not checked" in (
        format_report(report)
    )
    with pytest.raises(CheckError, match="OpenVINO cannot read the model's DeformConv"):
        check_export(module, args, path, runtimes=("onnxruntime", "openvino"))


def test_export_with_check_refuses_a_model_that_differs_from_torch(tmp_path: Path) -> None:
    """A module that behaves differently while exported (a real source of such files)."""
    import torch

    inner = CASE.torch_module()

    class Diverging(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            out = self.inner(*args)
            return out + 1 if torch.onnx.is_in_onnx_export() else out

    path = tmp_path / "m.onnx"
    args = CASE.example_args()
    with pytest.raises(ValueError, match=r"does not match PyTorch.*nothing was written"):
        export(Diverging(), args, path, dynamo=False, opset_version=17, decompose=True, check=True)
    assert not path.exists()
    export(inner, args, path, dynamo=False, opset_version=17, decompose=True, check=True)
    assert path.exists()


@pytest.mark.parametrize("dynamo", [True, False])
def test_export_into_a_missing_folder_fails_first(tmp_path: Path, dynamo: bool) -> None:
    """It ran the whole export, then failed naming a temporary of its .data file."""
    target = tmp_path / "nodir" / "x.onnx"
    with pytest.raises(FileNotFoundError, match=f"the folder '{tmp_path / 'nodir'}' does not"):
        export(CASE.torch_module(), CASE.example_args(), target, dynamo=dynamo)
    assert not (tmp_path / "nodir").exists()
