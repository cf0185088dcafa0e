"""`convert` / `Runner.convert` / `convert_model`: real models to OpenVINO IR and back.

Each case writes IR (with and without FP16 weights), reads it back, runs it and compares it
with the source: OpenVINO on the source and onnxruntime on the ONNX file (`--check`), and
`compare IR --reference SOURCE.onnx` on other inputs. The models: the onnx wheel's light
models, a torchvision squeezenet exported with a dynamic batch, and a torchvision
DeformConv2d block exported by torch's dynamo exporter (native ONNX DeformConv, which only
this package's extension lets OpenVINO read).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from openvino_runner import ConversionReport, Runner, convert_model
from openvino_runner.compare import softmax_inputs
from ovr_testmodels import (
    ILL_CONDITIONED,
    LIGHT,
    ONNX_ATOL,
    ONNX_RTOL,
    cli,
    light_case,
    softmax_is_well_conditioned,
)

pytestmark = pytest.mark.usefixtures("openvino_available")


def assert_clean(folder: Path, *expected: str) -> None:
    """Only the expected files: no temporaries left behind."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(expected)


def checks_by_output(report: ConversionReport) -> dict[tuple[str, str], bool]:
    return {(c.reference, o.name): o.passed for c in report.checks for o in c.outputs}


@pytest.mark.parametrize("fp16", [False, True], ids=["f32", "fp16"])
@pytest.mark.parametrize("name", LIGHT)
def test_light_models_to_ir(name: str, fp16: bool, tmp_path: Path) -> None:
    path, input_name, data, expected = light_case(name)
    # Keep the logits as a second output: the softmax of most light models is decided by
    # f32 rounding (see ovr_testmodels), so only the logits can be judged on every CPU.
    outputs = [o for pair in softmax_inputs(path).items() for o in pair]
    out = tmp_path / "ir" / f"{name}.xml"
    out.parent.mkdir()
    report = convert_model(
        path, out, compress_to_fp16=fp16, output_names=outputs or None, check=True
    )
    assert_clean(out.parent, f"{name}.xml", f"{name}.bin")
    assert report.xml_bytes == out.stat().st_size > 0
    assert report.bin_bytes == out.with_suffix(".bin").stat().st_size
    assert report.compressed_to_fp16 is fp16
    assert report.op_counts_before == report.source_info.source_op_counts
    assert "Parameter" in report.op_counts_after and "Conv" not in report.op_counts_after
    ir = Runner(out)
    assert ir.info().format == "OpenVINO IR" and not ir.info().converted
    assert [p.name for p in report.ir_info.inputs] == [input_name]
    passed = checks_by_output(report)
    assert {reference for reference, _ in passed} == {"openvino (source)", "onnxruntime"}
    got = ir.infer({input_name: data})
    if not outputs:  # densenet121: a Conv output, well-conditioned
        assert all(passed.values())
        (prob,) = got.values()
        np.testing.assert_allclose(prob, expected, rtol=ONNX_RTOL, atol=ONNX_ATOL)
        return
    prob_name, logits_name = outputs
    assert [p.name for p in report.ir_info.outputs] == outputs
    assert passed[("openvino (source)", logits_name)] and passed[("onnxruntime", logits_name)]
    logits = got[logits_name]
    if softmax_is_well_conditioned(logits):
        assert name not in ILL_CONDITIONED
        assert passed[("openvino (source)", prob_name)] and passed[("onnxruntime", prob_name)]
        np.testing.assert_allclose(got[prob_name], expected, rtol=ONNX_RTOL, atol=ONNX_ATOL)


@pytest.fixture(scope="session")
def squeezenet_dynamic(tmp_path_factory: pytest.TempPathFactory, torch_modules: object) -> Path:
    """torchvision squeezenet1_1 (seeded random weights), batch dynamic, TorchScript export."""
    import torch
    import torchvision

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("squeezenet") / "squeezenet.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter: fast, and dynamic_axes
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            torchvision.models.squeezenet1_1().eval(),
            (torch.randn(1, 3, 224, 224),),
            str(path),
            dynamo=False,
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
        )
    return path


@pytest.mark.torch
def test_torchvision_dynamic_batch_with_and_without_fp16(
    capsys: pytest.CaptureFixture[str], squeezenet_dynamic: Path, tmp_path: Path
) -> None:
    errors = {}
    for flags in ([], ["--compress-to-fp16"]):
        out = tmp_path / f"sq{len(flags)}.xml"
        report = tmp_path / f"sq{len(flags)}.json"
        code, text, _ = cli(
            capsys, "convert", squeezenet_dynamic, "-o", out, *flags, "--check", "--json", report
        )
        assert code == 0, text
        assert "image                            f32    [?,3,224,224]" in text
        assert "ONNX ops in the source (" in text and "OpenVINO ops in the IR (" in text
        assert "check against onnxruntime" in text and "the IR matches the source" in text
        data = json.loads(report.read_text())
        assert data["passed"] and data["compressed_to_fp16"] == bool(flags)
        assert data["ir_info"]["inputs"][0]["shape"] == "[?,3,224,224]"  # batch still dynamic
        # the IR at another batch size against onnxruntime on the ONNX source
        code, text, _ = cli(
            capsys,
            "compare",
            out,
            "--reference",
            squeezenet_dynamic,
            "--shape",
            "image=3,3,224,224",
            "--atol",
            "1e-2",
            "--rtol",
            "1e-2",
            "--json",
            tmp_path / "cmp.json",
        )
        assert code == 0, text
        (logits,) = json.loads((tmp_path / "cmp.json").read_text())["outputs"]
        assert logits["shape"] == [3, 1000] and logits["top1_agreement"] == 1.0
        errors[bool(flags)] = (logits["max_abs"], data["bin_bytes"])
    (f32_error, f32_size), (fp16_error, fp16_size) = errors[False], errors[True]
    assert f32_error < 1e-4  # f32 IR: the same maths as the source
    assert f32_error < fp16_error < 1e-2  # FP16 weights: rounded, as asked
    assert fp16_size < 0.6 * f32_size


@pytest.mark.torch
@pytest.mark.usefixtures("torch_modules")
@pytest.mark.parametrize("fp16", [False, True], ids=["f32", "fp16"])
def test_deform_conv_model_to_ir(
    capsys: pytest.CaptureFixture[str], dynamo_deform_model: Path, tmp_path: Path, fp16: bool
) -> None:
    import openvino as ov

    with pytest.raises(RuntimeError, match="DeformConv"):  # what ovc / plain OpenVINO say
        ov.Core().read_model(str(dynamo_deform_model))
    out = tmp_path / "deform.xml"
    runner = Runner(dynamo_deform_model)
    report = convert_model(runner, out, compress_to_fp16=fp16, check=True)
    assert report.passed and len(report.checks) == 2
    assert report.op_counts_before["DeformConv"] == 1
    assert report.op_counts_after["DeformableConvolution"] == 1
    # the IR needs no extension: a plain OpenVINO Core reads and runs it
    compiled = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = np.random.default_rng(0).random((1, 4, 12, 12), dtype=np.float32)
    got = compiled({"x": x})[0]
    expected = runner.infer({"x": x})["y"]
    tolerance = 1e-2 if fp16 else 1e-5
    assert np.abs(got - expected).max() <= tolerance
    code, text, _ = cli(
        capsys, "compare", out, "--reference", dynamo_deform_model, "--atol", str(tolerance)
    )
    assert code == 0, text
    assert_clean(tmp_path, "deform.xml", "deform.bin")


def test_convert_errors_leave_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, *_ = light_case("shufflenet")
    # not an .xml name; a missing folder; the .bin's place taken by a folder
    code, out, err = cli(capsys, "convert", path, "-o", tmp_path / "model.onnx")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "must end in .xml" in err
    code, out, err = cli(capsys, "convert", path, "-o", tmp_path / "nope" / "m.xml")
    assert code == 2 and "does not exist" in err and "Traceback" not in err
    (tmp_path / "m.bin").mkdir()
    code, out, err = cli(capsys, "convert", path, "-o", tmp_path / "m.xml")
    assert code == 2 and err.count("\n") == 1 and f"cannot write {tmp_path / 'm.xml'}" in err
    assert ".partial" not in err
    assert_clean(tmp_path, "m.bin")
    code, _, err = cli(capsys, "convert", path, "-o", tmp_path / "x.xml", "--output-names", "nope")
    assert code == 2 and "no tensor named 'nope'" in err
    assert_clean(tmp_path, "m.bin")


def test_convert_interrupted_leaves_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openvino

    path, *_ = light_case("shufflenet")
    real_save = openvino.save_model

    def save_then_interrupt(*args: object, **kwargs: object) -> None:
        real_save(*args, **kwargs)  # both temporaries are written in full...
        raise KeyboardInterrupt  # ...and Ctrl-C comes before the renames

    monkeypatch.setattr(openvino, "save_model", save_then_interrupt)
    code, _, err = cli(capsys, "convert", path, "-o", tmp_path / "m.xml")
    assert code == 130 and err == "openvino-runner: interrupted\n"
    assert_clean(tmp_path)


def test_check_finds_external_data_from_another_folder(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    torch_modules: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dynamo exporter writes weights to MODEL.onnx.data; `convert --check` run from
    another folder once failed in onnxruntime ("model loaded from bytes escapes working
    directory") while `compare` on the same file worked."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    path = model_dir / "conv.onnx"
    torch.onnx.export(
        module,
        (torch.randn(1, 3, 16, 16),),
        str(path),
        dynamo=True,
        input_names=["x"],
        output_names=["y"],
        external_data=True,
        verbose=False,
    )
    assert (model_dir / "conv.onnx.data").is_file()  # the case of the bug: external weights
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli(
        capsys, "convert", path, "-o", elsewhere / "conv.xml", "--check", "--json", "-"
    )
    assert code == 0, err
    report = json.loads(out)
    assert [c["reference"] for c in report["checks"]] == ["openvino (source)", "onnxruntime"]
    assert report["passed"]
