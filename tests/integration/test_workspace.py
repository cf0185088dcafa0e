"""The workspace's promises: every package stands alone, is versioned from git, answers --help.

The packages' layering (independence, no cycles, layers) is import-linter's, configured in
the root pyproject.toml and run by `tools/test --lint-only`; here: that the configuration
covers every package and that a planted cycle breaks it. What import-linter cannot see is
checked here: a package's tests (tests/<name>/ is not an importable package) import only
it and its declared siblings, and every module imports at run time with the undeclared
siblings blocked (dynamic imports included).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
# Entry points that start servers or run programs when imported.
NOT_IMPORTABLE = {"wsgi", "__main__"}


def module_of(name: str) -> str:
    return name.replace("-", "_")


def workspace_deps(name: str) -> set[str]:
    """Import names of the sibling packages *name* declares as dependencies."""
    project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(d).name) for d in project.get("dependencies", [])}
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


def test_layering_contracts_cover_every_package() -> None:
    """import-linter's root packages and contracts name every package (and nothing else)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    modules = {module_of(p) for p in PACKAGES}
    assert set(config["root_packages"]) == modules
    contracts = config["contracts"]
    independence = [c for c in contracts if c["type"] == "independence"]
    assert [set(c["modules"]) for c in independence] == [modules]
    for kind in ("acyclic_siblings", "layers"):
        covered = {m for c in contracts if c["type"] == kind for m in c.get("ancestors", [])}
        covered |= {m for c in contracts if c["type"] == kind for m in c.get("containers", [])}
        # a sub-package may have its own contract (lfs_server.backends); each package needs one
        tops = {m for m in covered if "." not in m}
        assert tops == modules, (kind, sorted(modules ^ tops))
        assert {m.split(".")[0] for m in covered} <= modules, (kind, sorted(covered))


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over *tree* (its pyproject.toml and packages/*/src), nothing cached."""
    srcs = [str(p) for p in sorted(tree.glob("packages/*/src"))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(srcs))  # ahead of the editable installs
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_lint_imports_fails_on_a_planted_cycle(tmp_path: Path) -> None:
    """The contracts hold on this tree; an import making a cycle inside a package breaks them."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for src in (ROOT / "packages").glob("*/src"):
        shutil.copytree(
            src, tmp_path / src.relative_to(ROOT), ignore=shutil.ignore_patterns("*.exe")
        )
    kept = _lint_imports(tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    # bundle imports pe: pe importing bundle back closes a cycle (and breaks the layers).
    pe = tmp_path / "packages/embeddedimport/src/embeddedimport/pe.py"
    pe.write_text(pe.read_text() + "\nfrom embeddedimport import bundle  # noqa\n")
    broken = _lint_imports(tmp_path)
    assert broken.returncode != 0, broken.stdout
    assert "embeddedimport has no import cycle BROKEN" in broken.stdout, broken.stdout
    assert ".pe -> .bundle" in broken.stdout, broken.stdout


def _tool_sources() -> list[Path]:
    """Every Python file under tools/, the suffix-less scripts included."""
    return [
        path
        for path in sorted((ROOT / "tools").rglob("*"))
        if path.suffix == ".py"
        or (
            path.is_file()
            and not path.suffix
            and path.read_bytes().startswith(b"#!/usr/bin/env python")
        )
    ]


def test_no_tool_puts_tests_on_its_path() -> None:
    """Helpers tests and tools share live under tools/ (common.py, lfs_harness.py, ...);
    no tool puts a tests/ folder on its sys.path."""
    test_modules = {p.stem for p in (ROOT / "tests").glob("**/*.py")}
    reaching = set()
    for path in _tool_sources():
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                changed = node.func  # sys.path.insert(...), .append, .extend
            elif isinstance(node, ast.AugAssign):
                changed = node.target  # sys.path += [...]
            elif isinstance(node, ast.Assign):
                changed = node.targets[0]  # sys.path[:0] = [...]
            else:
                continue
            if "sys.path" in (ast.get_source_segment(source, changed) or "") and "tests" in (
                ast.get_source_segment(source, node) or ""
            ):
                reaching.add(str(path.relative_to(ROOT)))
        # ... nor imports a helper module that lives there (found some other way).
        if imported_top_levels(path) & test_modules:
            reaching.add(str(path.relative_to(ROOT)))
    assert not reaching, sorted(reaching)


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


def test_two_clones_each_test_their_own_code(tmp_path: Path) -> None:
    """`tools/test --setup-only` in two clones: each environment imports its own clone's code,
    and setting up the second leaves the first one's alone (they used to share one).

    The environments go to a scratch cache (MONOREPO_CACHE) that shares this machine's uv
    and its cache, so nothing is downloaded and no environment of a real checkout is touched.
    """
    sys.path.insert(0, str(ROOT / "tools"))
    import workspace

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "pymonorepo-uv").symlink_to(workspace.cache_base() / "pymonorepo-uv")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["MONOREPO_CACHE"] = str(cache)
    base_python = str(Path(sys.base_prefix) / "bin" / "python3")  # not this environment's

    def setup(clone: Path) -> Path:
        command = ["tools/test", "--setup-only", "--no-system", "--isolated", "embeddedimport"]
        result = subprocess.run(
            [base_python, *command],
            cwd=clone, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        return Path(result.stdout.strip().splitlines()[-1])

    def imported_from(venv: Path) -> Path:
        code = "import embeddedimport; print(embeddedimport.__file__)"
        out = subprocess.run(
            [str(venv / "bin/python"), "-c", code], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return Path(out.stdout.strip())

    clones = [tmp_path / "one", tmp_path / "two"]
    for clone in clones:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    first = setup(clones[0])
    assert imported_from(first).is_relative_to(clones[0])
    second = setup(clones[1])
    assert second != first and second.is_relative_to(cache)
    assert imported_from(second).is_relative_to(clones[1])
    assert imported_from(first).is_relative_to(clones[0])  # untouched by the second setup
    assert setup(clones[0]) == first  # reused at once, not rebuilt
