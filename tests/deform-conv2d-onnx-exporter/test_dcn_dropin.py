"""The 1.2.0 README's usage, unchanged, on today's torch: plain ``torch.onnx.export``.

After ``register_deform_conv2d_onnx_op()`` a plain ``torch.onnx.export`` call - the dynamo
exporter (torch's default) or ``dynamo=False``, with or without ``opset_version`` - writes a
valid model that matches torchvision in onnxruntime and OpenVINO, or raises before writing.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from dcn_support import run_model

# The 1.2.0 README's example, word for word except for the `x` placeholders (which it leaves
# to the reader) and the exporter arguments the test varies: {extra}.
README_120 = """
import torch.onnx
from torchvision.ops.deform_conv import DeformConv2d
import deform_conv2d_onnx_exporter

deform_conv2d_onnx_exporter.register_deform_conv2d_onnx_op({register})

model = DeformConv2d(6, 8, 3, padding=1)
input_names = ["input", "offset"]
output_names = ["output"]
input_params = (
    torch.rand([1, 6, 12, 15]),  # input
    torch.randn([1, 18, 12, 15]), # offset
)
torch.onnx.export(model,
                  input_params,
                  "output.onnx",
                  input_names=input_names,
                  output_names=output_names{extra})
"""


@pytest.fixture(autouse=True)
def _restore_torch_onnx_export() -> Iterator[None]:
    import torch.onnx

    original = torch.onnx.export
    yield
    torch.onnx.export = original


def run_readme(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arguments: dict[str, str],
    register: str = "",
) -> dict[str, Any]:
    """Run the README's example in *tmp_path*; *arguments* (name: source text) are added to
    its ``torch.onnx.export`` call."""
    import torch

    extra = "".join(f",\n                  {name}={value}" for name, value in arguments.items())
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    scope: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(README_120.format(extra=extra, register=register), scope)
    return scope


def check_against_torchvision(scope: dict[str, Any], path: Path, runtime: str) -> onnx.ModelProto:
    import torch

    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert "DeformConv" not in {n.op_type for n in model.graph.node}
    x, offset = scope["input_params"]
    offset = offset * 3  # large offsets: many taps fall outside the image
    with torch.no_grad():
        want = scope["model"](x, offset).numpy()
    got = run_model(runtime, model, {"input": x.numpy(), "offset": offset.numpy()})
    assert got.shape == want.shape
    error = float(np.abs(got - want).max())
    assert error <= 1e-5, f"{runtime}: max abs error {error:.3g}"
    return model


@pytest.mark.parametrize("opset", [12, 16, 18, 20, None])
@pytest.mark.parametrize("dynamo", [None, False], ids=["dynamo-default", "dynamo-False"])
def test_readme_120_example_unchanged(
    opset: int | None,
    dynamo: bool | None,
    runtime: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arguments = {} if opset is None else {"opset_version": str(opset)}
    if dynamo is not None:
        arguments["dynamo"] = str(dynamo)
    scope = run_readme(tmp_path, monkeypatch, arguments)
    model = check_against_torchvision(scope, tmp_path / "output.onnx", runtime)
    assert model.opset_import[0].version == (opset or 20)


@pytest.mark.parametrize("dynamo", [None, False], ids=["dynamo-default", "dynamo-False"])
def test_readme_120_flags_are_accepted(
    dynamo: bool | None, runtime: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arguments = {"opset_version": "16"}
    if dynamo is not None:
        arguments["dynamo"] = str(dynamo)
    register = "use_gathernd=False, enable_openvino_patch=True"
    scope = run_readme(tmp_path, monkeypatch, arguments, register)
    check_against_torchvision(scope, tmp_path / "output.onnx", runtime)


@pytest.mark.parametrize("version", ["2.14"])
def test_dropin_is_tested_on_each_supported_torch(version: str) -> None:
    """One entry per version in SUPPORTED_TORCH; the README tests above ran on this one."""
    from deform_conv2d_onnx_exporter import dropin

    assert {f"{a}.{b}" for a, b in dropin.SUPPORTED_TORCH} == {"2.14"}
    installed = "{}.{}".format(*dropin.torch_version())
    if installed != version:
        pytest.skip(f"torch {installed} is installed, not {version}")
    assert dropin.unsupported_reason() is None


def test_untested_torch_fails_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deform_conv2d_onnx_exporter import dropin
    from deform_conv2d_onnx_exporter.dynamo import ExportError

    monkeypatch.setattr(dropin, "SUPPORTED_TORCH", ((2, 99),))
    pattern = r"tested on torch 2\.99.*dynamo=False.*nothing was written"
    with pytest.raises(ExportError, match=pattern):
        run_readme(tmp_path, monkeypatch, {})
    assert not (tmp_path / "output.onnx").exists()


# Export arguments the drop-in refuses before writing: (arguments, error, message).
REFUSED = {
    "dynamic-shapes-below-opset-14": (
        {
            "opset_version": "12",
            "dynamic_shapes": "({0: torch.export.Dim.AUTO}, {0: torch.export.Dim.AUTO})",
        },
        "OpsetConversionError",
        # Decided before torch runs (no torch traceback first).
        r"cannot write a dynamic-shape model at opset 12.*opset_version >= 15.*nothing was written",
    ),
    # A caller's own table entry wins; an invalid result is still refused.
    "native-translation-below-19": (
        {
            "opset_version": "18",
            "custom_translation_table": "{torch.ops.torchvision.deform_conv2d.default: native}",
        },
        "ExportError",
        r"holds ONNX DeformConv at opset 18.*nothing was written",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_before_writing(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from deform_conv2d_onnx_exporter import dynamo
    from onnxscript.function_libs.torch_lib.ops.vision import torchvision_deform_conv2d

    # `native` in the table: onnxscript's own translation, which writes ONNX DeformConv.
    monkeypatch.setattr(builtins, "native", torchvision_deform_conv2d, raising=False)
    arguments, error, pattern = REFUSED[name]
    with pytest.raises(getattr(dynamo, error), match=pattern):
        run_readme(tmp_path, monkeypatch, arguments)
    assert not (tmp_path / "output.onnx").exists()


def test_export_handles_a_data_dependent_branch(runtime: str, tmp_path: Path) -> None:
    """EDVR's DCN layer logs when offsets are large: a branch on tensor data.

    torch.export stops on it (GuardOnDataDependentSymNode); ``export`` falls back to
    ``torch.export.draft_export``, made fresh for each export (a draft program cannot serve
    two), so exporting the same module twice works too.
    """
    import logging

    import torch
    import torchvision
    from deform_conv2d_onnx_exporter import export

    class LoggingDCN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.offsets = torch.nn.Conv2d(4, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(4, 6, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.offsets(x)
            offset, mask = out[:, :18] * 3, torch.sigmoid(out[:, 18:])
            offset_absmean = torch.mean(torch.abs(offset))
            if offset_absmean > 50:
                logging.getLogger("edvr").warning("Offset abs mean is %s", offset_absmean)
            return self.dcn(x, offset, mask)

    net = LoggingDCN().eval()
    x = torch.randn(1, 4, 10, 12)
    with torch.no_grad():
        want = net(x).numpy()
    for attempt in range(2):
        path = tmp_path / f"edvr_{attempt}.onnx"
        with pytest.warns(UserWarning, match="draft_export"):
            export(net, (x,), path, opset_version=18, input_names=["x"])
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        got = run_model(runtime, model, {"x": x.numpy()})
        assert float(np.abs(got - want).max()) <= 1e-5


def test_readme_120_call_at_opset_12_prints_one_warning_only(tmp_path: Path) -> None:
    """Below opset 14 the wrapper picks dynamo=False before torch runs: no torch traceback
    ("No Adapter From Version $14 for Reshape"), one warning saying so, a valid file."""
    import subprocess
    import sys

    code = README_120.format(register="", extra=",\n                  opset_version=12")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "Adapter" not in output, output
    warnings_seen = [line for line in output.splitlines() if "Warning:" in line]
    assert len(warnings_seen) == 1, output
    assert "exporting with dynamo=False" in warnings_seen[0]
    model = onnx.load(tmp_path / "output.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 12
