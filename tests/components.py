"""What the tests need from the machine, and what happens when it is missing.

Off CI a missing component skips the test with a message naming it; with `CI` set it is a
failure, because CI promises to have everything (tools/test installs it as root).
"""

from __future__ import annotations

import os
import shutil

import pytest

# Debian puts wine64 outside PATH on some installs.
_EXTRA_PATH = ["/usr/lib/wine", "/usr/sbin"]


def which(command: str) -> str | None:
    """Find *command* on PATH or in the extra places Debian uses."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_EXTRA_PATH])
    return shutil.which(command, path=path)


def missing(component: str, how: str) -> None:
    """Skip (or, on CI, fail) the current test because *component* is not available."""
    message = f"{component} is not available ({how})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must provide it", pytrace=False)
    pytest.skip(message)


def require_command(command: str, debian_package: str | None = None) -> str:
    """Return the path of *command*, or skip/fail naming the package that provides it."""
    found = which(command)
    if found is None:
        missing(
            command, f"apt-get install {debian_package or command}; tools/test does this as root"
        )
    assert found is not None
    return found


def require_module(module: str, pip_name: str | None = None) -> object:
    """Import *module*, or skip/fail naming what to install."""
    try:
        return __import__(module)
    except ImportError as exc:
        missing(module, f"pip install {pip_name or module}: {exc}")
        raise
