"""Lock enforcement for the git server: a pre-receive hook that asks lfs-server.

Install it in a bare repository with
`lfs-server hook install /srv/git/team/game.git --url http://lfs.example:8080/team/game.git/info/lfs`
(it writes `hooks/pre-receive`, a two-line script calling `python -m lfs_server pre-receive`).

The hook reads `<old> <new> <ref>` lines, lists every path the pushed commits touch
(and every path whose content differs between old and new: a force-push), asks
lfs-server for the repository's locks, and refuses the push if a touched path is locked by
someone other than the pusher (the user named by $REMOTE_USER, which git http-backend
sets; `--user-env` picks another variable). It authenticates to lfs-server with
$LFS_HOOK_USER / $LFS_HOOK_PASSWORD (a user with read access) when they are set.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

from lfs_server._clikit import atomic_path
from lfs_server.validation import normalize_lock_path

ZERO = "0" * 40


class HookError(Exception):
    """The hook cannot decide (lfs-server unreachable, git failed): the push is refused."""


def _git_paths(base: list[str], args: list[str]) -> set[str]:
    """NUL-separated paths printed by git *args*, as lock paths."""
    # -z and core.quotePath=false: paths exactly as stored, never C-quoted ("caf\303\251",
    # "a\tb"), each ended by NUL (a path may hold a newline).
    result = subprocess.run(
        [*base, "-c", "core.quotePath=false", *args], capture_output=True, check=False
    )
    if result.returncode != 0:
        raise HookError(f"git {args[0]} failed: {result.stderr.decode(errors='replace').strip()}")
    return {
        normalize_lock_path(raw.decode("utf-8", errors="surrogateescape"))
        for raw in result.stdout.split(b"\0")
        if raw.strip(b"\n")
    }


def changed_paths(updates: Iterable[tuple[str, str, str]], git_dir: str | None = None) -> set[str]:
    """Paths each (old, new, ref) update changes: in its new commits or between the trees.

    The commits alone miss a force-push: rewinding to an older commit or replacing the
    history adds no commit touching the file, yet the ref's file changes or vanishes, so
    the trees of old and new are compared too.
    """
    paths: set[str] = set()
    base = ["git"] + (["--git-dir", git_dir] if git_dir else [])
    for old, new, _ref in updates:
        if set(new) == {"0"}:
            continue  # a deletion leaves every other ref's files as they are
        # A new ref: every commit not reachable from an existing ref is new.
        rev_range = [new, "--not", "--all"] if set(old) == {"0"} else [f"{old}..{new}"]
        paths |= _git_paths(
            base, ["log", "-z", "--format=", "--name-only", "--no-renames", "-m", *rev_range]
        )
        if set(old) != {"0"}:
            paths |= _git_paths(base, ["diff", "-z", "--name-only", "--no-renames", old, new])
    return paths


def fetch_locks(url: str, user: str | None, password: str | None) -> list[dict[str, object]]:
    """All locks of the repository at LFS endpoint *url*, following next_cursor."""
    locks: list[dict[str, object]] = []
    cursor = ""
    headers = {"Accept": "application/vnd.git-lfs+json"}
    if user:
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    while True:
        query = urllib.parse.urlencode({"limit": 1000, **({"cursor": cursor} if cursor else {})})
        req = urllib.request.Request(f"{url.rstrip('/')}/locks?{query}", headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 (the admin gives the URL)
                page = json.load(resp)
        except urllib.error.HTTPError as exc:
            raise HookError(
                f"lfs-server answered {exc.code} listing locks at {url}: {exc.read()[:200]!r}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HookError(f"cannot list locks at {url}: {exc}") from None
        locks.extend(page.get("locks", []))
        cursor = page.get("next_cursor") or ""
        if not cursor:
            return locks


def blocked(
    paths: set[str], locks: list[dict[str, object]], pusher: str
) -> list[tuple[str, str, str]]:
    """(path, owner, lock id) for each touched path locked by someone else."""
    found = []
    for lock in locks:
        owner = lock.get("owner")
        name = owner.get("name") if isinstance(owner, dict) else None
        path = lock.get("path")
        if isinstance(path, str) and normalize_lock_path(path) in paths and name != pusher:
            found.append((str(path), str(name), str(lock.get("id"))))
    return sorted(found)


def run_hook(
    url: str, lines: Iterable[str], environ: Mapping[str, str], user_env: str = "REMOTE_USER"
) -> tuple[int, str]:
    """Decide on a push; return (exit status, message for the pusher)."""
    updates = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            updates.append((parts[0], parts[1], parts[2]))
    pusher = environ.get(user_env, "")
    try:
        paths = changed_paths(updates)
        if not paths:
            return 0, ""
        locks = fetch_locks(url, environ.get("LFS_HOOK_USER"), environ.get("LFS_HOOK_PASSWORD"))
    except HookError as exc:
        return 1, f"lfs-server: refusing push: {exc}"
    conflicts = blocked(paths, locks, pusher)
    if not conflicts:
        return 0, ""
    who = pusher or f"an unnamed user (${user_env} is not set)"
    lines_out = [f"lfs-server: refusing push by {who}: it changes files locked by someone else:"]
    lines_out += [
        f"  {path} (locked by {owner}, lock id {lock_id})" for path, owner, lock_id in conflicts
    ]
    lines_out.append("Ask the lock owner to push or unlock them (git lfs unlock), then push again.")
    return 1, "\n".join(lines_out)


class HookInstallError(Exception):
    """The hook cannot be installed where asked; the message says why and what to do."""


def hook_script(python: str) -> str:
    """The `hooks/pre-receive` script: asks this Python's lfs-server about locks.

    It names the interpreter by its absolute path, so the hook works whatever PATH the git
    server gives its hooks (a virtual environment's console script is rarely on it).
    """
    return (
        "#!/bin/sh\n"
        "# Installed by `lfs-server hook install`: refuse pushes that change files locked\n"
        "# (git lfs lock) by someone else. The pusher is $REMOTE_USER (git http-backend sets\n"
        "# it); LFS_HOOK_USER / LFS_HOOK_PASSWORD name an lfs-server user with read access.\n"
        'url=$(git config lfs.url) || { echo "pre-receive: set lfs.url in this repository'
        ' (git config lfs.url URL)" >&2; exit 1; }\n'
        f'exec "{python}" -m lfs_server pre-receive --url "$url"\n'
    )


def install_hook(repo: Path, python: str, url: str | None = None, force: bool = False) -> Path:
    """Write *repo*'s `hooks/pre-receive` (atomically) and, with *url*, set lfs.url."""
    if not (repo / "HEAD").is_file() or not (repo / "objects").is_dir():
        raise HookInstallError(
            f"{repo} is not a bare git repository (no HEAD and objects/ in it);"
            " give the server-side REPO.git folder"
        )
    target = repo / "hooks" / "pre-receive"
    text = hook_script(python)
    if target.exists() and not force and target.read_text(errors="replace") != text:
        raise HookInstallError(
            f"{target} exists and is not lfs-server's hook; use --force to replace it"
        )
    if url is not None:
        result = subprocess.run(
            ["git", "--git-dir", str(repo), "config", "lfs.url", url],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise HookInstallError(f"git config lfs.url failed: {result.stderr.strip()}")
    elif subprocess.run(
        ["git", "--git-dir", str(repo), "config", "lfs.url"], capture_output=True, check=False
    ).returncode:
        raise HookInstallError(
            f"{repo} has no lfs.url; give --url http://HOST:PORT/REPO.git/info/lfs"
        )
    target.parent.mkdir(exist_ok=True)
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
    return target
