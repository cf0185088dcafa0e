"""A CI-sized run of tools/bench/lfs_push.py: a real `git lfs push` of a few small objects to
lfs-server and to the trivial-app floor; the promises read from its `--json` output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from components import require_command

pytestmark = pytest.mark.nginx
TOOL = Path(__file__).resolve().parents[2] / "tools/bench/lfs_push.py"


def test_push_bench_runs_both_sides_and_stores_every_object(tmp_path: Path) -> None:
    for command in ("nginx", "git", "git-lfs"):
        require_command(command)
    out = tmp_path / "push.json"
    result = subprocess.run(
        [sys.executable, str(TOOL), "--objects", "20", "--rounds", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    sides = [r["side"] for r in report["rounds"]]
    # Interleaved, the first side alternating: lfs-server, floor, floor, lfs-server.
    assert sides == ["lfs-server", "floor", "floor", "lfs-server"], sides
    for run in report["rounds"]:
        # The floor's whole CPU for 20 objects can fall under psutil's 10 ms tick: >= 0.
        assert run["objects_per_s"] > 0 and run["server_cpu_ms_per_object"] >= 0, run
        # Connections kept: git-lfs's transfers reuse theirs (one per object before).
        assert run["connections"] is not None and run["connections"] < 20, run
        if run["side"] == "lfs-server":
            assert run["stored"] == 20 and run["server_cpu_ms_per_object"] > 0, run
    assert report["ratio"] > 0


def test_put_cost_bench_splits_one_upload_and_every_put_is_stored(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    tool = TOOL.with_name("lfs_put_cost.py")
    result = subprocess.run(
        [sys.executable, str(tool), "--objects", "40", "--repeats", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert set(report["samples"]) == {"app", "store", "syscalls", "floor"}
    assert all(len(v) == 2 and min(v) > 0 for v in report["samples"].values()), report
    med = report["medians"]
    # The app fsyncs twice per object; the floor app stores nothing.
    assert med["app"] > med["floor"], med
    assert "the app's own Python (app - store)" in result.stdout
