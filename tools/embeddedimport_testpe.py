"""embeddedimport's test helpers: real PE bases and a minimal resource-section writer.

tests/embeddedimport/ and tools/bench/embeddedimport.py (its fallback without exepy) import
it; it lives under tools/ because tools never import from tests/.

The writer is deliberately independent of the package under test: it lays out the
resource tree by hand (struct.pack, Windows ordering) in a new last section of a real PE
file, so the reader and importer are tested against bytes they did not produce.
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

MakeExe = Callable[..., Path]
"""The ``make_exe`` fixture: (files, command, name, bundle, extra) -> path of a new exe."""

WINE_DIRS = ["/usr/lib/x86_64-linux-gnu/wine", "/usr/lib/wine", "/usr/lib64/wine"]


def _distlib_launchers() -> list[str]:
    found: set[str] = set()
    for entry in sys.path:
        found.update(str(p) for p in (Path(entry) / "pip" / "_vendor" / "distlib").glob("*.exe"))
    return sorted(found)


def real_pe_files() -> list[str]:
    """Real Windows binaries available offline: Wine's own and pip's distlib launchers."""
    files: list[str] = []
    for root in WINE_DIRS:
        for arch in ("x86_64-windows", "i386-windows"):
            files += sorted(str(p) for p in (Path(root) / arch).glob("*.exe"))
            files += sorted(str(p) for p in (Path(root) / arch).glob("*.dll"))
    return files + _distlib_launchers()


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def original_bundle(files: Sequence[tuple[str, bytes]], separator: str = "\\") -> bytes:
    """The original exepy layout, written out by hand (backslash names, NUL-terminated)."""
    offsets, blob, position = [], b"", 0
    for _, content in files:
        offsets.append(position)
        blob += content + b"\0"
        position += len(content) + 1
    compressed = zlib.compress(blob)
    names = b"".join(name.replace("/", separator).encode("ascii") + b"\0" for name, _ in files)
    header = struct.pack("<III", len(compressed), len(blob), len(files))
    return header + struct.pack(f"<{len(files)}I", *offsets) + compressed + names


def original_command(argv: Sequence[str]) -> bytes:
    """Resource 201 as the original wrote it: uint32 argc, then the arguments joined with
    NUL terminators and put in a ``ctypes.create_unicode_buffer``, which adds one more NUL.
    """
    joined = "".join(a + "\0" for a in argv) + "\0"
    return struct.pack("<I", len(argv)) + joined.encode("utf-16-le", "surrogatepass")


def original_extract_command(data: bytes) -> list[str] | None:
    """How the original's ``extract`` read resource 201 (the same steps, without ctypes).

    It read argc, then each argument up to a UTF-16 NUL, stepped past it, and called the
    resource corrupted when that step reached the end of the data: a resource must go on
    after the last argument's terminator. Empty data meant "no command line".
    """
    if not data:
        return None
    (argc,) = struct.unpack_from("<I", data)
    body = data[4:] + b"\0\0"  # the sentinel it appended
    end, position, argv = len(data) - 4, 0, []
    for _ in range(argc):
        stop = position
        while body[stop : stop + 2] != b"\0\0":
            stop += 2
        argv.append(body[position:stop].decode("utf-16-le", "surrogatepass"))
        position = stop + 2
        if position >= end:
            raise RuntimeError("command string is corrupted.")
    return argv


def _sort_key(key: int | str) -> tuple[int, int | str]:
    # Windows binary-searches: named entries first (upper-case order), then ids ascending.
    return (0, key.upper()) if isinstance(key, str) else (1, key)


def build_resource_section(resources: dict[tuple, bytes], section_rva: int) -> bytes:
    """Serialise a full resource tree (three levels) for a section mapped at ``section_rva``."""
    tree: dict = {}
    for (type_, name, lang), data in resources.items():
        tree.setdefault(type_, {}).setdefault(name, {})[lang] = data

    # Layout: all directories (breadth first), then data entries, then strings, then data.
    directories: list[tuple[list, list]] = []  # (keys, children) per directory

    def count_dirs(node: dict, depth: int) -> None:
        directories.append((sorted(node, key=_sort_key), []))
        if depth < 3:
            for key in sorted(node, key=_sort_key):
                count_dirs(node[key], depth + 1)

    count_dirs(tree, 1)
    dir_size = sum(16 + 8 * len(keys) for keys, _ in directories)
    leaves = [(t, n, lang) for t in tree for n in tree[t] for lang in tree[t][n]]
    entries_start = dir_size
    strings_start = entries_start + 16 * len(leaves)
    names = sorted({k for t in tree for k in [t, *tree[t]] if isinstance(k, str)})
    string_offsets, strings = {}, b""
    for name in names:
        string_offsets[name] = strings_start + len(strings)
        encoded = name.encode("utf-16-le")
        strings += struct.pack("<H", len(encoded) // 2) + encoded
    data_start = _align(strings_start + len(strings), 8)

    out = bytearray(data_start)
    leaf_offset: dict[tuple, int] = {}
    data_blob = b""
    for index, leaf in enumerate(sorted(leaves, key=lambda k: [_sort_key(x) for x in k])):
        t, n, lang = leaf
        data = tree[t][n][lang]
        rva = section_rva + data_start + len(data_blob)
        struct.pack_into("<IIII", out, entries_start + 16 * index, rva, len(data), 0, 0)
        leaf_offset[leaf] = entries_start + 16 * index
        data_blob += data + b"\0" * (_align(len(data), 8) - len(data))
    out[strings_start : strings_start + len(strings)] = strings

    position = 0

    def emit(node: dict, path: tuple, depth: int) -> int:
        nonlocal position
        here = position
        keys = sorted(node, key=_sort_key)
        named = sum(isinstance(k, str) for k in keys)
        struct.pack_into("<IIHHHH", out, here, 0, 0, 4, 0, named, len(keys) - named)
        position += 16 + 8 * len(keys)
        for index, key in enumerate(keys):
            ident = (string_offsets[key] | 0x80000000) if isinstance(key, str) else key
            if depth < 3:
                target = emit(node[key], (*path, key), depth + 1) | 0x80000000
            else:
                target = leaf_offset[(*path, key)]
            struct.pack_into("<II", out, here + 16 + 8 * index, ident, target)
        return here

    emit(tree, (), 1)
    return bytes(out) + data_blob


def add_resources(base: bytes, resources: dict[tuple, bytes], keep: dict[tuple, bytes]) -> bytes:
    """Return ``base`` with a new last section holding ``keep`` plus ``resources``.

    The resource data directory is pointed at the new section; everything else (old
    sections, overlay) stays byte-identical. Raises ValueError if the headers have no
    room for one more section header.
    """
    image = bytearray(base)
    pe = struct.unpack_from("<I", image, 0x3C)[0]
    sections = struct.unpack_from("<H", image, pe + 6)[0]
    optional_size = struct.unpack_from("<H", image, pe + 20)[0]
    optional = pe + 24
    magic = struct.unpack_from("<H", image, optional)[0]
    section_alignment, file_alignment = struct.unpack_from("<II", image, optional + 32)
    directories = optional + (96 if magic == 0x10B else 112)
    table = optional + optional_size
    new_header = table + 40 * sections
    pointers = [struct.unpack_from("<I", image, table + 40 * i + 20)[0] for i in range(sections)]
    first_raw = min([p for p in pointers if p] or [len(image)])
    size_of_headers = struct.unpack_from("<I", image, optional + 60)[0]
    if new_header + 40 > min(first_raw, size_of_headers):
        raise ValueError("no room for another section header")
    last_end = max(
        _align(
            struct.unpack_from("<I", image, table + 40 * i + 12)[0]
            + max(struct.unpack_from("<I", image, table + 40 * i + 8)[0], 1),
            section_alignment,
        )
        for i in range(sections)
    )
    rva = last_end
    merged = dict(keep)
    merged.update(resources)
    body = build_resource_section(merged, rva)
    raw_size = _align(len(body), file_alignment)
    pointer = _align(len(image), file_alignment)
    image += b"\0" * (pointer - len(image))
    image += body + b"\0" * (raw_size - len(body))
    struct.pack_into(
        "<8sIIIIIIHHI",
        image,
        new_header,
        b".tstrsrc",
        len(body),
        rva,
        raw_size,
        pointer,
        0,
        0,
        0,
        0,
        0x40000040,
    )
    struct.pack_into("<H", image, pe + 6, sections + 1)
    struct.pack_into("<I", image, optional + 56, _align(rva + len(body), section_alignment))
    struct.pack_into("<II", image, directories + 8 * 2, rva, len(body))
    return bytes(image)
