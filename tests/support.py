"""Helpers any package's tests may share: a free port, waiting for a server to answer,
pressing Ctrl-C in a running command, a read-only folder.

Standard library only, and no workspace package: a package's tests import only that
package, its declared siblings, and helpers under tests/ such as this one and
`components.py`. The port and HTTP helpers are the tools' own (`tools/common.py`, on the
tests' path through pytest's `pythonpath`), re-exported here: tests depend on tools, never
the other way round.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from common import free_port, http_ok, wait_http

__all__ = ["free_port", "http_ok", "interrupt", "read_only_mount", "wait_http"]


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
