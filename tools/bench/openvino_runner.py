#!/usr/bin/env python3
"""benchmark_app against `openvino-runner bench`, alternately, on the same model and settings.

    tools/bench/openvino_runner.py                 resnet18 (random weights, exported here)
    tools/bench/openvino_runner.py --time 10 --rounds 5 --model other.onnx

For each round and each hint (latency, throughput) it runs OpenVINO's own benchmark_app
and then `openvino-runner bench` (the order flips every round, so drift on a shared
machine hits both), with the same device, precision, hint and duration, and prints each
pair's throughput ratio. The summary takes medians over the rounds.

Goals (issue 7): throughput >= 0.97x benchmark_app's on the model, and per-inference
overhead <= 0.15 ms, measured as 1/our_fps - 1/their_fps with the latency hint on a
one-Relu model (where inference itself costs microseconds, so the tools' loops show).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
THROUGHPUT = re.compile(r"Throughput:\s+([0-9.]+)\s+FPS")
MEDIAN = re.compile(r"Median:\s+([0-9.]+)\s+(ms|us)")  # it switches to us below 1 ms


def export_resnet18(folder: Path) -> Path:
    """torchvision resnet18 with seeded random weights, as one ONNX file."""
    import torch
    import torchvision

    torch.manual_seed(0)
    path = folder / "resnet18.onnx"
    torch.onnx.export(
        torchvision.models.resnet18().eval(),
        (torch.randn(1, 3, 224, 224),),
        str(path),
        dynamo=True,
        input_names=["image"],
        output_names=["logits"],
        external_data=False,
        verbose=False,
    )
    return path


def run_benchmark_app(model: Path, hint: str, seconds: int, precision: str) -> tuple[float, float]:
    cmd = [
        str(BIN / "benchmark_app"),
        "-m",
        str(model),
        "-d",
        "CPU",
        "-hint",
        hint,
        "-t",
        str(seconds),
        "-ip",
        "f32",
    ]  # -ip f32: it would switch 4-D inputs to u8
    if precision != "default":
        cmd += ["-infer_precision", precision]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    fps, median = THROUGHPUT.search(out), MEDIAN.search(out)
    if fps is None or median is None:
        raise SystemExit(f"cannot parse benchmark_app's report:\n{out[-2000:]}")
    scale = 1.0 if median.group(2) == "ms" else 1e-3
    return float(fps.group(1)), float(median.group(1)) * scale


def run_ours(
    model: Path, hint: str, seconds: int, precision: str, report: Path
) -> tuple[float, float]:
    cmd = [
        str(BIN / "openvino-runner"),
        "bench",
        str(model),
        "--device",
        "CPU",
        "--hint",
        hint,
        "--time",
        str(seconds),
        "--precision",
        precision,
        "--no-progress",
        "--json",
        str(report),
    ]
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    data = json.loads(report.read_text())
    return float(data["throughput_fps"]), float(data["latency_ms"]["median"])


def build_tiny(folder: Path) -> Path:
    """One Relu over 16 floats: inference costs microseconds, so the tool's overhead shows."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    path = folder / "tiny_relu.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def compare(
    label: str, model: Path, hint: str, args: argparse.Namespace, report: Path
) -> tuple[float, float, float, float]:
    """Rounds of benchmark_app and openvino-runner; medians of FPS, ratio, difference."""
    ratios, diffs, theirs_all, ours_all = [], [], [], []
    for r in range(args.rounds):
        order = ["app", "ours"] if r % 2 == 0 else ["ours", "app"]
        got: dict[str, tuple[float, float]] = {}
        for who in order:
            if who == "app":
                got[who] = run_benchmark_app(model, hint, args.time, args.precision)
            else:
                got[who] = run_ours(model, hint, args.time, args.precision, report)
        (theirs, their_med), (ours, our_med) = got["app"], got["ours"]
        ratios.append(ours / theirs)
        diffs.append(1000.0 / ours - 1000.0 / theirs)
        theirs_all.append(theirs)
        ours_all.append(ours)
        print(
            f"  {label:<10} {hint:<10} round {r + 1}: benchmark_app {theirs:9.2f} FPS "
            f"(median {their_med:.3f} ms)  openvino-runner {ours:9.2f} FPS "
            f"(median {our_med:.3f} ms)  ratio {ratios[-1]:.3f}  "
            f"per-inference difference {diffs[-1]:+.4f} ms"
        )
    med = statistics.median
    return med(theirs_all), med(ours_all), med(ratios), med(diffs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, help="model to use (default: resnet18 exported)")
    parser.add_argument(
        "--time", type=int, default=5, help="seconds per run (5; benchmark_app takes whole seconds)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per hint (3)")
    parser.add_argument("--precision", default="f32", choices=("f32", "bf16", "f16", "default"))
    parser.add_argument("--hints", default="latency,throughput")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = args.model or export_resnet18(folder)
        tiny = build_tiny(folder)
        report = folder / "report.json"
        print(
            f"CPU, precision {args.precision}, {args.time} s per run, {args.rounds} rounds, "
            "benchmark_app and openvino-runner alternating (order flips each round)"
        )
        ok = True
        lines = []
        for hint in args.hints.split(","):
            theirs, ours, ratio, _ = compare(model.stem, model, hint, args, report)
            met = ratio >= 0.97
            ok &= met
            lines.append(
                f"  {model.stem} {hint}: benchmark_app {theirs:.2f} FPS, openvino-runner "
                f"{ours:.2f} FPS, ratio {ratio:.3f} (goal >= 0.97): {'met' if met else 'NOT met'}"
            )
        theirs, ours, ratio, diff = compare("tiny_relu", tiny, "latency", args, report)
        met = diff <= 0.15
        ok &= met
        lines.append(
            f"  tiny_relu latency: benchmark_app {theirs:.0f}/s, openvino-runner {ours:.0f}/s, "
            f"per-inference overhead {diff * 1000:+.1f} us (goal <= 150 us): "
            f"{'met' if met else 'NOT met'}"
        )
        print("summary (medians over rounds):")
        print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
