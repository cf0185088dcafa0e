"""The bundle (200) and command-line (201) formats against a hand-written original layout."""

from __future__ import annotations

import struct
import zlib

import pytest
from embeddedimport.bundle import (
    BUNDLE_ID,
    COMMAND_ID,
    RT_RCDATA,
    BundleError,
    pack,
    pack_command,
    unpack,
    unpack_command,
)
from embeddedimport_testpe import original_bundle, original_command, original_extract_command

FILES = [
    ("main.py", b"import pkg.mod\nprint(pkg.mod.VALUE)\n"),
    ("pkg/__init__.py", b""),
    ("pkg/mod.py", b"VALUE = 42\n"),
    ("pkg/data/blob.bin", bytes(range(256)) + b"\0\0tail"),
]


def test_constants_match_the_original() -> None:
    assert (RT_RCDATA, BUNDLE_ID, COMMAND_ID) == (10, 200, 201)


def test_pack_is_the_original_layout_field_by_field() -> None:
    data = pack(FILES)
    compressed_size, uncompressed_size, count = struct.unpack_from("<III", data, 0)
    assert count == len(FILES)
    offsets = struct.unpack_from(f"<{count}I", data, 12)
    stream_start = 12 + 4 * count
    blob = zlib.decompress(data[stream_start : stream_start + compressed_size])
    assert len(blob) == uncompressed_size
    assert blob == b"".join(content + b"\0" for _, content in FILES)
    position = 0
    for offset, (_, content) in zip(offsets, FILES, strict=True):
        assert offset == position
        position += len(content) + 1
    names = data[stream_start + compressed_size :].split(b"\0")
    assert names[-1] == b""
    assert names[:-1] == [b"main.py", b"pkg\\__init__.py", b"pkg\\mod.py", b"pkg\\data\\blob.bin"]
    # Only the zlib level may differ from the hand-written layout, so compare inflated.
    assert unpack(data) == unpack(original_bundle(FILES)) == FILES


@pytest.mark.parametrize("separator", ["/", "\\"])
def test_unpack_reads_either_separator(separator: str) -> None:
    raw = original_bundle(FILES, separator)
    assert separator.encode() in raw
    assert unpack(raw) == FILES


def test_empty_bundle_round_trips() -> None:
    assert unpack(pack([])) == []


def test_non_ascii_name_is_refused_naming_the_file() -> None:
    with pytest.raises(BundleError, match=r"café\.py.*not ASCII"):
        pack([("café.py", b"")])


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/abs.py", "relative path"),
        ("a/../b.py", "relative path"),
        ("C:\\x.py", "relative path"),
        ("", "relative path"),
        ("a\0b", "NUL"),
    ],
)
def test_bad_names_are_refused(name: str, problem: str) -> None:
    with pytest.raises(BundleError, match=problem):
        pack([(name, b"")])


def test_duplicate_names_are_refused_across_separators() -> None:
    with pytest.raises(BundleError, match="twice"):
        pack([("pkg/a.py", b""), ("pkg\\a.py", b"")])


def _with_header(data: bytes, **fields: int) -> bytes:
    compressed, uncompressed, count = struct.unpack_from("<III", data, 0)
    values = {"compressed": compressed, "uncompressed": uncompressed, "count": count}
    values.update(fields)
    return struct.pack("<III", *values.values()) + data[12:]


GOOD = pack(FILES)
STREAM = 12 + 4 * len(FILES)
CORRUPT_CASES = [
    ("short header", GOOD[:8], "truncated: 8 bytes"),
    ("huge file count", _with_header(GOOD, count=1 << 20), "offset table"),
    ("stream past end", _with_header(GOOD, compressed=len(GOOD)), "compressed_size"),
    ("stream cut short", _with_header(GOOD, compressed=10), "truncated"),
    (
        "stream too long",
        _with_header(GOOD, compressed=struct.unpack_from("<I", GOOD)[0] + 3),
        "inconsistent|bad name|non-ASCII|truncated",
    ),
    ("size mismatch", _with_header(GOOD, uncompressed=5), "more than uncompressed_size"),
    ("size too big", _with_header(GOOD, uncompressed=10_000), "uncompressed_size"),
    ("names cut", GOOD[: len(GOOD) - 5], "name list ends after 3 of 4"),
    ("garbage after names", GOOD + b"junk", "unexpected bytes"),
    ("corrupt stream", GOOD[:STREAM] + b"\xff" * 8 + GOOD[STREAM + 8 :], "zlib"),
    (
        "offsets not increasing",
        GOOD[:16] + struct.pack("<I", 0) + GOOD[20:],
        "inconsistent|NUL",
    ),
    ("first offset not zero", GOOD[:12] + struct.pack("<I", 1) + GOOD[16:], "expected 0"),
]


@pytest.mark.parametrize(
    ("label", "data", "message"), CORRUPT_CASES, ids=[c[0] for c in CORRUPT_CASES]
)
def test_corrupt_bundles_raise_clear_errors(label: str, data: bytes, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        unpack(data)


def test_zero_padding_after_names_is_accepted() -> None:
    assert unpack(GOOD + b"\0\0\0") == FILES


@pytest.mark.parametrize(
    "argv", [["-m", "main"], [], ["-c", "print('héllo ☃')"], ["", "x"], ["\U0001f40d"]]
)
def test_command_round_trips_and_matches_the_original(argv: list[str]) -> None:
    data = pack_command(argv)
    assert data == original_command(argv)
    assert unpack_command(data) == argv
    assert original_extract_command(data) == argv


def test_command_written_by_the_original_is_read_byte_for_byte() -> None:
    # b"-m", b"main", then the closing NUL create_unicode_buffer added: written out by hand.
    original = b"\x02\0\0\0" + b"-\0m\0\0\0" + b"m\0a\0i\0n\0\0\0" + b"\0\0"
    assert original == original_command(["-m", "main"])
    assert unpack_command(original) == ["-m", "main"]
    assert unpack_command(b"\0\0\0\0\0\0") == []  # the original's empty command line
    assert pack_command(["-m", "main"]) == original


def test_command_without_the_closing_nul_is_read_but_the_original_refused_it() -> None:
    # What earlier builds of exepy wrote: we still read it, the original's extract did not,
    # which is why pack_command writes the closing NUL.
    legacy = b"\x02\0\0\0" + b"-\0m\0\0\0" + b"m\0a\0i\0n\0\0\0"
    assert unpack_command(legacy) == ["-m", "main"]
    with pytest.raises(RuntimeError, match="corrupted"):
        original_extract_command(legacy)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x00", "truncated"),
        (struct.pack("<I", 100) + "ab".encode("utf-16-le") + b"\0\0", "argc=100"),
        (struct.pack("<I", 1) + "abc".encode("utf-16-le"), "no terminator"),
        (pack_command(["a"]) + b"zz", "unexpected bytes"),
    ],
)
def test_corrupt_commands_raise_clear_errors(data: bytes, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        unpack_command(data)


def test_command_arguments_are_validated() -> None:
    with pytest.raises(BundleError, match="sequence"):
        pack_command("-m main")  # type: ignore[arg-type]
    with pytest.raises(BundleError, match="NUL"):
        pack_command(["a\0b"])
