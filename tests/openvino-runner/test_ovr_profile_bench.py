"""profile (per-layer counters), bench reports (samples, versions, CPU) and bench --compare,
and `run --json`, all through the real CLI on real OpenVINO."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
from components import require_module
from ovr_testmodels import cli, conv_net, two_input_model

pytestmark = pytest.mark.usefixtures("openvino_available")


def test_run_json_to_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = two_input_model(tmp_path / "two.onnx")
    saved = tmp_path / "out.npz"
    code, out, err = cli(capsys, "run", model, "--shape", "a=2,4", "-o", saved, "--json", "-")
    assert code == 0, err
    report = json.loads(out)  # stdout holds the JSON alone; the text went to stderr
    assert "outputs:" in err and "outputs saved to" in err
    assert report["inputs"]["a"]["shape"] == [2, 4] and report["inputs"]["b"]["dtype"] == "int64"
    with np.load(saved) as arrays:
        assert report["outputs"]["y"]["max"] == pytest.approx(float(arrays["y"].max()))
        assert report["outputs"]["z"]["min"] == pytest.approx(float(arrays["z"].min()))
    assert report["precision"] == "f32" and report["saved_to"] == str(saved)


def test_profile_ranks_layers_and_writes_the_exec_graph(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = conv_net(tmp_path / "net.onnx")
    graph = tmp_path / "exec.xml"
    code, out, err = cli(
        capsys, "profile", model, "--shape", "1,3,64,64", "-n", "6", "--top", "2",
        "--exec-graph", graph, "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    layers = report["layers"]
    times = [layer["real_ms"] for layer in layers]
    assert times == sorted(times, reverse=True) and times[0] > 0
    convs = [layer for layer in layers if layer["type"] == "Convolution"]
    assert len(convs) == 2 and {c["precision"] for c in convs} == {"f32"}
    assert all(c["exec_type"] for c in convs)
    shares = {group["type"]: group["share"] for group in report["by_type"]}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert report["by_type"][0]["real_ms"] >= report["by_type"][-1]["real_ms"]
    assert report["layers_total_ms"] == pytest.approx(sum(times))
    assert report["latency_ms"] > 0 and report["latency_without_counters_ms"] > 0
    assert report["counters_overhead"] == pytest.approx(
        report["latency_ms"] / report["latency_without_counters_ms"] - 1
    )
    assert report["coverage"] == pytest.approx(report["layers_total_ms"] / report["latency_ms"])
    assert report["input_shapes"] == {"image": [1, 3, 64, 64]} and report["iterations"] == 6
    # the text: the top 2 only, the per-type table, the overhead stated
    assert "slowest 2 layers" in err and "by layer type:" in err
    assert "counters' overhead" in err and layers[0]["name"] in err
    top_table = err.split("layers (median per inference):\n")[1].split("by layer type:")[0]
    assert [line.split()[-1] for line in top_table.splitlines()[1:]] == [
        layer["name"] for layer in layers[:2]
    ]
    # the executed graph (benchmark_app -exec_graph_path's format, for Netron and the
    # like): every executed layer with its kernel, precision and time
    assert report["exec_graph"] == str(graph) and graph.with_suffix(".bin").is_file()
    data = {
        layer.get("name"): layer.find("data")
        for layer in ElementTree.parse(graph).getroot().iter("layer")
    }
    for conv in convs:
        assert data[conv["name"]].get("primitiveType") == conv["exec_type"]
        assert data[conv["name"]].get("runtimePrecision") == "f32"
        assert int(data[conv["name"]].get("execTimeMcs")) >= 0
    assert not list(tmp_path.glob(".*partial*"))


def test_profile_refuses_a_non_xml_exec_graph(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = conv_net(tmp_path / "net.onnx")
    code, _, err = cli(
        capsys, "profile", model, "--shape", "1,3,16,16", "-n", "1", "--exec-graph",
        tmp_path / "graph.txt",
    )  # fmt: skip
    assert code == 2 and "--exec-graph must name an .xml file" in err
    assert len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.onnx"]


def bench(capsys: pytest.CaptureFixture[str], model: Path, report: Path, *extra: object) -> str:
    code, out, err = cli(
        capsys, "bench", model, "--shape", "1,3,32,32", "-n", "40", "--json", report, *extra
    )
    assert code == 0, err
    return out


def test_bench_report_keeps_samples_versions_and_cpu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from openvino_runner.benchmark import cpu_flags

    model = conv_net(tmp_path / "net.onnx")
    out = bench(capsys, model, tmp_path / "a.json", "--threads", "1")
    data = json.loads((tmp_path / "a.json").read_text())
    samples = data["samples_ms"]
    assert len(samples) == data["iterations"] == 40
    assert data["latency_ms"]["median"] == pytest.approx(float(np.median(samples)))
    assert sum(data["histogram"]["counts"]) == 40
    edges = data["histogram"]["edges_ms"]
    assert edges[0] == pytest.approx(min(samples)) and edges[-1] == pytest.approx(max(samples))
    import openvino

    env = data["environment"]
    assert env["versions"]["openvino"] and openvino.__version__.startswith(
        env["versions"]["openvino"].split(".dev")[0][:6]
    )
    assert env["cpu"]["flags"] == cpu_flags()  # what the CPU says, never assumed
    assert "FP32" in env["cpu"]["openvino_capabilities"]
    assert data["settings"]["threads"] == 1 and data["settings"]["iterations"] == 40
    assert "latency histogram" in out and out.count(" ms #") + out.count(" ms  ") >= 1


def test_bench_compare_side_by_side(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = conv_net(tmp_path / "net.onnx")
    bench(capsys, model, tmp_path / "a.json", "--threads", "1")
    bench(capsys, model, tmp_path / "b.json", "--threads", "2")
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    code, out, err = cli(
        capsys, "bench", "--compare", tmp_path / "a.json", tmp_path / "b.json", "--json", "-"
    )
    assert code == 0, err
    table = json.loads(out)
    median = next(r for r in table["rows"] if r["metric"] == "latency median (ms)")
    assert median["values"] == [a["latency_ms"]["median"], b["latency_ms"]["median"]]
    assert median["ratios"][1] == pytest.approx(
        b["latency_ms"]["median"] / a["latency_ms"]["median"]
    )
    diffs = {d["key"]: d["values"] for d in table["differences"]}
    assert diffs["settings.threads"] == [1, 2]
    assert "properties.INFERENCE_NUM_THREADS" in diffs
    assert "settings.seed" not in diffs and "environment.cpu.model" not in diffs
    assert "[1]/[0]" in err and "settings.threads: [0] 1  |  [1] 2" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--compare", "{a}"), "at least two"),
        (("--compare", "{a}", "{missing}"), "No such file"),
        (("--compare", "{a}", "{text}"), "not JSON"),
        (("--compare", "{a}", "{other}"), "not a `openvino-runner bench --json` report"),
        (("{model}", "--compare", "{a}", "{a}"), "runs no model"),
        ((), "bench needs a MODEL"),
    ],
)
def test_bench_compare_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    files = {
        "a": tmp_path / "a.json",
        "missing": tmp_path / "gone.json",
        "text": tmp_path / "t.json",
        "other": tmp_path / "o.json",
        "model": tmp_path / "m.onnx",
    }
    files["a"].write_text(json.dumps({"latency_ms": {"median": 1.0}, "iterations": 3}))
    files["text"].write_text("median 1.0")
    files["other"].write_text("{}")
    code, _, err = cli(capsys, "bench", *(a.format(**files) for a in args))
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_histogram_is_fixed_size() -> None:
    from openvino_runner.benchmark import HISTOGRAM_BINS, histogram, text_histogram

    values = list(np.random.default_rng(0).lognormal(size=100_000))
    hist = histogram(values)
    assert len(hist["counts"]) == HISTOGRAM_BINS and sum(hist["counts"]) == 100_000
    lines = text_histogram([1.0, 1.0, 2.0, 4.0])
    assert len(lines) == 8 and lines[0].rstrip().endswith(" 2") and "#" * 40 in lines[0]


def test_bench_plot_png_and_compare_svg(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    require_module("matplotlib")
    from PIL import Image

    model = conv_net(tmp_path / "net.onnx")
    bench(capsys, model, tmp_path / "a.json", "--plot", tmp_path / "a.png")
    with Image.open(tmp_path / "a.png") as picture:
        assert picture.format == "PNG" and picture.size == (800, 450)
    bench(capsys, model, tmp_path / "b.json", "--threads", "1")
    code, out, err = cli(
        capsys, "bench", "--compare", tmp_path / "a.json", tmp_path / "b.json",
        "--plot", tmp_path / "ab.svg",
    )  # fmt: skip
    assert code == 0, err
    svg = ElementTree.parse(tmp_path / "ab.svg").getroot()
    assert svg.tag.endswith("svg")
    text = (tmp_path / "ab.svg").read_text()
    assert "a.json (median" in text and "b.json (median" in text  # one legend entry each
    assert f"latency plot written to {tmp_path / 'ab.svg'}" in out
    assert not list(tmp_path.glob(".*partial*"))


def test_bench_plot_refuses_other_formats_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = conv_net(tmp_path / "net.onnx")
    code, out, err = cli(capsys, "bench", model, "-n", "5", "--plot", tmp_path / "p.jpg")
    assert code == 2 and "give a .png, .svg or .pdf file name" in err and out == ""


def test_bench_plot_without_matplotlib_fails_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the [plot] extra the benchmark ran its full --time, then failed at the end."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    model = conv_net(tmp_path / "net.onnx")
    code, out, err = cli(capsys, "bench", model, "-n", "5", "--plot", tmp_path / "p.png")
    assert (code, out) == (2, "")  # nothing ran
    assert err == (
        "openvino-runner: error: plotting needs matplotlib: pip install 'openvino-runner[plot]'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.onnx"]
