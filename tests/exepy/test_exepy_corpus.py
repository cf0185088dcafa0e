"""A bounded sample of the real-PE corpus (the full run: `python -m exepy.corpus`).

Each file gets a bundle and a command line; pefile must parse the output, every original
resource must be byte-identical, the new ones present, the overlay identical (a distlib
launcher with a zip appended still opens as a zip), the checksum must verify and
SizeOfImage, SizeOfInitializedData and the section table must be exact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


def _corpus_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "exepy.corpus", *args]


def _cpu_seconds(pid: int) -> float:
    # utime + stime from /proc/PID/stat (fields 14 and 15, after the parenthesised name).
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc and SIGINT")
def test_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    launchers = corpus.distlib_launchers()
    assert launchers, "pip's distlib launchers are part of every test environment"
    folder = tmp_path / "many"
    folder.mkdir()
    for index in range(400):  # minutes of work: the interrupt lands in the middle of it
        (folder / f"copy{index}.exe").symlink_to(launchers[0])
    process = subprocess.Popen(
        _corpus_command("--only", str(folder)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Past start-up (imports take ~0.15 s of CPU) and into the checks.
        deadline = time.monotonic() + 60
        while _cpu_seconds(process.pid) < 1.0 and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert err == "python -m exepy.corpus: interrupted\n"
    assert out == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "/nonexistent/x.exe"], "/nonexistent/x.exe: no such file or folder"),
        (["/nonexistent/folder"], "/nonexistent/folder: no such file or folder"),
    ],
)
def test_errors_are_one_line_with_status_2(args: list[str], message: str) -> None:
    done = subprocess.run(_corpus_command(*args), capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"python -m exepy.corpus: error: {message}")
    assert done.stderr.count("\n") == 1
    assert done.stdout == ""


def test_unreadable_and_folder_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    launchers = corpus.distlib_launchers()
    assert launchers
    folder = tmp_path / "pe"
    folder.mkdir()
    (folder / "a.exe").write_bytes(launchers[0].read_bytes())
    (folder / "notes.txt").write_text("not looked at: folders give their .exe and .dll files")
    (tmp_path / "dangling.exe").symlink_to(tmp_path / "gone.exe")
    assert corpus.main(["--only", str(folder), str(tmp_path / "dangling.exe")]) == 2
    assert "dangling.exe: no such file or folder" in capsys.readouterr().err
    assert corpus.main(["--only", str(folder)]) == 0
    assert "1 files: 1 rewritten" in capsys.readouterr().out


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a PE file")
    process = subprocess.Popen(
        _corpus_command("--only", str(text)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # like `| head -0`: the first write fails with EPIPE
    err = process.stderr.read()
    process.wait(timeout=60)
    assert process.returncode in (0, 141)
    assert err == b""


def test_version() -> None:
    done = subprocess.run(_corpus_command("--version"), capture_output=True, text=True, check=True)
    assert done.stdout.startswith("python -m exepy.corpus ")
