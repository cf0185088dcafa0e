"""The original exepy resources (RT_RCDATA 200 and 201) and :class:`Bundle`, one exe's bundle.

The format functions are pure, from bytes to data and back. :class:`Bundle` is the
indexed form the importer serves from: :meth:`Bundle.from_executable` is the one place
that reads the two resources out of an executable (through :mod:`embeddedimport.pe`).

Bundle (RT_RCDATA id 200, language 0), all integers little-endian ``uint32``::

    compressed_size
    uncompressed_size
    file_count
    offsets[file_count]          offset of each file's content in the uncompressed blob
    zlib stream                  exactly compressed_size bytes; inflates to uncompressed_size
                                 bytes: each file's content followed by one NUL byte
    names                        file_count ASCII names, each NUL-terminated, same order

A file's size is ``next offset - offset - 1`` (the last one ends at ``uncompressed_size``).
The original stored the names as Windows relative paths (``pkg\\mod.py``): its importer
looked them up with the Windows separator. :func:`pack` therefore writes backslashes;
:func:`unpack` accepts either separator and returns names with ``/``.

Command line (RT_RCDATA id 201): ``uint32 argc``, ``argc`` NUL-terminated UTF-16LE strings,
then one more UTF-16 NUL. The original wrote the strings through
``ctypes.create_unicode_buffer``, whose buffer ends with that extra NUL, and its
``extract`` relies on it: after each argument it checks that it has not reached the end of
the resource, so a resource ending right after the last terminator is "corrupted" there.
:func:`pack_command` therefore writes the trailing NUL; :func:`unpack_command` reads the
resource with or without it (earlier development builds of exepy wrote none).
"""

# ruff: noqa: PTH100, PTH116
# (os.path on purpose: bundle paths such as <exe>/pkg/mod.py are not filesystem paths, and
# pathlib would add an import to every bundled start-up.)

from __future__ import annotations

import os
import struct
import zlib

from .pe import PEFormatError, find_resource

TYPE_CHECKING = False  # not typing's: this module is imported by every bundled start-up
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BUNDLE_ID",
    "COMMAND_ID",
    "RT_RCDATA",
    "Bundle",
    "BundleError",
    "BundleNotFoundError",
    "normalize_name",
    "pack",
    "pack_command",
    "unpack",
    "unpack_command",
    "unpack_index",
]

RT_RCDATA = 10
"""Resource type of raw application data (``RT_RCDATA``)."""
BUNDLE_ID = 200
"""Resource id of the file bundle."""
COMMAND_ID = 201
"""Resource id of the injected command line."""

_STORED_SEP = "\\"
_U32 = struct.Struct("<I")
_HEADER = struct.Struct("<III")


class BundleError(ValueError):
    """A bundle or command-line resource cannot be written or read; the message says why."""


def normalize_name(name: str) -> str:
    """Return *name* as a bundle-relative ``/``-separated path, or raise :class:`BundleError`.

    Accepts ``/`` or ``\\`` separators; rejects empty, absolute, drive-qualified and
    ``.``/``..`` components and non-ASCII characters, because the original format stores
    ASCII names and its importer only looks up plain relative paths.
    """
    if not isinstance(name, str):
        raise BundleError(f"bundle file names must be str, got {type(name).__name__}: {name!r}")
    if not name.isascii():
        raise BundleError(
            f"file name {name!r} is not ASCII; the original bundle format stores ASCII "
            "names only: rename the file"
        )
    if "\0" in name:
        raise BundleError(f"file name {name!r} contains a NUL character")
    parts = name.replace("\\", "/").split("/")
    if not name or any(part in ("", ".", "..") for part in parts) or ":" in name:
        raise BundleError(
            f"file name {name!r} must be a relative path such as 'pkg/mod.py' "
            "(no empty, '.' or '..' parts, no leading separator, no drive)"
        )
    return "/".join(parts)


def pack(files: Sequence[tuple[str, bytes]]) -> bytes:
    """Serialise ``(relative name, content)`` pairs into the original bundle format.

    Names may use ``/`` or ``\\``; they are stored with ``\\`` as the original did.
    Raises :class:`BundleError` for a bad or duplicate name.
    """
    seen: set[str] = set()
    offsets: list[int] = []
    chunks: list[bytes] = []
    names: list[bytes] = []
    position = 0
    for name, content in files:
        clean = normalize_name(name)
        if clean in seen:
            raise BundleError(f"file name {name!r} appears twice in the bundle")
        seen.add(clean)
        data = bytes(content)
        offsets.append(position)
        chunks.append(data)
        chunks.append(b"\0")
        position += len(data) + 1
        names.append(clean.replace("/", _STORED_SEP).encode("ascii") + b"\0")
    if position > 0xFFFFFFFF:
        raise BundleError(f"bundle content is {position} bytes; the format's limit is 4 GiB")
    compressed = zlib.compress(b"".join(chunks), 9)
    header = _HEADER.pack(len(compressed), position, len(offsets))
    table = struct.pack(f"<{len(offsets)}I", *offsets)
    return b"".join([header, table, compressed, *names])


def unpack(data: bytes) -> list[tuple[str, bytes]]:
    """Parse a bundle resource into ``(name, content)`` pairs, names ``/``-separated.

    Validation is strict: a truncated header, table, stream or name list, offsets that are
    not increasing or point past the content, a missing NUL after a file, a bad zlib stream
    or a size mismatch each raise :class:`BundleError` naming the problem. Zero bytes after
    the last name are accepted (resource padding); anything else there is an error.
    """
    blob, entries = unpack_index(data)
    return [(name, blob[start:end]) for name, (start, end) in entries.items()]


def unpack_index(data: bytes) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """Validate and inflate a bundle once: the content blob and ``{name: (start, end)}``.

    The same checks as :func:`unpack`, without copying each file: a file's content is
    ``blob[start:end]``. Names are ``/``-separated and keep the bundle's order.
    """
    view = memoryview(data)
    total = len(view)
    if total < _HEADER.size:
        raise BundleError(
            f"bundle is truncated: {total} bytes, the header alone needs {_HEADER.size}"
        )
    compressed_size, uncompressed_size, count = _HEADER.unpack_from(view, 0)
    table_end = _HEADER.size + 4 * count
    if table_end > total:
        raise BundleError(
            f"bundle is truncated: file_count={count} needs an offset table ending at byte "
            f"{table_end}, but the resource has {total} bytes"
        )
    offsets = struct.unpack_from(f"<{count}I", view, _HEADER.size)
    stream_end = table_end + compressed_size
    if stream_end > total:
        raise BundleError(
            f"bundle is truncated: compressed_size={compressed_size} runs to byte "
            f"{stream_end}, but the resource has {total} bytes"
        )
    blob = _inflate(view[table_end:stream_end], uncompressed_size)
    names = _split_names(view[stream_end:], count)
    if count == 0 and uncompressed_size != 0:
        raise BundleError(f"bundle has no files but uncompressed_size={uncompressed_size}")
    if count and offsets[0] != 0:
        raise BundleError(f"first file {names[0]!r} starts at offset {offsets[0]}, expected 0")
    entries: dict[str, tuple[int, int]] = {}
    ends = [*offsets[1:], uncompressed_size][:count]
    for index, (start, end, raw_name) in enumerate(zip(offsets, ends, names, strict=True)):
        try:
            name = normalize_name(raw_name)
        except BundleError as exc:
            raise BundleError(f"file #{index} has a bad name: {exc}") from None
        if name in entries:
            raise BundleError(f"file name {raw_name!r} appears twice in the bundle")
        if end < start + 1:
            raise BundleError(
                f"file {raw_name!r}: offsets are inconsistent (starts at {start}, next "
                f"starts at {end}; each file needs at least its NUL terminator)"
            )
        if blob[end - 1] != 0:
            raise BundleError(
                f"file {raw_name!r} (offset {start}, size {end - start - 1}) is not "
                "followed by a NUL byte: offsets do not match the content"
            )
        entries[name] = (start, end - 1)
    return blob, entries


def _inflate(stream: memoryview, expected: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        blob = inflater.decompress(stream, expected + 1)
    except zlib.error as exc:
        raise BundleError(f"bundle's zlib stream is corrupt: {exc}") from None
    if len(blob) > expected:
        raise BundleError(f"bundle inflates to more than uncompressed_size={expected} bytes")
    if not inflater.eof:
        raise BundleError(
            f"bundle's zlib stream is truncated: it ends after {len(blob)} of "
            f"{expected} bytes (compressed_size={len(stream)})"
        )
    if inflater.unused_data:
        raise BundleError(
            f"compressed_size={len(stream)} is inconsistent: the zlib stream ends "
            f"{len(inflater.unused_data)} bytes early"
        )
    if len(blob) != expected:
        raise BundleError(
            f"bundle inflates to {len(blob)} bytes but uncompressed_size says {expected}"
        )
    return blob


def _split_names(tail: memoryview, count: int) -> list[str]:
    raw = bytes(tail)
    names: list[str] = []
    position = 0
    for index in range(count):
        end = raw.find(b"\0", position)
        if end < 0:
            raise BundleError(
                f"bundle is truncated: the name list ends after {index} of {count} names"
            )
        try:
            names.append(raw[position:end].decode("ascii"))
        except UnicodeDecodeError:
            raise BundleError(
                f"file #{index} has a non-ASCII name {raw[position:end]!r}; the format "
                "stores ASCII names"
            ) from None
        position = end + 1
    if raw[position:].strip(b"\0"):
        raise BundleError(
            f"bundle has {len(raw) - position} unexpected bytes after the last of {count} names"
        )
    return names


def pack_command(argv: Sequence[str]) -> bytes:
    """Serialise a command line (for example ``["-m", "main"]``) as resource 201."""
    if isinstance(argv, str):
        raise BundleError(f"command line must be a sequence of arguments, got the str {argv!r}")
    parts = [_U32.pack(len(argv))]
    for index, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise BundleError(f"argument #{index} must be str, got {type(arg).__name__}")
        if "\0" in arg:
            raise BundleError(f"argument #{index} {arg!r} contains a NUL character")
        parts.append(arg.encode("utf-16-le", "surrogatepass") + b"\0\0")
    parts.append(b"\0\0")  # the original's closing NUL, which its extract requires
    return b"".join(parts)


def unpack_command(data: bytes) -> list[str]:
    """Parse a command-line resource (201) into its arguments.

    Accepts the original's layout (a closing NUL after the last argument) and the same
    without it. Raises :class:`BundleError` when it is truncated, an argument is not terminated, or
    bytes other than zero padding follow the last argument.
    """
    raw = bytes(data)
    if len(raw) < _U32.size:
        raise BundleError(f"command line is truncated: {len(raw)} bytes, argc needs 4")
    (argc,) = _U32.unpack_from(raw, 0)
    if argc > (len(raw) - 4) // 2:
        raise BundleError(f"command line says argc={argc} but holds only {len(raw) - 4} bytes")
    args: list[str] = []
    position = 4
    for index in range(argc):
        end = position
        while end + 1 < len(raw) and raw[end : end + 2] != b"\0\0":
            end += 2
        if end + 1 >= len(raw):
            raise BundleError(
                f"command line is truncated: argument #{index} of {argc} has no terminator"
            )
        try:
            args.append(raw[position:end].decode("utf-16-le", "surrogatepass"))
        except UnicodeDecodeError as exc:
            raise BundleError(f"argument #{index} is not valid UTF-16LE: {exc}") from None
        position = end + 2
    if raw[position:].strip(b"\0"):
        raise BundleError(
            f"command line has {len(raw) - position} unexpected bytes after {argc} arguments"
        )
    return args


class BundleNotFoundError(ImportError):
    """The executable has no bundle resource (RT_RCDATA 200), or cannot be read as a PE file."""


class Bundle:
    """One executable's bundle: the inflated content and a ``{name: (start, end)}`` index.

    Names are ``/``-separated relative paths. ``directories`` holds every directory that
    contains a file (``"pkg"``, ``"pkg/sub"``), which is what makes namespace packages
    and resource directories visible.
    """

    def __init__(
        self,
        executable: str | os.PathLike[str],
        data: bytes,
        command: list[str] | None = None,
        stamp: tuple[int, int] | None = None,
    ):
        self.executable = os.path.abspath(os.fspath(executable))
        self._key = _key(self.executable)
        self.command = command
        self.stamp = stamp
        self._blob, self.files = unpack_index(data)
        directories: set[str] = set()
        for name in self.files:
            cut = name.rfind("/")
            while cut > 0 and name[:cut] not in directories:
                directories.add(name[:cut])
                cut = name.rfind("/", 0, cut)
        self.directories = frozenset(directories)
        self._children: dict[str, list[str]] | None = None

    @classmethod
    def from_executable(
        cls, executable: str | os.PathLike[str], data: bytes | None = None
    ) -> Bundle:
        """Read the bundle (and the stored command line, if any) of a PE file.

        ``data`` is resource 200 when the caller has already read it. Raises
        :class:`BundleNotFoundError` if the file is not a PE image or has no resource 200,
        and :class:`~embeddedimport.bundle.BundleError` if a resource is corrupt.
        """
        path = os.fspath(executable)
        try:
            stat = os.stat(path)
            if data is None:
                data = find_resource(path, RT_RCDATA, BUNDLE_ID)
            command_data = find_resource(path, RT_RCDATA, COMMAND_ID) if data else None
        except (OSError, PEFormatError) as exc:
            raise BundleNotFoundError(
                f"cannot read a bundle from {path!r}: {exc}", path=path
            ) from None
        if data is None:
            raise BundleNotFoundError(
                f"{path!r} has no bundle: resource RT_RCDATA {BUNDLE_ID} is missing "
                "(build the executable with exepy)",
                path=path,
            )
        try:
            command = unpack_command(command_data) if command_data is not None else None
            return cls(path, data, command, (stat.st_mtime_ns, stat.st_size))
        except BundleError as exc:
            raise BundleError(f"{path!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"<Bundle {self.executable!r}: {len(self.files)} files>"

    def read(self, name: str) -> bytes:
        """Content of the file ``name`` (``/``-separated); ``KeyError`` if absent."""
        start, end = self.files[name]
        return self._blob[start:end]

    def children(self, directory: str) -> list[str]:
        """Names (not paths) directly inside ``directory`` (``""`` for the top level)."""
        if self._children is None:
            table: dict[str, set[str]] = {}
            for name in (*self.files, *self.directories):
                parent, _, leaf = name.rpartition("/")
                table.setdefault(parent, set()).add(leaf)
            self._children = {key: sorted(value) for key, value in table.items()}
        return list(self._children.get(directory, ()))

    def path_of(self, name: str) -> str:
        """The ``<exe>/<name>`` path reported as ``__file__`` (platform separator)."""
        if not name:
            return self.executable
        return self.executable + os.sep + name.replace("/", os.sep)

    def relative(self, path: str | os.PathLike[str]) -> str | None:
        """``path`` as a bundle name if it is the exe or lies under it, else ``None``."""
        text = os.fspath(path)
        if not isinstance(text, str):
            return None
        exe = self._key
        key = _key(text)
        if key == exe:
            return ""
        if key.startswith(exe) and key[len(exe)] in _SEPARATORS:
            return text[len(exe) + 1 :].replace("\\", "/").strip("/")
        return None


# Either separator after the exe's path, on every OS, as the original's get_data accepted.
_SEPARATORS = "\\/"


def _key(path: str) -> str:
    """Comparable form of a path: case-folded on Windows, unchanged elsewhere."""
    return os.path.normcase(path)
