"""A Git LFS server: Flask under gunicorn behind nginx."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("lfs-server")
except PackageNotFoundError:  # running from a source tree or a bundle without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
