"""The import system for a bundle stored in an executable's resources (PEP 451 protocol only).

:class:`EmbeddedImporter` is both the path-entry finder and the loader for one directory of
a :class:`~embeddedimport.bundle.Bundle` (resource 200, read and indexed once), the way
``zipimporter`` is for a zip file: ``sys.path`` holds the exe's path, packages'
``__path__`` hold ``<exe>/<package dir>``, and a path hook installed by :func:`install`
maps those entries to importers. ``__file__`` is ``<exe path>/<relative
path>`` (with the platform's separator), as the original importer set it.
"""

# ruff: noqa: PTH113, PTH116, PTH117, PTH120
# (os.path on purpose: bundle paths such as <exe>/pkg/mod.py are not filesystem paths, and
# pathlib would add an import to every bundled start-up.)

from __future__ import annotations

import os
import sys
from importlib import _bootstrap_external  # frozen: already loaded, costs nothing
from importlib.machinery import ModuleSpec, PathFinder

# Bundle and BundleNotFoundError live with the format in .bundle; they are re-exported
# here because this module has always been where they were imported from.
from .bundle import Bundle, BundleNotFoundError

# Imports here are paid by every bundled application's start-up: no typing or
# collections.abc at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from importlib.abc import Traversable, TraversableResources
    from types import CodeType, ModuleType
    from typing import Any

__all__ = [
    "Bundle",
    "BundleMetadataFinder",
    "BundleNotFoundError",
    "BundlePathHook",
    "EmbeddedImporter",
    "install",
    "uninstall",
]


class EmbeddedImporter:
    """Finder and loader for one directory of a bundle (``<exe>`` or ``<exe>/<dir>``).

    ``EmbeddedImporter(path)`` reads the bundle of the executable that ``path`` names
    or lies under; pass ``bundle`` to share an already indexed one (what the path hook
    does). Raises :class:`BundleNotFoundError` (an ImportError) otherwise.
    """

    def __init__(self, path: str | os.PathLike[str], bundle: Bundle | None = None):
        text = os.fspath(path)
        if bundle is None:
            bundle = _bundle_for(text)
        prefix = bundle.relative(text)
        if prefix is None:
            raise BundleNotFoundError(f"{text!r} is not inside {bundle.executable!r}", path=text)
        self.bundle = bundle
        self.path = text
        self.prefix = prefix + "/" if prefix else ""

    def __repr__(self) -> str:
        return f"<EmbeddedImporter {self.path!r}>"

    # --- finder -------------------------------------------------------------------------

    def _lookup(self, fullname: str) -> tuple[str, bool] | None:
        """``(bundle name, is_package)`` of the module's source here, or ``None``."""
        base = self.prefix + fullname.rpartition(".")[2]
        files = self.bundle.files
        init = base + "/__init__.py"
        if init in files:
            return init, True
        module = base + ".py"
        if module in files:
            return module, False
        return None

    def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
        """A spec for ``fullname`` from this directory, a namespace portion, or ``None``."""
        found = self._lookup(fullname)
        if found is None:
            directory = self.prefix + fullname.rpartition(".")[2]
            if directory in self.bundle.directories:
                spec = ModuleSpec(fullname, None, is_package=True)
                assert spec.submodule_search_locations is not None
                spec.submodule_search_locations.append(self.bundle.path_of(directory))
                return spec
            return None
        name, is_package = found
        # Not an importlib.abc.Loader subclass: importlib.abc imports typing (~10 ms at start-up).
        spec = ModuleSpec(
            fullname,
            self,  # type: ignore[arg-type]
            origin=self.bundle.path_of(name),
            is_package=is_package,
        )
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [self.bundle.path_of(name[: -len("/__init__.py")])]
        return spec

    def invalidate_caches(self) -> None:
        """Re-read the bundle if the executable changed on disk since it was indexed."""
        bundle = self.bundle
        if bundle.stamp is None:
            return
        try:
            stat = os.stat(bundle.executable)
        except OSError:
            return
        if (stat.st_mtime_ns, stat.st_size) != bundle.stamp:
            fresh = Bundle.from_executable(bundle.executable)
            bundle.__dict__.update(fresh.__dict__)

    # --- loader -------------------------------------------------------------------------

    def _require(self, fullname: str) -> tuple[str, bool]:
        if fullname == "__main__":
            # linecache asks for "__main__" when a bundled module runs as the main module
            # (python -m): answer for the module that really is __main__.
            spec = getattr(sys.modules.get(fullname), "__spec__", None)
            if spec is not None and spec.loader is self:
                fullname = spec.name
        found = self._lookup(fullname)
        if found is None:
            raise ImportError(
                f"cannot find module {fullname!r} in {self.path!r}",
                name=fullname,
                path=self.path,
            )
        return found

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        """Use the default module creation."""
        return None

    # CPython's own loaders' exec_module: get_code(), then exec through
    # _call_with_frames_removed, so tracebacks and warnings skip the import machinery
    # (with an exec_module of our own, its frame and importlib's would show).
    exec_module = _bootstrap_external._LoaderBasics.exec_module  # type: ignore[attr-defined]

    def get_code(self, fullname: str) -> CodeType:
        """Compile the module's source with its ``<exe>/<name>`` path as the filename."""
        name, _ = self._require(fullname)
        source = self.bundle.read(name)
        return compile(source, self.bundle.path_of(name), "exec", dont_inherit=True)

    def get_source(self, fullname: str) -> str | None:
        """The module's source text (PEP 263 encoding and universal newlines applied)."""
        from importlib.util import decode_source

        name, _ = self._require(fullname)
        return decode_source(self.bundle.read(name))

    def get_filename(self, fullname: str) -> str:
        """``__file__`` of the module: ``<exe>/<relative path>``."""
        name, _ = self._require(fullname)
        return self.bundle.path_of(name)

    def is_package(self, fullname: str) -> bool:
        """Whether ``fullname`` is a regular package (has ``__init__.py``) here."""
        return self._require(fullname)[1]

    def get_data(self, path: str | os.PathLike[str]) -> bytes:
        """Bytes of a bundled file given as ``<exe>/<relative path>`` or a relative path.

        Either separator is accepted, as the original importer did. Raises
        ``FileNotFoundError`` if the bundle has no such file.
        """
        text = os.fspath(path)
        name = self.bundle.relative(text) if isinstance(text, str) else None
        if name is None and isinstance(text, str) and not os.path.isabs(text):
            name = text.replace("\\", "/").strip("/")
        if name is None or name not in self.bundle.files:
            raise FileNotFoundError(
                2, f"no such file in the bundle of {self.bundle.executable!r}", text
            )
        return self.bundle.read(name)

    def get_resource_reader(self, fullname: str) -> TraversableResources | None:
        """A reader serving ``importlib.resources.files(package)`` from memory."""
        from ._resources import BundleResourceReader

        found = self._lookup(fullname)
        if found is None:
            return None
        # A package's own directory; for a plain module, the directory containing it.
        directory = found[0].rpartition("/")[0]
        return BundleResourceReader(self.bundle, directory)

    def iter_modules(self, prefix: str = "") -> Iterator[tuple[str, bool]]:
        """``(name, ispkg)`` for modules directly in this directory (used by pkgutil)."""
        base = self.prefix.rstrip("/")
        files = self.bundle.files
        for child in self.bundle.children(base):
            path = f"{base}/{child}" if base else child
            if child.endswith(".py") and path in files:
                if child != "__init__.py":
                    yield prefix + child[:-3], False
            elif f"{path}/__init__.py" in files:
                yield prefix + child, True

    def files(self) -> Traversable:
        """The importer's directory as a Traversable (the reader protocol's entry point)."""
        from ._resources import BundleTraversable

        return BundleTraversable(self.bundle, self.prefix.rstrip("/"))


def _bundle_for(path: str) -> Bundle:
    """The bundle of the executable that ``path`` names or lies under."""
    candidate = path
    while True:
        if os.path.isfile(candidate):
            return Bundle.from_executable(candidate)
        parent = os.path.dirname(candidate)
        if not parent or parent == candidate:
            raise BundleNotFoundError(f"{path!r} does not name an executable", path=path)
        candidate = parent


class BundleMetadataFinder:
    """On ``sys.meta_path``: ``importlib.metadata`` finds the bundle's distributions here.

    Imports go through the path hook (``find_spec`` finds nothing); importlib.metadata
    asks each meta path finder for ``find_distributions``, and the path-based one only
    reads real folders and zips.
    """

    def __init__(self, bundle: Bundle):
        self.bundle = bundle

    def __repr__(self) -> str:
        return f"<BundleMetadataFinder {self.bundle.executable!r}>"

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        """Nothing: modules are found by the path hook."""
        return None

    def find_distributions(self, context: Any = None) -> Iterator[Any]:
        """``importlib.metadata.Distribution`` objects for the bundle's ``*.dist-info``."""
        from ._metadata import find_distributions

        return find_distributions(self.bundle, context)


class BundlePathHook:
    """A ``sys.path_hooks`` entry accepting the executable's path and paths under it."""

    def __init__(self, bundle: Bundle):
        self.bundle = bundle
        self.metadata_finder = BundleMetadataFinder(bundle)

    def __call__(self, path: str) -> EmbeddedImporter:
        if self.bundle.relative(path) is None:
            raise ImportError("not inside this executable's bundle", path=path)
        return EmbeddedImporter(path, self.bundle)

    def __repr__(self) -> str:
        return f"<BundlePathHook {self.bundle.executable!r}>"


def install(
    executable: str | os.PathLike[str] | None = None,
    *,
    index: int = 0,
    bundle: Bundle | None = None,
) -> BundlePathHook:
    """Make the bundle of ``executable`` (default: ``sys.executable``) importable.

    Inserts a path hook first in ``sys.path_hooks`` and the executable's path at
    ``sys.path[index]``. Returns the hook; pass it to :func:`uninstall` to undo.
    Raises :class:`BundleNotFoundError` if the executable has no bundle.
    """
    if bundle is None:
        bundle = Bundle.from_executable(executable if executable is not None else sys.executable)
    hook = BundlePathHook(bundle)
    sys.path_hooks.insert(0, hook)
    sys.path.insert(index, bundle.executable)
    # Before the path-based finder, whose distributions come from sys.path's folders: the
    # bundle comes first there too, as for imports.
    meta_path = sys.meta_path
    where = meta_path.index(PathFinder) if PathFinder in meta_path else len(meta_path)
    meta_path.insert(where, hook.metadata_finder)
    _forget(bundle)
    return hook


def uninstall(hook: BundlePathHook) -> None:
    """Undo :func:`install`: remove the hook, the path entry and cached importers."""
    if hook in sys.path_hooks:
        sys.path_hooks.remove(hook)
    if hook.metadata_finder in sys.meta_path:
        sys.meta_path.remove(hook.metadata_finder)
    sys.path[:] = [p for p in sys.path if p != hook.bundle.executable]
    _forget(hook.bundle)


def _forget(bundle: Bundle) -> None:
    for path in list(sys.path_importer_cache):
        if isinstance(path, str) and bundle.relative(path) is not None:
            del sys.path_importer_cache[path]
