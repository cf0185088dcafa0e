"""Start-up activation, the part that runs once a bundle was found.

The wheel installs ``embeddedimport.pth`` into site-packages; its one line calls
:func:`embeddedimport.activate`, which checks ``sys.executable`` for resource 200 as
cheaply as it can and only then imports this module. Here the bundle becomes importable
and, if the exe carries a command line (resource 201), the application runs once ``site``
has finished (other ``.pth`` files, ``sitecustomize`` and ``usercustomize`` included) and
the process ends with the application's exit status: a stock CPython cannot be told to
skip its own command-line handling, so the hook has to finish the process itself.
"""

import sys

# No os (nor anything else) at module level: the portable interpreter runs this module at
# every start, and python.exe -c pass imports no os (~2 ms under Wine, _collections_abc
# included). The functions that need it import it.
TYPE_CHECKING = False  # not typing's: no typing import on the start-up path

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import CodeType, FrameType
    from typing import Any

__all__ = ["interpreter", "multiprocessing_child", "standalone", "start"]


def start(executable: str, data: bytes, argv: "Sequence[str] | None") -> None:
    """Install the bundle ``data`` of ``executable`` and, with a stored command, run it.

    Called by :func:`embeddedimport.activate` once it found resource 200. ``argv`` (the
    user's arguments) defaults to ``sys.orig_argv[1:]`` with one leading ``--`` removed
    (how a user passes arguments starting with ``-`` past CPython's own option parser).
    """
    from .bundle import BundleError
    from .importer import Bundle, BundleNotFoundError, install

    try:
        bundle = Bundle.from_executable(executable, data)
    except (BundleNotFoundError, BundleError) as exc:
        _fatal(f"cannot start the bundled application: {exc}")
        return
    if bundle.command is None:
        # No stored command: the bundle is importable and CPython carries on as usual.
        install(bundle=bundle, index=0)
        return
    if argv is None:
        argv = list(getattr(sys, "orig_argv", sys.argv)[1:])
        if argv[:1] == ["--"]:
            del argv[0]
    user_args = list(argv)
    if _multiprocessing_code(user_args):
        # A multiprocessing child (spawn's "-c ... --multiprocessing-fork", the resource
        # tracker): CPython runs that code itself once site has finished; the app's modules
        # must be importable.
        install(bundle=bundle, index=0)
        return

    def run_application() -> None:
        from .runtime import CommandLineError, exit_status, finish, launch, report

        error: BaseException | None = None
        try:
            launch(bundle.executable, user_args, bundle=bundle)
        except CommandLineError as exc:
            _bad_command_line(bundle.executable, exc)
        except BaseException as exc:  # everything, as CPython's main loop does
            error = exc
        finish(exit_status(error, report))

    _after_site(run_application)


def standalone(
    table: "dict[str, tuple[str, CodeType]] | None" = None,
    data: "bytes | None" = None,
    command: "bytes | None" = None,
) -> None:
    """Run the bundle of ``sys.executable`` with ``sys.argv[1:]``; exit with its status.

    The entry point of exepy's standalone launcher, which starts an isolated CPython with
    the standard library and this package in the exe's appended zip and calls this instead
    of a ``.pth`` hook: there is no ``site`` to wait for, and CPython's own shutdown runs
    after the ``SystemExit`` this raises (the launcher's ``PyRun_SimpleString`` exits).

    The launcher hands over what it found in the exe's resources, mapped with the image:
    ``table`` (204, ``{module name: (path in the zip, code object)}``: the rest of the
    start-up's modules, compiled by the runtime's own CPython; this module's code came from
    it too), and the bundle (200, ``data``) and command line (201, ``command``). Served
    from memory, they spare a zip lookup per module and reading the exe's resources back
    from its file, each worth milliseconds under Wine. Without them the modules come from
    the zip (``sys.path[0]``) and the bundle from the file.
    """
    if table is not None:
        sys.meta_path.insert(0, _BootTable(table, sys.path[0]))
    _as_frozen()
    from .bundle import BundleError, unpack_command
    from .importer import Bundle, BundleNotFoundError
    from .runtime import CommandLineError, exit_status, launch, report

    try:
        if data is None:
            bundle = Bundle.from_executable(sys.executable)
        else:
            argv = None if command is None else unpack_command(command)
            # No stamp: the running image cannot change on disk (Windows locks it).
            bundle = Bundle(sys.executable, data, argv)
    except (BundleNotFoundError, BundleError) as exc:
        _fatal(f"cannot start the bundled application: {exc}")
        return
    child = multiprocessing_child(sys.argv[1:])
    if child is not None:
        _run_multiprocessing_child(bundle, child)
        return
    error: BaseException | None = None
    try:
        launch(bundle.executable, sys.argv[1:], bundle=bundle)
    except CommandLineError as exc:
        _bad_command_line(bundle.executable, exc)
        return
    except BaseException as exc:  # everything, as CPython's main loop does
        error = exc
    raise SystemExit(exit_status(error, report))


def _as_frozen() -> None:
    """Describe the standalone app the way other freezers do.

    ``sys.frozen`` tells multiprocessing (and many libraries) that ``sys.executable`` is
    the app, not python.exe: spawn then starts children as ``app.exe
    --multiprocessing-fork ...``.
    """
    sys.frozen = True  # type: ignore[attr-defined]
    _runtime_prefixes()


def _runtime_prefixes() -> None:
    """Point the prefixes at the runtime's folder (the one holding ``python3XY.dll``:
    beside the exe in --onedir, the unpacked cache in --onefile) instead of what CPython's
    path calculation makes of an exe without a Lib folder: the working folder."""
    folder = None
    handle = getattr(sys, "dllhandle", None)
    if handle is not None:
        import _winapi  # built in on Windows

        dll = _winapi.GetModuleFileName(handle)  # type: ignore[attr-defined]
        folder = dll[: max(dll.rfind("\\"), dll.rfind("/"), 0)]  # os.path.dirname, without os
    elif len(sys.path) > 1:
        folder = sys.path[-1]  # the launcher's second entry: the runtime's folder
    if folder:
        sys.prefix = sys.exec_prefix = sys.base_prefix = sys.base_exec_prefix = folder
    # multiprocessing starts sys._base_executable instead when the two differ (venvs).
    sys._base_executable = sys.executable  # type: ignore[attr-defined]


def interpreter(
    table: "dict[str, tuple[str, CodeType]] | None" = None, data: "bytes | None" = None
) -> None:
    """Prepare exepy's portable interpreter (a python.exe with the bundle importable).

    The launcher calls this after initialising CPython with python.exe's command-line
    handling and before ``Py_RunMain`` runs the script, ``-c``, ``-m`` or the REPL:
    ``table`` and ``data`` are resources 204 and 200, as for :func:`standalone`. Not frozen:
    the exe is an interpreter, so multiprocessing's usual ``-c`` children just work.
    The bundle is indexed on first use (:class:`_LazyBundle`): ``python.exe -c pass``
    imports no more than the runtime's own python.exe does.
    """
    if table is not None:
        sys.meta_path.insert(0, _BootTable(table, sys.path[0]))
    _runtime_prefixes()
    if data is not None:
        # After the script's folder (Py_RunMain puts it first), before the stdlib.
        _LazyBundle(sys.executable, data).install()
    if not sys.flags.ignore_environment:
        # -X use_environment: CPython ignores PYTHONPATH once the launcher has set the
        # search path, so its entries go first here, as python.exe puts them.
        import os

        extra = os.environ.get("PYTHONPATH", "")
        sys.path[0:0] = [entry for entry in extra.split(os.pathsep) if entry]


class _LazyBundle:
    """The interpreter's bundle as a path hook and a metadata finder that build the real
    ones (:mod:`embeddedimport.importer`: ``os``, ``struct``, inflating, indexing) only
    when an import or ``importlib.metadata`` may need them.

    Which top-level names the exe can serve comes from the bundle's name list, which the
    format stores uncompressed at the end of resource 200: no inflating to answer "not
    here" for every standard module that ``sys.path`` looks up past the exe.
    """

    def __init__(self, executable: str, data: bytes) -> None:
        self.executable = executable
        self._data = data
        self._hook: Any = None
        self.importer: Any = None  # the real EmbeddedImporter of the exe, once built
        self._tops: frozenset[str] | None = None
        self.metadata_finder = _LazyMetadataFinder(self)
        import _thread  # built in, already loaded: threading would cost an import

        self._lock = _thread.allocate_lock()  # two threads' first imports build it once

    def install(self) -> None:
        """What :func:`embeddedimport.importer.install` does, with the lazy objects."""
        sys.path_hooks.insert(0, self)
        sys.path.insert(0, self.executable)
        # Before the path-based finder, as install() puts it (without importing importlib).
        meta_path = sys.meta_path
        names = [getattr(finder, "__name__", None) for finder in meta_path]
        where = names.index("PathFinder") if "PathFinder" in names else len(meta_path)
        meta_path.insert(where, self.metadata_finder)

    def real(self) -> "Any":
        """The real :class:`~embeddedimport.importer.BundlePathHook`, built once; it takes
        this object's places in ``sys.path_hooks`` and ``sys.meta_path``, and the real
        importer of the exe takes :class:`_LazyFinder`'s in ``sys.path_importer_cache``."""
        with self._lock:
            if self._hook is None:
                self._build()
        return self._hook

    def _build(self) -> None:
        from .importer import Bundle, BundlePathHook

        self._hook = hook = BundlePathHook(Bundle(self.executable, self._data, None))
        self.importer = hook(self.executable)
        hooks, meta_path = sys.path_hooks, sys.meta_path
        hooks[:] = [hook if entry is self else entry for entry in hooks]
        meta_path[:] = [
            hook.metadata_finder if entry is self.metadata_finder else entry for entry in meta_path
        ]
        cache = sys.path_importer_cache
        for path, finder in list(cache.items()):
            if isinstance(finder, _LazyFinder) and finder._lazy is self:
                cache[path] = self.importer

    def may_hold(self, name: str) -> bool:
        """Whether the exe's top level may have module, package or folder *name*."""
        tops = self._tops
        if tops is None:
            tops = self._tops = _top_level_names(self._data)
        return name in tops or name + ".py" in tops

    def __call__(self, path: str) -> "Any":
        if path == self.executable:
            return _LazyFinder(self) if self._hook is None else self.importer
        key, exe = path.lower().replace("/", "\\"), self.executable.lower().replace("/", "\\")
        if key.startswith(exe) and key[len(exe) : len(exe) + 1] in ("\\", ""):
            return self.real()(path)  # case or separators differ, or a folder inside
        raise ImportError("not inside this executable's bundle", path=path)

    def __repr__(self) -> str:
        return f"<LazyBundle {self.executable!r}>"


def _top_level_names(data: bytes) -> "frozenset[str]":
    """First components of the bundle's names (``pkg``, ``mod.py``); everything if the
    resource is too damaged to say (the real importer then reports it)."""
    try:
        compressed, _, count = (int.from_bytes(data[at : at + 4], "little") for at in (0, 4, 8))
        tail = data[12 + 4 * count + compressed :]
        if tail.count(b"\0") < count:  # each name ends with a NUL: cut short
            raise ValueError
        names = tail.split(b"\0")[:count]
        return frozenset(name.replace(b"/", b"\\").partition(b"\\")[0].decode() for name in names)
    except ValueError:
        return _EVERYTHING


class _Everything(frozenset[str]):
    def __contains__(self, item: object) -> bool:
        return True


_EVERYTHING: "frozenset[str]" = _Everything()


class _LazyFinder:
    """``sys.path_importer_cache`` entry of the exe until the bundle is needed: a module
    whose top-level name the bundle lacks is "not here" without building anything."""

    def __init__(self, lazy: _LazyBundle) -> None:
        self._lazy = lazy

    def find_spec(self, fullname: str, target: object = None) -> "Any":
        lazy = self._lazy
        if lazy._hook is None and not lazy.may_hold(fullname.rpartition(".")[2]):
            return None
        lazy.real()
        return lazy.importer.find_spec(fullname, target)

    def invalidate_caches(self) -> None:
        if self._lazy.importer is not None:
            self._lazy.importer.invalidate_caches()

    def __getattr__(self, name: str) -> "Any":
        # Everything else the real importer offers (iter_modules for pkgutil, files(), ...).
        if name.startswith("__"):
            raise AttributeError(name)
        self._lazy.real()
        return getattr(self._lazy.importer, name)

    def __repr__(self) -> str:
        return f"<LazyFinder {self._lazy.executable!r}>"


class _LazyMetadataFinder:
    """On ``sys.meta_path`` for ``importlib.metadata``: builds the bundle when asked for
    distributions."""

    def __init__(self, lazy: _LazyBundle) -> None:
        self._lazy = lazy

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        return None

    def find_distributions(self, context: "Any" = None) -> "Any":
        return self._lazy.real().metadata_finder.find_distributions(context)


_SPAWN_CODE = "from multiprocessing.spawn import spawn_main; spawn_main("


def multiprocessing_child(args: "Sequence[str]") -> "dict[str, int | None] | None":
    """The ``spawn_main`` keywords if *args* are multiprocessing's child command line.

    Two forms: the frozen one (``--multiprocessing-fork parent_pid=N pipe_handle=M``, what
    spawn writes when ``sys.frozen`` is set) and the interpreter's (``[options] -c "from
    multiprocessing.spawn import spawn_main; spawn_main(parent_pid=N, pipe_handle=M)"
    --multiprocessing-fork``, written by code that ran without ``sys.frozen``). Anything
    else is the app's command line, its own ``-c`` included.
    """
    if not args:
        return None
    if args[0] == "--multiprocessing-fork":
        pairs = list(args[1:])
    elif (
        args[-1] == "--multiprocessing-fork"
        and len(args) >= 3
        and args[-3] == "-c"
        and args[-2].startswith(_SPAWN_CODE)
        and args[-2].endswith(")")
        and all(option.startswith("-") for option in args[:-3])
    ):
        pairs = [pair.strip() for pair in args[-2][len(_SPAWN_CODE) : -1].split(",")]
    else:
        return None
    keywords: dict[str, int | None] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name.isidentifier():
            return None
        if value == "None":
            keywords[name] = None
        elif value.isdigit():
            keywords[name] = int(value)
        else:
            return None
    return keywords


def _multiprocessing_code(args: "Sequence[str]") -> bool:
    """Whether *args* are ``[options] -c CODE [--multiprocessing-fork]`` with one of
    multiprocessing's own child programs as CODE (spawn, resource tracker, forkserver)."""
    if args[-1:] == ["--multiprocessing-fork"]:
        args = args[:-1]
    return (
        len(args) >= 2
        and args[-2] == "-c"
        and args[-1].startswith("from multiprocessing.")
        and all(option.startswith("-") for option in args[:-2])
    )


def _run_multiprocessing_child(bundle: "Any", keywords: "dict[str, int | None]") -> None:
    """Run multiprocessing's child code (what ``freeze_support()`` does), never the app;
    the bundle is importable so that the parent's main module and pickled functions load."""
    from .importer import install

    install(bundle=bundle, index=0)
    from multiprocessing.spawn import spawn_main

    spawn_main(**keywords)  # type: ignore[arg-type]
    raise SystemExit(0)  # spawn_main exits with the child's status itself


class _BootTable:
    """A meta path finder and loader over ``{name: (path in the zip, code)}``; a path
    ending in ``/__init__.py`` is a package whose other submodules come from the zip."""

    def __init__(self, table: "dict[str, tuple[str, CodeType]]", entry: str) -> None:
        self._table = table
        self._entry = entry

    def find_spec(self, name: str, path: object = None, target: object = None) -> "Any":
        found = self._table.get(name)
        if found is None:
            return None
        sep = "\\" if sys.platform == "win32" else "/"
        origin = self._entry + sep + found[0].replace("/", sep)
        # importlib.machinery.ModuleSpec without importing importlib (sys's spec: this
        # module may run from the table, without a spec of its own).
        spec = type(sys.__spec__)(
            name,
            self,  # type: ignore[arg-type]
            origin=origin,
        )
        spec.has_location = True
        if found[0].endswith("/__init__.py"):  # a package: its submodules stay in the zip
            spec.submodule_search_locations = [origin.rpartition(sep)[0]]
        return spec

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: "Any") -> None:
        _, code = self._table[module.__name__]
        exec(code, module.__dict__)  # noqa: S102 - the module's own compiled code


def _after_site(action: "Callable[[], None]") -> None:
    """Run ``action`` at the end of ``site.main()`` if it is running, else now."""
    site = sys.modules.get("site")
    main = getattr(site, "main", None)
    customize = getattr(site, "execsitecustomize", None)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and (main is None or frame.f_code is not main.__code__):
        frame = frame.f_back
    if frame is None or customize is None or site is None:
        action()
        return
    user_customize = getattr(site, "execusercustomize", None)

    def customize_then_run() -> None:
        # site.main() ends with execsitecustomize() and, if enabled, execusercustomize();
        # run both, then the application (which ends the process).
        customize()
        if getattr(site, "ENABLE_USER_SITE", False) and user_customize is not None:
            user_customize()
        action()

    site.execsitecustomize = customize_then_run  # type: ignore[attr-defined]


def _bad_command_line(executable: str, error: Exception) -> None:
    """End on a command line the exe cannot run (found before the application starts):
    one line naming the exe, and status 2, as CPython answers a bad option."""
    import os

    _fatal(f"{os.path.basename(executable)}: error: {error}", status=2)  # noqa: PTH119 - no pathlib at start-up


def _fatal(message: str, status: int = 1) -> None:
    import os

    if sys.stderr is not None:
        print(message, file=sys.stderr)  # noqa: T201 - no logging at start-up
        sys.stderr.flush()
    else:
        from .runtime import message_box

        message_box(message)
    os._exit(status)
