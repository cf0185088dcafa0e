"""Running a bundled application the way the original executable did.

The original exe prepended its stored command line (resource 201, typically ``-m main``)
to the user's arguments and let CPython parse the result, with the bundle importable
from ``sys.path``. :func:`parse_command_line` reads such a command line (the subset of
CPython's options that can still take effect in a running interpreter) and
:func:`launch` installs the bundle, sets ``sys.argv``/``sys.path`` as CPython would,
and runs ``__main__``. For the start-up hook, which must end the process itself,
:func:`exit_status` turns the outcome into CPython's exit status and :func:`finish` shuts
down the way CPython does.
"""

# ruff: noqa: PTH100, PTH119, PTH120
# (os.path on purpose: bundle paths such as <exe>/pkg/mod.py are not filesystem paths, and
# pathlib would add an import to every bundled start-up.)

from __future__ import annotations

import builtins
import os
import sys

from .importer import Bundle, install

# Imports here are paid by every bundled application's start-up: no dataclasses (which
# pulls in inspect and re), no typing, no collections.abc at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import types
    from collections.abc import Callable, Sequence
    from types import TracebackType

__all__ = [
    "Command",
    "CommandLineError",
    "exit_status",
    "finish",
    "launch",
    "message_box",
    "parse_command_line",
    "report",
    "run",
]

_SUPPORTED = "-m MODULE, -c CODE, a script path, and the options -B, -u, -W ARG"


class CommandLineError(ValueError):
    """A command line the runtime cannot execute; the message says what is supported."""


class Command:
    """What to run: ``kind`` is "module", "code" or "script"; ``args`` become sys.argv[1:]."""

    __slots__ = ("args", "dont_write_bytecode", "kind", "target", "unbuffered", "warnoptions")

    def __init__(
        self,
        kind: str,
        target: str,
        args: tuple[str, ...] = (),
        unbuffered: bool = False,
        dont_write_bytecode: bool = False,
        warnoptions: tuple[str, ...] = (),
    ):
        self.kind = kind
        self.target = target
        self.args = args
        self.unbuffered = unbuffered
        self.dont_write_bytecode = dont_write_bytecode
        self.warnoptions = warnoptions

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Command({fields})"


def parse_command_line(argv: Sequence[str]) -> Command:
    """Parse ``[options] (-m MODULE | -c CODE | SCRIPT) [args]`` as CPython would.

    Raises :class:`CommandLineError` for anything else (options that only work when
    given to the interpreter at start-up, a missing target, stdin as the program).
    """
    unbuffered = dont_write = False
    warnoptions: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            index += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        flags = arg[1:]
        position = 0
        while position < len(flags):
            flag = flags[position]
            rest = flags[position + 1 :]
            if flag in "mcW":
                if rest:
                    value = rest
                elif index + 1 < len(argv):
                    index += 1
                    value = argv[index]
                else:
                    raise CommandLineError(f"option -{flag} needs an argument")
                if flag == "W":
                    warnoptions.append(value)
                    break
                return Command(
                    "module" if flag == "m" else "code",
                    value,
                    tuple(argv[index + 1 :]),
                    unbuffered,
                    dont_write,
                    tuple(warnoptions),
                )
            if flag == "B":
                dont_write = True
            elif flag == "u":
                unbuffered = True
            else:
                raise CommandLineError(
                    f"option {'-' + flag if not arg.startswith('--') else arg!r} in "
                    f"{' '.join(argv)!r} can only be given to the interpreter at start-up; "
                    f"the embeddedimport runtime supports {_SUPPORTED}"
                )
            position += 1
        index += 1
    if index >= len(argv):
        raise CommandLineError(
            f"command line {list(argv)!r} names nothing to run; expected {_SUPPORTED}"
        )
    if argv[index] == "-":
        raise CommandLineError("reading the program from stdin ('-') is not supported")
    return Command(
        "script",
        argv[index],
        tuple(argv[index + 1 :]),
        unbuffered,
        dont_write,
        tuple(warnoptions),
    )


def launch(
    executable: str | os.PathLike[str],
    user_args: Sequence[str],
    *,
    bundle: Bundle | None = None,
    command: Sequence[str] | None = None,
    replace_path0: bool = False,
) -> None:
    """Run the bundle of ``executable`` with ``user_args`` as the exe would.

    The command line is ``command`` (default: the stored resource 201) followed by
    ``user_args``; without either, ``user_args`` alone (``-m MODULE ...``).
    ``sys.path`` becomes ``[<exe>, ...]`` for ``-m`` and ``-c`` and ``[<exe>, <the
    script's folder>, ...]`` for a script: the exe runs its own bundle. Unlike CPython's
    ``-m`` (and the original tool), the working directory is *not* put on ``sys.path``,
    as with ``python -P``: a double-clicked exe in a Downloads folder must not import a
    ``main.py`` or a module named like a standard one that happens to lie there.
    ``replace_path0`` drops the current ``sys.path[0]`` first (``python -m
    embeddedimport`` has the working directory there). Exceptions, including
    ``SystemExit``, propagate from the application as they would from ``python -m``.
    """
    if bundle is None:
        bundle = Bundle.from_executable(executable)
    stored = list(command) if command is not None else bundle.command
    if stored is None:
        # Like the original exe without resource 201: the arguments are the command line.
        if not user_args:
            raise CommandLineError(
                "no stored command line (resource 201); give one "
                "after the executable, for example: -m main"
            )
        stored = []
    parsed = parse_command_line([*stored, *user_args])
    safe_path = bool(getattr(sys.flags, "safe_path", False))
    if replace_path0 and sys.path and not safe_path:
        del sys.path[0]
    install(bundle=bundle, index=0)
    if parsed.kind == "script" and not safe_path:
        # After the exe: the bundle still wins over files next to the script.
        sys.path.insert(1, os.path.dirname(os.path.abspath(parsed.target)))
    _apply_options(parsed)
    run(parsed)


def _apply_options(command: Command) -> None:
    if command.dont_write_bytecode:
        sys.dont_write_bytecode = True
    if command.unbuffered:
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(write_through=True)
    if command.warnoptions:
        import warnings

        sys.warnoptions.extend(command.warnoptions)
        warnings._processoptions(list(command.warnoptions))  # type: ignore[attr-defined]


def run(command: Command) -> None:
    """Execute ``command`` in a fresh ``__main__`` module (sys.path already prepared)."""
    main = type(sys)("__main__")  # types.ModuleType, without importing types
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    if command.kind == "module":
        sys.argv = ["-m", *command.args]
        if _run_top_level_module(command.target, main):
            return
        import runpy

        # The same entry point CPython's own -m uses: the real __main__ namespace.
        runpy._run_module_as_main(command.target, alter_argv=True)  # type: ignore[attr-defined]
        return
    if command.kind == "code":
        sys.argv = ["-c", *command.args]
        from importlib.machinery import BuiltinImporter

        main.__dict__["__loader__"] = BuiltinImporter
        exec(compile(command.target, "<string>", "exec"), main.__dict__)  # noqa: S102 - like -c
        return
    from importlib.machinery import SourceFileLoader

    sys.argv = [command.target, *command.args]
    with open(command.target, "rb") as handle:
        source = handle.read()
    main.__dict__.update(
        __file__=command.target,
        __cached__=None,
        __loader__=SourceFileLoader("__main__", command.target),
    )
    exec(compile(source, command.target, "exec"), main.__dict__)  # noqa: S102 - a script


def _run_top_level_module(name: str, main: types.ModuleType) -> bool:
    """Run a plain top-level module as ``__main__`` the way runpy does; False if not one.

    The common case of a bundled app (``-m main``) without runpy, which would import
    importlib.util, importlib._abc and types: each import from the standard library zip
    costs a few milliseconds of a standalone app's start-up under Wine. Packages, dotted
    names and anything unusual go through runpy.
    """
    if "." in name or name in sys.modules:
        return False
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is not None:
        return False
    get_code = getattr(spec.loader, "get_code", None)
    code = get_code(name) if get_code is not None else None
    if code is None:
        return False
    sys.argv[0] = spec.origin or sys.argv[0]
    main.__dict__.update(
        __name__="__main__",
        __file__=spec.origin,
        __cached__=spec.cached,
        __doc__=None,
        __loader__=spec.loader,
        __package__="",
        __spec__=spec,
    )
    exec(code, main.__dict__)  # noqa: S102 - as runpy._run_code
    return True


def exit_status(error: BaseException | None, report: Callable[[BaseException], None]) -> int:
    """The process exit status CPython would use after ``error`` (``None``: clean exit).

    ``SystemExit(None)`` is 0, an int is itself, anything else is printed and gives 1;
    other exceptions are reported with ``report`` and give 1 (``KeyboardInterrupt``
    gives CPython's Ctrl-C status).
    """
    if error is None:
        return 0
    if isinstance(error, SystemExit):
        code = error.code
        if code is None:
            return 0
        if isinstance(code, int):
            return _c_int(code)
        if sys.stderr is not None:
            print(code, file=sys.stderr)  # noqa: T201 - as CPython prints it
        else:
            report(error)
        return 1
    report(error)
    if isinstance(error, KeyboardInterrupt):
        return _c_int(0xC000013A) if sys.platform == "win32" else 130
    return 1


def _c_int(value: int) -> int:
    """``value`` cast to a C int, as CPython does with an exit code."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def finish(status: int) -> None:
    """End the process like CPython's shutdown: join threads, run atexit, flush, exit."""
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            status = status or 120
    os._exit(status)


def report(error: BaseException) -> None:
    """Show an uncaught error: on stderr, or in a message box when there is no console."""
    import traceback

    error = error.with_traceback(_without_our_frames(error.__traceback__))
    if sys.stderr is None:
        message_box("".join(traceback.format_exception(type(error), error, error.__traceback__)))
    elif sys.excepthook is not sys.__excepthook__:
        sys.excepthook(type(error), error, error.__traceback__)
    else:
        # The Python-level printer asks the loader for source lines (linecache), so
        # bundled frames show their code; CPython's C printer only reads real files.
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def _without_our_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop this package's leading frames: the traceback starts where CPython's would.

    Frames are recognised by their module's name, not their file: bytecode that exepy
    compiled for a standalone app carries a relative file name.
    """
    package = __name__.partition(".")[0] + "."
    while tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith(package):
        tb = tb.tb_next
    return tb


def message_box(text: str) -> None:  # pragma: no cover - needs a Windows GUI process
    """Show ``text`` in an error message box (GUI executables have no console)."""
    if sys.platform != "win32":
        return
    import ctypes

    title = os.path.basename(sys.executable) or "Python"
    ctypes.windll.user32.MessageBoxW(None, text, title, 0x10)  # MB_ICONERROR
