"""A Git LFS server: Flask under gunicorn behind nginx."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed metadata on first use: importing
    importlib.metadata costs every `lfs-server` start (each SSH connection) ~0.1 s."""
    if name != "__version__":
        raise AttributeError(f"module 'lfs_server' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lfs-server")
    except PackageNotFoundError:  # running from a source tree or a bundle without metadata
        return "0.0.0"
