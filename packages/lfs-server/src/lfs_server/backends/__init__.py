"""The backends: where objects, locks and users are kept, chosen by the configuration.

Each backend is one module of this package with one class per store it provides (a
`from_config(config)` classmethod builds it); the registries below name them. The
functions here are the only code that reads which backend the configuration chose: the
API, the CLI and the SSH commands get an `ObjectStore`, a `LockStore` and a `UserStore`
(`base.py`) and never ask which one they have. Adding a backend is one module and one
line in a registry. Modules are imported when first used, so `--help` and a local
server never import boto3 or psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lfs_server.backends.base import LockStore, ObjectStore, UserStore
    from lfs_server.config import Config

# LFS_STORAGE -> the object store's class.
OBJECT_STORES = {
    "local": "lfs_server.backends.localfs:Store",
    "s3": "lfs_server.backends.s3:S3Store",
}
# The scheme of LFS_DATABASE_URL ("" when unset) -> the lock and user stores' classes.
LOCK_STORES = {
    "": "lfs_server.backends.sqlite:LockDB",
    "postgresql": "lfs_server.backends.postgres:PgLockDB",
    "postgres": "lfs_server.backends.postgres:PgLockDB",
}
USER_STORES = {
    "": "lfs_server.backends.userfile:UserDB",
    "postgresql": "lfs_server.backends.postgres:PgUserDB",
    "postgres": "lfs_server.backends.postgres:PgUserDB",
}


def _load(registry: dict[str, str], name: str, what: str) -> Any:
    try:
        module, _, cls = registry[name].partition(":")
    except KeyError:
        known = ", ".join(repr(k) for k in registry if k)
        raise ValueError(f"no {what} backend named {name!r}; known: {known}") from None
    return getattr(importlib.import_module(module), cls)


def _database(config: Config) -> str:
    return config.database_url.partition("://")[0] if config.database_url else ""


def open_store(config: Config, kind: str | None = None) -> ObjectStore:
    """The object store *config* names (or the one named *kind*, for `migrate`).

    Builds a client but sends no request: a store that is down fails its first use.
    """
    store: ObjectStore = _load(OBJECT_STORES, kind or config.storage, "object store").from_config(
        config
    )
    return store


def open_locks(config: Config) -> LockStore:
    """The lock database *config* names (connects, and makes its table if missing)."""
    locks: LockStore = _load(LOCK_STORES, _database(config), "lock database").from_config(config)
    return locks


def open_users(config: Config) -> UserStore:
    """The users *config* names, read now; `refresh` follows later changes."""
    users: UserStore = _load(USER_STORES, _database(config), "user store").from_config(config)
    return users


def check_components(config: Config) -> ObjectStore:
    """Open the object store and check the lock database's driver is installed, without
    a request to either; return the store. Raises StoreUnavailable or DatabaseUnavailable
    naming the missing extra (boto3, psycopg)."""
    store = open_store(config)
    _load(LOCK_STORES, _database(config), "lock database").require_driver()
    return store


def check_node_files(config: Config) -> str | None:
    """Read the lock and user stores now where they are the node's own files (SQLite, the
    users file; a database server that does not answer yet is not asked); return what is
    wrong with one, or None. `serve` says it in one line instead of a worker that cannot
    boot (locks) or a 500 on every login (users)."""
    for registry, what in ((USER_STORES, "user store"), (LOCK_STORES, "lock database")):
        store = _load(registry, _database(config), what)
        if not store.in_data_folder:
            continue
        try:
            opened = store.from_config(config)  # reads it: a users file, an SQLite file
        except Exception as exc:  # each store's own error type
            return f"cannot read the {what}: {exc}; fix or restore it from a backup"
        if hasattr(opened, "close"):  # a lock database's connection
            opened.close()
    return None


def node_local(config: Config) -> bool:
    """Whether the stores *config* names keep their data in the node's data folder (so a
    command that reads them needs that folder to exist)."""
    return all(
        _load(registry, name, what).in_data_folder
        for registry, name, what in (
            (OBJECT_STORES, config.storage, "object store"),
            (LOCK_STORES, _database(config), "lock database"),
            (USER_STORES, _database(config), "user store"),
        )
    )
