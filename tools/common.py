"""Helpers every tool shares, and the ones the tests share with the tools.

Running and logging commands, starting servers, free ports, waiting for HTTP, percentiles
and JSON results. Standard library only, so any script under tools/ (the demo steps, the
benchmarks) can use it from whichever environment runs it: put `tools/` on `sys.path` and
`import common`. The dependency runs one way, tests -> tools: the tests reach this module
through pytest's `pythonpath` (root pyproject.toml) and `tests/support.py` re-exports the
port and HTTP helpers; no tool imports anything under tests/.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The environment the tool runs in: its console scripts sit next to its interpreter.
BIN = Path(sys.executable).parent

__all__ = [
    "BIN",
    "ROOT",
    "free_port",
    "http_ok",
    "percentile",
    "say",
    "serve",
    "sh",
    "stop_process",
    "tool",
    "wait_http",
    "write_json",
]


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


def percentile(values: Sequence[float], percent: float) -> float:
    """The *percent* percentile of *values* (statistics.quantiles, inclusive method: linear
    between the closest ranks); NaN for no value. p50 is the median."""
    if not values:
        return math.nan
    if len(values) == 1:
        return float(values[0])
    if not 0 < percent < 100:
        raise ValueError(f"percent must be between 0 and 100, got {percent}")
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    return cuts[round(percent * 10) - 1]


def write_json(path: str | os.PathLike[str], data: object) -> None:
    """Write *data* as JSON to *path* atomically (a temporary file beside it, renamed)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(target)


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


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0) -> int:
    """SIGTERM *proc*, SIGKILL it if it outlives *timeout* seconds; return its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


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
