"""The package README's example runs as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[2] / "packages" / "openvino-runner" / "README.md"

pytestmark = pytest.mark.usefixtures("openvino_available")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)


def run_shell(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a README bash block with `bash -eu`, `python` and `openvino-runner` taken from
    this interpreter's environment."""
    scripts = os.pathsep.join([sysconfig.get_path("scripts"), str(Path(sys.executable).parent)])
    env = dict(os.environ, PATH=f"{scripts}{os.pathsep}{os.environ['PATH']}")
    bash = shutil.which("bash", path=env["PATH"])
    assert bash is not None, "the README test needs bash"
    return subprocess.run(
        [bash, "-euc", block], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.skipif(
    sys.platform == "win32",
    reason="the example is a POSIX shell script (a heredoc); on Windows `bash` on PATH is "
    "often System32's WSL launcher, not a shell that can run it",
)
def test_readme_example_runs(tmp_path: Path) -> None:
    (shell,) = [b for b in blocks("bash") if "ov.save_model" in b]
    result = run_shell(shell, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[?,3,32,32]" in result.stdout and "INFERENCE_PRECISION_HINT" in result.stdout
    with np.load(tmp_path / "out.npz") as saved:
        assert saved["features"].shape == (2, 8, 32, 32)
    assert (tmp_path / "bench.json").is_file()
    (api,) = [b for b in blocks("python") if "runner.info()" in b]
    result = subprocess.run(
        [sys.executable, "-c", api], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "[2,3,32,32]" in result.stdout


def conv_model(path: Path) -> Path:
    """image f32[?,3,?,?] -> features = relu(conv3x3(image)), 8 channels: a stand-in for the
    README's model.onnx."""
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["features"]),
        ],
        "conv",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell commands")
def test_readme_deployment_commands_run(tmp_path: Path) -> None:
    (shell,) = [b for b in blocks("bash") if "convert model.onnx" in b]
    assert len([line for line in shell.splitlines() if line.strip()]) == 3  # three commands
    conv_model(tmp_path / "model.onnx")
    result = run_shell(shell, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the IR matches the source" in result.stdout
    assert "all outputs match" in result.stdout and "throughput:" in result.stdout
    assert "image                            f32    [1,3,64,64]" in result.stdout
    (api,) = [b for b in blocks("python") if "convert_model(" in b]
    result = subprocess.run(
        [sys.executable, "-c", api], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("True {")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model.bin",
        "model.onnx",
        "model.xml",
        "model16.bin",
        "model16.xml",
    ]
