"""The resource editor on real PE files, checked with pefile (an independent parser)."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import pefile
import pytest
from exepy import image, restree
from exepy.corpus import pefile_resources, verify_rewrite, with_zip, zip_main
from exepy.editor import PEError, ResourceEditor, SignatureRemovedWarning
from exepy_support import Signer, launcher, wine_binary
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

# (label, how to get the base): x86 PE32, x64 and ARM64 PE32+; .rsrc last (grows in place)
# and .rsrc in the middle (moves to a new section).
BASES = {
    "x86-launcher": lambda: launcher("t32.exe"),
    "x64-launcher": lambda: launcher("t64.exe"),
    "arm64-launcher": lambda: launcher("t64-arm.exe"),
    "wine-notepad": lambda: wine_binary("notepad.exe"),
    "wine-kernel32": lambda: wine_binary("kernel32.dll"),
}


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.wine] if name.startswith("wine") else [])
        for name in sorted(BASES)
    ]
)
def base(request: pytest.FixtureRequest) -> Path:
    return BASES[request.param]()


def edit_and_check(original: bytes, edits: dict[tuple, bytes], removals: list[tuple] = ()) -> bytes:  # type: ignore[assignment]
    """Apply *edits* (add/replace) and *removals*, then check the output with pefile."""
    editor = ResourceEditor(original)
    for key, blob in edits.items():
        editor.set(key[0], key[1], blob, key[2])
    for key in removals:
        editor.remove(*key)
    expected = editor.resources
    output = editor.to_bytes()
    assert verify_rewrite(original, output, expected) == []
    return output


def test_add_replace_remove_keeps_originals(base: Path) -> None:
    original = base.read_bytes()
    before = pefile_resources(original)
    assert ResourceEditor(original).resources == before
    first = next(iter(before))
    output = edit_and_check(
        original,
        {
            (10, 200, 0): b"bundle" * 5000,
            (10, 201, 0): b"command",
            ("MyType", "lowerName", 1033): b"named",
            ("MYTYPE", "Other", 0): b"",
            (first[0], first[1], first[2]): b"replaced",
        },
    )
    after = pefile_resources(output)
    assert after[first] == b"replaced"
    assert after["MYTYPE", "LOWERNAME", 1033] == b"named"
    assert after["MYTYPE", "OTHER", 0] == b""
    # Editing the output again: removal, and the tree stays sound.
    again = ResourceEditor(output)
    assert again.remove(10, 201) == 1
    assert again.remove("mytype") == 2
    final = again.to_bytes()
    assert verify_rewrite(output, final, again.resources) == []
    assert pefile_resources(final) == {**before, first: b"replaced", (10, 200, 0): b"bundle" * 5000}


@pytest.mark.wine  # Wine's own binaries are the bases
def test_layout_after_new_section_and_growth() -> None:
    base = wine_binary("notepad.exe")
    original = base.read_bytes()
    layout = image.read_layout(original)
    rsrc_index = next(i for i, s in enumerate(layout.sections) if s.name.startswith(b".rsrc"))
    assert rsrc_index < len(layout.sections) - 1, (
        "notepad's .rsrc is not last: a new section is needed"
    )
    editor = ResourceEditor(original)
    editor.set(10, 200, bytes(range(256)) * 2000)  # cannot fit in the old section
    moved = editor.to_bytes()
    new = image.read_layout(moved)
    assert len(new.sections) == len(layout.sections) + 1
    added = new.sections[-1]
    assert added.name == b".rsrc1\0\0"
    assert new.directory(2) == (added.virtual_address, added.virtual_size)
    assert added.raw_pointer % layout.file_alignment == 0
    assert added.virtual_address % layout.section_alignment == 0
    pe = pefile.PE(data=moved, fast_load=True)
    assert pe.OPTIONAL_HEADER.SizeOfImage == added.virtual_address + (
        -(-added.virtual_size // layout.section_alignment) * layout.section_alignment
    )
    # The symbol table (and the COFF string table after it that names "/4" sections) moved.
    shift = added.raw_size + (added.raw_pointer - layout.raw_end)
    assert pe.FILE_HEADER.PointerToSymbolTable == layout.symbol_table_pointer + shift
    # A second edit grows the now-last resource section in place: no third section.
    second = ResourceEditor(moved)
    second.set(10, 202, b"x" * 300_000)
    grown = second.to_bytes()
    assert len(image.read_layout(grown).sections) == len(new.sections)
    assert verify_rewrite(moved, grown, second.resources) == []


@pytest.mark.wine  # Wine's own binaries are the bases
def test_small_edit_stays_in_place() -> None:
    original = wine_binary("notepad.exe").read_bytes()
    editor = ResourceEditor(original)
    editor.set(10, 201, b"tiny")
    output = editor.to_bytes()
    assert len(output) == len(original)
    assert len(image.read_layout(output).sections) == len(image.read_layout(original).sections)
    assert verify_rewrite(original, output, editor.resources) == []


def test_names_are_stored_upper_case_and_sorted() -> None:
    resources = {
        restree.normalize_key(10, "zeta", 0): b"z",
        restree.normalize_key(10, "Alpha", 0): b"a",
        restree.normalize_key(10, "al", 0): b"l",
        restree.normalize_key(10, 5, 0): b"5",
        restree.normalize_key(10, 3, 0): b"3",
        restree.normalize_key("typ", "#7", 9): b"7",
    }
    blob = restree.serialize(resources, 0x1000)
    # Root: one named type, then ids.
    named, ids = struct.unpack_from("<HH", blob, 12)
    assert (named, ids) == (1, 1)
    parsed = restree.parse(lambda rva, n: blob[rva - 0x1000 : rva - 0x1000 + n], 0x1000)
    assert parsed == resources
    assert list(k[1] for k in parsed if k[0] == 10) == ["AL", "ALPHA", "ZETA", 3, 5]
    assert ("TYP", 7, 9) in parsed


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ((10, 70000, 0), "name id must be in 0..65535"),
        ((10, "", 0), "must not be empty"),
        ((10, "a\0b", 0), "must not contain NUL"),
        ((10, 1, -1), "language must be an int"),
        ((10, 1.5, 0), "int id or a str name"),
    ],
)
def test_bad_keys_are_refused(key: tuple, message: str) -> None:
    editor = ResourceEditor(launcher("t64.exe").read_bytes())
    with pytest.raises(restree.ResourceTreeError, match=message):
        editor.set(key[0], key[1], b"x", key[2])


def test_overlay_with_zip_survives(tmp_path: Path) -> None:
    zipped = with_zip(launcher("t64.exe").read_bytes())
    main_py = zip_main(zipped)
    assert main_py is not None
    output = edit_and_check(zipped, {(10, 200, 0): b"b" * 100_000})
    assert zip_main(output) == main_py


def test_unchanged_save_is_identical(tmp_path: Path) -> None:
    base = launcher("t32.exe")
    ResourceEditor.open(base).save(tmp_path / "same.exe")
    assert (tmp_path / "same.exe").read_bytes() == base.read_bytes()


def test_windowed_subsystem() -> None:
    original = launcher("t64.exe").read_bytes()
    editor = ResourceEditor(original)
    assert editor.subsystem == image.IMAGE_SUBSYSTEM_WINDOWS_CUI
    editor.subsystem = image.IMAGE_SUBSYSTEM_WINDOWS_GUI
    pe = pefile.PE(data=editor.to_bytes(), fast_load=True)
    assert pe.OPTIONAL_HEADER.Subsystem == 2
    assert pe.verify_checksum()


def test_checksum_matches_pefile() -> None:
    data = bytearray(launcher("t64.exe").read_bytes()) + b"odd"  # odd length
    layout = image.read_layout(bytes(data))
    pe = pefile.PE(data=bytes(data), fast_load=True)
    assert image.pe_checksum(data, layout.checksum_offset) == pe.generate_checksum()


# Bad input: a clear error, the input untouched, no output file ---------------------------


def corrupt_type_entry(data: bytes) -> bytes:
    """Point the first type entry's subdirectory far outside the section."""
    layout = image.read_layout(data)
    rva, _ = layout.directory(2)
    section = layout.section_for_rva(rva)
    assert section is not None
    at = section.raw_pointer + rva - section.virtual_address + 16 + 4
    out = bytearray(data)
    struct.pack_into("<I", out, at, 0x80000000 | 0x7FFF0000)
    return bytes(out)


def loop_directory(data: bytes) -> bytes:
    """Make the first type's name directory point back at the root."""
    layout = image.read_layout(data)
    rva, _ = layout.directory(2)
    section = layout.section_for_rva(rva)
    assert section is not None
    root = section.raw_pointer + rva - section.virtual_address
    (target,) = struct.unpack_from("<I", data, root + 20)
    out = bytearray(data)
    struct.pack_into("<I", out, root + (target & 0x7FFFFFFF) + 16 + 4, 0x80000000)
    return bytes(out)


BAD_INPUTS = {
    "not-pe": (lambda d: b"hello, this is text\n" * 10, "not a PE file"),
    "not-pe-mz": (lambda d: b"MZ" + bytes(200), "not a valid PE file"),
    "truncated": (lambda d: d[: len(d) // 2], "truncated"),
    "corrupt-directory": (corrupt_type_entry, "corrupt resource directory"),
    "directory-loop": (loop_directory, "corrupt resource directory"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_refused(case: str, tmp_path: Path) -> None:
    make, message = BAD_INPUTS[case]
    bad = tmp_path / "bad.exe"
    bad.write_bytes(make(launcher("t64.exe").read_bytes()))
    before = bad.read_bytes()
    with pytest.raises(PEError, match=message) as info:
        editor = ResourceEditor.open(bad)
        editor.set(10, 200, b"x")
        editor.save(tmp_path / "out.exe")
    assert str(bad) in str(info.value)
    assert bad.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.exe"]


@pytest.mark.wine  # Wine's own binaries are the bases
def test_no_room_for_a_section_header(tmp_path: Path) -> None:
    data = bytearray(wine_binary("notepad.exe").read_bytes())
    layout = image.read_layout(bytes(data))
    slot = layout.section_table_offset + 40 * len(layout.sections)
    data[slot : slot + 40] = b"\xcc" * 40  # something lives right after the section table
    editor = ResourceEditor(bytes(data), source="full-headers.exe")
    editor.set(10, 201, b"fits in place")
    assert editor.to_bytes()  # in place: no header needed
    editor.set(10, 200, b"y" * 1_000_000)
    with pytest.raises(PEError, match=r"^full-headers\.exe: no room for a new section header"):
        editor.save(tmp_path / "out.exe")
    assert list(tmp_path.iterdir()) == []


def test_save_is_atomic_on_error(tmp_path: Path) -> None:
    target = tmp_path / "out.exe"
    target.write_bytes(b"previous")
    editor = ResourceEditor(launcher("t64.exe").read_bytes())
    editor.set(10, 200, b"x")
    with pytest.raises(FileNotFoundError):
        editor.save(tmp_path / "missing-dir" / "out.exe")
    editor.save(target)
    assert target.read_bytes()[:2] == b"MZ"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.exe"]


# Signed input ----------------------------------------------------------------------------


@pytest.mark.wine  # osslsigncode: installed with Wine on Linux, absent on windows-latest
def test_signed_input_loses_its_signature(tmp_path: Path) -> None:
    signer = Signer.create(tmp_path)
    signed = tmp_path / "signed.exe"
    zipped = tmp_path / "zipped.exe"
    zipped.write_bytes(with_zip(launcher("t64.exe").read_bytes()))
    signer.sign(zipped, signed)
    assert signer.verify(signed)

    # Force integrity set: Windows then refuses the image without a valid signature.
    data = bytearray(signed.read_bytes())
    layout = image.read_layout(bytes(data))
    struct.pack_into(
        "<H",
        data,
        layout.optional_offset + 70,
        struct.unpack_from("<H", data, layout.optional_offset + 70)[0] | 0x80,
    )
    editor = ResourceEditor(bytes(data), source=str(signed))
    assert editor.signed
    editor.set(10, 200, b"bundle")
    with pytest.warns(SignatureRemovedWarning, match="Re-sign the output"):
        output = editor.to_bytes()
    pe = pefile.PE(data=output, fast_load=True)
    assert pe.OPTIONAL_HEADER.DATA_DIRECTORY[4].VirtualAddress == 0
    assert pe.OPTIONAL_HEADER.DATA_DIRECTORY[4].Size == 0
    assert not pe.OPTIONAL_HEADER.DllCharacteristics & 0x80
    assert pe.verify_checksum()
    assert zip_main(output) == zip_main(zipped.read_bytes())
    assert verify_rewrite(bytes(data), output, editor.resources) == []
    unsigned = tmp_path / "unsigned.exe"
    unsigned.write_bytes(output)
    assert not signer.verify(unsigned)
    # The output is a sound image to sign again.
    signer.sign(unsigned, tmp_path / "resigned.exe")
    assert signer.verify(tmp_path / "resigned.exe")


def test_warning_filter_does_not_hide_unsigned() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        editor = ResourceEditor(launcher("t64.exe").read_bytes())
        editor.set(10, 200, b"x")
        editor.to_bytes()  # no warning for an unsigned input


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["t32.exe", "t64.exe", "t64-arm.exe", "w64.exe"]),
    zipped=st.booleans(),
    edits=st.dictionaries(
        st.tuples(
            st.one_of(st.integers(1, 30), st.sampled_from(["DATA", "Extra", "Ünï"])),
            st.one_of(st.integers(0, 400), st.sampled_from(["A", "main", "zz-top"])),
            st.sampled_from([0, 1033, 1041]),
        ),
        st.binary(max_size=3000),
        max_size=12,
    ),
    drop_first=st.booleans(),
)
def test_random_edits_stay_sound(
    name: str, zipped: bool, edits: dict[tuple, bytes], drop_first: bool
) -> None:
    assume(edits or drop_first)  # no edit: the input comes back as it was (tested above)
    original = launcher(name).read_bytes()
    if zipped:
        original = with_zip(original)
    removals = [next(iter(ResourceEditor(original).resources))] if drop_first else []
    output = edit_and_check(original, edits, removals)
    if zipped:
        assert zip_main(output) == zip_main(original)
