"""The exceptions a user can cause, each with a message that says what would be accepted.

The CLI prints these without a traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class RunnerError(Exception):
    """Base class of the errors a user can fix (bad input, bad model, missing file)."""


class ModelFileError(RunnerError):
    """The model (or an input file) does not exist or is not a format OpenVINO reads."""


class ConversionError(RunnerError):
    """OpenVINO could not convert the model; ``failures`` lists ``(op, node, message)``."""

    def __init__(self, message: str, failures: list[tuple[str, str, str]] | None = None) -> None:
        super().__init__(message)
        self.failures: list[tuple[str, str, str]] = failures or []


class InputError(RunnerError):
    """An input name, shape, dtype or file that the model does not accept."""


class MissingDependencyError(RunnerError):
    """An optional dependency (onnxruntime for ``compare``) is not installed."""
