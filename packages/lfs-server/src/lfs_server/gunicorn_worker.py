"""The gunicorn workers lfs-server runs: gunicorn's threaded worker (and its sync worker,
for configurations that name it), except that the error responses gunicorn writes itself
(requests it cannot parse, before the app sees them) are git-lfs JSON like every other
error, not HTML.

`lfs-server serve` and `gunicorn -c python:lfs_server.gunicorn_conf` use
`lfs_server.gunicorn_worker.JsonErrorThreadWorker`.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

MEDIA_TYPE = "application/vnd.git-lfs+json"


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's `util.write_error`, with the git-lfs JSON error body."""
    body = json.dumps({"message": f"{reason.lower()}: {mesg}", "request_id": ""}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: {MEDIA_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


class _JsonErrors:
    """Worker behaviour shared by both classes below (listed first in their bases)."""

    def init_process(self) -> None:
        """In the worker process, before it serves: gunicorn's error pages become JSON.

        gunicorn looks write_error up on its util module when it writes one; replacing it
        once for the whole worker process is safe with threads, unlike swapping it around
        each call.
        """
        util.write_error = write_json_error
        super().init_process()  # type: ignore[misc]

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """Let gunicorn answer the error (as JSON), then drain what the peer still sends."""
        super().handle_error(req, client, addr, exc)  # type: ignore[misc]
        _linger(client)


class JsonErrorThreadWorker(_JsonErrors, ThreadWorker):
    """gunicorn's gthread worker: keep-alive to nginx, requests served by threads."""


class JsonErrorSyncWorker(_JsonErrors, SyncWorker):
    """gunicorn's sync worker (one request at a time, a connection per request)."""


# nginx bounds API bodies at 16 MiB; a client error is answered within a second.
_LINGER_BYTES = 32 << 20
_LINGER_SECONDS = 1.0


def _linger(client: Any) -> None:
    """Read and drop what the peer still sends before gunicorn closes the socket.

    gunicorn rejects a malformed request before reading its body; closing a socket with
    unread bytes resets the connection, and nginx, still sending that body, would answer
    502 instead of the error just written.
    """
    if not isinstance(client, socket.socket):
        return
    try:
        client.shutdown(socket.SHUT_WR)
        client.settimeout(_LINGER_SECONDS)
        seen = 0
        while seen < _LINGER_BYTES:
            chunk = client.recv(1 << 16)
            if not chunk:
                break
            seen += len(chunk)
    except OSError:
        pass
