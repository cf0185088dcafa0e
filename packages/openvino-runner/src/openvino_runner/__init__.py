"""Inspect, run, compare and benchmark models on OpenVINO.

Importing this package does not import OpenVINO; the first model read does.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from openvino_runner.benchmark import BenchmarkResult
from openvino_runner.convert import CheckResult, ConversionReport, convert_model
from openvino_runner.deformconv import deform_conv_extension
from openvino_runner.errors import (
    ConversionError,
    InputError,
    MissingDependencyError,
    ModelFileError,
    RunnerError,
)
from openvino_runner.inputs import ImageOptions, InputSpec
from openvino_runner.runner import ModelInfo, PortInfo, Runner

try:
    __version__: str = version("openvino-runner")
except PackageNotFoundError:  # running from a source tree or a bundle without metadata
    __version__ = "0.0.0"

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
