"""quantize: real NNCF post-training INT8 on small models, its accuracy cost and speed-up."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from components import require_module
from ovr_testmodels import cli, conv_net
from PIL import Image

pytestmark = pytest.mark.usefixtures("openvino_available")

FAST = ("--rounds", "1", "--time", "0.2")


@pytest.fixture(scope="module")
def nncf_available() -> None:
    require_module("nncf")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return conv_net(tmp_path / "net.onnx")


def calibration(path: Path, count: int = 12, size: int = 16) -> Path:
    """*count* samples for conv_net, stacked (N, 1, 3, size, size)."""
    data = np.random.default_rng(0).random((count, 1, 3, size, size), dtype=np.float32)
    np.savez(path, image=data)
    return path


@pytest.mark.usefixtures("nncf_available")
def test_quantize_writes_int8_and_reports_cost_and_speed(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    import openvino as ov
    from openvino_runner.benchmark import cpu_flags

    out = tmp_path / "int8.xml"
    code, stdout, err = cli(
        capsys, "quantize", model, "--shape", "1,3,16,16", "-o", out,
        "--data", calibration(tmp_path / "calib.npz"), "--held-out", "4", *FAST, "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(stdout)  # NNCF's progress went to stderr, never into the JSON
    assert report["calibration_samples"] == 8 and report["held_out_samples"] == 4
    assert report["fake_quantize_ops"] >= 2  # both convolutions' inputs quantized
    (pooled,) = report["outputs"]
    assert pooled["top1_agreement"] is not None  # (1, 16, 1, 1) is classifier-shaped
    assert report["drop"] == pytest.approx(1 - pooled["top1_agreement"])
    assert 0.99 < pooled["worst_cosine"] <= 1.0 and pooled["max_abs"] > 0  # INT8 is not exact
    for speed in (report["f32"], report["int8"]):
        assert speed["latency_ms"] > 0 and speed["throughput_fps"] > 0
    assert report["latency_speedup"] == pytest.approx(
        report["f32"]["latency_ms"] / report["int8"]["latency_ms"]
    )
    assert report["cpu"]["flags"] == cpu_flags() and report["passed"]
    assert "speed-up: latency" in err and "top-1 agree" in err
    # the IR is plain OpenVINO, and its convolutions really run in INT8
    ov.Core().read_model(str(out))
    code, stdout, err = cli(capsys, "profile", out, "-n", "2", "--json", "-")
    assert code == 0, err
    convs = [layer for layer in json.loads(stdout)["layers"] if layer["type"] == "Convolution"]
    assert convs and {layer["precision"] for layer in convs} <= {"i8", "u8"}, convs
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "calib.npz", "int8.bin", "int8.xml", "net.onnx"
    ]  # fmt: skip


@pytest.mark.usefixtures("nncf_available")
def test_max_drop_exit_status(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rng: np.random.Generator
) -> None:
    """A feature-map output (not a classifier): drop = 1 - worst cosine, > 0 after INT8."""
    from onnx import TensorProto, helper, numpy_helper

    weights = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["features"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w")],
    )
    model = tmp_path / "conv.onnx"
    model.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    data = calibration(tmp_path / "calib.npz")
    args = ("quantize", model, "-o", tmp_path / "q.xml", "--data", data, *FAST, "--json", "-")
    code, stdout, err = cli(capsys, *args, "--max-drop", "0")
    report = json.loads(stdout)
    assert report["outputs"][0]["top1_agreement"] is None
    assert report["drop"] == pytest.approx(1 - report["outputs"][0]["worst_cosine"])
    assert report["drop"] > 0 and not report["passed"]
    assert code == 1 and "DROP TOO LARGE" in err
    code, stdout, err = cli(capsys, *args, "--max-drop", "0.5")
    assert code == 0 and json.loads(stdout)["passed"] and "within --max-drop" in err


@pytest.mark.usefixtures("nncf_available")
def test_calibration_from_a_folder_of_images(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    from openvino_runner import Runner
    from openvino_runner.quantize import load_samples

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for i in range(5):
        pixels = rng.integers(0, 256, size=(20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels, "RGB").save(folder / f"{i}.png")
    (folder / "notes.txt").write_text("not an image: skipped")
    runner = Runner(model, shapes={"image": [1, 3, 16, 16]})
    samples = load_samples(runner.input_specs(), folder)
    assert len(samples) == 5 and samples[0]["image"].shape == (1, 3, 16, 16)
    assert samples[0]["image"].max() > 1  # 0-255 pixels: no --scale given
    code, out, err = cli(
        capsys, "quantize", model, "--shape", "1,3,16,16", "-o", tmp_path / "q.xml",
        "--data", folder, "--scale", "255", *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert "4 calibration samples" in out and "accuracy on 1 held-out samples" in out


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("gone.npz", "does not exist"),
        ("wrong.npz", "no array named 'image'"),
        ("extra.npz", "an array 'foo'; the model's inputs are 'image'"),
        ("renamed.npz", "no array named 'image'"),
        ("one.npz", "at least 2 are needed"),
        ("bad.npy", "give samples stacked as (N, ...)"),
        ("model.onnx", "expected a folder of images, an .npy or an .npz"),
    ],
)
def test_bad_calibration_data(
    capsys: pytest.CaptureFixture[str],
    model: Path,
    tmp_path: Path,
    data: str,
    message: str,
    nncf_available: None,
) -> None:
    np.savez(tmp_path / "wrong.npz", x=np.zeros((3, 1, 3, 16, 16), np.float32), y=np.zeros(3))
    np.savez(tmp_path / "one.npz", image=np.zeros((1, 1, 3, 16, 16), np.float32))
    stack = np.zeros((3, 1, 3, 16, 16), np.float32)
    np.savez(tmp_path / "extra.npz", image=stack, foo=stack)
    np.savez(tmp_path / "renamed.npz", foo=stack)  # matched by name: not taken for 'image'
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), np.float32))
    path = model if data == "model.onnx" else tmp_path / data
    code, _, err = cli(
        capsys, "quantize", model, "--shape", "1,3,16,16", "-o", tmp_path / "q.xml",
        "--data", path,
    )  # fmt: skip
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "q.xml").exists()


def test_quantize_without_nncf_says_how_to_install(
    capsys: pytest.CaptureFixture[str],
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "nncf", None)  # import fails as if not installed
    code, _, err = cli(
        capsys,
        "quantize",
        model,
        "-o",
        tmp_path / "q.xml",
        "--data",
        calibration(tmp_path / "c.npz"),
    )
    assert code == 2 and "pip install 'openvino-runner[quantize]'" in err


def test_ignored_scope_kind_is_checked(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    code, _, err = cli(
        capsys, "quantize", model, "-o", tmp_path / "q.xml", "--data", tmp_path,
        "--ignored-scope", "layer=c1",
    )  # fmt: skip
    assert code == 2 and "KIND is name, type or pattern" in err
