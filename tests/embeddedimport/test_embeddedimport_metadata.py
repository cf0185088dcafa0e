"""importlib.metadata for distributions whose dist-info folders are in a bundle, as a
bundled app sees them (``python -m embeddedimport``, the same launch as the exe)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import embeddedimport
import pytest
from embeddedimport.importer import install, uninstall
from embeddedimport_testpe import MakeExe

PACKAGE = Path(embeddedimport.__file__).resolve().parent

METADATA = b"""\
Metadata-Version: 2.1
Name: Tool_Kit
Version: 2.5.1
Summary: A bundled toolkit
Requires-Dist: plain>=1
"""
ENTRY_POINTS = b"""\
[console_scripts]
toolkit = tool_kit.cli:main

[tool_kit.plugins]
shout = tool_kit:shout
"""
RECORD = b"""\
tool_kit/__init__.py,sha256=x,40
tool_kit/data.txt,,
tool_kit-2.5.1.dist-info/METADATA,,
tool_kit-2.5.1.dist-info/RECORD,,
../../Scripts/toolkit.exe,,
"""

FILES = [
    (
        "main.py",
        b"""\
import json
from importlib import metadata

import tool_kit

plugin = metadata.entry_points(group="tool_kit.plugins")["shout"]
files = metadata.files("tool-kit")
print(json.dumps({
    "version": metadata.version("tool-kit"),
    "summary": metadata.metadata("TOOL.KIT")["Summary"],
    "requires": metadata.requires("tool_kit"),
    "plugin": plugin.load()("hi"),
    "scripts": [ep.name for ep in metadata.entry_points(group="console_scripts")
                if ep.dist.name == "Tool_Kit"],
    "files": sorted(str(f) for f in files),
    "data": [f.read_text() for f in files if f.name == "data.txt"],
    "plain_files": sorted(str(f) for f in metadata.files("plain")),
    "plain_version": metadata.version("plain"),
    "names": [d.metadata["Name"] for d in metadata.distributions()
              if d.metadata["Name"] in ("Tool_Kit", "plain", "pefile")],
    "pefile": metadata.version("pefile"),
    "packages": {k: v for k, v in metadata.packages_distributions().items()
                 if k in ("tool_kit", "plain")},
}))
""",
    ),
    ("tool_kit/__init__.py", b"def shout(text):\n    return text.upper() + '!'\n"),
    ("tool_kit/data.txt", b"payload"),
    ("tool_kit-2.5.1.dist-info/METADATA", METADATA),
    ("tool_kit-2.5.1.dist-info/entry_points.txt", ENTRY_POINTS),
    ("tool_kit-2.5.1.dist-info/RECORD", RECORD),
    # As exepy stored wheels until now: no RECORD.
    ("plain/__init__.py", b""),
    ("plain-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: plain\nVersion: 1.0\n"),
    ("plain-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n"),
    # Also installed here (the test group): the bundle's comes first, as for imports.
    ("pefile-99.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: pefile\nVersion: 99.0\n"),
]


def test_bundled_distributions_through_importlib_metadata(
    make_exe: MakeExe, tmp_path: Path
) -> None:
    exe = make_exe(FILES)
    done = subprocess.run(
        [sys.executable, "-m", "embeddedimport", str(exe)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": ""},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["version"] == "2.5.1"
    assert report["summary"] == "A bundled toolkit"
    assert report["requires"] == ["plain>=1"]
    assert report["plugin"] == "HI!"
    assert report["scripts"] == ["toolkit"]
    # RECORD's entries that the bundle holds (the script outside it is skipped or listed
    # by the Python version's rule; the bundled ones are always there)
    assert {
        "tool_kit/__init__.py",
        "tool_kit/data.txt",
        "tool_kit-2.5.1.dist-info/METADATA",
    } <= set(report["files"])
    assert report["data"] == ["payload"]
    assert report["plain_files"] == [
        "plain-1.0.dist-info/METADATA",
        "plain-1.0.dist-info/WHEEL",
        "plain/__init__.py",
    ]
    assert report["plain_version"] == "1.0"
    # Sorted folder names, bundle first; the host's pefile after (distributions() lists
    # every one on the path, as for folders of sys.path)
    assert report["names"][:3] == ["pefile", "plain", "Tool_Kit"]
    assert report["pefile"] == "99.0"
    assert report["packages"] == {"tool_kit": ["Tool_Kit"], "plain": ["plain"]}


def test_uninstall_forgets_the_distributions(make_exe: MakeExe, clean_imports: None) -> None:
    from importlib import metadata

    exe = make_exe(FILES)
    hook = install(exe)
    assert metadata.version("tool-kit") == "2.5.1"
    names = [d.metadata["Name"] for d in metadata.distributions(path=[str(exe)])]
    assert names == ["pefile", "plain", "Tool_Kit"]
    # Not on the path asked for: nothing from the bundle.
    assert not [d for d in metadata.distributions(path=[str(exe.parent)]) if d.name == "plain"]
    uninstall(hook)
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("tool-kit")
