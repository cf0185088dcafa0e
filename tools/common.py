"""Helpers every tool shares: running and logging commands, free ports, starting servers.

Standard library only, so any script under tools/ (the demo steps, the benchmarks) can use
it from whichever environment runs it. Put `tools/` on `sys.path` and `import common`.
The test suite has its own copy of the server helpers in `tests/support.py`: tests do not
import tools.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The environment the tool runs in: its console scripts sit next to its interpreter.
BIN = Path(sys.executable).parent


def say(message: str) -> None:
    """Print a progress line and flush it (the demo's output is read live)."""
    print(message, flush=True)


def sh(cmd: Sequence[str | os.PathLike[str]], **kwargs: Any) -> str:
    """Run a command, echo it, return its stdout; raise with its output when it fails."""
    shown = " ".join(str(c) for c in cmd)
    say(f"    $ {shown}")
    result = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"`{shown}` exited {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )
    return result.stdout


def tool(name: str) -> str:
    """A console script of the environment the calling tool runs in."""
    return str(BIN / name)


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
    except OSError:
        return False


def wait_http(
    url: str,
    proc: subprocess.Popen[Any] | None = None,
    timeout: float = 60.0,
    log: Path | None = None,
) -> None:
    """Poll *url* until it answers 200; raise RuntimeError if *proc* exits or time runs out.

    The error quotes the end of *log* (the server's output) when given.
    """

    def tail() -> str:
        return f": {log.read_text(errors='replace')[-2000:]}" if log and log.exists() else ""

    deadline = time.monotonic() + timeout
    while not http_ok(url):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}{tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:g} s{tail()}")
        time.sleep(0.1)


@contextlib.contextmanager
def serve(
    cmd: Sequence[str | os.PathLike[str]],
    health_url: str,
    log: Path,
    timeout: float = 60.0,
    **popen: Any,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server (output to *log*), wait until *health_url* answers, stop it on exit."""
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [str(c) for c in cmd], stdout=log_file, stderr=subprocess.STDOUT, **popen
        )
    try:
        wait_http(health_url, proc, timeout, log)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
