"""The demo's path in a CI-sized form: every step of `tools/demo` must pass.

Smaller model and fewer benchmark iterations than `tools/demo`, same code (tools/demo_steps/).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from components import require_command

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import demo_steps  # noqa: E402


@pytest.fixture(scope="module")
def demo() -> Iterator[tuple[demo_steps.Summary, Path]]:
    for command, package in [
        ("nginx", "nginx"),
        ("git-lfs", "git-lfs"),
        ("sshd", "openssh-server"),  # the LFS step's SSH remote
        ("wine", "wine"),
        ("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64"),
    ]:
        require_command(command, package)
    # nginx workers run as `nobody`: they must be able to enter the data directory's
    # parents. Not under pytest's /tmp/pytest-of-USER: every pytest session that starts
    # (several may run at once) sets that folder back to mode 0700.
    out = Path(tempfile.mkdtemp(prefix="demo-test-"))
    out.chmod(0o711)
    settings = demo_steps.Settings(out=out, channels=8, size=32, bench_iterations=5)
    try:
        yield demo_steps.run_demo(settings), out
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_every_step_passes(demo: tuple[demo_steps.Summary, Path]) -> None:
    summary, _ = demo
    failed = {s.name: s.detail for s in summary.steps if not s.ok}
    assert not failed
    assert len(summary.steps) == 4


def test_all_exports_match_pytorch_in_both_runtimes(demo: tuple[demo_steps.Summary, Path]) -> None:
    summary, _ = demo
    cells = {(row["format"], row["runtime"].split(" ")[0]) for row in summary.table}
    formats = {"torchscript-decomposed", "dynamo-native", "dynamo-decomposed", "native-lowered"}
    assert cells == {(f, r) for f in formats for r in ("openvino", "onnxruntime")}
    scale = summary.facts["reference output"]["max_abs"]
    assert scale > 0.1, "the reference output is too small to judge errors by"
    for row in summary.table:
        assert row["max_abs_error_vs_pytorch"] <= 1e-4, row
    models = summary.facts["models"]
    assert models["dynamo-native"]["DeformConv nodes"] == 3
    assert all(models[f]["DeformConv nodes"] == 0 for f in formats - {"dynamo-native"})


def test_summary_files_and_round_trips(demo: tuple[demo_steps.Summary, Path]) -> None:
    summary, out = demo
    data = json.loads((out / "summary.json").read_text())
    assert data["ok"] is True
    assert "| format | runtime |" in (out / "summary.md").read_text()
    assert summary.facts["lfs"]["checksums_equal"] is True
    assert summary.facts["lfs"]["objects"] == 4
    assert summary.facts["lfs"]["ssh"]["checksums_equal"] is True
    # The server's latency histogram, read from its /metrics: every request counted once.
    latency = summary.facts["lfs"]["latency"]
    assert latency["requests_at_most_ms"]["inf"] >= 2 * summary.facts["lfs"]["objects"]
    assert any(key.startswith("PUT transfer.upload") for key in latency["mean_ms_by_endpoint"])
    exe = summary.facts["exe"]
    assert "model bytes from the bundle; argv=['hello']" in exe["python -m embeddedimport"]
    assert exe["windows resource lookup"].startswith("#10 #200 0 ")
