"""Basic transfers: GET an object, PUT an object, POST verify.

With nginx in front (body_mode "nginx") no body passes through Python: GET answers with
X-Accel-Redirect to an internal nginx location, and PUT receives the path of the body file
nginx already wrote (client_body_in_file_only). Without nginx ("stream"), Flask streams.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from flask import Blueprint, Response, g, request, send_file

from lfs_server.storage import UnsafeStorePath, VerifyError
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

STORE_LOCATION = "/_lfs_store/"
BODY_FILE_HEADER = "X-Lfs-Body-File"


@bp.get("/<path:repo>/info/lfs/objects/<oid>")
def download(repo: str, oid: str) -> Response:
    """Send one object (Range requests are answered 206 by nginx or werkzeug)."""
    repo = repo_from_path(repo)
    oid = check_oid(oid)
    svc = services()
    size = svc.store.stored_size(repo, oid)
    if size is None:
        raise ApiError(404, f"object {oid} does not exist in {repo!r}")
    authorize_action(repo, "download", oid, size)
    g.object_bytes = size
    if svc.config.body_mode == "nginx":
        response = Response(status=200, mimetype="application/octet-stream")
        response.headers["X-Accel-Redirect"] = STORE_LOCATION + svc.store.relative_path(repo, oid)
        return response
    return send_file(
        svc.store.object_path(repo, oid), mimetype="application/octet-stream", conditional=True
    )


@bp.put("/<path:repo>/info/lfs/upload/<oid>/<size>")
def upload(repo: str, oid: str, size: str) -> Response:
    """Verify the body's size and SHA-256 and publish it; 422 and nothing stored if wrong."""
    repo = repo_from_path(repo)
    oid = check_oid(oid)
    nbytes = parse_size_text(size)
    svc = services()
    max_size = svc.config.max_object_size
    if max_size and nbytes > max_size:
        raise ApiError(
            422, f"object is {nbytes} bytes; this server accepts objects up to {max_size} bytes"
        )
    authorize_action(repo, "upload", oid, nbytes)
    if not svc.store.repo_exists(repo) and not svc.config.auto_create:
        raise ApiError(
            404, f"repository {repo!r} does not exist on this server (auto-creation is off)"
        )
    try:
        if svc.config.body_mode == "nginx":
            _publish_nginx_body(repo, oid, nbytes)
        else:
            svc.store.publish_stream(request.stream, repo, oid, nbytes)  # type: ignore[arg-type]
    except VerifyError as exc:
        raise ApiError(422, f"upload rejected, nothing stored: {exc}") from None
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
    return lfs_response({"message": "ok"}, 200)
