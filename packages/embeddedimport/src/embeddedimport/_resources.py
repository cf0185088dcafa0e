"""``importlib.resources`` support: bundle directories and files as in-memory Traversables.

Imported only when a resource reader is requested, because ``importlib.resources.abc``
pulls in ``typing`` and would slow every bundled start-up.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from typing import IO, Any

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable, TraversableResources
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable, TraversableResources

from .bundle import Bundle

__all__ = ["BundleResourceReader", "BundleTraversable"]


class BundleTraversable(Traversable):
    """A file or directory of a bundle; ``name`` is its ``/``-separated bundle path."""

    def __init__(self, bundle: Bundle, path: str):
        self._bundle = bundle
        self._path = path.strip("/")

    def __repr__(self) -> str:
        return f"BundleTraversable({self._bundle.path_of(self._path)!r})"

    def __str__(self) -> str:
        return self._bundle.path_of(self._path)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BundleTraversable):
            return NotImplemented
        return (self._bundle, self._path) == (other._bundle, other._path)

    def __hash__(self) -> int:
        return hash((id(self._bundle), self._path))

    @property
    def name(self) -> str:
        """The last path component (the executable's file name at the top)."""
        if not self._path:
            return self._bundle.executable.replace("\\", "/").rpartition("/")[2]
        return self._path.rpartition("/")[2]

    def is_dir(self) -> bool:
        """Whether this is the bundle's top or a directory holding files."""
        return not self._path or self._path in self._bundle.directories

    def is_file(self) -> bool:
        """Whether this names a bundled file."""
        return self._path in self._bundle.files

    def exists(self) -> bool:
        """Whether this is a bundled file or directory (importlib.metadata's ``files()``
        keeps only the files that exist)."""
        return self.is_file() or self.is_dir()

    def iterdir(self) -> Iterator[BundleTraversable]:
        """Entries directly inside this directory, sorted by name."""
        if not self.is_dir():
            raise NotADirectoryError(20, "not a directory in the bundle", str(self))
        base = self._path + "/" if self._path else ""
        for child in self._bundle.children(self._path):
            yield BundleTraversable(self._bundle, base + child)

    def joinpath(self, *descendants: str) -> BundleTraversable:
        """A descendant; each argument may itself contain ``/``."""
        parts = [self._path] if self._path else []
        for descendant in descendants:
            parts.extend(p for p in str(descendant).replace("\\", "/").split("/") if p)
        return BundleTraversable(self._bundle, "/".join(parts))

    def __truediv__(self, child: str) -> BundleTraversable:
        return self.joinpath(child)

    def read_bytes(self) -> bytes:
        """The file's content."""
        try:
            return self._bundle.read(self._path)
        except KeyError:
            raise self._missing() from None

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        """The file's content decoded (UTF-8 unless told otherwise)."""
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def open(self, mode: str = "r", *args: Any, **kwargs: Any) -> IO[Any]:
        """A read-only stream over the content: ``"rb"`` binary, ``"r"`` text."""
        if mode not in ("r", "rb"):
            raise ValueError(f"bundled files are read-only: mode must be 'r' or 'rb', not {mode!r}")
        stream = io.BytesIO(self.read_bytes())
        if mode == "rb":
            return stream
        kwargs.setdefault("encoding", "utf-8")
        return io.TextIOWrapper(stream, *args, **kwargs)

    def _missing(self) -> OSError:
        if self.is_dir():
            return IsADirectoryError(21, "is a directory in the bundle", str(self))
        return FileNotFoundError(2, "no such file in the bundle", str(self))


class BundleResourceReader(TraversableResources):
    """The resource reader returned by ``EmbeddedImporter.get_resource_reader``."""

    def __init__(self, bundle: Bundle, directory: str):
        self._bundle = bundle
        self._directory = directory

    def files(self) -> BundleTraversable:
        """The package's directory inside the bundle."""
        return BundleTraversable(self._bundle, self._directory)
