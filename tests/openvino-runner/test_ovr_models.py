"""Real models, offline: onnx's light backend models, torchvision resnet18 (random weights,
exported here), rapidocr-openvino's PP-OCR models (dynamic shapes) and silero-vad (a real
conversion failure, and a variant that converts)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from openvino_runner import ConversionError, Runner
from ovr_testmodels import (
    ILL_CONDITIONED,
    LIGHT,
    ONNX_ATOL,
    ONNX_RTOL,
    cli,
    light_case,
    softmax64,
    softmax_is_well_conditioned,
)
from PIL import Image

pytestmark = pytest.mark.usefixtures("openvino_available")


# -- the onnx wheel's light models, with the outputs onnx ships for them -------------------
# Why most of them are judged by their logits: see ovr_testmodels.py.


@pytest.mark.parametrize("name", LIGHT)
def test_light_models_match_onnx_expected_outputs(name: str, tmp_path: Path) -> None:
    import onnx
    from openvino_runner.compare import run_onnxruntime, softmax_inputs, with_extra_outputs

    path, input_name, data, expected = light_case(name)
    producers = softmax_inputs(path)
    if not producers:  # densenet121 ends in a Conv: its output is well-conditioned
        assert name not in ILL_CONDITIONED
        (got,) = Runner(path, precision="f32").infer({input_name: data}).values()
        np.testing.assert_allclose(got, expected, rtol=ONNX_RTOL, atol=ONNX_ATOL)
        return
    (logits_name,) = producers.values()
    exposed = tmp_path / path.name
    exposed.write_bytes(with_extra_outputs(path, producers.values()))
    assert [o.name for o in onnx.load(str(exposed)).graph.output][-1] == logits_name
    prob, logits = Runner(exposed, precision="f32").infer({input_name: data}).values()
    _, (_, reference_logits) = run_onnxruntime(str(exposed), {input_name: data})
    np.testing.assert_allclose(logits, reference_logits, rtol=ONNX_RTOL, atol=ONNX_ATOL)
    np.testing.assert_allclose(prob, softmax64(logits), rtol=1e-5, atol=1e-7)
    assert prob.shape == expected.shape
    well_conditioned = softmax_is_well_conditioned(reference_logits)
    assert well_conditioned == (name not in ILL_CONDITIONED)
    if well_conditioned:
        np.testing.assert_allclose(prob, expected, rtol=ONNX_RTOL, atol=ONNX_ATOL)


def test_light_model_through_cli_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, _, data, expected = light_case("densenet121")
    np.save(tmp_path / "in.npy", data)
    code, out, _ = cli(
        capsys, "run", path, "--input", tmp_path / "in.npy", "--output", tmp_path / "out.npz"
    )
    assert code == 0 and "top5" in out
    with np.load(tmp_path / "out.npz") as saved:
        (got,) = (saved[k] for k in saved.files)
    np.testing.assert_allclose(got, expected, rtol=ONNX_RTOL, atol=ONNX_ATOL)


# -- resnet18: compare and bench (exported here by torch, so marked torch) --------------
@pytest.mark.torch
def test_resnet18_compare_passes_in_f32(
    capsys: pytest.CaptureFixture[str], resnet18_onnx: Path, tmp_path: Path
) -> None:
    report = tmp_path / "compare.json"
    code, out, _ = cli(capsys, "compare", resnet18_onnx, "--json", report)
    assert code == 0, out
    assert "precision: f32 (asked: f32)" in out and "for parity" in out
    assert "PASS logits" in out and "top-1 agree 100%" in out
    data = json.loads(report.read_text())
    (logits,) = data["outputs"]
    assert data["passed"] and data["precision"] == "f32"
    assert logits["max_abs"] < 1e-4 and logits["cosine"] > 0.99999
    assert logits["top1_agreement"] == 1.0 and logits["k"] == 5


@pytest.mark.torch
def test_resnet18_compare_reports_mismatch(
    capsys: pytest.CaptureFixture[str], resnet18_onnx: Path
) -> None:
    # zero tolerance: f32 kernels of two engines never agree bit for bit on resnet18
    code, out, _ = cli(capsys, "compare", resnet18_onnx, "--atol", "0", "--rtol", "0")
    assert code == 1
    assert "FAIL logits" in out and "MISMATCH" in out


@pytest.mark.torch
def test_resnet18_bench_latency_json(
    capsys: pytest.CaptureFixture[str], resnet18_onnx: Path, tmp_path: Path
) -> None:
    report = tmp_path / "bench.json"
    code, out, _ = cli(
        capsys, "bench", resnet18_onnx, "--iterations", "12", "--json", report, "--threads", "1"
    )
    assert code == 0
    for label in (
        "compile time:",
        "first inference:",
        "latency (ms):",
        "throughput:",
        "INFERENCE_PRECISION_HINT",
        "NUM_STREAMS",
    ):
        assert label in out
    data = json.loads(report.read_text())
    assert data["iterations"] == 12 and data["requests"] == 1 and data["hint"] == "latency"
    lat = data["latency_ms"]
    assert 0 < lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert data["throughput_fps"] == pytest.approx(12 / data["duration_s"])
    assert data["properties"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert data["properties"]["INFERENCE_NUM_THREADS"] == "1"
    assert data["input_shapes"] == {"image": [1, 3, 224, 224]}


@pytest.mark.torch
def test_resnet18_bench_throughput_queue_and_cache(
    capsys: pytest.CaptureFixture[str], resnet18_onnx: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    reports = []
    for i in range(2):
        report = tmp_path / f"bench{i}.json"
        code, out, _ = cli(
            capsys,
            "bench",
            resnet18_onnx,
            "--hint",
            "throughput",
            "--requests",
            "2",
            "--streams",
            "2",
            "--iterations",
            "6",
            "--cache-dir",
            cache,
            "--json",
            report,
        )
        assert code == 0
        reports.append(json.loads(report.read_text()))
    first, second = reports
    assert first["cache_hit"] is False and second["cache_hit"] is True
    assert "cache hit" in out
    assert second["requests"] == 2 and second["iterations"] == 6
    assert second["properties"]["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert second["properties"]["NUM_STREAMS"] == "2"
    assert len(list(cache.iterdir())) >= 1


@pytest.mark.torch
def test_bench_by_time(resnet18_onnx: Path) -> None:
    result = Runner(resnet18_onnx).benchmark(time_s=0.3)
    # the loop stops once the time is up, never before (no upper bound: the machine is shared)
    assert result.duration_s >= 0.3
    assert result.iterations >= 1 and result.requests == 1 and result.hint == "latency"
    assert set(result.latency_ms) == {"median", "p90", "p99", "min", "max", "mean"}
    assert result.throughput_fps == pytest.approx(result.iterations / result.duration_s)
    # back-to-back synchronous inferences: their latencies add up to at most the duration
    total_ms = result.latency_ms["mean"] * result.iterations
    assert total_ms <= result.duration_s * 1000.0 * (1 + 1e-9)


# -- rapidocr-openvino: pretrained PP-OCR models with dynamic shapes ----------------------
def test_ppocr_detector_from_an_image(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rapidocr_model: Callable[[str], Path]
) -> None:
    model = rapidocr_model("ch_PP-OCRv4_det_infer.onnx")
    code, out, _ = cli(capsys, "info", model)
    assert code == 0 and "[?,3,?,?]" in out
    # a white page with dark bars: the detector's input size comes from the image
    page = np.full((64, 96, 3), 255, np.uint8)
    page[20:28, 10:80] = 20
    Image.fromarray(page).save(tmp_path / "page.png")
    code, out, _ = cli(
        capsys,
        "compare",
        model,
        "--input",
        tmp_path / "page.png",
        "--mean",
        "123.675,116.28,103.53",
        "--scale",
        "58.395,57.12,57.375",
    )
    assert code == 0, out
    assert "shape [1, 1, 64, 96]" in out


def test_ppocr_recognizer_reshaped(
    capsys: pytest.CaptureFixture[str], rapidocr_model: Callable[[str], Path]
) -> None:
    model = rapidocr_model("ch_PP-OCRv4_rec_infer.onnx")
    code, out, _ = cli(capsys, "compare", model, "--shape", "x=1,3,48,160")
    assert code == 0, out
    assert "shape [1, 20, 6625]" in out
    runner = Runner(model, shapes={"x": [1, 3, 48, 160]})
    assert runner.info().inputs[0].shape == "[1,3,48,160]"
    with pytest.raises(Exception, match=r"expects shape \[1,3,48,160\]"):
        runner.infer({"x": np.zeros((1, 3, 48, 100), np.float32)})


def test_ppocr_classifier_bench_dynamic_defaults(
    capsys: pytest.CaptureFixture[str], rapidocr_model: Callable[[str], Path]
) -> None:
    model = rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx")
    code, out, _ = cli(capsys, "bench", model, "--iterations", "5", "--no-progress")
    assert code == 0
    assert "x=[1, 3, 224, 224]" in out  # the documented defaults for unknown dims


# -- silero-vad: variants OpenVINO cannot convert, and one it can -------------------------
def test_silero_conversion_failure_names_op_and_node(
    capsys: pytest.CaptureFixture[str], silero_model: Callable[[str], Path]
) -> None:
    model = silero_model("silero_vad.onnx")
    with pytest.raises(ConversionError) as exc:
        Runner(model).info()
    ops = {op for op, _, _ in exc.value.failures}
    assert {"Conv (opset 16)", "ReduceMean (opset 16)"} <= ops
    conv = next(f for f in exc.value.failures if f[0].startswith("Conv"))
    assert "If_0_then_branch" in conv[1]  # the node sits inside an If branch
    assert "rank has to be known" in conv[2]
    code, _, err = cli(capsys, "info", model)
    assert code == 2
    assert "cannot convert" in err and "op Conv (opset 16) at node" in err
    assert "Traceback" not in err


def test_silero_ifless_variant_matches_onnxruntime(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, silero_model: Callable[[str], Path]
) -> None:
    model = silero_model("silero_vad_op18_ifless.onnx")
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "in.npz",
        input=(rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
        sr=np.array(16000, dtype=np.int64),
        state=np.zeros((2, 1, 128), np.float32),
    )
    code, out, _ = cli(capsys, "compare", model, "--input", tmp_path / "in.npz")
    assert code == 0, out
    assert "PASS output" in out and "PASS stateN" in out
