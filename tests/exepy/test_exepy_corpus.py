"""A bounded sample of the real-PE corpus (the full run: `python -m exepy.corpus`).

Each file gets a bundle and a command line; pefile must parse the output, every original
resource must be byte-identical, the new ones present, the overlay identical (a distlib
launcher with a zip appended still opens as a zip), the checksum must verify and
SizeOfImage, SizeOfInitializedData and the section table must be exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from components import require_command
from exepy import corpus

SAMPLE_SIZE = 14


def sample() -> list[Path]:
    """Every n-th of Wine's binaries (sorted by name), plus a few chosen for their shape."""
    wine = corpus.wine_binaries()
    if not wine:
        require_command("wine64", "wine64")
    step = max(1, len(wine) // SAMPLE_SIZE)
    chosen = wine[::step][:SAMPLE_SIZE]
    for name in ("ipconfig.exe", "expand.exe", "kernel32.dll"):  # no relocations; no .rsrc
        chosen += [p for p in wine if p.name == name and p not in chosen][:1]
    return chosen


@pytest.mark.wine
def test_corpus_sample(harness_exe: Path) -> None:
    paths = [*sample(), *corpus.distlib_launchers(), harness_exe]
    result = corpus.run(paths)
    assert result.failed == {}
    # Every distlib launcher was also checked with a zip appended, as distlib uses it.
    assert result.checked == len(paths) - len(result.skipped) + len(corpus.distlib_launchers())
    assert result.in_place and result.new_section and result.with_overlay and result.no_resources


def test_corpus_command_reports_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a PE file")
    assert corpus.main(["--only", str(text)]) == 0
    out = capsys.readouterr().out
    assert f"SKIP {text}: not a PE file" in out
    assert "1 files: 0 rewritten" in out
