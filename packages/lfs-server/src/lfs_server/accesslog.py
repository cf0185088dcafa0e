"""The app's access log: one line per request, off, on stderr or appended to a file, as
text (`key=value`) or JSON lines; where and how come from Config (LFS_ACCESS_LOG,
LFS_LOG_FORMAT)."""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import logging.handlers
import sys
from pathlib import Path

from lfs_server.config import Config, ConfigError


def _escaped(text: str) -> str:
    """*text* with quotes, backslashes, control and non-ASCII characters escaped (JSON
    style), so a request path cannot end its text line or forge another one."""
    return json.dumps(text)[1:-1]


def check_access_log(target: str | Path, data_dir: Path) -> None:
    """Raise ConfigError unless the access log *target* (a file) can be appended to:
    `serve` checks before starting, so a bad path is one line, not an error per request.
    Missing folders are made inside *data_dir* only (a typo must not make folders in /)."""
    if not isinstance(target, Path):
        return
    folder = target.parent
    try:
        if not folder.is_dir():
            if not folder.resolve().is_relative_to(data_dir.resolve()):
                raise FileNotFoundError(errno.ENOENT, f"the folder {folder} does not exist")
            folder.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        problem = (
            f"{target} cannot be appended to ({exc.strerror});"
            " name a writable file, or 'stderr' or 'off'"
        )
        raise ConfigError(f"LFS_ACCESS_LOG {problem}", key="access_log", problem=problem) from None


class _ReopeningHandler(logging.handlers.WatchedFileHandler):
    """WatchedFileHandler that never raises into the request (that would be a 500) and,
    when the file cannot be written (its folder removed, the disk full), says so in one
    line on stderr, once until it can be written again, instead of a traceback a request."""

    _failed = False  # this emit failed
    _reported = False  # the failure is reported and not over yet

    def emit(self, record: logging.LogRecord) -> None:
        self._failed = False
        try:
            super().emit(record)  # (re)opening the file is outside the base class's try
        except OSError:
            self.handleError(record)
        if not self._failed:
            self._reported = False  # writing again: a later failure is news

    def handleError(self, record: logging.LogRecord) -> None:
        """Drop the line and the file (a full disk keeps its bytes buffered, and they would
        be retried under later lines); the next line reopens it. Report the first failure."""
        self._failed = True
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
        if self._reported:
            return
        self._reported = True
        exc = sys.exc_info()[1]
        reason = (exc.strerror if isinstance(exc, OSError) else None) or exc
        sys.stderr.write(
            f"lfs-server: cannot write the access log {self.baseFilename}: {reason}; requests"
            " are still answered, their log lines lost until it can be written again\n"
        )
        sys.stderr.flush()


class AccessLog:
    """Writes one line per request where *config* says; `write` does nothing when off."""

    def __init__(self, config: Config) -> None:
        self.json = config.log_format == "json"
        target = config.access_log_target(sys.stderr.isatty())
        # A logger of its own per app (not registered by name): two apps in one process,
        # as tests build them, never share or stack handlers.
        self.logger: logging.Logger | None = None
        if target == "off":
            return
        handler: logging.Handler
        if isinstance(target, Path):
            target.parent.mkdir(parents=True, exist_ok=True)
            # Reopened when logrotate moves the file; O_APPEND keeps workers' lines whole.
            handler = _ReopeningHandler(target, encoding="utf-8", delay=True)
        else:
            handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        self.logger = logging.Logger("lfs_server.access", logging.INFO)
        self.logger.addHandler(handler)

    def write(
        self,
        *,
        request_id: str,
        user: str | None,
        repo: str | None,
        method: str,
        path: str,
        status: int,
        nbytes: int,
        time_ms: float,
    ) -> None:
        """Log one request; strings are escaped, so no field can start a line of its own."""
        if self.logger is None:
            return
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        if self.json:
            line = json.dumps(
                {
                    "time": now,
                    "request_id": request_id,
                    "user": user,
                    "repo": repo,
                    "method": method,
                    "path": path,
                    "status": status,
                    "bytes": nbytes,
                    "time_ms": round(time_ms, 1),
                }
            )
        else:
            line = (
                f"{now} request_id={_escaped(request_id)}"
                f" user={_escaped(user) if user is not None else '-'} repo={repo or '-'}"
                f' "{_escaped(method)} {_escaped(path)}" status={status} bytes={nbytes}'
                f" time_ms={time_ms:.1f}"
            )
        self.logger.info(line)
