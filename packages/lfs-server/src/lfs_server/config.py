"""Server configuration: one frozen dataclass, filled from environment variables and flags.

The environment variable names are the public interface (the Dockerfile, the README and
`lfs-server serve` all use them); `Config.from_env` and `Config.to_env` round-trip them so
that `serve` can hand the same settings to its gunicorn workers.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path

# (environment variable, Config field, kind, help): the one table the CLI, README and
# Dockerfile follow.
ENV_VARS: tuple[tuple[str, str, str, str], ...] = (
    ("LFS_DATA_DIR", "data_dir", "path", "where objects, users, locks and runtime files live"),
    ("LFS_LISTEN", "listen", "str", "HOST:PORT nginx (or gunicorn with --no-nginx) listens on"),
    ("LFS_WORKERS", "workers", "int", "gunicorn worker processes"),
    ("LFS_PUBLIC_URL", "public_url", "str", "base URL clients use, if not the request's host"),
    ("LFS_AUTO_CREATE", "auto_create", "bool", "create a repository on its first upload"),
    (
        "LFS_ANONYMOUS_READ",
        "anonymous_read",
        "bool",
        "allow downloads and lock listing without login",
    ),
    ("LFS_MAX_BATCH_OBJECTS", "max_batch_objects", "int", "objects per batch request (more: 413)"),
    (
        "LFS_MAX_OBJECT_SIZE",
        "max_object_size",
        "int",
        "largest object, bytes (default 5 GiB; 0: none)",
    ),
    ("LFS_TOKEN_TTL", "token_ttl", "int", "seconds an action token stays valid (at most 7 days)"),
    (
        "LFS_LOGIN_FAILURES",
        "login_failures",
        "int",
        "failed logins a minute per client address and per user before 429 (0: no limit)",
    ),
    (
        "LFS_DB_BUSY_TIMEOUT",
        "db_busy_timeout",
        "int",
        "seconds a request waits for the locks database before a 503",
    ),
    ("LFS_BODY_MODE", "body_mode", "str", "'nginx' (bodies through nginx) or 'stream' (Flask)"),
    ("LFS_USERS_FILE", "users_file", "path", "users and permissions (default DATA/users.json)"),
    ("LFS_LOCKS_DB", "locks_db", "path", "SQLite file for locks (default DATA/locks.sqlite3)"),
    (
        "LFS_SECRET_KEY_FILE",
        "secret_key_file",
        "path",
        "token signing key (default DATA/secret.key)",
    ),
    ("LFS_NGINX_BODY_DIR", "nginx_body_dir", "path", "nginx body temp dir (default DATA/tmp/body)"),
    ("LFS_STORAGE", "storage", "str", "where objects live: 'local' (DATA/repos) or 's3'"),
    ("LFS_S3_ENDPOINT", "s3_endpoint", "str", "S3 endpoint URL (default: AWS for the region)"),
    ("LFS_S3_BUCKET", "s3_bucket", "str", "S3 bucket of the objects (LFS_STORAGE=s3)"),
    ("LFS_S3_REGION", "s3_region", "str", "S3 region (default us-east-1)"),
    ("LFS_S3_PREFIX", "s3_prefix", "str", "key prefix inside the bucket, e.g. 'lfs/'"),
    (
        "LFS_S3_TRANSFER",
        "s3_transfer",
        "str",
        "downloads: 'proxy' (nginx streams from S3) or 'direct' (presigned S3 URLs)",
    ),
    (
        "LFS_DATABASE_URL",
        "database_url",
        "str",
        "postgresql://... keeps locks and users in PostgreSQL (default: SQLite + users file)",
    ),
)

MAX_TOKEN_TTL = 7 * 24 * 3600
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A setting has a value the server cannot use; the message names it."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything the app and the process supervisor need to know."""

    data_dir: Path = Path("lfs-data")
    listen: str = "127.0.0.1:8080"
    workers: int = 2
    public_url: str = ""
    auto_create: bool = True
    anonymous_read: bool = False
    max_batch_objects: int = 1000
    # 5 GiB, as large hosted LFS services allow; 0 lifts the limit.
    max_object_size: int = 5 << 30
    token_ttl: int = 3600
    login_failures: int = 20
    db_busy_timeout: int = 10
    body_mode: str = "nginx"
    users_file: Path | None = None
    locks_db: Path | None = None
    secret_key_file: Path | None = None
    nginx_body_dir: Path | None = None
    storage: str = "local"
    s3_endpoint: str = ""
    s3_bucket: str = ""
    s3_region: str = "us-east-1"
    s3_prefix: str = ""
    s3_transfer: str = "proxy"
    database_url: str = ""

    def __post_init__(self) -> None:
        if self.storage not in ("local", "s3"):
            raise ConfigError(f"LFS_STORAGE must be 'local' or 's3', got {self.storage!r}")
        if self.storage == "s3" and not self.s3_bucket:
            raise ConfigError("LFS_STORAGE=s3 needs LFS_S3_BUCKET (the bucket objects go to)")
        if self.s3_transfer not in ("proxy", "direct"):
            raise ConfigError(
                f"LFS_S3_TRANSFER must be 'proxy' or 'direct', got {self.s3_transfer!r}"
            )
        if self.s3_endpoint:
            scheme, sep, rest = self.s3_endpoint.partition("://")
            netloc = rest.split("/", 1)[0]
            host_port = netloc if ":" in netloc.rsplit("]", 1)[-1] else f"{netloc}:80"
            if scheme not in ("http", "https") or not sep or "@" in netloc:
                raise ConfigError(
                    f"LFS_S3_ENDPOINT must be an http:// or https:// URL, got {self.s3_endpoint!r}"
                )
            parse_listen(host_port, "LFS_S3_ENDPOINT")  # nginx's config names this host
            if any(c.isspace() or c in ";{}$\"'\\" for c in rest):
                raise ConfigError(
                    f"LFS_S3_ENDPOINT holds a character a URL cannot (space, ';', '{{', '}}',"
                    f" '$', quotes), got {self.s3_endpoint!r}"
                )
        if self.database_url and not self.database_url.startswith(("postgresql://", "postgres://")):
            # Never echo the URL: it may carry a password.
            raise ConfigError(
                "LFS_DATABASE_URL must be a postgresql://USER:PASSWORD@HOST:PORT/DB URL"
                " (or empty for SQLite)"
            )
        if self.body_mode not in ("nginx", "stream"):
            raise ConfigError(f"LFS_BODY_MODE must be 'nginx' or 'stream', got {self.body_mode!r}")
        for name in ("workers", "max_batch_objects", "token_ttl", "db_busy_timeout"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.token_ttl > MAX_TOKEN_TTL:
            raise ConfigError(
                f"LFS_TOKEN_TTL must be at most {MAX_TOKEN_TTL} (7 days: S3 presigned URLs, which"
                f" direct mode hands out for that long, cannot last longer), got {self.token_ttl}"
            )
        if self.login_failures < 0:
            raise ConfigError(f"LFS_LOGIN_FAILURES must be >= 0, got {self.login_failures}")
        if self.max_object_size < 0:
            raise ConfigError(f"max_object_size must be >= 0, got {self.max_object_size}")
        parse_listen(self.listen, "LFS_LISTEN (--listen)")

    # Derived paths: everything defaults to a place under data_dir. Those that resolve
    # links are computed once per Config (frozen): Path.resolve walks every component,
    # and the app asks for them on every request.
    @functools.cached_property
    def root(self) -> Path:
        """The data directory as an absolute path."""
        return Path(self.data_dir).resolve()

    @property
    def repos_dir(self) -> Path:
        """Where each repository's objects live (`<repo>.git/objects/aa/bb/<oid>`)."""
        return self.root / "repos"

    @property
    def tmp_dir(self) -> Path:
        """Temporary files; on the store's filesystem so a rename publishes atomically."""
        return self.root / "tmp"

    @functools.cached_property
    def body_dir(self) -> Path:
        """nginx's client body temp dir: the only place an upload body may come from."""
        return Path(self.nginx_body_dir or self.tmp_dir / "body").resolve()

    @property
    def run_dir(self) -> Path:
        """Runtime files: the generated nginx config, the gunicorn socket, pid files, logs."""
        return self.root / "run"

    @property
    def quarantine_dir(self) -> Path:
        """Where `fsck --quarantine` moves objects whose bytes do not match their oid."""
        return self.root / "quarantine"

    @functools.cached_property
    def users_path(self) -> Path:
        """The users file."""
        return Path(self.users_file or self.root / "users.json").resolve()

    @functools.cached_property
    def locks_path(self) -> Path:
        """The SQLite database of locks."""
        return Path(self.locks_db or self.root / "locks.sqlite3").resolve()

    @functools.cached_property
    def key_path(self) -> Path:
        """The secret key that signs action tokens."""
        return Path(self.secret_key_file or self.root / "secret.key").resolve()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Config:
        """Build a Config from `LFS_*` variables in *environ*; *overrides* win over both."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for var, field, kind, _help in ENV_VARS:
            raw = environ.get(var)
            if raw is None:
                continue
            values[field] = _convert(var, raw, kind)
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ConfigError(str(exc)) from None

    def to_env(self) -> dict[str, str]:
        """The `LFS_*` variables that make `Config.from_env` rebuild this config."""
        env: dict[str, str] = {}
        for var, field, kind, _help in ENV_VARS:
            value = getattr(self, field)
            if value is None:
                continue
            if kind == "bool":
                env[var] = "1" if value else "0"
            elif kind == "path":
                env[var] = str(Path(value).resolve())
            else:
                env[var] = str(value)
        return env


def _convert(var: str, raw: str, kind: str) -> object:
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{var} must be an integer, got {raw!r}") from None
    if kind == "bool":
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{var} must be one of 1/0/true/false/yes/no/on/off, got {raw!r}")
    if kind == "path":
        return Path(raw)
    return raw


# What nginx's `listen` and `server` take without quoting: a name or IPv4 address, or an
# IPv6 address in brackets. Anything else could end the directive and start another.
_HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]|\*")
_PORT_RE = re.compile(r"[0-9]{1,5}")


def parse_listen(listen: str, setting: str = "listen address") -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 hosts in brackets); raise ConfigError naming the problem."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{setting} must be HOST:PORT, e.g. 127.0.0.1:8080, got {listen!r}")
    if not _HOST_RE.fullmatch(host):
        raise ConfigError(
            f"{setting} host must be a name, an IPv4 address or [IPv6] (letters, digits, '.',"
            f" '-'), got {host!r} in {listen!r}"
        )
    # int() also takes '8_080' and non-ASCII digits ('٨٠٨٠'): only ASCII digits are a port.
    if not _PORT_RE.fullmatch(port):
        raise ConfigError(f"{setting} port must be ASCII digits, got {port!r} in {listen!r}")
    number = int(port)
    if not 0 < number < 65536:
        raise ConfigError(f"{setting} port must be 1-65535, got {number}")
    return host, number
