"""What Windows' loader sees in exes exepy wrote, and that those exes still run (Wine).

resdump.exe (harness/resdump.c, compiled with mingw) enumerates resources through the
Win32 API and hashes each one; every resource exepy writes must come back byte-identical,
string-named ones included, and look-ups by name must work the loader's way.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from exepy import build, image
from exepy.editor import ResourceEditor
from exepy_support import Harness, Wine, expected_dump, ico, launcher, windows_path, wine_binary

pytestmark = pytest.mark.wine

# Added to every base: ids, string names in id and named types, a non-ASCII name.
ADDED = {
    (10, 200, 0): bytes(range(256)) * 300,
    (10, 201, 0): b"\x02\0\0\0-\0m\0\0\0m\0a\0i\0n\0\0\0\0\0",
    (10, "alpha", 0): b"alpha",
    (10, "al", 0): b"al",
    (10, "AlphaB", 1033): b"alphab",
    ("MyType", "myName", 1033): b"named type and name",
    ("MyType", 7, 0): b"id in a named type",
    (10, "Ünïcode", 0): b"non-ASCII name",
}
LOOKUPS = [
    ("mytype", "MYNAME", 1033, b"named type and name"),
    ("MYTYPE", "#7", 0, b"id in a named type"),
    ("#10", "Alpha", 0, b"alpha"),
    ("#10", "al", 0, b"al"),
    ("#10", "alphab", 1033, b"alphab"),
    ("#10", "ünïcode", 0, b"non-ASCII name"),
    ("#10", "#200", 0, bytes(range(256)) * 300),
]


def add_resources(base: bytes) -> ResourceEditor:
    editor = ResourceEditor(base)
    for (t, n, lang), blob in ADDED.items():
        editor.set(t, n, blob, lang)
    return editor


BASES = {
    "harness (no resource section)": None,
    "notepad (.rsrc in the middle)": lambda: wine_binary("notepad.exe"),
    "ipconfig (no relocations)": lambda: wine_binary("ipconfig.exe"),
    "distlib t64 (.rsrc last)": lambda: launcher("t64.exe"),
}


@pytest.mark.parametrize("label", list(BASES))
def test_loader_finds_every_resource(label: str, harness: Harness, tmp_path: Path) -> None:
    get = BASES[label]
    base = harness.exe if get is None else get()
    editor = add_resources(base.read_bytes())
    out = editor.save(tmp_path / "edited.exe")
    dump = harness.dump(out, [(t, n, lang) for t, n, lang, _ in LOOKUPS])
    assert dump.resources == expected_dump(editor.resources)
    assert len(dump.resources) >= len(ADDED)
    for (t, n, lang, blob), (_, _, _, found) in zip(LOOKUPS, dump.found, strict=True):
        assert found is not None, f"the loader did not find {t}/{n}/{lang}"
        assert found == expected_dump({(0, 0, 0): blob})["#0", "#0", 0]


def test_unsorted_or_lower_case_names_are_invisible_to_the_loader(
    harness: Harness, tmp_path: Path
) -> None:
    """The reference is sensitive: a lower-case stored name is not found (so the test bites)."""
    editor = ResourceEditor(launcher("t64.exe").read_bytes())
    editor.set(10, "LOWER", b"data")
    out = editor.to_bytes()
    # Write the name lower-case in place, as a careless writer would.
    at = out.find("LOWER".encode("utf-16-le"))
    broken = out[:at] + "lower".encode("utf-16-le") + out[at + 10 :]
    path = tmp_path / "broken.exe"
    path.write_bytes(broken)
    dump = harness.dump(path, [("#10", "lower", 0), ("#10", "LOWER", 0)])
    assert dump.found[0][3] is None and dump.found[1][3] is None


def test_modified_harness_runs_and_sees_its_own_resources(harness: Harness, tmp_path: Path) -> None:
    for windowed in (False, True):
        editor = add_resources(harness.exe.read_bytes())
        if windowed:
            editor.subsystem = image.IMAGE_SUBSYSTEM_WINDOWS_GUI
        exe = editor.save(tmp_path / f"self-{windowed}.exe")
        dump = harness.dump("--self", [("#10", "alpha", 0)], exe=exe)
        assert dump.resources == expected_dump(editor.resources)
        assert dump.found[0][3] is not None


@pytest.mark.parametrize(
    ("program", "args", "code"),
    [
        ("ipconfig.exe", ["/?"], None),  # no relocations; usage text is a string resource
        ("expand.exe", [], None),  # no relocations, no resource section
        ("hostname.exe", ["/?"], None),
        ("cmd.exe", ["/c", "echo exepy-was-here & exit 7"], 7),
    ],
)
def test_wine_programs_still_run(
    program: str, args: list[str], code: int | None, wine: Wine, tmp_path: Path
) -> None:
    original = wine_binary(program)
    editor = add_resources(original.read_bytes())
    edited = editor.save(tmp_path / program)
    before = wine.run([windows_path(original), *args])
    after = wine.run([windows_path(edited), *args])
    assert after.returncode == before.returncode
    if code is not None:
        assert after.returncode == code
    # Programs print their own path in usage text; compare without it.
    text_after = (after.stdout + after.stderr).replace(windows_path(edited), "PROG")
    text_before = (before.stdout + before.stderr).replace(windows_path(original), "PROG")
    assert text_after == text_before
    assert text_after.strip()


# The batch side of `exepy bat`, under Wine's cmd with stand-in programs -----------------


def recorded(exe: Path) -> list[tuple[list[str], dict[str, str]]]:
    """(argv[1:], EXEPY_* environment) per call that the stand-in *exe* logged."""
    log = exe.with_name(exe.name + ".args.txt")
    if not log.exists():
        return []
    lines = log.read_text("utf-8").splitlines()
    calls = []
    for args_line, env_line in zip(lines[::2], lines[1::2], strict=True):
        env = dict(item.split("=", 1) for item in env_line.split("\t")[1:])
        calls.append((args_line.split("\t") if args_line else [], env))
    return calls


@pytest.mark.parametrize("admin", [False, True], ids=["plain", "admin"])
def test_bat_runs_python_next_to_it(
    admin: bool, wine: Wine, recorder_exe: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "my tools"
    folder.mkdir()
    for name in ("python.exe", "powershell.exe", "fltmc.exe"):
        shutil.copy(recorder_exe, folder / name)
    # cmd finds commands in the current folder first: our fltmc answers "administrator".
    shutil.copy(recorder_exe, tmp_path / "fltmc.exe")
    script = folder / "tool.py"
    script.write_text("print('hi')\n")
    bat = build.write_bat(script, admin=admin)
    env_before = dict(wine.env)
    try:
        wine.env["RECORDARGS_EXIT_PYTHON"] = "4"
        # From its folder: the batch's exit code is python's.
        result = wine.run(["cmd", "/c", bat.name, "one", "two words"], cwd=folder)
        assert result.returncode == 4, result.stdout + result.stderr
        # From another folder, through a path with a space (`call` keeps cmd /c from
        # stripping the first and last quotes; Wine's `call` then reports exit code 1).
        wine.run(["cmd", "/c", "call", windows_path(bat), "x"], cwd=tmp_path)
        calls = recorded(folder / "python.exe")
        expected = [["-x", windows_path(bat), "one", "two words"], ["-x", windows_path(bat), "x"]]
        assert [c[0] for c in calls] == expected
        assert recorded(folder / "powershell.exe") == []
        if admin:
            # Not an administrator (fltmc fails): PowerShell relaunches the batch elevated.
            (folder / "python.exe.args.txt").unlink()
            wine.env["RECORDARGS_EXIT_FLTMC"] = "5"
            result = wine.run(["cmd", "/c", bat.name, "one", "two words"], cwd=folder)
            assert recorded(folder / "python.exe") == []
            [(args, env)] = recorded(folder / "powershell.exe")
            assert args[:4] == ["-NoProfile", "-ExecutionPolicy", "Bypass", "-Command"]
            assert "Verb = 'RunAs'" in args[4] and "Start-Process" in args[4]
            assert env["EXEPY_BAT"] == windows_path(bat)
            assert env["EXEPY_ARGS"].strip() == 'one "two words"'
    finally:
        wine.env.clear()
        wine.env.update(env_before)


def test_built_exe_resources_seen_by_the_loader(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `exepy build` output with icon, version info and manifest, as Windows sees it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text("print('hi')\n")
    (tmp_path / "app.ico").write_bytes(ico([16, 32]))
    (tmp_path / "app.manifest").write_bytes(b"<assembly/>")
    result = build.build_exe(
        Path("app.exe"),
        Path("app.py"),
        base=wine_binary("notepad.exe"),
        icon=Path("app.ico"),
        version={"FileVersion": "2.0", "ProductName": "App"},
        manifest=Path("app.manifest"),
        windowed=True,
    )
    editor = ResourceEditor.open(result.output)
    dump = harness.dump(result.output, [("#10", "#200", 0), ("#16", "#1", 1033)])
    assert dump.resources == expected_dump(editor.resources)
    assert all(found[3] is not None for found in dump.found)
