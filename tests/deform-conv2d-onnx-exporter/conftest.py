"""Fixtures for the deform-conv2d-onnx-exporter tests (helpers live in dcn_support.py)."""

from __future__ import annotations

import sys
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
