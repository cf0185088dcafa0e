"""The `openvino-runner` console script: a thin shell over the package's API.

The repository's CLI rule comes from the vendored kit (:mod:`openvino_runner._clikit`):
one-line errors, exit status 0 on success, 1 when ``compare``/``convert --check`` find a
mismatch, 2 for usage or input problems,
130 on Ctrl-C, 141 on a closed stdout; output files are written beside the target and
renamed into place; ``--json -`` writes JSON to stdout and the text to stderr.

Heavy modules (numpy, OpenVINO, onnxruntime, tqdm) are imported inside the subcommands,
so ``openvino-runner --help`` imports only this module, the kit and the errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openvino_runner import _clikit
from openvino_runner.errors import MissingDependencyError, RunnerError

if TYPE_CHECKING:
    import numpy as np

    from openvino_runner.inputs import ImageOptions
    from openvino_runner.runner import Runner

PROG = "openvino-runner"
PRECISION_CHOICES = ("f32", "bf16", "f16", "default")
EXIT_MISMATCH = _clikit.EXIT_NEGATIVE


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = (math.nan,)
    if not all(math.isfinite(v) for v in values):  # nan made every input nan, silently
        raise argparse.ArgumentTypeError(
            f"expected comma-separated finite numbers such as 123.675,116.28,103.53, got {text!r}"
        )
    return values


def _divisors(text: str) -> tuple[float, ...]:
    values = _floats(text)
    if 0 in values:
        raise argparse.ArgumentTypeError(f"a scale divides the pixels: not 0, got {text!r}")
    return values


def _size(text: str) -> tuple[int, int]:
    spec = _clikit.parse_shape(text)
    if spec.name is not None or len(spec.dims) != 2 or min(spec.dims) < 1:
        raise argparse.ArgumentTypeError(
            f"image size is HEIGHT,WIDTH, each at least 1, got {text!r}"
        )
    return spec.dims[0], spec.dims[1]


def _seed(text: str) -> int:
    """A random seed: numpy takes integers 0 to 2**32 - 1 (a negative one was a traceback)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 4294967295, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:  # nan and inf made bench run forever
        raise argparse.ArgumentTypeError(f"expected a finite positive number, got {text!r}")
    return value


def _tolerance(text: str) -> float:
    """A tolerance: a finite number >= 0 (a negative one would fail every output)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 such as 1e-4, got {text!r}")
    return value


def _add_model_options(
    parser: argparse.ArgumentParser, *, inputs: bool = True, model_optional: bool = False
) -> None:
    parser.add_argument(
        "model",
        nargs="?" if model_optional else None,
        help="model file: .onnx, .xml (IR), .tflite, .pb, .pdmodel",
    )
    parser.add_argument(
        "-d", "--device", default="CPU", help="OpenVINO device, e.g. CPU, GPU (default: CPU)"
    )
    parser.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="f32",
        help="inference precision hint (default: f32, for parity with other runtimes; "
        "'default' keeps the device's own choice, bf16 on CPUs with AMX)",
    )
    parser.add_argument(
        "--shape",
        type=_clikit.parse_free_shape,
        action="append",
        default=[],
        metavar="[NAME=]D0,D1,...",
        help="reshape an input before compiling, e.g. x=1,3,224,224; -1 or ? leaves a "
        "dimension free (dynamic): -1,3,224,224 (repeatable; NAME may be left out for a "
        "one-input model)",
    )
    if not inputs:
        return
    parser.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="input data: .npy, .npz (arrays matched by name) or an image (repeatable). "
        "Inputs not given get seeded random data; free dims default to "
        f"{_clikit.FREE_DIM_FIRST} (first) and {_clikit.FREE_DIM_OTHER} (others)",
    )
    parser.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs")
    _add_image_options(parser)


def _add_image_options(parser: argparse.ArgumentParser) -> None:
    images = parser.add_argument_group("image inputs (value = (pixel - mean) / scale)")
    images.add_argument(
        "--image-size",
        type=_size,
        metavar="H,W",
        help="resize to HEIGHT,WIDTH (default: the input's static size, else unchanged)",
    )
    images.add_argument(
        "--layout",
        choices=("NCHW", "NHWC"),
        help="tensor layout (default: NCHW unless the last dim is 1 or 3)",
    )
    images.add_argument(
        "--mean",
        type=_floats,
        default=None,
        metavar="M[,M,M]",
        help="subtracted per channel, in 0-255 units (default: 0)",
    )
    images.add_argument(
        "--scale",
        type=_divisors,
        default=None,
        metavar="S[,S,S]",
        help="divisor per channel after the mean (default: 1)",
    )
    images.add_argument("--bgr", action="store_true", help="channels in BGR order (default: RGB)")


def _add_compile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hint",
        choices=("latency", "throughput"),
        default="latency",
        help="PERFORMANCE_HINT: one request at a time (latency, the default) or as many "
        "parallel requests as the device likes (throughput)",
    )
    parser.add_argument(
        "--streams", type=_positive_int, metavar="N", help="NUM_STREAMS (default: the hint's)"
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        metavar="N",
        help="INFERENCE_NUM_THREADS (default: all cores)",
    )
    parser.add_argument(
        "--cache-dir", metavar="DIR", help="OpenVINO model cache folder (created if missing)"
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `openvino-runner`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, run, compare, profile and benchmark models on OpenVINO.",
    )
    _clikit.add_version_option(parser, "openvino-runner")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser("info", help="inputs, outputs, op counts and conversion of a model")
    _add_model_options(info, inputs=False)
    _clikit.add_json_option(info, "the model's description")
    info.set_defaults(func=cmd_info)

    run = sub.add_parser("run", help="run one inference, print and save the outputs")
    _add_model_options(run)
    run.add_argument(
        "-o", "--output", metavar="OUT.npz", help="save the outputs here, by name (.npz)"
    )
    _clikit.add_json_option(run, "the inputs' and outputs' summary")
    run.set_defaults(func=cmd_run)

    compare = sub.add_parser(
        "compare", help="compare OpenVINO with onnxruntime on the same inputs (exit 1: mismatch)"
    )
    _add_model_options(compare)
    compare.add_argument(
        "--against",
        choices=("onnxruntime",),
        default="onnxruntime",
        help="the reference runtime (only onnxruntime so far)",
    )
    compare.add_argument(
        "--atol", type=_tolerance, default=1e-4, help="absolute tolerance (default: 1e-4)"
    )
    compare.add_argument(
        "--rtol", type=_tolerance, default=1e-3, help="relative tolerance (default: 1e-3)"
    )
    compare.add_argument(
        "--top-k",
        type=_positive_int,
        default=5,
        metavar="K",
        help="for classifier-shaped outputs (N, C): report how many of the reference's "
        "top K classes OpenVINO also ranks in its top K (default: 5)",
    )
    compare.add_argument(
        "--reference",
        metavar="MODEL.onnx",
        help="run this ONNX model on onnxruntime (default: MODEL itself, which must be ONNX); "
        "e.g. the source of an IR written by `convert`",
    )
    _clikit.add_json_option(compare, "the comparison")
    compare.set_defaults(func=cmd_compare)

    bench = sub.add_parser(
        "bench",
        help="measure compile time, latency and throughput, or --compare saved reports",
        description="Measure a model, or put saved `bench --json` reports side by side "
        "(bench --compare A.json B.json ...).",
    )
    _add_model_options(bench, model_optional=True)
    _add_compile_options(bench)
    stop = bench.add_mutually_exclusive_group()
    stop.add_argument(
        "-t", "--time", type=_positive_float, metavar="SECONDS", help="run this long (default: 10)"
    )
    stop.add_argument(
        "-n", "--iterations", type=_positive_int, metavar="N", help="run N inferences"
    )
    bench.add_argument(
        "--requests",
        type=_positive_int,
        metavar="N",
        help="infer requests (default: 1 for latency, the device's optimum for throughput)",
    )
    bench.add_argument(
        "--compare",
        nargs="+",
        metavar="REPORT.json",
        help="compare saved `bench --json` reports (the first is the baseline): metrics, "
        "ratios and every setting that differs; no model is run",
    )
    bench.add_argument(
        "--plot",
        metavar="FILE.png|svg|pdf",
        help="also draw the latency distribution (of each --compare report) into FILE "
        "(needs openvino-runner[plot])",
    )
    _clikit.add_json_option(bench, "the report (latency samples, settings, versions, CPU)")
    _clikit.add_progress_option(bench)
    bench.set_defaults(func=cmd_bench)

    profile = sub.add_parser(
        "profile",
        help="per-layer time from OpenVINO's performance counters, slowest first",
    )
    _add_model_options(profile)
    _add_compile_options(profile)
    profile.add_argument(
        "-n",
        "--iterations",
        type=_positive_int,
        default=50,
        metavar="N",
        help="inferences with counters (and as many without, interleaved, to measure the "
        "counters' overhead); per-layer times are medians over them (default: 50)",
    )
    profile.add_argument(
        "--top",
        type=_positive_int,
        default=15,
        metavar="N",
        help="print the N slowest layers (default: 15; --json keeps all)",
    )
    profile.add_argument(
        "--exec-graph",
        metavar="FILE.xml",
        help="also write the executed graph (kernels, precisions, per-layer times) as "
        "IR .xml + .bin, like benchmark_app -exec_graph_path",
    )
    _clikit.add_json_option(profile, "every layer's times and the per-type summary")
    profile.set_defaults(func=cmd_profile)

    convert = sub.add_parser(
        "convert",
        help="write the model as OpenVINO IR (.xml + .bin), DeformConv included "
        "(exit 1: --check mismatch)",
    )
    _add_model_options(convert, inputs=False)
    convert.add_argument(
        "-o", "--output", required=True, metavar="OUT.xml", help="the IR to write (.bin beside it)"
    )
    convert.add_argument(
        "--compress-to-fp16",
        action="store_true",
        help="store float weights as FP16 (half the size; outputs move by ~1e-3 relative)",
    )
    convert.add_argument(
        "--output-names",
        metavar="NAME[,NAME...]",
        help="make these tensors the outputs, in this order: graph outputs or inner ones such "
        "as the logits before a softmax (ops nothing needs any more are dropped); "
        "ovc calls this --output",
    )
    convert.add_argument(
        "--check",
        action="store_true",
        help="run the IR against the source (OpenVINO, and onnxruntime for ONNX) on seeded "
        "random inputs; exit 1 beyond tolerance",
    )
    convert.add_argument(
        "--atol",
        type=_tolerance,
        help="--check's absolute tolerance (default 1e-4, or 1e-2 with --compress-to-fp16)",
    )
    convert.add_argument(
        "--rtol",
        type=_tolerance,
        help="--check's relative tolerance (default 1e-3, or 1e-2 with --compress-to-fp16)",
    )
    convert.add_argument("--seed", type=_seed, default=0, help="seed of --check's random inputs")
    _clikit.add_json_option(convert, "the conversion report")
    convert.set_defaults(func=cmd_convert)

    quantize = sub.add_parser(
        "quantize",
        help="post-training INT8 with NNCF, then its accuracy cost and speed-up "
        "(exit 1: beyond --max-drop)",
        description="Quantize to INT8 (needs openvino-runner[quantize]), write the IR, then "
        "compare it with the f32 model on held-out samples and time both, interleaved.",
    )
    _add_model_options(quantize, inputs=False)
    quantize.add_argument(
        "-o", "--output", required=True, metavar="OUT.xml", help="the INT8 IR to write"
    )
    quantize.add_argument(
        "--data",
        required=True,
        metavar="DIR|FILE.npz|FILE.npy",
        help="calibration samples: a folder of images (or .npy files, one sample each), an "
        ".npy, or an .npz with one array per input name; arrays hold N samples stacked "
        "(N, ...) or split along their first axis",
    )
    quantize.add_argument(
        "--subset",
        type=_positive_int,
        default=300,
        metavar="N",
        help="calibrate on at most N samples (default: 300)",
    )
    quantize.add_argument(
        "--held-out",
        type=_positive_int,
        metavar="N",
        help="the last N samples never calibrate; they measure the accuracy cost "
        "(default: a fifth, at least 1)",
    )
    quantize.add_argument(
        "--preset",
        choices=("performance", "mixed"),
        default="performance",
        help="NNCF preset: symmetric weights and activations (performance, the default) "
        "or asymmetric activations (mixed: for non-ReLU activations)",
    )
    quantize.add_argument(
        "--ignored-scope",
        type=_clikit.key_value,
        action="append",
        default=[],
        metavar="KIND=VALUE",
        help="keep in f32: name=NODE, type=OPTYPE (e.g. type=MatMul) or pattern=REGEX (repeatable)",
    )
    quantize.add_argument(
        "--max-drop",
        type=_tolerance,
        metavar="FRACTION",
        help="exit 1 when the accuracy cost exceeds this: the share of held-out samples whose "
        "top-1 class changed (classifiers), else 1 - the worst cosine similarity",
    )
    quantize.add_argument(
        "--rounds",
        type=_positive_int,
        default=3,
        metavar="N",
        help="speed: turns per model, f32 and INT8 alternating (default: 3)",
    )
    quantize.add_argument(
        "-t",
        "--time",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="speed: seconds per turn, for latency and again for throughput (default: 1)",
    )
    _add_image_options(quantize)
    _clikit.add_json_option(quantize, "the accuracy and speed report")
    quantize.set_defaults(func=cmd_quantize)

    _clikit.add_completion_command(sub, parser)
    return parser


def _runner(args: argparse.Namespace, **kwargs: Any) -> Runner:
    from openvino_runner.runner import Runner

    _check_targets(args)
    precision = None if args.precision == "default" else args.precision
    runner = Runner(args.model, args.device, precision, **kwargs)
    if args.shape:
        shapes: dict[str, tuple[int, ...]] = {}
        for name, dims in args.shape:
            if name is None:
                specs = runner.input_specs()
                if len(specs) != 1:
                    raise RunnerError(
                        f"the model has {len(specs)} inputs; name the one to reshape, e.g. "
                        f"--shape {specs[0].name}={','.join(map(str, dims))}"
                    )
                name = specs[0].name
            if name in shapes and shapes[name] != dims:  # the last one won, silently
                raise RunnerError(
                    f"--shape for {name!r} given twice: {','.join(map(str, shapes[name]))} "
                    f"and {','.join(map(str, dims))}; give one"
                )
            shapes[name] = dims
        runner.reshape(shapes)
    return runner


def _inputs(args: argparse.Namespace) -> dict[str | None, Any]:
    from openvino_runner.inputs import parse_assignment

    given: dict[str | None, Any] = {}
    for item in args.input:
        name, value = parse_assignment(item, "--input")
        given[name] = value
    return given


_IMAGE_OPTIONS = {
    "image_size": "--image-size",
    "layout": "--layout",
    "mean": "--mean",
    "scale": "--scale",
    "bgr": "--bgr",
}


def _image(args: argparse.Namespace) -> ImageOptions:
    from openvino_runner.inputs import IMAGE_SUFFIXES, ImageOptions, parse_assignment

    if hasattr(args, "input"):  # (quantize has --data instead, folders of images included)
        given = [flag for key, flag in _IMAGE_OPTIONS.items() if getattr(args, key)]
        files = [parse_assignment(item, "--input")[1] for item in args.input]
        if given and not any(Path(f).suffix.lower() in IMAGE_SUFFIXES for f in files):
            # They only shape how an image becomes a tensor: ignoring them hid a mistake.
            verb = "applies" if len(given) == 1 else "apply"
            raise RunnerError(
                f"{', '.join(given)} only {verb} to image inputs "
                f"({', '.join(sorted(IMAGE_SUFFIXES))}), and no --input is an image; "
                "give one (e.g. --input photo.jpg) or leave the option out"
            )
    return ImageOptions(
        size=args.image_size,
        layout=args.layout,
        mean=(0.0,) if args.mean is None else args.mean,
        scale=(1.0,) if args.scale is None else args.scale,
        bgr=args.bgr,
    )


def _check_targets(args: argparse.Namespace) -> None:
    """Refuse output paths that cannot be written, before any compiling.

    A benchmark or a large inference should not run to completion only to fail at the end.
    """
    written: dict[Path, str] = {}
    for option, value in (
        ("--output", getattr(args, "output", None)),
        ("--json", getattr(args, "json", None)),
        ("--exec-graph", getattr(args, "exec_graph", None)),
        ("--plot", getattr(args, "plot", None)),
    ):
        if not value or (option == "--json" and value == "-"):
            continue
        if value == "-":  # would write a file named '-'; stdout is for --json alone
            raise RunnerError(f"{option} -: '-' (stdout) is for --json only; give a file name")
        target = Path(value)
        if option == "--plot" and target.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise RunnerError(f"--plot {value}: give a .png, .svg or .pdf file name")
        if option == "--plot" and importlib.util.find_spec("matplotlib") is None:
            # before a benchmark of --time seconds, not after it
            raise MissingDependencyError(
                "plotting needs matplotlib: pip install 'openvino-runner[plot]'"
            )
        _clikit.check_writable(value, option)  # a folder, or in no folder: one line
        folder = target.parent
        if not os.access(folder, os.W_OK):
            raise RunnerError(
                f"{option} {value}: the folder {folder} is not writable (read-only?); "
                "pick another path"
            )
        # An IR (.xml) comes with its .bin: no other output may land on either.
        for path in (target, target.with_suffix(".bin")) if target.suffix == ".xml" else (target,):
            other = written.setdefault(path.resolve(), option)
            if other != option:
                raise RunnerError(
                    f"{other} and {option} would both write {path}; give them different files"
                )


def _write_json(args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    _clikit.write_json(args.json, data)
    if args.json and args.json != "-":
        print(f"report written to {args.json}")


def save_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    """Save *arrays* as an uncompressed ``.npz`` that ``numpy.load`` reads back by name.

    Unlike ``np.savez(path, **arrays)``, any output name works, including ``file`` and
    ``allow_pickle`` (``np.savez``'s own parameters).
    """
    import zipfile

    import numpy as np

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def _precision_note(runner: Runner) -> str:
    effective = runner.properties().get("INFERENCE_PRECISION_HINT", "?")
    asked = runner.precision or "device default"
    return f"precision: {effective} (asked: {asked})"


def cmd_info(args: argparse.Namespace) -> int:
    runner = _runner(args)
    info = runner.info()
    print(f"model:   {info.path}")
    how = "converted by OpenVINO's frontend on every read" if info.converted else "native"
    print(f"format:  {info.format} ({how})")
    for title, ports in (("inputs", info.inputs), ("outputs", info.outputs)):
        print(f"{title}:")
        for p in ports:
            extra = (
                f"  (also: {', '.join(n for n in p.names if n != p.name)})"
                if len(p.names) > 1
                else ""
            )
            print(f"  {p.name:<32} {p.element_type:<6} {p.shape}{extra}")
    if info.source_op_counts is not None:
        total = sum(info.source_op_counts.values())
        print(f"ONNX ops in the file ({total}):")
        for op, count in info.source_op_counts.items():
            print(f"  {op:<32} {count}")
    total = sum(info.op_counts.values())
    print(f"OpenVINO ops after conversion ({total}):" if info.converted else f"ops ({total}):")
    for op, count in info.op_counts.items():
        print(f"  {op:<32} {count}")
    if info.custom_conversions:
        print("converted by openvino-runner's extensions:")
        for what, count in info.custom_conversions.items():
            print(f"  {what:<32} {count}")
    if info.converted:  # the command to copy, with this model's names
        import shlex

        ir = shlex.quote(str(Path(args.model).with_suffix(".xml")))
        print(
            f"to skip conversion next time: {PROG} convert {shlex.quote(args.model)} -o {ir} "
            "(writes OpenVINO IR .xml/.bin)"
        )
    _write_json(args, info.to_dict())
    return 0


def _summary(array: np.ndarray[Any, Any]) -> dict[str, Any]:
    """dtype, shape, min/max/mean and (for one classifier row) the top 5, JSON-ready."""
    import numpy as np

    from openvino_runner.compare import classification_rows

    data: dict[str, Any] = {"dtype": str(array.dtype), "shape": list(array.shape)}
    if array.size and np.issubdtype(array.dtype, np.number):
        values = array.astype(np.float64)
        data.update(min=float(values.min()), max=float(values.max()), mean=float(values.mean()))
        rows = classification_rows(array)
        if rows is not None and rows.shape[0] == 1:
            top = np.argsort(-rows[0], kind="stable")[:5]
            data["top5"] = [[int(i), float(rows[0][i])] for i in top]
    return data


def _describe(name: str, data: Mapping[str, Any]) -> str:
    text = f"  {name:<32} {data['dtype']:<8} {data['shape']}"
    if "min" in data:
        text += f"  min {data['min']:.6g} max {data['max']:.6g} mean {data['mean']:.6g}"
    if "top5" in data:
        text += "  top5 " + ", ".join(f"{i}:{v:.4g}" for i, v in data["top5"])
    return text


def cmd_run(args: argparse.Namespace) -> int:
    runner = _runner(args)
    feeds = runner.prepare(_inputs(args), seed=args.seed, image=_image(args))
    outputs = runner.run(feeds)
    report: dict[str, Any] = {
        "model": str(runner.path),
        "device": args.device,
        "precision": runner.properties().get("INFERENCE_PRECISION_HINT", "?"),
        "inputs": {name: _summary(array) for name, array in feeds.items()},
        "outputs": {name: _summary(array) for name, array in outputs.items()},
        "saved_to": args.output,
    }
    print(f"device: {args.device}, {_precision_note(runner)}")
    for title in ("inputs", "outputs"):
        print(f"{title}:")
        for name, data in report[title].items():
            print(_describe(name, data))
    if args.output:
        with _clikit.atomic_path(args.output, "--output") as partial:
            save_npz(partial, outputs)
        print(f"outputs saved to {args.output}")
    _write_json(args, report)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from openvino_runner.compare import compare_with_onnxruntime

    runner = _runner(args)
    report = compare_with_onnxruntime(
        runner,
        _inputs(args),
        seed=args.seed,
        image=_image(args),
        atol=args.atol,
        rtol=args.rtol,
        top_k=args.top_k,
        reference=args.reference,
    )
    default = (
        " (openvino-runner's default, for parity; OpenVINO alone picks bf16 on AMX CPUs)"
        if args.precision == "f32"
        else ""
    )
    print(
        f"OpenVINO {args.device} vs {report.reference}; OpenVINO {_precision_note(runner)}{default}"
    )
    print(f"tolerance: |ov - ref| <= {report.atol:g} + {report.rtol:g} * |ref|")
    for r in report.outputs:
        status = "PASS" if r.passed else "FAIL"
        line = f"  {status} {r.name}: shape {r.shape}"
        if r.shape != r.reference_shape:
            line += f" vs reference {r.reference_shape}"
        else:
            line += f", max abs {r.max_abs:.3g}, max rel {r.max_rel:.3g}, cosine {r.cosine:.6f}"
        if r.top1_agreement is not None:
            line += f", top-1 agree {r.top1_agreement:.0%}, top-{r.k} overlap {r.topk_overlap:.0%}"
        print(line)
        if r.note:
            print(f"    why: {r.note}")
    print("result: " + ("all outputs match" if report.passed else "MISMATCH"))
    _write_json(args, report.to_dict())
    return 0 if report.passed else EXIT_MISMATCH


class _Progress:
    """A tqdm bar fed by :meth:`Runner.benchmark`'s ``progress(done, elapsed)`` callback."""

    def __init__(self, total: int | None, seconds: float | None) -> None:
        from tqdm import tqdm

        self.by_time = total is None
        self.bar = tqdm(
            total=round(seconds or 10.0, 1) if self.by_time else total,
            unit="s" if self.by_time else "it",
            file=sys.stderr,
            leave=False,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} {postfix}",
        )

    def __call__(self, done: int, elapsed: float) -> None:
        target = round(min(elapsed, self.bar.total), 1) if self.by_time else done
        self.bar.update(target - self.bar.n)
        self.bar.set_postfix_str(f"{done} inferences, {done / max(elapsed, 1e-9):.1f}/s")

    def close(self) -> None:
        self.bar.close()


def cmd_bench(args: argparse.Namespace) -> int:
    if args.compare:
        _check_targets(args)
        if args.model:
            raise RunnerError(
                "bench --compare reads saved reports and runs no model; drop MODEL "
                f"({args.model}) or --compare"
            )
        return _bench_compare(args)
    if not args.model:
        raise RunnerError("bench needs a MODEL (or --compare A.json B.json to compare reports)")
    from openvino_runner.benchmark import text_histogram

    runner = _runner(
        args, hint=args.hint, streams=args.streams, threads=args.threads, cache_dir=args.cache_dir
    )
    progress = _Progress(args.iterations, args.time) if _clikit.progress_enabled(args) else None
    try:
        result = runner.benchmark(
            iterations=args.iterations,
            time_s=args.time,
            requests=args.requests,
            inputs=_inputs(args),
            seed=args.seed,
            image=_image(args),
            progress=progress,
        )
    finally:
        if progress is not None:
            progress.close()
    props = result.properties
    cache = "no cache"
    if result.cache_dir is not None:
        cache = f"cache {'hit' if result.cache_hit else 'miss'} in {result.cache_dir}"
    cpu = result.environment.get("cpu", {})
    print(f"model:            {result.model}")
    print(f"device:           {result.device}, hint {result.hint}")
    print(f"cpu:              {cpu.get('model', '?')}; {' '.join(cpu.get('flags', [])) or '?'}")
    print(f"input shapes:     {', '.join(f'{n}={s}' for n, s in result.input_shapes.items())}")
    print(f"compile time:     {result.compile_time_s * 1000:.1f} ms ({cache})")
    print(f"first inference:  {result.first_inference_ms:.2f} ms")
    print(f"iterations:       {result.iterations} in {result.duration_s:.2f} s")
    lat = result.latency_ms
    print(
        f"latency (ms):     median {lat['median']:.3f}  p90 {lat['p90']:.3f}  "
        f"p99 {lat['p99']:.3f}  min {lat['min']:.3f}  max {lat['max']:.3f}"
    )
    print(f"throughput:       {result.throughput_fps:.2f} inferences/s")
    if result.samples_ms:
        print("latency histogram (log-spaced bins):")
        for line in text_histogram(result.samples_ms):
            print(line)
    print("effective device properties:")
    for name, value in props.items():
        print(f"  {name:<34} {value}")
    _write_json(args, result.to_dict())
    _plot(args, [(Path(result.model).name, result.to_dict())])
    return 0


def _plot(args: argparse.Namespace, reports: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    if not args.plot:
        return
    from openvino_runner.plot import plot_latencies

    print(f"latency plot written to {plot_latencies(reports, args.plot)}")


def _bench_compare(args: argparse.Namespace) -> int:
    import json

    from openvino_runner.benchmark import compare_reports

    reports = []
    for name in args.compare:
        try:
            data = json.loads(Path(name).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RunnerError(f"--compare {name}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise RunnerError(f"--compare {name}: not JSON ({exc})") from None
        if not isinstance(data, dict) or "latency_ms" not in data:
            raise RunnerError(
                f"--compare {name}: not a `openvino-runner bench --json` report (no latency_ms)"
            )
        reports.append((name, data))
    table = compare_reports(reports)
    labels = [f"[{i}]" for i in range(len(reports))]
    for label, name in zip(labels, table["reports"], strict=True):
        print(f"{label} {name}")
    header = f"{'':<22}" + "".join(f"{label:>12}" for label in labels)
    header += "".join(f"{label + '/[0]':>12}" for label in labels[1:])
    print(header)
    for row in table["rows"]:
        values = "".join(f"{'-' if v is None else f'{v:.4g}':>12}" for v in row["values"])
        ratios = "".join(f"{'-' if r is None else f'{r:.3f}x':>12}" for r in row["ratios"][1:])
        print(f"{row['metric']:<22}{values}{ratios}")
    if table["differences"]:
        print("settings that differ:")
        for diff in table["differences"]:
            shown = "  |  ".join(
                f"{label} {v}" for label, v in zip(labels, diff["values"], strict=True)
            )
            print(f"  {diff['key']}: {shown}")
    else:
        print("settings that differ: none")
    _write_json(args, table)
    _plot(
        args,
        [
            (f"{label} {Path(name).name}", data)
            for label, (name, data) in zip(labels, reports, strict=True)
        ],
    )
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from openvino_runner.profiling import profile_model

    runner = _runner(
        args, hint=args.hint, streams=args.streams, threads=args.threads, cache_dir=args.cache_dir
    )
    report = profile_model(
        runner,
        _inputs(args),
        iterations=args.iterations,
        seed=args.seed,
        image=_image(args),
        exec_graph=args.exec_graph,
    )
    shapes = ", ".join(f"{n}={s}" for n, s in report.input_shapes.items())
    print(f"model:      {report.model} ({shapes}), {report.device}, precision {report.precision}")
    print(
        f"latency:    median {report.latency_ms:.3f} ms with counters, "
        f"{report.latency_without_counters_ms:.3f} ms without "
        f"(counters' overhead {report.counters_overhead:+.1%}, {report.iterations} "
        "interleaved inferences each)"
    )
    print(
        f"layers:     {len(report.layers)} executed ({report.not_run} fused or not run), "
        f"sum {report.layers_total_ms:.3f} ms = {report.coverage:.0%} of the latency"
    )
    top = report.layers[: args.top]
    print(f"slowest {len(top)} layers (median per inference):")
    print(
        f"  {'real ms':>9} {'cpu ms':>9} {'share':>6}  {'type':<18} {'kernel':<24} {'prec':<5} name"
    )
    total = report.layers_total_ms or 1.0
    for layer in top:
        print(
            f"  {layer.real_ms:9.3f} {layer.cpu_ms:9.3f} {layer.real_ms / total:6.1%}  "
            f"{layer.type:<18} {layer.exec_type:<24} {layer.precision:<5} {layer.name}"
        )
    print("by layer type:")
    print(f"  {'real ms':>9} {'share':>6} {'count':>5}  type")
    for group in report.by_type:
        print(f"  {group.real_ms:9.3f} {group.share:6.1%} {group.count:5d}  {group.type}")
    if report.exec_graph:
        print(f"executed graph written to {report.exec_graph} (+ .bin)")
    _write_json(args, report.to_dict())
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from openvino_runner.quantize import quantize_model

    scope: dict[str, list[str]] = {"name": [], "type": [], "pattern": []}
    for kind, value in args.ignored_scope:
        if kind not in scope:
            raise RunnerError(
                f"--ignored-scope {kind}={value}: KIND is name, type or pattern, got {kind!r}"
            )
        scope[kind].append(value)
    runner = _runner(args)
    report = quantize_model(
        runner,
        args.output,
        args.data,
        subset=args.subset,
        held_out=args.held_out,
        preset=args.preset,
        ignored_names=scope["name"],
        ignored_types=scope["type"],
        ignored_patterns=scope["pattern"],
        image=_image(args),
        max_drop=args.max_drop,
        rounds=args.rounds,
        time_s=args.time,
    )
    cpu = report.cpu
    print(
        f"wrote:      {report.xml} + .bin: INT8 ({report.fake_quantize_ops} FakeQuantize), "
        f"preset {report.preset}, {report.calibration_samples} calibration samples"
    )
    print(f"cpu:        {cpu.get('model', '?')}; {' '.join(cpu.get('flags', [])) or '?'}")
    print(f"accuracy on {report.held_out_samples} held-out samples, INT8 vs f32:")
    for out in report.outputs:
        line = f"  {out.name}: max abs {out.max_abs:.3g}, worst cosine {out.worst_cosine:.6f}"
        if out.top1_agreement is not None:
            line += f", top-1 agree {out.top1_agreement:.1%}"
        print(line)
    limit = f" (--max-drop {report.max_drop:g})" if report.max_drop is not None else ""
    print(f"  drop: {report.drop:.4g}{limit}")
    print(f"speed ({report.rounds} interleaved turns each):")
    print(f"  {'':<6} {'latency ms':>11} {'throughput/s':>13}")
    for label, speed in (("f32", report.f32), ("INT8", report.int8)):
        print(f"  {label:<6} {speed.latency_ms:11.3f} {speed.throughput_fps:13.1f}")
    print(
        f"  speed-up: latency {report.latency_speedup:.2f}x, "
        f"throughput {report.throughput_speedup:.2f}x"
    )
    if report.max_drop is not None:
        print("result: " + ("within --max-drop" if report.passed else "DROP TOO LARGE"))
    _write_json(args, report.to_dict())
    return 0 if report.passed else EXIT_MISMATCH


def _size_text(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _print_ops(title: str, counts: Mapping[str, int]) -> None:
    print(f"{title} ({sum(counts.values())}):")
    for op, count in counts.items():
        print(f"  {op:<32} {count}")


def cmd_convert(args: argparse.Namespace) -> int:
    from openvino_runner.convert import convert_model

    runner = _runner(args)
    names = [n.strip() for n in (args.output_names or "").split(",") if n.strip()]
    report = convert_model(
        runner,
        args.output,
        compress_to_fp16=args.compress_to_fp16,
        output_names=names or None,
        check=args.check,
        atol=args.atol,
        rtol=args.rtol,
        seed=args.seed,
    )
    ir = report.ir_info
    weights = "FP16 (compressed)" if report.compressed_to_fp16 else "as in the source"
    print(
        f"source:  {report.source} ({report.source_info.format}, {_size_text(report.source_bytes)})"
    )
    print(
        f"wrote:   {report.xml} ({_size_text(report.xml_bytes)}) + {report.bin} "
        f"({_size_text(report.bin_bytes)}); float weights {weights}"
    )
    for title, ports in (("inputs", ir.inputs), ("outputs", ir.outputs)):
        print(f"{title}:")
        for port in ports:
            print(f"  {port.name:<32} {port.element_type:<6} {port.shape}")
    before = "ONNX ops in the source" if report.source_info.source_op_counts else "ops before"
    _print_ops(before, report.op_counts_before)
    _print_ops("OpenVINO ops in the IR", report.op_counts_after)
    if runner.info().custom_conversions:
        print("converted by openvino-runner's extensions:")
        for what, count in runner.info().custom_conversions.items():
            print(f"  {what:<32} {count}")
    for check in report.checks:
        print(
            f"check against {check.reference}: |ir - ref| <= {check.atol:g} + "
            f"{check.rtol:g} * |ref|"
        )
        for r in check.outputs:
            status = "PASS" if r.passed else "FAIL"
            print(
                f"  {status} {r.name}: max abs {r.max_abs:.3g}, max rel {r.max_rel:.3g}, "
                f"cosine {r.cosine:.6f}"
            )
            if r.note:
                print(f"    why: {r.note}")
    if report.checks:
        print("result: " + ("the IR matches the source" if report.passed else "MISMATCH"))
    _write_json(args, report.to_dict())
    return 0 if report.passed else EXIT_MISMATCH


def main(argv: Sequence[str] | None = None) -> int:
    """Run `openvino-runner` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    # `--shape -1,3,224,224` (a free batch) is one value, not an unknown option.
    argv = _clikit.glue_dash_values(sys.argv[1:] if argv is None else argv, ("--shape",))
    return _clikit.run(build_parser, argv, errors=lambda: (RunnerError,))


if __name__ == "__main__":
    raise SystemExit(main())
