"""Helpers any package's tests may share: a free port, waiting for a server to answer,
pressing Ctrl-C in a running command, a read-only folder.

Standard library only, and no workspace package: a package's tests import only that
package, its declared siblings, and helpers under tests/ such as this one and
`components.py`. The tools use these too (tools/common.py imports them from here): a
package's tests may import only helpers under tests/, so the one copy lives on this side.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
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


def interrupt(
    cmd: Sequence[str],
    *,
    ready: Callable[[subprocess.Popen[str]], bool] = lambda process: True,
    settle: float = 0.0,
    timeout: float = 120.0,
    **popen: Any,
) -> subprocess.CompletedProcess[str]:
    """Start *cmd*, press Ctrl-C (SIGINT) once it is under way, and return how it ended.

    Under way: *ready(process)* holds (polled for at most *timeout* seconds), then *settle*
    seconds more. A command still running *timeout* seconds after the interrupt is killed and
    the test fails (``subprocess.TimeoutExpired``) instead of hanging.
    """
    process = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready(process) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(settle)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(cmd, process.returncode, stdout, stderr)


@contextlib.contextmanager
def read_only_mount(folder: Path) -> Iterator[bool]:
    """Mount an empty read-only tmpfs on *folder* for the block; yield whether it is mounted.

    Only root can mount; elsewhere (or when the mount fails) it yields False and the caller
    chooses its fallback (a user namespace, mode 0555, or a skip).
    """
    if os.geteuid() != 0:
        yield False
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", str(folder)], check=False)
