"""Pack Python sources and data files into a Windows executable's resources, from any OS.

The main names are importable from here (loaded on first use, so that ``exepy --help``
stays fast): :class:`ResourceEditor`, :class:`PEError`, :func:`build_exe`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    from exepy.build import build_exe
    from exepy.editor import PEError, ResourceEditor

__all__ = ["PEError", "ResourceEditor", "__version__", "build_exe"]

_LAZY = {"ResourceEditor": "exepy.editor", "PEError": "exepy.editor", "build_exe": "exepy.build"}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on demand: importlib.metadata costs ~40 ms at start-up
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("exepy")
        except PackageNotFoundError:  # a source tree or a bundle without metadata
            return "0.0.0"
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'exepy' has no attribute {name!r}")
