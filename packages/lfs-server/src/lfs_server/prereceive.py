"""Lock enforcement for the git server: a pre-receive hook that asks lfs-server.

Install in the bare repository as `hooks/pre-receive`::

    #!/bin/sh
    exec lfs-server pre-receive --url http://lfs.example:8080/team/game.git/info/lfs

The hook reads `<old> <new> <ref>` lines, lists every path the pushed commits touch, asks
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

ZERO = "0" * 40


class HookError(Exception):
    """The hook cannot decide (lfs-server unreachable, git failed): the push is refused."""


def changed_paths(updates: Iterable[tuple[str, str, str]], git_dir: str | None = None) -> set[str]:
    """Paths changed by the commits each (old, new, ref) update adds."""
    paths: set[str] = set()
    base = ["git"] + (["--git-dir", git_dir] if git_dir else [])
    for old, new, _ref in updates:
        if set(new) == {"0"}:
            continue  # a deletion changes no file
        # A new ref: every commit not reachable from an existing ref is new.
        rev_range = [new, "--not", "--all"] if set(old) == {"0"} else [f"{old}..{new}"]
        result = subprocess.run(
            [*base, "log", "--format=", "--name-only", "--no-renames", "-m", *rev_range],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise HookError(f"git log failed: {result.stderr.strip()}")
        paths.update(line for line in result.stdout.splitlines() if line)
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
        if path in paths and name != pusher:
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
