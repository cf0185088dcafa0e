"""The workspace's promises: every package stands alone, is versioned from git, answers --help.

A test of one package must fail if it imports a sibling its distribution does not depend
on. All packages share one test environment (torch is 5.5 GB: one copy), so isolation is
checked here twice: statically over each package's tests, and at run time by importing
every module of each package in a fresh interpreter where undeclared siblings are blocked.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
# Entry points that start servers or run programs when imported.
NOT_IMPORTABLE = {"wsgi", "__main__"}


def module_of(name: str) -> str:
    return name.replace("-", "_")


def workspace_deps(name: str) -> set[str]:
    """Import names of the sibling packages *name* declares as dependencies."""
    project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
    declared = {
        dep.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
        for dep in project.get("dependencies", [])
    }
    return {module_of(d) for d in declared if d in PACKAGES}


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("name", PACKAGES)
def test_tests_import_only_declared_siblings(name: str) -> None:
    allowed = {module_of(name)} | workspace_deps(name)
    forbidden = {module_of(p) for p in PACKAGES} - allowed
    offenders = []
    for path in sorted((ROOT / "tests" / name).rglob("*.py")):
        bad = imported_top_levels(path) & forbidden
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, f"{name} does not depend on these siblings: {offenders}"


BLOCKER = r"""
import importlib.abc, importlib.util, pkgutil, sys
forbidden = set(sys.argv[2].split(",")) - {""}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in forbidden:
            raise ImportError(f"{fullname} is a sibling package that is not a declared dependency")
        return None
sys.meta_path.insert(0, Block())
pkg = importlib.import_module(sys.argv[1])
skip = set(sys.argv[3].split(","))
for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
    if info.name.rsplit(".", 1)[-1] not in skip:
        importlib.import_module(info.name)
print("ok")
"""


@pytest.mark.parametrize("name", PACKAGES)
def test_package_modules_import_without_undeclared_siblings(name: str) -> None:
    forbidden = {module_of(p) for p in PACKAGES} - {module_of(name)} - workspace_deps(name)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib\n" + BLOCKER,
            module_of(name),
            ",".join(sorted(forbidden)),
            ",".join(sorted(NOT_IMPORTABLE)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("name", PACKAGES)
def test_version_comes_from_git(name: str) -> None:
    from importlib.metadata import version

    got = version(name)
    assert got != "0.0.0", f"{name} has the fallback version: hatch-vcs did not see the git tags"
    module = __import__(module_of(name))
    assert module.__version__ == got


SCRIPTS = {
    name: list(
        tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"].get(
            "scripts", {}
        )
    )
    for name in PACKAGES
}


@pytest.mark.parametrize("script", [s for scripts in SCRIPTS.values() for s in scripts])
def test_console_script_answers_help(script: str) -> None:
    exe = Path(sys.executable).parent / script
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout.lower()


def test_every_package_has_readme_changelog_license() -> None:
    for name in PACKAGES:
        folder = ROOT / "packages" / name
        for required in ("README.md", "CHANGELOG.md", "LICENSE", f"src/{module_of(name)}/py.typed"):
            assert (folder / required).is_file(), f"{name} lacks {required}"
        assert "## Unreleased" in (folder / "CHANGELOG.md").read_text()


def test_root_configuration_covers_every_package() -> None:
    """The package list is packages/*: the few lists that cannot glob must agree with it."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert root["tool"]["uv"]["workspace"]["members"] == ["packages/*"]
    assert root["tool"]["mypy"]["files"] == ["packages/*/src"]
    assert sorted(root["tool"]["mypy"]["mypy_path"]) == sorted(
        f"packages/{p}/src" for p in PACKAGES
    )
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    editable = {p["name"] for p in lock["package"] if "editable" in p.get("source", {})}
    assert editable == set(PACKAGES), "uv.lock is stale: run tools/lock"


@pytest.mark.parametrize("name", PACKAGES)
def test_isolated_environment_holds_only_what_the_package_needs(name: str) -> None:
    """What a per-package CI job installs (`tools/test --isolated NAME`), read from the lock."""
    sys.path.insert(0, str(ROOT / "tools"))
    import workspace

    pinned = {
        line.split("==")[0] for line in workspace.requirements(f"package:{name}").splitlines()
    }
    assert {"pytest", "ruff", "mypy"} <= pinned  # the dev group
    torch_needed = name in ("deform-conv2d-onnx-exporter", "openvino-runner")
    assert ("torch" in pinned) == torch_needed, sorted(pinned)
    if name == "embeddedimport":  # standard library only: its test group and the dev tools
        assert not {"numpy", "onnx", "openvino", "flask"} & pinned
