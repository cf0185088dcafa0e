"""Export torchvision DeformConv2d to ONNX and lower ONNX DeformConv nodes to standard operators."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("deform-conv2d-onnx-exporter")
except PackageNotFoundError:  # running from a source tree or a bundle without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
