"""The Runner's data walk: inputs are prepared once and prepared inputs run as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openvino_runner import InputError, Runner
from ovr_testmodels import two_input_model

pytestmark = pytest.mark.usefixtures("openvino_available")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return two_input_model(tmp_path / "two.onnx")


@pytest.fixture
def prepare_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of inputs.prepare_inputs as the runner sees it."""
    import openvino_runner.runner as runner_module

    calls: list[int] = []
    real = runner_module.prepare_inputs

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "prepare_inputs", counting)
    return calls


def test_compare_prepares_once(model: Path, prepare_calls: list[int]) -> None:
    from openvino_runner.compare import compare_with_onnxruntime

    report = compare_with_onnxruntime(Runner(model, shapes={"a": [2, 4], "b": [2, 4]}))
    assert report.passed
    assert len(prepare_calls) == 1


def test_infer_and_benchmark_prepare_once(model: Path, prepare_calls: list[int]) -> None:
    runner = Runner(model)
    a = np.ones((3, 4), np.float32)
    b = np.full((3, 4), 2, np.int64)
    y, _ = runner.infer({"a": a, "b": b}).values()
    np.testing.assert_array_equal(y, a * 2 + b)
    assert len(prepare_calls) == 1
    runner.benchmark(iterations=3, inputs={"a": a, "b": b})
    assert len(prepare_calls) == 2


def test_run_refuses_feeds_that_miss_an_input(model: Path) -> None:
    # OpenVINO may run a dict that misses an input on uninitialised memory: run() refuses it
    runner = Runner(model)
    with pytest.raises(InputError, match=r"one prepared array per input \('a', 'b'\), got 'a'"):
        runner.run({"a": np.ones((1, 4), np.float32)})
    feeds = runner.prepare(seed=3)
    np.testing.assert_array_equal(runner.run(feeds)["z"], np.maximum(feeds["a"], 0))
