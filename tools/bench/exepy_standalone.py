#!/usr/bin/env python3
"""Benchmark standalone exepy apps' start-up under Wine against the runtime's own python.exe.

    tools/bench/exepy_standalone.py [--runtime 3.13] [--repeats 15]
    tools/bench/exepy_standalone.py --numpy [--runtime 3.13] [--repeats 11]

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

``--numpy`` (issue 22): a numpy app (array math and a LAPACK call; numpy 2.1.3 from PyPI's
win_amd64 wheel, the last that Wine 8 runs) built ``--onedir`` and ``--onefile`` (numpy in
resource 205, unpacked once per user). Baseline: the ``--onedir`` app; measured, interleaved:
the ``--onefile`` app after its first run (goal <= 1.1x), then the first runs: ``--onefile``
with the per-user cache emptied (unpacks the runtime and numpy, CPython writes numpy's
bytecode) against ``--onedir`` with its ``__pycache__`` folders removed (writes the
bytecode only): the difference is the unpack. Sizes of both forms are printed.
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
NUMPY_GOAL = 1.1
NUMPY_APP = """\
import numpy as np

a = np.array([[3.0, 1.0], [1.0, 2.0]])
print(np.linalg.solve(a, np.array([9.0, 8.0])).tolist(), round(float(np.linalg.det(a)), 6))
"""
NUMPY_OUT = b"[2.0, 3.0] 5.0"


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


def _prefix(work: Path) -> dict[str, str]:
    prefix = work / "prefix"
    prefix.mkdir()
    return {
        **os.environ,
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "DISPLAY": "",
    }


def _tree_size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def numpy_bench(found: runtime.Runtime, repeats: int, first_runs: int) -> int:
    """The ``--numpy`` measurement (see the module's docstring)."""
    wine, server = _wine()
    with tempfile.TemporaryDirectory(prefix="exepy-bench-numpy-") as folder:
        work = Path(folder)
        (work / "app.py").write_text(NUMPY_APP)
        (work / "requirements.txt").write_text("numpy==2.1.3\n")
        common = {"runtime": found, "cwd": work, "requirements": Path("requirements.txt")}
        onedir = standalone.build_standalone(work / "dist", Path("app.py"), **common)  # type: ignore[arg-type]
        onefile = standalone.build_standalone(
            work / "app.exe",
            Path("app.py"),
            onefile=True,
            **common,  # type: ignore[arg-type]
        )
        env = _prefix(work)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.run([server, "-p"], env=env, check=True, **quiet)  # type: ignore[call-overload]
        try:
            subprocess.run([wine, "cmd", "/c", "exit"], env=env, check=False, **quiet)  # type: ignore[call-overload]
            local = next(Path(env["WINEPREFIX"]).glob("drive_c/users/*/AppData/Local"))
            cache = local / "exepy" / "runtimes"
            later: dict[str, list[float]] = {"onedir": [], "onefile": []}
            cpus: dict[str, list[float]] = {"onedir": [], "onefile": []}
            firsts: dict[str, list[float]] = {"onedir": [], "onefile": []}
            for _ in range(first_runs):  # first runs, alternated
                for pycache in onedir.output.rglob("__pycache__"):
                    shutil.rmtree(pycache)
                firsts["onedir"].append(_timed(wine, env, [str(onedir.exe)], NUMPY_OUT)[0])
                shutil.rmtree(cache, ignore_errors=True)
                firsts["onefile"].append(_timed(wine, env, [str(onefile.exe)], NUMPY_OUT)[0])
            for _ in range(repeats):
                for name, exe in (("onedir", onedir.exe), ("onefile", onefile.exe)):
                    wall, cpu = _timed(wine, env, [str(exe)], NUMPY_OUT)
                    later[name].append(wall)
                    cpus[name].append(cpu)
            [packages] = list(cache.glob("*/packages-*"))
            unpacked = _tree_size(packages)
        finally:
            subprocess.run([server, "-k"], env=env, check=False)
        folder_files, folder_size = _tree_size(onedir.output)

    base, base_cpu = statistics.median(later["onedir"]), statistics.median(cpus["onedir"])
    print(
        f"numpy 2.1.3 app, Python {found.version} under Wine: median of {repeats} interleaved "
        f"runs (whole process; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    print(f"{'case':<44} {'median ms':>10} {'min ms':>8} {'ratio':>7} {'CPU ratio':>9}")
    ratio = statistics.median(later["onefile"]) / base
    for name in ("onedir", "onefile"):
        median = statistics.median(later[name])
        cpu = statistics.median(cpus[name]) / base_cpu
        label = f"--{name}, after its first run"
        goal = f"  (goal <= {NUMPY_GOAL}x{'' if ratio <= NUMPY_GOAL else ', MISS'})"
        print(
            f"{label:<44} {median * 1e3:>10.1f} {min(later[name]) * 1e3:>8.1f} "
            f"{median / base:>6.2f}x {cpu:>8.2f}x" + (goal if name == "onefile" else "")
        )
    first_dir, first_file = (statistics.median(firsts[n]) for n in ("onedir", "onefile"))
    for label, name, median in (
        ("--onedir first run (no __pycache__)", "onedir", first_dir),
        ("--onefile first run (empty cache)", "onefile", first_file),
    ):
        print(
            f"{label:<44} {median * 1e3:>10.1f} {min(firsts[name]) * 1e3:>8.1f} "
            f"{median / base:>6.2f}x   (median of {first_runs})"
        )
    print(f"unpack (onefile first run - onedir first run): {(first_file - first_dir) * 1e3:.0f} ms")
    print(
        f"sizes: --onefile exe {onefile.size / 1e6:.1f} MB; --onedir folder "
        f"{folder_size / 1e6:.1f} MB in {folder_files} files (exe {onedir.size / 1e6:.1f} MB); "
        f"unpacked numpy: {unpacked[1] / 1e6:.1f} MB in {unpacked[0]} files (+ the runtime)"
    )
    return 0 if ratio <= NUMPY_GOAL else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", default="3.13", help="CPython version (default 3.13)")
    parser.add_argument("--repeats", type=int, default=15, help="runs per case (default 15)")
    parser.add_argument("--first-runs", type=int, default=5, help="first onefile runs (5)")
    parser.add_argument(
        "--numpy", action="store_true", help="a numpy app: --onefile against --onedir"
    )
    args = parser.parse_args(argv)
    if args.repeats < 11:
        parser.error("--repeats must be at least 11 (the issue's median of >= 11)")
    wine, server = _wine()
    found = runtime.fetch(args.runtime)
    if args.numpy:
        return numpy_bench(found, args.repeats, args.first_runs)
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
