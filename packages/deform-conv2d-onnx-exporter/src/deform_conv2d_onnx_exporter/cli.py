"""The `deform-conv2d-onnx` console script: a thin shell over the package's API.

The repository's CLI rule comes from the vendored kit (:mod:`._clikit`): one-line errors,
exit 0 / 1 (``check`` beyond tolerance) / 2 / 130 / 141, atomic output files, ``--json -``.
onnx, onnxruntime and OpenVINO are imported only by the command that needs them, so
``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deform_conv2d_onnx_exporter import _clikit
from deform_conv2d_onnx_exporter._clikit import CliError

PROG = "deform-conv2d-onnx"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `deform-conv2d-onnx`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Lower DeformConv nodes of ONNX models to standard operators and check "
        "models in onnxruntime and OpenVINO.",
    )
    _clikit.add_version_option(parser, "deform-conv2d-onnx-exporter")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    lower = sub.add_parser(
        "lower",
        help="rewrite every DeformConv node (ONNX, or mmdeploy's mmcv:: nodes) into standard "
        "ONNX operators",
    )
    lower.add_argument("input", metavar="IN", help="ONNX model to read")
    lower.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="where to write the rewritten model (replaced atomically if it exists)",
    )
    lower.add_argument(
        "--opset",
        type=int,
        default=None,
        help="default-domain opset of the result (12 to the installed onnx's highest; "
        "default: keep the model's, at least 12)",
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
    _clikit.add_json_option(lower, "what was lowered")
    lower.set_defaults(func=_lower)

    check = sub.add_parser(
        "check",
        help="run a model in onnxruntime and OpenVINO (f32) on random inputs and compare",
        description="Run MODEL on random inputs in onnxruntime and OpenVINO (f32) and compare "
        "each output element-wise: it passes when |actual - reference| <= atol + rtol * "
        "|reference| everywhere (openvino-runner's rule); exit 1 otherwise. The reference is "
        "onnxruntime on MODEL, or on --source (the native file MODEL was lowered from).",
    )
    check.add_argument("model", metavar="MODEL", help="ONNX model to run")
    check.add_argument(
        "--source",
        metavar="NATIVE",
        help="the model MODEL was lowered from (run in onnxruntime as the reference)",
    )
    check.add_argument(
        "--shape",
        action="append",
        type=_clikit.parse_shape,
        default=[],
        metavar="[NAME=]D0,D1,...",
        help="shape of an input (repeatable; no NAME: the model's only input); free "
        "dimensions not given are 1 (the first) and 224 (the others)",
    )
    check.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    check.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    check.add_argument(
        "--rtol",
        type=float,
        default=1e-3,
        help="tolerance relative to each reference element (default 1e-3)",
    )
    _clikit.add_json_option(check, "the report")
    check.set_defaults(func=_check)

    _clikit.add_completion_command(sub, parser)
    return parser


def _load(path: str) -> tuple[Any, list[Path]]:
    """The model at *path* with its external data (a dynamo export's OUT.onnx.data), and
    the files it was read from: *path* and those data files (no output may replace them)."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    try:
        model = onnx.load(path, load_external_data=False)
        files = [Path(path)] + [
            Path(path).parent / e.value
            for tensor in model.graph.initializer
            for e in tensor.external_data
            if e.key == "location"
        ]
        load_external_data_for_model(model, str(Path(path).parent))
    except Exception as exc:  # onnx raises DecodeError, OSError, ... for unreadable files
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = getattr(exc, "strerror", None) or text
        raise CliError(
            f"cannot read ONNX model {path!r}: {reason}; expected a readable .onnx file"
        ) from None
    if not model.graph.node and not model.opset_import:  # protobuf reads b"" as a model
        raise CliError(f"cannot read ONNX model {path!r}: it holds no graph (an empty file?)")
    return model, files


def _refuse_overwriting(
    outputs: Sequence[tuple[str, str | None]], inputs: dict[str, list[Path]]
) -> None:
    """Refuse an output path that is an input model or one of its external data files (a
    model lowered onto its own .onnx.data read garbage weights afterwards, silently)."""
    taken = {f.resolve(): name for name, files in inputs.items() for f in files}
    for option, value in outputs:
        if value and value != "-" and Path(value).resolve() in taken:
            model = taken[Path(value).resolve()]
            what = "is" if Path(value).resolve() == Path(model).resolve() else "holds data of"
            raise CliError(
                f"{option} {value} {what} the input model {model}; write to another file"
            )


def _lower(args: argparse.Namespace) -> int:
    import onnx

    from deform_conv2d_onnx_exporter.lower import (
        check_target_opset,
        count_custom_deform_conv,
        count_deform_conv,
        lower_deform_conv,
    )

    if args.opset is not None:  # before reading the model, and without onnx's C++ assertion
        try:
            check_target_opset(args.opset)
        except ValueError as exc:
            raise CliError(f"--opset {args.opset}: {exc}") from None
    if args.output == "-":  # the kit's '-' means stdout for --json only; ONNX is binary
        raise CliError("-o -: give the path of the .onnx file to write (stdout is not supported)")
    model, files = _load(args.input)
    _refuse_overwriting([("-o", args.output), ("--json", args.json)], {args.input: files})
    try:
        result = lower_deform_conv(model, args.opset, variant=args.variant, columns=args.columns)
        onnx.checker.check_model(result, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise CliError(
            f"the lowered model fails onnx.checker: {str(exc).splitlines()[0]} "
            f"(is {args.input!r} itself a valid model?)"
        ) from None
    except ValueError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    with _clikit.atomic_path(args.output, "-o") as temporary:
        onnx.save(result, str(temporary))
    opset = next(e.version for e in result.opset_import if e.domain in ("", "ai.onnx"))
    nodes = count_deform_conv(model) + count_custom_deform_conv(model)
    if nodes:
        print(f"lowered {nodes} DeformConv node(s); wrote {args.output} (opset {opset})")
    else:  # a lowered model or the wrong file: say so, but a pipeline may lower every model
        print(
            f"no DeformConv node in {args.input} (nothing to lower); wrote {args.output} "
            f"(opset {opset})"
        )
    _clikit.write_json(
        args.json, {"input": args.input, "output": args.output, "nodes": nodes, "opset": opset}
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from deform_conv2d_onnx_exporter.check import (
        CheckError,
        compare_runtimes,
        format_report,
        missing_runtimes,
    )

    # NaN compares false with every error, so it would pass any model: refuse it too.
    if not all(math.isfinite(t) and t >= 0 for t in (args.atol, args.rtol)):
        raise CliError(
            f"--atol and --rtol must be finite numbers >= 0, got {args.atol:g} and {args.rtol:g}"
        )
    missing = missing_runtimes()
    if missing:
        raise CliError(
            f"check needs {' and '.join(missing)}, which cannot be imported here "
            f"(pip install {' '.join(missing)})"
        )
    model, files = _load(args.model)
    read = {args.model: files}
    source = None
    if args.source is not None:
        source, read[args.source] = _load(args.source)
    _refuse_overwriting([("--json", args.json)], read)
    shapes: dict[str | None, tuple[int, ...]] = {}
    for spec in args.shape:
        if spec.name in shapes and shapes[spec.name] != spec.dims:  # the last one won, silently
            which = "without a name" if spec.name is None else f"for {spec.name!r}"
            raise CliError(
                f"--shape {which} given twice: {','.join(map(str, shapes[spec.name]))} and "
                f"{','.join(map(str, spec.dims))}; give one"
            )
        shapes[spec.name] = spec.dims
    try:
        report = compare_runtimes(
            model, shapes, seed=args.seed, source=source, atol=args.atol, rtol=args.rtol
        )
    except CheckError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    except MemoryError:
        raise CliError(
            "the inputs (and outputs) of these shapes do not fit in memory; give smaller "
            "--shape values"
        ) from None
    for line in format_report(report):
        print(line)
    _clikit.write_json(args.json, {"model": args.model, "source": args.source, **report.to_dict()})
    failed = [
        f"{o.runtime} {o.name} (abs {o.max_abs_error:.3g})" for o in report.outputs if not o.passed
    ]
    if failed:
        raise CliError(
            f"beyond atol {args.atol:g} + rtol {args.rtol:g} * |reference|: " + ", ".join(failed),
            status=_clikit.EXIT_NEGATIVE,
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `deform-conv2d-onnx` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    return _clikit.run(build_parser, argv, errors=_errors)


def _errors() -> tuple[type[BaseException], ...]:
    from deform_conv2d_onnx_exporter.check import CheckError
    from deform_conv2d_onnx_exporter.lower import LoweringError

    return (CheckError, LoweringError)


if __name__ == "__main__":
    raise SystemExit(main())
