"""The layout of a PE image and the one edit exepy makes to it: a new resource directory.

:func:`read_layout` parses the headers (with pefile) into a small immutable description;
:func:`replace_resources` is a pure function from the original bytes to the new ones. No
existing section moves, so images without relocations stay valid. The resource directory
is rewritten where it is when it fits (or when its section is the last one, which can
grow), otherwise it goes to a new last section. Data after the last section (the overlay:
COFF symbols, appended zips, installers' payloads) is kept byte for byte and shifted, and
the pointers that address it by file offset (the COFF symbol table, debug data) shift with
it. The checksum is recomputed. An Authenticode signature cannot survive any edit, so it
is removed, with a note for the caller to re-sign.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import pefile

from exepy import restree
from exepy.restree import ResourceKey

IMAGE_DIRECTORY_ENTRY_RESOURCE = 2
IMAGE_DIRECTORY_ENTRY_SECURITY = 4
IMAGE_DIRECTORY_ENTRY_DEBUG = 6
IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY = 0x0080
IMAGE_SCN_CNT_INITIALIZED_DATA = 0x00000040
IMAGE_SCN_MEM_READ = 0x40000000
IMAGE_SUBSYSTEM_WINDOWS_GUI = 2
IMAGE_SUBSYSTEM_WINDOWS_CUI = 3
_SECTION_HEADER = struct.Struct("<8sIIIIIIHHI")
_DEBUG_ENTRY_SIZE = 28
# Offsets inside the optional header (the same for PE32 and PE32+ up to the subsystem).
_OPT_SIZE_OF_INITIALIZED_DATA = 8
_OPT_SIZE_OF_IMAGE = 56
_OPT_CHECKSUM = 64
_OPT_SUBSYSTEM = 68
_OPT_DLL_CHARACTERISTICS = 70
_MACHINES = {0x14C: "x86", 0x8664: "x64", 0xAA64: "ARM64", 0x1C4: "ARM"}


class PEError(ValueError):
    """The file is not a PE image exepy can edit; the message says why and what would do."""


@dataclass(frozen=True)
class Section:
    """One section header, with the file offset of the header itself."""

    name: bytes
    virtual_address: int
    virtual_size: int
    raw_pointer: int
    raw_size: int
    characteristics: int
    header_offset: int

    @property
    def mapped_size(self) -> int:
        """Bytes the loader maps (a zero VirtualSize means SizeOfRawData)."""
        return self.virtual_size or self.raw_size

    @property
    def display_name(self) -> str:
        """The name as text, for messages."""
        return self.name.rstrip(b"\0").decode("latin-1")


@dataclass(frozen=True)
class Layout:
    """What exepy needs to know about a PE image's headers."""

    machine: int
    pe32_plus: bool
    optional_offset: int
    section_table_offset: int
    file_alignment: int
    section_alignment: int
    size_of_headers: int
    size_of_image: int
    subsystem: int
    directories: tuple[tuple[int, int], ...]
    directory_offset: int
    symbol_table_pointer: int
    sections: tuple[Section, ...]
    raw_end: int
    file_size: int

    @property
    def machine_name(self) -> str:
        """x86, x64, ARM64, ... or the hexadecimal machine number."""
        return _MACHINES.get(self.machine, f"machine {self.machine:#x}")

    @property
    def checksum_offset(self) -> int:
        """File offset of the CheckSum field."""
        return self.optional_offset + _OPT_CHECKSUM

    def directory(self, index: int) -> tuple[int, int]:
        """(VirtualAddress, Size) of data directory *index*, (0, 0) when absent."""
        return self.directories[index] if index < len(self.directories) else (0, 0)

    def section_for_rva(self, rva: int) -> Section | None:
        """The section whose mapped range holds *rva*."""
        for section in self.sections:
            if section.virtual_address <= rva < section.virtual_address + section.mapped_size:
                return section
        return None


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def read_layout(data: bytes) -> Layout:
    """Parse the headers of *data*; raise :class:`PEError` naming what is wrong."""
    if len(data) < 64 or data[:2] != b"MZ":
        raise PEError("not a PE file: it does not start with the 'MZ' DOS header")
    try:
        pe = pefile.PE(data=data, fast_load=True)
    except pefile.PEFormatError as exc:
        raise PEError(f"not a valid PE file: {exc.value}") from None
    opt = pe.OPTIONAL_HEADER
    if opt is None or not hasattr(opt, "Magic"):
        raise PEError("not a valid PE file: the optional header is missing or truncated")
    if opt.Magic not in (0x10B, 0x20B):
        raise PEError(f"unsupported optional header magic {opt.Magic:#x} (expected PE32 or PE32+)")
    pe32_plus = opt.Magic == 0x20B
    file_alignment = opt.FileAlignment
    section_alignment = opt.SectionAlignment
    for what, value in (("FileAlignment", file_alignment), ("SectionAlignment", section_alignment)):
        if value <= 0 or value & (value - 1):
            raise PEError(f"corrupt optional header: {what} {value:#x} is not a power of two")
    optional_offset = opt.get_file_offset()
    section_table_offset = optional_offset + pe.FILE_HEADER.SizeOfOptionalHeader
    count = pe.FILE_HEADER.NumberOfSections
    if section_table_offset + count * _SECTION_HEADER.size > len(data):
        raise PEError("truncated file: the section table runs past the end of the file")
    if len(pe.sections) != count:
        raise PEError(f"corrupt section table: {count} sections declared, {len(pe.sections)} read")
    sections = []
    for index in range(count):
        header_offset = section_table_offset + index * _SECTION_HEADER.size
        name, vsize, va, raw_size, raw_ptr, *_, characteristics = _SECTION_HEADER.unpack_from(
            data, header_offset
        )
        section = Section(name, va, vsize, raw_ptr, raw_size, characteristics, header_offset)
        if raw_size and raw_ptr + raw_size > len(data):
            raise PEError(
                f"truncated file: section {section.display_name!r} needs bytes up to "
                f"{raw_ptr + raw_size:#x} but the file has {len(data):#x}"
            )
        sections.append(section)
    number = opt.NumberOfRvaAndSizes
    directory_offset = optional_offset + (112 if pe32_plus else 96)
    available = max(0, (section_table_offset - directory_offset) // 8)
    directories = tuple(
        struct.unpack_from("<II", data, directory_offset + 8 * i)
        for i in range(min(number, 16, available))
    )
    raw_end = max((s.raw_pointer + s.raw_size for s in sections if s.raw_size), default=0)
    raw_end = max(raw_end, opt.SizeOfHeaders if not sections else 0)
    return Layout(
        machine=pe.FILE_HEADER.Machine,
        pe32_plus=pe32_plus,
        optional_offset=optional_offset,
        section_table_offset=section_table_offset,
        file_alignment=file_alignment,
        section_alignment=section_alignment,
        size_of_headers=opt.SizeOfHeaders,
        size_of_image=opt.SizeOfImage,
        subsystem=opt.Subsystem,
        directories=directories,
        directory_offset=directory_offset,
        symbol_table_pointer=pe.FILE_HEADER.PointerToSymbolTable,
        sections=tuple(sections),
        raw_end=min(raw_end, len(data)),
        file_size=len(data),
    )


def read_rva(data: bytes, layout: Layout, rva: int, size: int) -> bytes:
    """Return *size* bytes of the mapped image at *rva* (zeros past a section's raw data)."""
    section = layout.section_for_rva(rva)
    if section is None or rva + size > section.virtual_address + max(
        section.mapped_size, section.raw_size
    ):
        raise restree.ResourceTreeError(f"{size} bytes at RVA {rva:#x} are not inside one section")
    start = rva - section.virtual_address
    stored = data[
        section.raw_pointer + start : section.raw_pointer + min(start + size, section.raw_size)
    ]
    return stored + bytes(size - len(stored)) if start < section.raw_size else bytes(size)


def read_resources(data: bytes, layout: Layout) -> dict[ResourceKey, bytes]:
    """The resources of the image, strictly parsed; ``{}`` when it has none."""
    rva, size = layout.directory(IMAGE_DIRECTORY_ENTRY_RESOURCE)
    if rva == 0 or size == 0:
        return {}
    try:
        return restree.parse(lambda r, n: read_rva(data, layout, r, n), rva)
    except restree.ResourceTreeError as exc:
        raise PEError(f"corrupt resource directory: {exc}") from None


def pe_checksum(data: bytes | bytearray, checksum_offset: int) -> int:
    """The PE image checksum of *data* (the field at *checksum_offset* counts as zero).

    The one's-complement sum of the file's 16-bit words folded to 16 bits, plus the file
    length (what ``CheckSumMappedFile`` computes).
    """
    buffer = bytearray(data)
    buffer[checksum_offset : checksum_offset + 4] = bytes(4)
    if len(buffer) % 2:
        buffer.append(0)
    words = array("H", buffer)
    if sys.byteorder == "big":
        words.byteswap()
    total = sum(words)
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return (total + len(data)) & 0xFFFFFFFF


@dataclass(frozen=True)
class Placement:
    """Where a new resource directory goes."""

    section: Section | None  # None: a new last section
    capacity: int | None  # bytes available in place; None: unlimited (the last section)


def _last_section(layout: Layout) -> Section | None:
    """The section that is last both in memory and in the file, if one is."""
    if not layout.sections:
        return None
    by_va = max(layout.sections, key=lambda s: s.virtual_address)
    if by_va.raw_size and by_va.raw_pointer + by_va.raw_size != layout.raw_end:
        return None
    return by_va


def choose_placement(layout: Layout, size: int) -> Placement:
    """In place when the current directory owns its section and *size* fits (or can grow)."""
    rva, dir_size = layout.directory(IMAGE_DIRECTORY_ENTRY_RESOURCE)
    section = layout.section_for_rva(rva) if rva else None
    owns = (
        section is not None
        and section.virtual_address == rva
        and dir_size >= section.virtual_size
        and section.raw_size > 0
    )
    if section is None or not owns:
        return Placement(None, None)
    if section is _last_section(layout):
        return Placement(section, None)
    later = [s.virtual_address for s in layout.sections if s.virtual_address > rva]
    capacity = min([section.raw_size, *(va - rva for va in later)])
    return Placement(section, capacity) if size <= capacity else Placement(None, None)


def _new_section_slot(data: bytes, layout: Layout) -> int:
    """File offset where one more section header fits, or raise PEError saying why not."""
    slot = layout.section_table_offset + len(layout.sections) * _SECTION_HEADER.size
    end = slot + _SECTION_HEADER.size
    first_raw = min((s.raw_pointer for s in layout.sections if s.raw_size), default=end)
    limit = min(layout.size_of_headers, first_raw)
    if end > limit:
        raise PEError(
            "no room for a new section header: the headers end at "
            f"{limit:#x} and the section table already fills them up to {slot:#x}; the "
            "resources must fit in the existing resource section (remove some, or use a base "
            "image with a larger header area)"
        )
    for index, (va, size) in enumerate(layout.directories):
        # Bound imports (and the odd other table) live in the header by file offset.
        if (
            va
            and size
            and va < end
            and slot < va + size
            and index != IMAGE_DIRECTORY_ENTRY_SECURITY
        ):
            raise PEError(
                f"no room for a new section header: data directory {index} occupies "
                f"bytes {va:#x}..{va + size:#x} right after the section table"
            )
    if any(data[slot:end]):
        raise PEError(
            "no room for a new section header: the bytes after the section table "
            f"({slot:#x}..{end:#x}) are in use"
        )
    return slot


@dataclass(frozen=True)
class RewriteResult:
    """The new image and what happened to it."""

    data: bytes
    in_place: bool
    signature_removed: bool
    resource_rva: int
    resource_size: int


def replace_resources(
    data: bytes,
    resources: Mapping[ResourceKey, bytes],
    *,
    subsystem: int | None = None,
) -> RewriteResult:
    """Return *data* with its resource directory replaced by *resources* (a pure function).

    Keys must be normalised (:func:`exepy.restree.normalize_key`). *subsystem*, when
    given, replaces the optional header's Subsystem field.
    """
    layout = read_layout(data)
    if len(layout.directories) <= IMAGE_DIRECTORY_ENTRY_RESOURCE:
        raise PEError(
            f"the optional header has only {len(layout.directories)} data directories; "
            "a resource directory needs at least 3"
        )
    out = bytearray(data[: layout.raw_end])
    overlay = bytearray(data[layout.raw_end :])
    old_raw_end = layout.raw_end

    # Signature: the certificate table is addressed by file offset and lives in the overlay.
    cert_offset, cert_size = layout.directory(IMAGE_DIRECTORY_ENTRY_SECURITY)
    signature_removed = bool(cert_offset and cert_size)
    cut_start = cut_end = 0
    if signature_removed:
        if cert_offset < old_raw_end or cert_offset + cert_size > len(data):
            raise PEError(
                f"corrupt certificate table: {cert_size} bytes at file offset {cert_offset:#x} "
                "are not inside the data after the last section"
            )
        cut_start, cut_end = cert_offset - old_raw_end, cert_offset + cert_size - old_raw_end
        del overlay[cut_start:cut_end]
        struct.pack_into(
            "<II", out, layout.directory_offset + 8 * IMAGE_DIRECTORY_ENTRY_SECURITY, 0, 0
        )
        dll_chars_at = layout.optional_offset + _OPT_DLL_CHARACTERISTICS
        (dll_chars,) = struct.unpack_from("<H", out, dll_chars_at)
        struct.pack_into(
            "<H", out, dll_chars_at, dll_chars & ~IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY
        )

    # Size first (offsets inside the tree do not depend on where it goes, only RVAs do).
    size = len(restree.serialize(resources, 0))
    placement = choose_placement(layout, size)
    init_delta = 0
    section = placement.section
    if section is not None:
        rva = section.virtual_address
        blob = restree.serialize(resources, rva)
        if placement.capacity is None:
            raw_size = _align(len(blob), layout.file_alignment)
            del out[section.raw_pointer :]
            out += blob + bytes(raw_size - len(blob))
            init_delta = raw_size - section.raw_size
            new_header = replace(section, virtual_size=len(blob), raw_size=raw_size)
        else:
            out[section.raw_pointer : section.raw_pointer + section.raw_size] = blob + bytes(
                section.raw_size - len(blob)
            )
            new_header = replace(section, virtual_size=len(blob))
        _write_section_header(out, new_header)
        sections = [new_header if s is section else s for s in layout.sections]
    else:
        slot = _new_section_slot(data, layout)
        virtual_end = max(
            (s.virtual_address + s.mapped_size for s in layout.sections),
            default=layout.size_of_headers,
        )
        rva = _align(virtual_end, layout.section_alignment)
        raw_pointer = _align(len(out), layout.file_alignment)
        if layout.section_alignment < 0x1000:
            # Low-alignment images map the file as is: RVA and file offset must be equal.
            rva = raw_pointer = max(rva, raw_pointer)
        blob = restree.serialize(resources, rva)
        raw_size = _align(len(blob), layout.file_alignment)
        out += bytes(raw_pointer - len(out)) + blob + bytes(raw_size - len(blob))
        taken = {s.name.rstrip(b"\0") for s in layout.sections}
        name = next(n for n in (b".rsrc", b".rsrc1", b".rsrc2", b".exepy") if n not in taken)
        new_header = Section(
            name.ljust(8, b"\0"),
            rva,
            len(blob),
            raw_pointer,
            raw_size,
            IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ,
            slot,
        )
        _write_section_header(out, new_header)
        coff = layout.optional_offset - 20
        struct.pack_into("<H", out, coff + 2, len(layout.sections) + 1)
        init_delta = raw_size
        sections = [*layout.sections, new_header]

    if init_delta and (section is None or section.characteristics & IMAGE_SCN_CNT_INITIALIZED_DATA):
        at = layout.optional_offset + _OPT_SIZE_OF_INITIALIZED_DATA
        (value,) = struct.unpack_from("<I", out, at)
        struct.pack_into("<I", out, at, (value + init_delta) & 0xFFFFFFFF)
    size_of_image = _align(
        max(s.virtual_address + s.mapped_size for s in sections), layout.section_alignment
    )
    struct.pack_into("<I", out, layout.optional_offset + _OPT_SIZE_OF_IMAGE, size_of_image)
    struct.pack_into(
        "<II", out, layout.directory_offset + 8 * IMAGE_DIRECTORY_ENTRY_RESOURCE, rva, len(blob)
    )
    if subsystem is not None:
        struct.pack_into("<H", out, layout.optional_offset + _OPT_SUBSYSTEM, subsystem)

    # Everything that addressed the overlay by file offset moves with it.
    new_raw_end = len(out)

    def moved(offset: int) -> int:
        if offset < old_raw_end:
            return offset
        shift = new_raw_end - old_raw_end
        if signature_removed and offset - old_raw_end >= cut_end:
            shift -= cut_end - cut_start
        return offset + shift

    if layout.symbol_table_pointer:
        coff = layout.optional_offset - 20
        struct.pack_into("<I", out, coff + 8, moved(layout.symbol_table_pointer))
    _move_debug_data(out, data, layout, moved)
    out += overlay
    struct.pack_into("<I", out, layout.checksum_offset, pe_checksum(out, layout.checksum_offset))
    return RewriteResult(bytes(out), section is not None, signature_removed, rva, len(blob))


def _write_section_header(out: bytearray, section: Section) -> None:
    # Only the fields exepy changes; relocation/line-number fields stay as they were.
    at = section.header_offset
    struct.pack_into(
        "<8sIIII",
        out,
        at,
        section.name,
        section.virtual_size,
        section.virtual_address,
        section.raw_size,
        section.raw_pointer,
    )
    struct.pack_into("<I", out, at + 36, section.characteristics)


def _move_debug_data(
    out: bytearray, data: bytes, layout: Layout, moved: Callable[[int], int]
) -> None:
    """Shift debug-directory PointerToRawData values that point into the overlay."""
    rva, size = layout.directory(IMAGE_DIRECTORY_ENTRY_DEBUG)
    if not rva or not size:
        return
    section = layout.section_for_rva(rva)
    if section is None or rva + size > section.virtual_address + section.raw_size:
        return  # not stored in the file: nothing to move
    start = section.raw_pointer + rva - section.virtual_address
    for entry in range(start, start + size - _DEBUG_ENTRY_SIZE + 1, _DEBUG_ENTRY_SIZE):
        (pointer,) = struct.unpack_from("<I", data, entry + 24)
        if pointer >= layout.raw_end:
            struct.pack_into("<I", out, entry + 24, moved(pointer))


def set_subsystem_only(data: bytes, subsystem: int) -> bytes:
    """Return *data* with only the Subsystem field (and the checksum) changed."""
    layout = read_layout(data)
    out = bytearray(data)
    struct.pack_into("<H", out, layout.optional_offset + _OPT_SUBSYSTEM, subsystem)
    struct.pack_into("<I", out, layout.checksum_offset, pe_checksum(out, layout.checksum_offset))
    return bytes(out)
