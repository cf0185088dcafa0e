"""File modes that do not depend on the caller's umask (issue 25 M5).

Under umask 000 the data, store and run folders came out 0777: a local user could
replace gunicorn's socket and read the next request's credentials. Every process of the
server drops group and other write from its umask, and the folders are made with explicit
modes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SHARED_DIR = 0o755  # nginx's workers (another user) enter it; only the server writes


def no_group_or_other_write() -> None:
    """Keep the caller's umask but never let group or others write what we create."""
    os.umask(os.umask(0o022) | 0o022)


def make_dir(path: Path, mode: int = SHARED_DIR) -> None:
    """Create *path* and its missing parents with exactly *mode*; an existing one loses
    group and other write."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for made in reversed(missing):
        made.chmod(mode)
    current = stat.S_IMODE(path.stat().st_mode)
    if current & 0o022:
        path.chmod(current & ~0o022)
