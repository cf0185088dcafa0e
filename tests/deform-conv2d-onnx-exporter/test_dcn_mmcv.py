"""mmcv 2.x's own DCN layers export through our graph builder, without mmcv's compiled ops.

mmcv 2.2.0 is on PyPI as an sdist only. The test takes the ``mmcv/`` Python package out of
that sdist (pinned URL and SHA-256, cached under ``~/.cache``), puts a stand-in for the
compiled ``mmcv._ext`` in ``sys.modules`` (every op raises, as on a machine where mmcv's
ops were never built) and imports ``mmcv.ops``: the layers are mmcv's real code.

The layout proof uses mmcv's own test-suite values (open-mmlab/mmcv
``tests/test_ops/test_deform_conv.py`` and ``test_modulated_deform_conv.py``: fixed inputs,
weights, expected outputs and gradients; the numbers are copied below, the code is ours),
compared with mmcv's own tolerance there (``np.allclose(..., rtol=1e-3)``).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tarfile
import types
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from components import missing, require_module
from dcn_support import ATOL, check_valid, run_model

MMCV_VERSION = "2.2.0"
MMCV_SDIST_URL = (
    "https://files.pythonhosted.org/packages/e9/a2/"
    "57a733e7e84985a8a0e3101dfb8170fc9db92435c16afad253069ae3f9df/mmcv-2.2.0.tar.gz"
)
MMCV_SDIST_SHA256 = "ac479247e808d8802f89eadf04d4118de86bdfe81361ec5aed0cc1bf731c67c9"

# --- mmcv's test values (facts from open-mmlab/mmcv's test suite) ----------------------------
# test_deform_conv.py: DeformConv2dPack(1, 1, kernel_size=2), 3x3 input.
DC_INPUT = [[[[1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [3.0, 5.0, 2.0]]]]
DC_OFFSET_WEIGHT = [
    [[0.1, 0.4, 0.6, 0.1]], [[0.3, 0.2, 0.1, 0.3]], [[0.5, 0.5, 0.2, 0.8]],
    [[0.8, 0.3, 0.9, 0.1]], [[0.3, 0.1, 0.2, 0.5]], [[0.3, 0.7, 0.5, 0.3]],
    [[0.6, 0.2, 0.5, 0.3]], [[0.4, 0.1, 0.8, 0.4]],
]  # fmt: skip
DC_OFFSET_BIAS = [0.7, 0.1, 0.8, 0.5, 0.6, 0.5, 0.4, 0.7]
DC_WEIGHT = [[[0.4, 0.2, 0.1, 0.9]]]
DC_OUT = [[[[1.650, 0.0], [0.000, 0.0]]]]
DC_X_GRAD = [[[[-0.666, 0.204, 0.000], [0.030, -0.416, 0.012], [0.000, 0.252, 0.129]]]]
DC_OFFSET_WEIGHT_GRAD = [
    [[[1.44, 2.88], [0.00, 1.44]]], [[[-0.72, -1.44], [0.00, -0.72]]],
    [[[0.00, 0.00], [0.00, 0.00]]], [[[0.00, 0.00], [0.00, 0.00]]],
    [[[-0.10, -0.20], [0.00, -0.10]]], [[[-0.08, -0.16], [0.00, -0.08]]],
    [[[-0.54, -1.08], [0.00, -0.54]]], [[[-0.54, -1.08], [0.00, -0.54]]],
]  # fmt: skip
DC_OFFSET_BIAS_GRAD = [1.44, -0.72, 0.0, 0.0, -0.10, -0.08, -0.54, -0.54]
DC_WEIGHT_GRAD = [[[[3.62, 0.0], [0.40, 0.18]]]]
# test_modulated_deform_conv.py: ModulatedDeformConv2dPack(1, 1, (2, 2), padding=1,
# bias=False), weight filled with 1 (conv_offset starts at zero: offset 0, mask 0.5).
MDC_INPUT = [[[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]]]
MDC_OUT = [[[
    [0.5, 1.5, 2.5, 1.5], [1.0, 3.0, 5.0, 3.0], [1.0, 3.0, 5.0, 3.0], [0.5, 1.5, 2.5, 1.5],
]]]  # fmt: skip
MDC_X_GRAD = [[[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]]]
MDC_WEIGHT_GRAD = [[[[9.0, 9.0], [9.0, 9.0]]]]
MDC_OFFSET_WEIGHT_GRAD = [
    [[[-7.0, -4.0], [0.0, 0.0]]], [[[-9.0, 7.5], [-6.0, 5.0]]],
    [[[-4.0, -7.0], [0.0, 0.0]]], [[[-7.5, -9.0], [-5.0, -6.0]]],
    [[[-7.0, -4.0], [-7.0, -4.0]]], [[[-6.0, 5.0], [-9.0, 7.5]]],
    [[[-4.0, -7.0], [-4.0, -7.0]]], [[[-5.0, -6.0], [-7.5, -9.0]]],
    [[[10.5, 6.0], [7.0, 4.0]]], [[[6.0, 10.5], [4.0, 7.0]]],
    [[[7.0, 4.0], [10.5, 6.0]]], [[[4.0, 7.0], [6.0, 10.5]]],
]  # fmt: skip
MDC_OFFSET_BIAS_GRAD = [-3.0, -1.5, -3.0, -1.5, -3.0, -1.5, -3.0, -1.5, 4.5, 4.5, 4.5, 4.5]
#: mmcv's tolerance in those tests: np.allclose(actual, expected, 1e-3) (rtol).
MMCV_RTOL = 1e-3


class CompiledOpsMissing(RuntimeError):
    """What the stand-in ``mmcv._ext`` raises: mmcv's compiled ops are not built."""


def _cache_dir() -> Path:
    base = os.environ.get("DEFORM_CONV2D_TEST_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "deform-conv2d-onnx-exporter-tests"


def _mmcv_source() -> Path:
    """The folder holding mmcv 2.2.0's ``mmcv/`` package, from the sdist (downloaded once)."""
    folder = _cache_dir() / f"mmcv-{MMCV_VERSION}"
    if (folder / "mmcv" / "ops" / "modulated_deform_conv.py").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    sdist = folder.parent / f"mmcv-{MMCV_VERSION}.tar.gz"
    if not sdist.is_file() or hashlib.sha256(sdist.read_bytes()).hexdigest() != MMCV_SDIST_SHA256:
        partial = sdist.with_suffix(".part")
        try:
            with urllib.request.urlopen(MMCV_SDIST_URL, timeout=120) as response:
                partial.write_bytes(response.read())
        except OSError as exc:
            missing(f"mmcv {MMCV_VERSION} sdist", f"download of {MMCV_SDIST_URL} failed: {exc}")
        digest = hashlib.sha256(partial.read_bytes()).hexdigest()
        assert digest == MMCV_SDIST_SHA256, f"mmcv sdist SHA-256 {digest} is not the pinned one"
        partial.replace(sdist)
    staging = folder.with_name(f"{folder.name}.{os.getpid()}.extracting")
    shutil.rmtree(staging, ignore_errors=True)
    prefix = f"mmcv-{MMCV_VERSION}/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix + "mmcv/")]
        for member in members:
            member.name = member.name[len(prefix) :]
        archive.extractall(staging, members=members, filter="data")
    shutil.rmtree(folder, ignore_errors=True)
    staging.replace(folder)
    return folder


def _stub_ext() -> types.ModuleType:
    """A ``mmcv._ext`` whose every op raises, as where mmcv's ops were never compiled."""
    module = types.ModuleType("mmcv._ext")

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def op(*args: Any, **kwargs: Any) -> Any:
            raise CompiledOpsMissing(f"mmcv._ext.{name}: mmcv's ops are not compiled here")

        return op

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


@pytest.fixture(scope="module")
def mmcv_ops() -> Any:
    """mmcv.ops of mmcv 2.2.0's Python code, without its compiled ops."""
    for module, pip_name in [
        ("torch", "torch"),
        ("torchvision", "torchvision"),
        ("mmengine", "mmengine"),
        ("cv2", "opencv-python"),
    ]:
        require_module(module, pip_name)
    source = _mmcv_source()
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    sys.modules.setdefault("mmcv._ext", _stub_ext())
    import mmcv
    import mmcv.ops

    assert mmcv.__version__ == MMCV_VERSION
    assert Path(mmcv.__file__).is_relative_to(source), "another mmcv was imported"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mmcv.ops


def _dc_pack(ops: Any, dtype: Any) -> Any:
    import torch

    model = ops.DeformConv2dPack(1, 1, kernel_size=2, stride=1, padding=0, im2col_step=2)
    with torch.no_grad():
        model.conv_offset.weight.copy_(torch.tensor(DC_OFFSET_WEIGHT).reshape(8, 1, 2, 2))
        model.conv_offset.bias.copy_(torch.tensor(DC_OFFSET_BIAS))
        model.weight.copy_(torch.tensor(DC_WEIGHT).reshape(1, 1, 2, 2))
    return model.to(dtype).eval()


def _mdc_pack(ops: Any, dtype: Any) -> Any:
    import torch

    model = ops.ModulatedDeformConv2dPack(
        1, 1, kernel_size=(2, 2), stride=1, padding=1, deform_groups=1, bias=False
    )
    with torch.no_grad():
        model.weight.fill_(1.0)
    return model.to(dtype).eval()


def _close(actual: Any, expected: Any) -> bool:
    return bool(np.allclose(np.asarray(actual), np.asarray(expected), rtol=MMCV_RTOL))


def _torchvision_forward(model: Any, x: Any, swap: bool = False) -> Any:
    """mmcv's ``*Pack`` forward with torchvision's op in place of mmcv's compiled one."""
    import torch
    import torchvision

    out = model.conv_offset(x)
    if hasattr(model, "im2col_step"):  # DeformConv2dPack
        offset, mask = out, None
    else:  # ModulatedDeformConv2dPack
        o1, o2, m = torch.chunk(out, 3, dim=1)
        offset, mask = torch.cat((o1, o2), dim=1), torch.sigmoid(m)
    if swap:  # (dx, dy) pairs instead of (dy, dx): must not match mmcv
        offset = offset.reshape(offset.shape[0], -1, 2, *offset.shape[2:]).flip(2)
        offset = offset.reshape(out.shape[0], -1, *out.shape[2:])
    return torchvision.ops.deform_conv2d(
        x, offset, model.weight, model.bias if mask is not None else None,
        stride=model.stride, padding=model.padding, dilation=model.dilation, mask=mask,
    )  # fmt: skip


@pytest.mark.parametrize("layer", ["DeformConv2dPack", "ModulatedDeformConv2dPack"])
def test_mmcv_test_values_through_torchvision(mmcv_ops: Any, layer: str) -> None:
    """mmcv's layout is torchvision's: its expected outputs and gradients, in float64."""
    import torch

    batch = 4  # divisible by im2col_step=2, as mmcv asserts
    if layer == "DeformConv2dPack":
        model = _dc_pack(mmcv_ops, torch.float64)
        data, gradients = DC_INPUT, {
            "out": DC_OUT, "x": DC_X_GRAD, "conv_offset.weight": DC_OFFSET_WEIGHT_GRAD,
            "conv_offset.bias": DC_OFFSET_BIAS_GRAD, "weight": DC_WEIGHT_GRAD,
        }  # fmt: skip
    else:
        model = _mdc_pack(mmcv_ops, torch.float64)
        data, gradients = MDC_INPUT, {
            "out": MDC_OUT, "x": MDC_X_GRAD, "conv_offset.weight": MDC_OFFSET_WEIGHT_GRAD,
            "conv_offset.bias": MDC_OFFSET_BIAS_GRAD, "weight": MDC_WEIGHT_GRAD,
        }  # fmt: skip
    x = torch.tensor(data, dtype=torch.float64).repeat(batch, 1, 1, 1).requires_grad_()
    with pytest.raises(CompiledOpsMissing):  # mmcv's own forward needs its compiled ops
        model(x)
    out = _torchvision_forward(model, x)
    out.backward(torch.ones_like(out))
    got = {"out": out.detach(), "x": x.grad}
    got.update({name: p.grad / batch for name, p in model.named_parameters()})
    for name, expected in gradients.items():
        value = got[name]
        if name in ("out", "x"):
            value = value[:1]
        if layer == "ModulatedDeformConv2dPack" and name.startswith("conv_offset"):
            # mmcv's modulated test runs at offset 0: every sample sits on a pixel (half of
            # them beside the zero border), where bilinear sampling has no derivative along
            # the offset; mmcv's kernel and torchvision's take different one-sided ones
            # there (torchvision moves to mmcv's values once the offsets are 1e-6 below 0).
            # The mask's 4 channels (the last 4 of conv_offset) are smooth: compare those.
            value, expected = value[8:], expected[8:]
        assert _close(value, expected), f"{layer} {name}: {value.tolist()} != {expected}"
    if layer == "DeformConv2dPack":  # the same data with dx and dy swapped is far off
        assert not _close(_torchvision_forward(model, x, swap=True).detach()[:1], DC_OUT)


def _export(model: Any, x: Any, route: str) -> onnx.ModelProto:
    """Export *model* at *x* by *route* (each as a user would call it)."""
    import torch
    from deform_conv2d_onnx_exporter import (
        export,
        lower_deform_conv,
        register_deform_conv2d_onnx_op,
    )

    exporter, opset = route.split("-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":  # the 1.2.0 drop-in: plain torch.onnx.export
            register_deform_conv2d_onnx_op()
            buffer = io.BytesIO()
            torch.onnx.export(
                model, (x,), buffer, dynamo=False, opset_version=int(opset), input_names=["x"],
                dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}},
            )  # fmt: skip
            return onnx.load_from_string(buffer.getvalue())
        dim = torch.export.Dim.AUTO
        shapes = ({0: dim, 2: dim, 3: dim},)
        if exporter == "dropin":  # plain torch.onnx.export, torch's default (dynamo) exporter
            register_deform_conv2d_onnx_op()
            buffer = io.BytesIO()
            torch.onnx.export(
                model, (x,), buffer, opset_version=int(opset), input_names=["x"],
                dynamic_shapes=shapes,
            )  # fmt: skip
            return onnx.load_from_string(buffer.getvalue())
        if exporter == "lowered":  # native DeformConv, then rewritten by `lower`
            native = export(
                model, (x,), opset_version=int(opset), decompose=False, input_names=["x"],
                dynamic_shapes=shapes,
            )  # fmt: skip
            assert any(n.op_type == "DeformConv" for n in native.graph.node)
            return lower_deform_conv(native)
        return export(
            model, (x,), opset_version=int(opset), decompose=True, input_names=["x"],
            dynamic_shapes=shapes,
        )  # fmt: skip


ROUTES = ["torchscript-12", "torchscript-17", "dropin-18", "dynamo-18", "lowered-19"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("layer", ["DeformConv2dPack", "ModulatedDeformConv2dPack"])
def test_mmcv_layers_export_to_mmcv_test_values(
    mmcv_ops: Any, layer: str, route: str, runtime: str
) -> None:
    """The exported layer reproduces mmcv's expected output in onnxruntime and OpenVINO."""
    import torch

    pack = _dc_pack if layer == "DeformConv2dPack" else _mdc_pack
    model = pack(mmcv_ops, torch.float32)
    data, expected = (DC_INPUT, DC_OUT) if layer == "DeformConv2dPack" else (MDC_INPUT, MDC_OUT)
    x = torch.tensor(data).repeat(2, 1, 1, 1)
    proto = _export(model, x, route)
    check_valid(proto)
    assert not [n.op_type for n in proto.graph.node if n.domain == "mmcv"]
    got = run_model(runtime, proto, {"x": x.numpy()})
    assert got.shape == (2, *np.asarray(expected).shape[1:])
    for sample in got:
        assert _close(sample[None], expected), f"{route} {runtime}: {sample.tolist()}"
    # and exactly what torchvision computes for mmcv's weights
    with torch.no_grad():
        want = _torchvision_forward(model, x).numpy()
    assert float(np.abs(got - want).max()) <= ATOL


def _random_mmcv_model(ops: Any) -> Any:
    """mmcv's four layers and two functions in one model: groups, deform_groups, stride,
    dilation, bias; DeformConv2d on an input smaller than its kernel (mmcv pads then crops)."""
    import torch

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dcn_pack = ops.DeformConv2dPack(8, 8, 3, padding=1, groups=2, deform_groups=2)
            self.mdcn_pack = ops.ModulatedDeformConv2dPack(
                8, 6, 3, stride=2, padding=2, dilation=2, deform_groups=2
            )
            self.offsets = torch.nn.Conv2d(6, 2 * 2 * 9 + 3 * 9, 3, padding=1)
            self.dcn = ops.DeformConv2d(6, 4, 3, padding=1, deform_groups=2)
            self.mdcn = ops.ModulatedDeformConv2d(6, 4, 3, padding=1, groups=2)
            self.weight = torch.nn.Parameter(torch.randn(4, 8, 3, 3) * 0.2)
            self.bias = torch.nn.Parameter(torch.randn(4))
            self.small = ops.DeformConv2d(8, 2, 5, padding=2)
            self.small_offset = torch.nn.Conv2d(8, 50, 1)
            for conv in (self.dcn_pack.conv_offset, self.mdcn_pack.conv_offset):
                torch.nn.init.normal_(conv.weight, std=0.3)  # mmcv starts them at zero
            with torch.no_grad():
                self.mdcn.bias.normal_()
                self.mdcn_pack.bias.normal_()

        def forward(self, x: Any) -> Any:
            y = self.mdcn_pack(torch.relu(self.dcn_pack(x)))
            o = 2 * self.offsets(y)
            offset2, offset1, mask = o[:, :36], o[:, 36:54], torch.sigmoid(o[:, 54:])
            ab = torch.cat((self.dcn(y, offset2), self.mdcn(y, offset1, mask)), 1)
            c = ops.deform_conv2d(ab, offset2, self.weight, 1, 1, 1, 1, 2, False, 1)
            d = ops.modulated_deform_conv2d(ab, offset1, mask, self.weight, self.bias, 1, 1)
            corner = ab[:, :, :3, :4]
            small = self.small(corner, self.small_offset(corner))
            return torch.cat((c, d), 1) + small.mean((1, 2, 3)).reshape(-1, 1, 1, 1)

    return Net().eval()


def _as_torchvision(model: Any, x: Any) -> Any:
    """The model's arithmetic with torchvision's op for each mmcv call (float64)."""
    import torch
    from torch.nn.functional import pad
    from torchvision.ops import deform_conv2d as tv

    def pack(layer: Any, y: Any) -> Any:
        out = layer.conv_offset(y)
        if hasattr(layer, "im2col_step"):
            offset, mask, bias = out, None, None
        else:
            o1, o2, m = torch.chunk(out, 3, dim=1)
            offset, mask, bias = torch.cat((o1, o2), 1), torch.sigmoid(m), layer.bias
        return tv(y, offset, layer.weight, bias, layer.stride, layer.padding, layer.dilation, mask)

    m = model.double()
    x = x.double()
    with torch.no_grad():
        y = pack(m.mdcn_pack, torch.relu(pack(m.dcn_pack, x)))
        o = 2 * m.offsets(y)
        offset2, offset1, mask = o[:, :36], o[:, 36:54], torch.sigmoid(o[:, 54:])
        a = tv(y, offset2, m.dcn.weight, padding=1)
        b = tv(y, offset1, m.mdcn.weight, m.mdcn.bias, padding=1, mask=mask)
        ab = torch.cat((a, b), 1)
        c = tv(ab, offset2, m.weight, padding=1)
        d = tv(ab, offset1, m.weight, m.bias, padding=1, mask=mask)
        corner = ab[:, :, :3, :4]
        # mmcv pads an input smaller than the kernel (and its offset) bottom-right, then crops
        padded = (pad(corner, (0, 1, 0, 2)), pad(m.small_offset(corner), (0, 1, 0, 2)))
        small = tv(*padded, m.small.weight, padding=2)[:, :, :3, :4]
        out = torch.cat((c, d), 1) + small.mean((1, 2, 3)).reshape(-1, 1, 1, 1)
    model.float()
    return out.float().numpy()


@pytest.mark.parametrize("route", ["torchscript-16", "dynamo-18", "lowered-19"])
def test_all_mmcv_layers_and_functions_in_one_model(
    mmcv_ops: Any, route: str, runtime: str
) -> None:
    """Every mmcv layer and function, at the export size and another one (dynamic shapes)."""
    import torch

    model = _random_mmcv_model(mmcv_ops)
    x = torch.randn(2, 8, 13, 11, generator=torch.Generator().manual_seed(1))
    proto = _export(model, x, route)
    check_valid(proto)
    for n, h, w in [(2, 13, 11), (1, 17, 14)]:
        feed = torch.randn(n, 8, h, w, generator=torch.Generator().manual_seed(h))
        want = _as_torchvision(model, feed)
        scale = float(np.abs(want).max())
        assert 1 < scale < 100
        got = run_model(runtime, proto, {"x": feed.numpy()})
        assert got.shape == want.shape
        error = float(np.abs(got - want).max())
        # ATOL is stated for outputs of magnitude ~1-10
        assert error <= ATOL * max(1.0, scale / 10), f"{route} at {(n, h, w)}: {error:.3g}"


def test_unregistered_mmcv_needs_its_compiled_ops(mmcv_ops: Any) -> None:
    """Unregistered, mmcv's layers cannot export here (its forward needs the compiled ops:
    the error users meet); registered, they export as our graph; unregistering gives mmcv's
    Functions their own forward and symbolic back."""
    import torch
    from deform_conv2d_onnx_exporter import (
        register_mmcv_deform_conv,
        unregister_deform_conv2d_onnx_op,
        unregister_mmcv_deform_conv,
    )
    from deform_conv2d_onnx_exporter.torchscript import register_symbolic
    from mmcv.ops.modulated_deform_conv import ModulatedDeformConv2dFunction as Function

    model = _mdc_pack(mmcv_ops, torch.float32)
    x = torch.tensor(MDC_INPUT)
    symbolic, forward = Function.__dict__["symbolic"], Function.__dict__["forward"]

    def nodes() -> set[tuple[str, str]]:
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=17)
        return {(n.domain, n.op_type) for n in onnx.load_from_string(buffer.getvalue()).graph.node}

    unregister_deform_conv2d_onnx_op()
    register_symbolic()  # torchvision's op alone is not enough
    with pytest.raises(CompiledOpsMissing):
        nodes()
    register_mmcv_deform_conv()
    exported = nodes()
    assert ("", "GridSample") in exported
    assert {d for d, _ in exported} == {""}
    unregister_mmcv_deform_conv()
    assert Function.__dict__["symbolic"] is symbolic
    assert Function.__dict__["forward"] is forward
    with pytest.raises(CompiledOpsMissing):
        nodes()


def test_check_against_pytorch_without_mmcv_ops(mmcv_ops: Any) -> None:
    """``export(check=True)`` on an mmcv model where mmcv's ops are not compiled: the
    reference runs mmcv's Functions through their torchvision mapping, and says so."""
    import torch
    from deform_conv2d_onnx_exporter import check_export, export

    model = _random_mmcv_model(mmcv_ops)
    x = torch.randn(2, 8, 13, 11, generator=torch.Generator().manual_seed(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = export(model, (x,), opset_version=18, decompose=True, check=True)
    report = check_export(model, (x,), proto, runtimes=["onnxruntime"])
    assert report.passed, report.to_dict()
    assert report.reference.startswith("torch, ")
    for name in ("DeformConv2dFunction", "ModulatedDeformConv2dFunction"):
        assert name in report.reference
    assert "through torchvision (mmcv._ext." in report.reference
    with pytest.raises(CompiledOpsMissing):  # outside the check, mmcv's own forward runs
        model(x)


def test_dropin_below_opset_18_falls_back_for_torch_chunk(mmcv_ops: Any) -> None:
    """ModulatedDeformConv2dPack's ``torch.chunk`` is a Split that onnx's version converter
    leaves invalid below opset 18 (``num_outputs``): the plain dynamo call at opset 17 takes
    the TorchScript exporter, with one warning, and the file still matches mmcv's values."""
    import torch
    from deform_conv2d_onnx_exporter import export, register_deform_conv2d_onnx_op
    from deform_conv2d_onnx_exporter.dynamo import ExportError

    model = _mdc_pack(mmcv_ops, torch.float32)
    x = torch.tensor(MDC_INPUT)
    register_deform_conv2d_onnx_op()
    buffer = io.BytesIO()
    with pytest.warns(UserWarning, match="exporting with dynamo=False") as warned:
        torch.onnx.export(model, (x,), buffer, opset_version=17, input_names=["x"])
    assert [w for w in warned if "dynamo=False" in str(w.message)]
    proto = onnx.load_from_string(buffer.getvalue())
    check_valid(proto)
    assert proto.opset_import[0].version == 17
    assert _close(run_model("onnxruntime", proto, {"x": x.numpy()}), MDC_OUT)
    with pytest.raises(ExportError, match=r"converted down from opset 18 to 17.*num_outputs"):
        export(model, (x,), opset_version=17, decompose=True)
