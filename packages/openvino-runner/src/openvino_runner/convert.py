"""Writing a model as OpenVINO IR (``.xml`` + ``.bin``), DeformConv included, and checking it.

:func:`convert_model` reads anything :class:`~openvino_runner.Runner` reads (ONNX
``DeformConv`` through this package's extension, which ``ovc`` lacks), optionally gives
inputs static shapes, keeps only some outputs, compresses float weights to FP16, and writes
the IR atomically: both files go to temporary names in the target's folder and are renamed
into place, ``.bin`` first and ``.xml`` last (OpenVINO finds the ``.bin`` by the ``.xml``'s
name, so a reader never sees a new ``.xml`` beside an old ``.bin``); on any error or
interrupt the temporaries are removed. With ``check=True`` the written IR is read back and
run against the source on the same inputs: OpenVINO on the source, and onnxruntime too
when the source is ONNX and onnxruntime is installed.

FP16 compression rounds every float weight to 11 significant bits (a relative step of
2**-11 = 4.9e-4), so a compressed IR's outputs move by ~1e-3 relative; its check uses
``FP16_ATOL``/``FP16_RTOL`` unless told otherwise.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from openvino_runner.compare import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    OutputComparison,
    compare_arrays,
    explain_softmax_failures,
    run_onnxruntime,
    with_extra_outputs,
)
from openvino_runner.errors import InputError, MissingDependencyError, RunnerError
from openvino_runner.runner import ModelInfo, Runner

FP16_ATOL = 1e-2
FP16_RTOL = 1e-2


@dataclass(frozen=True)
class CheckResult:
    """The written IR against one reference (``"openvino (source)"`` or ``"onnxruntime"``)."""

    reference: str
    atol: float
    rtol: float
    outputs: list[OutputComparison]
    passed: bool


@dataclass(frozen=True)
class ConversionReport:
    """What :func:`convert_model` wrote and found; sizes in bytes."""

    source: str
    xml: str
    bin: str
    compressed_to_fp16: bool
    source_bytes: int
    xml_bytes: int
    bin_bytes: int
    source_info: ModelInfo
    ir_info: ModelInfo
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def op_counts_before(self) -> dict[str, int]:
        """Ops in the source file (ONNX ops when the onnx package can read it)."""
        return self.source_info.source_op_counts or self.source_info.op_counts

    @property
    def op_counts_after(self) -> dict[str, int]:
        """OpenVINO ops in the written IR."""
        return self.ir_info.op_counts

    @property
    def passed(self) -> bool:
        """True unless a check ran and failed."""
        return all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (op counts before/after included)."""
        data = asdict(self)
        data["op_counts_before"] = self.op_counts_before
        data["op_counts_after"] = self.op_counts_after
        data["passed"] = self.passed
        return data


def ir_paths(target: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(model.xml, model.bin)`` for *target*, which must name an ``.xml`` file."""
    xml = Path(target)
    if xml.suffix.lower() != ".xml":
        raise InputError(
            f"the IR's file name must end in .xml (its weights go beside it in .bin), got {xml}"
        )
    return xml, xml.with_suffix(".bin")


def check_writable(xml: Path) -> None:
    """Refuse a target whose folder is missing, or which is a folder, before any work."""
    folder = xml.parent
    if xml.is_dir():
        raise InputError(f"{xml} is a folder; give a file name such as {xml / 'model.xml'}")
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InputError(f"cannot write {xml}: the folder {folder} {what}")
    if not os.access(folder, os.W_OK):
        raise InputError(f"cannot write {xml}: the folder {folder} is not writable")


def save_ir(model: Any, target: str | os.PathLike[str], *, compress_to_fp16: bool) -> None:
    """Write *model* (an ``openvino.Model``) as IR at *target* atomically (see module doc)."""
    import openvino

    xml, bin_ = ir_paths(target)
    check_writable(xml)
    # A fresh hidden name in the target's folder (so the renames stay on one filesystem),
    # created by save_model itself so both files get the usual permissions.
    tmp_xml = xml.parent / f".{xml.stem}.{os.getpid()}.{secrets.token_hex(4)}.partial.xml"
    tmp_bin = tmp_xml.with_suffix(".bin")
    try:
        # save_model applies ovc's transformations to the model it is given: save a clone
        openvino.save_model(model.clone(), str(tmp_xml), compress_to_fp16=compress_to_fp16)
        if not tmp_bin.exists():  # a model without weights gets no .bin: write an empty one
            tmp_bin.touch()
        tmp_bin.replace(bin_)
        tmp_xml.replace(xml)
    except OSError as exc:
        raise RunnerError(f"cannot write {xml}: {exc.strerror or exc}") from None
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
        raise RunnerError(f"OpenVINO cannot save {xml}: {reason}") from None
    finally:  # also on KeyboardInterrupt: never leave temporaries behind
        for leftover in (tmp_xml, tmp_bin):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)


def _keep_outputs(model: Any, names: Sequence[str], runner: Runner) -> Any:
    """A model whose outputs are the tensors called *names*, in that order: graph outputs
    or any tensor inside (e.g. the logits before a softmax); ops no output needs drop out."""
    import openvino
    import openvino.opset13 as opset

    by_name: dict[str, Any] = {}  # a Result shares its tensor (and names) with its producer
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Result":
            continue
        for port in op.outputs():
            for name in port.get_names():
                by_name.setdefault(name, port)
    chosen = []
    for name in names:
        if name not in by_name:
            raise InputError(
                f"the model has no tensor named {name!r}; its outputs are: "
                + ", ".join(repr(n) for n in runner.output_names())
            )
        chosen.append(by_name[name])
    results = [opset.result(o) for o in chosen]
    for result, name in zip(results, names, strict=True):
        result.output(0).get_tensor().set_names({name})
    return openvino.Model(results, model.get_parameters(), model.get_friendly_name())


def _check(
    ir: Runner,
    source: Runner,
    *,
    atol: float,
    rtol: float,
    seed: int,
) -> list[CheckResult]:
    """The IR's outputs against *source* (whose model has the same outputs) on OpenVINO,
    and against onnxruntime when the source is ONNX and onnxruntime is installed."""
    feeds = ir.prepare(seed=seed)
    got = ir.run(feeds)
    wanted = list(got)

    def judge(reference: str, expected: Mapping[str, Any]) -> CheckResult:
        outputs = [
            compare_arrays(name, got[name], expected[name], atol=atol, rtol=rtol) for name in wanted
        ]
        return CheckResult(reference, atol, rtol, outputs, all(o.passed for o in outputs))

    on_openvino = dict(zip(wanted, source.run(feeds).values(), strict=True))
    checks = [judge("openvino (source)", on_openvino)]
    if source.path.suffix.lower() == ".onnx":
        try:
            import onnx  # noqa: F401  (exposing inner tensors rewrites the ONNX graph)

            model: str | bytes = with_extra_outputs(source.path, wanted)
        except ImportError:
            model = str(source.path)
        try:
            reference = dict(
                run_onnxruntime(
                    model, feeds, label=str(source.path), base_dir=source.path.resolve().parent
                )
            )
        except MissingDependencyError:
            reference = {}
        if reference and all(n in reference for n in wanted):
            versus = judge("onnxruntime", reference)
            if not versus.passed:  # a saturated softmax? (see compare.softmax_note)
                explained = explain_softmax_failures(
                    source, feeds, versus.outputs, atol=atol, rtol=rtol
                )
                versus = replace(versus, outputs=explained)
            checks.append(versus)
    return checks


def convert_model(
    model: str | os.PathLike[str] | Runner,
    output: str | os.PathLike[str],
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    compress_to_fp16: bool = False,
    output_names: Sequence[str] | None = None,
    check: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 0,
) -> ConversionReport:
    """Write *model* as OpenVINO IR at *output* (``.xml``; weights in the ``.bin`` beside it).

    *model* is a path, or a :class:`Runner` (its device, precision and shapes are used;
    this is :meth:`Runner.convert`). *shapes* gives inputs static shapes first (as
    ``Runner(shapes=...)``); *output_names* keeps only those tensors as outputs (inner ones
    too); *compress_to_fp16* stores float weights as FP16 (OpenVINO decompresses them when
    compiling). With *check*, the IR is run against the source on seeded random inputs
    (``seed``) within *atol*/*rtol* (default: compare's, or ``FP16_ATOL``/``FP16_RTOL`` when
    compressed); ``report.passed`` says how it went.
    """
    if isinstance(model, Runner):
        runner = model
        if shapes:
            runner.reshape(shapes)
    else:
        runner = Runner(model, shapes=shapes)
    xml, bin_ = ir_paths(output)
    check_writable(xml)
    if xml.resolve() == runner.path.resolve():
        raise InputError(f"{xml} is the source model; write the IR under another name")
    source_info = runner.info()
    converted = runner.model
    if output_names:
        converted = _keep_outputs(converted, output_names, runner)
    save_ir(converted, xml, compress_to_fp16=compress_to_fp16)
    ir = Runner(xml, runner.device, runner.precision, config=runner.extra_config)
    checks: list[CheckResult] = []
    if check:
        # The source as converted, with the same outputs as the IR, uncompressed.
        source = Runner(
            runner.path,
            runner.device,
            runner.precision,
            shapes=runner.shapes,
            config=runner.extra_config,
        )
        source.use_model(converted)
        fp16 = compress_to_fp16
        checks = _check(
            ir,
            source,
            atol=atol if atol is not None else (FP16_ATOL if fp16 else DEFAULT_ATOL),
            rtol=rtol if rtol is not None else (FP16_RTOL if fp16 else DEFAULT_RTOL),
            seed=seed,
        )
    return ConversionReport(
        source=str(runner.path),
        xml=str(xml),
        bin=str(bin_),
        compressed_to_fp16=compress_to_fp16,
        source_bytes=_size(runner.path),
        xml_bytes=xml.stat().st_size,
        bin_bytes=bin_.stat().st_size,
        source_info=source_info,
        ir_info=ir.info(),
        checks=checks,
    )


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    total = path.stat().st_size
    if path.suffix.lower() == ".xml" and path.with_suffix(".bin").is_file():
        total += path.with_suffix(".bin").stat().st_size
    return total
