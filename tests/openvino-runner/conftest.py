"""Shared fixtures for openvino-runner: real models built or found offline.

Models come from four places, none a model hub: graphs built here with onnx.helper, torch
modules exported here (random weights), the `onnx` wheel's light backend models, and the
ONNX files inside two PyPI wheels (rapidocr-openvino, silero-vad). Those wheels are not
installed by tools/test (rapidocr-openvino pins openvino<=2024.0 and silero-vad pulls
torchaudio, both of which would break the environment): `wheel_member` takes the file from
an installed copy when there is one, else from `pip download --no-deps` into a cache
folder (``$OPENVINO_RUNNER_TEST_CACHE`` or ``~/.cache/openvino-runner-tests``).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from components import missing, require_module

# Model builders shared by several test files live next to this file (ovr_testmodels.py);
# pytest's importlib mode does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Wheels whose bundled ONNX files the tests use, pinned so the models never change.
RAPIDOCR = ("rapidocr-openvino", "1.4.4")
SILERO = ("silero-vad", "6.2.3")


def _cache_dir() -> Path:
    base = os.environ.get("OPENVINO_RUNNER_TEST_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "openvino-runner-tests"


def wheel_member(dist: str, version: str, member: str) -> Path:
    """Path of *member* (e.g. ``silero_vad/data/silero_vad.onnx``) from *dist*==*version*."""
    try:
        if importlib.metadata.version(dist) == version:
            installed = Path(str(importlib.metadata.distribution(dist).locate_file(member)))
            if installed.is_file():
                return installed
    except importlib.metadata.PackageNotFoundError:
        pass
    folder = _cache_dir() / f"{dist}-{version}"
    target = folder / member
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    wheels = list(folder.glob("*.whl"))
    if not wheels:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(folder),
                f"{dist}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        wheels = list(folder.glob("*.whl"))
        if result.returncode != 0 or not wheels:
            missing(f"{dist}=={version} wheel", f"pip download failed: {result.stderr[-500:]}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extract(member, folder)
    return target


@pytest.fixture(scope="session")
def openvino_available() -> None:
    require_module("openvino")


@pytest.fixture(scope="session")
def torch_modules() -> tuple[object, object]:
    return require_module("torch"), require_module("torchvision")


ExportOnnx = Callable[..., Path]


@pytest.fixture(scope="session")
def export_onnx(tmp_path_factory: pytest.TempPathFactory, torch_modules: object) -> ExportOnnx:
    """``export_onnx(module, example_shape, name, input, output)``: the dynamo exporter's
    ONNX file (one file, no external data) of *module* in eval mode."""

    def export(
        module: object, shape: tuple[int, ...], name: str, input_name: str, output_name: str
    ) -> Path:
        import torch

        path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
        torch.onnx.export(
            module.eval(),  # type: ignore[attr-defined]
            (torch.randn(*shape),),
            str(path),
            dynamo=True,
            input_names=[input_name],
            output_names=[output_name],
            external_data=False,
            verbose=False,
        )
        return path

    return export


@pytest.fixture(scope="session")
def resnet18_onnx(export_onnx: ExportOnnx) -> Path:
    """torchvision resnet18 with seeded random weights."""
    import torch
    import torchvision

    torch.manual_seed(0)
    return export_onnx(
        torchvision.models.resnet18(), (1, 3, 224, 224), "resnet18", "image", "logits"
    )


@pytest.fixture(scope="session")
def dynamo_deform_model(export_onnx: Callable[..., Path]) -> Path:
    """A torchvision DeformConv2d block exported by torch.onnx.export(dynamo=True)."""
    import torch
    import torchvision

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.offset = torch.nn.Conv2d(4, 2 * 2 * 9, 3, padding=1)
            self.mask = torch.nn.Conv2d(4, 2 * 9, 3, padding=1)
            self.deform = torchvision.ops.DeformConv2d(4, 8, 3, padding=1, groups=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.deform(x, self.offset(x) * 4, torch.sigmoid(self.mask(x)))

    torch.manual_seed(0)
    return export_onnx(Block(), (1, 4, 12, 12), "deform_block", "x", "y")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def rapidocr_model() -> Callable[[str], Path]:
    """``rapidocr_model("ch_PP-OCRv4_det_infer.onnx")``: a PP-OCR model from the wheel."""
    return lambda name: wheel_member(*RAPIDOCR, f"rapidocr_openvino/models/{name}")


@pytest.fixture(scope="session")
def silero_model() -> Callable[[str], Path]:
    """``silero_model("silero_vad.onnx")``: a silero-vad model from the wheel."""
    return lambda name: wheel_member(*SILERO, f"silero_vad/data/{name}")
