"""What a standalone app sees at run time from embeddedimport and exepy's launcher, run with
official Windows CPython (3.11 and 3.13) under Wine in a fresh prefix (natively on Windows):
multiprocessing without freeze_support(), sys.frozen, the prefixes, importlib.metadata of
bundled wheels, and the portable interpreter (an exe with python.exe's command line).

ProcessPoolExecutor is not tested here: it hangs under Wine 8 even in the runtime's own
python.exe (a Wine gap, issue 22); Pool and Process are.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from components import missing
from exepy import runtime, standalone
from exepy_support import fresh_windows

NATIVE = sys.platform == "win32"
pytestmark = [] if NATIVE else [pytest.mark.wine]

VERSIONS = ["3.11", "3.13"]

MP_APP = """\
import json
import multiprocessing
import os
import sys


def square(x):
    return x * x


def child(queue):
    queue.put([os.getpid(), getattr(sys, "frozen", None), __name__])


def main():
    with open(os.environ["MP_STARTS"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()} {sys.argv[1:]!r}\\n")
    if sys.argv[1:2] == ["-c"]:  # the app's own -c option
        print(json.dumps({"argv": sys.argv[1:]}))
        return
    with multiprocessing.Pool(2) as pool:
        squares = pool.map_async(square, range(10)).get(timeout=60)
    queue = multiprocessing.Queue()
    process = multiprocessing.Process(target=child, args=(queue,))
    process.start()
    got = queue.get(timeout=60)
    process.join(60)
    dll = f"python3{sys.version_info[1]}.dll"
    print(json.dumps({
        "frozen": getattr(sys, "frozen", None),
        "prefixes": [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix],
        "dll_in_prefix": os.path.isfile(os.path.join(sys.prefix, dll)),
        "executable": sys.executable,
        "base_executable": sys._base_executable,
        "squares": sum(squares),
        "child": got,
        "exitcode": process.exitcode,
        "pid": os.getpid(),
    }))


if __name__ == "__main__":
    main()
"""


@dataclass
class Runner:
    """Runs Windows programs with pipes: directly on Windows, else under Wine."""

    launcher: list[str]
    env: dict[str, str]

    def run(
        self,
        args: list[str],
        env: dict[str, str],
        *,
        cwd: Path | None = None,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.launcher, *args],
            env={**self.env, **env},
            cwd=cwd,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=240,
            check=False,
        )


def windows_path(path: Path) -> str:
    """*path* as the app sees it: itself on Windows, on Wine's Z: drive elsewhere."""
    if NATIVE:
        return str(path.resolve())
    return "Z:" + str(path.resolve()).replace("/", "\\")


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    with fresh_windows(tmp_path_factory) as (launcher, env, _):
        yield Runner(launcher, env)


def _runtime(version: str) -> runtime.Runtime:
    try:
        return runtime.fetch(version)
    except runtime.PythonRuntimeError as exc:
        missing(f"the Python {version} embeddable runtime", str(exc))
        raise


@dataclass
class Apps:
    onedir: Path
    onefile: Path


@pytest.fixture(scope="module", params=VERSIONS)
def mp_apps(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Apps:
    found = _runtime(request.param)
    source = tmp_path_factory.mktemp("mp-source")
    (source / "mpapp.py").write_text(MP_APP, encoding="utf-8")
    out = tmp_path_factory.mktemp(f"mp-built-{request.param}")
    onedir = standalone.build_standalone(out / "dist", Path("mpapp.py"), cwd=source, runtime=found)
    onefile = standalone.build_standalone(
        out / "mpapp.exe", Path("mpapp.py"), cwd=source, runtime=found, onefile=True
    )
    return Apps(onedir.exe, onefile.exe)


@pytest.mark.parametrize("mode", ["onedir", "onefile"])
def test_multiprocessing_without_freeze_support(
    mp_apps: Apps, runner: Runner, mode: str, tmp_path: Path
) -> None:
    exe: Path = getattr(mp_apps, mode)
    starts = tmp_path / "starts.txt"
    done = runner.run([str(exe)], {"MP_STARTS": windows_path(starts)})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    # The app ran once: Pool's workers and the Process ran multiprocessing's child code.
    assert len(starts.read_text(encoding="utf-8").splitlines()) == 1, starts.read_text()
    assert report["squares"] == 285
    child_pid, child_frozen, child_name = report["child"]
    assert child_pid != report["pid"] and child_frozen is True and child_name == "__mp_main__"
    assert report["exitcode"] == 0
    assert report["frozen"] is True
    assert report["executable"] == report["base_executable"] == windows_path(exe)
    prefixes = report["prefixes"]
    assert len(set(prefixes)) == 1 and report["dll_in_prefix"], prefixes
    if mode == "onedir":
        assert prefixes[0] == windows_path(exe.parent)
    else:  # the unpacked runtime, not the working folder
        assert "\\exepy\\runtimes\\" in prefixes[0], prefixes


def test_the_apps_own_dash_c_stays_the_apps(mp_apps: Apps, runner: Runner, tmp_path: Path) -> None:
    starts = tmp_path / "starts.txt"
    done = runner.run(
        [str(mp_apps.onefile), "-c", "config.ini"], {"MP_STARTS": windows_path(starts)}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"argv": ["-c", "config.ini"]}


META_APP = """\
import json
from importlib import metadata

files = metadata.files("tool-kit") or []
print(json.dumps({
    "version": metadata.version("tool-kit"),
    "summary": metadata.metadata("tool_kit")["Summary"],
    "plugin": metadata.entry_points(group="tool_kit.plugins")["shout"].load()("hi"),
    "files": sorted(str(f) for f in files),
    "names": [d.name for d in metadata.distributions()],
}))
"""


def _wheel(folder: Path) -> Path:
    """A pure wheel with metadata, entry points and a RECORD, as a build backend writes."""
    import zipfile

    path = folder / "tool_kit-2.5.1-py3-none-any.whl"
    info = "tool_kit-2.5.1.dist-info"
    files = {
        "tool_kit/__init__.py": "def shout(text):\n    return text.upper() + '!'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: Tool_Kit\nVersion: 2.5.1\n"
        "Summary: A bundled toolkit\n",
        f"{info}/entry_points.txt": "[tool_kit.plugins]\nshout = tool_kit:shout\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.mark.parametrize("version", VERSIONS)
def test_importlib_metadata_of_bundled_wheels(version: str, runner: Runner, tmp_path: Path) -> None:
    (tmp_path / "metaapp.py").write_text(META_APP, encoding="utf-8")
    wheel = _wheel(tmp_path)
    built = standalone.build_standalone(
        tmp_path / "metaapp.exe",
        Path("metaapp.py"),
        cwd=tmp_path,
        runtime=_runtime(version),
        onefile=True,
        wheels=[wheel],
    )
    done = runner.run([str(built.exe)], {})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["version"] == "2.5.1"
    assert report["summary"] == "A bundled toolkit"
    assert report["plugin"] == "HI!"
    assert "tool_kit/__init__.py" in report["files"]
    assert "tool_kit-2.5.1.dist-info/METADATA" in report["files"]
    assert report["names"] == ["Tool_Kit"]


# --- the portable interpreter (build_standalone(interpreter=True)) --------------------------

SCRIPT = """\
#!this first line is skipped with -x
import json
import os
import sys

import sibling
import helperpkg

print(json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "executable": sys.executable,
    "path0": sys.path[0],
    "sibling": sibling.VALUE,
    "bundled": helperpkg.VALUE,
    "flags": [sys.flags.ignore_environment, sys.flags.no_user_site, sys.dont_write_bytecode,
              sys.flags.isolated, sys.flags.utf8_mode],
    "frozen": hasattr(sys, "frozen"),
    "prefix_dll": os.path.isfile(os.path.join(sys.prefix, f"python3{sys.version_info[1]}.dll")),
}))
sys.exit(int(os.environ.get("SCRIPT_EXIT", "3")))
"""


@pytest.fixture(
    scope="module",
    params=[("3.13", True), ("3.12", True), ("3.11", False)],
    ids=["3.13-onefile", "3.12-onefile", "3.11-onedir"],
)
def interpreter_exe(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    version, onefile = request.param
    source = tmp_path_factory.mktemp("interp-source")
    (source / "helperpkg").mkdir()
    (source / "helperpkg" / "__init__.py").write_text("VALUE = 'from the exe'\n")
    out = tmp_path_factory.mktemp("interp-built")
    built = standalone.build_standalone(
        out / ("python.exe" if onefile else "dist"),
        Path("helperpkg/__init__.py"),
        [Path("helperpkg")],
        cwd=source,
        runtime=_runtime(version),
        onefile=onefile,
        interpreter=True,
        name="python",
    )
    return built.exe


@pytest.fixture
def script_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "script.py").write_text(SCRIPT, encoding="utf-8")
    (folder / "sibling.py").write_text("VALUE = 'next to the script'\n")
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    (decoys / "decoy.py").write_text("VALUE = 'from PYTHONPATH'\n")
    return folder


def test_interpreter_runs_a_script_like_python_exe(
    interpreter_exe: Path, runner: Runner, script_dir: Path
) -> None:
    decoys = windows_path(script_dir.parent / "decoys")
    done = runner.run(
        [str(interpreter_exe), "-x", windows_path(script_dir / "script.py"), "a", "two words"],
        {"PYTHONPATH": decoys, "PYTHONHOME": decoys, "PYTHONUTF8": "1"},
    )
    assert done.returncode == 3, done.stderr[-3000:]  # the script's sys.exit(3)
    report = json.loads(done.stdout)
    assert report["argv"] == [windows_path(script_dir / "script.py"), "a", "two words"]
    assert report["name"] == "__main__"
    assert report["executable"] == windows_path(interpreter_exe)
    assert report["path0"] == windows_path(script_dir)  # the script's folder first
    assert report["sibling"] == "next to the script"
    assert report["bundled"] == "from the exe"
    # isolated by default (PYTHON* ignored, no user site, no .pyc), not -I; not frozen
    assert report["flags"] == [1, 1, True, 0, 0]
    assert report["frozen"] is False and report["prefix_dll"] is True
    assert not (script_dir / "__pycache__").exists()


def test_interpreter_command_line_forms(
    interpreter_exe: Path, runner: Runner, script_dir: Path
) -> None:
    exe = str(interpreter_exe)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return runner.run([exe, *args], {}, cwd=script_dir, stdin=stdin)

    done = run("-c", "import sys; print(sys.argv)", "x", "-c")
    assert (done.returncode, done.stdout.strip()) == (0, "['-c', 'x', '-c']"), done.stderr
    done = run("-m", "sibling")  # -m finds modules in the working folder, as python.exe does
    assert done.returncode == 0, done.stderr
    done = run("-", "arg", stdin="import sys; print(6 * 7, sys.argv)\n")
    assert (done.returncode, done.stdout.strip()) == (0, "42 ['-', 'arg']"), done.stderr
    done = run("-i", stdin="print(6 * 7)\nraise SystemExit(4)\n")  # the REPL through a pipe
    assert done.returncode == 4 and "42" in done.stdout, (done.stdout, done.stderr)
    done = run(stdin="import helperpkg; print(helperpkg.VALUE)\n")
    assert (done.returncode, done.stdout.strip()) == (0, "from the exe"), done.stderr
    done = run("-u", "-X", "utf8", "-c", "import sys; print(sys.flags.utf8_mode, '\\u2713')")
    assert (done.returncode, done.stdout.strip()) == (0, "1 \u2713"), done.stderr
    done = run("-c", "def f():\n    1 / 0\nf()")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ZeroDivisionError" in done.stderr
    assert 'File "<string>", line 2, in f' in done.stderr
    done = run("-c", "import sys; sys.exit('bye')")
    assert (done.returncode, done.stderr.strip()) == (1, "bye")
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("Python 3."), done.stderr
    # Not frozen: multiprocessing's own "-c ... --multiprocessing-fork" children just work.
    pool = (
        "import multiprocessing as mp\nwith mp.Pool(2) as p: print(sum(p.map(abs, range(-3, 3))))"
    )
    done = run("-c", pool)
    assert (done.returncode, done.stdout.strip()) == (0, "9"), done.stderr[-2000:]
    done = run("-Z")
    assert done.returncode == 2 and "-Z" in done.stderr


def test_interpreter_isolation_switches(
    interpreter_exe: Path, runner: Runner, script_dir: Path
) -> None:
    decoys = {"PYTHONPATH": windows_path(script_dir.parent / "decoys")}
    code = "import decoy; print(decoy.VALUE)"
    done = runner.run([str(interpreter_exe), "-c", code], decoys)
    assert done.returncode == 1 and "No module named 'decoy'" in done.stderr
    done = runner.run([str(interpreter_exe), "-X", "use_environment", "-c", code], decoys)
    assert (done.returncode, done.stdout.strip()) == (0, "from PYTHONPATH"), done.stderr
    done = runner.run(
        [str(interpreter_exe), "-X", "write_bytecode", windows_path(script_dir / "script.py")],
        {"SCRIPT_EXIT": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["flags"][2] is False
    assert list((script_dir / "__pycache__").glob("sibling.*.pyc"))


def test_exepy_bat_runs_with_the_interpreter_under_cmd(
    interpreter_exe: Path, runner: Runner, tmp_path: Path
) -> None:
    import shutil

    from exepy import build

    folder = tmp_path / "pc"
    if interpreter_exe.name == "python.exe" and interpreter_exe.parent.name != "dist":
        folder.mkdir()
        shutil.copyfile(interpreter_exe, folder / "python.exe")  # onefile: one file to copy
    else:
        shutil.copytree(interpreter_exe.parent, folder)
    script = b"import sys\nimport helperpkg\nprint(sys.argv[1:], helperpkg.VALUE)\nsys.exit(5)\n"
    (folder / "tool.bat").write_bytes(build.bat_polyglot(script))
    done = runner.run(["cmd", "/c", windows_path(folder / "tool.bat"), "one", "two"], {})
    assert done.returncode == 5, (done.stdout, done.stderr[-2000:])
    assert done.stdout.strip() == "['one', 'two'] from the exe"
