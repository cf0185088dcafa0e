#!/usr/bin/env python3
"""Benchmark standalone exepy apps' start-up under Wine against the runtime's own python.exe.

    tools/bench/exepy_standalone.py [--runtime 3.13] [--repeats 15]

One fresh Wine prefix (no Python installed) with a persistent wineserver; every program
runs with pipes for stdio (CPython under Wine 8 needs them). Measured in the same run,
interleaved round by round, wall time of the whole process, medians:

- baseline: the embeddable runtime's own ``python.exe -c pass``;
- ``--onedir`` hello app (``print("hello")``): NAME.exe beside the runtime's DLLs;
- ``--onefile`` hello app after its first run (the runtime's DLLs already unpacked);
- the first ``--onefile`` run (the per-user runtime cache emptied before each one).

Wall time is the goal's measure; the CPU time of the process (user + system) is printed
too, because on a shared, loaded machine wall times mostly measure the wait for a core.

Goals (issue 12): onedir <= 1.2x, onefile after the first run <= 1.3x, the onefile
hello <= 12 MB.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for src in ("exepy", "embeddedimport"):
    sys.path.insert(0, str(ROOT / "packages" / src / "src"))

from exepy import runtime, standalone  # noqa: E402

GOALS = {"onedir": 1.2, "onefile": 1.3}
SIZE_GOAL = 12_000_000


def _wine() -> tuple[str, str]:
    extra = os.pathsep.join([os.environ.get("PATH", ""), "/usr/lib/wine", "/usr/sbin"])
    wine, server = shutil.which("wine", path=extra), shutil.which("wineserver", path=extra)
    if wine is None or server is None:
        raise SystemExit("exepy_standalone: error: Wine is missing (apt-get install wine64 wine)")
    return wine, server


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(wine: str, env: dict[str, str], args: list[str], expect: bytes) -> tuple[float, float]:
    """Wall time and CPU time (user + system, the Windows process itself) of one run."""
    cpu = _cpu()
    start = time.perf_counter()
    proc = subprocess.run(
        [wine, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu
    if proc.returncode != 0 or proc.stdout.strip() != expect:
        raise SystemExit(
            f"exepy_standalone: error: {args[0]} failed (exit {proc.returncode}): "
            f"{proc.stderr.decode('utf-8', 'replace')[-500:]}"
        )
    return elapsed, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", default="3.13", help="CPython version (default 3.13)")
    parser.add_argument("--repeats", type=int, default=15, help="runs per case (default 15)")
    parser.add_argument("--first-runs", type=int, default=5, help="first onefile runs (5)")
    args = parser.parse_args(argv)
    if args.repeats < 11:
        parser.error("--repeats must be at least 11 (the issue's median of >= 11)")
    wine, server = _wine()
    found = runtime.fetch(args.runtime)
    with tempfile.TemporaryDirectory(prefix="exepy-bench-") as folder:
        work = Path(folder)
        (work / "hello.py").write_text('print("hello")\n')
        onedir = standalone.build_standalone(
            work / "dist", Path("hello.py"), runtime=found, cwd=work
        )
        onefile = standalone.build_standalone(
            work / "hello.exe", Path("hello.py"), runtime=found, onefile=True, cwd=work
        )
        prefix = work / "prefix"
        env = {
            **os.environ,
            "WINEPREFIX": str(prefix),
            "WINEDEBUG": "-all",
            "WINEDLLOVERRIDES": "mscoree,mshtml=",
            "DISPLAY": "",
        }
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        prefix.mkdir()
        subprocess.run([server, "-p"], env=env, check=True, **quiet)  # type: ignore[call-overload]
        try:
            subprocess.run([wine, "cmd", "/c", "exit"], env=env, check=False, **quiet)  # type: ignore[call-overload]
            cache = next(prefix.glob("drive_c/users/*/AppData/Local")) / "exepy" / "runtimes"
            cases = {
                "python.exe -c pass": ([str(found.path / "python.exe"), "-c", "pass"], b""),
                "onedir hello": ([str(onedir.exe)], b"hello"),
                "onefile hello": ([str(onefile.exe)], b"hello"),
            }
            first: list[float] = []
            for _ in range(args.first_runs):
                shutil.rmtree(cache, ignore_errors=True)
                first.append(_timed(wine, env, [str(onefile.exe)], b"hello")[0])
            for command, expect in cases.values():  # warm the page cache once
                _timed(wine, env, command, expect)
            times: dict[str, list[float]] = {name: [] for name in cases}
            cpus: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.repeats):
                for name, (command, expect) in cases.items():
                    wall, cpu = _timed(wine, env, command, expect)
                    times[name].append(wall)
                    cpus[name].append(cpu)
        finally:
            subprocess.run([server, "-k"], env=env, check=False)

    base = statistics.median(times["python.exe -c pass"])
    base_cpu = statistics.median(cpus["python.exe -c pass"])
    print(
        f"Python {found.version} under Wine, median of {args.repeats} interleaved runs "
        f"(whole process, pipes for stdio; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs)"
    )
    print(
        f"{'case':<32} {'median ms':>10} {'min ms':>8} {'ratio':>7} {'goal':>6}"
        f" {'CPU ms':>8} {'CPU ratio':>9}"
    )
    failed = False
    for name, values in times.items():
        median = statistics.median(values)
        ratio = median / base
        goal = GOALS.get(name.split()[0])
        mark = f"<={goal}" if goal else ""
        if goal and ratio > goal:
            failed = True
            mark += " MISS"
        cpu = statistics.median(cpus[name])
        print(
            f"{name:<32} {median * 1e3:>10.1f} {min(values) * 1e3:>8.1f} {ratio:>6.2f}x {mark:>6}"
            f" {cpu * 1e3:>8.1f} {cpu / base_cpu:>8.2f}x"
        )
    first_median = statistics.median(first)
    print(
        f"{'onefile first run (unpacks)':<32} {first_median * 1e3:>10.1f} "
        f"{min(first) * 1e3:>8.1f} {first_median / base:>6.2f}x   (median of {len(first)})"
    )
    size_ok = onefile.size <= SIZE_GOAL
    failed = failed or not size_ok
    print(
        f"onefile hello size: {onefile.size / 1e6:.2f} MB (goal <= {SIZE_GOAL / 1e6:.0f} MB"
        f"{'' if size_ok else ', MISS'}); onedir exe {onedir.size / 1e6:.2f} MB + "
        f"{sum(p.stat().st_size for p in found.binaries()) / 1e6:.2f} MB of runtime binaries"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
