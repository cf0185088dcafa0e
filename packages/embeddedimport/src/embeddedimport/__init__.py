"""Import modules and data straight from a Windows executable's resources (stdlib only)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("embeddedimport")
except PackageNotFoundError:  # running from a source tree or a bundle without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
