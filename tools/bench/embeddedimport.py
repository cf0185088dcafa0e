#!/usr/bin/env python3
"""Benchmark embeddedimport against zipimport and the filesystem, in one run (medians, ratios).

    tools/bench/embeddedimport.py [--repeats 11] [--modules 300] [--build-files 1000]

1. Import a generated package tree of N modules (default 300) in a fresh interpreter from
   a bundle in an exe's resources (including reading and inflating the bundle), from a zip
   of the same sources via zipimport, and from the filesystem (with and without cached
   bytecode). In-process import time and whole-process time, medians, ratios to zipimport.
2. Start-up cost of the activation hook (embeddedimport.pth in a fresh venv): Python's
   start-up without the .pth, with it (the filter that keeps python.exe free), with it
   pointed at an exe without a bundle (the full check), and the check measured inside
   a cold interpreter.
3. `exepy build` of 1000 files, if exepy is importable (it is a separate distribution).

    tools/bench/embeddedimport.py --interpreter 3.13 [--repeats 11] [--modules 300] [--pin-cpu 0]

4. (alone) exepy's portable interpreter (issue 23): `python.exe -c pass` and an import of
   300 standard modules, onedir and onefile, against the runtime's own python.exe under
   Wine, wall and CPU time. Goal: -c pass <= 1.05x.

Goal (issue 6): bundle import <= 1.0x zipimport; hook cost without a bundle < 1 ms.
The exe is built with exepy when available, else with the test suite's resource writer.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "packages" / "embeddedimport" / "src"
sys.path.insert(0, str(SRC))

from embeddedimport.bundle import pack, pack_command  # noqa: E402

MODULE = '''"""Module {i} of the benchmark tree."""

import os

CONSTANT_{i} = {i}
NAMES = [{names}]


class Thing{i}:
    """A small class with a few methods."""

    def __init__(self, value: int = 0) -> None:
        self.value = value + CONSTANT_{i}

    def compute(self, n: int) -> int:
        total = 0
        for k in range(n):
            total += (k * self.value) % 7
        return total

    def describe(self) -> str:
        return f"Thing{i}({{self.value}}) in {{os.sep!r}}"


def helper_{i}(items: list[int]) -> list[int]:
    return [x * 2 for x in items if x % 3]


TABLE = {{{table}}}
'''


def module_source(i: int) -> bytes:
    names = ", ".join(f'"name{i}_{k}"' for k in range(8))
    table = ", ".join(f'"k{k}": {k * i}' for k in range(12))
    return MODULE.format(i=i, names=names, table=table).encode()


def package_tree(count: int) -> tuple[list[tuple[str, bytes]], list[str]]:
    """``count`` modules in ``benchtree``: 10 subpackages, each with an ``__init__``."""
    files: list[tuple[str, bytes]] = [("benchtree/__init__.py", b'"""Benchmark tree."""\n')]
    names = ["benchtree"]
    subpackages = 10
    per_package = (count - 1 - subpackages) // subpackages
    index = 0
    for sub in range(subpackages):
        files.append((f"benchtree/sub{sub}/__init__.py", f"SUB = {sub}\n".encode()))
        names.append(f"benchtree.sub{sub}")
        for _ in range(per_package):
            files.append((f"benchtree/sub{sub}/mod{index}.py", module_source(index)))
            names.append(f"benchtree.sub{sub}.mod{index}")
            index += 1
    while len(names) < count:  # the remainder at the top level
        files.append((f"benchtree/extra{index}.py", module_source(index)))
        names.append(f"benchtree.extra{index}")
        index += 1
    return files, names


def find_base() -> Path:
    """A real Windows executable to carry the resources."""
    candidates = [
        Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows/notepad.exe"),
        Path("/usr/lib/wine/x86_64-windows/notepad.exe"),
        *[Path(p) / "pip" / "_vendor" / "distlib" / "t64.exe" for p in sys.path if p],
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SystemExit("no Windows executable found as a base (install wine64 or pip)")


def have_exepy() -> bool:
    return importlib.util.find_spec("exepy") is not None


def exepy_build(work: Path, out: str, main: str, inputs: Sequence[str], base: Path) -> None:
    """Run `exepy build` as its console script would (in a child interpreter)."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from exepy.cli import main; sys.exit(main())",
            "build",
            out,
            main,
            *inputs,
            "--base",
            str(base),
            "--force",
        ],
        cwd=work,
        check=True,
        capture_output=True,
    )


def build_exe_fallback(path: Path, files: list[tuple[str, bytes]], base: Path) -> None:
    """Without exepy: the test suite's minimal resource writer."""
    sys.path.insert(0, str(ROOT / "tools"))
    from embeddedimport.pe import read_resources
    from embeddedimport_testpe import add_resources  # type: ignore[import-not-found]

    data = base.read_bytes()
    resources = {(10, 200, 0): pack(files), (10, 201, 0): pack_command(["-m", "main"])}
    path.write_bytes(add_resources(data, resources, read_resources(data)))


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def interleave(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each case ``repeats`` times, round-robin, so drift hits every case alike."""
    results: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            results[name].append(run())
    return results


DRIVER = """
import sys, time, importlib
mode, where, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
start = time.perf_counter()
if mode == "bundle":
    sys.path.insert(0, {src!r})
    from embeddedimport.importer import install
    install(where)
else:
    sys.path.insert(0, where)
for name in names:
    importlib.import_module(name)
print(time.perf_counter() - start)
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env


def bench_imports(work: Path, count: int, repeats: int) -> None:
    files, names = package_tree(count)
    tree = work / "tree"
    for name, content in files:
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    (tree / "main.py").write_bytes(b"import benchtree\n")
    zip_path = work / "tree.zip"
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files:
            archive.writestr(name, content)
    base = find_base()
    exe = work / "tree" / "app.exe"
    if have_exepy():
        exepy_build(tree, "app.exe", "main.py", ["benchtree"], base)
        how = "exepy build"
    else:
        build_exe_fallback(exe, files, base)
        how = "the test suite's resource writer (exepy not importable)"
    nopyc = work / "nopyc"
    shutil.copytree(tree / "benchtree", nopyc / "benchtree")
    driver = work / "driver.py"
    driver.write_text(DRIVER.format(src=str(SRC)))
    joined = ",".join(names)

    def case(mode: str, where: Path, *flags: str, **env: str) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, *flags, str(driver), mode, str(where), joined],
                capture_output=True,
                text=True,
                env=clean_env(**env),
                check=True,
            )
            wall = time.perf_counter() - started
            run.walls.append(wall)  # type: ignore[attr-defined]
            return float(done.stdout.strip())

        run.walls = []  # type: ignore[attr-defined]
        return run

    # Warm the filesystem case's __pycache__ once (the normal state of an installed app).
    subprocess.run(
        [sys.executable, str(driver), "fs", str(tree), joined],
        check=True,
        env=clean_env(),
        capture_output=True,
    )
    cases = {
        "bundle (exe resources)": case("bundle", exe),
        "zipimport (sources)": case("zip", zip_path),
        "filesystem, cached .pyc": case("fs", tree),
        "filesystem, no .pyc": case("fs", nopyc, "-B"),
    }
    results = interleave(cases, repeats)
    print(f"1. Import {len(names)} modules (a package tree), {repeats} runs each, medians")
    print(f"   exe built with {how}; {exe.stat().st_size / 1024:.0f} KiB")
    zip_import = median_ms(results["zipimport (sources)"])
    zip_wall = median_ms(cases["zipimport (sources)"].walls)  # type: ignore[attr-defined]
    print(f"   {'case':28} {'import ms':>10} {'x zip':>7} {'process ms':>11} {'x zip':>7}")
    for name, samples in results.items():
        walls = cases[name].walls  # type: ignore[attr-defined]
        print(
            f"   {name:28} {median_ms(samples):10.1f} {median_ms(samples) / zip_import:7.2f} "
            f"{median_ms(walls):11.1f} {median_ms(walls) / zip_wall:7.2f}"
        )
    ratio = median_ms(results["bundle (exe resources)"]) / zip_import
    verdict = "MET" if ratio <= 1.0 else "NOT MET"
    print(f"   goal bundle <= 1.0x zipimport: {ratio:.2f}x -> {verdict}")


def hook_venv(work: Path) -> tuple[Path, Path]:
    """A fresh venv with the shipped .pth (and the source tree on its path)."""
    root = work / "hookvenv"
    venv.EnvBuilder(with_pip=False, symlinks=sys.platform != "win32").create(root)
    python = root / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site_packages = Path(purelib)
    (site_packages / "_embeddedimport_source.pth").write_text(str(SRC) + "\n")
    return python, site_packages


def bench_hook(work: Path, repeats: int) -> None:
    python, site_packages = hook_venv(work)
    pth = site_packages / "embeddedimport.pth"
    shipped = (SRC / "embeddedimport.pth").read_text()
    plain = work / "plain.exe"
    shutil.copy(find_base(), plain)
    bundled = work / "bundled.exe"
    build_exe_fallback(bundled, [("main.py", b"")], find_base())
    # Compile the package's bytecode once, as pip does when it installs the wheel.
    subprocess.run(
        [python, "-c", "import embeddedimport._startup, embeddedimport.runtime, runpy"],
        check=True,
        env=clean_env(),
    )

    def start(with_pth: bool, **env: str) -> Callable[[], float]:
        def run() -> float:
            if with_pth:
                pth.write_text(shipped)
            elif pth.exists():
                pth.unlink()
            started = time.perf_counter()
            subprocess.run([python, "-c", "pass"], check=True, env=clean_env(**env))
            return time.perf_counter() - started

        return run

    cases = {
        "no .pth (baseline)": start(False),
        ".pth, filtered out": start(True),
        ".pth, exe without bundle": start(True, EMBEDDEDIMPORT_EXECUTABLE=str(plain)),
        ".pth, exe with bundle": start(True, EMBEDDEDIMPORT_EXECUTABLE=str(bundled)),
    }
    results = interleave(cases, repeats * 3)
    baseline = median_ms(results["no .pth (baseline)"])
    print(f"2. Start-up of `python -c pass` in a venv, {repeats * 3} runs each, medians")
    for name, samples in results.items():
        print(f"   {name:28} {median_ms(samples):7.2f} ms  (+{median_ms(samples) - baseline:.2f})")
    spread = statistics.quantiles(results["no .pth (baseline)"], n=4)
    print(
        f"   (baseline interquartile range {(spread[2] - spread[0]) * 1000:.2f} ms: process-level "
        "differences below that are noise; the in-process figures below are the hook's cost)"
    )
    # The same check inside a cold interpreter, without process-start noise: the .pth line
    # exactly as site.py runs it, timed around the exec.
    probe = (
        "import os, sys, time; sys.path.insert(0, {src!r}); line = open({pth!r}).read();"
        "t = time.perf_counter(); exec(line); print(time.perf_counter() - t)"
    ).format(src=str(SRC), pth=str(SRC / "embeddedimport.pth"))
    cold: dict[str, list[float]] = {"filtered out": [], "exe without bundle": []}
    for _ in range(repeats * 3):
        for name, env in (("filtered out", {}), ("exe without bundle", {"E": str(plain)})):
            variables = {"EMBEDDEDIMPORT_EXECUTABLE": env["E"]} if env else {}
            done = subprocess.run(
                [python, "-S", "-c", probe],
                capture_output=True,
                text=True,
                check=True,
                env=clean_env(**variables),
            )
            cold[name].append(float(done.stdout))
    for name, samples in cold.items():
        print(f"   in-process, cold, {name:22} {median_ms(samples):6.3f} ms")
    worst = median_ms(cold["exe without bundle"])
    print(
        f"   goal hook cost without a bundle < 1 ms: {worst:.3f} ms -> "
        f"{'MET' if worst < 1.0 else 'NOT MET'}"
    )


def bench_build(work: Path, count: int, repeats: int) -> None:
    if not have_exepy():
        print("3. exepy build: skipped (exepy is not importable in this environment)")
        return
    project = work / "project"
    for i in range(count):
        target = project / "pkg" / f"sub{i % 20}" / f"mod{i}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(module_source(i))
    (project / "main.py").write_bytes(b"import pkg\n")
    base = find_base()
    samples = []
    for _ in range(max(3, repeats // 3)):
        started = time.perf_counter()
        exepy_build(project, "app.exe", "main.py", ["pkg"], base)
        samples.append(time.perf_counter() - started)
    size = (project / "app.exe").stat().st_size
    print(
        f"3. exepy build of {count + 1} files ({len(samples)} runs, median, incl. interpreter "
        f"start): {median_ms(samples):.0f} ms, {median_ms(samples) / (count + 1):.2f} ms/file, "
        f"exe {size / 1024:.0f} KiB"
    )


# --- 4. exepy's portable interpreter under Wine (issue 23) ----------------------------------

# Standard modules left out of the import test: side effects (a browser, prints, a GUI,
# __main__ modules), no Tcl/Tk in the embeddable runtime, Wine gaps (WMI), test suites.
SKIP_MODULES = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "pydoc_data"}
SKIP_PARTS = {"__main__", "test", "tests", "encodings"}  # encodings: 100+ codecs, alike

# Run by the runtime's own python.exe: up to N standard modules that import there, the public
# top-level ones first, then public submodules, each name in the stdlib zip.
PROBE = """\
import importlib, sys, zipfile
skip, parts, limit = set(sys.argv[1].split(",")), set(sys.argv[2].split(",")), int(sys.argv[3])
names = set()
for entry in zipfile.ZipFile(sys.path[0]).namelist():
    if entry.endswith(".pyc"):
        dotted = entry[:-4].replace("/", ".").removesuffix(".__init__")
        if not any(p.startswith("_") or p in parts for p in dotted.split(".")):
            names.add(dotted)
ok = []
for name in sorted(names, key=lambda n: (n.count("."), n)):
    if name.split(".")[0] in skip:
        continue
    try:
        importlib.import_module(name)
    except Exception:
        continue
    ok.append(name)
    if len(ok) == limit:
        break
print(" ".join(ok))
"""


def bench_interpreter(
    work: Path, repeats: int, version: str, modules: int, pin: int | None = None
) -> None:
    """``-c pass`` and *modules* standard-module imports: the interpreter exe (onedir,
    onefile) as ``exepy build python.exe --interpreter --runtime V`` writes it, against the
    runtime's own python.exe, interleaved, medians of wall-clock and of CPU time (user +
    system of the process: on a shared machine the steadier of the two), under Wine
    (natively on Windows, wall time only). *pin*: run every program on that one CPU
    (``taskset``), the steadiest comparison on a machine shared with other work."""
    for src in ("exepy",):
        sys.path.insert(0, str(ROOT / "packages" / src / "src"))
    from exepy import runtime, standalone

    found = runtime.fetch(version)
    (work / "interp").mkdir()
    common = {"cwd": work / "interp", "runtime": found, "interpreter": True, "name": "python"}
    onedir = standalone.build_standalone(work / "interp" / "dist", None, **common)
    onefile = standalone.build_standalone(
        work / "interp" / "python.exe", None, onefile=True, **common
    )
    launcher: list[str] = []
    env = clean_env(DISPLAY="")
    server = None
    if sys.platform != "win32":
        wine, server = shutil.which("wine"), shutil.which("wineserver")
        if wine is None or server is None:
            print("4. interpreter: skipped (Wine is missing)")
            return
        launcher = [wine]
        if pin is not None:
            taskset = shutil.which("taskset")
            if taskset is None:
                raise SystemExit("embeddedimport bench: --pin-cpu needs taskset (util-linux)")
            launcher = [taskset, "-c", str(pin), wine]
        env.update(
            WINEPREFIX=str(work / "prefix"), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml="
        )
        (work / "prefix").mkdir()
        # No pipes: the persistent server would hold them open.
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.run([server, "-p"], env=env, check=True, **quiet)  # type: ignore[call-overload]

    def run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*launcher, str(exe), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    try:
        # Create the prefix with no pipes open: the services it starts keep their stdio,
        # and a pipe they hold would never close.
        subprocess.run(
            [*launcher, "cmd", "/c", "exit"] if launcher else ["cmd", "/c", "exit"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
        names = run(
            found.path / "python.exe",
            "-c",
            PROBE,
            ",".join(sorted(SKIP_MODULES)),
            ",".join(sorted(SKIP_PARTS)),
            str(modules),
        ).stdout.split()
        imports = f"import {', '.join(names)}"
        programs = {
            "python.exe (runtime's own)": found.path / "python.exe",
            "interpreter --onedir": onedir.exe,
            "interpreter --onefile": onefile.exe,
        }
        for exe in programs.values():  # warm up; the onefile one unpacks its runtime
            if run(exe, "-c", imports).returncode != 0:
                raise SystemExit(f"embeddedimport bench: {exe} cannot import {len(names)} modules")

        cpu: dict[str, list[float]] = {}

        def timer(label: str, exe: Path, *args: str) -> Callable[[], float]:
            def once() -> float:
                before = _children_cpu()
                start = time.perf_counter()
                done = run(exe, *args)
                elapsed = time.perf_counter() - start
                cpu.setdefault(label, []).append(_children_cpu() - before)
                if done.returncode != 0:
                    raise SystemExit(f"embeddedimport bench: {exe} failed: {done.stderr[-300:]}")
                return elapsed

            return once

        runs = {
            f"{label}, -c pass": timer(f"{label}, -c pass", exe, "-c", "pass")
            for label, exe in programs.items()
        }
        runs.update(
            {
                f"{label}, {len(names)} imports": timer(
                    f"{label}, {len(names)} imports", exe, "-c", imports
                )
                for label, exe in programs.items()
            }
        )
        results = interleave(runs, repeats)
    finally:
        if server is not None:
            subprocess.run([server, "-k"], env=env, check=False)
    where = "" if pin is None else f", pinned to CPU {pin}"
    print(
        f"4. exepy interpreter exe, Python {found.version}, {repeats} interleaved runs{where}, "
        "medians"
    )
    print(f"   {'case':46} {'wall ms':>8} {'x python':>9} {'CPU ms':>8} {'x python':>9}")
    for kind in ("-c pass", f"{len(names)} imports"):
        base = f"python.exe (runtime's own), {kind}"
        for label in programs:
            key = f"{label}, {kind}"
            wall, spent = median_ms(results[key]), median_ms(cpu[key])
            print(
                f"   {key:46} {wall:8.1f} {wall / median_ms(results[base]):8.2f}x "
                f"{spent:8.1f} {spent / max(median_ms(cpu[base]), 1e-9):8.2f}x"
            )
    print(
        f"   sizes: onefile {onefile.size / 1e6:.1f} MB (whole standard library inside); "
        f"onedir exe {onedir.size / 1e6:.1f} MB + the runtime's binaries"
    )


def _children_cpu() -> float:
    """User + system time of the finished child processes (0 where unknown: Windows)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=11, help="runs per case (default 11)")
    parser.add_argument("--modules", type=int, default=300, help="modules to import")
    parser.add_argument("--build-files", type=int, default=1000, help="files for exepy build")
    parser.add_argument(
        "--interpreter",
        metavar="VERSION",
        help="only part 4: exepy's interpreter exe for this CPython (e.g. 3.13) under Wine",
    )
    parser.add_argument(
        "--pin-cpu",
        type=int,
        metavar="N",
        help="with --interpreter: run every program on CPU N only (taskset; Linux)",
    )
    args = parser.parse_args(argv)
    if args.interpreter:
        with tempfile.TemporaryDirectory(prefix="bench-embeddedimport-") as tmp:
            bench_interpreter(Path(tmp), args.repeats, args.interpreter, args.modules, args.pin_cpu)
        return 0
    print(f"Python {sys.version.split()[0]} on {sys.platform}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-embeddedimport-") as tmp:
        work = Path(tmp)
        bench_imports(work, args.modules, args.repeats)
        bench_hook(work, args.repeats)
        bench_build(work, args.build_files, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
