"""Dynamo exporter (``torch.onnx.export(..., dynamo=True)``) support.

* :func:`make_deform_conv2d_translation` / :data:`deform_conv2d_translation`: an onnxscript
  (trace-only) translation of ``torch.ops.torchvision.deform_conv2d.default`` for
  ``custom_translation_table``, driving the same graph builder as :mod:`.lower`.
* :func:`export`: one call that never writes an invalid model: native ``DeformConv`` at
  opset >= 19 unless asked to decompose, the decomposition otherwise.

torch and onnxscript are imported lazily.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deform_conv2d_onnx_exporter.graph import (
    MIN_OPSET,
    DeformConvSpec,
    build_deform_conv,
    check_opset,
    columns_for_output_size,
    resolve_variant,
)

#: torch 2.14's dynamo exporter default opset.
DEFAULT_OPSET = 20
#: First opset with ONNX DeformConv.
NATIVE_OPSET = 19
#: torch's dynamo exporter builds every graph at this opset or above and converts down to a
#: lower ``opset_version`` afterwards (onnx's version converter).
TORCHLIB_OPSET = 18
#: The lowest opset onnx's version converter brings a graph with ``Shape`` down to (it has no
#: down-adapter for Shape below 15, nor for Reshape below 14): a dynamic-shape export of
#: DeformConv2d reaches 15, 16 and 17 (tested), but not 14.
CONVERTER_MIN_OPSET = 15
#: onnx's version converter has no down-adapter for ``Reshape`` below this opset, and the
#: decomposition always holds Reshape: a dynamo export below it cannot succeed.
RESHAPE_CONVERTER_MIN_OPSET = 14


#: The attribute :mod:`.dropin` marks its wrapper of ``torch.onnx.export`` with. It lives
#: here so that this module never imports :mod:`.dropin` (dropin imports this one).
DROPIN_MARK = "__deform_conv2d_onnx_dropin__"


def original_torch_onnx_export() -> Callable[..., Any]:
    """``torch.onnx.export`` as torch defines it (unwrapped if the drop-in is installed)."""
    import torch.onnx

    current = torch.onnx.export
    if getattr(current, DROPIN_MARK, False):
        return getattr(current, "__wrapped__", current)
    return current


class ExportError(ValueError):
    """The exporter produced a model that is not what was asked for; nothing was written."""


class OpsetConversionError(ExportError):
    """torch could not convert the model down to the requested opset; nothing was written."""


class OnnxscriptEmitter:
    """An emitter over onnxscript's tracer: each ``op`` call records one node."""

    def __init__(self, opset: int) -> None:
        import onnxscript

        self.ops = onnxscript.values.Opset("", opset)

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        """Record node *op_type*; return its output value."""
        return getattr(self.ops, op_type)(*inputs, **attrs)

    def const(self, value: np.ndarray) -> Any:
        """Record a ``Constant`` node holding *value*."""
        import onnx_ir as ir

        return self.ops.Constant(value=ir.tensor(np.array(value)))


def _static_kernel(weight: Any) -> tuple[int, int]:
    shape = getattr(weight, "shape", None)
    dims = list(shape) if shape is not None else []
    if len(dims) != 4 or not all(isinstance(d, int) for d in dims[2:]):
        raise ValueError(
            f"deform_conv2d weight must have a static 4-D shape (out, in/groups, kh, kw) at export "
            f"time, got {shape!r}; make the weight a parameter or constant"
        )
    return int(dims[2]), int(dims[3])


def _static_dims(value: Any) -> tuple[int | None, ...] | None:
    dims = list(getattr(value, "shape", None) or [])
    if len(dims) != 4:
        return None
    return tuple(d if isinstance(d, int) else None for d in dims)


def _static_hw(value: Any) -> tuple[int | None, int | None] | None:
    dims = _static_dims(value)
    return None if dims is None else (dims[2], dims[3])


def make_deform_conv2d_translation(
    opset: int = DEFAULT_OPSET, columns: str = "auto", variant: str | None = None
) -> Callable[..., Any]:
    """Return a translation of ``torchvision::deform_conv2d`` emitting operators valid at *opset*.

    Use it as ``custom_translation_table={torch.ops.torchvision.deform_conv2d.default: fn}``
    with ``torch.onnx.export(..., dynamo=True, opset_version=opset)``. The variant follows
    *opset* (GatherND below 16); the operators are written in the form of the opset torch
    builds the graph at (at least 18), because torch converts the whole graph down to
    *opset* afterwards.
    """
    resolved = resolve_variant(variant, opset)  # reject bad values now, not at export time
    columns_for_output_size(columns, None)
    emit_opset = max(opset, TORCHLIB_OPSET)

    def torchvision_deform_conv2d(
        input: Any,
        weight: Any,
        offset: Any,
        mask: Any,
        bias: Any,
        stride_h: int,
        stride_w: int,
        pad_h: int,
        pad_w: int,
        dilation_h: int,
        dilation_w: int,
        groups: int,
        offset_groups: int,
        use_mask: bool,
    ) -> Any:
        """torchvision::deform_conv2d as standard ONNX operators.

        The parameters are named as in the op's schema: torch's dispatcher binds the call's
        arguments to them by name.
        """
        dtype = np.dtype(np.float32)
        if getattr(input, "dtype", None) is not None:
            dtype = np.dtype(input.dtype.numpy())
        scalars = (
            stride_h,
            stride_w,
            pad_h,
            pad_w,
            dilation_h,
            dilation_w,
            groups,
            offset_groups,
            use_mask,
        )
        spec = DeformConvSpec.from_torchvision(
            _static_kernel(weight),
            scalars,
            has_bias=bias is not None,
            dtype=dtype,
            columns=columns,
            offset_hw=_static_hw(offset),
            input_shape=_static_dims(input),
        )
        return build_deform_conv(
            OnnxscriptEmitter(emit_opset),
            spec,
            input,
            weight,
            offset,
            mask if use_mask else None,
            bias,
            opset=emit_opset,
            variant=resolved,
        )

    return torchvision_deform_conv2d


#: The translation for torch's default dynamo opset (20).
deform_conv2d_translation = make_deform_conv2d_translation(DEFAULT_OPSET)


def export(
    model: Any,
    args: tuple[Any, ...],
    f: str | os.PathLike[str] | None = None,
    *,
    opset_version: int | None = None,
    decompose: bool | None = None,
    columns: str = "auto",
    variant: str | None = None,
    dynamic_shapes: Any = None,
    dynamo: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_axes: Mapping[str, Any] | None = None,
    check: bool = False,
    **kwargs: Any,
) -> Any:
    """Export *model* to ONNX with DeformConv handled correctly at any opset >= 12.

    Args:
        model: a ``torch.nn.Module`` using ``torchvision.ops.deform_conv2d``/``DeformConv2d``,
            mmcv's DCN layers or a registered DCN Function.
        args: example inputs.
        f: where to write the model (None: do not write).
        opset_version: default 20 (torch's dynamo default).
        decompose: ``True`` always writes standard operators (GridSample at opset >= 16,
            GatherND at 12-15); ``False`` requires opset >= 19 and writes native
            ``DeformConv``; ``None`` picks native at opset >= 19 and decomposes below.
        columns: ``"conv"``, ``"matmul"`` or ``"auto"`` for the decomposition's final
            product (see :func:`~deform_conv2d_onnx_exporter.graph.columns_for_output_size`).
        variant: ``None`` (GridSample at opset >= 16, GatherND below) or ``"gathernd"``
            (pixel-exact sampling positions at any opset, slower).
        dynamic_shapes: passed to the dynamo exporter.
        dynamo: ``False`` uses the TorchScript exporter, which has no native
            ``DeformConv``: it always decomposes (pass *dynamic_axes* there).
        check: run the model on *args* in onnxruntime (and OpenVINO when installed, for
            decomposed models) before writing it and compare with ``model(*args)``
            (:func:`~deform_conv2d_onnx_exporter.check.check_export`); beyond
            ``1e-4 + 1e-3 * |torch|`` anywhere raises :class:`ExportError`.
        kwargs: passed on to ``torch.onnx.export``.

    Returns:
        The ``onnx.ModelProto`` that was written.

    Raises:
        ValueError: an unsupported opset, or ``decompose=False`` below opset 19.
        ExportError: ``check=True`` and the model does not match PyTorch; nothing was
            written.
    """
    import onnx
    import torch

    from deform_conv2d_onnx_exporter.mmcv_ops import register_loaded_mmcv

    register_loaded_mmcv()  # a model of mmcv's DCN layers exports with no extra call
    opset = DEFAULT_OPSET if opset_version is None else opset_version
    check_opset(opset)
    # Before the export's minutes, not after (it failed naming a temporary of its .data).
    if isinstance(f, (str, os.PathLike)):
        folder = Path(f).parent
        if not folder.is_dir():
            raise FileNotFoundError(
                f"cannot write {os.fspath(f)!r}: the folder {os.fspath(folder)!r} does not exist"
            )
    # Checked here too: a native export ignores both, and a typo should not pass silently.
    columns_for_output_size(columns, None)
    resolve_variant(variant, opset)
    if decompose is False and opset < NATIVE_OPSET:
        raise ValueError(
            f"native DeformConv needs opset >= {NATIVE_OPSET}, got opset_version={opset}; "
            "use decompose=True (or None) for standard operators"
        )
    native = decompose is False or (decompose is None and opset >= NATIVE_OPSET)
    if not dynamo:
        if decompose is False:
            raise ValueError(
                "the TorchScript exporter (dynamo=False) has no native DeformConv; "
                "use decompose=True"
            )
        from deform_conv2d_onnx_exporter.torchscript import register_symbolic

        register_symbolic(columns=columns, variant=variant)
        buffer = io.BytesIO()
        original_torch_onnx_export()(
            model,
            args,
            buffer,  # the TorchScript exporter accepts file objects
            opset_version=opset,
            dynamo=False,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            **kwargs,
        )
        proto = onnx.load_from_string(buffer.getvalue())
        if check:
            _check_against_torch(model, args, proto)
        if f is not None:
            onnx.save(proto, f)
        return proto

    table = dict(kwargs.pop("custom_translation_table", None) or {})
    if not native:
        table.setdefault(
            torch.ops.torchvision.deform_conv2d.default,
            make_deform_conv2d_translation(opset, columns, variant),
        )
    kwargs.setdefault("verbose", False)  # torch's "[torch.onnx] ..." progress lines
    call = {
        "opset": opset,
        "table": table,
        "input_names": input_names,
        "output_names": output_names,
        **kwargs,
    }
    try:
        with _quiet_down_conversion():
            program = export_checked(model, args, None, dynamic_shapes=dynamic_shapes, **call)
    except Exception as exc:
        if not _data_dependent(exc) or not isinstance(model, torch.nn.Module):
            raise
        # A data-dependent Python branch (EDVR's `if offset_absmean > 50: logger.warning`)
        # stops torch.export; draft_export traces through it with the example's value. A
        # draft program serves one export only (a second fails in torch), so make it here.
        with _quiet_down_conversion():
            program = export_checked(
                _draft_program(model, args, dynamic_shapes, kwargs.get("kwargs")),
                (),
                None,
                dynamic_shapes=None,
                **{k: v for k, v in call.items() if k != "kwargs"},
            )
    if check:
        _check_against_torch(model, args, program.model_proto)
    save_program(program, f, kwargs)
    return program.model_proto


#: torch's and onnxscript's log lines announcing the build at opset 18 and the conversion
#: down: expected below opset 18, and :func:`check_written` verifies the opset reached.
_DOWN_CONVERSION_NOTES = {
    "torch.onnx._internal.exporter._compat": "Setting ONNX exporter to use operator set",
    "onnxscript.version_converter": "The model version conversion is not supported",
}


class _DropNote(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


@contextlib.contextmanager
def _quiet_down_conversion() -> Iterator[None]:
    """Keep :func:`export` silent on success: drop the down-conversion notes while it runs."""
    added = [(logging.getLogger(n), _DropNote(p)) for n, p in _DOWN_CONVERSION_NOTES.items()]
    for logger, note in added:
        logger.addFilter(note)
    try:
        yield
    finally:
        for logger, note in added:
            logger.removeFilter(note)


def _check_against_torch(model: Any, args: Any, proto: Any) -> None:
    """Raise ExportError unless *proto* matches ``model(*args)`` in every installed runtime."""
    from deform_conv2d_onnx_exporter.check import check_export, format_report

    # Every installed runtime that can read it (OpenVINO cannot read native DeformConv).
    report = check_export(model, args, proto)
    if not report.passed:
        failed = [line for line in format_report(report) if line.endswith("BEYOND TOLERANCE")]
        raise ExportError(
            "the exported model does not match PyTorch: "
            + "; ".join(failed)
            + "; nothing was written"
        )


def _data_dependent(exc: BaseException) -> bool:
    """True when *exc* (or its cause) is torch.export stopping on a data-dependent branch."""
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if name in ("GuardOnDataDependentSymNode", "DataDependentOutputException") or (
            "GuardOnDataDependentSymNode" in str(seen)
            or "data-dependent" in str(seen).lower()
            or "data dependent" in str(seen).lower()
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _draft_program(model: Any, args: tuple[Any, ...], dynamic_shapes: Any, kwargs: Any) -> Any:
    import warnings

    import torch

    program = torch.export.draft_export(
        model, tuple(args), kwargs=kwargs, dynamic_shapes=dynamic_shapes
    )
    warnings.warn(
        "torch.export stopped on a data-dependent branch; exported with "
        "torch.export.draft_export instead, which keeps the branch taken for the example "
        "inputs (see the report in the ExportedProgram's _report)",
        UserWarning,
        stacklevel=3,
    )
    return program


def export_checked(
    model: Any,
    args: tuple[Any, ...],
    f: Any,
    *,
    opset: int,
    table: Mapping[Any, Any],
    **kwargs: Any,
) -> Any:
    """Run torch's dynamo exporter and refuse a model that is not what was asked for.

    The one path to torch's dynamo exporter for both :func:`export` and the drop-in
    ``torch.onnx.export`` (:mod:`.dropin`): it exports without writing, checks that the
    model is at *opset*, holds no ``DeformConv`` below opset 19 and passes
    ``onnx.checker`` (full), then writes *f* (if any) the way torch would. Raises
    :class:`ExportError` before anything is written.
    """
    save_options = {k: kwargs.pop(k) for k in _SAVE_OPTIONS if k in kwargs}
    program = original_torch_onnx_export()(
        model,
        args,
        None,
        opset_version=opset,
        dynamo=True,
        custom_translation_table=dict(table) or None,
        **kwargs,
    )
    if program is None:  # torch returns None only for dynamo=False
        raise ExportError("torch.onnx.export(dynamo=True) returned no ONNXProgram")
    check_written(program.model_proto, opset)
    save_program(program, f, save_options)
    return program


_SAVE_OPTIONS = ("export_params", "keep_initializers_as_inputs", "external_data")


def check_written(proto: Any, opset: int) -> None:
    """Raise :class:`ExportError` unless *proto* is a valid model at *opset*."""
    import onnx

    from deform_conv2d_onnx_exporter.lower import count_deform_conv

    written = next((e.version for e in proto.opset_import if e.domain in ("", "ai.onnx")), opset)
    if written != opset:
        # torch exports at opset 18 and converts down with onnx's version converter, which
        # has no down-adapter for some operators (Shape below opset 15, for one). The model
        # is valid but not at the opset asked for: say so instead of writing it. Below 15 the
        # converter's known gaps explain the failure, so 15 is the advice; at 15 or above some
        # other operator lacks an adapter, and only the opset torch wrote is sure to work.
        lowest = CONVERTER_MIN_OPSET if opset < CONVERTER_MIN_OPSET else written
        raise OpsetConversionError(
            f"the dynamo exporter wrote opset {written}, not the requested opset {opset} "
            "(onnx's version converter could not convert the model down: it has no "
            "down-adapter for Reshape below opset 14 or Shape below 15); use dynamo=False "
            f"(the TorchScript exporter supports opsets {MIN_OPSET}-20) "
            f"or opset_version >= {lowest}; nothing was written"
        )
    if written < NATIVE_OPSET and count_deform_conv(proto):
        raise ExportError(
            f"the exported model holds ONNX DeformConv at opset {written} (it exists from "
            f"opset {NATIVE_OPSET}); a custom_translation_table entry for "
            "torchvision::deform_conv2d overrode the decomposition; nothing was written"
        )
    if proto.ByteSize() < 2**31 - 1:  # larger protos cannot be checked in memory
        try:
            onnx.checker.check_model(proto, full_check=True)
        except Exception as exc:
            if written < TORCHLIB_OPSET:
                # onnx's converter brought the model down but left it invalid (it keeps
                # Split's num_outputs, from torch.chunk, below opset 18): a conversion
                # failure, which the drop-in answers with the TorchScript exporter.
                raise OpsetConversionError(
                    f"the dynamo exporter's model, converted down from opset {TORCHLIB_OPSET} "
                    f"to {written} by onnx's version converter, fails onnx.checker: "
                    f"{str(exc).splitlines()[0]}; use dynamo=False (the TorchScript exporter "
                    f"supports opsets {MIN_OPSET}-20) or opset_version >= {TORCHLIB_OPSET}; "
                    "nothing was written"
                ) from exc
            raise ExportError(
                f"the exported model fails onnx.checker: {str(exc).splitlines()[0]}; "
                "nothing was written"
            ) from exc


def save_program(program: Any, f: Any, options: Mapping[str, Any]) -> None:
    """Write *program* to *f* as ``torch.onnx.export`` does (a path, or a file object)."""
    import onnx

    if f is None:
        return
    if hasattr(f, "write"):
        onnx.save(program.model_proto, f)
        return
    program.save(
        f,
        include_initializers=options.get("export_params", True),
        keep_initializers_as_inputs=options.get("keep_initializers_as_inputs", False),
        external_data=options.get("external_data", True),
    )


__all__ = [
    "CONVERTER_MIN_OPSET",
    "DEFAULT_OPSET",
    "MIN_OPSET",
    "NATIVE_OPSET",
    "ExportError",
    "OpsetConversionError",
    "deform_conv2d_translation",
    "export",
    "make_deform_conv2d_translation",
]
