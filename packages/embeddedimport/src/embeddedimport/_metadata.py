"""``importlib.metadata`` for the distributions whose ``*.dist-info`` folders are in a bundle.

Imported only when importlib.metadata asks (``version()``, ``entry_points()``, ...): it
needs importlib.metadata itself, which no bundled start-up should pay for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import Distribution, DistributionFinder
from typing import Any

from ._resources import BundleTraversable
from .bundle import Bundle

__all__ = ["BundleDistribution", "find_distributions"]

_SUFFIXES = (".dist-info", ".egg-info")


def _normalize(name: str) -> str:
    """PEP 503 name normalisation, with ``_`` as dist-info folder names spell it."""
    return re.sub(r"[-_.]+", "_", name).lower()


def find_distributions(
    bundle: Bundle, context: DistributionFinder.Context | None = None
) -> Iterator[BundleDistribution]:
    """The bundle's distributions matching *context* (its name; the bundle must be on its
    path, which is ``sys.path`` by default)."""
    context = context or DistributionFinder.Context()
    if not any(isinstance(p, str) and bundle.relative(p) == "" for p in context.path):
        return
    wanted = None if context.name is None else _normalize(context.name)
    for entry in bundle.children(""):
        if not entry.endswith(_SUFFIXES) or entry not in bundle.directories:
            continue
        if wanted is None or _normalize(entry.partition("-")[0].rsplit(".", 1)[0]) == wanted:
            yield BundleDistribution(bundle, entry)


class BundleDistribution(Distribution):
    """One ``NAME-VERSION.dist-info`` folder of a bundle, read from memory."""

    def __init__(self, bundle: Bundle, folder: str) -> None:
        self._bundle = bundle
        self._folder = folder

    def __repr__(self) -> str:
        return f"<BundleDistribution {self._bundle.path_of(self._folder)!r}>"

    def read_text(self, filename: str | Any) -> str | None:
        """A metadata file's text (``METADATA``, ``entry_points.txt``, ``RECORD``, ...)."""
        name = f"{self._folder}/{filename}"
        if name in self._bundle.files:
            return self._bundle.read(name).decode("utf-8")
        if filename == "RECORD" and self._folder.endswith(".dist-info"):
            return self._record()
        return None

    read_text.__doc__ = Distribution.read_text.__doc__

    def locate_file(self, path: str | Any) -> BundleTraversable:  # type: ignore[override]
        """A file named relative to the bundle's top (where site-packages would be)."""
        return BundleTraversable(self._bundle, str(path))

    def _record(self) -> str:
        """A RECORD for a bundle built without one: the dist-info folder's files and those
        under the distribution's top-level names (``top_level.txt``, else its own name)."""
        top = self.read_text("top_level.txt")
        names = set(top.split()) if top else {_normalize(self._folder.partition("-")[0])}
        lines = []
        for file in sorted(self._bundle.files):
            head = file.partition("/")[0]
            if head == self._folder or head in names or head.removesuffix(".py") in names:
                lines.append(f"{file},,")
        return "\n".join(lines) + "\n"
