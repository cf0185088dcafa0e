"""A CI-sized run of tools/bench/lfs_load.py: a few clients for a few seconds, small objects.

The full-size run (32 clients, objects up to 64 MiB) is the benchmark command in the
tool's docstring; this checks the same promises at small scale: every operation ran, no
unexpected status, nothing lost or corrupted, no upload temp file left behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from components import require_command

pytestmark = pytest.mark.nginx
TOOL = Path(__file__).resolve().parents[2] / "tools/bench/lfs_load.py"


def test_load_run_loses_nothing() -> None:
    require_command("nginx")
    result = subprocess.run(
        [sys.executable, str(TOOL), "--clients", "6", "--duration", "4",
         "--max-size-kib", "512", "--workers", "2", "--seed", "5"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for op in ("upload.put", "upload.verify", "download.get", "download.range", "batch",
               "verify", "lock.create", "lock.list", "lock.unlock"):  # fmt: skip
        match = re.search(rf"^{re.escape(op)}\s+(\d+)\s", out, re.MULTILINE)
        assert match and int(match.group(1)) > 0, (op, out)
    assert "unexpected statuses: none" in out, out
    stored = re.search(r"objects told stored: (\d+) .*lost: (\d+); corrupted: (\d+);", out)
    assert stored, out
    assert int(stored.group(1)) > 0 and stored.group(2) == "0" and stored.group(3) == "0", out
    assert "leftover upload temp files: 0" in out, out
