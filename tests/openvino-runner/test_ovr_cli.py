"""The CLI's promises: instant --help, clear errors for user mistakes, run/info outputs."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from openvino_runner.cli import main
from ovr_testmodels import cli, two_input_model

pytestmark = pytest.mark.usefixtures("openvino_available")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return two_input_model(tmp_path / "two.onnx")


def run_outputs(
    capsys: pytest.CaptureFixture[str], model: Path, *args: object
) -> dict[str, np.ndarray]:
    """``run MODEL ARGS --output FILE`` succeeds; the outputs it saved there, by name."""
    path = model.parent / "outputs.npz"
    code, _, err = cli(capsys, "run", model, *args, "--output", path)
    assert code == 0, err
    with np.load(path, allow_pickle=False) as saved:
        return {name: saved[name] for name in saved.files}


HELP_IMPORTS = (
    "import json, sys\n"
    "before = set(sys.modules)\n"
    "from openvino_runner.cli import main\n"
    "for argv in ({argvs}):\n"
    "    try:\n"
    "        main(argv)\n"
    "    except SystemExit as exc:\n"
    "        assert exc.code == 0, exc.code\n"
    "print(json.dumps(sorted(set(sys.modules) - before)), file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    "argvs",
    [
        "['--help'], ['bench', '--help'], ['compare', '--help'], ['profile', '--help']",
        "['--version'],",
        "['convert', '--help'], ['run', '--help'], ['info', '--help']",
    ],
)
def test_help_imports_only_the_cli_kit_and_errors(argvs: str) -> None:
    """`--help` stays fast by importing nothing heavy: the modules it loads are bounded to
    the standard library plus cli, the kit and errors (it once pulled numpy through the
    package __init__: 0.66 s against 0.08-0.13 s for the other CLIs)."""
    result = subprocess.run(
        [sys.executable, "-c", HELP_IMPORTS.format(argvs=argvs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "openvino-runner" in result.stdout
    loaded = json.loads(result.stderr.strip().splitlines()[-1])
    ours = {m for m in loaded if m.split(".")[0] == "openvino_runner"}
    assert ours <= {
        "openvino_runner",
        "openvino_runner.cli",
        "openvino_runner._clikit",
        "openvino_runner.errors",
    }, ours
    others = {m.split(".")[0] for m in loaded} - {"openvino_runner"}
    third_party = sorted(m for m in others if m not in sys.stdlib_module_names)
    assert not third_party, third_party  # numpy, openvino, tqdm, PIL, ... stay unloaded


def test_every_option_has_help() -> None:
    from openvino_runner.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, sub in subparsers.choices.items()
        for action in sub._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert not missing, missing
    assert sorted(subparsers.choices) == [
        "bench",
        "compare",
        "completion",
        "convert",
        "info",
        "profile",
        "quantize",
        "run",
    ]


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys)
    assert code == 2 and "usage:" in err and out == ""


@pytest.mark.parametrize("command", ["info", "run", "compare", "bench"])
def test_missing_model_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    code, out, err = cli(capsys, command, tmp_path / "nope.onnx")
    assert code == 2
    assert "nope.onnx" in err and "does not exist" in err
    assert "Traceback" not in err + out


def test_not_a_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    code, _, err = cli(capsys, "info", bad)
    assert code == 2
    assert "notes.txt" in err and ".onnx" in err and "Traceback" not in err


def test_info_lists_ports_and_ops(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    report = tmp_path / "info.json"
    code, out, _ = cli(capsys, "info", model, "--json", report)
    assert code == 0
    assert "ONNX (converted" in out
    assert "a" in out and "[?,4]" in out and "i64" in out
    data = json.loads(report.read_text())
    assert [p["name"] for p in data["inputs"]] == ["a", "b"]
    assert [p["name"] for p in data["outputs"]] == ["y", "z"]
    assert data["op_counts"]["Relu"] == 1
    assert data["source_op_counts"] == {"Add": 1, "Cast": 1, "Mul": 1, "Relu": 1}
    assert "ONNX ops in the file (4)" in out and "OpenVINO ops after conversion" in out
    assert data["inputs"][1]["element_type"] == "i64"
    # the advice is a command to copy, naming this model (it once said MODEL)
    advice = f"openvino-runner convert {model} -o {model.with_suffix('.xml')} "
    assert f"to skip conversion next time: {advice}" in out
    code, _, err = cli(capsys, *advice.split()[1:])
    assert code == 0 and model.with_suffix(".xml").is_file(), err


def test_run_with_npy_npz_and_output(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path, rng: np.random.Generator
) -> None:
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.integers(-5, 5, size=(3, 4))
    np.save(tmp_path / "a.npy", a)
    np.savez(tmp_path / "both.npz", a=a, b=b)
    out_file = tmp_path / "out.npz"
    # .npy by name, the other input from an .npz by name
    code, out, _ = cli(
        capsys,
        "run",
        model,
        "--input",
        f"a={tmp_path / 'a.npy'}",
        "--input",
        f"b={tmp_path / 'both.npz'}",
        "--output",
        out_file,
    )
    assert code == 0, out
    assert "precision: f32" in out
    with np.load(out_file) as saved:
        np.testing.assert_allclose(saved["y"], a * 2 + b, rtol=1e-6)
        np.testing.assert_array_equal(saved["z"], np.maximum(a, 0))
    # an .npz without a name feeds every input by name
    saved = run_outputs(capsys, model, "--input", tmp_path / "both.npz")
    np.testing.assert_allclose(saved["y"], a * 2 + b, rtol=1e-6)
    assert not list(tmp_path.glob("*.partial*"))


@pytest.mark.parametrize("names", [("file", "allow_pickle"), ("args", "kwds")])
def test_output_named_like_savez_parameters(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    rng: np.random.Generator,
    names: tuple[str, str],
) -> None:
    # np.savez(path, **outputs) raises TypeError for an output called `file`
    model = two_input_model(tmp_path / "named.onnx", outputs=names)
    a = rng.standard_normal((2, 4)).astype(np.float32)
    b = rng.integers(-5, 5, size=(2, 4))
    np.savez(tmp_path / "in.npz", a=a, b=b)
    saved = run_outputs(capsys, model, "--input", tmp_path / "in.npz")
    assert sorted(saved) == sorted(names)
    np.testing.assert_allclose(saved[names[0]], a * 2 + b, rtol=1e-6)
    np.testing.assert_array_equal(saved[names[1]], np.maximum(a, 0))
    assert saved[names[0]].dtype == np.float32


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("run", "--output"),
        ("run", "--json"),
        ("info", "--json"),
        ("bench", "--json"),
        ("compare", "--json"),
        ("profile", "--json"),
        ("profile", "--exec-graph"),
    ],
)
def test_unwritable_report_paths_fail_before_the_run(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path, command: str, option: str
) -> None:
    missing = tmp_path / "no-such-folder" / "report.out"
    code, out, err = cli(capsys, command, model, option, missing)
    assert code == 2
    assert out == ""  # nothing ran: the check comes before compiling
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{option} {missing}" in err
    assert f"the folder {missing.parent} does not exist" in err
    # a file where the folder should be, and a folder where the file should be
    (tmp_path / "plain").write_text("")
    code, _, err = cli(capsys, command, model, option, tmp_path / "plain" / "report.out")
    assert code == 2 and f"the folder {tmp_path / 'plain'} is not a folder" in err
    code, _, err = cli(capsys, command, model, option, tmp_path)
    assert code == 2 and "is a folder; give a file name inside it" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "two.onnx"]


@pytest.mark.parametrize(("command", "option"), [("run", "--output"), ("profile", "--exec-graph")])
def test_dash_is_stdout_for_json_only(
    capsys: pytest.CaptureFixture[str],
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    option: str,
) -> None:
    """``run -o -`` once saved the outputs to a file named '-' in the working folder."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, command, model, option, "-")
    assert (code, out) == (2, "")
    want = f"{option} -: '-' (stdout) is for --json only; give a file name"
    assert err == f"openvino-runner: error: {want}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two.onnx"]


def test_ir_without_its_bin_names_the_missing_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """OpenVINO's own text was 'Empty weights data in bin file or bin file cannot be found!'."""
    from ovr_testmodels import conv_net

    xml = tmp_path / "net.xml"
    code, _, err = cli(capsys, "convert", conv_net(tmp_path / "net.onnx"), "-o", xml)
    assert code == 0, err
    xml.with_suffix(".bin").unlink()
    code, out, err = cli(capsys, "info", xml)
    assert (code, out) == (2, "")
    assert err == (
        f"openvino-runner: error: OpenVINO cannot read {xml}: its weights file "
        f"{xml.with_suffix('.bin')} does not exist (an IR is the .xml and the .bin beside it; "
        "copy both)\n"
    )


def test_one_input_shaped_twice_is_refused(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    """The last --shape for an input won silently."""
    code, out, err = cli(capsys, "run", model, "--shape", "a=2,4", "--shape", "a=3,4")
    assert (code, out) == (2, "")
    assert err == "openvino-runner: error: --shape for 'a' given twice: 2,4 and 3,4; give one\n"


def test_run_random_inputs_are_seeded(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    shapes = ("--shape", "a=2,4", "--shape", "b=2,4")
    outs = [run_outputs(capsys, model, "--seed", seed, *shapes)["y"] for seed in ("1", "1", "2")]
    assert outs[0].shape == (2, 4)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_dynamic_dims_default_to_one_and_224(
    capsys: pytest.CaptureFixture[str], model: Path
) -> None:
    assert run_outputs(capsys, model)["y"].shape == (1, 4)


@pytest.mark.parametrize(
    ("name", "array", "expected"),
    [
        ("image", np.zeros((1, 4), np.float32), ("'image'", "'a', 'b'")),
        ("a", np.zeros((1, 5), np.float32), ("expects shape [?,4]", "[1, 5]")),
        ("a", np.zeros((1, 4), np.float64), ("expects dtype float32", "float64")),
    ],
    ids=["unknown-name", "wrong-shape", "wrong-dtype"],
)
def test_bad_input_file(
    capsys: pytest.CaptureFixture[str],
    model: Path,
    tmp_path: Path,
    name: str,
    array: np.ndarray,
    expected: tuple[str, str],
) -> None:
    np.save(tmp_path / "x.npy", array)
    code, _, err = cli(capsys, "run", model, "--input", f"{name}={tmp_path / 'x.npy'}")
    assert code == 2
    assert all(part in err for part in expected), err


def test_unknown_shape_name_lists_real_ones(
    capsys: pytest.CaptureFixture[str], model: Path
) -> None:
    code, _, err = cli(capsys, "run", model, "--shape", "image=1,4")
    assert code == 2 and "'image'" in err and "'a', 'b'" in err


def test_missing_input_file(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    code, _, err = cli(capsys, "run", model, "--input", f"a={tmp_path / 'gone.npy'}")
    assert code == 2 and "gone.npy" in err and "does not exist" in err


def test_unnamed_input_needs_single_input_model(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    code, _, err = cli(capsys, "run", model, "--input", tmp_path / "x.npy")
    assert code == 2 and "2 inputs" in err and "--input a=" in err


def test_bad_option_values(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", str(model), "--iterations", "0"])
    assert exc.value.code == 2
    assert "positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["run", str(model), "--shape", "a=1,four"])
    assert exc.value.code == 2
    assert "expected [NAME=]D0,D1,..." in capsys.readouterr().err


def test_cache_dir_that_is_a_file(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    (tmp_path / "cache").write_text("not a folder")
    code, _, err = cli(
        capsys, "bench", model, "--iterations", "1", "--cache-dir", tmp_path / "cache"
    )
    assert code == 2, err
    assert "as the model cache folder: it is a file" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "args", [("compare", "--atol", "-1"), ("compare", "--rtol", "nan"), ("convert", "--atol", "x")]
)
def test_bad_tolerance_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], model: Path, args: tuple[str, str, str]
) -> None:
    """A negative tolerance fails every output: it is refused (exit 2), not a mismatch (1)."""
    command, option, value = args
    extra = ["-o", str(model.parent / "m.xml"), "--check"] if command == "convert" else []
    with pytest.raises(SystemExit) as exc:
        main([command, str(model), *extra, option, value])
    assert exc.value.code == 2
    assert f"argument {option}: expected a number >= 0" in capsys.readouterr().err
    assert not (model.parent / "m.xml").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bench", "-t", "nan"), "expected a finite positive number"),  # ran forever
        (("quantize", "-o", "q.xml", "--data", ".", "-t", "inf"), "a finite positive number"),
        (("run", "--seed", "-1"), "expected an integer from 0 to 4294967295"),  # traceback
        (("convert", "-o", "m.xml", "--check", "--seed", "-1"), "an integer from 0"),
        (("run", "--image-size", "0,10"), "each at least 1"),  # Pillow's traceback
        (("run", "--mean", "nan"), "finite numbers"),  # every input silently nan
        (("run", "--scale", "0"), "not 0"),
    ],
)
def test_option_values_the_run_cannot_use_are_refused(
    capsys: pytest.CaptureFixture[str], model: Path, args: tuple[str, ...], message: str
) -> None:
    command, *rest = args
    rest = [str(model.parent / a) if a.endswith(".xml") else a for a in rest]
    with pytest.raises(SystemExit) as exc:
        main([command, str(model), *rest])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err
    assert not (model.parent / "m.xml").exists()


def test_two_outputs_on_one_file_are_refused(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    """`run -o same.json --json same.json` lost the .npz; an IR's .bin counts as written."""
    same = tmp_path / "same.json"
    code, _, err = cli(capsys, "run", model, "-o", same, "--json", same)
    assert code == 2 and "--output and --json would both write" in err and not same.exists()
    code, _, err = cli(capsys, "profile", model, "--exec-graph", tmp_path / "g.xml",
                       "--json", tmp_path / "g.bin")  # fmt: skip
    assert code == 2 and "would both write" in err and not (tmp_path / "g.xml").exists()


def test_missing_external_data_file_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Like an IR without its .bin: OpenVINO said "Invalid usage of method for externally
    stored data in file (big.onnx.data, ...)"."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    path = tmp_path / "big.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path), save_as_external_data=True, location="big.onnx.data")
    assert cli(capsys, "info", path)[0] == 0
    (tmp_path / "big.onnx.data").unlink()
    code, _, err = cli(capsys, "info", path)
    assert code == 2 and err.count("\n") == 1, err
    assert f"its external data file {tmp_path / 'big.onnx.data'} does not exist" in err


def test_op_without_conversion_rule_names_the_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from onnx import TensorProto, helper
    from openvino_runner import ConversionError, Runner

    node = helper.make_node("Shrink", ["x"], ["y"], name="my_shrink")
    node.op_type = "Shrinkle"  # no such op: OpenVINO has no rule for it
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "odd.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    with pytest.raises(ConversionError) as exc:
        Runner(path).info()
    assert exc.value.failures == [
        ("Shrinkle (opset 17)", "my_shrink", "OpenVINO has no conversion rule for this op")
    ]
    code, _, err = cli(capsys, "run", path)
    assert code == 2 and "op Shrinkle (opset 17) at node 'my_shrink'" in err


def test_compare_needs_onnxruntime_and_onnx(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    code, _, err = cli(capsys, "compare", model)
    assert code == 2 and "pip install 'openvino-runner[onnxruntime]'" in err
    monkeypatch.undo()
    import openvino as ov

    xml = tmp_path / "m.xml"
    ov.save_model(ov.Core().read_model(str(model)), str(xml))
    code, _, err = cli(capsys, "compare", xml)
    assert code == 2 and "needs an .onnx model" in err


def test_benchmark_reports_progress(model: Path) -> None:
    from openvino_runner import Runner

    calls: list[tuple[int, float]] = []
    result = Runner(model, shapes={"a": [1, 4], "b": [1, 4]}).benchmark(
        iterations=50, progress=lambda done, elapsed: calls.append((done, elapsed))
    )
    assert calls and calls[-1][0] == 50 == result.iterations
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_progress_bar_follows_iterations_and_time(capsys: pytest.CaptureFixture[str]) -> None:
    from openvino_runner.cli import _Progress

    by_count = _Progress(total=20, seconds=None)
    for done in (5, 12, 20):
        by_count(done, done / 10)
    assert by_count.bar.n == 20
    by_count.close()
    by_time = _Progress(total=None, seconds=2.0)
    by_time(100, 0.5)
    by_time(900, 2.3)  # the last call may overshoot the time limit a little
    assert by_time.bar.n == 2.0
    by_time.close()


@pytest.mark.parametrize(("flag", "asked"), [("bf16", "bf16"), ("default", "device default")])
def test_precision_asked_and_effective_are_reported(
    capsys: pytest.CaptureFixture[str], model: Path, flag: str, asked: str
) -> None:
    code, out, _ = cli(capsys, "run", model, "--precision", flag)
    assert code == 0
    # what OpenVINO chose depends on the CPU (bf16 with AMX, f32 without): it is printed
    assert re.search(rf"precision: (f32|bf16|f16) \(asked: {asked}\)", out), out


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_knows_the_commands(
    capsys: pytest.CaptureFixture[str], shell: str
) -> None:
    code, out, err = cli(capsys, "completion", shell)
    assert code == 0, err
    for word in ("profile", "quantize", "--exec-graph", "--compare", "--max-drop"):
        assert word in out, word


@pytest.mark.parametrize(
    "argv",
    [
        ["--shape", "-1,3,8,8"],  # argparse took the value for an unknown option
        ["--shape=-1,3,8,8"],
        ["--shape", "?,3,8,8"],
        ["--shape", "image=-1x3x8x8"],
    ],
    ids=["dash-value", "glued", "question-mark", "named"],
)
def test_a_free_dimension_in_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    """-1 or ? leaves a dimension dynamic; run fills it with the shared default (1 first)."""
    from ovr_testmodels import conv_net

    net = conv_net(tmp_path / "net.onnx")
    code, out, err = cli(capsys, "info", net, *argv, "--json", "-")
    assert (code, err.count("error")) == (0, 0), err
    assert json.loads(out)["inputs"][0]["shape"] == "[?,3,8,8]"
    assert run_outputs(capsys, net, *argv)["pooled"].shape == (1, 16, 1, 1)


def test_shape_values_other_than_free_are_still_refused(
    capsys: pytest.CaptureFixture[str], model: Path
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", str(model), "--shape", "-2,4"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "openvino-runner run: error: argument --shape: expected [NAME=]D0,D1,... with "
        "non-negative integers or -1/? (free) (e.g. x=1,3,224,224), got '-2,4'"
    )
    # The kit's own rules: after `--` nothing is glued; parse_shape (deform's) stays static.
    from openvino_runner import _clikit

    argv = ["--shape", "-1,4", "-d", "CPU", "--", "--shape", "-1,4"]
    glued = ["--shape=-1,4", "-d", "CPU", "--", "--shape", "-1,4"]
    assert _clikit.glue_dash_values(argv, ("--shape",)) == glued
    with pytest.raises(argparse.ArgumentTypeError, match=r"with non-negative integers \(e\.g\."):
        _clikit.parse_shape("-1,4")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--mean", "123.7,116.3,103.5"], "--mean only applies"),
        (["--scale", "58.4", "--mean", "0"], "--mean, --scale only apply"),
        (["--bgr", "--input", "image={npy}"], "--bgr only applies"),
    ],
)
def test_image_options_without_an_image_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], named: str
) -> None:
    """They only say how an image becomes a tensor: without one they were silently ignored."""
    from ovr_testmodels import conv_net

    net = conv_net(tmp_path / "net.onnx")
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((1, 3, 8, 8), np.float32))
    args = [a.format(npy=npy) for a in argv]
    code, out, err = cli(capsys, "run", net, *args, "--output", tmp_path / "out.npz")
    assert (code, out) == (2, "")
    assert err.startswith(f"openvino-runner: error: {named} to image inputs (.bmp, ")
    assert err.endswith(
        "and no --input is an image; give one (e.g. --input photo.jpg) or leave the option out\n"
    )
    assert not (tmp_path / "out.npz").exists()


def test_image_options_with_an_image_apply(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from ovr_testmodels import conv_net
    from PIL import Image

    net = conv_net(tmp_path / "net.onnx")
    Image.new("RGB", (8, 8), (100, 150, 200)).save(tmp_path / "photo.png")
    code, out, err = cli(
        capsys, "run", net, "--input", tmp_path / "photo.png", "--mean", "100,150,200",
        "--shape", "1,3,8,8", "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)["inputs"]["image"]
    assert (summary["min"], summary["max"]) == (0.0, 0.0)  # the mean took every pixel to 0


@pytest.mark.parametrize("name", ["model.onnx", "model.xml", "saved"])
def test_a_folder_that_is_no_saved_model_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\0" * 8)
    code, out, err = cli(capsys, "info", folder)
    assert (code, out) == (2, "")
    named = f" (named like a {folder.suffix} file)" if folder.suffix else ""
    assert err.startswith(
        f"openvino-runner: error: {folder} is a folder{named}, not a model file, and no "
        "TensorFlow SavedModel (it holds no saved_model.pb); expected one of .xml (OpenVINO IR),"
    )
    assert err.count("\n") == 1 and 'saved_model.pb"' not in err
