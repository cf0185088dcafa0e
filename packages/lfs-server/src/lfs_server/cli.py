"""The `lfs-server` console script: a thin shell over the package's API.

The CLI rule (one-line errors, exit codes, `--json -`, `--version`, atomic outputs) comes
from the vendored `_clikit`; each subcommand's handler is set with `set_defaults(func=...)`.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from lfs_server import _clikit, ssh
from lfs_server.config import BY_KEY, CONFIG_FILE_ENV, SETTINGS, Config, ConfigError, Loaded

if TYPE_CHECKING:
    from lfs_server.backends.s3 import S3Store
    from lfs_server.storage import ObjectStore

CliError = _clikit.CliError
T = TypeVar("T")


def _add_data(parser: argparse.ArgumentParser) -> None:
    # Strings, not Paths: Path("") is ".", and load_config refuses an empty one and
    # expands a `~` the shell left (`--data=~/lfs`).
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="data directory (env LFS_DATA_DIR; default ./lfs-data)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"TOML config file (env {CONFIG_FILE_ENV}); variables and flags win over it",
    )


# `serve`'s settings flags: (option, setting key, metavar, argparse type).
_SERVE_FLAGS = (
    ("--listen", "listen", "HOST:PORT", str),
    ("--workers", "workers", "N", int),
    ("--public-url", "public_url", "URL", str),
)


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """--data, --config and serve's settings flags, their help from the settings table."""
    _add_data(parser)
    for option, key, metavar, kind in _SERVE_FLAGS:
        setting = BY_KEY[key]
        default = Config.__dataclass_fields__[key].default
        shown = f"; default {default}" if default not in ("", None) else ""
        parser.add_argument(
            option, type=kind, metavar=metavar, help=f"{setting.help} (env {setting.env}{shown})"
        )


def _handler(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn the package's user-facing errors into one-line CLI errors (exit 2)."""

    @functools.wraps(func)
    def wrapped(args: argparse.Namespace) -> int:
        from lfs_server.locks import DatabaseUnavailable
        from lfs_server.storage import StoreUnavailable
        from lfs_server.users import UsersError
        from lfs_server.validation import ApiError

        try:
            return func(args)
        except ApiError as exc:  # its status is an HTTP status, not an exit code
            raise CliError(exc.message) from None
        except (ConfigError, UsersError, StoreUnavailable, DatabaseUnavailable) as exc:
            raise CliError(str(exc)) from None
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            raise CliError(
                f"{where}{exc.strerror or exc}; lfs-server needs a data folder it can write"
                " (choose another --data DIR, or fix its permissions)"
            ) from None

    return wrapped


def _group(parser: argparse.ArgumentParser, dest: str) -> Any:
    """Subcommands of *parser*; the group alone prints its help (exit 2)."""

    def _usage(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return _clikit.EXIT_USAGE

    parser.set_defaults(func=_usage)
    return parser.add_subparsers(dest=dest, metavar="ACTION")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `lfs-server`."""
    env_help = "\n".join(f"  {s.env:<24} {s.help.replace('`', '')}" for s in SETTINGS)
    parser = argparse.ArgumentParser(
        prog="lfs-server",
        description="A Git LFS server: Flask under gunicorn behind nginx.",
        epilog="settings: a TOML file (--config FILE or LFS_CONFIG_FILE; each key is a variable"
        " below in lower case without LFS_), environment variables over it, flags over both"
        f" (`lfs-server config` shows them):\n{env_help}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _clikit.add_version_option(parser, "lfs-server")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run nginx + gunicorn as one supervised unit")
    _add_setting_flags(serve)
    serve.add_argument(
        "--no-nginx", action="store_true", help="development mode: gunicorn serves bodies itself"
    )
    serve.set_defaults(func=_serve)

    show = sub.add_parser(
        "config",
        help="print the effective settings and where each comes from (default, file, env, flag)",
    )
    _add_setting_flags(show)
    _clikit.add_json_option(show, "the settings")
    show.set_defaults(func=_show_config)

    conf = sub.add_parser("nginx-config", help="print an nginx config for running your own nginx")
    _add_data(conf)
    conf.add_argument("--listen", metavar="HOST:PORT", help="address nginx listens on")
    conf.add_argument(
        "--upstream",
        metavar="ADDR",
        help="where gunicorn listens (default unix:DATA/run/gunicorn.sock)",
    )
    conf.add_argument(
        "-o", "--output", metavar="FILE", help="write it to FILE (atomically) instead of stdout"
    )
    conf.set_defaults(func=_nginx_config)

    user = sub.add_parser("user", help="manage users and their permissions")
    user_sub = _group(user, "user_command")
    add = user_sub.add_parser("add", help="add a user (password from --password-stdin or a prompt)")
    _add_data(add)
    add.add_argument("name")
    add.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="PATTERN=LEVEL",
        help="permission on repositories matching PATTERN: read, write or admin (repeatable)",
    )
    add.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    add.add_argument(
        "--update", action="store_true", help="change an existing user (password and grants)"
    )
    add.set_defaults(func=_user_add)
    remove = user_sub.add_parser("remove", help="remove a user")
    _add_data(remove)
    remove.add_argument("name")
    remove.set_defaults(func=_user_remove)
    lst = user_sub.add_parser("list", help="list users and permissions")
    _add_data(lst)
    _clikit.add_json_option(lst, "the users and their grants")
    lst.set_defaults(func=_user_list)

    repo = sub.add_parser("repo", help="manage repositories (needed when LFS_AUTO_CREATE is off)")
    repo_sub = _group(repo, "repo_command")
    create = repo_sub.add_parser("create", help="create a repository")
    _add_data(create)
    create.add_argument("name", help="repository path, e.g. team/game.git")
    create.set_defaults(func=_repo_create)
    rlist = repo_sub.add_parser("list", help="list repositories")
    _add_data(rlist)
    _clikit.add_json_option(rlist, "the repository names")
    rlist.set_defaults(func=_repo_list)

    fsck = sub.add_parser("fsck", help="re-hash stored objects and report bad ones")
    _add_data(fsck)
    fsck.add_argument(
        "--quarantine", action="store_true", help="move bad objects to DATA/quarantine"
    )
    fsck.add_argument("--repo", help="check one repository only")
    _clikit.add_json_option(fsck, "the report")
    _clikit.add_progress_option(fsck)
    fsck.set_defaults(func=_fsck)

    migrate = sub.add_parser(
        "migrate",
        help="copy the local store's objects into S3 (LFS_S3_* settings), each one verified",
    )
    _add_data(migrate)
    migrate.add_argument(
        "--to", required=True, choices=["s3"], help="where to copy the objects: s3"
    )
    migrate.add_argument("--repo", help="copy one repository only")
    _clikit.add_json_option(migrate, "the report")
    _clikit.add_progress_option(migrate)
    migrate.set_defaults(func=_migrate)

    seed = sub.add_parser(
        "import-seed",
        help="import objects from the original gitlfs_with_nginx layout, verifying each hash",
    )
    _add_data(seed)
    seed.add_argument(
        "seed", metavar="DIR", type=Path, help="the old server's data folder (holding repos/)"
    )
    seed.add_argument(
        "--prefix",
        default="lfs",
        help="put before each repository name (default 'lfs': the old URLs"
        " /lfs/<repo>/info/lfs keep working); '' for none",
    )
    _clikit.add_json_option(seed, "the report")
    _clikit.add_progress_option(seed)
    seed.set_defaults(func=_import_seed)

    install = sub.add_parser("hook", help="install the pre-receive hook in a bare repository")
    install_sub = _group(install, "hook_command")
    hook_install = install_sub.add_parser(
        "install", help="write REPO.git/hooks/pre-receive (enforces locks on push)"
    )
    hook_install.add_argument("repo", metavar="REPO.git", type=Path, help="bare repository")
    hook_install.add_argument(
        "--url", help="the repository's LFS endpoint (sets lfs.url), .../repo.git/info/lfs"
    )
    hook_install.add_argument(
        "-f", "--force", action="store_true", help="replace a pre-receive hook that is not ours"
    )
    hook_install.set_defaults(func=_hook_install)

    hook = sub.add_parser(
        "pre-receive", help="git pre-receive hook: refuse pushes touching others' locks"
    )
    hook.add_argument(
        "--url", required=True, help="the repository's LFS endpoint, .../repo.git/info/lfs"
    )
    hook.add_argument(
        "--user-env", default="REMOTE_USER", help="variable naming the pusher (default REMOTE_USER)"
    )
    hook.set_defaults(func=_pre_receive)

    # Further subcommands register here (one line each, e.g. the SSH remote commands).
    ssh.add_parser(sub)
    _clikit.add_completion_command(sub, parser)
    return parser


def _config(args: argparse.Namespace, must_exist: bool = False, **extra: object) -> Config:
    config = _load(args, **extra).config
    # With users in PostgreSQL and objects in S3 a node may have no data folder of its own.
    from lfs_server.backends import node_local

    if must_exist and not config.root.is_dir() and node_local(config):
        raise CliError(
            f"data directory {config.root} does not exist; give the server's data folder"
            " with --data DIR (or LFS_DATA_DIR)"
        )
    return config


def _load(args: argparse.Namespace, **extra: object) -> Loaded:
    """The settings: the config file, LFS_* variables over it, *args*' flags over both."""
    from lfs_server.config import load_config

    return load_config(
        None, getattr(args, "config", None), data_dir=getattr(args, "data", None), **extra
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run `lfs-server` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    from lfs_server.fsmode import no_group_or_other_write

    no_group_or_other_write()  # under umask 000 too, nothing we create is writable by others
    return _clikit.run(build_parser, argv)


def _progress(
    args: argparse.Namespace,
    items: Iterator[T],
    unit: str,
    total: int | None = None,
) -> Iterator[T]:
    """*items* with a tqdm bar on stderr when `_clikit.progress_enabled` (a terminal)."""
    if not _clikit.progress_enabled(args):
        return items
    from tqdm import tqdm

    return iter(tqdm(items, unit=unit, total=total, file=sys.stderr, dynamic_ncols=True))


def _say(args: argparse.Namespace, line: str) -> None:
    """Print a report line without breaking a progress bar."""
    if _clikit.progress_enabled(args):
        from tqdm import tqdm

        tqdm.write(line, file=sys.stdout)
    else:
        print(line, flush=True)


@_handler
def _serve(args: argparse.Namespace) -> int:
    from lfs_server.serve import ServeError, Supervisor

    loaded = _load(args, **_serve_flags(args))
    config = loaded.config
    supervisor = Supervisor(config, use_nginx=not args.no_nginx, out=sys.stdout, err=sys.stderr)
    made_here = not config.root.exists()
    try:
        return supervisor.run()
    except (ServeError, ConfigError, OSError) as exc:
        # A serve that never started leaves no half-made data folder behind.
        if made_here:
            shutil.rmtree(config.root, ignore_errors=True)
        if isinstance(exc, ConfigError):
            raise CliError(str(loaded.named_by_origin(exc))) from None
        if isinstance(exc, ServeError):
            raise CliError(str(exc)) from None
        raise


def _serve_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key) for _option, key, _metavar, _kind in _SERVE_FLAGS}


@_handler
def _show_config(args: argparse.Namespace) -> int:
    loaded = _load(args, **_serve_flags(args))
    rows = loaded.describe()
    # The JSON first: a --json FILE that cannot be written is then the only thing printed.
    _clikit.write_json(
        args.json,
        {
            "config_file": str(loaded.file) if loaded.file else None,
            "settings": {
                str(row["key"]): {k: row[k] for k in ("value", "source", "env")} for row in rows
            },
        },
    )
    print(f"config file: {loaded.file or '(none)'}")
    width = max(len(str(row["key"])) for row in rows)
    for row in rows:
        value = row["value"]
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        print(f"{row['key']:<{width}}  {row['source']:<7}  {shown or '(empty)'}")
    return 0


@_handler
def _nginx_config(args: argparse.Namespace) -> int:
    from lfs_server.config import parse_listen
    from lfs_server.nginx import render_nginx_config
    from lfs_server.serve import prepare
    from lfs_server.tokens import proxy_secret

    config = _config(args, listen=args.listen)
    if args.upstream and not args.upstream.startswith("unix:"):
        # What nginx's `server` takes; anything else fails only when nginx starts.
        parse_listen(args.upstream, "--upstream (unix:PATH or HOST:PORT)")
    key = prepare(config)
    text = render_nginx_config(config, proxy_secret(key), upstream=args.upstream)
    if args.output:
        _clikit.write_text(args.output, text, "-o")
    else:
        sys.stdout.write(text)
    return 0


def _grants(permissions: dict[str, str]) -> str:
    return ", ".join(f"{p}={lv}" for p, lv in sorted(permissions.items()))


@_handler
def _user_add(args: argparse.Namespace) -> int:
    from lfs_server.backends import node_local
    from lfs_server.users import load_users, parse_grant

    config = _config(args)
    new_folder = not config.root.exists() and node_local(config)
    db = load_users(config)
    grants = dict(parse_grant(g) for g in args.grant)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise CliError("the two passwords differ; nothing was changed")
    else:
        raise CliError("give the password with --password-stdin (no terminal to prompt on)")
    db.add(args.name, password, grants, replace=args.update)
    db.save()
    if new_folder:  # a user added to a folder no server reads is a puzzling 401 later
        print(
            f"lfs-server: created the data folder {config.root} (it did not exist)", file=sys.stderr
        )
    print(f"user {args.name}: {_grants(db.users[args.name].permissions) or 'no permissions yet'}")
    return 0


@_handler
def _user_remove(args: argparse.Namespace) -> int:
    from lfs_server.users import load_users

    db = load_users(_config(args, must_exist=True))
    db.remove(args.name)
    db.save()
    print(f"removed user {args.name}")
    return 0


@_handler
def _user_list(args: argparse.Namespace) -> int:
    from lfs_server.users import load_users

    db = load_users(_config(args, must_exist=True))
    for user in db.users.values():
        print(f"{user.name}\t{_grants(user.permissions) or '-'}")
    _clikit.write_json(
        args.json,
        [
            {"name": u.name, "grants": dict(sorted(u.permissions.items()))}
            for u in db.users.values()
        ],
    )
    return 0


@_handler
def _repo_create(args: argparse.Namespace) -> int:
    from lfs_server.storage import open_store
    from lfs_server.validation import normalize_repo

    store = open_store(_config(args))
    name = normalize_repo(args.name)
    store.create_repo(name)
    print(f"created {name}.git")
    return 0


@_handler
def _repo_list(args: argparse.Namespace) -> int:
    from lfs_server.storage import open_store

    names = open_store(_config(args, must_exist=True)).list_repos()
    for name in names:
        print(name)
    _clikit.write_json(args.json, names)
    return 0


@_handler
def _fsck(args: argparse.Namespace) -> int:
    from lfs_server.fsck import check_store
    from lfs_server.storage import open_store

    config = _config(args, must_exist=True)
    store = open_store(config)
    if args.repo is not None:
        _check_repo_exists(store, args.repo)
    aborted = store.cleanup()
    if aborted:
        print(f"aborted {aborted} unfinished upload(s) left by stopped nodes")
    checked = 0
    bad: list[dict[str, str | None]] = []
    results = check_store(store, config.quarantine_dir if args.quarantine else None, args.repo)
    for obj, problem in _progress(args, results, "obj"):
        checked += 1
        if problem is not None:
            bad.append(
                {"repo": obj.repo, "oid": obj.oid, "actual": problem.actual,
                 "moved_to": problem.moved_to}
            )  # fmt: skip
            where = f"; moved to {problem.moved_to}" if problem.moved_to else ""
            what = problem.actual if " " in problem.actual else f"bytes hash to {problem.actual}"
            _say(args, f"BAD {obj.repo} {obj.oid}: {what}{where}")
    print(f"checked {checked} objects, {len(bad)} bad")
    _clikit.write_json(args.json, {"checked": checked, "aborted_uploads": aborted, "bad": bad})
    return 1 if bad else 0


def _check_repo_exists(store: ObjectStore, repo: str) -> None:
    """Raise CliError unless *repo* was created in *store* or holds objects there.

    Locally a repository is its folder. On S3 it is the marker key written when it was
    created (by an upload, `repo create` or `migrate`); a prefix with objects but no marker
    (copied into the bucket by hand) still counts. An S3 repository with neither is
    indistinguishable from one that never existed, and is reported as not existing.
    """
    from lfs_server.validation import normalize_repo

    name = normalize_repo(repo)
    if store.repo_exists(name) or next(iter(store.iter_objects(name)), None) is not None:
        return
    where = store.location
    known = store.list_repos()
    shown = ", ".join(known[:5]) + (f" and {len(known) - 5} more" if len(known) > 5 else "")
    raise CliError(
        f"no repository {name} in {where}; "
        + (f"--repo takes one of: {shown}" if known else "it holds no repositories yet")
        + " (see `lfs-server repo list`)"
    )


@_handler
def _migrate(args: argparse.Namespace) -> int:
    from lfs_server.backends import open_store
    from lfs_server.migrate import migrate_to_s3

    config = _config(args)
    if not config.s3_bucket:
        raise CliError(
            "migrate --to s3 needs LFS_S3_BUCKET (and LFS_S3_ENDPOINT, AWS credentials)"
            " naming the destination"
        )
    if not config.repos_dir.is_dir():
        raise CliError(f"no local store at {config.repos_dir}")
    source = open_store(config, "local")
    dest = cast("S3Store", open_store(config, "s3"))
    dest.check()
    bar: Any = None
    if _clikit.progress_enabled(args):
        from tqdm import tqdm

        bar = tqdm(unit="obj", file=sys.stderr, dynamic_ncols=True)
    try:
        report = migrate_to_s3(
            source, dest, args.repo, (lambda _obj, _outcome: bar.update()) if bar else None
        )
    finally:
        if bar is not None:
            bar.close()
    for obj, why in report.bad:
        print(f"BAD {obj.repo} {obj.oid}: not copied: {why}")
    print(
        f"copied {report.copied} objects ({report.bytes_copied} bytes), "
        f"{report.present} already there, {len(report.bad)} bad"
    )
    _clikit.write_json(
        args.json,
        {
            "copied": report.copied,
            "bytes_copied": report.bytes_copied,
            "present": report.present,
            "bad": [{"repo": o.repo, "oid": o.oid, "reason": why} for o, why in report.bad],
        },
    )
    return 1 if report.bad else 0


@_handler
def _pre_receive(args: argparse.Namespace) -> int:
    from lfs_server.prereceive import run_hook

    status, message = run_hook(args.url, sys.stdin, os.environ, args.user_env)
    if message:
        print(message, file=sys.stderr)
    return status


@_handler
def _import_seed(args: argparse.Namespace) -> int:
    from lfs_server.seed import SeedError, import_seed
    from lfs_server.storage import open_store

    config = _config(args)
    counts = {"imported": 0, "present": 0, "refused": 0}
    refused: list[dict[str, str]] = []
    try:
        items = import_seed(args.seed, open_store(config), args.prefix)
        for item in _progress(args, items, "file"):
            counts[item.status] += 1
            if item.status == "refused":
                refused.append({"path": str(item.path), "reason": item.reason})
                _say(args, f"REFUSED {item.path}: {item.reason}")
    except SeedError as exc:
        raise CliError(str(exc)) from None
    print(
        f"imported {counts['imported']} objects, {counts['present']} already present,"
        f" {counts['refused']} refused (listed above) from {args.seed}"
    )
    _clikit.write_json(args.json, {**counts, "refused_files": refused})
    return 1 if counts["refused"] else 0


@_handler
def _hook_install(args: argparse.Namespace) -> int:
    from lfs_server.prereceive import HookInstallError, install_hook

    try:
        target = install_hook(args.repo, sys.executable, args.url, args.force)
    except HookInstallError as exc:
        raise CliError(str(exc)) from None
    print(f"installed {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
