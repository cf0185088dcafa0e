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

import sys
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import pefile
from embeddedimport.petables import (
    DATA_DIRECTORY,
    DEBUG_DIRECTORY,
    DOS_HEADER,
    FILE_HEADER,
    IMAGE_DIRECTORY_ENTRY_DEBUG,
    IMAGE_DIRECTORY_ENTRY_RESOURCE,
    IMAGE_DIRECTORY_ENTRY_SECURITY,
    OPTIONAL_HEADER,
    OPTIONAL_HEADER64,
    SECTION_HEADER,
    Structure,
    optional_header,
)

from exepy import restree
from exepy.restree import ResourceKey

IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY = 0x0080
IMAGE_SCN_CNT_INITIALIZED_DATA = 0x00000040
IMAGE_SCN_MEM_READ = 0x40000000
IMAGE_SUBSYSTEM_WINDOWS_GUI = 2
IMAGE_SUBSYSTEM_WINDOWS_CUI = 3
_MACHINES = {0x14C: "x86", 0x8664: "x64", 0xAA64: "ARM64", 0x1C4: "ARM"}
# Every header offset here comes from embeddedimport.petables (pefile's field names):
# one description of the PE layout for both packages (embeddedimport may not import exepy).


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
    file_header_offset: int
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
    def optional_header(self) -> Structure:
        """The optional header's table: PE32 or PE32+."""
        return OPTIONAL_HEADER64 if self.pe32_plus else OPTIONAL_HEADER

    @property
    def checksum_offset(self) -> int:
        """File offset of the CheckSum field."""
        return self.optional_offset + self.optional_header.offset("CheckSum")

    def directory_entry_offset(self, index: int) -> int:
        """File offset of data directory *index* (its VirtualAddress, then its Size)."""
        return self.directory_offset + DATA_DIRECTORY.size * index

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
    if len(data) < DOS_HEADER.size or data[:2] != b"MZ":
        raise PEError("not a PE file: it does not start with the 'MZ' DOS header")
    try:
        pe = pefile.PE(data=data, fast_load=True)
    except pefile.PEFormatError as exc:
        raise PEError(f"not a valid PE file: {exc.value}") from None
    opt = pe.OPTIONAL_HEADER
    if opt is None or not hasattr(opt, "Magic"):
        raise PEError("not a valid PE file: the optional header is missing or truncated")
    table = optional_header(opt.Magic)
    if table is None:
        raise PEError(f"unsupported optional header magic {opt.Magic:#x} (expected PE32 or PE32+)")
    pe32_plus = table is OPTIONAL_HEADER64
    file_alignment = opt.FileAlignment
    section_alignment = opt.SectionAlignment
    for what, value in (("FileAlignment", file_alignment), ("SectionAlignment", section_alignment)):
        if value <= 0 or value & (value - 1):
            raise PEError(f"corrupt optional header: {what} {value:#x} is not a power of two")
    optional_offset = opt.get_file_offset()
    section_table_offset = optional_offset + pe.FILE_HEADER.SizeOfOptionalHeader
    count = pe.FILE_HEADER.NumberOfSections
    if section_table_offset + count * SECTION_HEADER.size > len(data):
        raise PEError("truncated file: the section table runs past the end of the file")
    if len(pe.sections) != count:
        raise PEError(f"corrupt section table: {count} sections declared, {len(pe.sections)} read")
    sections = [
        _read_section_header(data, section_table_offset + index * SECTION_HEADER.size)
        for index in range(count)
    ]
    for section in sections:
        if section.raw_size and section.raw_pointer + section.raw_size > len(data):
            raise PEError(
                f"truncated file: section {section.display_name!r} needs bytes up to "
                f"{section.raw_pointer + section.raw_size:#x} but the file has {len(data):#x}"
            )
    number = opt.NumberOfRvaAndSizes
    directory_offset = optional_offset + table.size  # the data directories follow it
    available = max(0, (section_table_offset - directory_offset) // DATA_DIRECTORY.size)
    entries = [
        directory_offset + DATA_DIRECTORY.size * index
        for index in range(min(number, 16, available))
    ]
    directories = tuple(
        (DATA_DIRECTORY.get(data, at, "VirtualAddress"), DATA_DIRECTORY.get(data, at, "Size"))
        for at in entries
    )
    raw_end = max((s.raw_pointer + s.raw_size for s in sections if s.raw_size), default=0)
    raw_end = max(raw_end, opt.SizeOfHeaders if not sections else 0)
    return Layout(
        machine=pe.FILE_HEADER.Machine,
        pe32_plus=pe32_plus,
        file_header_offset=pe.FILE_HEADER.get_file_offset(),
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


def _read_section_header(data: bytes, at: int) -> Section:
    def field(name: str) -> int:
        return SECTION_HEADER.get(data, at, name)

    return Section(
        SECTION_HEADER.raw(data, at, "Name"),
        field("VirtualAddress"),
        field("Misc_VirtualSize"),
        field("PointerToRawData"),
        field("SizeOfRawData"),
        field("Characteristics"),
        at,
    )


def _write_section_header(out: bytearray, section: Section) -> None:
    # Only the fields exepy changes; relocation/line-number fields stay as they were.
    for name, value in (
        ("Name", section.name),
        ("Misc_VirtualSize", section.virtual_size),
        ("VirtualAddress", section.virtual_address),
        ("SizeOfRawData", section.raw_size),
        ("PointerToRawData", section.raw_pointer),
        ("Characteristics", section.characteristics),
    ):
        SECTION_HEADER.put(out, section.header_offset, name, value)


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
    checksum_field = OPTIONAL_HEADER.offset("CheckSum")  # the same in PE32 and PE32+
    OPTIONAL_HEADER.put(buffer, checksum_offset - checksum_field, "CheckSum", 0)
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
    slot = layout.section_table_offset + len(layout.sections) * SECTION_HEADER.size
    end = slot + SECTION_HEADER.size
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


@dataclass(frozen=True)
class _Cut:
    """The certificate table taken out of the overlay: ``overlay[start:end]`` before."""

    start: int
    end: int


@dataclass(frozen=True)
class _Placed:
    """Where the new resource directory went and what the headers must now say."""

    rva: int
    size: int
    sections: tuple[Section, ...]
    initialized_growth: int  # bytes SizeOfInitializedData grows by
    in_place: bool


def replace_resources(
    data: bytes,
    resources: Mapping[ResourceKey, bytes],
    *,
    subsystem: int | None = None,
) -> RewriteResult:
    """Return *data* with its resource directory replaced by *resources* (a pure function).

    Keys must be normalised (:func:`exepy.restree.normalize_key`). *subsystem*, when
    given, replaces the optional header's Subsystem field. The steps: take out the
    signature, place the new directory (in its section, or in a new last section), update
    the optional header, move what addresses the overlay by file offset, re-checksum.
    """
    layout = read_layout(data)
    if len(layout.directories) <= IMAGE_DIRECTORY_ENTRY_RESOURCE:
        raise PEError(
            f"the optional header has only {len(layout.directories)} data directories; "
            "a resource directory needs at least 3"
        )
    out = bytearray(data[: layout.raw_end])
    overlay = bytearray(data[layout.raw_end :])
    cut = _remove_signature(out, overlay, layout)
    placement = choose_placement(layout, len(restree.serialize(resources, 0)))
    if placement.section is None:
        placed = _add_resource_section(out, data, layout, resources)
    else:
        placed = _rewrite_resource_section(out, layout, placement, resources)
    _update_optional_header(out, layout, placed, subsystem)
    _move_overlay_pointers(out, data, layout, cut)
    out += overlay
    _write_checksum(out, layout)
    return RewriteResult(bytes(out), placed.in_place, cut is not None, placed.rva, placed.size)


def _remove_signature(out: bytearray, overlay: bytearray, layout: Layout) -> _Cut | None:
    """Cut the certificate table (addressed by file offset, in the overlay) out of *overlay*.

    Any edit invalidates an Authenticode signature; FORCE_INTEGRITY would then make
    Windows refuse to load the image, so that flag goes too.
    """
    cert_offset, cert_size = layout.directory(IMAGE_DIRECTORY_ENTRY_SECURITY)
    if not (cert_offset and cert_size):
        return None
    if cert_offset < layout.raw_end or cert_offset + cert_size > layout.file_size:
        raise PEError(
            f"corrupt certificate table: {cert_size} bytes at file offset {cert_offset:#x} "
            "are not inside the data after the last section"
        )
    cut = _Cut(cert_offset - layout.raw_end, cert_offset + cert_size - layout.raw_end)
    del overlay[cut.start : cut.end]
    entry = layout.directory_entry_offset(IMAGE_DIRECTORY_ENTRY_SECURITY)
    DATA_DIRECTORY.put(out, entry, "VirtualAddress", 0)
    DATA_DIRECTORY.put(out, entry, "Size", 0)
    optional = layout.optional_header
    flags = optional.get(out, layout.optional_offset, "DllCharacteristics")
    optional.put(
        out,
        layout.optional_offset,
        "DllCharacteristics",
        flags & ~IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY,
    )
    return cut


def _rewrite_resource_section(
    out: bytearray, layout: Layout, placement: Placement, resources: Mapping[ResourceKey, bytes]
) -> _Placed:
    """Write the directory over the current one, in its own section (growing if it is last)."""
    section = placement.section
    assert section is not None
    rva = section.virtual_address
    blob = restree.serialize(resources, rva)
    if placement.capacity is None:  # the last section: it grows or shrinks with the tree
        raw_size = _align(len(blob), layout.file_alignment)
        del out[section.raw_pointer :]
        out += blob + bytes(raw_size - len(blob))
        growth = raw_size - section.raw_size
        new_header = replace(section, virtual_size=len(blob), raw_size=raw_size)
    else:
        padding = bytes(section.raw_size - len(blob))
        out[section.raw_pointer : section.raw_pointer + section.raw_size] = blob + padding
        growth = 0
        new_header = replace(section, virtual_size=len(blob))
    _write_section_header(out, new_header)
    if not section.characteristics & IMAGE_SCN_CNT_INITIALIZED_DATA:
        growth = 0
    sections = tuple(new_header if s is section else s for s in layout.sections)
    return _Placed(rva, len(blob), sections, growth, in_place=True)


def _add_resource_section(
    out: bytearray, data: bytes, layout: Layout, resources: Mapping[ResourceKey, bytes]
) -> _Placed:
    """Write the directory into a new last section, after the last section's data."""
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
    flags = IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ
    new_header = Section(name.ljust(8, b"\0"), rva, len(blob), raw_pointer, raw_size, flags, slot)
    _write_section_header(out, new_header)
    FILE_HEADER.put(out, layout.file_header_offset, "NumberOfSections", len(layout.sections) + 1)
    return _Placed(rva, len(blob), (*layout.sections, new_header), raw_size, in_place=False)


def _update_optional_header(
    out: bytearray, layout: Layout, placed: _Placed, subsystem: int | None
) -> None:
    """SizeOfInitializedData, SizeOfImage, the resource data directory, the subsystem."""
    optional, at = layout.optional_header, layout.optional_offset
    if placed.initialized_growth:
        value = optional.get(out, at, "SizeOfInitializedData") + placed.initialized_growth
        optional.put(out, at, "SizeOfInitializedData", value & 0xFFFFFFFF)
    end = max(s.virtual_address + s.mapped_size for s in placed.sections)
    optional.put(out, at, "SizeOfImage", _align(end, layout.section_alignment))
    entry = layout.directory_entry_offset(IMAGE_DIRECTORY_ENTRY_RESOURCE)
    DATA_DIRECTORY.put(out, entry, "VirtualAddress", placed.rva)
    DATA_DIRECTORY.put(out, entry, "Size", placed.size)
    if subsystem is not None:
        optional.put(out, at, "Subsystem", subsystem)


def _move_overlay_pointers(out: bytearray, data: bytes, layout: Layout, cut: _Cut | None) -> None:
    """Shift what addresses the overlay by file offset (COFF symbols, debug data).

    *out* holds the new image up to the end of its last section; the overlay, less the
    certificate table, follows it.
    """
    old_end, new_end = layout.raw_end, len(out)

    def moved(offset: int) -> int:
        if offset < old_end:
            return offset
        shift = new_end - old_end
        if cut is not None and offset - old_end >= cut.end:
            shift -= cut.end - cut.start
        return offset + shift

    if layout.symbol_table_pointer:
        FILE_HEADER.put(
            out,
            layout.file_header_offset,
            "PointerToSymbolTable",
            moved(layout.symbol_table_pointer),
        )
    _move_debug_data(out, data, layout, moved)


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
    for entry in range(start, start + size - DEBUG_DIRECTORY.size + 1, DEBUG_DIRECTORY.size):
        pointer = DEBUG_DIRECTORY.get(data, entry, "PointerToRawData")
        if pointer >= layout.raw_end:
            DEBUG_DIRECTORY.put(out, entry, "PointerToRawData", moved(pointer))


def _write_checksum(out: bytearray, layout: Layout) -> None:
    checksum = pe_checksum(out, layout.checksum_offset)
    layout.optional_header.put(out, layout.optional_offset, "CheckSum", checksum)


def set_subsystem_only(data: bytes, subsystem: int) -> bytes:
    """Return *data* with only the Subsystem field (and the checksum) changed."""
    layout = read_layout(data)
    out = bytearray(data)
    layout.optional_header.put(out, layout.optional_offset, "Subsystem", subsystem)
    _write_checksum(out, layout)
    return bytes(out)
