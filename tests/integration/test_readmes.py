"""Package READMEs are PyPI pages: short, for users, with links that work off GitHub."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
LIMIT = 10_000  # characters; measurement history lives in docs/benchmarks/<package>.md
LINK = re.compile(r"\]\(([^)\s]+)")


@pytest.mark.parametrize("name", PACKAGES)
def test_readme_is_short(name: str) -> None:
    size = len((ROOT / "packages" / name / "README.md").read_text(encoding="utf-8"))
    assert size <= LIMIT, f"{name}/README.md is {size} characters (at most {LIMIT})"


@pytest.mark.parametrize("name", PACKAGES)
def test_readme_links_are_absolute(name: str) -> None:
    text = (ROOT / "packages" / name / "README.md").read_text(encoding="utf-8")
    relative = [
        target
        for target in LINK.findall(text)
        if not target.startswith(("https://", "http://", "#", "mailto:"))
    ]
    assert not relative, f"{name}/README.md has links that are dead on PyPI: {relative}"
