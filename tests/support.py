"""Helpers any package's tests may share: a free port, waiting for a server to answer.

Standard library only, and no workspace package: a package's tests import only that
package, its declared siblings, and helpers under tests/ such as this one and
`components.py`. The tools use these too (tools/common.py imports them from here): a
package's tests may import only helpers under tests/, so the one copy lives on this side.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET *url* answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def wait_http(
    url: str,
    proc: subprocess.Popen[Any] | None = None,
    timeout: float = 60.0,
    describe: Callable[[], str] = lambda: "",
) -> None:
    """Poll *url* until it answers 200.

    Raises AssertionError, with *describe()* (e.g. the server's log) appended, when *proc*
    exits first or *timeout* seconds pass.
    """
    deadline = time.monotonic() + timeout
    while not http_ok(url):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited with {proc.returncode}:\n{describe()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer within {timeout:g} s:\n{describe()}")
        time.sleep(0.1)
