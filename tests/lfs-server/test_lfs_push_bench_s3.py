"""A CI-sized run of `tools/bench/lfs_push.py --s3`: real git-lfs pushes to lfs-server on
its own Ceph RGW + PostgreSQL, with boto3's floor measured in the same run (issue 25's S3
goal); the numbers read from its `--json` output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from components import missing, require_command, require_module
from lfs_engines import missing_ceph, missing_postgres

pytestmark = [pytest.mark.nginx, pytest.mark.gitlfs]
TOOL = Path(__file__).resolve().parents[2] / "tools/bench/lfs_push.py"


def test_push_bench_s3_measures_the_app_against_boto3s_floor(tmp_path: Path) -> None:
    for command in ("nginx", "git", "git-lfs"):
        require_command(command)
    for module, extra in (("boto3", "'lfs-server[s3]'"), ("psycopg", "'lfs-server[postgres]'")):
        require_module(module, extra)
    for lacking in (missing_ceph(), missing_postgres()):
        if lacking:
            missing(lacking, "tools/test installs it as root")
    out = tmp_path / "push.json"
    result = subprocess.run(
        [sys.executable, str(TOOL), "--s3", "--objects", "30", "--rounds", "1",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["store"] == "s3"
    [ours] = [r for r in report["rounds"] if r["side"] == "lfs-server"]
    # Every object of the push is in the bucket (counted there, not taken from git-lfs).
    assert ours["stored"] == 30, ours
    [floor] = report["s3_rounds"]
    # process_time has sub-ms resolution: a HEAD + PUT always costs some CPU; the app's
    # workers (several ms per object) too.
    assert floor["floor_ms"] > 0 and floor["default_ms"] > 0, floor
    assert ours["app_cpu_ms_per_object"] > 0, ours
    summary = report["s3"]
    assert summary["over_floor_ms"] == pytest.approx(summary["app_ms"] - summary["floor_ms"])
    assert "app - floor" in result.stdout and "goal <= +3 ms" in result.stdout
