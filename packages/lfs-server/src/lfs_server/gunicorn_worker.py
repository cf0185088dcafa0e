"""The gunicorn worker lfs-server runs: gunicorn's sync worker, except that the error
responses gunicorn writes itself (requests it cannot parse, before the app sees them) are
git-lfs JSON like every other error, not HTML.

Use it with `gunicorn --worker-class lfs_server.gunicorn_worker.JsonErrorSyncWorker`
(`lfs-server serve` and deploy/gunicorn.conf.py do).
"""

from __future__ import annotations

import json
import socket
from typing import Any

from gunicorn import util
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


class JsonErrorSyncWorker(SyncWorker):
    """A sync worker whose own error pages are JSON (gunicorn picks status and message)."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """Let gunicorn handle the error, writing JSON where it would write HTML."""
        # gunicorn looks write_error up on its util module at call time; a sync worker
        # handles one request at a time, so swapping it for this call is safe.
        original = util.write_error
        util.write_error = write_json_error
        try:
            super().handle_error(req, client, addr, exc)
        finally:
            util.write_error = original
        _linger(client)


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
