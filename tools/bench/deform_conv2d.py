#!/usr/bin/env python3
"""Benchmark DeformConv2d: our decomposed ONNX graph against the alternatives, as ratios.

    python tools/bench/deform_conv2d.py [--repeats N] [--only S|M|L] [--no-baseline]
                                        [--threads N] [--cpu-time]

Everything runs with 2 threads (``--threads``), in one process run (the machine is shared and
noisy, so read the ratios, not the absolute times). For each configuration it prints the
median time of:

* torchvision's CPU op (``torchvision.ops.deform_conv2d``),
* onnxruntime on our decomposed graph (dynamo exporter, ``decompose=True``, opset 20), exported
  with static shapes (``columns="auto"`` then picks MatMul for outputs up to 4096 pixels) and
  with dynamic batch/height/width (1x1 Conv),
* onnxruntime on native ``DeformConv`` (dynamo exporter, opset 20),
* onnxruntime on the graph of the original ``deform_conv2d_onnx_exporter`` 1.2.0,
* OpenVINO (``INFERENCE_PRECISION_HINT=f32``) on our graph and on the 1.2.0 graph,
* OpenVINO on ``openvino.convert_model(torch_module)`` (its own DeformableConvolution),

with the max abs error of each against torchvision, node counts by op type, and
onnxruntime's profile share per op type for our graph. The rows "floor: GridSample alone" and
"floor: GEMM alone" time the two heavy nodes of our static graph cut out as models of their
own (the same inputs, the same run): their sum is what this decomposition cannot go below.
Then it checks the issue's goals.

``--cpu-time`` times each run by the process's CPU time instead of the wall clock. With
``--threads 1`` that is the kernels' own cost, which stays put while other programs load the
machine (wall-clock ratios at 2 threads moved by ~0.3 between runs at load 4-8 here);
with more threads it also counts the worker threads' spinning.

The 1.2.0 package shares our import name, so it is fetched with ``pip download`` into a
temporary directory and run in a separate Python process, with its ``JitScalarType`` import
pointed at ``torch.onnx._internal.torchscript_exporter._type_utils`` (torch 2.14 moved it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

THREADS = 2
#: time.perf_counter (wall clock) or time.process_time (--cpu-time).
CLOCK = time.perf_counter


@dataclass(frozen=True)
class Config:
    name: str
    n: int
    c: int
    h: int
    w: int
    offset_groups: int
    kernel: int = 3
    padding: int = 1

    @property
    def offset_channels(self) -> int:
        return 2 * self.offset_groups * self.kernel * self.kernel


CONFIGS = [
    Config("S", n=1, c=64, h=64, w=64, offset_groups=1),
    Config("M", n=2, c=128, h=48, w=48, offset_groups=2),
    Config("L", n=4, c=128, h=96, w=96, offset_groups=4),
]
#: Run unless --only names another (L is long: ask for it with --only L).
DEFAULT_CONFIGS = ("S", "M")


def make_inputs(cfg: Config) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    taps = cfg.offset_groups * cfg.kernel * cfg.kernel
    return {
        "x": rng.standard_normal((cfg.n, cfg.c, cfg.h, cfg.w)).astype(np.float32),
        "offset": (rng.standard_normal((cfg.n, 2 * taps, cfg.h, cfg.w)) * 2).astype(np.float32),
        "mask": rng.uniform(0, 1, (cfg.n, taps, cfg.h, cfg.w)).astype(np.float32),
    }


def make_module(cfg: Config) -> Any:
    import torch
    import torchvision

    class DeformConv(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.conv = torchvision.ops.DeformConv2d(cfg.c, cfg.c, cfg.kernel, padding=cfg.padding)

        def forward(self, x: Any, offset: Any, mask: Any) -> Any:
            return self.conv(x, offset, mask)

    return DeformConv().eval()


def ort_session(model: bytes, profile_dir: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    if profile_dir is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(profile_dir) / "ort")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def ov_compile(model: Any, profile: bool = False) -> Any:
    import openvino as ov

    core = ov.Core()
    if isinstance(model, bytes):
        model = core.read_model(model, b"")
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": THREADS}
    if profile:
        config["PERF_COUNT"] = True
    compiled = core.compile_model(model, "CPU", config)
    precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert "32" in precision, f"OpenVINO did not take the f32 hint: {precision}"
    return compiled


def op_counts(model: Any) -> str:
    counts = Counter(n.op_type for n in model.graph.node)
    return ", ".join(f"{op} {k}" for op, k in counts.most_common())


def openvino_profile_shares(compiled: Any, feeds: Any, runs: int, warmup: int = 3) -> str:
    """OpenVINO's per-layer-type CPU time (PERF_COUNT) over *runs* runs after *warmup*."""
    request = compiled.create_infer_request()
    for _ in range(warmup):
        request.infer(feeds)
    totals: Counter[str] = Counter()
    for _ in range(runs):
        request.infer(feeds)
        for info in request.get_profiling_info():
            totals[info.node_type] += info.real_time.total_seconds()
    whole = sum(totals.values()) or 1
    return ", ".join(f"{op} {100 * t / whole:.1f}%" for op, t in totals.most_common(8))


def profile_shares(model: bytes, feeds: dict[str, np.ndarray], runs: int, warmup: int = 3) -> str:
    """onnxruntime's kernel time per op type over *runs* runs after *warmup* unprofiled ones."""
    with tempfile.TemporaryDirectory() as tmp:
        session = ort_session(model, tmp)
        for _ in range(warmup + runs):
            session.run(None, feeds)
        path = session.end_profiling()
        events = json.loads(Path(path).read_text())
    starts = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    first_kept = starts[warmup] if len(starts) > warmup else 0
    totals: Counter[str] = Counter()
    for event in events:
        name = event.get("name", "")
        kernel = event.get("cat") == "Node" and name.endswith("_kernel_time")
        if kernel and event["ts"] >= first_kept:
            totals[event["args"]["op_name"]] += event["dur"]
    whole = sum(totals.values()) or 1
    return ", ".join(f"{op} {100 * t / whole:.1f}%" for op, t in totals.most_common())


BASELINE_SCRIPT = r"""
import io, json, sys, warnings
sys.path.insert(0, sys.argv[1])
import numpy as np, torch, torchvision
import deform_conv2d_onnx_exporter as old
assert old.__file__.startswith(sys.argv[1]), old.__file__
old.register_deform_conv2d_onnx_op()
cfg = json.loads(sys.argv[2])
torch.manual_seed(0)
conv = torchvision.ops.DeformConv2d(cfg["c"], cfg["c"], cfg["kernel"], padding=cfg["padding"])
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = conv
    def forward(self, x, offset, mask):
        return self.conv(x, offset, mask)
taps = cfg["offset_groups"] * cfg["kernel"] ** 2
n, c, h, w = cfg["n"], cfg["c"], cfg["h"], cfg["w"]
args = (torch.zeros(n, c, h, w), torch.zeros(n, 2 * taps, h, w), torch.zeros(n, taps, h, w))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(M().eval(), args, sys.argv[3], dynamo=False, opset_version=12,
                      input_names=["x", "offset", "mask"], output_names=["y"])
"""


def fetch_baseline(workdir: Path) -> Path | None:
    """Download 1.2.0 and patch its JitScalarType import; return its directory."""
    wheel_dir = workdir / "wheel"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "deform_conv2d_onnx_exporter==1.2.0",
            "--no-deps",
            "--quiet",
            "-d",
            str(wheel_dir),
        ],
        capture_output=True,
        text=True,
    )
    wheels = list(wheel_dir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        print(f"  (1.2.0 baseline unavailable: pip download failed: {done.stderr.strip()[-300:]})")
        return None
    import zipfile

    target = workdir / "baseline"
    with zipfile.ZipFile(wheels[0]) as archive:
        archive.extractall(target)
    source = target / "deform_conv2d_onnx_exporter.py"
    text = source.read_text()
    old_import = "from torch.onnx._type_utils import JitScalarType"
    new_import = "from torch.onnx._internal.torchscript_exporter._type_utils import JitScalarType"
    assert old_import in text, "1.2.0's JitScalarType import is not where expected"
    source.write_text(text.replace(old_import, new_import))
    return target


def export_baseline(baseline: Path, cfg: Config, out: Path) -> bytes | None:
    config = json.dumps(cfg.__dict__)
    done = subprocess.run(
        [sys.executable, "-c", BASELINE_SCRIPT, str(baseline), config, str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"  (1.2.0 export failed: {done.stderr.strip()[-400:]})")
        return None
    return out.read_bytes()


def export_ours(
    module: Any, inputs: dict[str, np.ndarray], decompose: bool, dynamic: bool = False
) -> Any:
    import torch
    from deform_conv2d_onnx_exporter import export

    args = tuple(torch.from_numpy(inputs[k]) for k in ("x", "offset", "mask"))
    auto = torch.export.Dim.AUTO
    shapes = tuple({0: auto, 2: auto, 3: auto} for _ in args) if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(
            module,
            args,
            opset_version=20,
            decompose=decompose,
            dynamic_shapes=shapes,
            input_names=["x", "offset", "mask"],
        )


def floor_models(model: Any, inputs: dict[str, np.ndarray]) -> dict[str, tuple[Any, dict]]:
    """Our graph's GridSample node and its GEMM node (MatMul or Conv), each cut out as a model.

    Returns ``{"GridSample alone": (model, feeds), "GEMM alone": (model, feeds)}``; the feeds
    are the real intermediate tensors of *inputs*, so GridSample samples the real grid.
    """
    import onnx
    from onnx.utils import Extractor

    nodes = list(model.graph.node)
    sample = next(n for n in nodes if n.op_type == "GridSample")
    gemm = next(n for n in nodes if n.op_type in ("MatMul", "Conv"))
    extractor = Extractor(onnx.shape_inference.infer_shapes(model))
    names = [i.name for i in model.graph.input]
    columns = gemm.input[1] if gemm.op_type == "MatMul" else gemm.input[0]  # MatMul: W @ cols
    wanted = [sample.input[0], sample.input[1], columns]
    session = ort_session(extractor.extract_model(names, wanted).SerializeToString())
    values = dict(zip(wanted, session.run(None, {k: inputs[k] for k in names}), strict=True))
    cuts = {
        "GridSample alone": ([sample.input[0], sample.input[1]], sample.output[0]),
        "GEMM alone": ([columns], gemm.output[0]),
    }
    return {
        label: (extractor.extract_model(ins, [out]), {k: values[k] for k in ins})
        for label, (ins, out) in cuts.items()
    }


def bench_config(
    cfg: Config, repeats: int, baseline: Path | None, workdir: Path
) -> dict[str, float]:
    import onnx
    import torch

    print(
        f"\n== {cfg.name}: N={cfg.n}, C={cfg.c}->{cfg.c}, {cfg.h}x{cfg.w}, k={cfg.kernel}, "
        f"pad={cfg.padding}, mask, offset_groups={cfg.offset_groups}; "
        f"median of {repeats} interleaved rounds, {THREADS} threads =="
    )
    inputs = make_inputs(cfg)
    module = make_module(cfg)
    torch_args = tuple(torch.from_numpy(inputs[k]) for k in ("x", "offset", "mask"))
    with torch.no_grad():
        reference = module(*torch_args).numpy()

    ours = export_ours(module, inputs, decompose=True)
    ours_dynamic = export_ours(module, inputs, decompose=True, dynamic=True)
    native = export_ours(module, inputs, decompose=False)
    onnx.checker.check_model(ours, full_check=True)
    old_path = workdir / f"old_{cfg.name}.onnx"
    old_bytes = export_baseline(baseline, cfg, old_path) if baseline else None
    ours_bytes = ours.SerializeToString()

    def torchvision_op() -> Any:
        with torch.no_grad():
            return module(*torch_args).numpy()

    runners: dict[str, Callable[[], Any]] = {"torchvision CPU op": torchvision_op}
    session = ort_session(ours_bytes)
    runners["onnxruntime, our graph"] = lambda: session.run(None, inputs)[0]
    dyn_bytes = ours_dynamic.SerializeToString()
    dyn_session = ort_session(dyn_bytes)
    runners["onnxruntime, our graph, dynamic N/H/W"] = lambda: dyn_session.run(None, inputs)[0]
    native_session = ort_session(native.SerializeToString())
    runners["onnxruntime, native DeformConv"] = lambda: native_session.run(None, inputs)[0]
    if old_bytes is not None:
        old_session = ort_session(old_bytes)
        runners["onnxruntime, 1.2.0 graph"] = lambda: old_session.run(None, inputs)[0]
    try:
        import openvino as ov
    except ImportError:
        ov = None
        print("  (OpenVINO not installed: its rows are skipped)")
    if ov is not None:
        compiled = ov_compile(ours_bytes)
        runners["OpenVINO f32, our graph"] = lambda: compiled(inputs)[compiled.output(0)]
        dyn_ov = ov_compile(dyn_bytes)
        runners["OpenVINO f32, our graph, dynamic N/H/W"] = lambda: dyn_ov(inputs)[dyn_ov.output(0)]
        if old_bytes is not None:
            old_ov = ov_compile(old_bytes)
            runners["OpenVINO f32, 1.2.0 graph"] = lambda: old_ov(inputs)[old_ov.output(0)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = ov.convert_model(module, example_input=torch_args)
        direct = ov_compile(converted)
        feeds = [inputs["x"], inputs["offset"], inputs["mask"]]
        runners["OpenVINO f32, convert_model(torch)"] = lambda: direct(feeds)[direct.output(0)]

    errors = {k: float(np.abs(np.asarray(fn()) - reference).max()) for k, fn in runners.items()}
    for part, (cut, cut_feeds) in floor_models(ours, inputs).items():
        cut_bytes = cut.SerializeToString()
        cut_session = ort_session(cut_bytes)
        runners[f"onnxruntime, floor: {part}"] = partial(cut_session.run, None, cut_feeds)
        if ov is not None:
            cut_ov = ov_compile(cut_bytes)
            runners[f"OpenVINO f32, floor: {part}"] = partial(cut_ov, cut_feeds)
    # One runtime at a time: OpenVINO's worker threads keep spinning after a request and
    # slowed onnxruntime's own multi-threaded native kernel when all rows were interleaved
    # (it made native DeformConv look ~1.6x slower than when measured alone).
    times: dict[str, list[float]] = {}
    for prefix in ("torchvision", "onnxruntime", "OpenVINO"):
        group = {k: fn for k, fn in runners.items() if k.startswith(prefix)}
        times.update(interleaved_times(group, repeats))
    rows = {k: statistics.median(v) for k, v in times.items()}
    width = max(len(k) for k in rows)
    print(
        f"  {'':<{width}}  {'median':>9}     {'min':>8}     ratio to its runtime's native"
        "  max|err| vs tv"
    )
    # The ratio is the median over rounds of (this row / its native row in the same round):
    # rows of one round run back to back, so load from the six other users hits both alike.
    ratios: dict[str, float] = {}
    for label in rows:
        native_label = (
            "OpenVINO f32, convert_model(torch)"
            if label.startswith("OpenVINO")
            else "onnxruntime, native DeformConv"
        )
        if native_label in times:
            pairs = zip(times[label], times[native_label], strict=True)
            ratios[label] = statistics.median(a / b for a, b in pairs)
    for label, ms in rows.items():
        ratio = f"x{ratios[label]:6.2f}" if label in ratios else "       "
        print(
            f"  {label:<{width}}  {ms:9.2f} ms  {min(times[label]):8.2f} ms  {ratio}"
            + (f"                        {errors[label]:.2e}" if label in errors else "")
        )
    rows.update({f"ratio: {k}": v for k, v in ratios.items()})
    print(f"  nodes, our graph:   {op_counts(ours)}")
    print(f"  nodes, our graph, dynamic N/H/W: {op_counts(ours_dynamic)}")
    if old_bytes is not None:
        print(f"  nodes, 1.2.0 graph: {op_counts(onnx.load_from_string(old_bytes))}")
    shares = profile_shares(ours_bytes, inputs, max(3, repeats // 2))
    print(f"  onnxruntime profile, our graph: {shares}")
    if ov is not None:
        profiled = ov_compile(ours_bytes, profile=True)
        shares = openvino_profile_shares(profiled, inputs, max(3, repeats // 2))
        print(f"  OpenVINO profile, our graph: {shares}")
    return rows


def interleaved_times(
    runners: dict[str, Callable[[], Any]], repeats: int
) -> dict[str, list[float]]:
    """Times in ms per runner, measured round-robin so that load spikes hit every row alike.

    Three warm-up runs each: the first runs of a session touch fresh memory for the large
    intermediate tensors (page faults), which made runs 1-2 up to 2x slower than steady state.
    """
    for fn in runners.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(repeats):
        for label, fn in runners.items():
            start = CLOCK()
            fn()
            times[label].append((CLOCK() - start) * 1000)
    return times


# -- accuracy on BasicVSR++-like stacks (issue 26 item 4) -------------------------------------


@dataclass(frozen=True)
class Stack:
    """Several 64-channel modulated DCN layers in a row, offsets of 10-20 px from a flow."""

    name: str
    layers: int
    c: int
    offset_groups: int
    h: int
    w: int
    flow_std: float  # px
    feat_std: float  # input feature scale: outputs in the hundreds
    #: True: each layer predicts its offsets from the features (BasicVSR++'s alignment:
    #: convs over [x, cond, flow], 10*tanh residual + flow); False: offsets and masks are
    #: inputs (the same construction, done once in float64), so only the DCNs are measured.
    predicted: bool = True


STACKS = [
    Stack("flow-guided 3x, og16, 64x64", 3, 64, 16, 64, 64, 12.0, 30.0),
    Stack("flow-guided 2x, og16, 96x128", 2, 64, 16, 96, 128, 15.0, 30.0),
    Stack("DCN only 4x, og16, 64x64", 4, 64, 16, 64, 64, 12.0, 60.0, predicted=False),
    Stack("DCN only 4x, og16, 96x128", 4, 64, 16, 96, 128, 20.0, 60.0, predicted=False),
]


def make_stack(stack: Stack) -> tuple[Any, dict[str, np.ndarray]]:
    """The module (float32, seeded) and its float32 inputs."""
    import torch
    import torchvision

    c, og = stack.c, stack.offset_groups
    residue = 10.0

    def offsets(raw: Any, flow: Any) -> tuple[Any, Any]:
        o1, o2, mask = torch.chunk(raw, 3, 1)
        offset = residue * torch.tanh(torch.cat((o1, o2), 1))
        return offset + flow.flip(1).repeat(1, offset.size(1) // 2, 1, 1), torch.sigmoid(mask)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv_offset = torch.nn.Sequential(
                torch.nn.Conv2d(2 * c + 2, c, 3, 1, 1), torch.nn.LeakyReLU(0.1),
                torch.nn.Conv2d(c, c, 3, 1, 1), torch.nn.LeakyReLU(0.1),
                torch.nn.Conv2d(c, 27 * og, 3, 1, 1),
            )  # fmt: skip
            self.weight = torch.nn.Parameter(torch.randn(c, c, 3, 3) * (2 / (9 * c)) ** 0.5)
            self.bias = torch.nn.Parameter(torch.randn(c))

        def forward(self, x: Any, offset: Any, mask: Any) -> Any:
            y = torchvision.ops.deform_conv2d(
                x, offset, self.weight, self.bias, padding=1, mask=mask
            )
            return x + torch.nn.functional.leaky_relu(y, 0.1)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(stack.layers))

        def forward(self, x: Any, *rest: Any) -> Any:
            """rest: (cond, flow) when predicted, else (offset0, mask0, offset1, ...)."""
            for i, layer in enumerate(self.layers):
                if stack.predicted:
                    cond, flow = rest
                    offset, mask = offsets(layer.conv_offset(torch.cat([x, cond, flow], 1)), flow)
                else:
                    offset, mask = rest[2 * i], rest[2 * i + 1]
                x = layer(x, offset, mask)
            return x

    net = Net().eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, c, stack.h, stack.w, generator=g) * stack.feat_std
    cond = torch.randn(1, c, stack.h, stack.w, generator=g) * stack.feat_std
    coarse = torch.randn(1, 2, stack.h // 8 + 1, stack.w // 8 + 1, generator=g)
    flow = torch.nn.functional.interpolate(coarse, size=(stack.h, stack.w), mode="bicubic")
    flow = flow / flow.std() * stack.flow_std  # a smooth flow field, std flow_std px
    feeds = {"x": x, "cond": cond, "flow": flow} if stack.predicted else {"x": x}
    if not stack.predicted:  # offsets and masks as inputs, computed once in float64
        with torch.no_grad():
            for i in range(stack.layers):
                raw = torch.randn(1, 27 * og, stack.h, stack.w, generator=g, dtype=torch.float64)
                offset, mask = offsets(raw, flow.double())
                feeds[f"offset{i}"], feeds[f"mask{i}"] = offset.float(), mask.float()
    return net, {k: v.numpy() for k, v in feeds.items()}


def stack_errors(stack: Stack) -> tuple[float, dict[str, float]]:
    """max |output| and each route's max abs error against the float64 torchvision run."""
    import io

    import openvino as ov
    import torch
    from deform_conv2d_onnx_exporter import (
        export,
        lower_deform_conv,
        register_deform_conv2d_onnx_op,
        unregister_deform_conv2d_onnx_op,
    )

    net, feeds = make_stack(stack)
    names = list(feeds)
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    with torch.no_grad():
        want = net.double()(*(a.double() for a in args)).numpy()
        net.float()
        errors = {"torch float32 (the module)": float(np.abs(net(*args).numpy() - want).max())}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_deform_conv2d_onnx_op()
        buffer = io.BytesIO()
        torch.onnx.export(net, args, buffer, dynamo=False, opset_version=16, input_names=names)
        unregister_deform_conv2d_onnx_op()
        native = export(net, args, opset_version=19, decompose=False, input_names=names)
        models = {
            "TorchScript exporter, opset 16": buffer.getvalue(),
            "dynamo, decomposed, opset 18": export(
                net, args, opset_version=18, decompose=True, input_names=names
            ).SerializeToString(),
            "native DeformConv lowered, opset 19": lower_deform_conv(native).SerializeToString(),
        }
        converted = ov.convert_model(net, example_input=args)

    def error(got: Any) -> float:
        return float(np.abs(np.asarray(got) - want).max())

    positional = [feeds[n] for n in names]  # convert_model's input names are its own

    errors["onnxruntime: native DeformConv (opset 19)"] = error(
        ort_session(native.SerializeToString()).run(None, feeds)[0]
    )
    for route, data in models.items():
        errors[f"onnxruntime: {route}"] = error(ort_session(data).run(None, feeds)[0])
    errors["OpenVINO f32: native DeformableConvolution (convert_model)"] = error(
        ov_compile(converted)(positional)[0]
    )
    for route, data in models.items():
        errors[f"OpenVINO f32: {route}"] = error(ov_compile(data)(positional)[0])
    core = ov.Core()
    default = str(core.get_property("CPU", "INFERENCE_PRECISION_HINT"))
    for route, model in [
        ("native DeformableConvolution (convert_model)", converted),
        (
            "dynamo, decomposed, opset 18",
            core.read_model(models["dynamo, decomposed, opset 18"], b""),
        ),
    ]:
        compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": THREADS})
        errors[f"OpenVINO default ({default}): {route}"] = error(compiled(positional)[0])
    return float(np.abs(want).max()), errors


def offset_conv_errors(stack: Stack) -> dict[str, float]:
    """The first layer's first offset Conv alone (130 -> 64 channels, 3x3): each runtime's
    max abs error against float64. Why OpenVINO's error on a predicted stack is its own."""
    import torch

    net, feeds = make_stack(stack)
    conv = net.layers[0].conv_offset[0]
    x = torch.cat([torch.from_numpy(feeds[n]) for n in ("x", "cond", "flow")], 1)
    with torch.no_grad():
        want = conv.double()(x.double()).numpy()
        conv.float()
        got = {"torch": conv(x).numpy()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = torch.onnx.export(conv, (x,), dynamo=True, input_names=["x"]).model_proto
    got["onnxruntime"] = ort_session(data.SerializeToString()).run(None, {"x": x.numpy()})[0]
    got["OpenVINO f32"] = ov_compile(data.SerializeToString())([x.numpy()])[0]
    return {k: float(np.abs(v - want).max()) for k, v in got.items()}


def bf16_nodes(stack: Stack) -> str:
    """Node types OpenVINO's default precision runs in bf16 in our decomposed graph."""
    import openvino as ov
    import torch
    from deform_conv2d_onnx_exporter import export

    net, feeds = make_stack(stack)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = export(net, args, opset_version=18, decompose=True, input_names=list(feeds))
    core = ov.Core()
    compiled = core.compile_model(core.read_model(proto.SerializeToString(), b""), "CPU")
    counts: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind, precision = info["layerType"].astype(str), info["runtimePrecision"].astype(str)
        if kind not in ("Input", "Output", "Const"):
            counts[f"{kind} {precision}"] += 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


def run_accuracy(only: str | None) -> None:
    """Print each stack's errors and each route's ratio to its runtime's native error."""
    import openvino as ov

    default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text().split() if cpuinfo.exists() else []
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
    print(f"CPU flags: {' '.join(f for f in wanted if f in flags)}; OpenVINO default {default}")
    for stack in STACKS:
        if only and only not in stack.name:
            continue
        scale, errors = stack_errors(stack)
        print(f"\n== {stack.name}: {stack}, max |output| {scale:.0f} ==")
        if stack.predicted:
            conv = offset_conv_errors(stack)
            print(
                "  first offset Conv alone: " + ", ".join(f"{k} {v:.2e}" for k, v in conv.items())
            )
        else:
            print(f"  OpenVINO default precision runs: {bf16_nodes(stack)}")
        natives = {
            "onnxruntime": errors["onnxruntime: native DeformConv (opset 19)"],
            "OpenVINO f32": errors["OpenVINO f32: native DeformableConvolution (convert_model)"],
        }
        for route, value in errors.items():
            runtime = route.split(":")[0]
            ratio = f"  {value / natives[runtime]:.2f}x native" if runtime in natives else ""
            print(f"  {route:62s} {value:.3e}{ratio}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=0, help="timed runs per row (default: 20 for S, 7 else)"
    )
    parser.add_argument("--only", choices=[c.name for c in CONFIGS], help="run one configuration")
    parser.add_argument("--no-baseline", action="store_true", help="skip the 1.2.0 package")
    parser.add_argument("--threads", type=int, default=2, help="threads per runtime (default 2)")
    parser.add_argument(
        "--cpu-time", action="store_true", help="time by process CPU time, not the wall clock"
    )
    parser.add_argument(
        "--accuracy",
        metavar="STACK",
        nargs="?",
        const="",
        help="instead of timing: errors on BasicVSR++-like stacks (all, or names containing STACK)",
    )
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    global THREADS, CLOCK
    THREADS = args.threads
    CLOCK = time.process_time if args.cpu_time else time.perf_counter

    import onnxruntime
    import torch
    import torchvision

    torch.set_num_threads(THREADS)
    versions = (
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
        f"onnxruntime {onnxruntime.__version__}"
    )
    try:
        import openvino

        versions += f", openvino {openvino.get_version()}"
    except ImportError:
        pass
    clock = "process CPU time" if args.cpu_time else "wall clock"
    print(
        f"DeformConv2d benchmark ({versions}); {os.cpu_count()} CPUs, {THREADS} threads "
        f"everywhere, {clock}; load average {os.getloadavg()[0]:.2f}"
    )
    if args.accuracy is not None:
        run_accuracy(args.accuracy)
        return 0
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        baseline = None if args.no_baseline else fetch_baseline(workdir)
        for cfg in CONFIGS:
            if (args.only or None) not in (cfg.name, None) or (
                not args.only and cfg.name not in DEFAULT_CONFIGS
            ):
                continue
            repeats = args.repeats or (20 if cfg.name == "S" else 7)
            results[cfg.name] = bench_config(cfg, repeats, baseline, workdir)

    print("\n== goals ==")
    checks = []
    for name in results:
        checks += [
            (name, "onnxruntime, our graph", "onnxruntime, native DeformConv", 1.25),
            (name, "onnxruntime, our graph, dynamic N/H/W", "onnxruntime, native DeformConv", 1.25),
            (name, "OpenVINO f32, our graph", "OpenVINO f32, convert_model(torch)", 1.5),
            (
                name,
                "OpenVINO f32, our graph, dynamic N/H/W",
                "OpenVINO f32, convert_model(torch)",
                1.5,
            ),
        ]
    for name, ours, other, goal in checks:
        rows = results.get(name, {})
        if f"ratio: {ours}" not in rows:
            print(f"  {name}: {ours} / {other} <= {goal}: not measured")
            continue
        ratio = rows[f"ratio: {ours}"]
        verdict = "met" if ratio <= goal else "NOT met"
        print(f"  {name}: {ours} / {other} = {ratio:.3f} (goal <= {goal}): {verdict}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
