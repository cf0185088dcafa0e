"""Import modules and data straight from a Windows executable's resources (stdlib only).

The public names are loaded on first use, and :func:`activate` (the start-up hook's entry
point) lives here, so that checking an executable for a bundle costs two small imports:
this package and :mod:`embeddedimport.pe`.
"""

import os
import sys

# Neither typing nor `from __future__ import annotations`: the start-up hook imports this
# package in every interpreter that might carry a bundle, and typing alone costs ~10 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .bundle import Bundle, BundleError, BundleNotFoundError
    from .importer import EmbeddedImporter, install, uninstall
    from .pe import PEFormatError, find_resource, read_resources
    from .runtime import launch

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "Bundle",
    "BundleError",
    "BundleNotFoundError",
    "EmbeddedImporter",
    "PEFormatError",
    "__version__",
    "activate",
    "find_resource",
    "install",
    "launch",
    "read_resources",
    "uninstall",
]

ENVIRONMENT_VARIABLE = "EMBEDDEDIMPORT_EXECUTABLE"
"""Names the executable whose bundle to run instead of ``sys.executable`` (tests, Linux).

It is removed from ``os.environ`` when read, so child interpreters do not run it again.
"""


def activate(executable: "str | None" = None, argv: "Sequence[str] | None" = None) -> None:
    """Install and run the bundle of ``executable`` if it has one; otherwise do nothing.

    ``executable`` defaults to ``$EMBEDDEDIMPORT_EXECUTABLE``, else ``sys.executable``
    on Windows. With a stored command line (resource 201) the application runs when
    ``site`` has finished and the process then exits with its status; see
    :func:`embeddedimport._startup.start` for ``argv``. This is what ``embeddedimport.pth``
    calls at start-up, so it must stay cheap when there is no bundle.
    """
    if executable is None:
        executable = os.environ.pop(ENVIRONMENT_VARIABLE, None)
        if executable is None:
            if sys.platform != "win32":
                return
            executable = sys.executable
    from .pe import PEFormatError, find_resource

    try:
        data = find_resource(executable, 10, 200)  # RT_RCDATA, the bundle
    except (OSError, PEFormatError):
        return
    if data is not None:
        from ._startup import start

        start(executable, data, argv)


_HOMES = {
    "BundleError": "bundle",
    "Bundle": "bundle",
    "BundleNotFoundError": "bundle",
    "EmbeddedImporter": "importer",
    "install": "importer",
    "uninstall": "importer",
    "PEFormatError": "pe",
    "find_resource": "pe",
    "read_resources": "pe",
    "launch": "runtime",
}


def __getattr__(name: str) -> "Any":
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("embeddedimport")
        except PackageNotFoundError:  # a source tree or a bundle without metadata
            return "0.0.0"
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'embeddedimport' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{home}"), name)
