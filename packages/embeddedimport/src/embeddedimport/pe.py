"""The PE (Portable Executable) header tables, and a small resource reader over them.

:class:`Structure` tables (``DOS_HEADER``, ``FILE_HEADER``, ``OPTIONAL_HEADER``,
``SECTION_HEADER``, the resource structures...) are the one description of the PE header
layout in this repository: this reader and exepy's image editor both take every header
offset from them. They live here because embeddedimport is standard-library only and
may not import exepy, while exepy already depends on embeddedimport.

The reader finds what the Windows loader finds. It reads PE32 and PE32+ images from a
path or from bytes, standard library only, and reads only the headers and the parts of the
resource section it walks, so checking a large executable for one resource costs a few
small reads.

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

__all__ = [
    "DATA_DIRECTORY",
    "DEBUG_DIRECTORY",
    "DOS_HEADER",
    "FILE_HEADER",
    "IMAGE_DIRECTORY_ENTRY_DEBUG",
    "IMAGE_DIRECTORY_ENTRY_RESOURCE",
    "IMAGE_DIRECTORY_ENTRY_SECURITY",
    "NT_HEADERS",
    "OPTIONAL_HEADER",
    "OPTIONAL_HEADER64",
    "RESOURCE_DATA_ENTRY",
    "RESOURCE_DIRECTORY",
    "RESOURCE_DIRECTORY_ENTRY",
    "RESOURCE_DIR_STRING",
    "SECTION_HEADER",
    "PEFormatError",
    "ResourceKey",
    "Structure",
    "find_resource",
    "optional_header",
    "read_resources",
]

ResourceKey = tuple[int | str, int | str, int]
"""``(type, name, language)``: ids are ``int``, named entries ``str``."""

_SIZES = {"B": 1, "H": 2, "I": 4, "Q": 8}
_HIGH = 0x80000000  # in a resource entry: a name (not an id) / a subdirectory (not data)
_HEAD_SIZE = 4096


class PEFormatError(ValueError):
    """The input is not a PE image, or its headers or resource tree are truncated or corrupt."""


class Structure:
    """A PE structure as a declarative table of its fields, little-endian.

    Written the way pefile writes its ``__IMAGE_*_format__`` tables: ``"H,Magic"`` is a
    uint16 named Magic, ``"8s,Name"`` eight raw bytes. The offsets, the size and a
    :mod:`struct` format all come from the table, so no reader or writer (here, or in
    exepy, which edits images with these same tables) counts a header offset by hand.
    """

    def __init__(self, name: str, fields: "tuple[str, ...]") -> None:
        self.name = name
        self.fields = fields
        # Built on every bundled start-up: one cheap pass, no struct.
        self._at: dict[str, tuple[int, int]] = {}
        position = 0
        for spec in fields:
            code, _, field = spec.partition(",")
            size = _SIZES.get(code) or int(code[:-1])
            self._at[field] = (position, size)
            position += size
        self.size = position
        """Bytes the structure occupies."""

    @property
    def format(self) -> str:
        """The same layout as a :mod:`struct` format string (``"<IIHHHH"``)."""
        return "<" + "".join(spec.partition(",")[0] for spec in self.fields)

    def __repr__(self) -> str:
        return f"<Structure {self.name} ({self.size} bytes)>"

    def offset(self, field: str) -> int:
        """Offset of ``field`` from the start of the structure."""
        return self._at[field][0]

    def get(self, data: "bytes | bytearray", base: int, field: str) -> int:
        """The unsigned value of ``field`` of the structure at ``base`` in ``data``."""
        at, size = self._at[field]
        raw = data[base + at : base + at + size]
        if len(raw) != size:
            raise PEFormatError(f"truncated: {self.name}.{field} runs past the end of the data")
        return int.from_bytes(raw, "little")

    def raw(self, data: "bytes | bytearray", base: int, field: str) -> bytes:
        """The bytes of ``field`` (for byte-string fields such as a section's Name)."""
        at, size = self._at[field]
        return bytes(data[base + at : base + at + size])

    def put(self, buffer: bytearray, base: int, field: str, value: "int | bytes") -> None:
        """Store ``value`` in ``field`` of the structure at ``base`` (bytes are NUL-padded)."""
        at, size = self._at[field]
        if isinstance(value, bytes):
            if len(value) > size:
                raise ValueError(f"{self.name}.{field} holds {size} bytes, got {len(value)}")
            encoded = value.ljust(size, b"\0")
        else:
            encoded = value.to_bytes(size, "little")
        buffer[base + at : base + at + size] = encoded


# The tables, field names as in pefile (and winnt.h).
DOS_HEADER = Structure(
    "IMAGE_DOS_HEADER",
    (
        "H,e_magic", "H,e_cblp", "H,e_cp", "H,e_crlc", "H,e_cparhdr", "H,e_minalloc",
        "H,e_maxalloc", "H,e_ss", "H,e_sp", "H,e_csum", "H,e_ip", "H,e_cs", "H,e_lfarlc",
        "H,e_ovno", "8s,e_res", "H,e_oemid", "H,e_oeminfo", "20s,e_res2", "I,e_lfanew",
    ),
)  # fmt: skip
NT_HEADERS = Structure("IMAGE_NT_HEADERS", ("I,Signature",))
"""The ``PE\\0\\0`` signature at ``e_lfanew``; the file header follows it."""
FILE_HEADER = Structure(
    "IMAGE_FILE_HEADER",
    (
        "H,Machine", "H,NumberOfSections", "I,TimeDateStamp", "I,PointerToSymbolTable",
        "I,NumberOfSymbols", "H,SizeOfOptionalHeader", "H,Characteristics",
    ),
)  # fmt: skip
_OPTIONAL_START = (
    "H,Magic", "B,MajorLinkerVersion", "B,MinorLinkerVersion", "I,SizeOfCode",
    "I,SizeOfInitializedData", "I,SizeOfUninitializedData", "I,AddressOfEntryPoint",
    "I,BaseOfCode",
)  # fmt: skip
_OPTIONAL_MIDDLE = (
    "I,SectionAlignment", "I,FileAlignment", "H,MajorOperatingSystemVersion",
    "H,MinorOperatingSystemVersion", "H,MajorImageVersion", "H,MinorImageVersion",
    "H,MajorSubsystemVersion", "H,MinorSubsystemVersion", "I,Reserved1", "I,SizeOfImage",
    "I,SizeOfHeaders", "I,CheckSum", "H,Subsystem", "H,DllCharacteristics",
)  # fmt: skip
OPTIONAL_HEADER = Structure(
    "IMAGE_OPTIONAL_HEADER",
    (
        *_OPTIONAL_START, "I,BaseOfData", "I,ImageBase", *_OPTIONAL_MIDDLE,
        "I,SizeOfStackReserve", "I,SizeOfStackCommit", "I,SizeOfHeapReserve",
        "I,SizeOfHeapCommit", "I,LoaderFlags", "I,NumberOfRvaAndSizes",
    ),
)  # fmt: skip
"""PE32 (Magic 0x10b); the data directories follow it."""
OPTIONAL_HEADER64 = Structure(
    "IMAGE_OPTIONAL_HEADER64",
    (
        *_OPTIONAL_START, "Q,ImageBase", *_OPTIONAL_MIDDLE,
        "Q,SizeOfStackReserve", "Q,SizeOfStackCommit", "Q,SizeOfHeapReserve",
        "Q,SizeOfHeapCommit", "I,LoaderFlags", "I,NumberOfRvaAndSizes",
    ),
)  # fmt: skip
"""PE32+ (Magic 0x20b); the data directories follow it."""
DATA_DIRECTORY = Structure("IMAGE_DATA_DIRECTORY", ("I,VirtualAddress", "I,Size"))
SECTION_HEADER = Structure(
    "IMAGE_SECTION_HEADER",
    (
        "8s,Name", "I,Misc_VirtualSize", "I,VirtualAddress", "I,SizeOfRawData",
        "I,PointerToRawData", "I,PointerToRelocations", "I,PointerToLinenumbers",
        "H,NumberOfRelocations", "H,NumberOfLinenumbers", "I,Characteristics",
    ),
)  # fmt: skip
DEBUG_DIRECTORY = Structure(
    "IMAGE_DEBUG_DIRECTORY",
    (
        "I,Characteristics", "I,TimeDateStamp", "H,MajorVersion", "H,MinorVersion", "I,Type",
        "I,SizeOfData", "I,AddressOfRawData", "I,PointerToRawData",
    ),
)  # fmt: skip
RESOURCE_DIRECTORY = Structure(
    "IMAGE_RESOURCE_DIRECTORY",
    (
        "I,Characteristics", "I,TimeDateStamp", "H,MajorVersion", "H,MinorVersion",
        "H,NumberOfNamedEntries", "H,NumberOfIdEntries",
    ),
)  # fmt: skip
"""A resource directory table; its entries follow it."""
RESOURCE_DIRECTORY_ENTRY = Structure("IMAGE_RESOURCE_DIRECTORY_ENTRY", ("I,Name", "I,OffsetToData"))
"""Name: an id, or (high bit) a string's offset; OffsetToData: (high bit) a subdirectory."""
RESOURCE_DATA_ENTRY = Structure(
    "IMAGE_RESOURCE_DATA_ENTRY", ("I,OffsetToData", "I,Size", "I,CodePage", "I,Reserved")
)
"""OffsetToData is an RVA."""
RESOURCE_DIR_STRING = Structure("IMAGE_RESOURCE_DIR_STRING_U", ("H,Length",))
"""A resource name: Length UTF-16 code units follow, no terminator."""

IMAGE_DIRECTORY_ENTRY_SECURITY = 4
IMAGE_DIRECTORY_ENTRY_RESOURCE = 2
IMAGE_DIRECTORY_ENTRY_DEBUG = 6
_MAGICS = {0x10B: OPTIONAL_HEADER, 0x20B: OPTIONAL_HEADER64}


def optional_header(magic: int) -> "Structure | None":
    """The optional header's table for ``Magic`` (0x10b PE32, 0x20b PE32+), else ``None``."""
    return _MAGICS.get(magic)


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
        dos = DOS_HEADER
        head = source.read(0, min(source.size, dos.size), "the DOS header")
        if len(head) < dos.size or head[:2] != b"MZ":
            raise PEFormatError(
                f"{source.label}: not a PE file (no 'MZ' DOS header); expected a Windows "
                ".exe or .dll"
            )
        pe_offset = dos.get(head, 0, "e_lfanew")
        headers_size = NT_HEADERS.size + FILE_HEADER.size
        if pe_offset + headers_size > source.size:
            raise PEFormatError(
                f"{source.label}: not a PE file (e_lfanew={pe_offset} points past the file)"
            )
        coff = source.read(pe_offset, headers_size, "the PE signature and COFF header")
        if coff[: NT_HEADERS.size] != b"PE\0\0":
            raise PEFormatError(
                f"{source.label}: not a PE file (no 'PE\\0\\0' signature at {pe_offset}); "
                "an MZ-only DOS or NE/LE program is not supported"
            )
        at = NT_HEADERS.size
        sections = FILE_HEADER.get(coff, at, "NumberOfSections")
        optional_size = FILE_HEADER.get(coff, at, "SizeOfOptionalHeader")
        optional_offset = pe_offset + headers_size
        optional = source.read(optional_offset, optional_size, "the optional header")
        if optional_size < 2:
            raise PEFormatError(f"{source.label}: optional header is missing")
        magic = OPTIONAL_HEADER.get(optional, 0, "Magic")
        table = optional_header(magic)
        if table is None:
            raise PEFormatError(
                f"{source.label}: unknown optional header magic {magic:#x}; expected 0x10b "
                "(PE32) or 0x20b (PE32+)"
            )
        self.is_pe32_plus = table is OPTIONAL_HEADER64
        if optional_size < table.size:
            raise PEFormatError(f"{source.label}: optional header is truncated")
        rva_count = table.get(optional, 0, "NumberOfRvaAndSizes")
        self.resource_rva = 0
        self.resource_size = 0
        directory_at = table.size + DATA_DIRECTORY.size * IMAGE_DIRECTORY_ENTRY_RESOURCE
        if (
            rva_count > IMAGE_DIRECTORY_ENTRY_RESOURCE
            and directory_at + DATA_DIRECTORY.size <= optional_size
        ):
            self.resource_rva = DATA_DIRECTORY.get(optional, directory_at, "VirtualAddress")
            self.resource_size = DATA_DIRECTORY.get(optional, directory_at, "Size")
        entry = SECTION_HEADER
        headers = source.read(
            optional_offset + optional_size, entry.size * sections, "the section table"
        )
        self.sections = [
            tuple(
                entry.get(headers, entry.size * index, field)
                for field in (
                    "Misc_VirtualSize",
                    "VirtualAddress",
                    "SizeOfRawData",
                    "PointerToRawData",
                )
            )
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
        table, entry = RESOURCE_DIRECTORY, RESOURCE_DIRECTORY_ENTRY
        header = self._read(offset, table.size, what)
        count = table.get(header, 0, "NumberOfNamedEntries") + table.get(
            header, 0, "NumberOfIdEntries"
        )
        body = self._read(offset + table.size, entry.size * count, what + " entries")
        entries: list[tuple[int | str, int, bool]] = []
        for index in range(count):
            key = entry.get(body, entry.size * index, "Name")
            target = entry.get(body, entry.size * index, "OffsetToData")
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
        string = RESOURCE_DIR_STRING
        length = string.get(self._read(offset, string.size, "resource name length"), 0, "Length")
        raw = self._read(offset + string.size, 2 * length, "resource name")
        return raw.decode("utf-16-le", "surrogatepass")

    def data(self, offset: int) -> bytes:
        table = RESOURCE_DATA_ENTRY
        entry = self._read(offset, table.size, "resource data entry")
        rva, size = table.get(entry, 0, "OffsetToData"), table.get(entry, 0, "Size")
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
