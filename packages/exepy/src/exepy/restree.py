"""The resource tree of a PE file as data: keys, name rules, a strict reader and a serialiser.

Everything here is a pure function of bytes and mappings; where the bytes come from (a PE
image, a section) is the caller's business (:mod:`exepy.image`).

A resource is addressed by ``(type, name, language)``. Types and names are integer ids
(0-65535) or strings; languages are integer ids. Windows finds a string name by
upper-casing the name it is asked for and binary-searching each directory level, so the
serialiser stores names upper-case and writes each level sorted the way the loader
searches it: named entries first (ordered by UTF-16 code units), then ids ascending.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping

from embeddedimport.petables import (
    RESOURCE_DATA_ENTRY,
    RESOURCE_DIR_STRING,
    RESOURCE_DIRECTORY,
    RESOURCE_DIRECTORY_ENTRY,
)

ResourceId = int | str
ResourceKey = tuple[ResourceId, ResourceId, int]

# The resource types Windows defines (winuser.h), for display and for the CLI.
RESOURCE_TYPES: dict[int, str] = {
    1: "RT_CURSOR",
    2: "RT_BITMAP",
    3: "RT_ICON",
    4: "RT_MENU",
    5: "RT_DIALOG",
    6: "RT_STRING",
    7: "RT_FONTDIR",
    8: "RT_FONT",
    9: "RT_ACCELERATOR",
    10: "RT_RCDATA",
    11: "RT_MESSAGETABLE",
    12: "RT_GROUP_CURSOR",
    14: "RT_GROUP_ICON",
    16: "RT_VERSION",
    17: "RT_DLGINCLUDE",
    19: "RT_PLUGPLAY",
    20: "RT_VXD",
    21: "RT_ANICURSOR",
    22: "RT_ANIICON",
    23: "RT_HTML",
    24: "RT_MANIFEST",
}

# The layouts come from embeddedimport.petables' tables (pefile's field names, in order).
_DIRECTORY = struct.Struct(RESOURCE_DIRECTORY.format)
_ENTRY = struct.Struct(RESOURCE_DIRECTORY_ENTRY.format)
_DATA_ENTRY = struct.Struct(RESOURCE_DATA_ENTRY.format)
_NAME_LENGTH = struct.Struct(RESOURCE_DIR_STRING.format)
_HIGH_BIT = 0x80000000
# Resource data is aligned like Microsoft's cvtres does it; the loader needs only 4.
DATA_ALIGNMENT = 8
_MAX_ID = 0xFFFF


class ResourceTreeError(ValueError):
    """The resource directory is corrupt or a key is not valid."""


def upper_name(name: str) -> str:
    """Upper-case *name* one UTF-16 code unit at a time, as the Windows loader does.

    Characters whose upper case is longer than one character (``ß``) are kept as they are,
    because the loader's table maps each code unit to exactly one code unit.
    """
    out = []
    for char in name:
        upper = char.upper()
        out.append(upper if len(upper) == 1 else char)
    return "".join(out)


def normalize_id(value: ResourceId, what: str) -> ResourceId:
    """Return *value* as the loader will look it up: an int id, or an upper-cased name.

    A string ``"#123"`` is the integer id 123, as for ``FindResourceW``.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ResourceTreeError(f"{what} must be an int id or a str name, got {value!r}")
    if isinstance(value, str):
        if value.startswith("#") and value[1:].isdigit():
            value = int(value[1:])
        else:
            if not value:
                raise ResourceTreeError(f"{what} name must not be empty")
            if "\0" in value:
                raise ResourceTreeError(f"{what} name must not contain NUL: {value!r}")
            if len(value.encode("utf-16-le")) // 2 > _MAX_ID:
                raise ResourceTreeError(f"{what} name is longer than 65535 UTF-16 code units")
            return upper_name(value)
    if not 0 <= value <= _MAX_ID:
        raise ResourceTreeError(f"{what} id must be in 0..65535, got {value}")
    return value


def normalize_language(value: int) -> int:
    """Check a language id (an int in 0..65535)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_ID:
        raise ResourceTreeError(f"language must be an int in 0..65535, got {value!r}")
    return value


def normalize_key(type_: ResourceId, name: ResourceId, language: int) -> ResourceKey:
    """Return the canonical ``(type, name, language)`` key."""
    return normalize_id(type_, "type"), normalize_id(name, "name"), normalize_language(language)


def sort_key(value: ResourceId) -> tuple[int, bytes, int]:
    """The order of one directory level: names first by UTF-16 code units, then ids."""
    if isinstance(value, str):
        return (0, value.encode("utf-16-be"), 0)
    return (1, b"", value)


def format_id(value: ResourceId, types: bool = False) -> str:
    """Show an id or name for people: ``10 (RT_RCDATA)``, ``200``, ``"MYNAME"``."""
    if isinstance(value, str):
        return f'"{value}"'
    if types and value in RESOURCE_TYPES:
        return f"{value} ({RESOURCE_TYPES[value]})"
    return str(value)


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def serialize(resources: Mapping[ResourceKey, bytes], base_rva: int) -> bytes:
    """Serialise *resources* as a complete resource directory placed at *base_rva*.

    Layout (the one Microsoft's tools use): every directory table breadth-first (root,
    types, names), then the data entries, then the name strings, then the data, each
    blob aligned to 8 bytes. Keys must already be normalised (:func:`normalize_key`).
    """
    tree: dict[ResourceId, dict[ResourceId, dict[int, bytes]]] = {}
    for (type_, name, language), blob in resources.items():
        tree.setdefault(type_, {}).setdefault(name, {})[language] = bytes(blob)
    types = sorted(tree, key=sort_key)
    names = {t: sorted(tree[t], key=sort_key) for t in types}
    langs = {(t, n): sorted(tree[t][n]) for t in types for n in names[t]}

    def table_size(count: int) -> int:
        return _DIRECTORY.size + _ENTRY.size * count

    # Offsets of every directory table, breadth-first.
    offset = table_size(len(types))
    name_dir_at: dict[ResourceId, int] = {}
    for t in types:
        name_dir_at[t] = offset
        offset += table_size(len(names[t]))
    lang_dir_at: dict[tuple[ResourceId, ResourceId], int] = {}
    for t in types:
        for n in names[t]:
            lang_dir_at[t, n] = offset
            offset += table_size(len(langs[t, n]))
    data_entry_at: dict[ResourceKey, int] = {}
    for t in types:
        for n in names[t]:
            for lang in langs[t, n]:
                data_entry_at[t, n, lang] = offset
                offset += _DATA_ENTRY.size
    # Name strings: a uint16 length then UTF-16LE code units, no terminator; shared.
    string_at: dict[str, int] = {}
    strings = bytearray()
    for t in types:
        for value in (t, *names[t]):
            if isinstance(value, str) and value not in string_at:
                encoded = value.encode("utf-16-le")
                string_at[value] = offset + len(strings)
                strings += _NAME_LENGTH.pack(len(encoded) // 2) + encoded
    offset = _align(offset + len(strings), DATA_ALIGNMENT)
    data_at: dict[ResourceKey, int] = {}
    for key in data_entry_at:
        data_at[key] = offset
        offset = _align(offset + len(tree[key[0]][key[1]][key[2]]), DATA_ALIGNMENT)
    total = offset

    out = bytearray(total)

    def entry_name(value: ResourceId) -> int:
        return _HIGH_BIT | string_at[value] if isinstance(value, str) else value

    def put_table(at: int, children: list[tuple[int, int]], named: int) -> None:
        _DIRECTORY.pack_into(out, at, 0, 0, 0, 0, named, len(children) - named)
        for i, (name_field, target) in enumerate(children):
            _ENTRY.pack_into(out, at + _DIRECTORY.size + i * _ENTRY.size, name_field, target)

    def named_count(values: Iterable[ResourceId]) -> int:
        return sum(isinstance(v, str) for v in values)

    put_table(0, [(entry_name(t), _HIGH_BIT | name_dir_at[t]) for t in types], named_count(types))
    for t in types:
        put_table(
            name_dir_at[t],
            [(entry_name(n), _HIGH_BIT | lang_dir_at[t, n]) for n in names[t]],
            named_count(names[t]),
        )
        for n in names[t]:
            put_table(
                lang_dir_at[t, n], [(lang, data_entry_at[t, n, lang]) for lang in langs[t, n]], 0
            )
    for key, at in data_entry_at.items():
        blob = tree[key[0]][key[1]][key[2]]
        _DATA_ENTRY.pack_into(out, at, base_rva + data_at[key], len(blob), 0, 0)
        out[data_at[key] : data_at[key] + len(blob)] = blob
    if strings:
        first = min(string_at.values())
        out[first : first + len(strings)] = strings
    return bytes(out)


def parse(read: Callable[[int, int], bytes], base_rva: int) -> dict[ResourceKey, bytes]:
    """Read the resource directory at *base_rva* strictly; return ``{key: data}``.

    *read(rva, size)* returns exactly *size* bytes of the mapped image or raises
    :class:`ResourceTreeError`. The tree must have exactly three levels (type, name,
    language) with integer languages; anything else is reported as corrupt rather than
    guessed at. Names are returned upper-cased, as the loader matches them.
    """
    result: dict[ResourceKey, bytes] = {}
    # A directory reached twice would let a small corrupt tree describe an endless one.
    visited: set[int] = set()

    def read_at(offset: int, size: int, what: str) -> bytes:
        if offset < 0 or offset > 0x7FFFFFFF:
            raise ResourceTreeError(f"{what} at offset {offset:#x} is outside the directory")
        return read(base_rva + offset, size)

    def read_name(offset: int) -> str:
        (length,) = _NAME_LENGTH.unpack(read_at(offset, _NAME_LENGTH.size, "resource name"))
        raw = read_at(offset + _NAME_LENGTH.size, 2 * length, "resource name")
        return upper_name(raw.decode("utf-16-le", errors="surrogatepass"))

    def entries(offset: int, level: str) -> list[tuple[ResourceId, int, bool]]:
        if offset in visited:
            raise ResourceTreeError(f"{level} directory at {offset:#x} is reached twice (a loop)")
        visited.add(offset)
        header = read_at(offset, _DIRECTORY.size, f"{level} directory")
        named, ids = _DIRECTORY.unpack(header)[4:]
        raw = read_at(offset + _DIRECTORY.size, _ENTRY.size * (named + ids), f"{level} entries")
        out: list[tuple[ResourceId, int, bool]] = []
        seen: set[ResourceId] = set()
        for i in range(named + ids):
            name_field, target = _ENTRY.unpack_from(raw, i * _ENTRY.size)
            ident: ResourceId = (
                read_name(name_field & ~_HIGH_BIT) if name_field & _HIGH_BIT else name_field
            )
            if isinstance(ident, int) and ident > _MAX_ID:
                raise ResourceTreeError(f"{level} id {ident:#x} is out of range (corrupt entry)")
            if ident in seen:
                raise ResourceTreeError(f"duplicate {level} entry {format_id(ident)}")
            seen.add(ident)
            out.append((ident, target & ~_HIGH_BIT, bool(target & _HIGH_BIT)))
        return out

    for type_, type_dir, is_dir in entries(0, "type"):
        if not is_dir:
            raise ResourceTreeError(f"type {format_id(type_)} points at data, not a directory")
        for name, name_dir, is_dir in entries(type_dir, "name"):
            if not is_dir:
                raise ResourceTreeError(
                    f"resource {format_id(type_)}/{format_id(name)} points at data, "
                    "not a language directory"
                )
            for language, data_entry, is_dir in entries(name_dir, "language"):
                if is_dir or isinstance(language, str):
                    raise ResourceTreeError(
                        f"resource {format_id(type_)}/{format_id(name)} has a fourth level "
                        "or a named language; only three levels are valid"
                    )
                rva, size, _codepage, _reserved = _DATA_ENTRY.unpack(
                    read_at(data_entry, _DATA_ENTRY.size, "data entry")
                )
                result[type_, name, language] = read(rva, size)
    return result
