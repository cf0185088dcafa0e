"""A CI-sized run of tools/bench/lfs_load.py: a few clients for a few seconds, small objects.

The full-size run (32 clients, objects up to 64 MiB) is the benchmark command in the
tool's docstring; this checks the same promises at small scale, from the JSON it writes
(`--json`; its printed report is for people and may change): every operation ran, no
unexpected status, nothing lost or corrupted, no upload temp file left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from components import require_command

pytestmark = pytest.mark.nginx
TOOL = Path(__file__).resolve().parents[2] / "tools/bench/lfs_load.py"
# No "upload.verify": upload batches name no verify action (our PUT verified), so the
# clients, like git-lfs, send none; "verify" is the endpoint called anyway.
OPERATIONS = ("upload.put", "download.get", "download.range", "batch", "verify",
              "lock.create", "lock.list", "lock.unlock")  # fmt: skip


def test_load_run_loses_nothing(tmp_path: Path) -> None:
    require_command("nginx")
    out = tmp_path / "load.json"
    result = subprocess.run(
        [sys.executable, str(TOOL), "--clients", "6", "--duration", "4",
         "--max-size-kib", "512", "--workers", "2", "--seed", "5", "--json", str(out)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["ok"] is True
    [run] = report["runs"]
    assert run["clients"] == 6 and run["nodes"] == 1, run
    for op in OPERATIONS:
        assert run["counts"].get(op, 0) > 0, (op, run["counts"])
    assert "upload.verify" not in run["counts"], run["counts"]
    assert run["unexpected"] == 0 and run["unexpected_statuses"] == {}, run["statuses"]
    assert run["stored"] > 0, run
    assert (run["lost"], run["corrupted"], run["corrupt_reads"]) == (0, 0, 0), run
    assert run["leftovers"] == 0, run
    # Both sides of the CPU comparison were measured (psutil over the server's tree).
    assert run["server_cpu_ms"] > 0 and run["generator_cpu_ms"] > 0, run
    assert run["requests"] == sum(run["counts"].values()), run
