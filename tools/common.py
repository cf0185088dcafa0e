"""Helpers every tool shares: running and logging commands, free ports, starting servers.

Standard library only, so any script under tools/ (the demo steps, the benchmarks) can use
it from whichever environment runs it. Put `tools/` on `sys.path` and `import common`.
The port and HTTP-polling helpers are the test suite's own (`tests/support.py`, standard
library only too), imported from there: a package's tests may import only that package and
the helpers under tests/ (see docs/architecture.md), so the one copy lives on that side.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))
from support import free_port, http_ok, wait_http  # noqa: E402  (re-exported for the tools)

# The environment the tool runs in: its console scripts sit next to its interpreter.
BIN = Path(sys.executable).parent

__all__ = ["BIN", "ROOT", "free_port", "http_ok", "say", "serve", "sh", "tool", "wait_http"]


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
        wait_http(health_url, proc, timeout, lambda: log.read_text(errors="replace")[-2000:])
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
