"""The whole corpus through Windows' loader: `python tests/exepy/loader_corpus.py [PATHS...]`.

For every file of the corpus (``exepy.corpus.default_corpus``), add the sample bundle and
command line, save the output, and let resdump.exe (harness/resdump.c, built with mingw)
enumerate and hash its resources under Wine: every resource must be found with identical
bytes. The pytest suite runs a sample of this (test_exepy_wine.py); this script is the
full run, minutes long. Needs wine, wineserver and x86_64-w64-mingw32-gcc.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

from embeddedimport import bundle  # noqa: E402
from exepy import corpus, image  # noqa: E402
from exepy.editor import ResourceEditor  # noqa: E402
from exepy_support import Harness, compile_harness, expected_dump, headless_wine  # noqa: E402


def main(argv: list[str]) -> int:
    paths = corpus.default_corpus([Path(p) for p in argv])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="exepy-loader-") as tmp:
        work = Path(tmp)
        exe = compile_harness("resdump.c", work)
        with headless_wine(work / "prefix", work) as wine:
            harness = Harness(wine, exe)
            checked, failed, skipped, resources = check_all(paths, harness, work)
    for line in failed:
        print("FAIL", line)
    print(
        f"{len(paths)} files: {checked} edited and enumerated by the Windows loader (Wine), "
        f"{resources} resources compared, {len(failed)} failed, {skipped} not PE; "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 1 if failed else 0


def check_all(paths: list[Path], harness: Harness, work: Path) -> tuple[int, list[str], int, int]:
    """(files checked, failure lines, files skipped as not PE, resources compared)."""
    checked, failed, skipped, resources = 0, [], 0, 0
    for path in paths:
        try:
            editor = ResourceEditor(path.read_bytes())
        except image.PEError:
            skipped += 1
            continue
        blob, command = corpus.sample_bundle(path)
        editor.set(bundle.RT_RCDATA, bundle.BUNDLE_ID, blob)
        editor.set(bundle.RT_RCDATA, bundle.COMMAND_ID, command)
        out = work / ("out" + path.suffix)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            editor.save(out)
        try:
            dump = harness.dump(out)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            failed.append(f"{path}: resdump failed: {exc}")
            continue
        expected = expected_dump(editor.resources)
        checked += 1
        resources += len(expected)
        if dump.resources != expected:
            missing = set(expected) - set(dump.resources)
            differ = {
                k for k in expected if k in dump.resources and dump.resources[k] != expected[k]
            }
            failed.append(f"{path}: {len(missing)} missing, {len(differ)} differ")
    return checked, failed, skipped, resources


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
