"""A small PE (Portable Executable) resource reader: what the Windows loader finds.

The header layout itself is described once, in :mod:`embeddedimport.petables`; this
module, on every bundled start-up's path, keeps the few offsets it needs as constants that
the tests check against those tables.

Reads PE32 and PE32+ images from a path or from bytes, standard library only. It reads
only the headers and the parts of the resource section it walks, so checking a large
executable for one resource costs a few small reads.

Resource keys are ``(type, name, language)``: ``int`` for ids, ``str`` for named entries
(as stored; Windows requires them upper-case). Lookups by name compare upper-cased, as
the Windows loader does.
"""

# No `from __future__ import annotations`, no struct, no typing: the start-up hook imports
# this module in every interpreter whose executable might carry a bundle, and each of those
# imports costs more than the whole resource lookup.
import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING, see above
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["PEFormatError", "ResourceKey", "find_resource", "read_resources"]

ResourceKey = tuple[int | str, int | str, int]
"""``(type, name, language)``: ids are ``int``, named entries ``str``."""

# The offsets and sizes this reader needs, written out: loading the tables they come from
# (embeddedimport.petables, pefile's field names) costs more than the whole lookup, here,
# at every start-up. tests/embeddedimport/test_embeddedimport_pe.py checks each against them.
_DOS_HEADER_SIZE = 64  # DOS_HEADER.size
_E_LFANEW = 60  # DOS_HEADER e_lfanew
_PE_HEADERS_SIZE = 24  # NT_HEADERS.size + FILE_HEADER.size
_NUMBER_OF_SECTIONS = 6  # NT_HEADERS.size + FILE_HEADER NumberOfSections
_SIZE_OF_OPTIONAL_HEADER = 20  # NT_HEADERS.size + FILE_HEADER SizeOfOptionalHeader
_MAGIC = 0  # OPTIONAL_HEADER Magic
_PE32, _PE32_PLUS = 0x10B, 0x20B
_RVA_COUNT = {_PE32: 92, _PE32_PLUS: 108}  # NumberOfRvaAndSizes, PE32 and PE32+
_DIRECTORIES = {_PE32: 96, _PE32_PLUS: 112}  # the data directories: the headers' sizes
_DATA_DIRECTORY_SIZE = 8  # DATA_DIRECTORY.size
_DIRECTORY_SIZE_FIELD = 4  # DATA_DIRECTORY Size (VirtualAddress is at 0)
_RESOURCE_DIRECTORY_INDEX = 2  # IMAGE_DIRECTORY_ENTRY_RESOURCE
_SECTION_SIZE = 40  # SECTION_HEADER.size
_SECTION_FIELDS = (8, 12, 16, 20)  # Misc_VirtualSize VirtualAddress SizeOfRawData PointerToRawData
_DIR_SIZE = 16  # RESOURCE_DIRECTORY.size
_NAMED_ENTRIES, _ID_ENTRIES = 12, 14  # RESOURCE_DIRECTORY NumberOfNamedEntries, NumberOfIdEntries
_ENTRY_SIZE = 8  # RESOURCE_DIRECTORY_ENTRY.size (Name is at 0)
_ENTRY_TARGET = 4  # RESOURCE_DIRECTORY_ENTRY OffsetToData
_DATA_SIZE = 16  # RESOURCE_DATA_ENTRY.size (OffsetToData, an RVA, is at 0)
_DATA_ENTRY_SIZE_FIELD = 4  # RESOURCE_DATA_ENTRY Size
_NAME_LENGTH_SIZE = 2  # RESOURCE_DIR_STRING.size (Length)
_HIGH = 0x80000000
_HEAD_SIZE = 4096


def _u16(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "little")


def _u32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


class PEFormatError(ValueError):
    """The input is not a PE image, or its headers or resource tree are truncated or corrupt."""


class _Source:
    """Random access to the image: bytes in memory or an open file."""

    def __init__(self, data: "bytes | None", handle: "BinaryIO | None", size: int, label: str):
        self._data = data
        self._handle = handle
        self.size = size
        self.label = label
        # The headers (and often the top of the resource tree) in one system call.
        self._head = handle.read(_HEAD_SIZE) if handle is not None else b""

    def read(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise PEFormatError(
                f"{self.label}: truncated: {what} needs bytes {offset}..{offset + length} "
                f"but the file has {self.size}"
            )
        if self._data is not None:
            return self._data[offset : offset + length]
        if offset + length <= len(self._head):
            return self._head[offset : offset + length]
        assert self._handle is not None
        self._handle.seek(offset)
        chunk = self._handle.read(length)
        if len(chunk) != length:
            raise PEFormatError(f"{self.label}: truncated while reading {what}")
        return chunk


class _Image:
    """The parsed headers and the resource directory's location."""

    def __init__(self, source: _Source):
        self.source = source
        head = source.read(0, min(source.size, _DOS_HEADER_SIZE), "the DOS header")
        if len(head) < _DOS_HEADER_SIZE or head[:2] != b"MZ":
            raise PEFormatError(
                f"{source.label}: not a PE file (no 'MZ' DOS header); expected a Windows "
                ".exe or .dll"
            )
        pe_offset = _u32(head, _E_LFANEW)
        if pe_offset + _PE_HEADERS_SIZE > source.size:
            raise PEFormatError(
                f"{source.label}: not a PE file (e_lfanew={pe_offset} points past the file)"
            )
        coff = source.read(pe_offset, _PE_HEADERS_SIZE, "the PE signature and COFF header")
        if coff[:4] != b"PE\0\0":
            raise PEFormatError(
                f"{source.label}: not a PE file (no 'PE\\0\\0' signature at {pe_offset}); "
                "an MZ-only DOS or NE/LE program is not supported"
            )
        sections = _u16(coff, _NUMBER_OF_SECTIONS)
        optional_size = _u16(coff, _SIZE_OF_OPTIONAL_HEADER)
        optional_offset = pe_offset + _PE_HEADERS_SIZE
        optional = source.read(optional_offset, optional_size, "the optional header")
        if optional_size < 2:
            raise PEFormatError(f"{source.label}: optional header is missing")
        magic = _u16(optional, _MAGIC)
        count_at = _RVA_COUNT.get(magic)
        if count_at is None:
            raise PEFormatError(
                f"{source.label}: unknown optional header magic {magic:#x}; expected 0x10b "
                "(PE32) or 0x20b (PE32+)"
            )
        self.is_pe32_plus = magic == _PE32_PLUS
        if optional_size < _DIRECTORIES[magic]:
            raise PEFormatError(f"{source.label}: optional header is truncated")
        rva_count = _u32(optional, count_at)
        self.resource_rva = 0
        self.resource_size = 0
        directory_at = _DIRECTORIES[magic] + _DATA_DIRECTORY_SIZE * _RESOURCE_DIRECTORY_INDEX
        if (
            rva_count > _RESOURCE_DIRECTORY_INDEX
            and directory_at + _DATA_DIRECTORY_SIZE <= optional_size
        ):
            self.resource_rva = _u32(optional, directory_at)
            self.resource_size = _u32(optional, directory_at + _DIRECTORY_SIZE_FIELD)
        table = source.read(
            optional_offset + optional_size, _SECTION_SIZE * sections, "the section table"
        )
        self.sections = [
            tuple(_u32(table, _SECTION_SIZE * index + field) for field in _SECTION_FIELDS)
            for index in range(sections)
        ]

    def rva_to_offset(self, rva: int, length: int, what: str) -> int:
        """File offset of ``length`` bytes at ``rva``, which must lie in one section's file data."""
        for virtual_size, address, raw_size, pointer in self.sections:
            extent = max(virtual_size, raw_size) if virtual_size else raw_size
            if address <= rva < address + extent:
                if rva + length > address + raw_size:
                    raise PEFormatError(
                        f"{self.source.label}: {what} (RVA {rva:#x}, {length} bytes) runs past "
                        "its section's data in the file"
                    )
                return pointer + (rva - address)
        raise PEFormatError(f"{self.source.label}: {what} (RVA {rva:#x}) is not inside any section")


def _open(source: "str | os.PathLike[str] | bytes") -> "tuple[_Source, BinaryIO | None]":
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _Source(data, None, len(data), "<bytes>"), None
    path = os.fspath(source)
    handle = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the caller
    size = os.fstat(handle.fileno()).st_size
    return _Source(None, handle, size, repr(path)), handle


class _Walker:
    """Reads the resource directory tree below the image's resource RVA."""

    def __init__(self, image: _Image):
        self.image = image
        self.label = image.source.label
        self.base = image.resource_rva

    def directory(self, offset: int, level: int) -> list[tuple[int | str, int, bool]]:
        """Entries of the directory at ``offset``: (id or name, target offset, is_directory)."""
        what = f"resource directory (level {level}) at offset {offset:#x}"
        header = self._read(offset, _DIR_SIZE, what)
        count = _u16(header, _NAMED_ENTRIES) + _u16(header, _ID_ENTRIES)
        body = self._read(offset + _DIR_SIZE, _ENTRY_SIZE * count, what + " entries")
        entries: list[tuple[int | str, int, bool]] = []
        for index in range(count):
            key = _u32(body, _ENTRY_SIZE * index)
            target = _u32(body, _ENTRY_SIZE * index + _ENTRY_TARGET)
            name: int | str
            if key & _HIGH:
                name = self.name(key & ~_HIGH)
            else:
                if key > 0xFFFF:
                    raise PEFormatError(
                        f"{self.label}: corrupt {what}: entry #{index} has id {key:#x} "
                        "(ids are 16-bit)"
                    )
                name = key
            entries.append((name, target & ~_HIGH, bool(target & _HIGH)))
        return entries

    def name(self, offset: int) -> str:
        length = _u16(self._read(offset, _NAME_LENGTH_SIZE, "resource name length"), 0)
        raw = self._read(offset + _NAME_LENGTH_SIZE, 2 * length, "resource name")
        return raw.decode("utf-16-le", "surrogatepass")

    def data(self, offset: int) -> bytes:
        entry = self._read(offset, _DATA_SIZE, "resource data entry")
        rva, size = _u32(entry, 0), _u32(entry, _DATA_ENTRY_SIZE_FIELD)
        location = self.image.rva_to_offset(rva, size, "resource data")
        return self.image.source.read(location, size, f"resource data at RVA {rva:#x}")

    def _read(self, offset: int, length: int, what: str) -> bytes:
        if offset + length > self.image.resource_size:
            raise PEFormatError(
                f"{self.label}: corrupt resource directory: {what} runs past the resource "
                f"directory's size ({self.image.resource_size} bytes)"
            )
        location = self.image.rva_to_offset(self.base + offset, length, what)
        return self.image.source.read(location, length, what)


def _walk(image: _Image) -> _Walker | None:
    if not image.resource_rva or not image.resource_size:
        return None
    return _Walker(image)


def _expect(walker: _Walker, entry: tuple[int | str, int, bool], directory: bool) -> int:
    name, target, is_directory = entry
    if is_directory != directory:
        kind = "a subdirectory" if directory else "a data entry"
        raise PEFormatError(
            f"{walker.label}: corrupt resource directory: entry {name!r} should point to {kind}"
        )
    return target


def read_resources(source: str | os.PathLike[str] | bytes) -> dict[ResourceKey, bytes]:
    """Return every resource of a PE image as ``{(type, name, language): data}``.

    ``source`` is a path or the image's bytes. An image without a resource directory gives
    ``{}``. Raises :class:`PEFormatError` if it is not a PE file or is truncated or corrupt.
    """
    reader, handle = _open(source)
    try:
        walker = _walk(_Image(reader))
        found: dict[ResourceKey, bytes] = {}
        if walker is None:
            return found
        for type_entry in walker.directory(0, 1):
            for name_entry in walker.directory(_expect(walker, type_entry, True), 2):
                for lang_entry in walker.directory(_expect(walker, name_entry, True), 3):
                    language = lang_entry[0]
                    if not isinstance(language, int):
                        raise PEFormatError(
                            f"{walker.label}: corrupt resource directory: language "
                            f"{language!r} must be a numeric id"
                        )
                    target = _expect(walker, lang_entry, False)
                    found[(type_entry[0], name_entry[0], language)] = walker.data(target)
        return found
    finally:
        if handle is not None:
            handle.close()


def find_resource(
    source: str | os.PathLike[str] | bytes,
    type_: int | str,
    name: int | str,
    language: int | None = None,
) -> bytes | None:
    """Return one resource's data, or ``None`` if the image does not have it.

    String types and names match case-insensitively (upper-cased, as Windows does). With
    ``language=None`` the language-neutral entry (0) is preferred, else the first listed.
    Only the directories on the way are read. Raises :class:`PEFormatError` for a file
    that is not a PE image or whose headers or directories on that path are corrupt.
    """
    reader, handle = _open(source)
    try:
        walker = _walk(_Image(reader))
        if walker is None:
            return None
        offset = 0
        for level, wanted in ((1, type_), (2, name)):
            entry = _pick(walker.directory(offset, level), wanted)
            if entry is None:
                return None
            offset = _expect(walker, entry, True)
        entries = walker.directory(offset, 3)
        chosen = None
        if language is None:
            chosen = _pick(entries, 0) or (entries[0] if entries else None)
        else:
            chosen = _pick(entries, language)
        if chosen is None:
            return None
        return walker.data(_expect(walker, chosen, False))
    finally:
        if handle is not None:
            handle.close()


def _pick(
    entries: list[tuple[int | str, int, bool]], wanted: int | str
) -> tuple[int | str, int, bool] | None:
    if isinstance(wanted, str):
        wanted = wanted.upper()
        for entry in entries:
            if isinstance(entry[0], str) and entry[0].upper() == wanted:
                return entry
        return None
    for entry in entries:
        if entry[0] == wanted:
            return entry
    return None
