"""The `deform-conv2d-onnx` console script: a thin shell over the package's API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deform_conv2d_onnx_exporter import __version__


def _shape(text: str) -> tuple[str, list[int]]:
    name, sep, dims = text.rpartition("=")
    try:
        values = [int(d) for d in dims.split(",")]
    except ValueError:
        values = []
    if not sep or not name or not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected NAME=D0,D1,... with positive integers, got {text!r}"
        )
    return name, values


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `deform-conv2d-onnx`."""
    parser = argparse.ArgumentParser(
        prog="deform-conv2d-onnx",
        description="Lower ONNX DeformConv nodes to standard operators and check models.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    lower = sub.add_parser(
        "lower", help="rewrite every DeformConv node into standard ONNX operators"
    )
    lower.add_argument("input", metavar="IN", help="ONNX model to read")
    lower.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="where to write the rewritten model"
    )
    lower.add_argument(
        "--opset",
        type=int,
        default=None,
        help="default-domain opset of the result (>= 12; default: keep the model's)",
    )
    lower.add_argument(
        "--columns",
        choices=["auto", "conv", "matmul"],
        default="auto",
        help="how the sampled columns meet the weight (default: by the offset's static size)",
    )
    lower.add_argument(
        "--variant",
        choices=["gridsample", "gathernd"],
        default=None,
        help="force a decomposition (default: by opset)",
    )

    check = sub.add_parser(
        "check", help="run a model in onnxruntime and OpenVINO (f32) and report the max error"
    )
    check.add_argument("model", metavar="MODEL", help="ONNX model to run")
    check.add_argument(
        "--shape",
        action="append",
        type=_shape,
        default=[],
        metavar="NAME=D0,D1,...",
        help="input shape for an input with free dimensions (default: 8 for each free dimension)",
    )
    check.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    check.add_argument(
        "--atol",
        type=float,
        default=1e-4,
        help="exit with status 1 when the max error exceeds this (default 1e-4)",
    )
    return parser


def _lower(args: argparse.Namespace) -> int:
    import onnx

    from deform_conv2d_onnx_exporter.lower import count_deform_conv, lower_deform_conv

    try:
        model = onnx.load(args.input)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... for unreadable files
        print(f"error: cannot read ONNX model {args.input!r}: {exc}", file=sys.stderr)
        return 2
    try:
        result = lower_deform_conv(model, args.opset, variant=args.variant, columns=args.columns)
        onnx.checker.check_model(result, full_check=True)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    onnx.save(result, args.output)
    opset = next(e.version for e in result.opset_import if e.domain in ("", "ai.onnx"))
    print(
        f"lowered {count_deform_conv(model)} DeformConv node(s); "
        f"wrote {args.output} (opset {opset})"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    import onnx

    from deform_conv2d_onnx_exporter.check import CheckError, compare_runtimes

    try:
        model = onnx.load(args.model)
    except Exception as exc:
        print(f"error: cannot read ONNX model {args.model!r}: {exc}", file=sys.stderr)
        return 2
    try:
        report = compare_runtimes(model, dict(args.shape), seed=args.seed)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, shape in report.inputs.items():
        print(f"input  {name}: {list(shape)}")
    for name, shape in report.outputs.items():
        print(f"output {name}: {list(shape)}")
    if report.worst is None:
        print(
            "onnxruntime: ran; OpenVINO is not installed (pip install openvino), nothing to compare"
        )
        return 0
    print(f"OpenVINO {report.openvino_version}, inference precision {report.openvino_precision}")
    for name, error in report.max_abs_error.items():
        print(f"max abs error onnxruntime vs OpenVINO, {name}: {error:.3g}")
    if report.worst > args.atol:
        print(
            f"error: max abs error {report.worst:.3g} exceeds --atol {args.atol:g}", file=sys.stderr
        )
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `deform-conv2d-onnx` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "lower":
        return _lower(args)
    return _check(args)


if __name__ == "__main__":
    raise SystemExit(main())
