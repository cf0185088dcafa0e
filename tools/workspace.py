"""The development environment shared by tools/test, tools/demo and tools/release.

Owns three things:
- the list of packages (read from packages/*/pyproject.toml, in dependency order);
- the cached virtual environment: created outside the clone, keyed by a hash of every
  dependency declaration, so a machine that already has it never reinstalls torch;
- the system packages the tests need, installed with apt-get when we are root.

Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Order matters for installs: exepy depends on embeddedimport.
PACKAGE_ORDER = [
    "embeddedimport",
    "exepy",
    "deform-conv2d-onnx-exporter",
    "openvino-runner",
    "lfs-server",
]
# Debian package -> the command that proves it is installed.
SYSTEM_PACKAGES = {
    "nginx": "nginx",
    "git-lfs": "git-lfs",
    "wine64": "wine64",
    "wine": "wine",
    "gcc-mingw-w64-x86-64": "x86_64-w64-mingw32-gcc",
    "binutils-mingw-w64-x86-64": "x86_64-w64-mingw32-objdump",
    "osslsigncode": "osslsigncode",  # real Authenticode signatures for exepy's tests
    "openssl": "openssl",
}
# Where `wine64` lives on Debian when it is not on PATH.
EXTRA_PATH = ["/usr/lib/wine", "/usr/sbin"]


@dataclass(frozen=True)
class Package:
    """One distribution of the workspace."""

    name: str
    path: Path
    module: str
    scripts: tuple[str, ...]
    dependencies: tuple[str, ...]
    extras: tuple[str, ...]  # every optional dependency, all extras together
    test_group: tuple[str, ...]


def log(message: str) -> None:
    """Print a progress line to stderr (stdout stays for the tools' own output)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def packages() -> list[Package]:
    """Return the workspace packages in install order."""
    found = []
    for name in PACKAGE_ORDER:
        path = ROOT / "packages" / name
        data = tomllib.loads((path / "pyproject.toml").read_text())
        project = data["project"]
        found.append(
            Package(
                name=name,
                path=path,
                module=name.replace("-", "_"),
                scripts=tuple(project.get("scripts", {})),
                dependencies=tuple(project.get("dependencies", [])),
                extras=tuple(
                    dep
                    for group in project.get("optional-dependencies", {}).values()
                    for dep in group
                ),
                test_group=tuple(data.get("dependency-groups", {}).get("test", [])),
            )
        )
    return found


def package(name: str) -> Package:
    """Return the package called *name*, or exit with the list of valid names."""
    for pkg in packages():
        if pkg.name == name:
            return pkg
    names = ", ".join(PACKAGE_ORDER)
    sys.exit(f"unknown package {name!r}; expected one of: {names}")


def dev_group() -> list[str]:
    """The root workspace's `dev` dependency group (test runner, linters, build tools)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["dependency-groups"]["dev"])


def env_key() -> str:
    """Hash of every dependency declaration: a new key means a new environment."""
    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    digest.update(sorted(dev_group()).__repr__().encode())
    for pkg in packages():
        digest.update(pkg.name.encode())
        digest.update(repr(sorted(pkg.dependencies)).encode())
        digest.update(repr(sorted(pkg.test_group)).encode())
        digest.update(repr(sorted(pkg.extras)).encode())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """Where cached environments live (outside the clone)."""
    base = os.environ.get("MONOREPO_CACHE") or os.environ.get("XDG_CACHE_HOME")
    return Path(base or Path.home() / ".cache") / "pymonorepo-venvs"


def venv_python(venv: Path) -> Path:
    """The interpreter of *venv*."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(cmd: list[str | os.PathLike[str]], **kwargs: object) -> None:
    """Run *cmd*, exiting with its status if it fails."""
    result = subprocess.run([str(c) for c in cmd], check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(map(str, cmd))}")


def ensure_venv() -> Path:
    """Create (or reuse) the cached environment and install the workspace into it editable."""
    venv = cache_dir() / env_key()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = venv / ".complete"
        if not marker.exists():
            if venv.exists():
                log(f"removing incomplete environment {venv}")
                shutil.rmtree(venv)
            started = time.monotonic()
            log(f"creating environment {venv} (first run installs torch: a few minutes)")
            run([sys.executable, "-m", "venv", venv])
            py = venv_python(venv)
            run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
            requirements = dev_group()
            for pkg in packages():
                requirements += [*pkg.dependencies, *pkg.extras, *pkg.test_group]
            # Workspace packages come from the tree below, not from the registry.
            local = {p.name for p in packages()}
            requirements = sorted({r for r in requirements if _req_name(r) not in local})
            run([py, "-m", "pip", "install", "-q", *requirements])
            _install_editable(py)
            marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
            log(f"environment ready in {time.monotonic() - started:.0f} s")
        else:
            py = venv_python(venv)
            if not _editable_points_here(py):
                _install_editable(py)
    _prune_old_envs(keep=venv)
    return venv


def _req_name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].lower().replace("_", "-")
    return requirement.lower().replace("_", "-")


def _install_editable(py: Path) -> None:
    log("installing the workspace packages editable")
    args: list[str | os.PathLike[str]] = [py, "-m", "pip", "install", "-q", "--no-deps"]
    args += ["--no-build-isolation"]
    for pkg in packages():
        args += ["-e", pkg.path]
    run(args)


def _editable_points_here(py: Path) -> bool:
    """True when every workspace package in the environment is this clone's source."""
    code = (
        "import importlib.util, sys\n"
        "for m in sys.argv[1:]:\n"
        "    spec = importlib.util.find_spec(m)\n"
        "    print(spec.origin if spec else '')\n"
    )
    mods = [p.module for p in packages()]
    out = subprocess.run(
        [str(py), "-c", code, *mods], capture_output=True, text=True, check=False
    ).stdout.split("\n")
    expected = [str(p.path / "src" / p.module / "__init__.py") for p in packages()]
    return out[: len(expected)] == expected


def _prune_old_envs(keep: Path, max_age_days: float = 2.0) -> None:
    """Remove environments no run has used for *max_age_days*: each holds ~6 GB of torch.

    Age, not count: several clones (or branches) on one machine each keep their own.
    """
    (keep / ".last-used").touch()
    cutoff = time.time() - max_age_days * 86400
    for old in keep.parent.iterdir():
        if not old.is_dir() or old == keep:
            continue
        stamp = old / ".last-used" if (old / ".last-used").exists() else old
        if stamp.stat().st_mtime > cutoff:
            continue
        lock_path = old.parent / f"{old.name}.lock"
        with open(lock_path, "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use by another run
            log(f"removing environment {old} (unused for {max_age_days:g} days)")
            shutil.rmtree(old, ignore_errors=True)
        lock_path.unlink(missing_ok=True)


def missing_system_packages() -> list[str]:
    """Debian packages whose command is not found."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *EXTRA_PATH])
    return [deb for deb, cmd in SYSTEM_PACKAGES.items() if shutil.which(cmd, path=path) is None]


def ensure_system_packages() -> None:
    """Install the system packages the tests need, when we are root and they are missing."""
    missing = missing_system_packages()
    if not missing:
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("apt-get") is None:
        log(
            f"not installing {', '.join(missing)} (needs root and apt-get): tests that need them "
            "will skip, or fail when CI is set"
        )
        return
    log(f"installing system packages: {', '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


def env_for(venv: Path) -> dict[str, str]:
    """Environment variables for running commands inside *venv*."""
    env = dict(os.environ)
    bindir = str(venv_python(venv).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", ""), *EXTRA_PATH])
    env["VIRTUAL_ENV"] = str(venv)
    env.pop("PYTHONHOME", None)
    return env
