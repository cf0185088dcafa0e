"""The PE (Portable Executable) header layout as declarative tables, pefile-style.

Each :class:`Structure` is one table (``DOS_HEADER``, ``FILE_HEADER``, ``OPTIONAL_HEADER``,
``SECTION_HEADER``, the resource structures...) with pefile's field names. They are the
one description of the PE header layout in this repository: exepy's image editor and
resource-tree writer take every header offset from them, and the tests check
:mod:`embeddedimport.pe`'s start-up reader (which cannot afford to load this module: see
there) and these tables against pefile's own ``__IMAGE_*_format__`` tables. They live in
embeddedimport because it is standard-library only and may not import exepy, while exepy
depends on embeddedimport.
"""

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
    "Structure",
    "StructureError",
    "optional_header",
]

_SIZES = {"B": 1, "H": 2, "I": 4, "Q": 8}


class StructureError(ValueError):
    """A field read past the end of the data, or a value that does not fit its field."""


class Structure:
    """A PE structure as a declarative table of its fields, little-endian.

    Written the way pefile writes its ``__IMAGE_*_format__`` tables: ``"H,Magic"`` is a
    uint16 named Magic, ``"8s,Name"`` eight raw bytes; here the fields of one structure are
    one string, in order, separated by spaces. The offsets, the size and a :mod:`struct`
    format all come from the table, so no code that uses it counts a header offset by hand.
    """

    __slots__ = ("_at", "_size", "_spec", "name")

    def __init__(self, name: str, fields: str) -> None:
        self.name = name
        self._spec = fields  # offsets are worked out on first use
        self._at: dict[str, tuple[int, int]] | None = None
        self._size = 0

    @property
    def fields(self) -> "tuple[str, ...]":
        """The table as pefile writes it: ``("H,Magic", "B,MajorLinkerVersion", ...)``."""
        return tuple(self._spec.split())

    def _table(self) -> "dict[str, tuple[int, int]]":
        if self._at is None:
            at: dict[str, tuple[int, int]] = {}
            position = 0
            for spec in self._spec.split():
                code, _, field = spec.partition(",")
                size = _SIZES.get(code) or int(code[:-1])
                at[field] = (position, size)
                position += size
            self._at, self._size = at, position
        return self._at

    @property
    def size(self) -> int:
        """Bytes the structure occupies."""
        self._table()
        return self._size

    @property
    def format(self) -> str:
        """The same layout as a :mod:`struct` format string (``"<IIHHHH"``)."""
        return "<" + "".join(spec.partition(",")[0] for spec in self._spec.split())

    def __repr__(self) -> str:
        return f"<Structure {self.name} ({self.size} bytes)>"

    def offset(self, field: str) -> int:
        """Offset of ``field`` from the start of the structure."""
        return self._table()[field][0]

    def get(self, data: "bytes | bytearray", base: int, field: str) -> int:
        """The unsigned value of ``field`` of the structure at ``base`` in ``data``."""
        at, size = self._table()[field]
        raw = data[base + at : base + at + size]
        if len(raw) != size:
            raise StructureError(f"truncated: {self.name}.{field} runs past the end of the data")
        return int.from_bytes(raw, "little")

    def raw(self, data: "bytes | bytearray", base: int, field: str) -> bytes:
        """The bytes of ``field`` (for byte-string fields such as a section's Name)."""
        at, size = self._table()[field]
        return bytes(data[base + at : base + at + size])

    def put(self, buffer: bytearray, base: int, field: str, value: "int | bytes") -> None:
        """Store ``value`` in ``field`` of the structure at ``base`` (bytes are NUL-padded)."""
        at, size = self._table()[field]
        if isinstance(value, bytes):
            if len(value) > size:
                raise StructureError(f"{self.name}.{field} holds {size} bytes, got {len(value)}")
            encoded = value.ljust(size, b"\0")
        else:
            encoded = value.to_bytes(size, "little")
        buffer[base + at : base + at + size] = encoded


# The tables, field names as in pefile (and winnt.h), one "code,Field" per field.
DOS_HEADER = Structure(
    "IMAGE_DOS_HEADER",
    "H,e_magic H,e_cblp H,e_cp H,e_crlc H,e_cparhdr H,e_minalloc H,e_maxalloc H,e_ss "
    "H,e_sp H,e_csum H,e_ip H,e_cs H,e_lfarlc H,e_ovno 8s,e_res H,e_oemid H,e_oeminfo "
    "20s,e_res2 I,e_lfanew",
)
NT_HEADERS = Structure("IMAGE_NT_HEADERS", "I,Signature")
"""The ``PE\\0\\0`` signature at ``e_lfanew``; the file header follows it."""
FILE_HEADER = Structure(
    "IMAGE_FILE_HEADER",
    "H,Machine H,NumberOfSections I,TimeDateStamp I,PointerToSymbolTable I,NumberOfSymbols "
    "H,SizeOfOptionalHeader H,Characteristics",
)
_OPTIONAL_START = (
    "H,Magic B,MajorLinkerVersion B,MinorLinkerVersion I,SizeOfCode I,SizeOfInitializedData "
    "I,SizeOfUninitializedData I,AddressOfEntryPoint I,BaseOfCode "
)
_OPTIONAL_MIDDLE = (
    " I,SectionAlignment I,FileAlignment H,MajorOperatingSystemVersion "
    "H,MinorOperatingSystemVersion H,MajorImageVersion H,MinorImageVersion "
    "H,MajorSubsystemVersion H,MinorSubsystemVersion I,Reserved1 I,SizeOfImage "
    "I,SizeOfHeaders I,CheckSum H,Subsystem H,DllCharacteristics "
)
OPTIONAL_HEADER = Structure(
    "IMAGE_OPTIONAL_HEADER",
    _OPTIONAL_START
    + "I,BaseOfData I,ImageBase"
    + _OPTIONAL_MIDDLE
    + "I,SizeOfStackReserve I,SizeOfStackCommit I,SizeOfHeapReserve I,SizeOfHeapCommit "
    "I,LoaderFlags I,NumberOfRvaAndSizes",
)
"""PE32 (Magic 0x10b); the data directories follow it."""
OPTIONAL_HEADER64 = Structure(
    "IMAGE_OPTIONAL_HEADER64",
    _OPTIONAL_START
    + "Q,ImageBase"
    + _OPTIONAL_MIDDLE
    + "Q,SizeOfStackReserve Q,SizeOfStackCommit Q,SizeOfHeapReserve Q,SizeOfHeapCommit "
    "I,LoaderFlags I,NumberOfRvaAndSizes",
)
"""PE32+ (Magic 0x20b); the data directories follow it."""
DATA_DIRECTORY = Structure("IMAGE_DATA_DIRECTORY", "I,VirtualAddress I,Size")
SECTION_HEADER = Structure(
    "IMAGE_SECTION_HEADER",
    "8s,Name I,Misc_VirtualSize I,VirtualAddress I,SizeOfRawData I,PointerToRawData "
    "I,PointerToRelocations I,PointerToLinenumbers H,NumberOfRelocations "
    "H,NumberOfLinenumbers I,Characteristics",
)
DEBUG_DIRECTORY = Structure(
    "IMAGE_DEBUG_DIRECTORY",
    "I,Characteristics I,TimeDateStamp H,MajorVersion H,MinorVersion I,Type I,SizeOfData "
    "I,AddressOfRawData I,PointerToRawData",
)
RESOURCE_DIRECTORY = Structure(
    "IMAGE_RESOURCE_DIRECTORY",
    "I,Characteristics I,TimeDateStamp H,MajorVersion H,MinorVersion H,NumberOfNamedEntries "
    "H,NumberOfIdEntries",
)
"""A resource directory table; its entries follow it."""
RESOURCE_DIRECTORY_ENTRY = Structure("IMAGE_RESOURCE_DIRECTORY_ENTRY", "I,Name I,OffsetToData")
"""Name: an id, or (high bit) a string's offset; OffsetToData: (high bit) a subdirectory."""
RESOURCE_DATA_ENTRY = Structure(
    "IMAGE_RESOURCE_DATA_ENTRY", "I,OffsetToData I,Size I,CodePage I,Reserved"
)
"""OffsetToData is an RVA."""
RESOURCE_DIR_STRING = Structure("IMAGE_RESOURCE_DIR_STRING_U", "H,Length")
"""A resource name: Length UTF-16 code units follow, no terminator."""

IMAGE_DIRECTORY_ENTRY_SECURITY = 4
IMAGE_DIRECTORY_ENTRY_RESOURCE = 2
IMAGE_DIRECTORY_ENTRY_DEBUG = 6
_MAGICS = {0x10B: OPTIONAL_HEADER, 0x20B: OPTIONAL_HEADER64}


def optional_header(magic: int) -> "Structure | None":
    """The optional header's table for ``Magic`` (0x10b PE32, 0x20b PE32+), else ``None``."""
    return _MAGICS.get(magic)
