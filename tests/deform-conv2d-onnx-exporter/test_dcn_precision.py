"""Precision with large offsets (~11 px, as in BasicVSR++) against a float64 torch run.

A residual stack of modulated deformable layers (16 offset groups) amplifies sampling-position
errors the way a recurrent network does. The bound is relative to torch's own float32 error
on the same input (the native kernels' order). The GridSample graph works in normalised
coordinates, which cost a few extra float32 roundings of each position (the runtime maps
``g`` back to pixels): measured 1.06-1.08x torch's error here in both runtimes; the GatherND
variant, which works in pixels, matches torch exactly.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from dcn_support import run_model


@pytest.fixture(scope="module")
def stack() -> tuple[object, dict[str, np.ndarray], np.ndarray, float]:
    import torch
    import torchvision

    torch.manual_seed(0)
    channels, offset_groups, height, width = 32, 16, 64, 128

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torchvision.ops.DeformConv2d(channels, channels, 3, padding=1) for _ in range(4)
            )

        def forward(
            self, x: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor
        ) -> torch.Tensor:
            for layer in self.layers:
                x = torch.relu(layer(x, offset, mask)) + x
            return x

    net = Stack().eval()
    x = torch.randn(1, channels, height, width)
    offset = (torch.rand(1, offset_groups * 18, height, width) * 2 - 1) * 11
    mask = torch.sigmoid(torch.randn(1, offset_groups * 9, height, width))
    with torch.no_grad():
        reference = net.double()(x.double(), offset.double(), mask.double()).numpy()
        net.float()
        torch_error = float(np.abs(net(x, offset, mask).numpy() - reference).max())
    feeds = {"x": x.numpy(), "offset": offset.numpy(), "mask": mask.numpy()}
    return net, feeds, reference, torch_error


@pytest.mark.parametrize(
    ("variant", "bound"), [(None, 1.25), ("gathernd", 1.05)], ids=["gridsample", "gathernd"]
)
def test_large_offsets_against_float64(
    stack: tuple[object, dict[str, np.ndarray], np.ndarray, float],
    variant: str | None,
    bound: float,
    runtime: str,
) -> None:
    import torch
    from deform_conv2d_onnx_exporter import export

    net, feeds, reference, torch_error = stack
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = export(
            net,
            tuple(torch.from_numpy(feeds[k]) for k in ("x", "offset", "mask")),
            opset_version=20,
            decompose=True,
            variant=variant,
            input_names=["x", "offset", "mask"],
        )
    error = float(np.abs(run_model(runtime, model, feeds) - reference).max())
    assert error <= bound * torch_error, (
        f"{runtime}: max abs error {error:.3g} vs float64, torch float32's own {torch_error:.3g}"
    )


@pytest.mark.parametrize(("opset", "dynamo"), [(13, False), (16, False), (18, True)])
def test_a_half_module_exports_float16_graphs(opset: int, dynamo: bool, runtime: str) -> None:
    """The README's float16 advice: export the ``.half()`` module (both variants, both
    exporters); the graph is float16 end to end and within float16's rounding of float32."""
    import onnx
    from dcn_support import CASES
    from deform_conv2d_onnx_exporter import export

    case = CASES[0]
    module = case.torch_module().half()
    args = tuple(a.half() for a in case.example_args())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = export(
            module, args, opset_version=opset, decompose=True, dynamo=dynamo,
            input_names=case.input_names(),
        )  # fmt: skip
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    feeds = case.inputs()
    want = case.reference(feeds)  # float32 torchvision
    got = run_model(runtime, model, {k: v.astype(np.float16) for k, v in feeds.items()})
    assert got.dtype == np.float16
    # float16 has 11 significant bits: ~1e-3 relative per rounding on outputs of ~1-10.
    assert float(np.abs(got.astype(np.float32) - want).max()) <= 1e-2 * np.abs(want).max()
