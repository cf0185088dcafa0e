"""`exepy build/list/extract/bat` end to end on real PE bases, read back independently.

The bundle is read back with embeddedimport's own PE reader and bundle parser (not exepy's),
version info and icons with pefile.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pefile
import pytest
from embeddedimport import bundle
from embeddedimport import pe as ei_pe
from exepy import build
from exepy.cli import main
from exepy.corpus import pefile_resources
from exepy_support import Signer, ico, launcher, png


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small app in the current directory, with a base exe next to it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text("import pkg.util\nprint(pkg.util.greet())\n")
    pkg = tmp_path / "pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "util.py").write_text("def greet():\n    return 'hello'\n")
    (pkg / "data" / "blob.bin").write_bytes(bytes(range(256)) * 10)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"stale bytecode")
    shutil.copy(launcher("t64.exe"), tmp_path / "base.exe")
    return tmp_path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's usage errors (status 2)
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def bundled(exe: Path) -> tuple[dict[str, bytes], list[str] | None]:
    """Files and command line as embeddedimport reads them."""
    blob = ei_pe.find_resource(exe, bundle.RT_RCDATA, bundle.BUNDLE_ID)
    assert blob is not None
    command = ei_pe.find_resource(exe, bundle.RT_RCDATA, bundle.COMMAND_ID)
    return dict(bundle.unpack(blob)), None if command is None else bundle.unpack_command(command)


def test_build_then_extract(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["build", "app.exe", "app.py", "pkg", "--base", "base.exe"], capsys)
    assert (code, err) == (0, "")
    assert "4 files" in out
    files, command = bundled(project / "app.exe")
    assert files == {
        "app.py": (project / "app.py").read_bytes(),
        "pkg/__init__.py": b"",
        "pkg/data/blob.bin": bytes(range(256)) * 10,
        "pkg/util.py": (project / "pkg/util.py").read_bytes(),
    }
    assert command == ["-m", "app"]
    # The original stored Windows separators; so do we (embeddedimport's format choice).
    raw = ei_pe.find_resource(project / "app.exe", bundle.RT_RCDATA, bundle.BUNDLE_ID)
    assert b"pkg\\data\\blob.bin\0" in raw

    code, out, err = run_cli(["extract", "app.exe", "-o", "out"], capsys)
    assert code == 0, err
    assert 'command line: "-m" "app"' in out
    for name, content in files.items():
        assert (project / "out" / name).read_bytes() == content
    # Extracting again refuses to write into the folder it filled.
    code, _, err = run_cli(["extract", "app.exe", "-o", "out"], capsys)
    assert code == 2 and "the folder out already exists and is not empty" in err


def test_extract_never_merges_into_a_folder_without_force(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder rule: the default is a new folder named after the exe (it was '.'); an
    existing folder with anything in it is written into only with -f, which replaces the
    bundled names and keeps the rest; an empty one is fine."""
    assert run_cli(["build", "app.exe", "app.py", "pkg", "--base", "base.exe"], capsys)[0] == 0
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    code, out, err = run_cli(["extract", "app.exe"], capsys)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "wrote 4 files under app_extracted"
    assert (project / "app_extracted" / "app.py").read_bytes() == (project / "app.py").read_bytes()
    assert (
        sorted(p.relative_to(project) for p in project.rglob("*") if "app_extracted" not in p.parts)
        == before
    )

    (project / "mine").mkdir()
    (project / "mine" / "app.py").write_text("my own\n")
    (project / "mine" / "notes.txt").write_text("keep\n")
    files = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    for args, shown in ((["-o", "mine"], "mine"), (["-o", "."], "."), ([], "app_extracted")):
        code, out, err = run_cli(["extract", "app.exe", *args], capsys)
        assert (code, out) == (2, "")
        assert err.startswith(f"exepy: error: the folder {shown} already exists and is not")
        assert err.count("\n") == 1 and "pass --force to write into it" in err
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == files

    code, _, err = run_cli(["extract", "app.exe", "-o", "mine", "-f"], capsys)
    assert (code, err) == (0, "")
    assert (project / "mine" / "app.py").read_bytes() == (project / "app.py").read_bytes()
    assert (project / "mine" / "notes.txt").read_text() == "keep\n"

    (project / "empty").mkdir()
    assert run_cli(["extract", "app.exe", "-o", "empty"], capsys)[0] == 0
    assert (project / "empty" / "pkg" / "util.py").is_file()


def run_bundle(exe: str) -> subprocess.CompletedProcess[str]:
    """Run *exe*'s bundle here with embeddedimport, the code the exe itself runs."""
    return subprocess.run(
        [sys.executable, "-m", "embeddedimport", exe],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_main_in_a_plain_folder_imports_its_siblings(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python src/main.py` imports src/helper.py as `helper`: so does the exe. The stored
    names are relative to src (no __init__.py), run here by embeddedimport, the exe's own
    runtime code, on this Python."""
    src = project / "src"
    (src / "data").mkdir(parents=True)
    (src / "main.py").write_text(
        "import os, helper\n"
        "data = __loader__.get_data(os.path.join(os.path.dirname(__file__), 'data', 'x.txt'))\n"
        "print(helper.NAME, data.decode())\n"
    )
    (src / "helper.py").write_text("NAME = 'sibling'\n")
    (src / "data" / "x.txt").write_text("x")
    reference = subprocess.run(
        [sys.executable, "src/main.py"], capture_output=True, text=True, check=True
    )
    assert reference.stdout == "sibling x\n"
    args = ["build", "app.exe", "src/main.py", "src/helper.py", "src/data", "--base", "base.exe"]
    code, out, err = run_cli(args, capsys)
    assert (code, err) == (0, ""), err
    assert out == "wrote app.exe: 3 files, command line: -m main\n"
    files, command = bundled(project / "app.exe")
    assert sorted(files) == ["data/x.txt", "helper.py", "main.py"]
    assert command == ["-m", "main"]
    ran = run_bundle("app.exe")
    assert (ran.returncode, ran.stdout) == (0, reference.stdout), ran.stderr


def test_main_in_a_package_runs_as_its_module(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A MAIN whose folder is a package runs as `python -m pkg.main`: names stay relative to
    the current directory, so the package's relative imports work."""
    (project / "pkg" / "main.py").write_text("from . import util\nprint(util.greet())\n")
    code, _, err = run_cli(["build", "app.exe", "pkg/main.py", "pkg", "--base", "base.exe"], capsys)
    assert (code, err) == (0, "")
    files, command = bundled(project / "app.exe")
    assert "pkg/util.py" in files and "pkg/main.py" in files
    assert command == ["-m", "pkg.main"]
    ran = run_bundle("app.exe")
    assert (ran.returncode, ran.stdout) == (0, "hello\n"), ran.stderr


def test_file_outside_the_main_scripts_plain_folder_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "src").mkdir()
    (project / "src" / "main.py").write_text("print(1)\n")
    code, out, err = run_cli(
        ["build", "app.exe", "src/main.py", "app.py", "--base", "base.exe"], capsys
    )
    assert (code, out) == (2, "")
    assert err == (
        "exepy: error: 'app.py' is outside src/, the folder of the main script 'src/main.py': "
        "the exe imports from that folder, as 'python src/main.py' does; put it under src/, or "
        "add src/__init__.py to store names relative to the current directory and run "
        "'python -m src.main'\n"
    )
    assert not (project / "app.exe").exists()


def test_list_shows_the_tree(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["build", "app.exe", "app.py", "--base", "base.exe"], capsys)[0] == 0
    code, out, _ = run_cli(["list", "app.exe"], capsys)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    expected = pefile_resources((project / "app.exe").read_bytes())
    assert len(rows) == len(expected)
    assert ["10", "(RT_RCDATA)", "200", "0", str(len(expected[10, 200, 0]))] in rows
    assert ["10", "(RT_RCDATA)", "201", "0", str(len(expected[10, 201, 0]))] in rows


def test_no_command_and_rebuild(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["build", "app.exe", "app.py", "--base", "base.exe"], capsys)[0] == 0
    # Building from an exepy-built base replaces the bundle and drops the old command line.
    code, _, err = run_cli(
        ["build", "app2.exe", "pkg/util.py", "--base", "app.exe", "--no-command"], capsys
    )
    assert code == 0, err
    files, command = bundled(project / "app2.exe")
    assert list(files) == ["pkg/util.py"] and command is None


def test_icon_version_manifest_windowed(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "app.ico").write_bytes(ico([16, 32, 48]))
    manifest = (
        b'<?xml version="1.0"?>'
        b'<assembly xmlns="urn:schemas-microsoft-com:asm.v1" manifestVersion="1.0"/>'
    )
    (project / "app.manifest").write_bytes(manifest)
    base_resources = pefile_resources((project / "base.exe").read_bytes())
    code, _, err = run_cli(
        [
            "build",
            # repeated KEY=VALUE options no longer swallow the positionals after them
            "--version-info",
            "FileVersion=1.2.3.4",
            "--version-info",
            "ProductName=Démo App",
            "app.exe",
            "app.py",
            "--base",
            "base.exe",
            "--icon",
            "app.ico",
            "--version-info",
            "CompanyName=Us",
            "--manifest",
            "app.manifest",
            "--windowed",
        ],
        capsys,
    )
    assert code == 0, err
    data = (project / "app.exe").read_bytes()
    pe = pefile.PE(data=data)
    assert pe.OPTIONAL_HEADER.Subsystem == 2
    # Version: pefile parses the VS_VERSIONINFO we wrote.
    fixed = pe.VS_FIXEDFILEINFO[0]
    assert (fixed.FileVersionMS, fixed.FileVersionLS) == (0x00010002, 0x00030004)
    strings = {
        k.decode(): v.decode()
        for info in pe.FileInfo[0]
        if info.Key == b"StringFileInfo"
        for table in info.StringTable
        for k, v in table.entries.items()
    }
    assert strings == {"FileVersion": "1.2.3.4", "ProductName": "Démo App", "CompanyName": "Us"}
    resources = pefile_resources(data)
    assert [k for k in resources if k[0] == 24] == [
        (24, 1, next(k[2] for k in base_resources if k[0] == 24))
    ]
    assert next(v for k, v in resources.items() if k[0] == 24) == manifest
    # Icon: the first group names three RT_ICON images holding the .ico's bytes.
    group_key = min(k for k in resources if k[0] == 14)
    group = resources[group_key]
    count = struct.unpack_from("<H", group, 4)[0]
    ids = [struct.unpack_from("<H", group, 6 + 14 * i + 12)[0] for i in range(count)]
    images = [resources[3, i, group_key[2]] for i in ids]
    assert images == [png(s, s, (s, 0, 255 - s)) for s in (16, 32, 48)]
    # The base's old images that only the replaced group used are gone.
    old_group = base_resources[min(k for k in base_resources if k[0] == 14)]
    old_ids = {
        struct.unpack_from("<H", old_group, 6 + 14 * i + 12)[0]
        for i in range(struct.unpack_from("<H", old_group, 4)[0])
    }
    assert not (old_ids - set(ids)) & {k[1] for k in resources if k[0] == 3}


@pytest.mark.parametrize(
    ("args", "setup", "message"),
    [
        (["build", "app.exe", "app.py"], None, "--base BASE.exe is required"),
        (["build", "app.exe", "app.py", "--base", "app.py"], None, "not a PE file"),
        (["build", "app.exe", "app.py", "--base", "missing.exe"], None, "cannot read"),
        (
            ["build", "app.exe", "../outside.py", "--base", "base.exe"],
            "outside",
            "outside the current directory",
        ),
        (
            ["build", "app.exe", "app.py", "naïve.txt", "--base", "base.exe"],
            "nonascii",
            "non-ASCII",
        ),
        (
            ["build", "app.exe", "app.py", "nothing", "--base", "base.exe"],
            None,
            "neither a file nor a folder",
        ),
        (
            ["build", "app.exe", "app.py", "--base", "base.exe", "--version-info", "oops"],
            None,
            "KEY=VALUE",
        ),
        (
            ["build", "app.exe", "app.py", "--base", "base.exe", "--version-info", "FileVersion=x"],
            None,
            "four dot-separated numbers",
        ),
        (
            ["build", "app.exe", "app.py", "--base", "base.exe", "--icon", "app.py"],
            None,
            "--icon app.py: not an .ico file",
        ),
        (["build", "app.exe", "my-app.py", "--base", "base.exe"], "dash", "module name"),
        (
            ["build", "base.exe", "app.py", "--base", "base.exe", "--force"],
            None,
            "must not be the base",
        ),
        (["extract", "base.exe"], None, "has no exepy bundle"),
        (["list", "app.py"], None, "not a PE file"),
        # Not "not signed" (exit 1): a file that is no PE, or none, is a usage error.
        (["verify", "app.py"], None, "not a PE file"),
        (["verify", "missing.exe"], None, "cannot read"),
    ],
)
def test_user_errors(
    args: list[str],
    setup: str | None,
    message: str,
    project: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if setup == "outside":
        (project.parent / "outside.py").write_text("print(1)\n")
    elif setup == "nonascii":
        (project / "naïve.txt").write_text("x")
    elif setup == "dash":
        (project / "my-app.py").write_text("print(1)\n")
    if sys.platform == "win32" and message.startswith("--base"):
        pytest.skip("on Windows the running python.exe is the default base")
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    code, _, err = run_cli(args, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    assert after == before, "an error left files behind or changed an input"


def test_existing_output_file_is_replaced_atomically(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI rule: an output file is replaced (no --force), the old one intact until the
    new one is complete; a failed build leaves it as it was and no temporary file."""
    (project / "app.exe").write_bytes(b"keep me")
    code, _, err = run_cli(
        ["build", "app.exe", "app.py", "--base", "base.exe", "--icon", "app.py"], capsys
    )
    assert code == 2 and "not an .ico file" in err
    assert (project / "app.exe").read_bytes() == b"keep me"
    assert not [p for p in project.iterdir() if p.name.startswith(".")]
    code, _, err = run_cli(["build", "app.exe", "app.py", "--base", "base.exe"], capsys)
    assert (code, err) == (0, "")
    assert bundled(project / "app.exe")[1] == ["-m", "app"]
    assert not [p for p in project.iterdir() if p.name.startswith(".")]


def test_build_into_a_missing_folder_names_the_folder(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in project.iterdir())
    target = str(Path("no-such") / "app.exe")
    code, _, err = run_cli(["build", target, "app.py", "--base", "base.exe"], capsys)
    assert code == 2
    # the folder as an absolute path (which on Windows may spell the temp folder differently)
    assert "the output folder " in err and f"{os.sep}no-such does not exist; create it" in err
    assert ".tmp" not in err and "Traceback" not in err
    # a file where the folder should be, and a folder where the exe should be
    target = str(Path("app.py") / "app.exe")
    code, _, err = run_cli(["build", target, "app.py", "--base", "base.exe"], capsys)
    assert code == 2 and f"{os.sep}app.py is a file, not a folder" in err
    code, _, err = run_cli(["build", "pkg", "app.py", "--base", "base.exe", "--force"], capsys)
    assert code == 2 and "the output pkg is a folder; give the exe's file name" in err
    assert sorted(p.name for p in project.iterdir()) == before


def test_writing_into_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    from exepy.editor import write_atomic

    folder = tmp_path / "no-such"
    with pytest.raises(FileNotFoundError) as raised:
        write_atomic(folder / "out.exe", b"MZ")
    assert raised.value.filename == str(folder)
    assert raised.value.strerror == "the output folder does not exist"
    assert list(tmp_path.iterdir()) == []


def test_extract_into_a_file_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["build", "app.exe", "app.py", "pkg", "--base", "base.exe"], capsys)[0] == 0
    app = (project / "app.py").read_bytes()
    code, out, err = run_cli(["extract", "app.exe", "-o", "app.py"], capsys)
    assert code == 2 and out == ""
    assert "-o must be a folder, but app.py is a file" in err and "Traceback" not in err
    assert (project / "app.py").read_bytes() == app
    # a bundled folder whose name is taken by a file: refused before anything is written
    (project / "out").mkdir()
    (project / "out" / "pkg").write_text("a file")
    code, out, err = run_cli(["extract", "app.exe", "-o", "out", "--force"], capsys)
    assert code == 2
    assert f"{os.sep}{Path('out', 'pkg')} is a file, not a folder" in err
    assert sorted(p.name for p in (project / "out").iterdir()) == ["pkg"]


@pytest.mark.wine  # osslsigncode: installed with Wine on Linux, absent on windows-latest
def test_signed_base_warns(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    signer = Signer.create(project)
    signer.sign(project / "base.exe", project / "signed.exe")
    code, _, err = run_cli(["build", "app.exe", "app.py", "--base", "signed.exe"], capsys)
    assert code == 0
    assert "exepy: warning:" in err and "Re-sign the output" in err
    assert signer.verify(project / "signed.exe")
    assert not signer.verify(project / "app.exe")
    assert bundled(project / "app.exe")[1] == ["-m", "app"]


def test_runs_with_python_m_embeddedimport(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exe's bundle runs on this OS the way the exe would run it."""
    assert run_cli(["build", "app.exe", "app.py", "pkg", "--base", "base.exe"], capsys)[0] == 0
    proc = subprocess.run(
        [sys.executable, "-m", "embeddedimport", "app.exe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello\n"


# The batch/Python polyglot ---------------------------------------------------------------


def test_bat_python_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tool.py").write_text(
        "import sys\nprint('args', sys.argv[1:])\nraise SystemExit(3)\n"
    )
    code, out, _ = run_cli(["bat", "tool.py"], capsys)
    assert code == 0 and "tool.bat" in out
    data = (tmp_path / "tool.bat").read_bytes()
    first, rest = data.split(b"\r\n", 1)
    assert first == build.BAT_LINE.encode()
    assert rest == (tmp_path / "tool.py").read_bytes()
    # Python's -x skips the batch line and runs the rest.
    proc = subprocess.run(
        [sys.executable, "-x", "tool.bat", "a b", "c"], capture_output=True, text=True
    )
    assert proc.returncode == 3
    assert proc.stdout == "args ['a b', 'c']\n"
    (tmp_path / "tool.py").write_text("print('v2')\n")
    assert run_cli(["bat", "tool.py"], capsys)[0] == 0  # an output file is replaced
    assert (tmp_path / "tool.bat").read_bytes().endswith(b"print('v2')\n")
    assert run_cli(["bat", "tool.py", "--admin", "-o", "admin.bat"], capsys)[0] == 0
    assert (tmp_path / "admin.bat").read_bytes().startswith(build.BAT_ADMIN_LINE.encode() + b"\r\n")
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbfprint(1)\n")
    code, _, err = run_cli(["bat", "bom.py"], capsys)
    assert code == 2 and "byte-order mark" in err
    assert not (tmp_path / "bom.bat").exists()


def test_console_script_help() -> None:
    exe = shutil.which("exepy")
    command = [exe] if exe else [sys.executable, "-m", "exepy.cli"]
    proc = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    for sub in ("build", "list", "extract", "bat"):
        assert sub in proc.stdout


def test_missing_arguments_name_only_the_required_ones() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exepy", "build"], capture_output=True, text=True, timeout=30
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    last = proc.stderr.splitlines()[-1]
    # FILE_OR_DIR is optional (nargs="*"), and OUT may come as -o: neither is called required.
    # MAIN.py is optional for argparse (an --interpreter has none): exepy names OUT first.
    assert last == "exepy: error: give the output: exepy build OUT MAIN.py (or -o OUT MAIN.py)"
    proc = subprocess.run(
        [sys.executable, "-m", "exepy", "build", "app.py"], capture_output=True, text=True
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert (
        proc.stderr
        == "exepy: error: give the output: exepy build OUT MAIN.py (or -o OUT MAIN.py)\n"
    )


def test_output_as_option(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o/--output OUT as in every tool of the repository; then MAIN.py comes first."""
    code, out, err = run_cli(
        ["build", "-o", "app.exe", "app.py", "pkg", "--base", "base.exe"], capsys
    )
    assert (code, err) == (0, "") and "4 files" in out
    files, command = bundled(project / "app.exe")
    assert command == ["-m", "app"] and "pkg/util.py" in files
    code, _, err = run_cli(["build", "app.py", "--output", "b.exe", "--base", "base.exe"], capsys)
    assert (code, err) == (0, "") and bundled(project / "b.exe")[0].keys() == {"app.py"}


def test_positionals_may_follow_options(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`exepy build OUT --base B MAIN FILES`: argparse alone took OUT from the first run of
    positionals and called MAIN.py and the files after an option unrecognized."""
    for out_exe, args in (
        ("a.exe", ["a.exe", "--base", "base.exe", "app.py", "pkg"]),
        ("b.exe", ["--base", "base.exe", "b.exe", "app.py", "--windowed", "pkg"]),
        ("c.exe", ["c.exe", "app.py", "--base", "base.exe", "pkg"]),
    ):
        code, _out, err = run_cli(["build", *args], capsys)
        assert (code, err) == (0, ""), args
        files, command = bundled(project / out_exe)
        assert command == ["-m", "app"] and "pkg/util.py" in files, args
    code, _, err = run_cli(["extract", "--force", "a.exe", "-o", "x"], capsys)
    assert code == 0 and (project / "x/app.py").is_file(), err
    # After "--" a name may start with a dash, as before.
    (project / "a.exe").rename(project / "-a.exe")
    code, out, err = run_cli(["list", "--", "-a.exe"], capsys)
    assert code == 0 and "RT_RCDATA" in out, err


def test_out_never_overwrites_a_source(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`exepy build main.py util.py` (the exe's name forgotten) wrote the exe over main.py;
    an OUT inside a bundled folder overwrote that file."""
    sources = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    for args, words in (
        (["app.py", "pkg/util.py"], "OUT app.py is a Python script"),
        (["pkg/data/blob.bin", "app.py", "pkg"], "is a file in pkg, a folder given to bundle"),
        (["-o", "pkg/data/blob.bin", "app.py", "pkg"], "a folder given to bundle"),
    ):
        code, out, err = run_cli(["build", *args, "--base", "base.exe"], capsys)
        assert (code, out) == (2, "") and words in err and err.count("\n") == 1, (args, err)
    for name in ("../escaped", "a/b", "", ".."):
        code, _, err = run_cli(["build", "d", "app.py", "--name", name], capsys)
        assert code == 2 and "--name is the exe's file name without a folder" in err, name
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == sources


def _exepy(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exepy", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_json_to_stdout_and_to_a_file(project: Path) -> None:
    """`--json -` puts JSON alone on stdout (the table goes to stderr); `--json FILE` writes
    the file atomically and keeps the table on stdout."""
    import json

    assert _exepy("build", "app.exe", "app.py", "pkg", "--base", "base.exe").returncode == 0
    proc = _exepy("list", "app.exe", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    rcdata = [e for e in listing if e["type_name"] == "RT_RCDATA"]
    assert [(e["type"], e["name"]) for e in rcdata] == [(10, 200), (10, 201)]
    assert rcdata[0]["size"] == len(ei_pe.find_resource(project / "app.exe", 10, 200) or b"")
    assert "TYPE" in proc.stderr and "TYPE" not in proc.stdout
    proc = _exepy("list", "app.exe", "--json", "list.json")
    assert proc.returncode == 0 and "TYPE" in proc.stdout
    assert json.loads((project / "list.json").read_text()) == listing
    proc = _exepy("extract", "app.exe", "-o", "out", "--json", "-")
    files = json.loads(proc.stdout)
    assert files["command"] == ["-m", "app"] and {"name": "app.py", "size": 40} in files["files"]
    proc = _exepy("build", "b.exe", "app.py", "--base", "base.exe", "--json", "-")
    built = json.loads(proc.stdout)
    assert built["mode"] == "base" and built["size"] == (project / "b.exe").stat().st_size
    assert proc.stderr.startswith("wrote b.exe")


def test_runtime_list_json(tmp_path: Path) -> None:
    import json

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = _exepy("runtime", "list", "--json", "-", env=env)
    assert (proc.returncode, json.loads(proc.stdout)) == (0, [])
    assert "no runtimes in" in proc.stderr


def test_runtime_fetch_names_what_went_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path given as VERSION points to --from; an old pip's usage error (a Python 3.11
    venv's own pip 23.2 knows no --progress-bar raw) is named, not "no sdist was found"."""
    from exepy import runtime

    (tmp_path / "python-3.13.0-embed-amd64.zip").write_bytes(b"")
    proc = _exepy("runtime", "fetch", "python-3.13.0-embed-amd64.zip", cwd=tmp_path)
    assert proc.returncode == 2 and "exepy runtime fetch --from python-3.13.0" in proc.stderr
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    venv = tmp_path / "old-pip"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    if sys.platform == "win32":
        python = venv / "Scripts" / "python.exe"
    old = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True)
    if not old.stdout.startswith("pip 2") or int(old.stdout.split()[1].split(".")[0]) >= 24:
        pytest.skip(f"this Python's venv brings {old.stdout.split()[:2]}, not an old pip")
    with pytest.raises(runtime.PythonRuntimeError, match="invalid choice: 'raw'"):
        runtime.fetch_runtime("3.13", pip=[str(python), "-m", "pip"])


def test_version_and_completion() -> None:
    proc = _exepy("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("exepy ")
    proc = _exepy("completion", "bash")
    assert proc.returncode == 0 and "runtime" in proc.stdout and "--onefile" in proc.stdout
    proc = _exepy("completion", "zsh")
    assert proc.returncode == 0 and "#compdef exepy" in proc.stdout


def test_interpreter_refusals(tmp_path: Path) -> None:
    """One line each, nothing written: no runtime; no MAIN without --interpreter."""

    def exepy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "exepy", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = exepy("build", "python.exe", "--interpreter")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "exepy: error: --interpreter builds a standalone python.exe: add --runtime VERSION "
        "(e.g. --runtime 3.13 after 'exepy runtime fetch 3.13')\n"
    )
    done = exepy("build", "app.exe", "--runtime", "3.13")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "exepy: error: give MAIN.py, the script the exe runs: exepy build OUT MAIN.py "
        "(or --interpreter --runtime VERSION for a python.exe with no main)\n"
    )
    assert list(tmp_path.iterdir()) == []


META = """\
import json
from importlib import metadata

files = metadata.files("tool-kit") or []
print(json.dumps({str(f): [f.hash and f.hash.value, f.size] for f in files}))
"""


def _record_wheel(folder: Path) -> Path:
    """A wheel whose import name is not its distribution's (no top_level.txt, as flit and
    hatchling write), with a purelib module, a script and a RECORD with hashes."""
    import base64
    import hashlib
    import zipfile

    info = "tool_kit-1.0.dist-info"
    files = {
        "toolkit_impl/__init__.py": b"VALUE = 1\n",
        "tool_kit-1.0.data/purelib/extra_mod.py": b"NAME = 'extra'\n",
        "tool_kit-1.0.data/scripts/tk-tool": b"#!python\nprint('tool')\n",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: tool-kit\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"sha256={raw}"

    record = "".join(f"{n},{digest(c)},{len(c)}\n" for n, c in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / "tool_kit-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return path


def test_bundled_record_lists_exactly_the_bundled_files(tmp_path: Path) -> None:
    """importlib.metadata.files() of a bundled wheel, run with `python -m embeddedimport`:
    RECORD's own rows for what the bundle holds (purelib at the top), not the script."""
    import json

    from components import missing
    from exepy import runtime

    try:
        runtime.fetch("3.13")
    except runtime.PythonRuntimeError as exc:
        missing("the Python 3.13 embeddable runtime", str(exc))
    (tmp_path / "meta.py").write_text(META)
    _record_wheel(tmp_path)
    args = ["build", "meta.exe", "meta.py", "--runtime", "3.13", "--wheel"]
    proc = _exepy(*args, "tool_kit-1.0-py3-none-any.whl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "embeddedimport", "meta.exe"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)
    assert sorted(files) == [
        "extra_mod.py",
        "tool_kit-1.0.dist-info/METADATA",
        "tool_kit-1.0.dist-info/RECORD",
        "tool_kit-1.0.dist-info/WHEEL",
        "toolkit_impl/__init__.py",
    ]
    assert files["toolkit_impl/__init__.py"][1] == len(b"VALUE = 1\n")
    assert files["extra_mod.py"][0] and files["tool_kit-1.0.dist-info/RECORD"] == [None, None]
