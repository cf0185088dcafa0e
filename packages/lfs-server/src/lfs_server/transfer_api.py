"""Basic transfers: GET an object, PUT an object, POST verify.

With nginx in front (body_mode "nginx") no large body passes through Python: GET answers
with X-Accel-Redirect to an internal nginx location, and PUT receives the path of the body
file nginx already wrote (client_body_in_file_only) after the upload check; a small PUT
comes whole, in one request. Without nginx ("stream"), Flask streams.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from flask import Blueprint, Response, g, request
from werkzeug.exceptions import RequestedRangeNotSatisfiable

from lfs_server.backends.base import (
    CHUNK,
    LOCAL_LOCATION,
    S3_LOCATION,
    ObjectReader,
    UnsafeStorePath,
    VerifyError,
)
from lfs_server.validation import ApiError, check_oid, parse_size_text, parse_verify
from lfs_server.web import (
    authorize_action,
    from_our_nginx,
    lfs_response,
    read_json,
    repo_from_path,
    services,
)

bp = Blueprint("transfer", __name__)

# nginx's internal locations (nginx.py writes them): the local store's folder, and the
# proxy that streams an object from S3 (LFS_STORAGE=s3, proxy mode).
STORE_LOCATION = LOCAL_LOCATION
__all__ = [
    "INLINE_UPLOAD_PATH",
    "S3_LOCATION",
    "STORE_LOCATION",
    "UPLOAD_CHECK_PATH",
    "bp",
    "check_upload",
]
BODY_FILE_HEADER = "X-Lfs-Body-File"
UPLOAD_CHECK_PATH = "/_lfs/upload-check"
# nginx's internal location for a small upload sent whole to the app (nginx.conf.in), and
# the header it adds to such a request.
INLINE_UPLOAD_PATH = "/_lfs/inline-upload"
INLINE_HEADER = "X-Lfs-Body-Inline"
# The upload URL as nginx's upload location matches it: repo, oid, size.
UPLOAD_URI_RE = re.compile(r"/(.+)/info/lfs/upload/([^/]+)/([^/]+)")


@bp.get("/<path:repo>/info/lfs/objects/<oid>")
def download(repo: str, oid: str) -> Response:
    """Send one object (Range requests are answered 206 by nginx or werkzeug)."""
    repo = repo_from_path(repo)
    oid = check_oid(oid)
    svc = services()
    size = svc.store.stored_size(repo, oid)
    # Authorize before saying whether the object exists: a caller without read access
    # gets the same answer for a stored object and a missing one (no existence oracle).
    authorize_action(repo, "download", oid, size)
    if size is None:
        raise ApiError(404, f"object {oid} does not exist in {repo!r}")
    g.object_bytes = size
    if svc.config.body_mode == "nginx":
        if request.method == "HEAD":
            # Answered here: nginx would fetch the object (an S3 URL is signed for GET only).
            response = Response(status=200, mimetype="application/octet-stream")
            response.headers["Content-Length"] = str(size)
            response.headers["Accept-Ranges"] = "bytes"
            return response
        response = Response(status=200, mimetype="application/octet-stream")
        response.headers["X-Accel-Redirect"] = svc.store.nginx_redirect(repo, oid)
        return response
    return _stream(repo, oid, size)


def _stream(repo: str, oid: str, size: int) -> Response:
    """The object's bytes through the app (no nginx): whole, or the one Range asked for."""
    start, stop, status = 0, size, 200
    if request.range is not None:
        part = request.range.range_for_length(size)
        if part is None:  # past the end, or several ranges (multipart is not offered)
            raise RequestedRangeNotSatisfiable(length=size)
        (start, stop), status = part, 206
    headers = {"Content-Length": str(stop - start), "Accept-Ranges": "bytes"}
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
    if request.method == "HEAD":
        return Response(status=status, mimetype="application/octet-stream", headers=headers)
    body = services().store.open_object(repo, oid, start, stop if status == 206 else None)
    return Response(
        _chunks(body),
        status=status,
        mimetype="application/octet-stream",
        headers=headers,
        direct_passthrough=True,
    )


def _chunks(body: ObjectReader) -> Iterator[bytes]:
    try:
        while chunk := body.read(CHUNK):
            yield chunk
    finally:
        body.close()


def check_upload(
    raw_repo: str, raw_oid: str, raw_size: str, content_length: str | None
) -> tuple[str, str, int]:
    """Everything an upload must pass before a byte of its body is read.

    Used twice: by nginx's `auth_request` (so nginx writes nothing to disk for a refused
    upload) and by the upload itself. *content_length* is the request's header (None when
    it has none); it must equal the size in the URL. Returns (repo, oid, size).
    """
    repo = repo_from_path(raw_repo)
    oid = check_oid(raw_oid)
    nbytes = parse_size_text(raw_size)
    svc = services()
    max_size = svc.config.max_object_size
    if max_size and nbytes > max_size:
        raise ApiError(
            413, f"object is {nbytes} bytes; this server accepts objects up to {max_size} bytes"
        )
    authorize_action(repo, "upload", oid, nbytes)
    if content_length is None:
        raise ApiError(411, f"an upload needs a Content-Length header of {nbytes} bytes")
    if content_length.strip() != str(nbytes):
        raise ApiError(
            400,
            f"Content-Length is {content_length.strip()[:20]!r} but the object's size is"
            f" {nbytes}; nothing was stored",
        )
    if not svc.config.auto_create and not svc.repo_exists(repo):
        raise ApiError(
            404, f"repository {repo!r} does not exist on this server (auto-creation is off)"
        )
    return repo, oid, nbytes


@bp.get(UPLOAD_CHECK_PATH)
def upload_check() -> Response:
    """nginx's `auth_request` before it reads an upload body: 204 to go on, else 403.

    nginx passes only 2xx/401/403 through auth_request, so a refusal is always 403 here and
    carries the real status and message in X-Lfs-Status / X-Lfs-Error (JSON text), which
    the nginx config turns into the client's answer.
    """
    if not from_our_nginx():
        raise ApiError(404, f"no such endpoint: {request.method} {request.path}")
    raw_uri = request.headers.get("X-Lfs-Original-Uri", "").partition("?")[0]
    uri = urllib.parse.unquote(raw_uri.encode("latin-1"), errors="replace")
    match = UPLOAD_URI_RE.fullmatch(uri)
    try:
        if match is None:
            raise ApiError(404, "not an upload URL")
        raw_repo, raw_oid, raw_size = match.groups()
        check_upload(
            raw_repo, raw_oid, raw_size, request.headers.get("X-Lfs-Content-Length") or None
        )
    except ApiError as exc:
        refused = Response(status=403)
        refused.headers["X-Lfs-Status"] = str(exc.status)
        refused.headers["X-Lfs-Error"] = json.dumps(exc.message)  # ASCII, no line breaks
        return refused
    # Lets nginx tell a full disk (a 500 after this) from a check that never answered.
    return Response(status=204, headers={"X-Lfs-Status": "204"})


@bp.put("/<path:repo>/info/lfs/upload/<oid>/<size>")
def upload(repo: str, oid: str, size: str) -> Response:
    """Verify the body's size and SHA-256 and publish it; 400 and nothing stored if wrong.

    A refused upload is 400, never 422: git-lfs reads a 422 on upload as a Content-Type
    problem, prints a hint and lets `git push` succeed without the object.
    """
    svc = services()
    nginx_mode = svc.config.body_mode == "nginx"
    if nginx_mode and not from_our_nginx():
        raise ApiError(
            403, "uploads must come through lfs-server's nginx (the request lacks its proxy secret)"
        )
    # In nginx mode the app gets no body and no Content-Length (nginx checked it already),
    # except for a small upload nginx holds in memory and sends whole: one app request
    # instead of two, checked here before a byte of its body is read.
    streamed = not nginx_mode or request.headers.get(INLINE_HEADER) == "1"
    length = request.headers.get("Content-Length" if streamed else "X-Lfs-Content-Length")
    repo, oid, nbytes = check_upload(repo, oid, size, length)
    try:
        if streamed:
            svc.store.publish_stream(request.stream, repo, oid, nbytes)  # type: ignore[arg-type]
        else:
            _publish_nginx_body(repo, oid, nbytes)
    except VerifyError as exc:
        raise ApiError(400, f"upload rejected, nothing stored: {exc}") from None
    except UnsafeStorePath as exc:
        raise ApiError(403, f"upload refused, nothing stored: {exc}") from None
    g.object_bytes = nbytes
    return lfs_response({}, 200)


def _publish_nginx_body(repo: str, oid: str, size: int) -> None:
    svc = services()
    if not from_our_nginx():
        raise ApiError(
            403, "uploads must come through lfs-server's nginx (the request lacks its proxy secret)"
        )
    body_file = request.headers.get(BODY_FILE_HEADER, "")
    if not body_file:
        # nginx writes no file for an empty body; only the empty object can have one.
        with tempfile.NamedTemporaryFile(
            prefix="upload-", dir=svc.store.tmp_dir, delete=False
        ) as empty:
            path = Path(empty.name)
        try:
            svc.store.publish(path, repo, oid, size)
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return
    path = Path(os.path.realpath(body_file))
    body_dir = Path(os.path.realpath(svc.config.body_dir))
    if body_dir not in path.parents:
        raise ApiError(403, f"body file must be inside nginx's body directory {body_dir}")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ApiError(400, "nginx's body file has disappeared; retry the upload") from None
    if not stat.S_ISREG(info.st_mode):
        raise ApiError(403, "body file is not a regular file")
    svc.store.publish(path, repo, oid, size)


@bp.post("/<path:repo>/info/lfs/verify")
def verify(repo: str) -> Response:
    """200 if the object is stored with this size, 404 otherwise."""
    repo = repo_from_path(repo)
    oid, size = parse_verify(read_json())
    authorize_action(repo, "verify", oid, size)
    stored = services().store.stored_size(repo, oid)
    if stored is None:
        raise ApiError(404, f"object {oid} was not stored in {repo!r}; upload it again")
    if stored != size:
        raise ApiError(404, f"object {oid} is stored with {stored} bytes, not {size}")
    # No body: git-lfs closes a verify answer unread, and Go's HTTP client then drops the
    # connection (a push opened one per object); an empty answer lets it keep it.
    return Response(status=200, mimetype="text/plain")
