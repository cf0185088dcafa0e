"""The resource editor: open a PE file, list/add/replace/remove resources, save atomically.

This is the I/O edge over :mod:`exepy.image` (layout) and :mod:`exepy.restree` (the tree).
The input file is only ever read; :meth:`ResourceEditor.save` writes a temporary file next
to the destination and renames it into place, so an error leaves nothing behind.
"""

from __future__ import annotations

import errno
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exepy import image, restree
from exepy.image import PEError
from exepy.restree import ResourceId, ResourceKey

__all__ = ["PEError", "ResourceEditor", "ResourceInfo", "SignatureRemovedWarning", "write_atomic"]


class SignatureRemovedWarning(UserWarning):
    """The input was signed; the output has no signature and must be re-signed."""


@dataclass(frozen=True)
class ResourceInfo:
    """One resource as listed: its key and its size in bytes."""

    type: ResourceId
    name: ResourceId
    language: int
    size: int


class ResourceEditor:
    """The resources of one PE image (PE32 or PE32+, any machine), editable in memory.

    >>> editor = ResourceEditor.open("app.exe")            # doctest: +SKIP
    >>> editor.set(10, "CONFIG", b"...")                   # doctest: +SKIP
    >>> editor.save("app-configured.exe")                  # doctest: +SKIP

    Types and names are int ids (0-65535) or str names; names are stored upper-case, as
    the Windows loader matches them (``"config"`` and ``"CONFIG"`` are the same name), and
    ``"#12"`` means the id 12. Languages are int ids (0 is neutral, 1033 is en-US).
    """

    def __init__(self, data: bytes, *, source: str | None = None) -> None:
        """Parse *data* (the bytes of a PE file); raise :class:`PEError` if it is not one."""
        self._original = bytes(data)
        self._source = source
        prefix = f"{source}: " if source else ""
        try:
            self.layout = image.read_layout(self._original)
            self._resources = image.read_resources(self._original, self.layout)
        except PEError as exc:
            raise PEError(f"{prefix}{exc}") from None
        self._subsystem: int | None = None
        self._modified = False

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ResourceEditor:
        """Read the PE file at *path*."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise PEError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None
        return cls(data, source=os.fspath(path))

    # Reading -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ResourceInfo]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._resources)

    def entries(self) -> list[ResourceInfo]:
        """Every resource in the order the loader sees them (types, names, languages)."""
        keys = sorted(
            self._resources,
            key=lambda k: (restree.sort_key(k[0]), restree.sort_key(k[1]), k[2]),
        )
        return [ResourceInfo(t, n, lang, len(self._resources[t, n, lang])) for t, n, lang in keys]

    def keys(self) -> list[ResourceKey]:
        """The ``(type, name, language)`` keys, sorted as :meth:`entries` sorts them."""
        return [(i.type, i.name, i.language) for i in self.entries()]

    def find(
        self, type_: ResourceId, name: ResourceId | None = None, language: int | None = None
    ) -> list[ResourceKey]:
        """Keys matching *type_* and, when given, *name* and *language*."""
        t = restree.normalize_id(type_, "type")
        n = None if name is None else restree.normalize_id(name, "name")
        return [
            k
            for k in self.keys()
            if k[0] == t and (n is None or k[1] == n) and (language is None or k[2] == language)
        ]

    def get(self, type_: ResourceId, name: ResourceId, language: int | None = None) -> bytes:
        """The data of one resource; with no *language*, the lowest language id present.

        Raises KeyError naming the resource when it is absent.
        """
        found = self.find(type_, name, language)
        if not found:
            where = f"{restree.format_id(type_, types=True)}/{restree.format_id(name)}"
            lang = "" if language is None else f" language {language}"
            raise KeyError(f"no resource {where}{lang}")
        return self._resources[found[0]]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 3:
            return False
        try:
            return restree.normalize_key(*key) in self._resources
        except restree.ResourceTreeError:
            return False

    @property
    def resources(self) -> dict[ResourceKey, bytes]:
        """A copy of all resources, ``{(type, name, language): data}``."""
        return dict(self._resources)

    @property
    def signed(self) -> bool:
        """Whether the input carries a certificate table (saving will remove it)."""
        offset, size = self.layout.directory(image.IMAGE_DIRECTORY_ENTRY_SECURITY)
        return bool(offset and size)

    @property
    def subsystem(self) -> int:
        """The PE Subsystem field: 2 is a Windows GUI program, 3 a console program."""
        return self.layout.subsystem if self._subsystem is None else self._subsystem

    @subsystem.setter
    def subsystem(self, value: int) -> None:
        if not 0 <= value <= 0xFFFF:
            raise ValueError(f"subsystem must be in 0..65535, got {value}")
        self._subsystem = value

    # Editing -----------------------------------------------------------------------------

    def set(
        self, type_: ResourceId, name: ResourceId, data: bytes, language: int = 0
    ) -> ResourceKey:
        """Add or replace one resource; return its normalised key."""
        key = restree.normalize_key(type_, name, language)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"resource data must be bytes, got {type(data).__name__}")
        if len(data) > 0x7FFFFFFF:
            raise ValueError("a resource must be smaller than 2 GiB")
        self._resources[key] = bytes(data)
        self._modified = True
        return key

    def remove(
        self, type_: ResourceId, name: ResourceId | None = None, language: int | None = None
    ) -> int:
        """Remove matching resources (all names / languages when not given); return how many."""
        found = self.find(type_, name, language)
        for key in found:
            del self._resources[key]
        self._modified = self._modified or bool(found)
        return len(found)

    # Writing -----------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The edited image. Unchanged input comes back unchanged, signature included.

        Warns :class:`SignatureRemovedWarning` when a signed input had to lose its signature.
        """
        if not self._modified and self._subsystem in (None, self.layout.subsystem):
            return self._original
        if not self._modified:
            data = image.set_subsystem_only(self._original, self.subsystem)
            if not self.signed:
                return data
            # A subsystem change invalidates the signature too: go through the full rewrite.
        try:
            result = image.replace_resources(
                self._original, self._resources, subsystem=self._subsystem
            )
        except PEError as exc:
            raise PEError(f"{self._source}: {exc}" if self._source else str(exc)) from None
        if result.signature_removed:
            where = f"{self._source}: " if self._source else ""
            warnings.warn(
                f"{where}the input was signed; its certificate table was removed because "
                "any edit invalidates it. Re-sign the output (e.g. signtool or osslsigncode).",
                SignatureRemovedWarning,
                stacklevel=2,
            )
        return result.data

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the edited image to *path* atomically (nothing is left behind on error)."""
        data = self.to_bytes()
        mode = None
        if self._source is not None:
            try:
                mode = Path(self._source).stat().st_mode & 0o777
            except OSError:
                mode = None
        return write_atomic(path, data, mode=mode)


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Write *data* to *path* through a temporary file in the same folder and a rename."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():  # else mkstemp's error names a temporary file nobody asked for
        raise FileNotFoundError(errno.ENOENT, "the output folder does not exist", str(folder))
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o777 & ~umask
        Path(temp).chmod(mode)
        Path(temp).replace(target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
