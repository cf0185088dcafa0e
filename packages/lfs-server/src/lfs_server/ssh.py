"""`lfs-server ssh --user NAME`: the forced command of an SSH key in `authorized_keys`.

sshd runs it for every command that key sends (in `SSH_ORIGINAL_COMMAND`):

* `git-upload-pack` / `git-receive-pack PATH`: git itself, for a bare repository under the
  git root, once the user's grant allows reading / writing it;
* `git-lfs-authenticate PATH upload|download`: JSON `{href, header, expires_in}` for the
  HTTP API, with a short-lived token from the same signer as action tokens;
* `git-lfs-transfer PATH upload|download`: the pure SSH protocol (`sshtransfer.py`).

Anything else is refused with one line. Imports stay light here: `lfs-server --help`
builds this parser.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lfs_server._clikit import CliError

if TYPE_CHECKING:
    from lfs_server.config import Config
    from lfs_server.tokens import TokenSigner

# Exit status of a command this key may not run: what a shell answers for an unknown
# command, and what makes git-lfs fall back from git-lfs-transfer to git-lfs-authenticate.
EXIT_NOT_SERVED = 127
EXIT_REFUSED = 1
GIT_COMMANDS = {"git-upload-pack": "read", "git-receive-pack": "write"}
LFS_OPERATIONS = {"upload": "write", "download": "read"}
# The token operation of an API token: never the operation of an action token, so
# neither kind verifies as the other.
_API_TOKEN_OPERATION = "ssh-api-{}"  # noqa: S105 (a label, not a secret)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `ssh` subcommand to `lfs-server`'s subparsers."""
    cmd = subparsers.add_parser(
        "ssh",
        help="serve one SSH command: the forced command of a key in authorized_keys",
        description=(
            'Run as command="lfs-server ssh --user NAME ..." in authorized_keys: serves'
            " git-upload-pack, git-receive-pack, git-lfs-authenticate and git-lfs-transfer"
            " from $SSH_ORIGINAL_COMMAND for user NAME, within NAME's grants."
        ),
    )
    cmd.add_argument(
        "--user", required=True, metavar="NAME", help="the lfs-server user of this key"
    )
    # Strings, not Paths (Path("") is "."): Config refuses an empty one and expands `~`.
    cmd.add_argument(
        "--data",
        metavar="DIR",
        help="data directory (env LFS_DATA_DIR; default ./lfs-data)",
    )
    cmd.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file (env LFS_CONFIG_FILE; sshd passes no environment)",
    )
    cmd.add_argument(
        "--git-root",
        type=Path,
        metavar="DIR",
        help="where the bare git repositories live, e.g. DIR/team/game.git (default DATA/git)",
    )
    cmd.add_argument(
        "--url",
        metavar="URL",
        help="base URL of the HTTP server for git-lfs-authenticate (env LFS_PUBLIC_URL)",
    )
    cmd.add_argument(
        "--no-transfer",
        action="store_true",
        help="refuse git-lfs-transfer (exit 127): git-lfs then uses git-lfs-authenticate + HTTP",
    )
    cmd.add_argument(
        "--ssh-command",
        metavar="CMD",
        help="the command to serve (default: $SSH_ORIGINAL_COMMAND, as sshd sets it)",
    )
    cmd.set_defaults(func=run)


def issue_api_token(
    signer: TokenSigner, repo: str, operation: str, user: str, expires_at: int
) -> str:
    """A token for the HTTP API (batch, locks) of *repo*, as git-lfs-authenticate hands out."""
    return signer.issue(repo, _API_TOKEN_OPERATION.format(operation), "", 0, user, expires_at)


def api_token_user(signer: TokenSigner, token: str, repo: str, needed: str) -> str:
    """The user an API token of *repo* was issued to, if it allows level *needed*.

    An upload token allows reading too (git-lfs asks for download before some uploads).
    Raises `TokenError` otherwise; the caller still checks the user's current grant.
    """
    from lfs_server.tokens import TokenError

    operations = ["upload"] if needed in ("write", "admin") else ["download", "upload"]
    failure: TokenError | None = None
    for operation in operations:
        try:
            grant = signer.verify(token, repo, _API_TOKEN_OPERATION.format(operation), "", 0)
        except TokenError as exc:
            if exc.expired:
                raise TokenError(
                    "SSH token has expired; git-lfs asks git-lfs-authenticate for a new one",
                    expired=True,
                ) from None
            failure = exc
            continue
        return grant.user
    assert failure is not None
    raise TokenError(f"token does not grant {needed} access to this repository")


def run(args: argparse.Namespace) -> int:
    """Serve the one SSH command of this connection."""
    command = args.ssh_command or os.environ.get("SSH_ORIGINAL_COMMAND")
    if not command:
        raise CliError(
            "this key runs git and git-lfs commands only (no shell): ssh sent no command",
            EXIT_REFUSED,
        )
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise CliError(f"cannot parse the SSH command ({exc})", EXIT_REFUSED) from None
    verb = words[0] if words else ""
    served = (*GIT_COMMANDS, "git-lfs-authenticate", "git-lfs-transfer")
    if verb not in served:
        raise CliError(
            f"refused {verb[:60]!r}: this key may run {', '.join(served)} only", EXIT_NOT_SERVED
        )
    if verb == "git-lfs-transfer" and args.no_transfer:
        raise CliError(
            "git-lfs-transfer is off for this key; use git-lfs-authenticate", EXIT_NOT_SERVED
        )
    config = _config(args)
    if verb in GIT_COMMANDS:
        if len(words) != 2:
            raise CliError(f"{verb} takes one repository path, got {len(words) - 1}", EXIT_REFUSED)
        repo = _repo_name(words[1], _git_root(args, config))
        _check_grant(config, args.user, repo, GIT_COMMANDS[verb])
        # Who pushes, for hooks: lfs-server's pre-receive hook reads REMOTE_USER.
        os.environ["REMOTE_USER"] = args.user
        return _exec_git(verb, _git_root(args, config), repo)
    if len(words) != 3 or words[2] not in LFS_OPERATIONS:
        raise CliError(f"usage: {verb} PATH upload|download, got {command[:120]!r}", EXIT_REFUSED)
    repo = _repo_name(words[1], _git_root(args, config))
    operation = words[2]
    level = _check_grant(config, args.user, repo, LFS_OPERATIONS[operation])
    if verb == "git-lfs-authenticate":
        return _authenticate(args, config, repo, operation)
    from lfs_server.sshtransfer import serve

    return serve(config, args.user, level, repo, operation, sys.stdin.buffer, sys.stdout.buffer)


def _config(args: argparse.Namespace) -> Config:
    from lfs_server.config import Config, ConfigError

    try:
        return Config.from_env(None, args.config, data_dir=args.data, public_url=args.url)
    except ConfigError as exc:
        if exc.key == "public_url" and args.url is not None:  # this command's flag is --url
            raise CliError(f"--url {exc.problem}") from None
        raise CliError(str(exc)) from None


def _git_root(args: argparse.Namespace, config: Config) -> Path:
    return Path(args.git_root or config.root / "git").resolve()


def _repo_name(raw: str, git_root: Path) -> str:
    """The canonical repository name of an SSH path.

    `ssh://host/team/game.git` sends `/team/game.git`, `host:team/game.git` sends
    `team/game.git`; an absolute path inside the git root (`/srv/git/team/game.git`)
    is taken relative to it. `normalize_repo` refuses `..`, dot-files and the like.
    """
    from lfs_server.validation import ApiError, normalize_repo

    path = raw
    root = str(git_root).rstrip("/") + "/"
    if path.startswith(root):
        path = path[len(root) :]
    try:
        return normalize_repo(path)
    except ApiError as exc:
        raise CliError(exc.message, EXIT_REFUSED) from None


def _check_grant(config: Config, name: str, repo: str, needed: str) -> str:
    """The user's level on *repo*; refuse (one line) unless it is at least *needed*."""
    from lfs_server.users import UsersError, level_rank, load_users

    try:
        user = load_users(config).users.get(name)
    except UsersError as exc:
        raise CliError(str(exc), EXIT_REFUSED) from None
    if user is None:
        raise CliError(
            f"user {name!r} is not an lfs-server user; ask the administrator", EXIT_REFUSED
        )
    level = user.level_for(repo)
    if level_rank(level) < level_rank(needed):
        held = "no" if level is None else level
        raise CliError(
            f"user {name!r} has {held} access to {repo!r}; {needed} access is needed", EXIT_REFUSED
        )
    assert level is not None
    return level


def _exec_git(verb: str, git_root: Path, repo: str) -> int:
    """Replace this process with git's own command on the bare repository of *repo*."""
    target = git_root / f"{repo}.git"
    # normalize_repo allows no '..'; a link inside the root could still lead out of it.
    resolved = target.resolve()
    if git_root != resolved and git_root not in resolved.parents:
        raise CliError(f"repository {repo!r} leads outside the git root", EXIT_REFUSED)
    if not (resolved / "HEAD").is_file():
        raise CliError(f"no git repository {repo!r} on this server", EXIT_REFUSED)
    sys.stdout.flush()
    os.execvp(verb, [verb, str(resolved)])  # noqa: S606 (a fixed git command, checked path)


def _authenticate(args: argparse.Namespace, config: Config, repo: str, operation: str) -> int:
    """Print `{href, header, expires_in}`: the HTTP API of *repo* with a short-lived token."""
    import json
    import time

    from lfs_server.tokens import TokenSigner, load_or_create_key

    if not config.public_url:
        raise CliError(
            "git-lfs-authenticate needs the HTTP server's URL: pass --url or set LFS_PUBLIC_URL",
            EXIT_REFUSED,
        )
    signer = TokenSigner(load_or_create_key(config.key_path))
    ttl = config.token_ttl
    token = issue_api_token(signer, repo, operation, args.user, int(time.time()) + ttl)
    answer = {
        "href": f"{config.public_url.rstrip('/')}/{repo}.git/info/lfs",
        "header": {"Authorization": f"Bearer {token}"},
        "expires_in": ttl,
    }
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m lfs_server.ssh --user NAME`: the same as `lfs-server ssh`."""
    from lfs_server import _clikit

    def build() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="lfs-server")
        add_parser(parser.add_subparsers(dest="command"))
        return parser

    return _clikit.run(build, ["ssh", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
