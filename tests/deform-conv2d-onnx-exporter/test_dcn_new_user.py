"""What a new user meets first, from the README: a silent ``export``, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from dcn_support import CASES
from deform_conv2d_onnx_exporter import export, lower_deform_conv, register_mmcv_deform_conv

CASE = CASES[0]

_EXPORT_BELOW_18 = """
import torch, torchvision
from deform_conv2d_onnx_exporter import export

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.offsets = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)

    def forward(self, x):
        o = self.offsets(x)
        return self.dcn(x, o[:, :18], torch.sigmoid(o[:, 18:]))

export(Net().eval(), (torch.randn(1, 4, 12, 10),), "m.onnx", opset_version=17,
       decompose=True, check=True)
"""


def test_export_prints_nothing_on_success(tmp_path: Path) -> None:
    """The README's promise: torch's progress lines and its note that it builds at opset 18
    and converts down (checked by ``export`` itself) do not reach the user."""
    result = subprocess.run(
        [sys.executable, "-c", _EXPORT_BELOW_18],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "m.onnx").is_file()
    assert onnx.load(tmp_path / "m.onnx").opset_import[0].version == 17
    assert result.stdout == "" and result.stderr == "", result.stdout + result.stderr


def test_export_keeps_torchs_progress_lines_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    export(CASE.torch_module(), CASE.example_args(), opset_version=20, verbose=True)
    assert "[torch.onnx]" in capsys.readouterr().out


def test_register_mmcv_without_mmcv_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if mmcv were not installed, also after test_dcn_mmcv imported its modules.
    for name in ["mmcv", *(n for n in sys.modules if n.startswith("mmcv."))]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"^register_mmcv_deform_conv\(\) needs mmcv 2\.x") as e:
        register_mmcv_deform_conv()
    assert "pip install mmcv" in str(e.value) and "\n" not in str(e.value)


def test_lower_deform_conv_takes_a_path(tmp_path: Path) -> None:
    path = tmp_path / "native.onnx"
    export(CASE.torch_module(), CASE.example_args(), path, opset_version=19, decompose=False)
    from_path = lower_deform_conv(path)
    assert from_path == lower_deform_conv(onnx.load(path))
    assert not [n for n in from_path.graph.node if n.op_type == "DeformConv"]
    with pytest.raises(TypeError, match=r"an onnx\.ModelProto or the path of an \.onnx file"):
        lower_deform_conv(3)  # type: ignore[arg-type]


def test_lower_cli_says_when_there_is_nothing_to_lower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deform_conv2d_onnx_exporter.cli import main

    source, once, twice = (tmp_path / n for n in ("native.onnx", "once.onnx", "twice.onnx"))
    onnx.save(CASE.onnx_deform_conv(19), source)
    assert main(["lower", str(source), "-o", str(once)]) == 0
    assert main(["lower", str(once), "-o", str(twice)]) == 0  # already lowered
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("lowered 1 DeformConv node(s)")
    assert out[1] == f"no DeformConv node in {once} (nothing to lower); wrote {twice} (opset 19)"


def test_lower_cli_refuses_dash_as_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o -`` once wrote a file named '-' in the working folder."""
    from deform_conv2d_onnx_exporter.cli import main

    onnx.save(CASE.onnx_deform_conv(19), tmp_path / "native.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["lower", "native.onnx", "-o", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "deform-conv2d-onnx: error: -o -: give the path of the .onnx file to write "
        "(stdout is not supported)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["native.onnx"]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"columns": "foo"}, r"columns must be 'auto', 'conv' or 'matmul', got 'foo'"),
        ({"variant": "bogus"}, r"unknown variant 'bogus': expected 'gridsample' or 'gathernd'"),
    ],
)
def test_export_checks_columns_and_variant_for_a_native_export_too(
    tmp_path: Path, option: dict[str, str], message: str
) -> None:
    """At opset >= 19 (native DeformConv) both were ignored, so a typo passed silently."""
    with pytest.raises(ValueError, match=message):
        export(CASE.torch_module(), CASE.example_args(), tmp_path / "m.onnx", **option)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("renamed", ["input", "output"])
def test_check_with_a_source_of_other_names_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], renamed: str
) -> None:
    """A wrong --source gave onnxruntime's 'Required inputs ... are missing' (or a KeyError
    traceback for other output names)."""
    from deform_conv2d_onnx_exporter.cli import main

    native = CASE.onnx_deform_conv(19)
    lowered, other = tmp_path / "lowered.onnx", tmp_path / "other.onnx"
    onnx.save(lower_deform_conv(native), lowered)
    value = native.graph.input[0] if renamed == "input" else native.graph.output[0]
    old = value.name
    value.name = "renamed"
    for node in native.graph.node:
        node.input[:] = ["renamed" if n == old else n for n in node.input]
        node.output[:] = ["renamed" if n == old else n for n in node.output]
    onnx.save(native, other)
    assert main(["check", str(lowered), "--source", str(other)]) == 2
    err = capsys.readouterr().err
    kind = f"{renamed}s"
    assert err.startswith(f"deform-conv2d-onnx: error: the source model's {kind} ")
    assert "'renamed'" in err and "must be the model this one was lowered from" in err
    assert err.count("\n") == 1


def test_check_refuses_two_shapes_for_one_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last --shape for an input won silently."""
    from deform_conv2d_onnx_exporter.cli import main

    onnx.save(lower_deform_conv(CASE.onnx_deform_conv(19)), tmp_path / "m.onnx")
    twice = ["--shape", "x=1,4,7,10", "--shape", "x=2,4,7,10"]
    assert main(["check", str(tmp_path / "m.onnx"), *twice]) == 2
    assert capsys.readouterr().err == (
        "deform-conv2d-onnx: error: --shape for 'x' given twice: 1,4,7,10 and 2,4,7,10; give one\n"
    )


@pytest.mark.parametrize("order", ["named-first", "unnamed-first"])
def test_check_refuses_a_named_and_an_unnamed_shape_for_one_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], order: str
) -> None:
    """`--shape x=...` and `--shape ...` (the only input, x again): the unnamed one won."""
    from deform_conv2d_onnx_exporter.cli import main
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "one_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    # one of them alone is a valid check: the refusal is about giving both
    assert main(["check", str(tmp_path / "m.onnx"), "--shape", "2,4,7,10"]) == 0
    capsys.readouterr()
    both = [["--shape", "x=1,4,7,10"], ["--shape", "2,4,7,10"]]
    if order == "unnamed-first":
        both.reverse()
    assert main(["check", str(tmp_path / "m.onnx"), *both[0], *both[1]]) == 2
    assert capsys.readouterr().err == (
        "deform-conv2d-onnx: error: --shape for 'x' given twice: x=1,4,7,10 and 2,4,7,10 "
        "(no NAME: the model's only input); give one\n"
    )
