"""The resource tree serialiser against its strict reader, on generated trees (hypothesis)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from exepy import restree
from hypothesis import given, settings
from hypothesis import strategies as st

ids = st.integers(0, 0xFFFF)
names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=12
)
keys = st.tuples(st.one_of(ids, names), st.one_of(ids, names), ids)
Key = tuple[int | str, int | str, int]
trees = st.dictionaries(keys, st.binary(max_size=40), max_size=25)


def read_from(blob: bytes, base: int) -> Callable[[int, int], bytes]:
    def read(rva: int, size: int) -> bytes:
        start = rva - base
        if start < 0 or start + size > len(blob):
            raise restree.ResourceTreeError("out of range")
        return blob[start : start + size]

    return read


def normalized(tree: dict[Key, bytes]) -> dict[restree.ResourceKey, bytes]:
    out = {}
    for (t, n, lang), data in tree.items():
        out[restree.normalize_key(t, n, lang)] = data
    return out


@settings(max_examples=150, deadline=None)
@given(trees, st.integers(0x1000, 0x7FFF0000).map(lambda v: v & ~7))
def test_roundtrip_and_loader_order(tree: dict[Key, bytes], base: int) -> None:
    resources = normalized(tree)
    blob = restree.serialize(resources, base)
    assert restree.parse(read_from(blob, base), base) == resources

    # Every directory level: named entries first, sorted by UTF-16 code units, then ids.
    def check_level(offset: int, depth: int) -> None:
        named, count_ids = struct.unpack_from("<HH", blob, offset + 12)
        entries = [
            struct.unpack_from("<II", blob, offset + 16 + 8 * i) for i in range(named + count_ids)
        ]
        keys_seen = []
        for i, (name_field, target) in enumerate(entries):
            is_named = bool(name_field & 0x80000000)
            assert is_named == (i < named)
            if is_named:
                at = name_field & 0x7FFFFFFF
                (length,) = struct.unpack_from("<H", blob, at)
                text = blob[at + 2 : at + 2 + 2 * length].decode("utf-16-le", "surrogatepass")
                assert text == restree.upper_name(text)
                keys_seen.append(restree.sort_key(text))
            else:
                keys_seen.append(restree.sort_key(name_field))
            if depth < 2:
                check_level(target & 0x7FFFFFFF, depth + 1)
            else:
                rva, _size = struct.unpack_from("<II", blob, target)
                assert (rva - base) % restree.DATA_ALIGNMENT == 0
        assert keys_seen == sorted(keys_seen) and len(set(keys_seen)) == len(keys_seen)

    check_level(0, 0)
