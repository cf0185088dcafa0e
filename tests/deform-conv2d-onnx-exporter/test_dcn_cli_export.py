"""The console script and the export() convenience: choices, files, no torch for `lower`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from components import require_module
from dcn_support import (
    ATOL,
    CASES,
    Case,
    assert_matches_torchvision,
    check_valid,
    dynamo_export,
    run_model,
)
from deform_conv2d_onnx_exporter.cli import main

CASE = CASES[0]


def test_lower_and_check_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "native.onnx"
    target = tmp_path / "lowered.onnx"
    onnx.save(CASE.onnx_deform_conv(19), source)
    assert main(["lower", str(source), "-o", str(target), "--opset", "17"]) == 0
    assert "lowered 1 DeformConv node(s)" in capsys.readouterr().out
    lowered = onnx.load(target)
    check_valid(lowered)
    assert lowered.opset_import[0].version == 17
    assert_matches_torchvision(CASE, "onnxruntime", lowered)

    shapes = ["--shape", "x=2,4,7,10", "--shape", "offset=2,18,7,10", "--shape", "mask=2,9,7,10"]
    status = main(["check", str(target), *shapes])
    out = capsys.readouterr().out
    assert "input  x: [2, 4, 7, 10]" in out
    assert status == 0, out
    assert "at f32" in out
    assert "openvino vs onnxruntime, y [2, 6, 7, 10]: max abs error " in out
    assert ", max rel error " in out


def test_check_explains_that_openvino_cannot_read_deform_conv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_module("openvino")
    source = tmp_path / "native.onnx"
    onnx.save(CASE.onnx_deform_conv(19), source)
    assert main(["check", str(source)]) == 2
    err = capsys.readouterr().err
    assert "run `deform-conv2d-onnx lower IN -o OUT` first" in err and "core.cpp" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lower", "missing.onnx", "-o", "out.onnx"], "cannot read ONNX model 'missing.onnx'"),
        (["check", "missing.onnx"], "cannot read ONNX model 'missing.onnx'"),
    ],
)
def test_user_mistakes_are_one_line_errors(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_opset_and_bad_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "native.onnx"
    onnx.save(CASE.onnx_deform_conv(19), source)
    assert main(["lower", str(source), "-o", str(tmp_path / "out.onnx"), "--opset", "11"]) == 2
    assert "opset 11 is not supported" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()
    assert main(["check", str(source), "--shape", "nope=1,2"]) == 2
    assert "unknown input(s) ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["check", str(source), "--shape", "x=1,a"])
    assert "expected [NAME=]D0,D1,..." in capsys.readouterr().err


def test_help_and_lower_do_not_import_torch(tmp_path: Path) -> None:
    source = tmp_path / "native.onnx"
    onnx.save(CASE.onnx_deform_conv(19), source)
    code = (
        "import sys\n"
        "from deform_conv2d_onnx_exporter.cli import main\n"
        f"assert main(['lower', {str(source)!r}, '-o', {str(tmp_path / 'out.onnx')!r}]) == 0\n"
        "assert 'torch' not in sys.modules, 'lower imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)
    done = subprocess.run(
        [sys.executable, "-m", "deform_conv2d_onnx_exporter.cli", "--help"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "lower" in done.stdout and "check" in done.stdout


def test_export_picks_native_at_19_and_decomposes_below(tmp_path: Path) -> None:
    native = dynamo_export(CASE, 19, None)
    assert "DeformConv" in {n.op_type for n in native.graph.node}
    onnx.checker.check_model(native, full_check=True)
    assert_matches_torchvision(CASE, "onnxruntime", native)

    below = dynamo_export(CASE, 18, None)
    check_valid(below)
    assert below.opset_import[0].version == 18
    assert_matches_torchvision(CASE, "onnxruntime", below)


def test_export_writes_file_and_torchscript_route(tmp_path: Path) -> None:
    from deform_conv2d_onnx_exporter import export

    target = tmp_path / "model.onnx"
    proto = export(
        CASE.torch_module(),
        CASE.example_args(),
        target,
        dynamo=False,
        opset_version=16,
        input_names=CASE.input_names(),
        dynamic_axes={name: {0: "n", 2: "h", 3: "w"} for name in CASE.input_names()},
    )
    assert onnx.load(target) == proto
    check_valid(proto)
    assert_matches_torchvision(CASE, "onnxruntime", proto)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_offsets_from_a_strided_slice_run_at_another_size(dynamo: bool, runtime: str) -> None:
    """Offsets sliced with a step (``o[:, :, ::2, ::2]``) under dynamic shapes.

    OpenVINO mis-infers the shape of such a slice, so the graph must not read Ho/Wo off
    the offset tensor (it used to, and this failed in OpenVINO).
    """
    import torch
    import torchvision
    from deform_conv2d_onnx_exporter import export

    class StridedOffsets(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.offsets = torch.nn.Conv2d(4, 18, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(4, 6, 3, padding=1, stride=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dcn(x, self.offsets(x)[:, :, ::2, ::2] * 3)

    net = StridedOffsets().eval()
    dim = torch.export.Dim.AUTO
    kwargs = (
        {"dynamic_shapes": ({0: dim, 2: dim, 3: dim},)}
        if dynamo
        else {"dynamic_axes": {"x": {0: "n", 2: "h", 3: "w"}}}
    )
    model = export(
        net,
        (torch.randn(2, 4, 12, 16),),
        opset_version=17,
        decompose=True,
        dynamo=dynamo,
        input_names=["x"],
        **kwargs,
    )
    check_valid(model)
    x = torch.randn(1, 4, 9, 13)
    with torch.no_grad():
        want = net(x).numpy()
    got = run_model(runtime, model, {"x": x.numpy()})
    assert got.shape == want.shape
    assert float(abs(got - want).max()) <= ATOL


def test_columns_auto_follows_the_static_output_size() -> None:
    from deform_conv2d_onnx_exporter.graph import (
        MATMUL_MAX_INNER,
        MATMUL_MAX_PIXELS,
        columns_for_output_size,
    )

    small = MATMUL_MAX_INNER
    assert columns_for_output_size("auto", None, small) == "conv"
    assert columns_for_output_size("auto", (64, None), small) == "conv"
    assert columns_for_output_size("auto", (64, MATMUL_MAX_PIXELS // 64), small) == "matmul"
    assert columns_for_output_size("auto", (64, MATMUL_MAX_PIXELS // 64 + 1), small) == "conv"
    # A long inner size (128 channels, 3x3) or an unknown one: the Conv form.
    assert columns_for_output_size("auto", (48, 48), 2 * MATMUL_MAX_INNER) == "conv"
    assert columns_for_output_size("auto", (48, 48), None) == "conv"
    assert columns_for_output_size("conv", (2, 2)) == "conv"
    with pytest.raises(ValueError, match=r"columns must be 'auto', 'conv' or 'matmul', got 'gemm'"):
        columns_for_output_size("gemm", None)


def export_decomposed(case: Case, dynamo: bool, **options: Any) -> onnx.ModelProto:
    """*case* through ``export(decompose=True)`` on either exporter, checked valid."""
    from deform_conv2d_onnx_exporter import export

    model = export(
        case.torch_module(),
        case.example_args(),
        decompose=True,
        dynamo=dynamo,
        input_names=case.input_names(),
        **options,
    )
    check_valid(model)
    return model


def assert_close(case: Case, runtime: str, model: onnx.ModelProto, seed: int) -> None:
    """*model* matches torchvision on *case*'s inputs of its export size."""
    feeds = case.inputs(seed=seed)
    assert float(abs(run_model(runtime, model, feeds) - case.reference(feeds)).max()) <= ATOL


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_static_export_uses_matmul_for_small_outputs(dynamo: bool, runtime: str) -> None:
    model = export_decomposed(CASES[2], dynamo, opset_version=17)
    assert "MatMul" in {n.op_type for n in model.graph.node}
    assert_close(CASES[2], runtime, model, seed=3)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_gathernd_variant_on_request_at_any_opset(dynamo: bool, runtime: str) -> None:
    case = CASES[5]
    names = case.input_names()
    kwargs = (
        {}
        if dynamo
        else {"dynamic_axes": {name: {0: "n", 2: f"{name}_h", 3: f"{name}_w"} for name in names}}
    )
    model = export_decomposed(case, dynamo, opset_version=20, variant="gathernd", **kwargs)
    ops = {n.op_type for n in model.graph.node}
    assert "GatherND" in ops and "GridSample" not in ops
    assert_close(case, runtime, model, seed=5)


def test_bad_variant_and_columns_fail_before_export() -> None:
    from deform_conv2d_onnx_exporter import (
        make_deform_conv2d_translation,
        register_deform_conv2d_onnx_op,
    )

    with pytest.raises(ValueError, match=r"gridsample variant needs opset >= 16, got opset 15"):
        make_deform_conv2d_translation(15, variant="gridsample")
    with pytest.raises(ValueError, match=r"unknown variant 'fast'"):
        make_deform_conv2d_translation(20, variant="fast")
    with pytest.raises(ValueError, match=r"variant must be None or 'gathernd', got 'gridsample'"):
        register_deform_conv2d_onnx_op(variant="gridsample")
    with pytest.raises(ValueError, match=r"columns must be 'auto', 'conv' or 'matmul'"):
        register_deform_conv2d_onnx_op(columns="gemm")
