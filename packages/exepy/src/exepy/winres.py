"""Standard Windows resources exepy writes: icons, version information, manifests.

Pure functions from bytes or mappings to resource data, plus ``apply_*`` helpers that put
them into a :class:`~exepy.editor.ResourceEditor` replacing what the base had.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from embeddedimport.petables import Structure

from exepy.editor import ResourceEditor
from exepy.restree import ResourceKey

RT_ICON = 3
RT_GROUP_ICON = 14
RT_VERSION = 16
RT_MANIFEST = 24
LANG_EN_US = 1033
CODEPAGE_UNICODE = 1200


class ResourceFormatError(ValueError):
    """An icon, version string or manifest given to exepy is not valid."""


# Icons ---------------------------------------------------------------------------------

# A .ico file is an ICONDIR, its ICONDIRENTRYs, then the images; an RT_GROUP_ICON resource
# is the same ICONDIR followed by GRPICONDIRENTRYs that name RT_ICON ids instead of offsets.
ICONDIR = Structure("ICONDIR", "H,idReserved H,idType H,idCount")
_ICON_FIELDS = "B,bWidth B,bHeight B,bColorCount B,bReserved H,wPlanes H,wBitCount I,dwBytesInRes"
ICONDIRENTRY = Structure("ICONDIRENTRY", _ICON_FIELDS + " I,dwImageOffset")
GRPICONDIRENTRY = Structure("GRPICONDIRENTRY", _ICON_FIELDS + " H,nId")
_ICONDIR = struct.Struct(ICONDIR.format)
_ICONDIRENTRY = struct.Struct(ICONDIRENTRY.format)
_GRPICONDIRENTRY = struct.Struct(GRPICONDIRENTRY.format)


@dataclass(frozen=True)
class IconImage:
    """One image of a .ico file: its directory fields and its bytes (BMP DIB or PNG)."""

    width: int
    height: int
    colors: int
    planes: int
    bit_count: int
    data: bytes


def parse_ico(data: bytes) -> list[IconImage]:
    """The images of a .ico file; raise :class:`ResourceFormatError` naming what is wrong."""
    if len(data) < _ICONDIR.size:
        raise ResourceFormatError(f"not an .ico file: shorter than its {_ICONDIR.size}-byte header")
    reserved, kind, count = _ICONDIR.unpack_from(data)
    if reserved != 0 or kind != 1:
        raise ResourceFormatError(
            "not an .ico file: the header must start with 0, 1 (1 = icon; 2 would be a cursor)"
        )
    if count == 0:
        raise ResourceFormatError("the .ico file holds no images")
    if len(data) < _ICONDIR.size + _ICONDIRENTRY.size * count:
        raise ResourceFormatError(f"truncated .ico file: {count} directory entries announced")
    images = []
    for i in range(count):
        width, height, colors, _, planes, bits, size, offset = _ICONDIRENTRY.unpack_from(
            data, _ICONDIR.size + _ICONDIRENTRY.size * i
        )
        if size == 0 or offset + size > len(data):
            raise ResourceFormatError(
                f"truncated .ico file: image {i} needs bytes {offset}..{offset + size}, "
                f"the file has {len(data)}"
            )
        images.append(IconImage(width, height, colors, planes, bits, data[offset : offset + size]))
    return images


def group_icon(images: list[IconImage], first_id: int) -> bytes:
    """An RT_GROUP_ICON blob naming RT_ICON ids *first_id*, *first_id* + 1, ..."""
    out = bytearray(_ICONDIR.pack(0, 1, len(images)))
    for i, img in enumerate(images):
        out += _GRPICONDIRENTRY.pack(
            img.width,
            img.height,
            img.colors,
            0,
            img.planes,
            img.bit_count,
            len(img.data),
            first_id + i,
        )
    return bytes(out)


def _group_members(blob: bytes) -> list[int]:
    """RT_ICON ids an RT_GROUP_ICON refers to (empty when the blob is malformed)."""
    if len(blob) < _ICONDIR.size:
        return []
    count = ICONDIR.get(blob, 0, "idCount")
    entries = range(
        _ICONDIR.size, _ICONDIR.size + _GRPICONDIRENTRY.size * count, _GRPICONDIRENTRY.size
    )
    if len(blob) < entries.stop:
        return []
    return [GRPICONDIRENTRY.get(blob, at, "nId") for at in entries]


def apply_icon(editor: ResourceEditor, ico: bytes) -> list[ResourceKey]:
    """Make *ico* the application icon; return the keys written.

    Explorer shows the first RT_GROUP_ICON, so that group (and the RT_ICON images only it
    uses) is replaced, keeping its name and language; other icons stay.
    """
    images = parse_ico(ico)
    groups = editor.find(RT_GROUP_ICON)
    group_key: ResourceKey = groups[0] if groups else (RT_GROUP_ICON, 1, 0)
    language = group_key[2]
    if groups:
        old = set(_group_members(editor.get(*group_key[:2], language=language)))
        still_used = {
            member
            for key in groups[1:]
            for member in _group_members(editor.get(key[0], key[1], key[2]))
        }
        for member in old - still_used:
            editor.remove(RT_ICON, member)
        editor.remove(*group_key)
    used = {key[1] for key in editor.find(RT_ICON) if isinstance(key[1], int)}
    first = max(used, default=0) + 1
    if first + len(images) > 0xFFFF:
        raise ResourceFormatError("no free RT_ICON ids left in the base executable")
    written = [editor.set(RT_ICON, first + i, img.data, language) for i, img in enumerate(images)]
    written.append(editor.set(group_key[0], group_key[1], group_icon(images, first), language))
    return written


# Version information --------------------------------------------------------------------

STANDARD_VERSION_KEYS = (
    "Comments",
    "CompanyName",
    "FileDescription",
    "FileVersion",
    "InternalName",
    "LegalCopyright",
    "LegalTrademarks",
    "OriginalFilename",
    "PrivateBuild",
    "ProductName",
    "ProductVersion",
    "SpecialBuild",
)
_VERSION_NUMBER = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.(\d+))?")


def parse_version_number(text: str) -> tuple[int, int, int, int]:
    """``"1.2.3"`` -> (1, 2, 3, 0); raise :class:`ResourceFormatError` if no number leads."""
    match = _VERSION_NUMBER.match(text)
    if not match:
        raise ResourceFormatError(
            f"version {text!r} must start with up to four dot-separated numbers, e.g. 1.2.3.4"
        )
    parts = tuple(int(p) if p else 0 for p in match.groups())
    if any(p > 0xFFFF for p in parts):
        raise ResourceFormatError(f"version {text!r}: each number must be at most 65535")
    return parts  # type: ignore[return-value]


def _block(key: str, value: bytes, value_length: int, text: bool, children: list[bytes]) -> bytes:
    """One VS_VERSIONINFO-style node: header, NUL-terminated UTF-16 key, value, children."""
    body = bytearray(struct.pack("<HHH", 0, value_length, 1 if text else 0))
    body += (key + "\0").encode("utf-16-le")
    body += bytes(-len(body) % 4)
    body += value
    for child in children:
        body += bytes(-len(body) % 4)
        body += child
    struct.pack_into("<H", body, 0, len(body))
    return bytes(body)


def version_info(
    strings: Mapping[str, str], language: int = LANG_EN_US, codepage: int = CODEPAGE_UNICODE
) -> bytes:
    """An RT_VERSION blob (VS_VERSIONINFO) with *strings* and a fixed part derived from them.

    ``FileVersion`` and ``ProductVersion`` (each defaults to the other, then 0.0.0.0) also
    set the numeric versions Windows shows in file properties.
    """
    for key, value in strings.items():
        if not key or "\0" in key or "\0" in value:
            raise ResourceFormatError(f"version key {key!r} and its value must be non-empty text")
    file_version = parse_version_number(
        strings.get("FileVersion", strings.get("ProductVersion", "0"))
    )
    product_version = parse_version_number(
        strings.get("ProductVersion", strings.get("FileVersion", "0"))
    )
    fixed = struct.pack(
        "<13I",
        0xFEEF04BD,  # signature
        0x00010000,  # structure version 1.0
        file_version[0] << 16 | file_version[1],
        file_version[2] << 16 | file_version[3],
        product_version[0] << 16 | product_version[1],
        product_version[2] << 16 | product_version[3],
        0x3F,  # VS_FFI_FILEFLAGSMASK
        0,  # flags
        0x00040004,  # VOS_NT_WINDOWS32
        1,  # VFT_APP
        0,
        0,
        0,
    )
    entries = [
        _block(key, (value + "\0").encode("utf-16-le"), len(value) + 1, True, [])
        for key, value in strings.items()
    ]
    table = _block(f"{language:04X}{codepage:04X}", b"", 0, True, entries)
    string_info = _block("StringFileInfo", b"", 0, True, [table])
    translation = _block("Translation", struct.pack("<HH", language, codepage), 4, False, [])
    var_info = _block("VarFileInfo", b"", 0, True, [translation])
    return _block("VS_VERSION_INFO", fixed, len(fixed), False, [string_info, var_info])


def apply_version_info(editor: ResourceEditor, strings: Mapping[str, str]) -> ResourceKey:
    """Replace the base's version resource(s) with one built from *strings*."""
    existing = editor.find(RT_VERSION)
    language = existing[0][2] if existing and existing[0][2] else LANG_EN_US
    editor.remove(RT_VERSION)
    return editor.set(RT_VERSION, 1, version_info(strings, language), language)


# Manifest ------------------------------------------------------------------------------


def apply_manifest(editor: ResourceEditor, manifest: bytes) -> ResourceKey:
    """Replace the application manifest (RT_MANIFEST id 1) with *manifest* (XML bytes)."""
    text = manifest.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text.startswith(b"<"):
        raise ResourceFormatError("the manifest must be an XML document (it should start with '<')")
    existing = editor.find(RT_MANIFEST, 1)
    language = existing[0][2] if existing else 0
    editor.remove(RT_MANIFEST, 1)
    return editor.set(RT_MANIFEST, 1, manifest, language)
