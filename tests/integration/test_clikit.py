"""The CLI kit: one source (tools/clikit.py), five byte-identical vendored copies, its rules."""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "clikit.py"
COPIES = sorted(ROOT.glob("packages/*/src/*/_clikit.py"))


def test_every_package_vendors_the_same_kit() -> None:
    packages = sorted(p for p in ROOT.glob("packages/*/src/*") if (p / "__init__.py").is_file())
    assert [c.parent for c in COPIES] == packages, "every package has its _clikit.py"
    text = SOURCE.read_bytes()
    differing = [str(c.relative_to(ROOT)) for c in COPIES if c.read_bytes() != text]
    assert not differing, f"differ from tools/clikit.py (run tools/vendor-clikit): {differing}"


def load_kit() -> ModuleType:
    spec = importlib.util.spec_from_file_location("clikit_under_test", SOURCE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kit = load_kit()


def test_kit_imports_only_the_standard_library() -> None:
    tree_imports = [
        line.split()[1].split(".")[0]
        for line in SOURCE.read_text().splitlines()
        if line.strip().startswith(("import ", "from ")) and "__future__" not in line
    ]
    allowed = set(sys.stdlib_module_names) | {"shtab"}  # shtab: only when asked for
    assert set(tree_imports) <= allowed, tree_imports


@pytest.mark.parametrize(
    ("text", "name", "dims"),
    [
        ("1,3,224,224", None, (1, 3, 224, 224)),
        ("x=1,3,8,8", "x", (1, 3, 8, 8)),
        ("input.1=[1,3,8,8]", "input.1", (1, 3, 8, 8)),
        ("a=b=2x3", "a=b", (2, 3)),
        ("0,3", None, (0, 3)),
    ],
)
def test_one_shape_grammar(text: str, name: str | None, dims: tuple[int, ...]) -> None:
    spec = kit.parse_shape(text)
    assert (spec.name, spec.dims) == (name, dims)


@pytest.mark.parametrize("text", ["", "x=", "=1,2", "1,,2", "1,-3", "x=a,b"])
def test_bad_shapes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"\[NAME=\]D0,D1"):
        kit.parse_shape(text)


def test_free_dimensions_default() -> None:
    assert kit.fill_free_dims([None, 3, -1, None]) == (1, 3, 224, 224)


def test_key_value_repeats_without_swallowing_positionals() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", type=kit.key_value, action="append", default=[])
    parser.add_argument("positional")
    args = parser.parse_args(["--set", "A=1", "--set", "B=x=y", "out"])
    assert args.set == [("A", "1"), ("B", "x=y")]
    assert args.positional == "out"


def _parser(func: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool")
    kit.add_version_option(parser, "pytest")
    sub = parser.add_subparsers(dest="command")
    cmd = sub.add_parser("go")
    kit.add_json_option(cmd)
    cmd.set_defaults(func=func)
    return parser


class Negative(Exception):
    status = 1


@pytest.mark.parametrize(
    ("raised", "status", "line"),
    [
        (kit.CliError("bad thing; give a good one"), 2, "tool: error: bad thing; give a good one"),
        (Negative("mismatch\nsecond line"), 1, "tool: error: mismatch; second line"),
        (FileNotFoundError(2, "No such file or directory", "m.onnx"), 2, "tool: error: m.onnx:"),
        (KeyboardInterrupt(), 130, "tool: interrupted"),
    ],
)
def test_run_turns_outcomes_into_one_line_and_a_status(
    raised: BaseException, status: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def func(args: argparse.Namespace) -> int:
        raise raised

    assert kit.run(_parser(func), ["go"], errors=(Negative,)) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line), err


def test_unexpected_errors_still_raise() -> None:
    def func(args: argparse.Namespace) -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        kit.run(_parser(func), ["go"])


def test_json_dash_owns_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    def func(args: argparse.Namespace) -> int:
        print("human text")
        kit.write_json(args.json, {"ok": True})
        return 0

    assert kit.run(_parser(func), ["go", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == '{\n  "ok": true\n}\n'
    assert err == "human text\n"


def test_json_file_is_atomic(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")

    def func(args: argparse.Namespace) -> int:
        kit.write_json(args.json, {"n": 1})
        return 0

    assert kit.run(_parser(func), ["go", "--json", str(target)]) == 0
    assert target.read_text() == '{\n  "n": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("where", ["missing/r.json", "."])
def test_a_json_file_that_cannot_be_written_stops_before_the_work(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long command (a build, a benchmark) must not run to its end and only then fail."""
    ran = []

    def func(args: argparse.Namespace) -> int:
        ran.append(True)
        return 0

    target = tmp_path / where
    assert kit.run(_parser(func), ["go", "--json", str(target)]) == 2
    assert ran == [] and f"cannot write --json {target}" in capsys.readouterr().err


def test_atomic_path_keeps_the_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "out.onnx"
    target.write_text("old")
    with pytest.raises(RuntimeError), kit.atomic_path(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.onnx"]


def test_links_and_devices_are_written_in_place(tmp_path: Path) -> None:
    """A rename onto /dev/null replaced the device with a regular file (as root); onto a
    link it replaced the link. Both are written through, as a shell's `>` does."""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    kit.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    # A /dev/null of our own (a failure here must not break the machine's).
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    kit.write_text(null, "discarded")
    assert null.is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "null", "real.json"]


@pytest.mark.parametrize("where", ["missing/out.onnx", "."])
def test_atomic_path_names_the_target(tmp_path: Path, where: str) -> None:
    target = tmp_path / where
    with pytest.raises(kit.CliError, match=str(target)), kit.atomic_path(target, "-o"):
        pass


def test_closed_stdout_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    def func(args: argparse.Namespace) -> int:
        raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(kit, "_quiet_stdout", lambda: None)
    assert kit.run(_parser(func), ["go"]) == 141


def test_version_and_missing_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        kit.run(_parser(None), ["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("tool ")
    assert kit.run(_parser(None), []) == 2
