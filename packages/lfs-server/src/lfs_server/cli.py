"""The `lfs-server` console script: a thin shell over the package's API."""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lfs_server import __version__
from lfs_server.config import ENV_VARS, Config, ConfigError

if TYPE_CHECKING:
    from lfs_server.storage import ObjectStore


def _add_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="data directory (env LFS_DATA_DIR; default ./lfs-data)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `lfs-server`."""
    env_help = "\n".join(f"  {var:<24} {text}" for var, _field, _kind, text in ENV_VARS)
    parser = argparse.ArgumentParser(
        prog="lfs-server",
        description="A Git LFS server: Flask under gunicorn behind nginx.",
        epilog=f"environment variables (flags win over them):\n{env_help}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run nginx + gunicorn as one supervised unit")
    _add_data(serve)
    serve.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="address to listen on (env LFS_LISTEN; default 127.0.0.1:8080)",
    )
    serve.add_argument(
        "--workers", type=int, metavar="N", help="gunicorn workers (env LFS_WORKERS; default 2)"
    )
    serve.add_argument(
        "--public-url",
        metavar="URL",
        help="base URL clients reach the server at (env LFS_PUBLIC_URL)",
    )
    serve.add_argument(
        "--no-nginx", action="store_true", help="development mode: gunicorn serves bodies itself"
    )

    conf = sub.add_parser("nginx-config", help="print an nginx config for running your own nginx")
    _add_data(conf)
    conf.add_argument("--listen", metavar="HOST:PORT", help="address nginx listens on")
    conf.add_argument(
        "--upstream",
        metavar="ADDR",
        help="where gunicorn listens (default unix:DATA/run/gunicorn.sock)",
    )

    user = sub.add_parser("user", help="manage users and their permissions")
    user_sub = user.add_subparsers(dest="user_command", metavar="ACTION")
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
    remove = user_sub.add_parser("remove", help="remove a user")
    _add_data(remove)
    remove.add_argument("name")
    lst = user_sub.add_parser("list", help="list users and permissions")
    _add_data(lst)

    repo = sub.add_parser("repo", help="manage repositories (needed when LFS_AUTO_CREATE is off)")
    repo_sub = repo.add_subparsers(dest="repo_command", metavar="ACTION")
    create = repo_sub.add_parser("create", help="create a repository")
    _add_data(create)
    create.add_argument("name", help="repository path, e.g. team/game.git")
    rlist = repo_sub.add_parser("list", help="list repositories")
    _add_data(rlist)

    fsck = sub.add_parser("fsck", help="re-hash stored objects and report bad ones")
    _add_data(fsck)
    fsck.add_argument(
        "--quarantine", action="store_true", help="move bad objects to DATA/quarantine"
    )
    fsck.add_argument("--repo", help="check one repository only")

    migrate = sub.add_parser(
        "migrate",
        help="copy the local store's objects into S3 (LFS_S3_* settings), each one verified",
    )
    _add_data(migrate)
    migrate.add_argument(
        "--to", required=True, choices=["s3"], help="where to copy the objects: s3"
    )
    migrate.add_argument("--repo", help="copy one repository only")

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

    install = sub.add_parser("hook", help="install the pre-receive hook in a bare repository")
    install_sub = install.add_subparsers(dest="hook_command", metavar="ACTION")
    hook_install = install_sub.add_parser(
        "install", help="write REPO.git/hooks/pre-receive (enforces locks on push)"
    )
    hook_install.add_argument("repo", metavar="REPO.git", type=Path, help="bare repository")
    hook_install.add_argument(
        "--url", help="the repository's LFS endpoint (sets lfs.url), .../repo.git/info/lfs"
    )
    hook_install.add_argument(
        "--force", action="store_true", help="replace a pre-receive hook that is not ours"
    )

    hook = sub.add_parser(
        "pre-receive", help="git pre-receive hook: refuse pushes touching others' locks"
    )
    hook.add_argument(
        "--url", required=True, help="the repository's LFS endpoint, .../repo.git/info/lfs"
    )
    hook.add_argument(
        "--user-env", default="REMOTE_USER", help="variable naming the pusher (default REMOTE_USER)"
    )
    return parser


class CliError(Exception):
    """A problem the user can fix; main() prints it as one `lfs-server: error:` line."""


def _config(args: argparse.Namespace, must_exist: bool = False, **extra: object) -> Config:
    config = Config.from_env(None, data_dir=getattr(args, "data", None), **extra)
    # With users in PostgreSQL and objects in S3 a node may have no data folder of its own.
    remote = bool(config.database_url) or config.storage != "local"
    if must_exist and not config.root.is_dir() and not remote:
        raise CliError(
            f"data directory {config.root} does not exist; give the server's data folder"
            " with --data DIR (or LFS_DATA_DIR)"
        )
    return config


def _fail(message: str) -> int:
    print(f"lfs-server: error: {message}", file=sys.stderr)
    return 2


def _os_error_message(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return (
        f"{where}{exc.strerror or exc}; lfs-server needs a data folder it can write"
        " (choose another --data DIR, or fix its permissions)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run `lfs-server` with *argv* (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _dispatch(parser, args)
    except (ConfigError, CliError) as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        # `lfs-server user list | head -1`: the reader left; end quietly like a Unix tool.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        return _fail(_os_error_message(exc))
    except KeyboardInterrupt:
        print("lfs-server: interrupted", file=sys.stderr)
        return 130


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from lfs_server.locks import DatabaseUnavailable
    from lfs_server.storage import StoreUnavailable
    from lfs_server.users import UsersError
    from lfs_server.validation import ApiError

    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "nginx-config":
            return _nginx_config(args)
        if args.command == "user":
            return _user(parser, args)
        if args.command == "repo":
            return _repo(parser, args)
        if args.command == "fsck":
            return _fsck(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "pre-receive":
            return _pre_receive(args)
        if args.command == "hook":
            return _hook(parser, args)
        if args.command == "import-seed":
            return _import_seed(args)
    except (UsersError, StoreUnavailable, DatabaseUnavailable) as exc:
        return _fail(str(exc))
    except ApiError as exc:
        return _fail(exc.message)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _serve(args: argparse.Namespace) -> int:
    from lfs_server.serve import ServeError, Supervisor

    config = _config(args, listen=args.listen, workers=args.workers, public_url=args.public_url)
    supervisor = Supervisor(config, use_nginx=not args.no_nginx, out=sys.stdout, err=sys.stderr)
    made_here = not config.root.exists()
    try:
        return supervisor.run()
    except (ServeError, OSError) as exc:
        # A serve that never started leaves no half-made data folder behind.
        if made_here:
            shutil.rmtree(config.root, ignore_errors=True)
        if isinstance(exc, ServeError):
            return _fail(str(exc))
        raise


def _nginx_config(args: argparse.Namespace) -> int:
    from lfs_server.nginx import render_nginx_config
    from lfs_server.serve import prepare
    from lfs_server.tokens import proxy_secret

    config = _config(args, listen=args.listen)
    key = prepare(config)
    sys.stdout.write(render_nginx_config(config, proxy_secret(key), upstream=args.upstream))
    return 0


def _user(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from lfs_server.users import load_users, parse_grant

    if args.user_command is None:
        parser.parse_args(["user", "--help"])
    config = _config(args, must_exist=args.user_command != "add")
    db = load_users(config)
    if args.user_command == "add":
        grants = dict(parse_grant(g) for g in args.grant)
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        elif sys.stdin.isatty():
            password = getpass.getpass(f"password for {args.name}: ")
            if getpass.getpass("again: ") != password:
                return _fail("the two passwords differ; nothing was changed")
        else:
            return _fail("give the password with --password-stdin (no terminal to prompt on)")
        db.add(args.name, password, grants, replace=args.update)
        db.save()
        print(
            f"user {args.name}: "
            + (
                ", ".join(f"{p}={lv}" for p, lv in sorted(db.users[args.name].permissions.items()))
                or "no permissions yet"
            )
        )
        return 0
    if args.user_command == "remove":
        db.remove(args.name)
        db.save()
        print(f"removed user {args.name}")
        return 0
    for user in db.users.values():
        shown = ", ".join(f"{p}={lv}" for p, lv in sorted(user.permissions.items())) or "-"
        print(f"{user.name}\t{shown}")
    return 0


def _repo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from lfs_server.storage import open_store
    from lfs_server.validation import normalize_repo

    if args.repo_command is None:
        parser.parse_args(["repo", "--help"])
    config = _config(args, must_exist=args.repo_command == "list")
    store = open_store(config)
    if args.repo_command == "create":
        name = normalize_repo(args.name)
        store.create_repo(name)
        print(f"created {name}.git")
        return 0
    for name in store.list_repos():
        print(name)
    return 0


def _fsck(args: argparse.Namespace) -> int:
    from lfs_server.fsck import check_store
    from lfs_server.storage import open_store

    config = _config(args, must_exist=True)
    store = open_store(config)
    if args.repo is not None:
        _check_repo_exists(store, args.repo, config)
    aborted = store.cleanup()
    if aborted:
        print(f"aborted {aborted} unfinished upload(s) left by stopped nodes")
    checked = bad = 0
    for obj, problem in check_store(
        store, config.quarantine_dir if args.quarantine else None, args.repo
    ):
        checked += 1
        if problem is not None:
            bad += 1
            where = f"; moved to {problem.moved_to}" if problem.moved_to else ""
            print(f"BAD {obj.repo} {obj.oid}: bytes hash to {problem.actual}{where}")
    print(f"checked {checked} objects, {bad} bad")
    return 1 if bad else 0


def _check_repo_exists(store: ObjectStore, repo: str, config: Config) -> None:
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
    where = f"bucket {config.s3_bucket}" if config.storage == "s3" else str(config.repos_dir)
    known = store.list_repos()
    shown = ", ".join(known[:5]) + (f" and {len(known) - 5} more" if len(known) > 5 else "")
    raise CliError(
        f"no repository {name} in {where}; "
        + (f"--repo takes one of: {shown}" if known else "it holds no repositories yet")
        + " (see `lfs-server repo list`)"
    )


def _migrate(args: argparse.Namespace) -> int:
    from lfs_server.migrate import migrate_to_s3
    from lfs_server.s3store import S3Store
    from lfs_server.storage import Store

    config = _config(args)
    if not config.s3_bucket:
        print(
            "lfs-server: error: migrate --to s3 needs LFS_S3_BUCKET (and LFS_S3_ENDPOINT,"
            " AWS credentials) naming the destination",
            file=sys.stderr,
        )
        return 2
    if not config.repos_dir.is_dir():
        print(f"lfs-server: error: no local store at {config.repos_dir}", file=sys.stderr)
        return 2
    source = Store(config.repos_dir, config.tmp_dir)
    dest = S3Store.from_config(config)
    dest.check()
    report = migrate_to_s3(source, dest, args.repo)
    for obj, why in report.bad:
        print(f"BAD {obj.repo} {obj.oid}: not copied: {why}")
    print(
        f"copied {report.copied} objects ({report.bytes_copied} bytes), "
        f"{report.present} already there, {len(report.bad)} bad"
    )
    return 1 if report.bad else 0


def _pre_receive(args: argparse.Namespace) -> int:
    from lfs_server.prereceive import run_hook

    status, message = run_hook(args.url, sys.stdin, os.environ, args.user_env)
    if message:
        print(message, file=sys.stderr)
    return status


def _import_seed(args: argparse.Namespace) -> int:
    from lfs_server.seed import SeedError, import_seed
    from lfs_server.storage import open_store

    config = _config(args)
    counts = {"imported": 0, "present": 0, "refused": 0}
    try:
        for item in import_seed(args.seed, open_store(config), args.prefix):
            counts[item.status] += 1
            if item.status == "refused":
                print(f"REFUSED {item.path}: {item.reason}", flush=True)
    except SeedError as exc:
        return _fail(str(exc))
    print(
        f"imported {counts['imported']} objects, {counts['present']} already present,"
        f" {counts['refused']} refused (listed above) from {args.seed}"
    )
    return 1 if counts["refused"] else 0


def _hook(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from lfs_server.prereceive import HookInstallError, install_hook

    if args.hook_command is None:
        parser.parse_args(["hook", "--help"])
    try:
        target = install_hook(args.repo, sys.executable, args.url, args.force)
    except HookInstallError as exc:
        return _fail(str(exc))
    print(f"installed {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
