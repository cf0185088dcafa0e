"""Step 1: a small CNN with DeformConv2d layers, exported three ways, the native file lowered.

Uses deform-conv2d-onnx-exporter the way a user would: its Python API to export, its
console script to lower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import say, sh, tool

from .report import Settings, Summary


def build_model(settings: Settings) -> Any:
    """A small CNN with three DeformConv2d layers whose offsets and masks are predicted."""
    import torch
    from torch import nn
    from torchvision.ops import DeformConv2d

    class DeformBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, offset_groups: int) -> None:
            super().__init__()
            k = 3
            self.offset = nn.Conv2d(cin, 2 * offset_groups * k * k, 3, stride, 1)
            self.mask = nn.Conv2d(cin, offset_groups * k * k, 3, stride, 1)
            self.conv = DeformConv2d(cin, cout, k, stride=stride, padding=1)
            self.act = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # Offsets of a few pixels: many samples land between pixels and some outside.
            offset = 4.0 * torch.tanh(self.offset(x))
            mask = torch.sigmoid(self.mask(x))
            return self.act(self.conv(x, offset, mask))

    c = settings.channels
    torch.manual_seed(0)
    # A dense-prediction head (per-pixel logits): errors are measured on a full feature map.
    model = nn.Sequential(
        nn.Conv2d(3, c, 3, 1, 1),
        nn.ReLU(),
        DeformBlock(c, c, 1, 1),
        DeformBlock(c, 2 * c, 2, 2),
        DeformBlock(2 * c, 2 * c, 1, 4),
        nn.Conv2d(2 * c, 10, 1),
    )
    # He initialisation keeps activations of order 1 through the layers, so the errors
    # reported against PyTorch are relative to outputs of a meaningful size.
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, DeformConv2d)):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
    return model.eval()


def export_models(settings: Settings, summary: Summary) -> dict[str, Path]:
    import deform_conv2d_onnx_exporter as dce
    import numpy as np
    import onnx
    import torch

    out = settings.out / "models"
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(settings)
    x = torch.randn(1, 3, settings.size, settings.size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(x).numpy()
    np.save(out / "input.npy", x.numpy())
    np.save(out / "reference.npy", reference)
    summary.facts["reference output"] = {
        "shape": list(reference.shape),
        "max_abs": float(np.abs(reference).max()),
        "mean_abs": float(np.abs(reference).mean()),
    }

    files = {
        "torchscript-decomposed": out / "torchscript_decomposed.onnx",
        "dynamo-native": out / "dynamo_native.onnx",
        "dynamo-decomposed": out / "dynamo_decomposed.onnx",
        "native-lowered": out / "native_lowered.onnx",
    }
    # Registration patches torch.onnx.export process-wide (the 1.2.0 contract); undo it so
    # whatever runs next in this process (tests/integration runs the demo in-process) meets
    # torch's own exporter.
    dce.register_deform_conv2d_onnx_op()
    try:
        torch.onnx.export(
            model,
            (x,),
            str(files["torchscript-decomposed"]),
            dynamo=False,
            opset_version=16,
            input_names=["x"],
            output_names=["logits"],
            dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )
    finally:
        dce.unregister_deform_conv2d_onnx_op()
    dce.export(model, (x,), files["dynamo-native"], opset_version=19, input_names=["x"])
    dce.export(
        model,
        (x,),
        files["dynamo-decomposed"],
        opset_version=19,
        decompose=True,
        input_names=["x"],
    )
    sh([tool("deform-conv2d-onnx"), "lower", files["dynamo-native"], "-o", files["native-lowered"]])
    for label, path in files.items():
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto, full_check=True)
        ops = [n.op_type for n in proto.graph.node]
        summary.facts.setdefault("models", {})[label] = {
            "file": str(path.relative_to(settings.out)),
            "nodes": len(ops),
            "DeformConv nodes": ops.count("DeformConv"),
            "bytes": path.stat().st_size,
        }
        say(f"    {label}: {len(ops)} nodes, {ops.count('DeformConv')} DeformConv")
    return files
