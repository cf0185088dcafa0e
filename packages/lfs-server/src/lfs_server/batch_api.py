"""The batch API: `POST <repo>/info/lfs/objects/batch`."""

from __future__ import annotations

import shutil
import time
from typing import Any

from flask import Blueprint, Response

from lfs_server.validation import HASH_ALGO, ApiError, ObjectSpec, parse_batch
from lfs_server.web import authorize, base_url, lfs_response, read_json, repo_from_path, services

bp = Blueprint("batch", __name__)


@bp.post("/<path:repo>/info/lfs/objects/batch")
def batch(repo: str) -> Response:
    """Answer a batch request with per-object actions or errors."""
    repo = repo_from_path(repo)
    svc = services()
    # Credentials first: the body (up to 16 MiB of JSON) is parsed only for callers who
    # may at least read this repository.
    authorize(repo, "read")
    request_body = parse_batch(
        read_json(), svc.config.max_batch_objects, svc.config.max_object_size
    )
    upload = request_body.operation == "upload"
    user = authorize(repo, "write" if upload else "read")
    if not svc.config.auto_create:
        if not svc.repo_exists(repo):
            raise ApiError(
                404, f"repository {repo!r} does not exist on this server (auto-creation is off)"
            )
    elif upload:
        svc.ensure_repo(repo)
    expires_at = int(time.time()) + svc.config.token_ttl
    base = base_url(repo)
    # One look-up for the whole batch: a remote store answers them concurrently.
    sizes = svc.store.stored_sizes(
        repo, [str(spec.oid) for spec in request_body.objects if spec.error is None]
    )
    objects = [
        _answer(spec, repo, user, upload, base, expires_at, sizes) for spec in request_body.objects
    ]
    if upload:
        _check_free_space(objects)
    return lfs_response({"transfer": "basic", "objects": objects, "hash_algo": HASH_ALGO})


def _check_free_space(objects: list[dict[str, Any]]) -> None:
    """507 for an object that alone cannot fit on the store's disk (per object), or for
    the whole batch when the uploads it asks for together cannot.

    Only an early answer: concurrent uploads share the space, so nginx (which writes the
    bodies) still answers 507 when a write fails for lack of space.
    """
    uploads = [obj for obj in objects if "upload" in obj.get("actions", {})]
    if not uploads:
        return
    free = shutil.disk_usage(services().store.tmp_dir).free
    for obj in uploads:
        if int(obj["size"]) > free:
            del obj["actions"], obj["authenticated"]
            obj["error"] = {
                "code": 507,
                "message": f"insufficient storage: this object is {obj['size']} bytes but the"
                f" server's disk has {free} bytes free; nothing was stored",
            }
    needed = sum(int(obj["size"]) for obj in uploads if "actions" in obj)
    if needed > free:
        raise ApiError(
            507,
            f"insufficient storage: the upload needs {needed} bytes but the server's disk has"
            f" {free} bytes free; nothing was stored, retry when the administrator has"
            " freed space",
        )


def _answer(
    spec: ObjectSpec,
    repo: str,
    user: str,
    upload: bool,
    base: str,
    expires_at: int,
    sizes: dict[str, int | None],
) -> dict[str, Any]:
    if spec.error is not None:
        code, message = spec.error
        return {"oid": spec.oid, "size": spec.size, "error": {"code": code, "message": message}}
    svc = services()
    oid, size = str(spec.oid), int(spec.size)
    stored = sizes.get(oid)
    entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
    ttl = svc.config.token_ttl

    def action(href: str, operation: str) -> dict[str, Any]:
        token = svc.signer.issue(repo, operation, oid, size, user, expires_at)
        return {"href": href, "header": {"Authorization": f"Bearer {token}"}, "expires_in": ttl}

    if upload:
        # A stored object of another size is damaged (its oid fixes its size): let the
        # client upload it again; the PUT verifies the new bytes before replacing it.
        if stored != size:
            entry["actions"] = {"upload": action(f"{base}/upload/{oid}/{size}", "upload")}
            if not svc.store.uploads_verified_by_put:
                entry["actions"]["verify"] = action(f"{base}/verify", "verify")
        return entry
    if stored is None:
        entry.pop("authenticated")
        entry["error"] = {"code": 404, "message": f"object {oid} does not exist in {repo!r}"}
    elif stored != size:
        entry.pop("authenticated")
        entry["error"] = {"code": 422, "message": f"object {oid} is {stored} bytes, not {size}"}
    elif direct := svc.store.direct_download_url(repo, oid, ttl):
        # The store hands out its own URL (S3 with LFS_S3_TRANSFER=direct: presigned, no
        # credentials of ours in it, expiring with the action).
        entry["actions"] = {"download": {"href": direct, "expires_in": ttl}}
    else:
        entry["actions"] = {"download": action(f"{base}/objects/{oid}", "download")}
    return entry
