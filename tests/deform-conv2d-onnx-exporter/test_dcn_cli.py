"""The console script as a user meets it, in a subprocess: the repository's CLI rule.

One line on stderr (``deform-conv2d-onnx: error: ...``) and no traceback for anything a user
can cause; exit 2 for input problems and missing components, 1 for a negative answer, 130 on
Ctrl-C; no partial output file, ever.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from components import require_command, require_module
from dcn_support import CASES
from onnx import helper, numpy_helper
from support import interrupt

PROG = "deform-conv2d-onnx"
CASE = CASES[0]


def cli(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deform_conv2d_onnx_exporter", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(
    done: subprocess.CompletedProcess[str], status: int, *needles: str
) -> None:
    assert done.returncode == status, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def native(tmp_path: Path) -> Path:
    path = tmp_path / "native.onnx"
    onnx.save(CASE.onnx_deform_conv(19), path)
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".partial")))


def test_lower_into_a_missing_folder(native: Path, tmp_path: Path) -> None:
    done = cli("lower", str(native), "-o", "/nonexistent/o.onnx")
    assert_one_line_error(done, 2, "-o /nonexistent/o.onnx", "does not exist")


def test_lower_onto_a_folder(native: Path, tmp_path: Path) -> None:
    done = cli("lower", str(native), "-o", str(tmp_path))
    assert_one_line_error(done, 2, "is a folder")


def test_lower_into_a_read_only_filesystem(native: Path, tmp_path: Path) -> None:
    """A real read-only bind mount (root ignores permission bits, not a read-only mount)."""
    unshare = require_command("unshare", "util-linux")
    target = tmp_path / "ro"
    target.mkdir()
    script = (
        f"mount --bind {target} {target} && mount -o remount,bind,ro {target} && "
        f"exec {sys.executable} -m deform_conv2d_onnx_exporter lower {native} -o {target}/o.onnx"
    )
    done = subprocess.run(
        [unshare, "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    if "mount:" in done.stderr or "unshare:" in done.stderr:
        pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()}")
    assert_one_line_error(done, 2, f"-o {target}/o.onnx", "Read-only file system")
    assert list(target.iterdir()) == []


def chained_model(layers: int) -> onnx.ModelProto:
    """*layers* DeformConv nodes in a row: enough work for a Ctrl-C to land mid-way."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    previous = "x"
    for i in range(layers):
        inits.append(
            numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), f"w{i}")
        )
        nodes.append(
            helper.make_node(
                "DeformConv",
                [previous, f"w{i}", "offset"],
                [f"y{i}"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
            )
        )
        previous = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, "H", "W"]),
            helper.make_tensor_value_info("offset", onnx.TensorProto.FLOAT, ["N", 18, "H", "W"]),
        ],
        [helper.make_tensor_value_info(previous, onnx.TensorProto.FLOAT, ["N", 8, "H", "W"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_ctrl_c_in_lower_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "chain.onnx"
    # 2000 nodes lower in ~9 s on a quiet machine (400 took 3.0 s: done before the Ctrl-C).
    onnx.save(chained_model(2000), source)
    out = tmp_path / "out"
    out.mkdir()
    lower = [sys.executable, "-m", "deform_conv2d_onnx_exporter", "lower", str(source)]
    # Let it get past its imports (~1 s) into the lowering.
    result = interrupt([*lower, "-o", str(out / "o.onnx")], settle=2.5)
    assert result.returncode == 130, f"finished before the interrupt? {result}"
    assert result.stderr == f"{PROG}: interrupted\n"
    assert list(out.iterdir()) == []


def test_lower_fills_in_missing_output_shapes(tmp_path: Path) -> None:
    model = CASE.onnx_deform_conv(19)
    del model.graph.output[:]
    model.graph.output.append(helper.make_empty_tensor_value_info("y"))  # no type at all
    source = tmp_path / "untyped.onnx"
    onnx.save(model, source)
    done = cli("lower", str(source), "-o", str(tmp_path / "o.onnx"))
    assert done.returncode == 0, done.stderr
    lowered = onnx.load(tmp_path / "o.onnx")
    onnx.checker.check_model(lowered, full_check=True)
    assert len(lowered.graph.output[0].type.tensor_type.shape.dim) == 4


def test_lower_of_an_invalid_model_is_one_line(tmp_path: Path) -> None:
    model = CASE.onnx_deform_conv(19)
    model.graph.node[0].input[1] = "nowhere"  # a weight that does not exist
    source = tmp_path / "broken.onnx"
    onnx.save(model, source)
    done = cli("lower", str(source), "-o", str(tmp_path / "o.onnx"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists() and leftovers(tmp_path) == []
    # An empty file parses as an empty ModelProto: it was "imports no default ONNX opset"
    # (lower) and onnxruntime's "No graph was found in the protobuf" (check).
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for argv in (["lower", str(empty), "-o", str(tmp_path / "o.onnx")], ["check", str(empty)]):
        assert_one_line_error(cli(*argv), 2, f"{str(empty)!r}: it holds no graph")


def fake_missing(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment in which *module* cannot be imported (as if not installed)."""
    shadow = tmp_path / f"no-{module}"
    shadow.mkdir()
    (shadow / f"{module}.py").write_text(f'raise ImportError("No module named {module!r}")\n')
    return {"PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("module", ["openvino", "onnxruntime"])
def test_check_without_a_runtime_is_an_error(module: str, native: Path, tmp_path: Path) -> None:
    done = cli("check", str(native), env=fake_missing(tmp_path, module))
    assert_one_line_error(done, 2, module, f"pip install {module}")
    assert "nothing to compare" not in done.stdout + done.stderr


def scaled_model(tmp_path: Path) -> Path:
    """A lowered model with outputs ~1e4, so float32 differences exceed an absolute 1e-4."""
    from deform_conv2d_onnx_exporter import lower_deform_conv

    model = CASE.onnx_deform_conv(19)
    weight = numpy_helper.to_array(model.graph.initializer[0]) * 1e4
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "W"))
    path = tmp_path / "scaled.onnx"
    onnx.save(lower_deform_conv(model), path)
    return path


def test_check_reports_absolute_and_relative_errors(tmp_path: Path) -> None:
    require_module("openvino")
    path = scaled_model(tmp_path)
    shapes = ["--shape", "x=2,4,16,20", "--shape", "offset=2,18,16,20", "--shape", "mask=2,9,16,20"]
    done = cli("check", str(path), *shapes)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("openvino vs onnxruntime, y"))
    absolute = float(line.split("max abs error ")[1].split(",")[0])
    relative = float(line.split("max rel error ")[1].split(" ")[0])
    assert absolute > 1e-4, "the case must exceed the absolute tolerance alone"
    assert relative < 1e-3 and line.endswith(": ok")
    strict = cli("check", str(path), *shapes, "--rtol", "0")
    assert_one_line_error(
        strict, 1, "beyond atol 0.0001 + rtol 0 * |reference|", "openvino y (abs "
    )


@pytest.mark.parametrize(("option", "value"), [("--atol", "-1"), ("--rtol", "nan")])
def test_check_refuses_a_bad_tolerance(native: Path, option: str, value: str) -> None:
    """A NaN tolerance would pass any model (every comparison with NaN is false)."""
    require_module("openvino")
    done = cli("check", str(native), option, value)
    assert_one_line_error(done, 2, "--atol and --rtol must be finite numbers >= 0")


def test_help_version_and_python_m(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from deform_conv2d_onnx_exporter.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('onnx', 'numpy', 'torch', 'openvino', 'onnxruntime')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith(f"{PROG} ")
    usage = cli()
    assert usage.returncode == 2 and "lower" in usage.stderr


def test_check_native_deform_conv_says_what_openvino_accepts(native: Path) -> None:
    """Not OpenVINO's 'Exception from src/inference/src/cpp/core.cpp:...' but the way out."""
    require_module("onnxruntime")
    require_module("openvino")
    done = cli("check", str(native))
    assert_one_line_error(
        done,
        2,
        "cannot read the model's DeformConv",
        "deform-conv2d-onnx lower",
        "openvino-runner",
    )
    assert "Exception from" not in done.stderr and ".cpp" not in done.stderr


@pytest.mark.parametrize("opset", ["99", "11"])
def test_lower_checks_the_opset_range_first(opset: str, native: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    done = cli("lower", str(native), "-o", str(out), "--opset", opset)
    highest = str(onnx.defs.onnx_opset_version())
    assert_one_line_error(done, 2, f"--opset {opset}", f"expected 12 to {highest}")
    assert "Assertion" not in done.stderr and not out.exists()
    # Checked before the model is read: a missing input is not what it reports.
    missing = cli("lower", str(tmp_path / "missing.onnx"), "-o", str(out), "--opset", opset)
    assert_one_line_error(missing, 2, f"expected 12 to {highest}")


@pytest.fixture
def lowered(native: Path, tmp_path: Path) -> Path:
    path = tmp_path / "lowered.onnx"
    done = cli("lower", str(native), "-o", str(path))
    assert done.returncode == 0, done.stderr
    return path


def test_check_json_to_stdout_with_the_shared_free_dimension_default(lowered: Path) -> None:
    """``--json -``: JSON alone on stdout, the text on stderr; free dims 1 then 224."""
    import json

    require_module("openvino")
    done = cli("check", str(lowered), "--json", "-")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and report["reference"] == "onnxruntime"
    assert report["inputs"]["x"] == [1, 4, 224, 224]  # N=1, H=W=224 (the kit's default)
    assert report["inputs"]["offset"] == [1, 18, 224, 224]
    assert [(o["runtime"], o["name"], o["shape"]) for o in report["outputs"]] == [
        ("openvino", "y", [1, 6, 224, 224])
    ]
    assert (report["atol"], report["rtol"]) == (1e-4, 1e-3)  # openvino-runner's defaults
    assert "openvino vs onnxruntime, y [1, 6, 224, 224]" in done.stderr


def test_check_a_lowered_file_against_its_native_source(lowered: Path, native: Path) -> None:
    """The role openvino-runner does not have: the lowered file against what it replaces."""
    import json

    require_module("openvino")
    shapes = ["--shape", "x=2,4,9,8", "--shape", "offset=2,18,9,8", "--shape", "mask=2,9,9,8"]
    done = cli("check", str(lowered), "--source", str(native), *shapes, "--json", "-")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["reference"] == "onnxruntime on the source"
    assert {o["runtime"] for o in report["outputs"]} == {"onnxruntime", "openvino"}
    assert all(o["max_abs_error"] < 1e-4 for o in report["outputs"])


def test_check_nameless_shape_needs_a_single_input_model(lowered: Path) -> None:
    require_module("openvino")
    done = cli("check", str(lowered), "--shape", "1,4,8,8")
    assert_one_line_error(done, 2, "a --shape without a name needs a model with one input")


def test_lower_json_and_completion(native: Path, tmp_path: Path) -> None:
    import json

    out = tmp_path / "o.onnx"
    done = cli("lower", str(native), "-o", str(out), "--json", "-")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "input": str(native),
        "output": str(out),
        "nodes": 1,
        "opset": 19,
    }
    assert "lowered 1 DeformConv node(s)" in done.stderr
    for shell in ("bash", "zsh"):
        script = cli("completion", shell)
        assert script.returncode == 0, script.stderr
        assert "lower" in script.stdout and "--shape" in script.stdout


def test_no_output_lands_on_an_input_model_or_its_data(tmp_path: Path) -> None:
    """`lower IN -o IN.onnx.data` made IN read garbage weights, silently; `--json IN` and
    `-o IN` replaced the model. Each is one line, and the inputs stay as they were."""
    source = tmp_path / "native.onnx"
    onnx.save(
        CASE.onnx_deform_conv(19),
        source,
        save_as_external_data=True,
        location="native.onnx.data",
        size_threshold=0,
    )
    other = tmp_path / "other.onnx"
    onnx.save(CASE.onnx_deform_conv(19), other)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    data = str(tmp_path / "native.onnx.data")
    out = str(tmp_path / "out.onnx")
    for argv, needle in (
        (["lower", str(source), "-o", data], f"-o {data} holds data of the input model"),
        (["lower", str(source), "-o", str(source)], f"-o {source} is the input model"),
        (["lower", str(source), "-o", out, "--json", str(source)], "--json"),
        (["check", str(source), "--json", data], "holds data of the input model"),
        (["check", str(other), "--source", str(source), "--json", str(source)], "is the input"),
    ):
        assert_one_line_error(cli(*argv), 2, needle)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_lower_and_check_a_model_with_external_data(tmp_path: Path) -> None:
    """The dynamo exporter writes weights to OUT.onnx.data beside the model (the demo's case)."""
    source = tmp_path / "native.onnx"
    onnx.save(
        CASE.onnx_deform_conv(19),
        source,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="native.onnx.data",
        size_threshold=0,
    )
    assert (tmp_path / "native.onnx.data").is_file()
    out = tmp_path / "lowered.onnx"
    done = cli("lower", str(source), "-o", str(out))
    assert done.returncode == 0, done.stderr
    onnx.checker.check_model(onnx.load(out), full_check=True)
    require_module("openvino")
    shapes = ["--shape", "x=1,4,7,10", "--shape", "offset=1,18,7,10", "--shape", "mask=1,9,7,10"]
    done = cli("check", str(out), "--source", str(source), *shapes)
    assert done.returncode == 0, done.stderr
