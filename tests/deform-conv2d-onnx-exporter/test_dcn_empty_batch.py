"""A batch of 0 exports and runs on every route (torchvision and onnxruntime both test it).

Before: the TorchScript export at opset 12 killed Python with SIGFPE (torch's shape inference
on ``Reshape(x, [0, 0, -1])``), opsets 16/19 and ``lower_deform_conv`` wrote models that failed
``onnx.checker`` ("Invalid Target shape product of 0") and killed OpenVINO's compile_model,
and a dynamic-batch model run at batch 0 failed in onnxruntime. Every reshape of a batched
tensor now puts -1 on the batch alone, and the (dy, dx) pairs are taken with Slice (OpenVINO's
Gather dies of SIGFPE on a static empty batch). Exports and runs happen in a child process,
so a crash is a failed test rather than a dead test session.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from dcn_support import CASES, Case, case_ids, run_model, torchscript_export
from deform_conv2d_onnx_exporter import lower_deform_conv

HERE = Path(__file__).parent
TESTS = HERE.parent


def empty_feeds(case: Case) -> dict[str, np.ndarray]:
    return {name: value[:0] for name, value in case.inputs(seed=1).items()}


def in_child(code: str, tmp_path: Path) -> str:
    """Run *code* in a fresh interpreter (the test helpers importable); return its stdout."""
    prelude = f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(HERE)!r}]\n"
    script = tmp_path / "child.py"
    script.write_text(prelude + textwrap.dedent(code))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, f"child died with status {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.parametrize("case", CASES[:3], ids=case_ids(CASES[:3]))
def test_dynamic_batch_models_run_at_batch_0(case: Case, runtime: str) -> None:
    feeds = empty_feeds(case)
    want = case.reference(feeds)
    models = {
        "torchscript-12": torchscript_export(case, 12),
        "torchscript-17": torchscript_export(case, 17),
        "lowered-19": lower_deform_conv(case.onnx_deform_conv(19)),
        "lowered-13": lower_deform_conv(case.onnx_deform_conv(19), 13),
    }
    for name, model in models.items():
        onnx.checker.check_model(model, full_check=True)
        got = run_model(runtime, model, feeds)
        assert got.shape == want.shape == (0, case.co, *case.out_hw(case.h, case.w)), name


@pytest.mark.parametrize("case", CASES[:3], ids=case_ids(CASES[:3]))
def test_models_exported_at_batch_0_are_valid_and_run(case: Case, tmp_path: Path) -> None:
    """Exported from an empty example (static batch 0), on every route, in both runtimes."""
    index = CASES.index(case)
    out = in_child(
        f"""
        import io, warnings
        warnings.simplefilter("ignore")
        import onnx, torch
        from dcn_support import CASES, run_model
        from deform_conv2d_onnx_exporter import (
            export, lower_deform_conv, register_deform_conv2d_onnx_op)

        case = CASES[{index}]
        feeds = {{k: v[:0] for k, v in case.inputs(seed=1).items()}}
        args = tuple(torch.from_numpy(feeds[n]) for n in case.input_names())
        models = {{}}
        register_deform_conv2d_onnx_op()
        for opset in (12, 16):
            buffer = io.BytesIO()
            torch.onnx.export(case.torch_module(), args, buffer, dynamo=False,
                              opset_version=opset, input_names=case.input_names())
            models[f"torchscript-{{opset}}"] = onnx.load_from_string(buffer.getvalue())
        for opset in (16, 19):
            models[f"dynamo-{{opset}}"] = export(
                case.torch_module(), args, opset_version=opset, decompose=True)
        native = case.onnx_deform_conv(19)
        for value in native.graph.input:
            value.type.tensor_type.shape.dim[0].dim_value = 0
        models["lowered"] = lower_deform_conv(native)
        for name, model in models.items():
            onnx.checker.check_model(model, full_check=True)
            for runtime in ("onnxruntime", "openvino"):
                shape = tuple(run_model(runtime, model, feeds).shape)
                print("RESULT", name, runtime, shape, flush=True)
        """,
        tmp_path,
    )
    shape = str((0, case.co, *case.out_hw(case.h, case.w)))
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 10, out
    assert all(line.endswith(shape) for line in lines), out
