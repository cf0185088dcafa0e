"""``--onefile`` apps with files that must be on disk: binary wheels (numpy, Pillow, psutil,
lxml) and packages that open data through ``__file__``.

Built as a user would (``exepy build app.exe app.py --runtime V -r requirements.txt``) and
run under Wine in a fresh prefix (natively on Windows): the files go into resource 205, which
the launcher unpacks once per user into ``%LOCALAPPDATA%\\exepy\\runtimes\\<runtime>\\
packages-<hash>`` (a temporary folder renamed into place, a stamp written last), on
``sys.path``; later runs read the stamp and unpack nothing.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from components import missing
from exepy import build, runtime, standalone
from exepy.build import BuildError
from exepy.editor import ResourceEditor
from exepy_support import fresh_windows

NATIVE = sys.platform == "win32"
pytestmark = [] if NATIVE else [pytest.mark.wine]

NUMPY_APP = """\
import numpy as np

a = np.array([[3.0, 1.0], [1.0, 2.0]])
x = np.linalg.solve(a, np.array([9.0, 8.0]))  # LAPACK (gesv) through OpenBLAS
print("solve", x.tolist(), "det", round(float(np.linalg.det(a)), 6))
print("sum", int(np.arange(10).sum()), np.__file__)
"""

LIGHT_APP = """\
import io

import psutil
from lxml import etree
from PIL import Image

png = io.BytesIO()
Image.new("RGB", (64, 32), (255, 0, 0)).save(png, "PNG")
image = Image.open(io.BytesIO(png.getvalue())).resize((8, 4))  # decode, resize
print("pillow", image.size, image.getpixel((1, 1)))
print("psutil", psutil.cpu_count() >= 1, psutil.Process().memory_info().rss > 1000000)
tree = etree.fromstring("<a><b n='1'>x</b><b n='2'>y</b></a>")
print("lxml", tree.xpath("//b[@n='2']/text()"))
"""

DATA_READER = (
    b"import os\n"
    b"HERE = os.path.dirname(__file__)\n"
    b"def template():\n"
    b"    with open(os.path.join(HERE, 'templates', 'html', 'page.txt'), encoding='utf-8') as f:\n"
    b"        return f.read().strip()\n"
)


@dataclass
class Runner:
    """Runs Windows programs with pipes: natively on Windows, else Wine in a fresh prefix."""

    launcher: list[str]
    env: dict[str, str]
    local_app_data: Path

    def start(self, args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.launcher, *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, args: list[str]) -> tuple[int, str, str]:
        proc = self.start(args)
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out, err

    def runtimes(self) -> Path:
        return self.local_app_data / "exepy" / "runtimes"


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    """A fresh prefix with no Python installed (exepy_support.fresh_windows)."""
    with fresh_windows(tmp_path_factory) as (launcher, env, local):
        yield Runner(launcher, env, local)


def _runtime(version: str) -> runtime.Runtime:
    try:
        return runtime.fetch(version)
    except runtime.PythonRuntimeError as exc:
        missing(f"the Python {version} embeddable runtime", str(exc))
        raise


def _build_with(folder: Path, app: str, requirements: str, version: str) -> Path:
    """``exepy build app.exe app.py -r requirements.txt`` in *folder*, as a user runs it."""
    found = _runtime(version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(app)
    (folder / "requirements.txt").write_text(requirements)
    proc = subprocess.run(
        [sys.executable, "-m", "exepy", "build", "app.exe", "app.py", "--runtime", found.version,
         "-r", "requirements.txt", "--no-progress"],
        capture_output=True, text=True, timeout=600, check=False, cwd=folder,
    )  # fmt: skip
    if proc.returncode != 0 and "pip download" in proc.stderr and not os.environ.get("CI"):
        pytest.skip(f"the wheels could not be downloaded: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    return folder / "app.exe"


def _windows(path: Path) -> str:
    return str(path) if NATIVE else "Z:" + str(path).replace("/", "\\")


def _files(folder: Path) -> dict[str, int]:
    """The unpacked files and their times, without the bytecode CPython writes beside them."""
    return {
        p.relative_to(folder).as_posix(): p.stat().st_mtime_ns
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _packages(runner: Runner) -> Path:
    [folder] = [p for p in runner.runtimes().glob("*/packages-*") if p.is_dir()]
    return folder


@pytest.mark.parametrize("version", ["3.13", "3.11"])
def test_onefile_numpy_unpacks_once(version: str, runner: Runner, tmp_path: Path) -> None:
    """numpy's cp3XY-win_amd64 wheel (OpenBLAS in numpy.libs) in one exe: array math and a
    LAPACK call; the first run unpacks it beside the runtime, later runs unpack nothing.
    numpy 2.1.3: later releases call ucrtbase's crealf, which Wine 8 lacks."""
    exe = _build_with(tmp_path / "numpy", NUMPY_APP, "numpy==2.1.3\n", version)
    names = [n for n, _ in build.read_bundle(exe).files]
    assert names == ["app.py"], names  # numpy is in resource 205, not in the bundle
    shutil.rmtree(runner.runtimes(), ignore_errors=True)
    code, out, err = runner.run([str(exe)])
    assert code == 0, err[-2000:]
    folder = _packages(runner)
    lines = out.splitlines()
    assert lines[0] == "solve [2.0, 3.0] det 5.0"
    assert lines[1].startswith("sum 45 ") and lines[1].endswith(
        f"\\exepy\\runtimes\\{folder.parent.name}\\{folder.name}\\numpy\\__init__.py"
    )
    assert (folder / "exepy-packages.txt").read_text() == folder.name.split("-")[1]
    assert list((folder / "numpy.libs").glob("*.dll")), "numpy's OpenBLAS DLL is missing"
    assert (folder / "numpy-2.1.3.dist-info" / "RECORD").is_file()
    assert not [p for p in folder.parent.parent.iterdir() if p.name.endswith(".tmp")]
    unpacked = _files(folder)
    assert len(unpacked) > 500, len(unpacked)
    time.sleep(0.05)
    code, out, err = runner.run([str(exe)])
    assert code == 0, err[-2000:]
    assert out.splitlines() == lines
    assert _files(folder) == unpacked, "the second run unpacked again"


@pytest.mark.parametrize("version", ["3.13", "3.11"])
def test_onefile_pillow_psutil_lxml(version: str, runner: Runner, tmp_path: Path) -> None:
    """Three more binary wheels in one exe: Pillow encodes, decodes and resizes a PNG,
    psutil asks Windows about the process, lxml runs an XPath query."""
    # Pinned: the releases seen working under Wine 8 (a later one may call what it lacks).
    pins = "Pillow==13.0.0\npsutil==7.2.2\nlxml==6.2.0\n"
    exe = _build_with(tmp_path / "light", LIGHT_APP, pins, version)
    code, out, err = runner.run([str(exe)])
    assert code == 0, err[-2000:]
    assert out.splitlines() == [
        "pillow (8, 4) (255, 0, 0)",
        "psutil True True",
        "lxml ['y']",
    ]


README = Path(__file__).resolve().parents[2] / "packages" / "exepy" / "README.md"


@pytest.mark.skipif(NATIVE, reason="the README's block runs the exe with wine")
def test_readme_numpy_example_runs(runner: Runner, tmp_path: Path) -> None:
    """The README's numpy quickstart, run as written (bash, exepy on PATH, Wine)."""
    text = README.read_text(encoding="utf-8")
    blocks = [b.split("\n", 1)[1] for b in text.split("```")[1::2] if b.startswith("bash\n")]
    [block] = [b for b in blocks if "solve.exe" in b]
    env = {**runner.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-e", "-c", block], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if proc.returncode != 0 and "pip download" in proc.stderr and not os.environ.get("CI"):
        pytest.skip(f"numpy's wheel could not be downloaded: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = block.rsplit("# ", 1)[1].strip()  # what the README says it prints
    assert proc.stdout.splitlines()[-1] == printed == "[2. 3.]"


def _wheel(folder: Path, name: str, files: dict[str, bytes]) -> Path:
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, content in files.items():
            archive.writestr(member, content)
        info = f"{name}-1.0.dist-info"
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    return path


def test_onefile_data_by_file_races_and_repairs(runner: Runner, tmp_path: Path) -> None:
    """A pure package that opens data through ``__file__`` (as docutils does) goes to disk in
    --onefile too, in its subfolders. Two first runs at once leave one folder and no
    temporary one; a folder whose stamp is gone (damaged) is unpacked again and replaced."""
    found = _runtime("3.13")
    files = {"datapkg/__init__.py": DATA_READER, "datapkg/templates/html/page.txt": b"<page>\n"}
    wheel = _wheel(tmp_path, "datapkg", files)
    (tmp_path / "app.py").write_text("import datapkg\nprint(datapkg.template())\n")
    standalone.build_standalone(
        Path("app.exe"), Path("app.py"), runtime=found, onefile=True, cwd=tmp_path,
        wheels=[Path(wheel.name)],
    )  # fmt: skip
    exe = tmp_path / "app.exe"
    assert not any(n.startswith("datapkg") for n, _ in build.read_bundle(exe).files)
    assert ResourceEditor.open(exe).get(10, standalone.PACKAGES_ID)[:8] == b"EXEPYPK1"
    shutil.rmtree(runner.runtimes(), ignore_errors=True)
    runs = [runner.start([str(exe)]) for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert (run.returncode, out.strip()) == (0, "<page>"), err[-2000:]
    folder = _packages(runner)
    assert sorted(p.name for p in folder.parent.iterdir() if p.is_dir()) == [folder.name]
    page = folder / "datapkg" / "templates" / "html" / "page.txt"
    assert page.read_bytes() == b"<page>\n"
    # damaged: the stamp and a file are gone; the next run unpacks a whole folder again;
    # then two runs repair the same damage at once
    for at_once in (1, 2):
        (folder / "exepy-packages.txt").unlink()
        page.unlink()
        runs = [runner.start([str(exe)]) for _ in range(at_once)]
        for run in runs:
            out, err = run.communicate(timeout=300)
            assert (run.returncode, out.strip()) == (0, "<page>"), err[-2000:]
        assert page.read_bytes() == b"<page>\n" and (folder / "exepy-packages.txt").is_file()
        # no temporary or moved-aside folder is left
        assert [p.name for p in folder.parent.iterdir() if p.is_dir()] == [folder.name]


def test_onefile_interpreter_imports_packages_on_disk(runner: Runner, tmp_path: Path) -> None:
    """A portable python.exe (--interpreter --onefile) gets the same on-disk packages:
    ``python.exe -c`` imports a package that reads its data through ``__file__``."""
    found = _runtime("3.13")
    files = {"datapkg/__init__.py": DATA_READER, "datapkg/templates/html/page.txt": b"<i>\n"}
    wheel = _wheel(tmp_path, "datapkg", files)
    standalone.build_standalone(
        Path("python.exe"), None, runtime=found, onefile=True, interpreter=True, cwd=tmp_path,
        wheels=[Path(wheel.name)],
    )  # fmt: skip
    code, out, err = runner.run(
        [str(tmp_path / "python.exe"), "-c", "import datapkg; print(datapkg.template())"]
    )
    assert (code, out.strip()) == (0, "<i>"), err[-2000:]


def test_launcher_refuses_a_damaged_or_escaping_packages_resource(
    runner: Runner, tmp_path: Path
) -> None:
    """The launcher checks resource 205 itself: a truncated one, or one naming a file
    outside its folder ("..\\"), is one line naming the resource, and nothing is left."""
    found = _runtime("3.13")
    wheel = _wheel(tmp_path, "datapkg", {"datapkg/__init__.py": DATA_READER, "datapkg/t/x": b""})
    (tmp_path / "app.py").write_text("import datapkg\n")
    standalone.build_standalone(
        Path("app.exe"), Path("app.py"), runtime=found, onefile=True, cwd=tmp_path,
        wheels=[Path(wheel.name)],
    )  # fmt: skip
    good = ResourceEditor.open(tmp_path / "app.exe").get(10, standalone.PACKAGES_ID)
    packed = standalone._packed("..\\escaped.txt", b"outside")
    escaping = good[:24] + b"EXEPYRT2" + struct.pack("<I", 1) + packed
    for name, payload in (("truncated", good[: len(good) // 2]), ("escaping", escaping)):
        editor = ResourceEditor.open(tmp_path / "app.exe")
        editor.set(10, standalone.PACKAGES_ID, payload)
        editor.save(tmp_path / f"{name}.exe")
        shutil.rmtree(runner.runtimes(), ignore_errors=True)
        code, out, err = runner.run([str(tmp_path / f"{name}.exe")])
        assert code == 1 and out == "", err
        assert err.strip() == (
            f"{name}.exe: error: the packages resource (RT_RCDATA 205) is damaged: rebuild the app"
        )
        [folder] = list(runner.runtimes().iterdir())  # the runtime; no packages folder
        assert not [p for p in folder.iterdir() if p.is_dir()]
        assert not list(runner.runtimes().rglob("escaped.txt"))


def test_packages_payload_names_are_checked() -> None:
    """Resource 205's names: relative, no ``..``; files sorted by folder; the key is the
    content's hash (the same files give the same folder)."""
    for bad in ("../evil.py", "/abs.py", "a//b.py", "c:/x.py", "a/./b.py"):
        with pytest.raises(BuildError, match="unsafe path"):
            standalone.packages_payload([(bad, b"")])
    with pytest.raises(BuildError, match=r"path of 131 characters; .* use --onedir"):
        standalone.packages_payload([("a/" + "x" * 129, b"")])
    files = [("b/z.py", b"1"), ("a/b/c.py", b"2"), ("a/d.py", b"3"), ("a/b/e.py", b"4")]
    payload, key = standalone.packages_payload(files)
    assert payload[:8] == b"EXEPYPK1" and payload[8:24] == key.encode()
    order = [payload.find(n.replace("/", "\\").encode("utf-16-le")) for n in
             ("a/d.py", "a/b/c.py", "a/b/e.py", "b/z.py")]  # fmt: skip
    assert order == sorted(order) and -1 not in order
    assert standalone.packages_payload(list(reversed(files))) == (payload, key)
