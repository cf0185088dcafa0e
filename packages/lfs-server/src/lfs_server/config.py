"""Server configuration: one frozen dataclass, filled from defaults, a TOML config file,
environment variables and flags, each over the one before.

`SETTINGS` is the one table of settings: a key is a Config field and a config-file key, its
variable is `LFS_` and the key in capitals (the Dockerfile, the README and `lfs-server serve`
use them). `Config.from_env` and `Config.to_env` round-trip the variables so that `serve`
can hand the same settings to its gunicorn workers.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import os
import re
from collections.abc import Mapping
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its Config field (also its config-file key), its `LFS_*` variable and help."""

    key: str
    kind: str  # str, int, bool, path (relative to the config file's folder there), or log
    help: str
    default: str = ""  # the README's Default column, where the field's own default says less
    flag: str = ""  # the `serve` / `config` option that sets it
    secret: bool = False  # `lfs-server config` masks it (a URL's password)
    derived: str = ""  # the Config property holding the effective value of an unset path

    @property
    def env(self) -> str:
        """The environment variable: `LFS_` and the key in capitals."""
        return "LFS_" + self.key.upper()


# The one table: environment variables, config-file keys, `serve`'s flags, the CLI's help,
# `lfs-server config` and the README's Configuration table all follow it.
SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", "path", "objects, users, locks and runtime files (DATA)", flag="--data"),
    Setting("listen", "str", "HOST:PORT to listen on", flag="--listen"),
    Setting("workers", "int", "gunicorn worker processes", flag="--workers"),
    Setting(
        "public_url",
        "str",
        "base URL of action links behind a proxy",
        "(the request's host)",
        flag="--public-url",
    ),
    Setting("auto_create", "bool", "create a repository on its first upload (false: 404)"),
    Setting("anonymous_read", "bool", "downloads and lock listing without logging in"),
    Setting("max_batch_objects", "int", "objects per batch request (more: 413)"),
    Setting("max_object_size", "int", "largest object in bytes (0: no limit)", "5 GiB"),
    Setting("token_ttl", "int", "seconds an action token stays valid (at most 7 days)"),
    Setting(
        "login_failures",
        "int",
        "failed logins a minute per address and per user, then 429 (0: off)",
    ),
    Setting("db_busy_timeout", "int", "seconds to wait for the lock database, then 503"),
    Setting("body_mode", "str", "gunicorn run by hand: `nginx` or `stream` (Flask reads bodies)"),
    Setting("users_file", "path", "users and grants", "DATA/users.json", derived="users_path"),
    Setting(
        "locks_db", "path", "SQLite file of the locks", "DATA/locks.sqlite3", derived="locks_path"
    ),
    Setting(
        "secret_key_file",
        "path",
        "key signing action tokens (made at start)",
        "DATA/secret.key",
        derived="key_path",
    ),
    Setting(
        "nginx_body_dir",
        "path",
        "nginx's upload bodies; on the store's filesystem",
        "DATA/tmp/body",
        derived="body_dir",
    ),
    Setting(
        "access_log",
        "log",
        "the app's access log: `off`, `stderr` or a file",
        "stderr; DATA/run/access.log if a terminal",
        derived="access_log_auto",
    ),
    Setting("log_format", "str", "access log lines: `text` or `json` (one object a line)"),
    Setting("storage", "str", "`local` (DATA/repos) or `s3` (needs `lfs-server[s3]`)"),
    Setting("s3_endpoint", "str", "S3 endpoint URL, e.g. a Ceph RADOS Gateway", "(AWS)"),
    Setting("s3_bucket", "str", "the bucket (required with `s3`)", "—"),
    Setting("s3_region", "str", "S3 region"),
    Setting("s3_prefix", "str", "key prefix inside the bucket", "(none)"),
    Setting(
        "s3_transfer",
        "str",
        "downloads: `proxy` (nginx streams from S3) or `direct` (presigned URLs)",
    ),
    Setting(
        "database_url",
        "str",
        "`postgresql://...`: locks and users shared by nodes (needs `lfs-server[postgres]`)",
        "(SQLite + users file)",
        secret=True,
    ),
)
BY_KEY = {setting.key: setting for setting in SETTINGS}
CONFIG_FILE_ENV = "LFS_CONFIG_FILE"

MAX_TOKEN_TTL = 7 * 24 * 3600
# gunicorn worker processes, 4 threads each: 64 answer 256 requests at once on one node,
# beyond what one node's disk or one PostgreSQL (100 connections by default, one a
# thread) serves well. A fixed bound, not the CPU count: the same config file must be
# valid on every machine, and a container's CPU quota is not what os.cpu_count() says.
MAX_WORKERS = 64
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A setting has a value the server cannot use; the message names it."""

    def __init__(self, message: str, *, key: str = "", problem: str = "") -> None:
        super().__init__(message)
        # The setting at fault and what is wrong with it, so that `load_config` can name
        # where the value came from (file and key, variable or flag) in place of its variable.
        self.key = key
        self.problem = problem


def _bad(key: str, problem: str) -> ConfigError:
    """The error for setting *key*, named by its variable until `load_config` knows more."""
    return ConfigError(f"{BY_KEY[key].env} {problem}", key=key, problem=problem)


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
    # Off the terminal by default: `serve` often runs in the background of a user's shell.
    access_log: str = ""
    log_format: str = "text"
    storage: str = "local"
    s3_endpoint: str = ""
    s3_bucket: str = ""
    s3_region: str = "us-east-1"
    s3_prefix: str = ""
    s3_transfer: str = "proxy"
    database_url: str = ""

    def __post_init__(self) -> None:
        if self.storage not in ("local", "s3"):
            raise _bad("storage", f"must be 'local' or 's3', got {self.storage!r}")
        if self.storage == "s3" and not self.s3_bucket:
            raise _bad(
                "storage",
                "is 's3', which needs s3_bucket (LFS_S3_BUCKET): the bucket objects go to",
            )
        if self.s3_transfer not in ("proxy", "direct"):
            raise _bad("s3_transfer", f"must be 'proxy' or 'direct', got {self.s3_transfer!r}")
        if self.s3_endpoint:
            scheme, sep, rest = self.s3_endpoint.partition("://")
            netloc = rest.split("/", 1)[0]
            host_port = netloc if ":" in netloc.rsplit("]", 1)[-1] else f"{netloc}:80"
            if scheme not in ("http", "https") or not sep or "@" in netloc:
                # Masked: a USER:PASSWORD@ here would otherwise end up in a log.
                raise _bad(
                    "s3_endpoint",
                    "must be an http:// or https:// URL without USER:PASSWORD@,"
                    f" got {mask_secret(self.s3_endpoint)!r}",
                )
            try:
                parse_listen(host_port)  # nginx's config names this host
            except ConfigError as exc:
                raise _bad("s3_endpoint", exc.problem) from None
            if any(c.isspace() or c in ";{}$\"'\\" for c in rest):
                raise _bad(
                    "s3_endpoint",
                    "holds a character a URL cannot (space, ';', '{', '}', '$', quotes),"
                    f" got {self.s3_endpoint!r}",
                )
        if self.public_url:
            # It begins every action href: git-lfs refuses one without a scheme ("missing
            # protocol") only after the batch request, in the middle of a push.
            scheme, sep, rest = self.public_url.partition("://")
            if (
                scheme not in ("http", "https")
                or not sep
                or not rest.split("/", 1)[0]
                or any(c.isspace() for c in self.public_url)
            ):
                raise _bad(
                    "public_url",
                    "must be an http:// or https:// URL, e.g. https://lfs.example.com,"
                    f" got {self.public_url!r}",
                )
        if self.database_url and not self.database_url.startswith(("postgresql://", "postgres://")):
            # Never echo the URL: it may carry a password.
            raise _bad(
                "database_url",
                "must be a postgresql://USER:PASSWORD@HOST:PORT/DB URL (or empty for SQLite)",
            )
        if self.body_mode not in ("nginx", "stream"):
            raise _bad("body_mode", f"must be 'nginx' or 'stream', got {self.body_mode!r}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise _bad(
                "workers",
                f"must be 1 to {MAX_WORKERS} (gunicorn processes of 4 threads each; add nodes"
                f" for more), got {self.workers}",
            )
        for name in ("max_batch_objects", "token_ttl", "db_busy_timeout"):
            if getattr(self, name) < 1:
                raise _bad(name, f"must be at least 1, got {getattr(self, name)}")
        if self.token_ttl > MAX_TOKEN_TTL:
            raise _bad(
                "token_ttl",
                f"must be at most {MAX_TOKEN_TTL} (7 days: S3 presigned URLs, which direct mode"
                f" hands out for that long, cannot last longer), got {self.token_ttl}",
            )
        if self.login_failures < 0:
            raise _bad("login_failures", f"must be >= 0, got {self.login_failures}")
        if self.max_object_size < 0:
            raise _bad("max_object_size", f"must be >= 0, got {self.max_object_size}")
        try:
            parse_listen(self.listen)
        except ConfigError as exc:
            raise _bad("listen", exc.problem) from None
        if self.log_format not in ("text", "json"):
            raise _bad("log_format", f"must be 'text' or 'json', got {self.log_format!r}")
        _check_access_log_word(self.access_log)
        if self.access_log.strip() != self.access_log or "\0" in self.access_log:
            raise _bad(
                "access_log",
                "must be 'off', 'stderr' or a file path (no leading or trailing space),"
                f" got {self.access_log!r}",
            )

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

    def access_log_target(self, on_terminal: bool) -> str | Path:
        """Where the app's access log goes: 'off', 'stderr' or a file. Unset, it is stderr
        (for service managers and `docker logs`) unless that is a terminal (*on_terminal*):
        a `serve &` in a user's shell must not print into it, so DATA/run/access.log."""
        if self.access_log in ("off", "stderr"):
            return self.access_log
        if self.access_log or on_terminal:
            return Path(self.access_log or self.run_dir / "access.log").resolve()
        return "stderr"

    @property
    def access_log_auto(self) -> str:
        """The unset access log's target in words (`lfs-server config`)."""
        return f"stderr, or {self.access_log_target(True)} if stderr is a terminal"

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        config_file: Path | str | None = None,
        **overrides: object,
    ) -> Config:
        """Build a Config from the config file (*config_file*, else `LFS_CONFIG_FILE`), the
        `LFS_*` variables in *environ* over it, and *overrides* (flags) over both."""
        return load_config(environ, config_file, **overrides).config

    def to_env(self) -> dict[str, str]:
        """The `LFS_*` variables that make `Config.from_env` rebuild this config."""
        env: dict[str, str] = {}
        for setting in SETTINGS:
            value = getattr(self, setting.key)
            if value is None:
                continue
            if setting.kind == "bool":
                env[setting.env] = "1" if value else "0"
            elif setting.kind == "path" or (
                setting.kind == "log" and value not in ("", "off", "stderr")
            ):
                env[setting.env] = str(Path(value).resolve())
            else:
                env[setting.env] = str(value)
        return env


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A Config with where each setting came from: 'default', 'file', 'env' or 'flag'."""

    config: Config
    sources: dict[str, str]
    file: Path | None

    def named_by_origin(self, exc: ConfigError) -> ConfigError:
        """*exc*, found after loading (e.g. by `serve`), naming where its value came from."""
        return _named_by_origin(exc, self.sources, self.file)

    def describe(self) -> list[dict[str, object]]:
        """Each setting's effective value (secrets masked), source and variable, in table
        order: what `lfs-server config` prints."""
        rows: list[dict[str, object]] = []
        for setting in SETTINGS:
            value: object = getattr(self.config, setting.key)
            if setting.kind == "log" and value not in ("", "off", "stderr"):
                value = Path(str(value))  # shown where serve writes, not as typed
            if setting.derived and value in (None, ""):
                value = getattr(self.config, setting.derived)
            if isinstance(value, Path):
                value = str(value.resolve())
            if setting.secret and value:
                value = mask_secret(str(value))
            rows.append(
                {
                    "key": setting.key,
                    "value": value,
                    "source": self.sources[setting.key],
                    "env": setting.env,
                }
            )
        return rows


def load_config(
    environ: Mapping[str, str] | None = None,
    config_file: Path | str | None = None,
    **flags: object,
) -> Loaded:
    """Defaults, then the TOML file (*config_file*, else `$LFS_CONFIG_FILE`), then `LFS_*`
    variables, then *flags* (None: not given); raise ConfigError naming a bad setting."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    sources = {setting.key: "default" for setting in SETTINGS}
    path: Path | None = None
    if config_file is not None:
        if not str(config_file):  # (a Path is never empty: Path("") is ".")
            raise ConfigError("--config is empty; name a TOML file, or leave it out")
        path = Path(_expand_user(str(config_file), "--config"))
    elif environ.get(CONFIG_FILE_ENV):
        path = Path(_expand_user(environ[CONFIG_FILE_ENV], CONFIG_FILE_ENV))
    if path is not None:
        for key, value in read_config_file(path).items():
            values[key] = value
            sources[key] = "file"
    for setting in SETTINGS:
        raw = environ.get(setting.env)
        if raw is not None:
            values[setting.key] = _convert(setting, raw, setting.env)
            sources[setting.key] = "env"
    for key, value in flags.items():
        if value is not None:
            if key not in BY_KEY:
                raise TypeError(f"no setting {key!r}")
            if BY_KEY[key].kind in ("path", "log") and isinstance(value, (str, Path)):
                value = _convert(BY_KEY[key], str(value), _flag(BY_KEY[key]))
            values[key] = value
            sources[key] = "flag"
    try:
        config = Config(**values)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
    except ConfigError as exc:
        raise _named_by_origin(exc, sources, path) from None
    return Loaded(config, sources, path.resolve() if path else None)


def _named_by_origin(
    exc: ConfigError, sources: Mapping[str, str], path: Path | None
) -> ConfigError:
    """*exc* naming where its setting's value came from: the file and key or the flag the
    user wrote, not a variable they never set (unchanged for a variable)."""
    source = sources.get(exc.key)
    if source == "file" and path is not None:
        return _relabel(exc, f"{path}: {exc.key}")
    if source == "flag":
        return _relabel(exc, _flag(BY_KEY[exc.key]))
    if source == "default":
        return _relabel(
            exc, f"the default {exc.key.replace('_', ' ')} ({BY_KEY[exc.key].env} unset)"
        )
    return exc


def _flag(setting: Setting) -> str:
    """The option that sets *setting*, for messages about a value given that way (the key
    where a caller of the API overrides a setting no option sets)."""
    return setting.flag or setting.key


def _relabel(exc: ConfigError, label: str) -> ConfigError:
    """*exc* naming *label* as where its setting's value came from."""
    return ConfigError(f"{label} {exc.problem}", key=exc.key, problem=exc.problem)


def _expand_user(raw: str, label: str) -> str:
    """*raw* with a leading `~` or `~user` made that home folder, as a shell would; one
    naming no home is an error, not a folder called `~user` in the current one."""
    if not raw.startswith("~"):
        return raw
    try:
        return str(Path(raw).expanduser())
    except RuntimeError:  # no such user, or no HOME and no password entry
        head = raw.split("/", 1)[0]
        why = "HOME is not set" if head == "~" else f"there is no user {head[1:]!r}"
        raise ConfigError(
            f"{label} starts with {head!r}, but {why}; give the full path, got {raw!r}"
        ) from None


_TOML_TYPES = {
    str: "a string",
    int: "an integer",
    float: "a float",
    bool: "a boolean",
    dict: "a table",
    list: "an array",
}
_WANTED = {
    "int": "an integer",
    "bool": "true or false",
    "str": "a string",
    "path": "a string (a path)",
    "log": "a string: off, stderr or a path",
}


def _example(setting: Setting) -> str:
    """A line of a config file setting *setting* to its default."""
    default = Config.__dataclass_fields__[setting.key].default
    if setting.kind == "int":
        return f"{setting.key} = {default}"
    if setting.kind == "bool":
        return f"{setting.key} = {str(default).lower()}"
    shown = "/srv/lfs/..." if default is None else (default or "off")
    return f'{setting.key} = "{shown}"'


def read_config_file(path: Path) -> dict[str, object]:
    """The settings of a TOML config file, converted; raise ConfigError naming the first
    unknown key or wrong type. Relative paths are relative to the file's folder."""
    try:
        tomllib = importlib.import_module("tomllib")
    except ImportError:  # Python 3.10: tomli is the same parser, if installed
        try:
            tomllib = importlib.import_module("tomli")
        except ImportError:
            raise ConfigError(
                f"reading {path} needs Python 3.11 or `pip install tomli`; or use LFS_* variables"
            ) from None
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} does not exist (from --config or {CONFIG_FILE_ENV})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    values: dict[str, object] = {}
    for key, value in data.items():
        setting = BY_KEY.get(key)
        if setting is None and isinstance(value, dict):
            # `[s3]` + `bucket = ...` reads naturally but is no setting: name the flat key.
            subs = [f"{key}_{sub}" if f"{key}_{sub}" in BY_KEY else sub for sub in value]
            close = [sub for sub in subs if sub in BY_KEY]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{path}: [{key}] is a table, but settings are top-level keys{hint};"
                f" the keys are {', '.join(BY_KEY)}"
            )
        if setting is None:
            bare = key.lower().removeprefix("lfs_")  # LFS_LISTEN = ... means listen
            close = [bare] if bare in BY_KEY else difflib.get_close_matches(key, BY_KEY, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{path}: unknown key {key!r}{hint}; the keys are {', '.join(BY_KEY)}"
            )
        wanted = _WANTED[setting.kind]
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
        }.get(setting.kind, isinstance(value, str))
        if not ok:
            got = next((n for t, n in _TOML_TYPES.items() if type(value) is t), "a date or time")
            raise ConfigError(
                f"{path}: {key} must be {wanted}, e.g. {_example(setting)}, got {value!r} ({got})"
            )
        if setting.kind in ("path", "log"):
            value = _convert(setting, str(value), f"{path}: {key}")
            if value not in ("", "off", "stderr"):
                # Relative to the file's folder; a `~` expanded above is absolute already.
                resolved = (path.parent / str(value)).resolve()
                value = str(resolved) if setting.kind == "log" else resolved
        values[key] = value
    return values


def mask_secret(value: str) -> str:
    """*value* with a URL's password (or, if it is no URL, all of it) replaced by ***."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return "***"
    base, question, query = rest.partition("?")
    # libpq also takes the password as a query parameter (?password=...).
    query = re.sub(r"(^|&)(password=)[^&#]*", r"\1\2***", query, flags=re.IGNORECASE)
    userinfo, at, host = base.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        base = f"{user}{':***' if colon else ''}@{host}"
    return f"{scheme}://{base}{question}{query}"


def _empty_path(setting: Setting, label: str) -> str:
    """The error for an empty path given as *label*: it would silently mean the current
    folder."""
    default = setting.default or Config.__dataclass_fields__[setting.key].default
    return f"{label} is empty; name a path, or leave it out for the default ({default})"


# Spellings of the access log's words that would otherwise become a file of that name.
_LOG_WORDS = {"off", "stderr", "stdout", "-", "none", "false", "0", "no"}


def _check_access_log_word(value: str) -> None:
    """Refuse 'OFF', 'stdout', '-' and the like rather than log into a file so named."""
    if value.lower() in _LOG_WORDS and value not in ("off", "stderr"):
        raise _bad(
            "access_log",
            f"must be 'off', 'stderr' or a file path, got {value!r}"
            f" (for a file of that name write ./{value})",
        )


def _convert(setting: Setting, raw: str, label: str) -> object:
    """*raw*, a variable's or flag's text (or a config file's string), as *setting*'s
    value; ConfigError naming *label*, where the value came from, if it cannot be one."""
    kind = setting.kind
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{label} must be an integer, got {raw!r}") from None
    if kind == "bool":
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{label} must be one of 1/0/true/false/yes/no/on/off, got {raw!r}")
    if kind == "path":
        if not raw:
            raise ConfigError(_empty_path(setting, label))
        return Path(_expand_user(raw, label))
    if kind == "log":
        try:
            _check_access_log_word(raw)
        except ConfigError as exc:
            raise _relabel(exc, label) from None
        return raw if raw in ("", "off", "stderr") else _expand_user(raw, label)
    return raw


# What nginx's `listen` and `server` take without quoting: a name or IPv4 address, or an
# IPv6 address in brackets. Anything else could end the directive and start another.
_HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]|\*")
_PORT_RE = re.compile(r"[0-9]{1,5}")


def parse_listen(listen: str, setting: str = "listen address") -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 hosts in brackets); raise ConfigError naming the problem
    (its `problem` is the message after *setting*)."""

    def bad(problem: str) -> ConfigError:
        return ConfigError(f"{setting} {problem}", problem=problem)

    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise bad(f"must be HOST:PORT, e.g. 127.0.0.1:8080, got {listen!r}")
    if not _HOST_RE.fullmatch(host):
        raise bad(
            "host must be a name, an IPv4 address or [IPv6] (letters, digits, '.', '-'),"
            f" got {host!r} in {listen!r}"
        )
    # int() also takes '8_080' and non-ASCII digits ('٨٠٨٠'): only ASCII digits are a port.
    if not _PORT_RE.fullmatch(port):
        raise bad(f"port must be ASCII digits, got {port!r} in {listen!r}")
    number = int(port)
    if not 0 < number < 65536:
        raise bad(f"port must be 1-65535, got {number}")
    return host, number
