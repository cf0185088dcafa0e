"""Inspect, run, compare, profile and benchmark models on OpenVINO.

Importing this package imports nothing heavy (not numpy, not OpenVINO): the public names
are loaded on first use (PEP 562), so ``openvino-runner --help`` answers at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from openvino_runner.errors import (
    ConversionError,
    InputError,
    MissingDependencyError,
    ModelFileError,
    RunnerError,
)

if TYPE_CHECKING:
    __version__: str

    from openvino_runner.benchmark import BenchmarkResult
    from openvino_runner.convert import CheckResult, ConversionReport, convert_model
    from openvino_runner.deformconv import deform_conv_extension
    from openvino_runner.inputs import ImageOptions, InputSpec
    from openvino_runner.runner import ModelInfo, PortInfo, Runner

# Public name -> the module that defines it (imported when the name is first asked for).
_LAZY = {
    "BenchmarkResult": "benchmark",
    "CheckResult": "convert",
    "ConversionReport": "convert",
    "convert_model": "convert",
    "deform_conv_extension": "deformconv",
    "ImageOptions": "inputs",
    "InputSpec": "inputs",
    "ModelInfo": "runner",
    "PortInfo": "runner",
    "Runner": "runner",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openvino-runner")
    except PackageNotFoundError:  # a source tree or a bundle without metadata
        return "0.0.0"


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata alone costs ~50 ms: read it if asked
        value: Any = _version()
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'openvino_runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"openvino_runner.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "BenchmarkResult",
    "CheckResult",
    "ConversionError",
    "ConversionReport",
    "ImageOptions",
    "InputError",
    "InputSpec",
    "MissingDependencyError",
    "ModelFileError",
    "ModelInfo",
    "PortInfo",
    "Runner",
    "RunnerError",
    "__version__",
    "convert_model",
    "deform_conv_extension",
]
