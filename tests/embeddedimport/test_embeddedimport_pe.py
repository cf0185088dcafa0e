"""The PE resource reader against real Windows binaries and pefile as the reference."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from embeddedimport.pe import PEFormatError, find_resource, read_resources
from embeddedimport_testpe import add_resources, real_pe_files

SAMPLE = real_pe_files()[::25]  # spread over exes and dlls, x86, x64 and ARM64 launchers


def pefile_resources(source: str | bytes) -> dict[tuple, bytes]:
    """The reference: pefile's view of the same tree (a path or the image's bytes)."""
    pefile = pytest.importorskip("pefile")
    if isinstance(source, bytes):
        pe = pefile.PE(data=source, fast_load=True)
    else:
        pe = pefile.PE(source, fast_load=True)
    pe.parse_data_directories(
        directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]]
    )
    found: dict[tuple, bytes] = {}
    root = getattr(pe, "DIRECTORY_ENTRY_RESOURCE", None)
    for t in root.entries if root is not None else []:
        type_key = str(t.name) if t.name is not None else t.id
        for n in t.directory.entries:
            name_key = str(n.name) if n.name is not None else n.id
            for lang in n.directory.entries:
                entry = lang.data.struct
                found[(type_key, name_key, lang.id)] = pe.get_data(entry.OffsetToData, entry.Size)
    pe.close()
    return found


@pytest.mark.parametrize("path", SAMPLE, ids=[Path(p).name for p in SAMPLE])
def test_read_resources_matches_pefile(path: str) -> None:
    ours = read_resources(path)
    assert ours == pefile_resources(path)
    assert read_resources(Path(path).read_bytes()) == ours
    for (type_, name, language), data in list(ours.items())[:5]:
        assert find_resource(path, type_, name, language) == data


def test_sample_is_not_empty(pe_bases: list[str]) -> None:
    assert SAMPLE, "no real PE files found"
    assert any(read_resources(p) for p in SAMPLE)


def test_written_resources_are_found_including_named_ones(base_exe: bytes) -> None:
    keep = read_resources(base_exe)
    added = {
        (10, 200, 0): b"bundle",
        (10, 201, 0): b"command",
        ("MYTYPE", "HELLO", 1033): b"named",
        (10, "ZETA", 0): b"z",
    }
    image = add_resources(base_exe, added, keep)
    found = read_resources(image)
    assert found == {**keep, **added}
    assert find_resource(image, 10, 200) == b"bundle"
    assert find_resource(image, "mytype", "hello") == b"named"  # matched upper-cased
    assert find_resource(image, "MYTYPE", "HELLO", 1033) == b"named"
    assert find_resource(image, "MYTYPE", "HELLO", 7) is None
    assert find_resource(image, 10, 999) is None
    assert find_resource(image, 12345, 1) is None
    assert pefile_resources(image) == found


def test_language_none_prefers_neutral(base_exe: bytes) -> None:
    image = add_resources(base_exe, {(10, 300, 1033): b"en", (10, 300, 0): b"neutral"}, {})
    assert find_resource(image, 10, 300) == b"neutral"
    image = add_resources(base_exe, {(10, 300, 1033): b"en", (10, 300, 1031): b"de"}, {})
    assert find_resource(image, 10, 300) == b"de"  # first listed (ids ascending)


def _corrupt(image: bytes, offset: int, value: bytes) -> bytes:
    return image[:offset] + value + image[offset + len(value) :]


def _resource_dir(image: bytes) -> tuple[int, int]:
    pe = struct.unpack_from("<I", image, 0x3C)[0]
    magic = struct.unpack_from("<H", image, pe + 24)[0]
    return pe + 24 + (96 if magic == 0x10B else 112) + 16, pe


def test_not_a_pe_file_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not an executable" * 4)
    with pytest.raises(PEFormatError, match="not a PE file"):
        read_resources(text)
    with pytest.raises(PEFormatError, match="not a PE file"):
        find_resource(b"MZ" + b"\0" * 58 + struct.pack("<I", 64) + b"XX\0\0" + b"\0" * 40, 10, 1)
    with pytest.raises(FileNotFoundError):
        read_resources(tmp_path / "missing.exe")


def test_truncated_and_corrupt_images_raise(base_exe: bytes) -> None:
    with pytest.raises(PEFormatError, match="truncated"):
        read_resources(base_exe[:300])
    image = add_resources(base_exe, {(10, 200, 0): b"x" * 100}, {})
    directory, pe = _resource_dir(image)
    with pytest.raises(PEFormatError, match="not inside any section"):
        read_resources(_corrupt(image, directory, struct.pack("<I", 0x7FFFFFF0)))
    with pytest.raises(PEFormatError, match="runs past the resource directory"):
        read_resources(_corrupt(image, directory + 4, struct.pack("<I", 8)))
    with pytest.raises(PEFormatError, match="magic"):
        read_resources(_corrupt(image, pe + 24, b"\x07\x01"))
    # A data entry pointing far outside the image.
    # Size=100, CodePage, Reserved: the entry is in the new section after the base's bytes.
    found_at = image.find(struct.pack("<I", 100) + b"\0" * 8, len(base_exe))
    assert found_at > 0
    bad = _corrupt(image, found_at - 4, struct.pack("<I", 0x7FFF0000))
    with pytest.raises(PEFormatError, match="resource data"):
        read_resources(bad)
    with pytest.raises(PEFormatError, match="truncated"):
        read_resources(image[: found_at + 20])


def test_image_without_resources_gives_nothing(base_exe: bytes) -> None:
    directory, _ = _resource_dir(base_exe)
    image = _corrupt(base_exe, directory, b"\0" * 8)
    assert read_resources(image) == {}
    assert find_resource(image, 10, 200) is None


TABLES = {
    "DOS_HEADER": "__IMAGE_DOS_HEADER_format__",
    "NT_HEADERS": "__IMAGE_NT_HEADERS_format__",
    "FILE_HEADER": "__IMAGE_FILE_HEADER_format__",
    "OPTIONAL_HEADER": "__IMAGE_OPTIONAL_HEADER_format__",
    "OPTIONAL_HEADER64": "__IMAGE_OPTIONAL_HEADER64_format__",
    "DATA_DIRECTORY": "__IMAGE_DATA_DIRECTORY_format__",
    "SECTION_HEADER": "__IMAGE_SECTION_HEADER_format__",
    "DEBUG_DIRECTORY": "__IMAGE_DEBUG_DIRECTORY_format__",
    "RESOURCE_DIRECTORY": "__IMAGE_RESOURCE_DIRECTORY_format__",
    "RESOURCE_DIRECTORY_ENTRY": "__IMAGE_RESOURCE_DIRECTORY_ENTRY_format__",
    "RESOURCE_DATA_ENTRY": "__IMAGE_RESOURCE_DATA_ENTRY_format__",
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_header_tables_agree_with_pefile(name: str) -> None:
    # Our tables are written out independently; pefile's, read through its own Structure,
    # must give every field the same offset, size and position.
    pefile = pytest.importorskip("pefile")
    from embeddedimport import petables

    ours = getattr(petables, name)
    theirs = pefile.Structure(getattr(pefile.PE, TABLES[name]))
    assert ours.size == theirs.sizeof() == struct.calcsize(ours.format)
    assert ours.format == theirs.__format_str__
    fields = [spec.split(",")[1] for spec in ours.fields]
    # pefile lists aliases for a field ("Misc", "Misc_PhysicalAddress", "Misc_VirtualSize").
    assert len(fields) == len(theirs.__keys__)
    assert all(field in aliases for field, aliases in zip(fields, theirs.__keys__, strict=True))
    sample = bytes(range(7, 7 + ours.size))
    theirs.__unpack__(sample)
    for field in fields:
        expected = getattr(theirs, field)
        got = (
            ours.raw(sample, 0, field)
            if isinstance(expected, bytes)
            else ours.get(sample, 0, field)
        )
        assert got == expected, field


def test_structure_put_get_round_trip_and_errors() -> None:
    from embeddedimport.petables import SECTION_HEADER, StructureError

    buffer = bytearray(SECTION_HEADER.size + 4)
    SECTION_HEADER.put(buffer, 4, "Name", b".rsrc")
    SECTION_HEADER.put(buffer, 4, "Characteristics", 0x40000040)
    assert SECTION_HEADER.raw(buffer, 4, "Name") == b".rsrc\0\0\0"
    assert SECTION_HEADER.get(buffer, 4, "Characteristics") == 0x40000040
    assert buffer[4 + 36 : 4 + 40] == struct.pack("<I", 0x40000040)
    with pytest.raises(StructureError, match=r"IMAGE_SECTION_HEADER\.Characteristics"):
        SECTION_HEADER.get(buffer, 8, "Characteristics")
    with pytest.raises(StructureError, match="holds 8 bytes"):
        SECTION_HEADER.put(buffer, 0, "Name", b".toolongname")


def test_the_start_up_readers_offsets_are_the_tables() -> None:
    # embeddedimport.pe keeps its offsets as constants (loading the tables would cost more
    # than the lookup, at every start-up): each must be what the tables say.
    from embeddedimport import pe
    from embeddedimport.petables import (
        DATA_DIRECTORY,
        DOS_HEADER,
        FILE_HEADER,
        IMAGE_DIRECTORY_ENTRY_RESOURCE,
        NT_HEADERS,
        OPTIONAL_HEADER,
        OPTIONAL_HEADER64,
        RESOURCE_DATA_ENTRY,
        RESOURCE_DIR_STRING,
        RESOURCE_DIRECTORY,
        RESOURCE_DIRECTORY_ENTRY,
        SECTION_HEADER,
        optional_header,
    )

    signature = NT_HEADERS.size
    sections = ("Misc_VirtualSize", "VirtualAddress", "SizeOfRawData", "PointerToRawData")
    expected = {
        "_DOS_HEADER_SIZE": DOS_HEADER.size,
        "_E_LFANEW": DOS_HEADER.offset("e_lfanew"),
        "_PE_HEADERS_SIZE": signature + FILE_HEADER.size,
        "_NUMBER_OF_SECTIONS": signature + FILE_HEADER.offset("NumberOfSections"),
        "_SIZE_OF_OPTIONAL_HEADER": signature + FILE_HEADER.offset("SizeOfOptionalHeader"),
        "_MAGIC": OPTIONAL_HEADER.offset("Magic"),
        "_RVA_COUNT": {
            0x10B: OPTIONAL_HEADER.offset("NumberOfRvaAndSizes"),
            0x20B: OPTIONAL_HEADER64.offset("NumberOfRvaAndSizes"),
        },
        "_DIRECTORIES": {0x10B: OPTIONAL_HEADER.size, 0x20B: OPTIONAL_HEADER64.size},
        "_DATA_DIRECTORY_SIZE": DATA_DIRECTORY.size,
        "_DIRECTORY_SIZE_FIELD": DATA_DIRECTORY.offset("Size"),
        "_RESOURCE_DIRECTORY_INDEX": IMAGE_DIRECTORY_ENTRY_RESOURCE,
        "_SECTION_SIZE": SECTION_HEADER.size,
        "_SECTION_FIELDS": tuple(SECTION_HEADER.offset(field) for field in sections),
        "_DIR_SIZE": RESOURCE_DIRECTORY.size,
        "_NAMED_ENTRIES": RESOURCE_DIRECTORY.offset("NumberOfNamedEntries"),
        "_ID_ENTRIES": RESOURCE_DIRECTORY.offset("NumberOfIdEntries"),
        "_ENTRY_SIZE": RESOURCE_DIRECTORY_ENTRY.size,
        "_ENTRY_TARGET": RESOURCE_DIRECTORY_ENTRY.offset("OffsetToData"),
        "_DATA_SIZE": RESOURCE_DATA_ENTRY.size,
        "_DATA_ENTRY_SIZE_FIELD": RESOURCE_DATA_ENTRY.offset("Size"),
        "_NAME_LENGTH_SIZE": RESOURCE_DIR_STRING.size,
    }
    assert {name: getattr(pe, name) for name in expected} == expected
    # Fields the reader reads at offset 0 of their structure, and the two magics.
    assert OPTIONAL_HEADER64.offset("Magic") == 0
    assert DATA_DIRECTORY.offset("VirtualAddress") == 0
    assert RESOURCE_DIRECTORY_ENTRY.offset("Name") == 0
    assert RESOURCE_DATA_ENTRY.offset("OffsetToData") == 0
    assert optional_header(pe._PE32) is OPTIONAL_HEADER
    assert optional_header(pe._PE32_PLUS) is OPTIONAL_HEADER64


def test_the_start_up_path_does_not_load_the_tables() -> None:
    import subprocess
    import sys

    code = (
        "import sys, embeddedimport.pe; "
        "print(sorted(m for m in sys.modules if m.startswith('embeddedimport')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['embeddedimport', 'embeddedimport.pe']"
