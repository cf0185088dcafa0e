"""The `deform-conv2d-onnx` console script: a thin shell over the package's API.

It follows the repository's CLI rule: errors are one line on stderr
(``deform-conv2d-onnx: error: ...``); exit 0 success, 1 a negative answer (``check`` beyond
tolerance), 2 a usage or input problem or a missing component, 130 on Ctrl-C; output files
are written to a temporary file beside the target and renamed into place. onnx, onnxruntime
and OpenVINO are imported only by the command that needs them, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

PROG = "deform-conv2d-onnx"


class CliError(Exception):
    """A problem the user can fix; *status* is the exit code."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("deform-conv2d-onnx-exporter")
    except PackageNotFoundError:
        return "0.0.0"


class _VersionAction(argparse.Action):
    """``--version`` that reads the metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"{PROG} {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `deform-conv2d-onnx`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Lower ONNX DeformConv nodes to standard operators and check models.",
    )
    parser.add_argument("--version", action=_VersionAction)
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
        help=(
            "default-domain opset of the result (12 to the installed onnx's highest; "
            "default: keep the model's)"
        ),
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
        "check",
        help="run a model in onnxruntime and OpenVINO (f32) and report the max errors",
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
        help="absolute tolerance (default 1e-4)",
    )
    check.add_argument(
        "--rtol",
        type=float,
        default=1e-4,
        help="tolerance relative to the output's largest magnitude (default 1e-4); an output "
        "fails when its max abs error exceeds atol + rtol * max|output| (exit status 1)",
    )
    return parser


@contextlib.contextmanager
def atomic_output(target: str) -> Iterator[Path]:
    """Yield a temporary path beside *target*; rename it onto *target* if the block succeeds.

    On any error or interrupt the temporary is removed and *target* is left as it was.
    Errors creating the temporary name the target, never the temporary.
    """
    path = Path(target)
    folder = path.parent
    if path.is_dir():
        raise CliError(
            f"cannot write {target!r}: it is a folder; give a file name such as out.onnx"
        )
    if not folder.is_dir():
        raise CliError(f"cannot write {target!r}: folder {str(folder)!r} does not exist")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise CliError(f"cannot write {target!r}: {exc.strerror or exc}") from None
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        temporary.replace(path)
    except OSError as exc:
        raise CliError(f"cannot write {target!r}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def _load(path: str) -> object:
    import onnx

    try:
        return onnx.load(path)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... for unreadable files
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = getattr(exc, "strerror", None) or text
        raise CliError(
            f"cannot read ONNX model {path!r}: {reason}; expected a readable .onnx file"
        ) from None


def _lower(args: argparse.Namespace) -> int:
    import onnx

    from deform_conv2d_onnx_exporter.lower import (
        check_target_opset,
        count_deform_conv,
        lower_deform_conv,
    )

    if args.opset is not None:  # before reading the model, and without onnx's C++ assertion
        try:
            check_target_opset(args.opset)
        except ValueError as exc:
            raise CliError(f"--opset {args.opset}: {exc}") from None
    model = _load(args.input)
    assert isinstance(model, onnx.ModelProto)
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
    with atomic_output(args.output) as temporary:
        onnx.save(result, str(temporary))
    opset = next(e.version for e in result.opset_import if e.domain in ("", "ai.onnx"))
    print(
        f"lowered {count_deform_conv(model)} DeformConv node(s); "
        f"wrote {args.output} (opset {opset})"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    import onnx

    from deform_conv2d_onnx_exporter.check import CheckError, compare_runtimes, missing_runtimes

    missing = missing_runtimes()
    if missing:
        raise CliError(
            f"check needs {' and '.join(missing)}, which cannot be imported here "
            f"(pip install {' '.join(missing)})"
        )
    # NaN compares false with every error, so it would pass any model: refuse it too.
    if not all(math.isfinite(t) and t >= 0 for t in (args.atol, args.rtol)):
        raise CliError(
            f"--atol and --rtol must be finite numbers >= 0, got {args.atol:g} and {args.rtol:g}"
        )
    model = _load(args.model)
    assert isinstance(model, onnx.ModelProto)
    try:
        report = compare_runtimes(model, dict(args.shape), seed=args.seed)
    except CheckError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    for name, shape in report.inputs.items():
        print(f"input  {name}: {list(shape)}")
    for name, shape in report.outputs.items():
        print(f"output {name}: {list(shape)}")
    print(f"OpenVINO {report.openvino_version}, inference precision {report.openvino_precision}")
    failed = []
    for name, error in report.max_abs_error.items():
        scale = report.max_abs_output[name]
        relative = error / scale if scale > 0 else 0.0
        print(
            f"onnxruntime vs OpenVINO, {name}: max abs error {error:.3g}, "
            f"relative {relative:.3g} (max |output| {scale:.3g})"
        )
        if error > args.atol + args.rtol * scale:
            failed.append(f"{name} (abs {error:.3g}, rel {relative:.3g})")
    if failed:
        print(
            f"{PROG}: error: beyond atol {args.atol:g} + rtol {args.rtol:g} * max|output|: "
            + ", ".join(failed),
            file=sys.stderr,
        )
        return 1
    return 0


def _run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return command(args)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.status


def main(argv: Sequence[str] | None = None) -> int:
    """Run `deform-conv2d-onnx` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return _run(_lower if args.command == "lower" else _check, args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `deform-conv2d-onnx check m.onnx | head -1`: stop quietly, like a Unix tool.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
