"""The shared CLI rule (issue 14), checked on the real command in a subprocess: exit code,
exactly one line on stderr, no traceback, no partial file."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from ovr_testmodels import two_input_model
from support import interrupt, read_only_mount

pytestmark = [
    pytest.mark.usefixtures("openvino_available"),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals, pipes and mounts"),
]
COMMAND = [sys.executable, "-m", "openvino_runner"]


def script() -> str:
    """The console script of this interpreter's environment."""
    found = shutil.which("openvino-runner", path=sysconfig.get_path("scripts"))
    assert found is not None, "openvino-runner is not installed in this environment"
    return found


def ovr(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [script(), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("openvino-runner: error: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return two_input_model(tmp_path / "two.onnx")


@contextlib.contextmanager
def read_only_folder(tmp_path: Path) -> Iterator[list[str]]:
    """A folder on a read-only filesystem, and the command prefix that sees it mounted:
    as root a plain ``mount``; otherwise a user+mount namespace (``unshare -rm``)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only_mount(folder) as mounted:
        if mounted:
            yield []
            return
    unshare = shutil.which("unshare")
    if unshare is not None:
        probe = subprocess.run(
            [unshare, "-rm", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {folder}"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            yield [unshare, "-rm", "sh", "-c", f'mount -t tmpfs -o ro tmpfs {folder} && "$@"', "-"]
            return
    pytest.skip("cannot mount a read-only filesystem here (not root, no user namespaces)")


def test_output_on_a_read_only_filesystem(model: Path, tmp_path: Path) -> None:
    with read_only_folder(tmp_path) as prefix:
        target = tmp_path / "ro" / "out.npz"
        result = subprocess.run(
            [*prefix, script(), "run", str(model), "--output", str(target)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert_one_line_error(result, f"--output {target}", "not writable")
    assert result.stdout == ""  # refused before the run
    assert sorted(p.name for p in (tmp_path / "ro").iterdir()) == []


def test_read_only_cache_dir_is_an_error_not_a_silent_miss(model: Path, tmp_path: Path) -> None:
    """An existing read-only --cache-dir can never store a compiled model: exit 2, one line."""
    with read_only_folder(tmp_path) as prefix:
        cache = tmp_path / "ro"
        result = subprocess.run(
            [
                *prefix,
                script(),
                "bench",
                str(model),
                "--iterations",
                "1",
                "--cache-dir",
                str(cache),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert_one_line_error(
        result, f"cannot use {cache} as the model cache folder", "Read-only file system", "writable"
    )
    assert "cache miss" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("size", "words"),
    [
        (0, ["is empty"]),
        (1, ["truncated"]),
        (1000, ["truncated", "more bytes"]),
    ],
)
def test_truncated_onnx_is_named_without_noise(tmp_path: Path, size: int, words: list[str]) -> None:
    from ovr_testmodels import light_case

    source, *_ = light_case("squeezenet")
    broken = tmp_path / "truncated.onnx"
    broken.write_bytes(source.read_bytes()[:size])
    result = ovr("info", broken)
    assert_one_line_error(result, f"{broken} is not a valid ONNX file", *words)
    assert "absl" not in result.stderr and "tensorflow" not in result.stderr.lower()
    assert result.stdout == ""


def test_not_protobuf_onnx(tmp_path: Path) -> None:
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n")
    assert_one_line_error(ovr("info", text), "not an ONNX model")


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        (
            "bad.xml",
            b"<net><layers>",
            ["not a valid OpenVINO IR file", "XML is malformed", "<net>"],
        ),
        ("other.xml", b"<svg/>", ["not an OpenVINO IR file", "root element is <svg>"]),
        ("cat.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(64), ["a JPEG image", ".onnx"]),
        # Not recognised before OpenVINO: its frontends' own logging is held back.
        ("notes.txt", b"hi\n", ["not a model format it knows", ".onnx"]),
        ("main.py", b"print(1)\n", ["not a model format it knows", ".onnx"]),
    ],
)
def test_non_model_files_get_one_line_without_openvino_logging(
    tmp_path: Path, name: str, data: bytes, words: list[str]
) -> None:
    """Detected before OpenVINO offers the file to every frontend (TensorFlow's logs absl lines)."""
    path = tmp_path / name
    path.write_bytes(data)
    result = ovr("info", path)
    assert_one_line_error(result, str(path), *words)
    assert "absl" not in result.stderr and "text_format" not in result.stderr


def test_ir_xml_is_still_read(model: Path, tmp_path: Path) -> None:
    import openvino as ov

    xml = tmp_path / "m.xml"
    ov.save_model(ov.Core().read_model(str(model)), str(xml))
    result = ovr("info", xml)
    assert result.returncode == 0, result.stderr
    assert "OpenVINO IR" in result.stdout


def test_short_text_file_is_not_called_truncated(tmp_path: Path) -> None:
    """b"junk\n" parses as field 13 with a 117-byte length: not ONNX, not a cut-off download."""
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"junk\n")
    result = ovr("info", junk)
    assert_one_line_error(result, "not an ONNX model", "field 13", "text file")
    assert "truncated" not in result.stderr


def test_json_dash_writes_json_to_stdout(model: Path, tmp_path: Path) -> None:
    result = ovr("info", model, "--json", "-")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # nothing else on stdout
    assert [p["name"] for p in data["inputs"]] == ["a", "b"]
    assert "model:" in result.stderr and "OpenVINO ops after conversion" in result.stderr
    assert not (Path.cwd() / "-").exists() and not (tmp_path / "-").exists()
    result = ovr("compare", model, "--json", "-", "--atol", "0", "--rtol", "0")
    assert result.returncode in (0, 1)
    assert json.loads(result.stdout)["passed"] is (result.returncode == 0)
    # the commands that gained --json with the CLI kit
    result = ovr("run", model, "--json", "-")
    assert result.returncode == 0, result.stderr
    assert sorted(json.loads(result.stdout)["outputs"]) == ["y", "z"]
    assert "outputs:" in result.stderr
    result = ovr("profile", model, "-n", "2", "--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["layers"] and "by layer type:" in result.stderr
    for report in ("a.json", "b.json"):
        result = ovr("bench", model, "-n", "5", "--json", tmp_path / report)
        assert result.returncode == 0, result.stderr
    result = ovr("bench", "--compare", tmp_path / "a.json", tmp_path / "b.json", "--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reports"] == [
        str(tmp_path / "a.json"),
        str(tmp_path / "b.json"),
    ]
    assert "latency median (ms)" in result.stderr


def test_closed_stdout_ends_quietly(model: Path) -> None:
    # like `openvino-runner info model | head -1`, with the reader gone before any output
    process = subprocess.Popen(
        [script(), "info", str(model)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    code = process.wait(timeout=300)
    err = process.stderr.read().decode()
    process.stderr.close()
    assert code in (0, 141), err
    assert err == "", err


def test_head_one_in_a_shell(model: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run(
        [bash, "-c", f'"{script()}" info "{model}" | head -1; echo "rc=${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        timeout=300,
    )
    first, status = result.stdout.splitlines()
    assert first == f"model:   {model}"
    assert status in ("rc=0", "rc=141") and result.stderr == ""


def test_python_dash_m_is_the_command(model: Path) -> None:
    from openvino_runner import __version__

    version = subprocess.run(
        [*COMMAND, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert version.stdout.strip() == f"openvino-runner {__version__}"
    result = subprocess.run(
        [*COMMAND, "info", str(model)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "OpenVINO ops after conversion" in result.stdout
    missing = subprocess.run(
        [*COMMAND, "info", str(model.with_name("gone.onnx"))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_one_line_error(missing, "gone.onnx", "does not exist")


def test_usage_shows_what_is_required() -> None:
    # every positional of openvino-runner is required (MODEL); -o of convert is too
    result = ovr("convert")
    assert result.returncode == 2
    assert "usage: openvino-runner convert [-h]" in result.stderr
    assert "-o OUT.xml" in result.stderr and "[-o OUT.xml]" not in result.stderr
    assert " model" in result.stderr and "[model]" not in result.stderr


def test_conversion_report_is_one_line(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Shrink", ["x"], [f"y{i}"], name=f"n{i}") for i in range(2)]
    for node in nodes:
        node.op_type = "Shrinkle"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2]) for i in range(2)],
    )
    path = tmp_path / "odd.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    assert_one_line_error(ovr("info", path), "cannot convert", "op Shrinkle (opset 17) at node")


def _openvino_loaded(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return "libopenvino" in Path(f"/proc/{pid}/maps").read_text()
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
def test_ctrl_c_exits_130_without_partial_files(model: Path, tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    # interrupt once the command runs (OpenVINO loaded: past start-up, inside main) and has
    # had a second to compile and start the loop
    result = interrupt(
        [script(), "bench", str(model), "--time", "120", "--json", str(report)],
        ready=lambda process: _openvino_loaded(process.pid),
        settle=1.0,
    )
    assert result.returncode == 130, result.stderr
    assert result.stderr == "openvino-runner: interrupted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two.onnx"]


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_unreadable_input_array_is_one_line(model: Path, tmp_path: Path, suffix: str) -> None:
    bad = tmp_path / f"a{suffix}"
    bad.write_bytes(b"not numpy")
    result = ovr("run", model, "--input", f"a={bad}")
    assert_one_line_error(result, str(bad), "numpy")


def test_compare_names_a_shape_onnxruntime_cannot_take(model: Path) -> None:
    """--shape reshapes OpenVINO's model; onnxruntime runs the file as it is, so a shape its
    fixed dimensions refuse is one line naming both (it was onnxruntime's own message)."""
    result = ovr("compare", model, "--shape", "a=3,5", "--shape", "b=3,5")
    assert_one_line_error(result, "input 'a' is [3,5]", f"{model} fixes it at [?,4]", "as it is")
    free = ovr("compare", model, "--shape", "a=3,4", "--shape", "b=3,4")
    assert free.returncode == 0 and "all outputs match" in free.stdout, free.stderr
    # An input of unknown rank (onnxruntime reports its shape as []) takes any shape.
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "norank", [x], [y])
    norank = model.parent / "norank.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(norank))
    free = ovr("compare", norank, "--shape", "x=2,3")
    assert free.returncode == 0 and "all outputs match" in free.stdout, free.stderr
