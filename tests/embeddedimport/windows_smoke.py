#!/usr/bin/env python3
"""Windows end-to-end check of the activation hook (run by the windows-latest CI job).

    python tests/embeddedimport/windows_smoke.py            on Windows, base interpreter
    python tests/embeddedimport/windows_smoke.py --dry-run --base t64.exe
                                       anywhere: runs the built exes through
                                       `python -m embeddedimport` instead of starting them

Needs the embeddedimport and exepy WHEELS (not editable installs: only the wheel ships
embeddedimport.pth) installed into the interpreter that runs this script, which must be a
base interpreter, not a venv (a venv's python.exe is a launcher, not CPython itself).

It builds ``embeddedimport-smoke.exe`` from this interpreter's python.exe with exepy, puts
it next to python.exe (where CPython finds its DLL and standard library), runs it with
arguments and checks what the bundled app saw; then a --windowed build the same way; then
that plain python.exe is unaffected, and prints the hook's cost without a bundle.
Exit status 0 means every check passed; each failure is printed with what was expected.
Not collected by pytest (no test_ prefix): it needs Windows and the installed wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

MAIN = """\
import json, os, sys
from importlib.resources import files

import smokepkg

result = {
    "argv": sys.argv,
    "file": __file__,
    "executable": sys.executable,
    "data": files("smokepkg").joinpath("data.txt").read_text().strip(),
    "greeting": smokepkg.greet(),
    "path0": sys.path[0],
    "cwd_on_path": "" in sys.path or os.getcwd() in sys.path,
}
target = os.environ.get("SMOKE_RESULT")
if target:
    with open(target, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
else:
    print(json.dumps(result))
sys.exit(3)
"""

FAILURES: list[str] = []


def check(what: str, got: object, expected: object) -> None:
    status = "ok  " if got == expected else "FAIL"
    print(f"[{status}] {what}: {got!r}" + ("" if got == expected else f" (expected {expected!r})"))
    if got != expected:
        FAILURES.append(what)


def exepy(*args: str, cwd: Path) -> None:
    command = [sys.executable, "-c", "import sys; from exepy.cli import main; sys.exit(main())"]
    done = subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True)
    output = f"{done.stdout.strip()} {done.stderr.strip()}"
    print(f"exepy {' '.join(args)} -> {done.returncode} {output}")
    if done.returncode != 0:
        raise SystemExit(f"exepy build failed: {done.stderr}")


def run_app(
    exe: Path, args: list[str], dry_run: bool, cwd: Path, env: dict[str, str] | None = None
):
    if dry_run:
        command = [sys.executable, "-m", "embeddedimport", str(exe), *args]
    else:
        command = [str(exe), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="do not start the exe; run its bundle with python -m embeddedimport (any OS)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the built exes in place")
    parser.add_argument(
        "--base", type=Path, help="exe to build from (default: this python.exe; needed off Windows)"
    )
    options = parser.parse_args()
    python = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    if options.base is None and sys.platform != "win32":
        raise SystemExit("off Windows, give --base with a Windows .exe (and --dry-run)")
    if not options.dry_run:
        if sys.platform != "win32":
            raise SystemExit("this check needs Windows (use --dry-run elsewhere)")
        if sys.prefix != sys.base_prefix:
            raise SystemExit("run this with the base interpreter, not from a venv")
        pth = Path(sysconfig.get_paths()["purelib"]) / "embeddedimport.pth"
        if not pth.is_file():
            raise SystemExit(f"{pth} is missing: pip install the embeddedimport wheel (not -e)")
    out_dir = python.parent if not options.dry_run else Path(tempfile.mkdtemp())
    exe = out_dir / "embeddedimport-smoke.exe"
    windowed = out_dir / "embeddedimport-smoke-w.exe"
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "smokepkg").mkdir()
        (project / "smokepkg" / "__init__.py").write_text("def greet():\n    return 'hi'\n")
        (project / "smokepkg" / "data.txt").write_text("bundled data\n")
        (project / "main.py").write_text(MAIN)
        base = str(options.base or python)
        exepy("build", str(exe), "main.py", "smokepkg", "--base", base, "--force", cwd=project)
        exepy(
            "build", str(windowed), "main.py", "smokepkg", "--base", base, "--force",
            "--windowed", cwd=project,
        )  # fmt: skip
        # The apps run in a folder holding a decoy main.py and smokepkg, as a Downloads
        # folder might: the exe must run its own bundle, not these.
        decoy = Path(tmp) / "Downloads"
        (decoy / "smokepkg").mkdir(parents=True)
        (decoy / "main.py").write_text("raise SystemExit('the decoy main.py ran')\n")
        (decoy / "smokepkg" / "__init__.py").write_text("def greet():\n    return 'decoy'\n")
        try:
            main_file = os.path.join(str(exe), "main.py")
            done = run_app(exe, ["alpha", "two words"], options.dry_run, decoy)
            print("stdout:", done.stdout.strip(), "\nstderr:", done.stderr.strip())
            check("exit status", done.returncode, 3)
            check("stderr", done.stderr.strip(), "")
            seen = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
            check("sys.argv", seen.get("argv"), [main_file, "alpha", "two words"])
            check("__file__", seen.get("file"), main_file)
            check("importlib.resources data", seen.get("data"), "bundled data")
            check("bundled package", seen.get("greeting"), "hi")
            check("sys.path[0]", seen.get("path0"), str(exe))
            check("working folder not on sys.path", seen.get("cwd_on_path"), False)
            if not options.dry_run:
                check("sys.executable", seen.get("executable"), str(exe))
                dashed = run_app(exe, ["--", "--flag"], options.dry_run, decoy)
                argv = json.loads(dashed.stdout.strip().splitlines()[-1])["argv"]
                check("'--' lets options through", argv[1:], ["--flag"])

            result_file = Path(tmp) / "windowed.json"
            env = {**os.environ, "SMOKE_RESULT": str(result_file)}
            done = run_app(windowed, ["gui"], options.dry_run, decoy, env=env)
            check("windowed exit status", done.returncode, 3)
            seen = json.loads(result_file.read_text()) if result_file.is_file() else {}
            check("windowed sys.argv[1:]", seen.get("argv", [None])[1:], ["gui"])

            plain = subprocess.run(
                [str(python), "-c", "import sys; print('plain', len(sys.argv))"],
                capture_output=True,
                text=True,
            )
            check("plain python.exe unaffected", plain.stdout.strip(), "plain 1")
            if not options.dry_run:
                print_hook_cost(python)
        finally:
            if not options.keep:
                for path in (exe, windowed):
                    path.unlink(missing_ok=True)
                if options.dry_run:
                    shutil.rmtree(out_dir, ignore_errors=True)
    print("FAILED: " + ", ".join(FAILURES) if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


def print_hook_cost(python: Path) -> None:
    """The .pth line's cost in a cold interpreter, checking python.exe itself (no bundle)."""
    pth = Path(sysconfig.get_paths()["purelib"]) / "embeddedimport.pth"
    site, line_file = str(pth.parent), str(pth)
    probe = (
        f"import os, sys, time; sys.path.append({site!r}); line = open({line_file!r}).read(); "
        "t = time.perf_counter(); exec(line); print(time.perf_counter() - t)"
    )
    for label, env in (
        ("python.exe (filtered by name)", {}),
        ("full check of python.exe", {"EMBEDDEDIMPORT_EXECUTABLE": str(python)}),
    ):
        samples = []
        for _ in range(15):
            done = subprocess.run(
                [str(python), "-S", "-c", probe],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
                check=True,
            )
            samples.append(float(done.stdout))
        print(f"hook cost, {label}: {statistics.median(samples) * 1000:.3f} ms (median of 15)")


if __name__ == "__main__":
    sys.exit(main())
