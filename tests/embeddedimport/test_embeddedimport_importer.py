"""The import system, in process, on executables built from real PE files."""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import inspect
import os
import pkgutil
import sys
import traceback
from pathlib import Path

import pytest
from embeddedimport.bundle import BundleError
from embeddedimport.importer import (
    Bundle,
    BundleNotFoundError,
    EmbeddedImporter,
    install,
    uninstall,
)
from embeddedimport_testpe import MakeExe, original_bundle

APP = [
    ("main.py", b"import app\nprint(app.util.greet())\n"),
    ("app/__init__.py", b"from . import util\n"),
    (
        "app/util.py",
        b'"""Utilities."""\n\n\ndef greet():\n    return "hello"\n\n\n'
        b"def fail():\n    raise ValueError('from the bundle')\n",
    ),
    ("app/sub/__init__.py", b"LEVEL = 'sub'\n"),
    ("app/sub/deep.py", b"from .. import util\nVALUE = util.greet() + '!'\n"),
    ("app/data/config.json", b'{"answer": 42}'),
    ("app/data/nested/readme.txt", "crème\n".encode()),
    ("nsp/part.py", b"WHERE = 'bundle'\n"),
    ("latin.py", "# -*- coding: latin-1 -*-\nNAME = 'café'\n".encode("latin-1")),
    ("crlf.py", b"A = 1\r\nB = 2\r\n"),
    ("broken.py", b"x = 1\ndef (:\n"),
]


@pytest.fixture
def app_exe(make_exe: MakeExe, clean_imports: None) -> Path:
    exe = make_exe(APP)
    install(exe)
    return exe


def under(exe: Path, *parts: str) -> str:
    return os.path.join(str(exe), *parts)


def test_modules_and_packages_have_the_original_attributes(app_exe: Path) -> None:
    app = importlib.import_module("app")
    util = importlib.import_module("app.util")
    deep = importlib.import_module("app.sub.deep")
    assert app.__file__ == under(app_exe, "app", "__init__.py")
    assert app.__path__ == [under(app_exe, "app")]
    assert util.__file__ == under(app_exe, "app", "util.py")
    assert util.__spec__.origin == util.__file__
    assert util.__package__ == "app"
    assert isinstance(util.__loader__, EmbeddedImporter)
    assert util.__spec__.loader is util.__loader__
    assert deep.VALUE == "hello!"
    assert deep.__file__ == under(app_exe, "app", "sub", "deep.py")
    assert sys.path[0] == str(app_exe)


def test_loader_methods(app_exe: Path) -> None:
    loader = importlib.import_module("app").__loader__
    assert loader.is_package("app") is True
    sub_loader = importlib.import_module("app.util").__loader__
    assert sub_loader.is_package("app.util") is False
    assert sub_loader.get_filename("app.util") == under(app_exe, "app", "util.py")
    assert sub_loader.get_source("app.util").startswith('"""Utilities."""')
    code = sub_loader.get_code("app.util")
    assert code.co_filename == under(app_exe, "app", "util.py")
    with pytest.raises(ImportError) as caught:
        sub_loader.get_code("app.missing")
    assert caught.value.name == "app.missing"
    assert caught.value.path == under(app_exe, "app")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("app.missing")


def test_source_encodings_and_line_endings(app_exe: Path) -> None:
    assert importlib.import_module("latin").NAME == "café"
    crlf = importlib.import_module("crlf")
    assert (crlf.A, crlf.B) == (1, 2)
    assert crlf.__loader__.get_source("crlf") == "A = 1\nB = 2\n"
    assert importlib.import_module("latin").__loader__.get_source("latin").endswith("'café'\n")


def test_syntax_error_names_the_bundled_file(app_exe: Path) -> None:
    with pytest.raises(SyntaxError) as caught:
        importlib.import_module("broken")
    assert caught.value.filename == under(app_exe, "broken.py")
    assert caught.value.lineno == 2


def test_tracebacks_show_bundled_file_line_and_source(app_exe: Path) -> None:
    util = importlib.import_module("app.util")
    try:
        util.fail()
    except ValueError:
        text = traceback.format_exc()
    assert f'File "{under(app_exe, "app", "util.py")}", line 9, in fail' in text
    assert "raise ValueError('from the bundle')" in text


def test_import_time_errors_show_only_the_bundled_frames(
    make_exe: MakeExe, clean_imports: None
) -> None:
    exe = make_exe([("explodes.py", b"x = 1\nraise ValueError('at import')\n")])
    install(exe)
    with pytest.raises(ValueError) as caught:
        __import__("explodes")  # the import statement's path, where CPython trims frames
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert [(f.filename, f.lineno) for f in frames[1:]] == [(under(exe, "explodes.py"), 2)]
    assert frames[-1].line == "raise ValueError('at import')"


def test_namespace_package_inside_the_bundle_and_across_the_filesystem(
    app_exe: Path, tmp_path: Path
) -> None:
    other = tmp_path / "fs"
    (other / "nsp").mkdir(parents=True)
    (other / "nsp" / "other.py").write_text("WHERE = 'filesystem'\n")
    sys.path.append(str(other))
    nsp = importlib.import_module("nsp")
    assert getattr(nsp, "__file__", None) is None
    assert list(nsp.__path__) == [under(app_exe, "nsp"), str(other / "nsp")]
    assert importlib.import_module("nsp.part").WHERE == "bundle"
    assert importlib.import_module("nsp.other").WHERE == "filesystem"
    assert importlib.import_module("nsp.part").__file__ == under(app_exe, "nsp", "part.py")


def test_get_data_accepts_paths_under_the_exe_like_the_original(app_exe: Path) -> None:
    loader = importlib.import_module("app").__loader__
    expected = b'{"answer": 42}'
    assert loader.get_data(under(app_exe, "app", "data", "config.json")) == expected
    assert loader.get_data(f"{app_exe}/app/data/config.json") == expected
    assert loader.get_data(f"{app_exe}\\app\\data\\config.json") == expected
    assert loader.get_data("app/data/config.json") == expected
    assert loader.get_data("app\\data\\config.json") == expected
    assert pkgutil.get_data("app", "data/config.json") == expected
    with pytest.raises(FileNotFoundError):
        loader.get_data(under(app_exe, "app", "data", "nope.json"))
    with pytest.raises(FileNotFoundError):
        loader.get_data(str(app_exe.parent / "elsewhere.txt"))


def test_importlib_resources_work_in_memory(app_exe: Path) -> None:
    root = importlib.resources.files("app")
    assert root.is_dir()
    assert sorted(entry.name for entry in root.iterdir()) == [
        "__init__.py",
        "data",
        "sub",
        "util.py",
    ]
    config = root / "data" / "config.json"
    assert config.is_file()
    assert config.read_bytes() == b'{"answer": 42}'
    assert root.joinpath("data/nested/readme.txt").read_text(encoding="utf-8") == "crème\n"
    with root.joinpath("data", "nested", "readme.txt").open("r", encoding="utf-8") as handle:
        assert handle.read() == "crème\n"
    with importlib.resources.as_file(config) as real:
        assert Path(real).read_bytes() == b'{"answer": 42}'
    assert not (root / "missing.txt").is_file()
    with pytest.raises(FileNotFoundError):
        (root / "missing.txt").read_bytes()
    with pytest.raises(IsADirectoryError):
        (root / "data").read_bytes()
    with pytest.raises(ValueError, match="read-only"):
        config.open("w")
    assert (
        importlib.resources.files("app.sub").joinpath("deep.py").read_text().startswith("from ..")
    )


def test_inspect_and_reload_work_on_bundled_modules(app_exe: Path) -> None:
    util = importlib.import_module("app.util")
    assert inspect.getsource(util.greet) == 'def greet():\n    return "hello"\n'
    assert inspect.getsourcefile(util) == under(app_exe, "app", "util.py")
    reloaded = importlib.reload(util)
    assert reloaded is util
    assert reloaded.greet() == "hello"


def test_pkgutil_lists_bundled_modules(app_exe: Path) -> None:
    app = importlib.import_module("app")
    found = {(info.name, info.ispkg) for info in pkgutil.iter_modules(app.__path__)}
    assert found == {("util", False), ("sub", True)}


def test_invalidate_caches_rereads_a_changed_executable(
    make_exe: MakeExe, clean_imports: None
) -> None:
    exe = make_exe([("first.py", b"N = 1\n")])
    install(exe)
    assert importlib.import_module("first").N == 1
    make_exe([("first.py", b"N = 1\n"), ("second.py", b"N = 2\n# longer\n")])
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("second")
    importlib.invalidate_caches()
    assert importlib.import_module("second").N == 2


def test_slash_separated_bundles_import_too(make_exe: MakeExe, clean_imports: None) -> None:
    exe = make_exe(bundle=original_bundle([("pk/__init__.py", b""), ("pk/m.py", b"X = 3\n")], "/"))
    install(exe)
    assert importlib.import_module("pk.m").X == 3


def test_uninstall_removes_everything(make_exe: MakeExe, clean_imports: None) -> None:
    exe = make_exe([("gone.py", b"")])
    hook = install(exe)
    importlib.import_module("gone")
    uninstall(hook)
    del sys.modules["gone"]
    assert hook not in sys.path_hooks
    assert str(exe) not in sys.path
    assert not [p for p in sys.path_importer_cache if str(p).startswith(str(exe))]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gone")


def test_importer_built_directly_from_a_path_under_the_exe(make_exe: MakeExe) -> None:
    exe = make_exe(APP)
    importer = EmbeddedImporter(os.path.join(str(exe), "app"))
    spec = importer.find_spec("app.util")
    assert spec is not None
    assert spec.origin == under(exe, "app", "util.py")
    assert importer.find_spec("app.nothing") is None
    namespace = EmbeddedImporter(str(exe)).find_spec("nsp")
    assert namespace is not None
    assert namespace.loader is None
    assert list(namespace.submodule_search_locations or []) == [under(exe, "nsp")]


def test_executables_without_a_bundle_are_refused(base_exe: bytes, tmp_path: Path) -> None:
    plain = tmp_path / "plain.exe"
    plain.write_bytes(base_exe)
    with pytest.raises(BundleNotFoundError, match="resource RT_RCDATA 200 is missing") as caught:
        Bundle.from_executable(plain)
    assert caught.value.path == str(plain)
    text = tmp_path / "notes.txt"
    text.write_text("not an executable")
    with pytest.raises(BundleNotFoundError, match="not a PE file"):
        EmbeddedImporter(str(text))
    with pytest.raises(BundleNotFoundError, match="does not name an executable"):
        EmbeddedImporter(str(tmp_path / "missing.exe" / "pkg"))


def test_corrupt_bundle_is_a_clear_error(make_exe: MakeExe) -> None:
    good = original_bundle([("m.py", b"x = 1\n")])
    exe = make_exe(bundle=good[:-4])
    with pytest.raises(BundleError, match=r"app\.exe.*truncated"):
        Bundle.from_executable(exe)


def test_bundle_index_is_built_once_and_lists_directories(make_exe: MakeExe) -> None:
    bundle = Bundle.from_executable(make_exe(APP, command=["-m", "main", "x y"]))
    assert bundle.command == ["-m", "main", "x y"]
    assert {"app", "app/sub", "app/data", "app/data/nested", "nsp"} == set(bundle.directories)
    assert bundle.children("app/data") == ["config.json", "nested"]
    assert bundle.read("app/data/config.json") == b'{"answer": 42}'


def test_bundle_lives_with_its_format_and_the_old_names_still_work() -> None:
    import embeddedimport
    from embeddedimport import bundle, importer

    assert importer.Bundle is bundle.Bundle is embeddedimport.Bundle
    assert importer.BundleNotFoundError is bundle.BundleNotFoundError
    assert embeddedimport.BundleNotFoundError is bundle.BundleNotFoundError


def test_resource_support_does_not_import_the_importer() -> None:
    # _resources needs Bundle only; it used to import it from importer, which imports
    # _resources back (a circle held together by lazy imports).
    import subprocess

    code = "import sys, embeddedimport._resources; print('embeddedimport.importer' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# --- the portable interpreter's bundle, indexed on first use (_startup._LazyBundle) --------

LAZY = [
    ("lazymod.py", b"VALUE = 1\n"),
    ("lazypkg/__init__.py", b""),
    ("lazypkg/sub.py", b"X = 2\n"),
    ("lazy_dist-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: lazy-dist\nVersion: 1.0\n"),
]


def _lazy(exe: Path) -> object:
    from embeddedimport import _startup
    from embeddedimport.pe import find_resource

    data = find_resource(exe, 10, 200)
    assert data is not None
    lazy = _startup._LazyBundle(str(exe), data)
    lazy.install()
    return lazy


def test_lazy_bundle_builds_nothing_for_modules_it_lacks(
    make_exe: MakeExe, clean_imports: None
) -> None:
    from embeddedimport import _startup

    exe = make_exe(LAZY, command=None)
    lazy: _startup._LazyBundle = _lazy(exe)  # type: ignore[assignment]
    assert sys.path[0] == str(exe) and sys.path_hooks[0] is lazy
    assert importlib.util.find_spec("lazy_not_in_the_bundle") is None
    assert lazy.importer is None  # answered from the name list: nothing inflated
    assert isinstance(sys.path_importer_cache[str(exe)], _startup._LazyFinder)
    assert importlib.import_module("lazymod").VALUE == 1
    # Built now, and in the places of the lazy objects.
    assert isinstance(lazy.importer, EmbeddedImporter)
    assert sys.path_importer_cache[str(exe)] is lazy.importer
    assert lazy not in sys.path_hooks and lazy.metadata_finder not in sys.meta_path
    assert importlib.import_module("lazypkg.sub").X == 2
    assert importlib.import_module("lazypkg.sub").__file__ == under(exe, "lazypkg", "sub.py")


def test_lazy_bundle_serves_metadata_and_pkgutil(make_exe: MakeExe, clean_imports: None) -> None:
    from importlib import metadata

    exe = make_exe(LAZY, command=None)
    _lazy(exe)
    assert metadata.version("lazy-dist") == "1.0"
    exe2 = make_exe(LAZY, command=None, name="other.exe")
    _lazy(exe2)
    found = {info.name for info in pkgutil.iter_modules([str(exe2)])}
    assert found == {"lazymod", "lazypkg"}


def test_lazy_bundle_with_a_damaged_name_list_reports_it_on_use(
    make_exe: MakeExe, clean_imports: None
) -> None:
    good = original_bundle([("lazymod.py", b"VALUE = 1\n")])
    exe = make_exe(bundle=good[:-3], command=None)  # the name list cut short
    _lazy(exe)
    with pytest.raises(BundleError, match="truncated"):
        importlib.import_module("anything")
