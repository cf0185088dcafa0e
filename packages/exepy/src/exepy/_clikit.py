"""The repository's CLI rule in one module (standard library only).

Vendored byte-identical into every package as ``<import_name>/_clikit.py`` by
``tools/vendor-clikit`` (packages stay independent; ``tests/integration/test_clikit.py``
fails when a copy differs). Edit ``tools/clikit.py``, then run ``tools/vendor-clikit``.

The rule (root README): errors are one line ``PROG: error: MESSAGE`` with status 2 (1 for a
negative answer); 130 after ``PROG: interrupted`` on Ctrl-C; 141 quietly on a closed
stdout; output files are written beside the target and renamed into place (a file is
replaced atomically; a folder is never replaced without ``--force``); ``--json -`` writes
JSON to stdout and the human-readable text to stderr; ``--version`` everywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_NEGATIVE",
    "EXIT_OK",
    "EXIT_USAGE",
    "FREE_DIM_FIRST",
    "FREE_DIM_OTHER",
    "CliError",
    "ShapeSpec",
    "add_completion_command",
    "add_json_option",
    "add_progress_option",
    "add_version_option",
    "atomic_path",
    "fill_free_dims",
    "glue_dash_values",
    "key_value",
    "one_line",
    "parse_free_shape",
    "parse_shape",
    "progress_enabled",
    "run",
    "write_json",
    "write_text",
]

EXIT_OK = 0
EXIT_NEGATIVE = 1  # the command ran and its answer is "no" (mismatch, bad objects)
EXIT_USAGE = 2  # bad arguments or input, or the command could not do what was asked
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

# One default for free (dynamic) input dimensions in every tool: batch 1, others 224.
FREE_DIM_FIRST = 1
FREE_DIM_OTHER = 224


class CliError(Exception):
    """A problem the user can fix: printed as one line, *status* is the exit code."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def one_line(message: str) -> str:
    """Join a multi-line message into one line (blank lines dropped)."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return str(message).strip()
    return "; ".join(lines)


# --- options ---------------------------------------------------------------------------


def add_version_option(parser: argparse.ArgumentParser, distribution: str) -> None:
    """``--version``: prints ``PROG VERSION`` from the installed metadata (read only if asked)."""

    class _Version(argparse.Action):
        def __init__(self, option_strings: Sequence[str], dest: str, **_: object) -> None:
            super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

        def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
            from importlib.metadata import PackageNotFoundError, version

            try:
                number = version(distribution)
            except PackageNotFoundError:
                number = "0+unknown"
            sys.stdout.write(f"{parser.prog.split()[0]} {number}\n")
            parser.exit()

    parser.add_argument("--version", action=_Version)


def add_json_option(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """``--json FILE|-``: also write *what* as JSON (``-``: to stdout, text to stderr)."""
    parser.add_argument(
        "--json",
        metavar="FILE|-",
        help=f"also write {what} as JSON to FILE (atomically), or to stdout with '-' "
        "(the text then goes to stderr)",
    )


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: silence the progress display shown on a terminal."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress display (it is shown only when stderr is a terminal)",
    )


def progress_enabled(args: argparse.Namespace) -> bool:
    """Show progress only on a terminal, never with ``--no-progress`` or ``--json -``."""
    if getattr(args, "no_progress", False) or getattr(args, "json", None) == "-":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def key_value(text: str) -> tuple[str, str]:
    """argparse type for repeated ``KEY=VALUE`` options (use with ``action="append"``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_completion_command(subparsers: Any, parser: argparse.ArgumentParser) -> None:
    """A ``completion {bash,zsh}`` subcommand printing a static script made with shtab.

    The script is generated once (when the user installs it), so pressing TAB runs no
    Python at all.
    """
    sub = subparsers.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script. Install for bash: "
        f"{parser.prog} completion bash > ~/.local/share/bash-completion/completions/{parser.prog}"
        f' ; for zsh: {parser.prog} completion zsh > "${{fpath[1]}}/_{parser.prog}"',
    )
    sub.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete for")

    def _completion(args: argparse.Namespace) -> int:
        try:
            import shtab  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise CliError("shell completion needs the shtab package: pip install shtab") from None
        sys.stdout.write(shtab.complete(parser, shell=args.shell))
        return EXIT_OK

    sub.set_defaults(func=_completion)


# --- shapes ----------------------------------------------------------------------------


class ShapeSpec(NamedTuple):
    """The parsed ``[NAME=]D0,D1,...`` of a ``--shape`` option."""

    name: str | None  # None: the model's only input
    dims: tuple[int, ...]


def parse_shape(text: str) -> ShapeSpec:
    """Parse the one ``--shape`` grammar: ``[NAME=]D0,D1,...`` (``1x3x8x8``, ``[1,3,8,8]`` too).

    Raises ``argparse.ArgumentTypeError`` (so it works as an argparse ``type``).
    """
    return _parse_shape(text, free=False)


def parse_free_shape(text: str) -> ShapeSpec:
    """:func:`parse_shape`, where a dimension may also be free (dynamic): ``-1`` or ``?``,
    kept as -1 (what :func:`fill_free_dims` fills). Give the option's argv through
    :func:`glue_dash_values` so that ``--shape -1,3,224,224`` reaches argparse as one."""
    return _parse_shape(text, free=True)


def _parse_shape(text: str, *, free: bool) -> ShapeSpec:
    name, sep, dims_text = text.rpartition("=")
    cleaned = dims_text.strip().strip("[]()").replace("x", ",")
    try:
        parts = cleaned.split(",")
        dims = tuple(-1 if free and part.strip() == "?" else int(part) for part in parts)
    except ValueError:
        dims = ()
    if (sep and not name) or not dims or min(dims) < (-1 if free else 0):
        accepted = "non-negative integers or -1/? (free)" if free else "non-negative integers"
        raise argparse.ArgumentTypeError(
            f"expected [NAME=]D0,D1,... with {accepted} (e.g. x=1,3,224,224), got {text!r}"
        )
    return ShapeSpec(name or None, dims)


def glue_dash_values(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """*argv* with ``OPTION -1,...`` spelt ``OPTION=-1,...`` for each of *options*.

    argparse takes a value that starts with ``-`` and is no plain number (``-1,3,224,224``)
    for an unknown option and answers "expected one argument"; glued, it is the value.
    Nothing after ``--`` changes.
    """
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            return out + list(argv[index:])
        following = argv[index + 1] if index + 1 < len(argv) else ""
        if arg in options and following[:1] == "-" and following[1:2].isdigit():
            out.append(f"{arg}={following}")
            index += 2
            continue
        out.append(arg)
        index += 1
    return out


def fill_free_dims(dims: Sequence[int | None]) -> tuple[int, ...]:
    """Replace free dimensions (None or negative) by the shared default: 1 first, 224 after."""
    return tuple(
        (FREE_DIM_FIRST if index == 0 else FREE_DIM_OTHER) if d is None or d < 0 else d
        for index, d in enumerate(dims)
    )


# --- output files ----------------------------------------------------------------------


def check_writable(target: str | os.PathLike[str], option: str = "") -> None:
    """Raise CliError unless a file *target* could be written: not a folder, in a folder
    that exists. `run` checks ``--json FILE`` so, before a long command's work."""
    path = Path(target)
    where = f"{option} {target}" if option else str(target)
    if path.is_dir():
        raise CliError(f"cannot write {where}: it is a folder; give a file name inside it")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise CliError(f"cannot write {where}: the folder {folder} {what}")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], option: str = "") -> Iterator[Path]:
    """Yield a temporary path beside *target*; rename it onto *target* if the block succeeds.

    On an error or interrupt the temporary is removed and *target* is left as it was.
    Messages name the target (and *option*, e.g. ``-o``), never the temporary. A target
    that is a symbolic link or no regular file (``/dev/null``, ``/dev/stdout``, a FIFO) is
    yielded itself and written in place: a rename would replace the link or the device.
    """
    import secrets

    path = Path(target)
    where = f"{option} {target}" if option else str(target)
    check_writable(target, option)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        try:
            yield path
        except OSError as exc:
            raise CliError(f"cannot write {where}: {exc.strerror or exc}") from None
        return
    temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
    try:
        yield temporary
        temporary.replace(path)
    except OSError as exc:
        raise CliError(f"cannot write {where}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


def write_text(target: str | os.PathLike[str], text: str, option: str = "") -> None:
    """Write *text* (UTF-8) to *target* atomically."""
    with atomic_path(target, option) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_json(destination: str | None, data: Any) -> None:
    """Write *data* as JSON: nowhere if *destination* is empty, stdout for ``-``, else a file.

    ``run`` points ``sys.stdout`` at stderr while a ``--json -`` command runs, so the JSON
    goes to the real stdout (``sys.__stdout__`` at the time ``run`` started).
    """
    if not destination:
        return
    import json

    text = json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n"
    if destination == "-":
        stream = _JSON_STDOUT[-1] if _JSON_STDOUT else sys.stdout
        stream.write(text)
        stream.flush()
    else:
        write_text(destination, text, "--json")


_JSON_STDOUT: list[TextIO] = []


# --- running a command -----------------------------------------------------------------


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _quiet_stdout() -> None:
    # Python flushes stdout again at exit: point it at /dev/null so that says nothing.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run(
    parser: argparse.ArgumentParser | Callable[[], argparse.ArgumentParser],
    argv: Sequence[str] | None = None,
    *,
    errors: Sequence[type[BaseException]] | Callable[[], Sequence[type[BaseException]]] = (),
) -> int:
    """Parse *argv*, call ``args.func(args)`` and turn every outcome into an exit status.

    *errors* are the package's own user-facing exception types (or a callable returning
    them, so heavy modules are imported only after parsing): printed as one line, status
    2, or the exception's ``status`` attribute when it has one.
    """
    if callable(parser) and not isinstance(parser, argparse.ArgumentParser):
        parser = parser()
    prog = parser.prog
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    json_to = getattr(args, "json", None)
    json_to_stdout = json_to == "-"
    known: tuple[type[BaseException], ...] = ()
    try:
        if isinstance(json_to, str) and json_to and not json_to_stdout:
            check_writable(json_to, "--json")
        known = tuple(errors() if callable(errors) else errors)
        if json_to_stdout:
            _JSON_STDOUT.append(sys.stdout)
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    status = func(args)
            finally:
                _JSON_STDOUT.pop()
        else:
            status = func(args)
        sys.stdout.flush()
        return EXIT_OK if status is None else int(status)
    except CliError as exc:
        _say(f"{prog}: error: {one_line(str(exc))}")
        return exc.status
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if known and isinstance(exc, known):
            _say(f"{prog}: error: {one_line(str(exc))}")
            return int(getattr(exc, "status", EXIT_USAGE))
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            _say(f"{prog}: error: {where}{exc.strerror or exc}")
            return EXIT_USAGE
        raise
