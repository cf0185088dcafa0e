"""The development environment shared by tools/test, tools/demo, tools/release and tools/lock.

Owns three things:
- the list of packages: every folder under packages/ with a pyproject.toml;
- the environments: uv's own project environments (`uv sync --frozen` from the committed
  `uv.lock`; the root pyproject.toml names `packages/*` as the workspace's members), placed
  outside the clone, one per checkout: keyed by the checkout's path, the lock and what it
  holds, so two clones on one machine never share one (each has its own editable installs)
  and a checkout that already has its environment reuses it at once. Installs go through
  uv's cache: the 5.5 GB of torch is unpacked once per machine and hard-linked into each
  environment; pruning removes the ones no run has used for two days;
- the system packages the tests need, installed with apt-get when we are root.

uv itself is pinned (UV_VERSION) and installed with pip on first use into the cache.
Package sources: the lock resolves against PyPI (so it is the same on every machine); at
install time the indexes of pip's own configuration (`pip config list`: find-links,
extra-index-url) are handed to uv, which does not read pip's configuration, so a machine
with local mirrors (torch from disk) installs the same files, checked against the lock's
hashes.

Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "uv.lock"
UV_VERSION = "0.13.9"
# How environments are made (part of their key): "uv-sync" = uv's project environment.
LAYOUT = "uv-sync"
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
    # lfs-server's scale-out tests: a real S3 server (Ceph RGW) and PostgreSQL 15
    "ceph-mon": "ceph-mon",
    "ceph-mgr": "ceph-mgr",
    "ceph-osd": "ceph-osd",
    "radosgw": "radosgw",
    "ceph-common": "ceph",
    "postgresql": "/usr/lib/postgresql/15/bin/initdb",
    # lfs-server's SSH remotes: a real sshd on loopback and the ssh client git uses
    "openssh-server": "/usr/sbin/sshd",
    "openssh-client": "ssh",
    # tkinter apps under Wine need a display
    "xvfb": "xvfb-run",
    # exepy builds Tcl/Tk for Windows from Debian's sources (exepy.tkbuild)
    "make": "make",
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


def log(message: str) -> None:
    """Print a progress line to stderr (stdout stays for the tools' own output)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def packages() -> list[Package]:
    """Every package under packages/, each after the siblings it depends on."""
    found = {}
    for path in sorted((ROOT / "packages").iterdir()):
        if not (path / "pyproject.toml").is_file():
            continue
        project = tomllib.loads((path / "pyproject.toml").read_text())["project"]
        found[path.name] = Package(
            name=path.name,
            path=path,
            module=path.name.replace("-", "_"),
            scripts=tuple(project.get("scripts", {})),
            dependencies=tuple(project.get("dependencies", [])),
        )
    ordered: list[Package] = []

    def visit(pkg: Package) -> None:
        if pkg in ordered:
            return
        for dep in pkg.dependencies:
            if req_name(dep) in found:
                visit(found[req_name(dep)])
        ordered.append(pkg)

    for pkg in found.values():
        visit(pkg)
    return ordered


def package(name: str) -> Package:
    """Return the package called *name*, or exit with the list of valid names."""
    for pkg in packages():
        if pkg.name == name:
            return pkg
    names = ", ".join(p.name for p in packages())
    sys.exit(f"unknown package {name!r}; expected one of: {names}")


def req_name(requirement: str) -> str:
    """The normalised project name of a requirement string."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    return (match.group(0) if match else requirement).lower().replace("_", "-")


# --- what an environment holds --------------------------------------------------------


# `uv sync` / `uv export` selections. "all": every package editable with all extras and every test
# group plus the root `dev` group (what tools/test, its lint step and tools/demo use: mypy
# sees every dependency). "dev": the dev group alone (build, twine: tools/release).
# "package:NAME": that package (and the siblings it depends on), its
# extras, its `test` group and the dev group: what its CI job installs.
def _export_args(selection: str) -> list[str]:
    if selection == "all":
        return ["--all-packages", "--all-groups", "--all-extras"]
    if selection == "dev":
        return ["--all-packages", "--only-group", "dev"]
    if selection.startswith("package:"):
        name = package(selection.split(":", 1)[1]).name
        return ["--package", name, "--group", "test", "--group", "dev", "--all-extras"]
    raise ValueError(f"unknown environment selection {selection!r}")


def env_key(selection: str = "all") -> str:
    """The environment's folder name: the checkout's folder name and a hash of the
    checkout's path, the lock, the interpreter, uv's version and the selection.

    The path is in the key because the workspace packages are installed editable, pointing
    at one checkout: a second clone gets an environment of its own instead of re-pointing
    the first one's at itself.
    """
    digest = hashlib.sha256()
    parts = (LAYOUT, str(ROOT), LOCK.read_bytes(), sys.version, UV_VERSION, selection)
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", ROOT.name)[:40] or "checkout"
    return f"{slug}-{digest.hexdigest()[:16]}"


def cache_base() -> Path:
    """Parent of the cached environments and of uv's cache (outside the clone)."""
    base = os.environ.get("MONOREPO_CACHE") or os.environ.get("XDG_CACHE_HOME")
    return Path(base or Path.home() / ".cache")


def cache_dir() -> Path:
    """Where cached environments live."""
    return cache_base() / "pymonorepo-venvs"


def venv_python(venv: Path) -> Path:
    """The interpreter of *venv*."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(cmd: list[str | os.PathLike[str]], **kwargs: object) -> None:
    """Run *cmd*, exiting with its status if it fails."""
    result = subprocess.run([str(c) for c in cmd], check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(map(str, cmd))}")


# --- uv -------------------------------------------------------------------------------


def uv() -> Path:
    """The pinned uv binary, installed with pip into the cache on first use."""
    home = cache_base() / "pymonorepo-uv" / f"uv-{UV_VERSION}"
    exe = home / "bin" / "uv"
    if exe.exists():
        return exe
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            log(f"installing uv {UV_VERSION} into {home}")
            tmp = Path(tempfile.mkdtemp(prefix="uv-", dir=home.parent))
            pip = [sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore"]
            run([*pip, "--prefix", str(tmp), f"uv=={UV_VERSION}"])
            shutil.rmtree(home, ignore_errors=True)
            tmp.rename(home)
    return exe


def pip_sources() -> dict[str, str]:
    """uv's equivalents of pip's configured package sources (uv does not read pip's config).

    find-links -> UV_FIND_LINKS, extra-index-url -> UV_INDEX, index-url -> UV_DEFAULT_INDEX.
    Installs are pinned and hash-checked by the lock, so every index may offer every
    package (unsafe-best-match is pip's own behaviour): a mirror on disk serves the same
    files PyPI would.
    """
    got = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    config: dict[str, str] = {}
    for line in got.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        value = value.strip().strip("'\"")
        # Environment variables (:env:) win over the files, as in pip.
        if key.startswith(":env:") or name not in config:
            config[name] = value
    env = {}
    if config.get("find-links"):
        env["UV_FIND_LINKS"] = ",".join(config["find-links"].split())
    if config.get("extra-index-url"):
        env["UV_INDEX"] = " ".join(config["extra-index-url"].split())
    if config.get("index-url"):
        env["UV_DEFAULT_INDEX"] = config["index-url"]
    if env:
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def uv_env() -> dict[str, str]:
    """The environment for running uv: its cache beside ours, no Python downloads."""
    env = dict(os.environ)
    env.setdefault("UV_CACHE_DIR", str(cache_base() / "pymonorepo-uv" / "cache"))
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    env.update(pip_sources())
    return env


def _lock_env() -> dict[str, str]:
    env = uv_env()
    # The lock is resolved against PyPI alone: the same lock on every machine. Local
    # mirrors only serve the locked files at install time (see pip_sources).
    for name in ("UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_INDEX_STRATEGY"):
        env.pop(name, None)
    return env


def lock(*args: str) -> None:
    """Re-resolve uv.lock from every pyproject.toml (`tools/lock`)."""
    run([uv(), "lock", "--python", sys.executable, *args], cwd=ROOT, env=_lock_env())


def ensure_lock_current() -> None:
    """Re-lock, loudly, when a pyproject.toml changed without `tools/lock` being run.

    Keeps the two commands working on a tree where someone forgot; the warning says what
    to commit.
    """
    check = subprocess.run(
        [str(uv()), "lock", "--check", "--quiet", "--python", sys.executable],
        cwd=ROOT,
        env=_lock_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode == 0:
        return
    log(
        "WARNING: uv.lock does not match the pyproject.toml files; re-locking for this run. "
        "Run tools/lock and commit uv.lock with the dependency change."
    )
    lock()


# --- environments ---------------------------------------------------------------------


def ensure_venv(selection: str = "all") -> Path:
    """Create (or bring up to date) this checkout's environment for *selection*: `uv sync`.

    uv's own project environment, placed in the cache (UV_PROJECT_ENVIRONMENT) under this
    checkout's key: uv installs exactly what the lock pins for the selection (hash-checked)
    and the workspace packages editable; on an environment already in step it only checks
    (~0.5 s). What stays ours: the key (one per checkout), the local wheel mirror
    (pip_sources), the lock file that serialises runs, and pruning.
    """
    if not LOCK.exists():
        sys.exit(f"{LOCK.relative_to(ROOT)} is missing: create it with tools/lock")
    ensure_lock_current()
    venv = cache_dir() / env_key(selection)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        fresh = not venv_python(venv).exists()
        started = time.monotonic()
        if fresh:
            log(f"creating environment {venv} ({selection}) from uv.lock")
        env = uv_env()
        env.pop("VIRTUAL_ENV", None)  # the environment is the one named below
        env["UV_PROJECT_ENVIRONMENT"] = str(venv)
        args = ["sync", "--frozen", "--quiet", "--python", sys.executable]
        run([uv(), *args, *_export_args(selection)], cwd=ROOT, env=env)
        if fresh:
            log(f"environment ready in {time.monotonic() - started:.0f} s")
    _prune_old_envs(keep=venv)
    return venv


def requirements(selection: str) -> str:
    """The locked requirements (pinned, with hashes) of *selection*: `uv export --frozen`."""
    result = subprocess.run(
        [
            str(uv()),
            "export",
            "--frozen",
            "--format",
            "requirements-txt",
            "--no-emit-workspace",
            "--no-header",
            *_export_args(selection),
        ],
        cwd=ROOT,
        env=uv_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"uv export failed: {result.stderr.strip()}")
    return result.stdout


def _prune_old_envs(keep: Path, max_age_days: float = 2.0) -> None:
    """Remove environments no run has used for *max_age_days*: each holds ~6 GB of torch.

    Age, not count: several clones on one machine each keep their own.
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
        with open(lock_path, "w") as lock_file:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use by another run
            log(f"removing environment {old} (unused for {max_age_days:g} days)")
            shutil.rmtree(old, ignore_errors=True)
        lock_path.unlink(missing_ok=True)


# --- system packages --------------------------------------------------------------------


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
