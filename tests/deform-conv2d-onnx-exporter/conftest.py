"""Fixtures for the deform-conv2d-onnx-exporter tests (helpers live in dcn_support.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from components import require_module

# The helpers module sits next to this file; pytest's importlib mode does not add it.
sys.path.insert(0, str(Path(__file__).parent))

from dcn_support import RUNTIMES


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    if request.param == "openvino":
        require_module("openvino")
    return str(request.param)


@pytest.fixture(autouse=True)
def _unregister_after_each_test() -> Iterator[None]:
    """Registration patches ``torch.onnx.export`` process-wide (as 1.2.0's did for the
    TorchScript exporter); undo it after every test so the next test, or another package's
    tests in the same pytest run, meet torch's own exporter."""
    yield
    if "torch" in sys.modules:
        from deform_conv2d_onnx_exporter import unregister_deform_conv2d_onnx_op

        unregister_deform_conv2d_onnx_op()
