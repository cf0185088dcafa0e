"""A project's own DCN autograd Function exports through the registration API.

The Functions below are written the way detectron2 (``_DeformConv``,
``_ModulatedDeformConv``) and CharlesShang's DCNv2 (``_DCNv2``) write theirs: a
``forward(ctx, ...)`` that calls a compiled extension (absent here, as on most export
machines), bound once at import as ``deform_conv = _DeformConv.apply``.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from dcn_support import ATOL, check_valid, run_model


class CompiledOpMissing(RuntimeError):
    pass


def _functions() -> dict[str, Any]:
    import torch
    from torch.autograd import Function

    class _DeformConv(Function):  # detectron2's signature
        @staticmethod
        def forward(  # type: ignore[override]
            ctx: Any,
            input: Any,
            offset: Any,
            weight: Any,
            stride: int = 1,
            padding: int = 0,
            dilation: int = 1,
            groups: int = 1,
            deformable_groups: int = 1,
            im2col_step: int = 64,
        ) -> Any:
            raise CompiledOpMissing("detectron2._C is not built")

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:  # type: ignore[override]
            raise NotImplementedError

    class _DCNv2(Function):  # CharlesShang's DCNv2 signature
        @staticmethod
        def forward(  # type: ignore[override]
            ctx: Any,
            input: Any,
            offset: Any,
            mask: Any,
            weight: Any,
            bias: Any,
            stride: int,
            padding: int,
            dilation: int,
            deformable_groups: int,
        ) -> Any:
            raise CompiledOpMissing("_ext.dcn_v2_forward is not built")

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:  # type: ignore[override]
            raise NotImplementedError

    del torch
    return {"_DeformConv": _DeformConv, "_DCNv2": _DCNv2}


def _models() -> tuple[Any, Any, Any]:
    import torch
    from deform_conv2d_onnx_exporter import DeformConvCall, register_deform_conv_function

    functions = _functions()
    deform_conv = functions["_DeformConv"].apply  # bound before registering, as they do
    dcn_v2_conv = functions["_DCNv2"].apply

    class DetectronStyle(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.offset = torch.nn.Conv2d(8, 2 * 2 * 9, 3, padding=1)  # 2 offset groups
            self.weight = torch.nn.Parameter(torch.randn(6, 4, 3, 3) * 0.2)  # groups 2

        def forward(self, x: Any) -> Any:
            return deform_conv(x, 3 * self.offset(x), self.weight, 1, 1, 1, 2, 2)

    class DCNv2Style(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(1)
            self.conv_offset_mask = torch.nn.Conv2d(8, 3 * 9, 3, stride=2, padding=1)
            self.weight = torch.nn.Parameter(torch.randn(5, 8, 3, 3) * 0.2)
            self.bias = torch.nn.Parameter(torch.randn(5))

        def forward(self, x: Any) -> Any:
            o1, o2, mask = torch.chunk(self.conv_offset_mask(x), 3, dim=1)
            offset = 3 * torch.cat((o1, o2), dim=1)
            return dcn_v2_conv(x, offset, torch.sigmoid(mask), self.weight, self.bias, 2, 1, 1, 1)

    def detectron(
        input: Any,
        offset: Any,
        weight: Any,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        deformable_groups: int = 1,
        im2col_step: int = 64,
    ) -> DeformConvCall:
        return DeformConvCall(
            input, offset, weight, stride=stride, padding=padding, dilation=dilation,
            groups=groups, offset_groups=deformable_groups,
        )  # fmt: skip

    def dcn_v2(
        input: Any,
        offset: Any,
        mask: Any,
        weight: Any,
        bias: Any,
        stride: int,
        padding: int,
        dilation: int,
        deformable_groups: int,
    ) -> DeformConvCall:
        return DeformConvCall(
            input, offset, weight, bias, mask, stride, padding, dilation,
            offset_groups=deformable_groups,
        )  # fmt: skip

    register_deform_conv_function(functions["_DeformConv"], detectron)
    register_deform_conv_function(functions["_DCNv2"], dcn_v2)
    return DetectronStyle().eval(), DCNv2Style().eval(), functions


def reference(model: Any, x: Any) -> np.ndarray:
    """The same model through torchvision's op directly (float64, then rounded)."""
    import torch
    import torchvision

    m = model.double()
    x = x.double()
    with torch.no_grad():
        if hasattr(m, "conv_offset_mask"):
            o1, o2, mask = torch.chunk(m.conv_offset_mask(x), 3, dim=1)
            out = torchvision.ops.deform_conv2d(
                x, 3 * torch.cat((o1, o2), 1), m.weight, m.bias, stride=2, padding=1,
                mask=torch.sigmoid(mask),
            )  # fmt: skip
        else:
            out = torchvision.ops.deform_conv2d(x, 3 * m.offset(x), m.weight, padding=1)
    model.float()
    return out.float().numpy()


@pytest.mark.parametrize("style", ["detectron2", "dcnv2"])
@pytest.mark.parametrize("route", ["torchscript-12", "torchscript-17", "dynamo-18", "dynamo-20"])
def test_registered_function_exports_with_both_exporters(
    style: str, route: str, runtime: str
) -> None:
    import torch
    from deform_conv2d_onnx_exporter import export, register_deform_conv2d_onnx_op

    detectron, dcnv2, _ = _models()
    model = detectron if style == "detectron2" else dcnv2
    x = torch.randn(2, 8, 11, 13, generator=torch.Generator().manual_seed(3))
    with pytest.raises(CompiledOpMissing):  # outside an export the Function's own forward runs
        model(x)
    exporter, opset = route.split("-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            register_deform_conv2d_onnx_op()  # the plain torch.onnx.export route
            buffer = io.BytesIO()
            torch.onnx.export(
                model, (x,), buffer, dynamo=False, opset_version=int(opset), input_names=["x"]
            )
            proto = onnx.load_from_string(buffer.getvalue())
        else:
            proto = export(model, (x,), opset_version=int(opset), decompose=True)
    check_valid(proto)
    got = run_model(runtime, proto, {"x": x.numpy()})
    want = reference(model, x)
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= 10 * ATOL  # outputs of magnitude ~10


def test_a_wrong_mapping_and_unregistering() -> None:
    import torch
    from deform_conv2d_onnx_exporter import (
        DeformConvCall,
        export,
        register_deform_conv_function,
        unregister_deform_conv_function,
    )

    detectron, _, functions = _models()
    cls = functions["_DeformConv"]

    def wrong(input: Any, offset: Any, weight: Any, *rest: Any) -> DeformConvCall:
        return DeformConvCall(input, offset, weight, padding=1, offset_groups=1)  # it is 2

    register_deform_conv_function(cls, wrong)
    x = torch.randn(1, 8, 9, 9)
    with pytest.raises(Exception, match=r"offset_groups=1 but the offset has 36 channels"):
        export(detectron, (x,), opset_version=18, decompose=True)
    unregister_deform_conv_function(cls)
    with pytest.raises(Exception, match=r"detectron2\._C is not built"):  # torch wraps it
        export(detectron, (x,), opset_version=18, decompose=True)
    with pytest.raises(TypeError, match="forward must take ctx first"):

        class NewStyle(torch.autograd.Function):
            @staticmethod
            def forward(x: Any) -> Any:  # type: ignore[override]
                return x

        register_deform_conv_function(NewStyle, wrong)
