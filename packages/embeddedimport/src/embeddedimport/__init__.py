"""Import modules and data straight from a Windows executable's resources (stdlib only).

The public names are loaded on first use, so that the start-up hook (which imports this
package in every interpreter it is installed into) stays cheap.
"""

# Neither typing nor `from __future__ import annotations`: the start-up hook imports this
# package in every interpreter that might carry a bundle, and typing alone costs ~10 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .bundle import BundleError
    from .importer import Bundle, BundleNotFoundError, EmbeddedImporter, install, uninstall
    from .pe import PEFormatError, find_resource, read_resources
    from .runtime import launch

__all__ = [
    "Bundle",
    "BundleError",
    "BundleNotFoundError",
    "EmbeddedImporter",
    "PEFormatError",
    "__version__",
    "find_resource",
    "install",
    "launch",
    "read_resources",
    "uninstall",
]

_HOMES = {
    "BundleError": "bundle",
    "Bundle": "importer",
    "BundleNotFoundError": "importer",
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
