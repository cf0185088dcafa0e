"""`exepy build python.exe --interpreter --runtime V` end to end: built through the console
script (not build_standalone), run with official Windows CPython under Wine in this
session's fresh prefix (no Python installed in it): ``-c`` and a script that imports what
the exe bundles (a wheel and a folder given on the command line).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from components import missing
from embeddedimport import bundle
from embeddedimport import pe as ei_pe
from exepy import runtime
from exepy.standalone import CONFIG_ID
from exepy_support import Wine, fresh_windows

pytestmark = pytest.mark.wine

SCRIPT = """\
import json
import sys

import mylib
import tool_kit

print(json.dumps({
    "argv": sys.argv[1:],
    "mylib": mylib.VALUE,
    "shout": tool_kit.shout("hi"),
    "executable": sys.executable,
}))
sys.exit(7)
"""


def _wheel(folder: Path) -> Path:
    """A pure wheel, as a build backend writes one."""
    path = folder / "tool_kit-2.5.1-py3-none-any.whl"
    info = "tool_kit-2.5.1.dist-info"
    files = {
        "tool_kit/__init__.py": "def shout(text):\n    return text.upper() + '!'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tool-kit\nVersion: 2.5.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wine]:
    """A fresh prefix with no Python installed (exepy_support.fresh_windows)."""
    with fresh_windows(tmp_path_factory) as (launcher, env, _):
        yield Wine(launcher[0], env, tmp_path_factory.mktemp("interp-work"))


def run(wine: Wine, args: list[str]) -> subprocess.CompletedProcess[str]:
    """*args* under Wine with stdin empty, as the runtime-behaviour tests run exes."""
    return subprocess.run(
        [wine.wine, *args],
        env=wine.env,
        cwd=wine.work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=240,
        check=False,
    )


def windows_path(path: Path) -> str:
    """*path* on Wine's Z: drive."""
    return "Z:" + str(path.resolve()).replace("/", "\\")


@pytest.fixture(
    scope="module", params=[("3.13", "--onefile"), ("3.11", "--onedir")], ids=lambda p: p[0]
)
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, dict[str, object]]:
    version, mode = request.param
    try:
        runtime.fetch(version)  # cached for --runtime VERSION
    except runtime.PythonRuntimeError as exc:
        missing(f"the Python {version} embeddable runtime", str(exc))
    source = tmp_path_factory.mktemp("interp-cli")
    (source / "mylib").mkdir()
    (source / "mylib" / "__init__.py").write_text("VALUE = 'bundled folder'\n")
    _wheel(source)
    out = "python.exe" if mode == "--onefile" else "dist"
    args = ["build", out, "mylib", "--interpreter", "--runtime", version, mode]
    args += ["--wheel", "tool_kit-2.5.1-py3-none-any.whl", "--json", "-"]
    done = subprocess.run(
        [sys.executable, "-m", "exepy", *args],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "interpreter, Python 3." in done.stderr  # the summary line goes to stderr
    exe = source / out if mode == "--onefile" else source / out / "python.exe"
    assert Path(report["exe"]) == exe
    return version, exe, report


def test_the_cli_writes_an_interpreter(built: tuple[str, Path, dict[str, object]]) -> None:
    _, exe, report = built
    assert report["interpreter"] is True and report["command"] is None
    assert ei_pe.find_resource(exe, bundle.RT_RCDATA, bundle.COMMAND_ID) is None  # no -m MAIN
    config = ei_pe.find_resource(exe, bundle.RT_RCDATA, CONFIG_ID)
    assert config is not None
    assert config.decode("utf-16-le").split("\0")[3] == "interpreter"
    blob = ei_pe.find_resource(exe, bundle.RT_RCDATA, bundle.BUNDLE_ID)
    assert blob is not None
    names = {name for name, _ in bundle.unpack(blob)}
    assert {"mylib/__init__.py", "tool_kit/__init__.py"} <= names


def test_the_interpreter_runs_c_and_a_script(
    built: tuple[str, Path, dict[str, object]], started: Wine, tmp_path: Path
) -> None:
    version, exe, _ = built
    wine = started
    done = run(wine, [str(exe), "-c", "import sys; print(sys.version_info[:2])"])
    major, minor = version.split(".")
    assert (done.returncode, done.stdout.strip()) == (0, f"({major}, {minor})"), done.stderr
    script = tmp_path / "uses_bundle.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = run(wine, [str(exe), windows_path(script), "one", "two words"])
    assert done.returncode == 7, done.stderr[-3000:]  # the script's own exit code
    assert json.loads(done.stdout) == {
        "argv": ["one", "two words"],
        "mylib": "bundled folder",
        "shout": "HI!",
        "executable": windows_path(exe),
    }
