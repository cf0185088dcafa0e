"""The `openvino-runner` console script: a thin shell over the package's API.

Heavy modules (OpenVINO, onnxruntime, tqdm) are imported inside the subcommands, so
``openvino-runner --help`` answers at once.

The shared CLI rule: errors are one line on stderr (``openvino-runner: error: ...``);
exit status 0 on success, 1 when ``compare`` or ``convert --check`` finds a mismatch, 2 for
usage or input problems and anything the command could not do, 130 on Ctrl-C
(``openvino-runner: interrupted``); output files are written to a temporary name in the
target's folder and renamed into place (removed on error or interrupt); ``--json -``
writes the JSON to stdout and the human-readable text to stderr; a closed stdout
(``| head -1``) ends the program quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openvino_runner import __version__
from openvino_runner.errors import RunnerError
from openvino_runner.inputs import ImageOptions, parse_assignment, parse_shape

if TYPE_CHECKING:
    import numpy as np

    from openvino_runner.runner import Runner

PROG = "openvino-runner"
PRECISION_CHOICES = ("f32", "bf16", "f16", "default")
EXIT_MISMATCH = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # like a Unix tool killed by SIGPIPE


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers such as 123.675,116.28,103.53, got {text!r}"
        ) from None


def _size(text: str) -> tuple[int, int]:
    try:
        dims = parse_shape(text)
    except RunnerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len(dims) != 2:
        raise argparse.ArgumentTypeError(f"image size is HEIGHT,WIDTH, got {text!r}")
    return dims[0], dims[1]


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
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
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


def _add_model_options(parser: argparse.ArgumentParser, *, inputs: bool = True) -> None:
    parser.add_argument("model", help="model file: .onnx, .xml (IR), .tflite, .pb, .pdmodel")
    parser.add_argument("--device", default="CPU", help="OpenVINO device (default: CPU)")
    parser.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="f32",
        help="inference precision hint (default: f32, for parity with other runtimes; "
        "'default' keeps the device's own choice, bf16 on CPUs with AMX)",
    )
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="[NAME=]DIMS",
        help="reshape an input to static dims before compiling, e.g. x=1,3,224,224 "
        "(repeatable; NAME may be left out for a one-input model)",
    )
    if not inputs:
        return
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="input data: .npy, .npz (arrays matched by name) or an image (repeatable). "
        "Inputs not given get seeded random data; unknown dims default to 1 (first) and "
        "224 (others)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
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
        default=(0.0,),
        metavar="M[,M,M]",
        help="subtracted per channel, in 0-255 units (default: 0)",
    )
    images.add_argument(
        "--scale",
        type=_floats,
        default=(1.0,),
        metavar="S[,S,S]",
        help="divisor per channel after the mean (default: 1)",
    )
    images.add_argument("--bgr", action="store_true", help="channels in BGR order (default: RGB)")


JSON_HELP = "also write the report as JSON to FILE ('-': stdout; the text then goes to stderr)"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `openvino-runner`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, run, compare and benchmark models on OpenVINO.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser("info", help="inputs, outputs, op counts and conversion of a model")
    _add_model_options(info, inputs=False)
    info.add_argument("--json", metavar="FILE", help=JSON_HELP)

    run = sub.add_parser("run", help="run one inference, print and save the outputs")
    _add_model_options(run)
    run.add_argument("--output", metavar="OUT.npz", help="save the outputs here, by name")

    compare = sub.add_parser(
        "compare", help="compare OpenVINO with onnxruntime on the same inputs (exit 1: mismatch)"
    )
    _add_model_options(compare)
    compare.add_argument("--against", choices=("onnxruntime",), default="onnxruntime")
    compare.add_argument("--atol", type=_tolerance, default=1e-4, help="absolute tolerance (1e-4)")
    compare.add_argument("--rtol", type=_tolerance, default=1e-3, help="relative tolerance (1e-3)")
    compare.add_argument("--top-k", type=_positive_int, default=5, help="k of top-k agreement")
    compare.add_argument(
        "--reference",
        metavar="MODEL.onnx",
        help="run this ONNX model on onnxruntime (default: MODEL itself, which must be ONNX); "
        "e.g. the source of an IR written by `convert`",
    )
    compare.add_argument("--json", metavar="FILE", help=JSON_HELP)

    bench = sub.add_parser("bench", help="measure compile time, latency and throughput")
    _add_model_options(bench)
    bench.add_argument("--hint", choices=("latency", "throughput"), default="latency")
    stop = bench.add_mutually_exclusive_group()
    stop.add_argument(
        "--time", type=_positive_float, metavar="SECONDS", help="run this long (default: 10 s)"
    )
    stop.add_argument("--iterations", type=_positive_int, metavar="N", help="run N inferences")
    bench.add_argument(
        "--requests",
        type=_positive_int,
        metavar="N",
        help="infer requests (default: 1 for latency, optimal for throughput)",
    )
    bench.add_argument("--streams", type=_positive_int, metavar="N", help="NUM_STREAMS")
    bench.add_argument("--threads", type=_positive_int, metavar="N", help="INFERENCE_NUM_THREADS")
    bench.add_argument("--cache-dir", metavar="DIR", help="OpenVINO model cache folder")
    bench.add_argument("--json", metavar="FILE", help=JSON_HELP)
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")

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
        "as the logits before a softmax (ops nothing needs any more are dropped)",
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
    convert.add_argument("--seed", type=int, default=0, help="seed of --check's random inputs")
    convert.add_argument("--json", metavar="FILE", help=JSON_HELP)
    return parser


def _runner(args: argparse.Namespace, **kwargs: Any) -> Runner:
    from openvino_runner.runner import Runner

    precision = None if args.precision == "default" else args.precision
    runner = Runner(args.model, args.device, precision, **kwargs)
    if args.shape:
        shapes: dict[str, tuple[int, ...]] = {}
        for item in args.shape:
            name, dims = parse_assignment(item, "--shape")
            if name is None:
                specs = runner.input_specs()
                if len(specs) != 1:
                    raise RunnerError(
                        f"the model has {len(specs)} inputs; name the one to reshape, e.g. "
                        f"--shape {specs[0].name}={dims}"
                    )
                name = specs[0].name
            shapes[name] = parse_shape(dims)
        runner.reshape(shapes)
    return runner


def _inputs(args: argparse.Namespace) -> dict[str | None, Any]:
    given: dict[str | None, Any] = {}
    for item in args.input:
        name, value = parse_assignment(item, "--input")
        given[name] = value
    return given


def _image(args: argparse.Namespace) -> ImageOptions:
    return ImageOptions(
        size=args.image_size, layout=args.layout, mean=args.mean, scale=args.scale, bgr=args.bgr
    )


def _check_targets(args: argparse.Namespace) -> None:
    """Refuse ``--output``/``--json`` paths that cannot be written, before any compiling.

    A benchmark or a large inference should not run to completion only to fail at the end.
    """
    for option, value in (
        ("--output", getattr(args, "output", None)),
        ("--json", getattr(args, "json", None)),
    ):
        if not value or (option == "--json" and value == "-"):
            continue
        target = Path(value)
        folder = target.parent
        if target.is_dir():
            raise RunnerError(f"{option} {value}: is a folder; give a file name inside it")
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise RunnerError(
                f"{option} {value}: the folder {folder} {what}; create it or pick another path"
            )
        if not os.access(folder, os.W_OK):
            raise RunnerError(
                f"{option} {value}: the folder {folder} is not writable (read-only?); "
                "pick another path"
            )


@contextlib.contextmanager
def _temporary_beside(target: Path) -> Iterator[Path]:
    """A fresh hidden name in *target*'s folder, removed afterwards if still there."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    try:
        yield partial
    finally:  # also on KeyboardInterrupt; a read-only folder may refuse even this
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _write_atomically(target: Path, write: Callable[[Path], object], option: str) -> None:
    """Write *target* through a temporary file renamed into place, or raise RunnerError.

    Messages name *target*, never the temporary.
    """
    with _temporary_beside(target) as partial:
        try:
            write(partial)
            partial.replace(target)  # never leave a half-written file behind
        except OSError as exc:
            raise RunnerError(f"{option}: cannot write {target}: {exc.strerror or exc}") from None


def _write_json(args: argparse.Namespace, data: dict[str, Any]) -> None:
    path = getattr(args, "json", None)
    if not path:
        return
    text = json.dumps(data, indent=2, default=str) + "\n"
    if path == "-":
        stdout = getattr(args, "real_stdout", None) or sys.stdout
        stdout.write(text)
        stdout.flush()
        return
    _write_atomically(Path(path), lambda p: p.write_text(text), "--json")
    print(f"report written to {path}")


def save_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    """Save *arrays* as an uncompressed ``.npz`` that ``numpy.load`` reads back by name.

    Unlike ``np.savez(path, **arrays)``, any output name works, including ``file`` and
    ``allow_pickle`` (``np.savez``'s own parameters).
    """
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
    if info.converted:
        print(
            f"to skip conversion next time: {PROG} convert MODEL -o MODEL.xml "
            "(writes OpenVINO IR .xml/.bin)"
        )
    _write_json(args, info.to_dict())
    return 0


def _describe(name: str, array: np.ndarray[Any, Any]) -> str:
    import numpy as np

    text = f"  {name:<32} {array.dtype!s:<8} {list(array.shape)}"
    if array.size and np.issubdtype(array.dtype, np.number):
        values = array.astype(np.float64)
        text += f"  min {values.min():.6g} max {values.max():.6g} mean {values.mean():.6g}"
        from openvino_runner.compare import classification_rows

        rows = classification_rows(array)
        if rows is not None and rows.shape[0] == 1:
            top = np.argsort(-rows[0], kind="stable")[:5]
            text += "  top5 " + ", ".join(f"{i}:{rows[0][i]:.4g}" for i in top)
    return text


def cmd_run(args: argparse.Namespace) -> int:
    runner = _runner(args)
    feeds = runner.prepare(_inputs(args), seed=args.seed, image=_image(args))
    outputs = runner.run(feeds)
    print(f"device: {args.device}, {_precision_note(runner)}")
    print("inputs:")
    for name, array in feeds.items():
        print(_describe(name, array))
    print("outputs:")
    for name, array in outputs.items():
        print(_describe(name, array))
    if args.output:
        out = Path(args.output)
        _write_atomically(out, lambda p: save_npz(p, outputs), "--output")
        print(f"outputs saved to {out}")
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
    return 0 if report.passed else 1


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
    runner = _runner(
        args, hint=args.hint, streams=args.streams, threads=args.threads, cache_dir=args.cache_dir
    )
    progress = None
    if not args.no_progress and sys.stderr.isatty():
        progress = _Progress(args.iterations, args.time)
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
    print(f"model:            {result.model}")
    print(f"device:           {result.device}, hint {result.hint}")
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
    print("effective device properties:")
    for name, value in props.items():
        print(f"  {name:<34} {value}")
    _write_json(args, result.to_dict())
    return 0


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
    runner = _runner(args)
    names = [n.strip() for n in (args.output_names or "").split(",") if n.strip()]
    report = runner.convert(
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


COMMANDS = {
    "info": cmd_info,
    "run": cmd_run,
    "compare": cmd_compare,
    "bench": cmd_bench,
    "convert": cmd_convert,
}


def _one_line(message: str) -> str:
    """A multi-line message (a conversion report's list of ops) as one line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return message
    return lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")


def _error(message: str) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run `openvino-runner` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_ERROR
        _check_targets(args)
        args.real_stdout = sys.stdout
        # `--json -`: the JSON owns stdout, the human-readable text goes to stderr
        text_to_stderr = getattr(args, "json", None) == "-"
        with contextlib.redirect_stdout(sys.stderr) if text_to_stderr else contextlib.nullcontext():
            code = COMMANDS[args.command](args)
        sys.stdout.flush()
        return code
    except RunnerError as exc:
        return _error(str(exc))
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            return _closed_stdout()
        where = f"{exc.filename}: " if exc.filename else ""
        return _error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _closed_stdout() -> int:
    """The reader of stdout went away (``| head -1``): stop quietly, like a Unix tool.

    Python would flush stdout again at exit and print a second BrokenPipeError, so stdout
    is pointed at /dev/null first.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    raise SystemExit(main())
