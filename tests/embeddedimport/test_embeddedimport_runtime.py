"""Running bundled applications: ``python -m embeddedimport`` and the start-up hook.

The hook is exercised for real: a fresh virtual environment gets the ``embeddedimport.pth``
the wheel ships, and its interpreter is started with ``EMBEDDEDIMPORT_EXECUTABLE``
pointing at an executable (on Windows, ``sys.executable`` itself is used). Both ways of
running an app must give it the same ``sys.argv``, ``sys.path`` and module attributes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import embeddedimport
import pytest
from embeddedimport.runtime import CommandLineError, parse_command_line
from embeddedimport_testpe import MakeExe, original_bundle

PACKAGE = Path(embeddedimport.__file__).resolve().parent
SHIPPED_PTH = PACKAGE.parent / "embeddedimport.pth"
ENV_VAR = "EMBEDDEDIMPORT_EXECUTABLE"

REPORT = b"""\
import json, os, sys
import app
print(json.dumps({
    "argv": sys.argv,
    "file": __file__,
    "name": __name__,
    "spec": __spec__.name if __spec__ else None,
    "package": __package__,
    "loader": type(__loader__).__name__,
    "path0": sys.path[0],
    "cwd_on_path": "" in sys.path or os.getcwd() in sys.path,
    "app_file": app.__file__,
    "sitecustomized": getattr(sys, "SITECUSTOMIZED", False),
    "later_pth": any(p.endswith("added-by-later-pth") for p in sys.path),
    "main_is_module": sys.modules["__main__"].__dict__ is globals(),
}))
"""
APP = [
    ("main.py", REPORT),
    ("app/__init__.py", b""),
    ("app/__main__.py", b"import sys\nprint('package main', sys.argv[1:])\n"),
    (
        "app/cli.py",
        b"import sys\n\n\ndef crash():\n    raise RuntimeError('bundled failure')\n\n\n"
        b"if 'crash' in sys.argv:\n    crash()\n",
    ),
    ("exit7.py", b"import sys\nsys.exit(7)\n"),
    ("exitmsg.py", b"import sys\nsys.exit('fatal: bad input')\n"),
    (
        "shutdown.py",
        b"import atexit, threading, time\n"
        b"atexit.register(lambda: print('atexit ran', flush=True))\n"
        b"def late():\n    time.sleep(0.2)\n    print('thread done')\n"
        b"threading.Thread(target=late).start()\n"
        b"print('main done', end='')\n",
    ),
    (
        "child.py",
        b"import subprocess, sys\n"
        b"subprocess.run([sys.executable, '-c', "
        b"'import os; print(os.environ.get(\"EMBEDDEDIMPORT_EXECUTABLE\"))'], check=True)\n",
    ),
]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hook_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv whose site-packages holds the shipped .pth, like an installed wheel."""
    root = tmp_path_factory.mktemp("hookvenv")
    venv.EnvBuilder(with_pip=False, symlinks=sys.platform != "win32").create(root / "venv")
    python = root / "venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    site_packages = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # Sorted before embeddedimport.pth: where an installed wheel would put the package.
    (site_packages / "_embeddedimport_source.pth").write_text(str(PACKAGE.parent) + "\n")
    (site_packages / "embeddedimport.pth").write_bytes(SHIPPED_PTH.read_bytes())
    # Processed after ours: the app must still see their effects (it runs after site).
    (site_packages / "zz_later.pth").write_text(str(root / "added-by-later-pth") + "\n")
    (root / "added-by-later-pth").mkdir()
    (site_packages / "sitecustomize.py").write_text("import sys\nsys.SITECUSTOMIZED = True\n")
    return python


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != ENV_VAR}
    env.update(extra)
    return env


def run_hook(python: Path, exe: Path, args: Sequence[str], cwd: Path) -> Result:
    """Start the venv's interpreter as if it were ``exe`` (the hook reads exe's resources)."""
    done = subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(**{ENV_VAR: str(exe)}),
        timeout=60,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def run_module(exe: Path, args: Sequence[str], cwd: Path) -> Result:
    """``python -m embeddedimport exe args`` with the test interpreter."""
    return run_cli([str(exe), *args], cwd)


def both(python: Path, exe: Path, args: Sequence[str], cwd: Path) -> tuple[Result, Result]:
    return run_hook(python, exe, args, cwd), run_module(exe, args, cwd)


def test_the_wheel_ships_the_startup_file() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    # The project's files, found from this test (the package may be an installed wheel).
    source = Path(__file__).resolve().parents[2] / "packages" / "embeddedimport"
    pyproject = tomllib.loads((source / "pyproject.toml").read_text())
    force = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force == {"src/embeddedimport.pth": "embeddedimport.pth"}
    line = SHIPPED_PTH.read_text()
    assert line == (source / "src" / "embeddedimport.pth").read_text()
    assert line.startswith("import ") and line.count("\n") == 1  # site.py exec()s such lines


def test_app_sees_the_same_world_both_ways(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(APP)
    args = ["input.txt", "--flag", "-x", "ünï"]
    hook, module = both(hook_python, exe, args, tmp_path)
    assert hook.returncode == 0, hook.stderr
    assert module.returncode == 0, module.stderr
    main_file = os.path.join(str(exe), "main.py")
    expected = {
        "argv": [main_file, *args],
        "file": main_file,
        "name": "__main__",
        "spec": "main",
        "package": "",
        "loader": "EmbeddedImporter",
        "path0": str(exe),
        "cwd_on_path": False,
        "app_file": os.path.join(str(exe), "app", "__init__.py"),
        "main_is_module": True,
    }
    got_hook, got_module = hook.json(), module.json()
    assert {k: got_hook[k] for k in expected} == expected
    assert {k: got_module[k] for k in expected} == expected
    # The hook runs the app only after site.py finished: later .pth files, sitecustomize.
    assert got_hook["sitecustomized"] is True
    assert got_hook["later_pth"] is True


DECOY_CHECK = b"""\
import json, os, sys
try:
    import only_in_cwd
    shadow = only_in_cwd.__file__
except ImportError:
    shadow = None
print(json.dumps({"file": __file__, "shadow": shadow, "path0": sys.path[0]}))
"""


@pytest.mark.parametrize("command", [["-m", "main"], ["-c", "import main"]], ids=["-m", "-c"])
def test_files_in_the_working_folder_do_not_shadow_the_bundle(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path, command: list[str]
) -> None:
    """A double-clicked exe runs its own main.py, not one lying in the working folder."""
    exe = make_exe([("main.py", DECOY_CHECK)], command=command)
    work = tmp_path / "Downloads"
    work.mkdir()
    (work / "main.py").write_text("raise SystemExit('the working folder main.py ran')\n")
    (work / "only_in_cwd.py").write_text("")
    for result in both(hook_python, exe, [], work):
        assert result.returncode == 0, result.stderr
        seen = result.json()
        assert seen == {
            "file": os.path.join(str(exe), "main.py"),
            "shadow": None,
            "path0": str(exe),
        }


def test_a_script_target_gets_its_folder_after_the_bundle(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    script = scripts / "run.py"
    script.write_text(
        "import sys, helper, beside\n"
        "print(helper.WHERE, beside.WHERE, sys.path[:2] == [sys.argv[1], sys.argv[2]])\n"
    )
    (scripts / "helper.py").write_text("WHERE = 'next to the script'\n")
    (scripts / "beside.py").write_text("WHERE = 'beside'\n")
    exe = make_exe([("helper.py", b"WHERE = 'bundle'\n")], command=[str(script)])
    args = [str(exe), str(scripts)]
    for result in both(hook_python, exe, args, tmp_path):
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "bundle beside True"


def test_double_dash_lets_options_past_cpythons_own_parser(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(APP)
    hook = run_hook(hook_python, exe, ["--", "--help", "x"], tmp_path)
    assert hook.returncode == 0, hook.stderr
    assert hook.json()["argv"][1:] == ["--help", "x"]
    module = run_module(exe, ["--help", "x"], tmp_path)
    assert module.json()["argv"][1:] == ["--help", "x"]


@pytest.mark.parametrize(
    ("command", "args", "returncode", "stdout", "stderr"),
    [
        (["-m", "exit7"], [], 7, "", ""),
        (["-m", "exitmsg"], [], 1, "", "fatal: bad input"),
        (["-m", "app"], ["one"], 0, "package main ['one']", ""),
        (["-B", "-u", "-W", "ignore", "-m", "app"], [], 0, "package main []", ""),
        (["-c", "import sys; print(sys.argv)"], ["x"], 0, "['-c', 'x']", ""),
        (["-m", "nosuchmodule"], [], 1, "", "No module named nosuchmodule"),
        (["-m", "shutdown"], [], 0, "main donethread done\natexit ran", ""),
        (["-m", "child"], [], 0, "None", ""),
    ],
    ids=[
        "exit-code",
        "exit-message",
        "package-main",
        "options",
        "dash-c",
        "missing",
        "shutdown",
        "child-env",
    ],
)
def test_exit_status_and_output_match_cpython(
    hook_python: Path,
    make_exe: MakeExe,
    tmp_path: Path,
    command: list[str],
    args: list[str],
    returncode: int,
    stdout: str,
    stderr: str,
) -> None:
    exe = make_exe(APP, command=command)
    for result in both(hook_python, exe, args, tmp_path):
        assert result.returncode == returncode, result.stderr
        assert stdout in result.stdout
        assert stderr in result.stderr


def test_uncaught_error_shows_bundled_source_without_our_frames(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(APP, command=["-m", "app.cli"])
    for result in both(hook_python, exe, ["crash"], tmp_path):
        assert result.returncode == 1
        cli = os.path.join(str(exe), "app", "cli.py")
        assert f'File "{cli}", line 5, in crash' in result.stderr
        assert "raise RuntimeError('bundled failure')" in result.stderr
        assert "RuntimeError: bundled failure" in result.stderr
        assert "embeddedimport" + os.sep not in result.stderr.replace(str(exe), "")


def test_without_a_stored_command_the_bundle_is_just_importable(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(APP, command=None)
    hook = run_hook(hook_python, exe, ["-c", "import app; print(app.__file__)"], tmp_path)
    assert hook.returncode == 0, hook.stderr
    assert hook.stdout.strip() == os.path.join(str(exe), "app", "__init__.py")
    module = run_module(exe, [], tmp_path)
    assert module.returncode == 2
    assert "no stored command line (resource 201)" in module.stderr
    given = run_module(exe, ["-m", "app", "z"], tmp_path)
    assert given.returncode == 0, given.stderr
    assert "package main ['z']" in given.stdout


def test_an_executable_without_a_bundle_changes_nothing(
    hook_python: Path, base_exe: bytes, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.exe"
    plain.write_bytes(base_exe)
    code = "import sys; print('plain', 'embeddedimport.importer' in sys.modules)"
    result = run_hook(hook_python, plain, ["-c", code], tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, "plain False")
    assert result.stderr == ""


@pytest.mark.usefixtures("clean_imports")
def test_activate_in_process_ignores_what_is_not_a_bundle(
    base_exe: bytes, make_exe: MakeExe, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.exe"
    plain.write_bytes(base_exe)
    text = tmp_path / "notes.txt"
    text.write_text("not a PE file")
    hooks = list(sys.path_hooks)
    for target in (plain, text, tmp_path / "missing.exe"):
        embeddedimport.activate(str(target))
        assert sys.path_hooks == hooks
    # A bundle without a stored command is only installed: nothing runs, nothing exits.
    exe = make_exe([("quiet_mod.py", b"VALUE = 5\n")], command=None)
    embeddedimport.activate(str(exe))
    assert __import__("quiet_mod").VALUE == 5
    assert sys.path[0] == str(exe)


def test_a_corrupt_bundle_stops_with_a_clear_message(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(bundle=original_bundle([("main.py", b"print(1)\n")])[:-3])
    hook = run_hook(hook_python, exe, [], tmp_path)
    assert hook.returncode == 1
    assert "cannot start the bundled application" in hook.stderr
    assert "truncated" in hook.stderr
    assert "Traceback" not in hook.stderr
    module = run_module(exe, [], tmp_path)
    assert module.returncode == 2
    assert "truncated" in module.stderr
    assert "Traceback" not in module.stderr


def run_cli(args: Sequence[str], cwd: Path) -> Result:
    """``python -m embeddedimport`` with raw arguments."""
    done = subprocess.run(
        [sys.executable, "-m", "embeddedimport", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(PYTHONPATH=str(PACKAGE.parent)),
        timeout=60,
    )
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # ARGS may be empty: only APP.exe is required (argparse listed "APP.exe, ARGS").
        ([], "error: the following arguments are required: APP.exe\n"),
        (["missing.exe"], "missing.exe: no such file"),
    ],
)
def test_cli_user_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli(args, tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_reports_a_pe_without_bundle(base_exe: bytes, tmp_path: Path) -> None:
    plain = tmp_path / "plain.exe"
    plain.write_bytes(base_exe)
    result = run_module(plain, [], tmp_path)
    assert result.returncode == 2
    assert "resource RT_RCDATA 200 is missing" in result.stderr


def test_cli_help(tmp_path: Path) -> None:
    result = run_cli(["--help"], tmp_path)
    assert result.returncode == 0
    assert "APP.exe" in result.stdout


def test_cli_version_and_the_apps_arguments_untouched(make_exe: MakeExe, tmp_path: Path) -> None:
    version = run_cli(["--version"], tmp_path)
    assert version.returncode == 0
    assert version.stdout.startswith("embeddedimport "), version.stdout
    exe = make_exe([("main.py", b"import sys; print(sys.argv[1:])\n")])
    # Everything after the exe is the app's: -h, --version and a -- as given.
    args = ["-h", "--version", "--", "--x", "-c", "1"]
    result = run_module(exe, args, tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, repr(args)), result.stderr
    result = run_cli(["--", str(exe), "--"], tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, "['--']"), result.stderr
    unknown = run_cli(["--frob", str(exe)], tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[-1].startswith("embeddedimport: error: unrecognized")


@pytest.mark.parametrize(
    ("argv", "kind", "target", "args"),
    [
        (["-m", "main"], "module", "main", ()),
        (["-mmain", "a"], "module", "main", ("a",)),
        (["-B", "-m", "pkg.mod", "-m", "x"], "module", "pkg.mod", ("-m", "x")),
        (["-c", "pass", "-c"], "code", "pass", ("-c",)),
        (["-uB", "script.py", "--opt"], "script", "script.py", ("--opt",)),
        (["--", "-weird.py"], "script", "-weird.py", ()),
        (["-W", "error", "-Wignore", "-m", "m"], "module", "m", ()),
    ],
)
def test_parse_command_line(argv: list[str], kind: str, target: str, args: tuple) -> None:
    command = parse_command_line(argv)
    assert (command.kind, command.target, command.args) == (kind, target, args)


def test_parse_command_line_options() -> None:
    command = parse_command_line(["-uB", "-W", "error", "-Wignore", "-m", "m"])
    assert command.unbuffered and command.dont_write_bytecode
    assert command.warnoptions == ("error", "ignore")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "names nothing to run"),
        (["-B"], "names nothing to run"),
        (["-m"], "needs an argument"),
        (["-X", "utf8", "-m", "main"], "-X.*at start-up.*supports -m MODULE"),
        (["-I", "-m", "main"], "-I"),
        (["-"], "stdin"),
    ],
)
def test_parse_command_line_refuses_what_it_cannot_do(argv: list[str], message: str) -> None:
    with pytest.raises(CommandLineError, match=message):
        parse_command_line(argv)


def test_stored_command_with_startup_only_option_is_reported(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(APP, command=["-X", "utf8", "-m", "main"])
    module = run_module(exe, [], tmp_path)
    assert module.returncode == 2
    assert "can only be given to the interpreter at start-up" in module.stderr
    hook = run_hook(hook_python, exe, [], tmp_path)
    # the exe answers as python -m embeddedimport does: one line naming it, status 2
    assert hook.returncode == 2
    (line,) = hook.stderr.splitlines()
    assert line.startswith("app.exe: error: option '-X'")
    assert "can only be given to the interpreter at start-up" in line


@pytest.mark.parametrize(
    ("executable", "platform", "environ", "activates"),
    [
        (r"C:\Python311\python.exe", "win32", {}, False),
        (r"C:\Python311\pythonw.exe", "win32", {}, False),
        (r"C:\Python311\PYTHON3.11.EXE", "win32", {}, False),
        (r"C:\Python311\python_d.exe", "win32", {}, False),
        (r"C:\Python311\pythonw3_d.exe", "win32", {}, False),
        (r"C:\Python311\app.exe", "win32", {}, True),
        (r"C:\Python311\pythonic-app.exe", "win32", {}, True),
        (r"C:\Python311\python-tool.exe", "win32", {}, True),
        ("", "win32", {}, False),
        ("/usr/bin/python3", "linux", {}, False),
        ("/opt/app", "linux", {}, False),
        ("/usr/bin/python3", "linux", {ENV_VAR: "app.exe"}, True),
    ],
)
def test_pth_line_filters_before_importing_anything(
    executable: str, platform: str, environ: dict[str, str], activates: bool
) -> None:
    """The shipped line, run with stand-ins for os, sys and embeddedimport."""
    import ntpath
    import types

    calls: list[str] = []
    fake_sys = types.SimpleNamespace(executable=executable, platform=platform)
    fake_os = types.SimpleNamespace(environ=environ, path=ntpath)
    fake_package = types.SimpleNamespace(activate=lambda: calls.append("activate"))
    modules = {"os": fake_os, "sys": fake_sys, "embeddedimport": fake_package}

    def fake_import(name: str, *args: object, **kwargs: object) -> object:
        return modules[name]

    namespace = {"__builtins__": {"__import__": fake_import}}
    exec(SHIPPED_PTH.read_text(), namespace)
    assert calls == (["activate"] if activates else [])


SPAWN = "from multiprocessing.spawn import spawn_main; spawn_main(parent_pid=12, pipe_handle=345)"
CHILD = {"parent_pid": 12, "pipe_handle": 345}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--multiprocessing-fork", "parent_pid=12", "pipe_handle=345"],
            {"parent_pid": 12, "pipe_handle": 345},
        ),
        (["--multiprocessing-fork", "tracker_fd=None"], {"tracker_fd": None}),
        (
            ["-I", "-S", "-c", SPAWN, "--multiprocessing-fork"],
            {"parent_pid": 12, "pipe_handle": 345},
        ),
        # the app's own arguments stay the app's
        (["-c", "config.ini"], None),
        (["-c", SPAWN], None),
        (["-c", "import os; os.system('x')", "--multiprocessing-fork"], None),
        (["input.txt", "-c", SPAWN, "--multiprocessing-fork"], None),
        (["--multiprocessing-fork", "parent_pid=__import__('os')"], None),
        ([], None),
    ],
)
def test_multiprocessing_child_command_lines(args: list[str], expected: object) -> None:
    from embeddedimport._startup import multiprocessing_child

    assert multiprocessing_child(args) == expected


MP_APP = b"""\
import multiprocessing
import os
import sys


def square(x):
    return x * x


if __name__ == "__main__":
    with open(os.environ["MP_STARTS"], "a") as log:
        log.write(f"{os.getpid()} {sys.orig_argv!r}\\n")
    if "MP_DEPTH" not in os.environ:
        os.environ["MP_DEPTH"] = "1"
        # What Windows does by itself: the child interpreter is the exe.
        os.environ["EMBEDDEDIMPORT_EXECUTABLE"] = sys.argv[0].rpartition(os.sep)[0]
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            print(sum(pool.map_async(square, range(10)).get(timeout=30)))
"""


def test_a_multiprocessing_child_of_the_hook_runs_spawn_code_not_the_app(
    hook_python: Path, make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe([("main.py", MP_APP)])
    starts = tmp_path / "starts.txt"
    done = subprocess.run(
        [str(hook_python)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(**{ENV_VAR: str(exe), "MP_STARTS": str(starts)}),
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (0, "285\n"), done.stderr
    assert len(starts.read_text().splitlines()) == 1, starts.read_text()  # not in workers
