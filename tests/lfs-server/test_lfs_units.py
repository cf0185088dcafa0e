"""The pure layers, without processes: validation, tokens, config, users, nginx rendering."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lfs_server.config import Config, ConfigError, parse_listen
from lfs_server.nginx import render_nginx_config
from lfs_server.storage import Store, VerifyError
from lfs_server.tokens import TokenError, TokenSigner, load_or_create_key
from lfs_server.users import User, UsersError, parse_grant
from lfs_server.validation import ApiError, check_oid, normalize_repo, parse_batch

OID = "0" * 64


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("team/game.git", "team/game"),
        ("/team/game/", "team/game"),
        ("game", "game"),
        ("a.b_c-d/e", "a.b_c-d/e"),
        ("x.git", "x"),
    ],
)
def test_normalize_repo_accepts(raw: str, expected: str) -> None:
    assert normalize_repo(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "/",
        "..",
        "a/../b",
        "a/./b",
        ".git",
        "a//b",
        ".hidden/x",
        "a/b c",
        "a/b\0",
        "a\\b",
        "x.git.git",
        "/".join("a" * 9),
    ],
)
def test_normalize_repo_rejects(raw: str) -> None:
    with pytest.raises(ApiError) as info:
        normalize_repo(raw)
    assert info.value.status == 404


@pytest.mark.parametrize(
    "oid", ["", "g" * 64, "A" * 64, "0" * 63, "0" * 65, None, 5, "../" * 21 + "a"]
)
def test_check_oid_rejects(oid: object) -> None:
    with pytest.raises(ApiError, match="64 lowercase hex"):
        check_oid(oid)


def test_parse_batch_defaults() -> None:
    req = parse_batch({"operation": "download", "objects": [{"oid": OID, "size": 0}]}, 10)
    assert req.transfers == ("basic",) and req.ref is None and req.hash_algo == "sha256"
    assert req.objects[0].error is None


def test_token_roundtrip_and_scope() -> None:
    signer = TokenSigner(b"k" * 32)
    exp = int(time.time()) + 60
    token = signer.issue("r", "download", OID, 5, "alice", exp)
    assert signer.verify(token, "r", "download", OID, 5).user == "alice"
    for args in [
        ("r2", "download", OID, 5),
        ("r", "upload", OID, 5),
        ("r", "download", "1" * 64, 5),
        ("r", "download", OID, 6),
    ]:
        with pytest.raises(TokenError) as info:
            signer.verify(token, *args)
        assert not info.value.expired
    with pytest.raises(TokenError) as info:
        signer.verify(token, "r", "download", OID, 5, now=exp)
    assert info.value.expired
    with pytest.raises(TokenError):
        TokenSigner(b"j" * 32).verify(token, "r", "download", OID, 5)


def test_key_file_created_once_with_private_mode(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "k")
    assert load_or_create_key(tmp_path / "k") == key and len(key) == 32
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LFS_WORKERS": "0"}, "LFS_WORKERS must be 1 to 64"),
        ({"LFS_AUTO_CREATE": "maybe"}, "LFS_AUTO_CREATE must be one of"),
        ({"LFS_BODY_MODE": "fast"}, "LFS_BODY_MODE must be 'nginx' or 'stream'"),
        ({"LFS_LISTEN": "8080"}, "HOST:PORT"),
        ({"LFS_LISTEN": "h:99999"}, "1-65535"),
    ],
)
def test_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env(env)


def test_parse_listen_takes_ipv6_in_brackets() -> None:
    # (The settings' round trip through LFS_* variables: test_lfs_config.py.)
    assert parse_listen("[::1]:80") == ("[::1]", 80)


def test_permission_levels() -> None:
    user = User("u", "", {"*": "read", "team/*": "write", "team/core": "admin"})
    assert user.level_for("x") == "read"
    assert user.level_for("team/a") == "write"
    assert user.level_for("team/core") == "admin"
    assert parse_grant("team/*=write") == ("team/*", "write")
    with pytest.raises(UsersError):
        parse_grant("team")


def test_nginx_config_has_no_unfilled_placeholders(tmp_path: Path) -> None:
    text = render_nginx_config(Config(data_dir=tmp_path), "s3cr3t")
    assert "{{" not in text and "X-Lfs-Proxy-Auth s3cr3t" in text
    # Every location that proxies to the app sets the secret (4 today: the API, uploads,
    # small uploads inline, the upload check).
    to_app = text.count("proxy_pass http://lfs_app")
    assert to_app >= 3 and text.count("X-Lfs-Proxy-Auth s3cr3t") == to_app


def test_store_publish_rejects_and_keeps_nothing(tmp_path: Path) -> None:
    import hashlib

    store = Store(tmp_path / "repos", tmp_path / "tmp")
    body = tmp_path / "body"
    body.write_bytes(b"hello")
    oid = hashlib.sha256(b"hello").hexdigest()
    with pytest.raises(VerifyError, match="SHA-256"):
        store.publish(body, "r", "1" * 64, 5)
    with pytest.raises(VerifyError, match="5 bytes"):
        store.publish(body, "r", oid, 4)
    assert store.stored_size("r", oid) is None
    store.publish(body, "r", oid, 5)
    assert store.stored_size("r", oid) == 5 and not body.exists()
    assert [o.oid for o in store.iter_objects()] == [oid]


def _open_shared_files(folder: str) -> str | None:
    """What a gunicorn worker does at boot with the node's SQLite files (None: it booted)."""
    from lfs_server.locks import LockDB

    try:
        LockDB(Path(folder) / "locks.sqlite3")
    except Exception as exc:  # reported to the test
        return repr(exc)
    return None


def test_workers_opening_fresh_sqlite_files_together_all_boot(tmp_path: Path) -> None:
    # Workers start together; switching a new file to WAL from two connections at once made
    # SQLite answer one "database is locked" without waiting, the worker failed to boot
    # and gunicorn stopped the node (3 of 80 rounds failed before lfs_server.sqlitewal).
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(8) as pool:
        for round_ in range(150):
            folder = tmp_path / str(round_)
            folder.mkdir()
            failures = [e for e in pool.map(_open_shared_files, [str(folder)] * 8) if e]
            assert failures == [], failures[0]
