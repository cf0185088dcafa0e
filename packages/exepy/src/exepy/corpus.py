"""Check exepy against real PE files: ``python -m exepy.corpus [PATH...]``.

For each PE file (default: every Windows binary Wine ships on this machine, pip's distlib
launchers, and PyInstaller bootloaders found next to them), add a bundle and a command
line the way ``exepy build`` does, then verify the output with pefile, independently of
exepy's own reader: it parses, every original resource is byte-identical, the new ones are
present, the overlay is identical, the checksum verifies, SizeOfImage, SizeOfInitializedData,
the section table and the resource data directory are exact. Prints one line per failure
and a summary; exits 1 if anything failed, 2 if there was nothing to check, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import itertools
import os
import sys
import time
import warnings
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pefile

from exepy import __version__, image
from exepy.editor import ResourceEditor
from exepy.restree import ResourceKey, upper_name

WINE_DIRS = (
    "/usr/lib/x86_64-linux-gnu/wine/x86_64-windows",
    "/usr/lib/x86_64-linux-gnu/wine/i386-windows",
    "/usr/lib/wine/x86_64-windows",
    "/usr/lib/wine/i386-windows",
    "/usr/lib64/wine/x86_64-windows",
)


def wine_binaries() -> list[Path]:
    """Wine's own Windows binaries on this machine: exes, dlls, drivers, control panels...

    Sorted; empty without Wine. Files that turn out not to be PE images (type libraries)
    are reported as skipped by the checks, not hidden here.
    """
    found: list[Path] = []
    for folder in WINE_DIRS:
        found.extend(p for p in Path(folder).glob("*") if p.is_file())
    return sorted(set(found))


def distlib_launchers() -> list[Path]:
    """The launcher exes vendored in pip (x86, x64, ARM64), if pip is installed."""
    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = Path(next(iter(spec.submodule_search_locations))) / "_vendor" / "distlib"
    return sorted(folder.glob("*.exe"))


def expand(items: Iterable[Path]) -> list[Path]:
    """Files as given; folders replaced by the ``.exe`` and ``.dll`` files found under them."""
    paths: list[Path] = []
    for item in items:
        if item.is_dir():
            paths.extend(sorted(p for p in item.rglob("*") if p.suffix.lower() in (".exe", ".dll")))
        else:
            paths.append(item)
    return paths


def default_corpus(extra: Iterable[Path] = ()) -> list[Path]:
    """Wine's binaries, distlib's launchers, and *extra* files or folders (searched for PE)."""
    return [*wine_binaries(), *distlib_launchers(), *expand(extra)]


def parse_with_pefile(data: bytes) -> pefile.PE:
    """pefile's view of *data*: headers and the resource directory only (fast)."""
    pe = pefile.PE(data=data, fast_load=True)
    pe.parse_data_directories(
        directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]]
    )
    return pe


def pefile_resources(pe: pefile.PE | bytes) -> dict[ResourceKey, bytes]:
    """Every resource as pefile sees it (names upper-cased, as the loader matches them)."""
    if isinstance(pe, bytes):
        pe = parse_with_pefile(pe)
    found: dict[ResourceKey, bytes] = {}
    root = getattr(pe, "DIRECTORY_ENTRY_RESOURCE", None)
    if root is None:
        return found

    def ident(entry: pefile.ResourceDirEntryData) -> int | str:
        return entry.id if entry.name is None else upper_name(entry.name.decode("utf-8"))

    for type_entry in root.entries:
        for name_entry in type_entry.directory.entries:
            for lang_entry in name_entry.directory.entries:
                data = lang_entry.data.struct
                blob = pe.get_data(data.OffsetToData, data.Size)
                found[ident(type_entry), ident(name_entry), lang_entry.id] = blob
    return found


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def verify_rewrite(
    original: bytes, output: bytes, expected: Mapping[ResourceKey, bytes]
) -> list[str]:
    """Problems found when checking *output* (exepy's rewrite of *original*) with pefile.

    *expected* is the full resource set the output must hold. Returns ``[]`` when sound.
    """
    problems: list[str] = []
    before = pefile.PE(data=original, fast_load=True)
    try:
        after = parse_with_pefile(output)
    except pefile.PEFormatError as exc:
        return [f"pefile cannot parse the output: {exc}"]
    got = pefile_resources(after)
    for key, blob in expected.items():
        if key not in got:
            problems.append(f"resource {key} missing")
        elif got[key] != blob:
            problems.append(f"resource {key} differs ({len(got[key])} vs {len(blob)} bytes)")
    for key in set(got) - set(expected):
        problems.append(f"unexpected resource {key}")
    if not after.verify_checksum():
        problems.append("checksum does not verify")
    opt = after.OPTIONAL_HEADER
    sections = after.sections
    end = max(s.VirtualAddress + (s.Misc_VirtualSize or s.SizeOfRawData) for s in sections)
    if opt.SizeOfImage != _align(end, opt.SectionAlignment):
        problems.append(
            f"SizeOfImage {opt.SizeOfImage:#x}, expected {_align(end, opt.SectionAlignment):#x}"
        )
    init = sum(
        s.SizeOfRawData
        for s in sections
        if s.Characteristics & image.IMAGE_SCN_CNT_INITIALIZED_DATA
    )
    init_before = sum(
        s.SizeOfRawData
        for s in before.sections
        if s.Characteristics & image.IMAGE_SCN_CNT_INITIALIZED_DATA
    )
    expected_init = (before.OPTIONAL_HEADER.SizeOfInitializedData + init - init_before) & 0xFFFFFFFF
    if opt.SizeOfInitializedData != expected_init:
        problems.append(
            f"SizeOfInitializedData {opt.SizeOfInitializedData:#x}, expected {expected_init:#x}"
        )
    # Sections: the old ones unchanged in place (except the rewritten resource section),
    # no overlap in memory or in the file, raw data file-aligned.
    spans = sorted(
        (s.VirtualAddress, s.VirtualAddress + (s.Misc_VirtualSize or s.SizeOfRawData))
        for s in sections
    )
    for (_, end_a), (start_b, _) in itertools.pairwise(spans):
        if start_b < end_a:
            problems.append("sections overlap in memory")
    for old, new in zip(before.sections, sections[: len(before.sections)], strict=True):
        if (old.VirtualAddress, old.PointerToRawData) != (new.VirtualAddress, new.PointerToRawData):
            problems.append(f"section {old.Name!r} moved")
        elif old.VirtualAddress != after.OPTIONAL_HEADER.DATA_DIRECTORY[2].VirtualAddress and (
            old.get_data() != new.get_data()
        ):
            problems.append(f"section {old.Name!r} content changed")
    resource_dir = opt.DATA_DIRECTORY[2]
    holder = after.get_section_by_rva(resource_dir.VirtualAddress)
    if (
        holder is None
        or resource_dir.VirtualAddress + resource_dir.Size
        > holder.VirtualAddress + max(holder.Misc_VirtualSize, holder.SizeOfRawData)
    ):
        problems.append("resource data directory is not inside one section")
    # Overlay identical (minus a removed certificate table).
    old_overlay = before.get_overlay()
    cert = before.OPTIONAL_HEADER.DATA_DIRECTORY[4]
    if old_overlay is not None and cert.VirtualAddress and cert.Size:
        start = cert.VirtualAddress - before.get_overlay_data_start_offset()
        old_overlay = old_overlay[:start] + old_overlay[start + cert.Size :]
    if (old_overlay or b"") != (after.get_overlay() or b""):
        problems.append("overlay differs")
    if before.FILE_HEADER.PointerToSymbolTable:
        old_start = before.get_overlay_data_start_offset()
        new_start = after.get_overlay_data_start_offset()
        expected_pointer = before.FILE_HEADER.PointerToSymbolTable - old_start + new_start
        if old_start is not None and after.FILE_HEADER.PointerToSymbolTable != expected_pointer:
            problems.append("COFF symbol table pointer was not moved with the overlay")
    return problems


@dataclass
class CorpusResult:
    """What a corpus run found."""

    checked: int = 0
    in_place: int = 0
    new_section: int = 0
    with_overlay: int = 0
    no_resources: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0


def sample_bundle(path: Path) -> tuple[bytes, bytes]:
    """A bundle and a command line for *path*, as ``exepy build`` would write them."""
    from embeddedimport import bundle

    files = [
        ("main.py", f"print({path.name!r})\n".encode()),
        ("pkg/data.bin", bytes(range(256)) * 8),
    ]
    return bundle.pack(files), bundle.pack_command(["-m", "main"])


def with_zip(launcher: bytes) -> bytes:
    """*launcher* as distlib uses it: a shebang line and a zip with ``__main__.py`` appended."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("__main__.py", "import sys\nprint(sys.argv)\n")
    return launcher + b"#!python.exe\r\n" + buffer.getvalue()


def zip_main(data: bytes) -> bytes | None:
    """The ``__main__.py`` of the zip appended to *data*, or None if it does not open."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.read("__main__.py")
    except (zipfile.BadZipFile, KeyError):
        return None


def check_file(path: Path, result: CorpusResult, original: bytes | None = None) -> None:
    """Add a bundle to the PE at *path* and verify the output; record into *result*."""
    from embeddedimport import bundle

    if original is None:
        try:
            original = path.read_bytes()
        except OSError as exc:
            result.skipped[str(path)] = f"cannot read it: {exc.strerror or exc}"
            return
    try:
        editor = ResourceEditor(original)
    except image.PEError as exc:
        result.skipped[str(path)] = str(exc)
        return
    resources = editor.resources
    blob, command = sample_bundle(path)
    editor.set(bundle.RT_RCDATA, bundle.BUNDLE_ID, blob)
    editor.set(bundle.RT_RCDATA, bundle.COMMAND_ID, command)
    expected = editor.resources
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rewrite = image.replace_resources(original, expected)
    except image.PEError as exc:
        result.failed[str(path)] = [f"exepy refused it: {exc}"]
        return
    problems = verify_rewrite(original, rewrite.data, expected)
    appended = zip_main(original)
    if appended is not None and zip_main(rewrite.data) != appended:
        problems.append("the appended zip no longer opens")
    layout = image.read_layout(original)
    result.checked += 1
    result.in_place += rewrite.in_place
    result.new_section += not rewrite.in_place
    result.with_overlay += layout.raw_end < len(original)
    result.no_resources += not resources
    if problems:
        result.failed[str(path)] = problems


def run(paths: Sequence[Path]) -> CorpusResult:
    """Check every file in *paths*."""
    result = CorpusResult()
    started = time.perf_counter()
    for path in paths:
        check_file(path, result)
        if (
            path.parent.name == "distlib"
            and path.suffix == ".exe"
            and str(path) not in result.skipped
        ):
            # How distlib really uses its launchers: with a zip appended.
            check_file(path.with_name(path.name + "+zip"), result, with_zip(path.read_bytes()))
    result.seconds = time.perf_counter() - started
    return result


PROG = "python -m exepy.corpus"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: check the default corpus plus any given files or folders.

    Exit status: 0 all sound, 1 a rewrite failed its checks, 2 nothing to check or a
    given path is missing, 130 interrupted (Ctrl-C), 141 standard output was closed.
    """
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="more PE files or folders to check")
    parser.add_argument("--only", action="store_true", help="check only the given paths")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = parser.parse_args(argv)
    try:
        return _check(args.paths, only=args.only)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        # `... | head`: stop quietly, and keep the interpreter's final flush from failing too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _error(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2


def _check(given: Sequence[Path], *, only: bool) -> int:
    missing = next((item for item in given if not item.exists()), None)
    if missing is not None:
        return _error(f"{missing}: no such file or folder; give PE files (.exe, .dll) or folders")
    paths = expand(given) if only else default_corpus(given)
    if not paths:
        return _error(
            "no PE files to check: Wine's binaries and pip's launchers are not installed "
            "here; install wine or pass PE files or folders"
        )
    result = run(paths)
    for path, problems in result.failed.items():
        for problem in problems:
            sys.stdout.write(f"FAIL {path}: {problem}\n")
    for path, why in result.skipped.items():
        sys.stdout.write(f"SKIP {path}: {why}\n")
    sys.stdout.write(
        f"{len(paths)} files: {result.checked} rewritten and verified "
        f"({result.in_place} in place, {result.new_section} in a new section; "
        f"{result.with_overlay} with overlay data, {result.no_resources} without resources), "
        f"{len(result.failed)} failed, {len(result.skipped)} not PE files exepy edits; "
        f"{result.seconds:.1f} s\n"
    )
    sys.stdout.flush()
    return 1 if result.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
