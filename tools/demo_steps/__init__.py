"""The steps of `tools/demo`, run inside the workspace environment: one module per step.

    export.py  a CNN with DeformConv2d, exported three ways (deform-conv2d-onnx-exporter)
    check.py   checked and benchmarked on OpenVINO and onnxruntime (openvino-runner)
    lfs.py     pushed, cloned and locked through a real Git LFS server (lfs-server), over
               HTTP and over an ssh:// remote (OpenSSH on loopback)
    exe.py     packed with an inference app into a Windows executable (exepy, embeddedimport)
    report.py  the settings, the summary and its files

Each step uses the packages the way a user would: the Python API where the user writes
Python (exporting a model), the console scripts everywhere else. `run_demo(settings)` is
also what tests/integration/test_demo.py calls, with a smaller model and fewer iterations.
Shared helpers (running commands, ports, servers) are in tools/common.py.
"""

from __future__ import annotations

import argparse
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import ROOT, say

from .check import check_and_bench
from .exe import pack_exe
from .export import export_models
from .lfs import git_lfs_roundtrip
from .report import Settings, Step, Summary, write_summary

__all__ = ["Settings", "Step", "Summary", "main", "run_demo"]


def run_demo(settings: Settings) -> Summary:
    """Run every step (a failed step is recorded and the next runs), write the summary."""
    settings.out.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    files: dict[str, Path] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        say(f"\n== {len(summary.steps) + 1}. {name}")
        record = Step(name)
        summary.steps.append(record)
        started = time.monotonic()
        try:
            fn()
            record.ok = True
        except Exception as exc:  # a failed step is reported, and the demo goes on
            record.detail = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        record.seconds = round(time.monotonic() - started, 1)
        say(f"   {'ok' if record.ok else 'FAILED'} in {record.seconds} s")

    step(
        "export a DeformConv2d CNN three ways, lower the native one",
        lambda: files.update(export_models(settings, summary)),
    )
    if files:
        step(
            "check and benchmark every file on OpenVINO and onnxruntime",
            lambda: check_and_bench(settings, files, summary),
        )
        step(
            "push, clone, lock and unlock the models through lfs-server (HTTP and SSH)",
            lambda: git_lfs_roundtrip(settings, files, summary),
        )
        step(
            "pack an inference app into a Windows executable",
            lambda: pack_exe(settings, files, summary),
        )
    write_summary(settings, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """`tools/demo [--quick] [--out DIR]`: 0 when every step passed."""
    parser = argparse.ArgumentParser(prog="tools/demo")
    parser.add_argument("--out", type=Path, default=ROOT / "demo-output")
    parser.add_argument("--quick", action="store_true", help="the CI-sized demo")
    args = parser.parse_args(argv)
    settings = Settings(out=args.out.resolve())
    if args.quick:
        settings = Settings(out=settings.out, channels=8, size=32, bench_iterations=5)
    started = time.monotonic()
    summary = run_demo(settings)
    say(
        f"demo {'OK' if summary.ok else 'FAILED'} in {time.monotonic() - started:.0f} s; "
        f"summary in {settings.out / 'summary.md'}"
    )
    return 0 if summary.ok else 1
