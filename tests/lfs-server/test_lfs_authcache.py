"""The password-check cache shared by one node's workers (lfs_server.authcache)."""

from __future__ import annotations

import multiprocessing
import secrets
import stat
from pathlib import Path

from lfs_server.authcache import SharedAuthCache


def _remember_in_child(path: Path, key: str) -> None:
    SharedAuthCache(path, key).remember("alice", "pw", "scrypt:hash-1")


def test_a_check_made_by_one_process_is_seen_by_another(tmp_path: Path) -> None:
    path, key = tmp_path / "run/auth.sqlite3", secrets.token_hex(32)
    child = multiprocessing.get_context("spawn").Process(
        target=_remember_in_child, args=(path, key)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    cache = SharedAuthCache(path, key)
    assert cache.hit("alice", "pw", "scrypt:hash-1")
    # Another password, another user, or a changed password hash never hits.
    assert not cache.hit("alice", "pw2", "scrypt:hash-1")
    assert not cache.hit("bob", "pw", "scrypt:hash-1")
    assert not cache.hit("alice", "pw", "scrypt:hash-2")
    # Without the in-memory key (another start of the server) the entries mean nothing.
    assert not SharedAuthCache(path, secrets.token_hex(32)).hit("alice", "pw", "scrypt:hash-1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The file holds keyed digests only: not even the user's name.
    assert b"alice" not in path.read_bytes()


def test_unusable_cache_falls_back_to_a_miss(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = SharedAuthCache(blocker / "auth.sqlite3")
    cache.remember("alice", "pw", "h")
    assert not cache.hit("alice", "pw", "h")
