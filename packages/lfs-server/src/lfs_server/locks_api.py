"""The locking API: create, list, verify (ours/theirs) and unlock."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from lfs_server.backends.base import Lock, LockExists
from lfs_server.validation import (
    ApiError,
    normalize_lock_path,
    parse_cursor,
    parse_limit,
    parse_lock_id,
    parse_lock_path,
    parse_ref,
)
from lfs_server.web import (
    authorize,
    lfs_response,
    read_json,
    repo_from_path,
    request_id,
    services,
    user_level,
)

bp = Blueprint("locks", __name__)


def _existing_repo(raw: str, needed: str) -> tuple[str, str]:
    """(repo, user) once the caller holds *needed* access; only then may a missing
    repository be named (no existence oracle), and only then is a body read."""
    repo = repo_from_path(raw)
    user = authorize(repo, needed)
    svc = services()
    if not svc.config.auto_create and not svc.store.repo_exists(repo):
        raise ApiError(
            404, f"repository {repo!r} does not exist on this server (auto-creation is off)"
        )
    return repo, user


def _write_request(raw: str, what: str) -> tuple[str, str, dict[str, Any]]:
    """(repo, user, JSON body) of a request that needs write access; the body, *what*
    the error calls it, must be a JSON object (an empty body counts as `{}`)."""
    repo, user = _existing_repo(raw, "write")
    body = read_json()
    if body is None:
        return repo, user, {}
    if not isinstance(body, dict):
        raise ApiError(422, f"{what} must be a JSON object")
    return repo, user, body


def _find_page(
    repo: str, limit: int, cursor: int, path: str | None = None, lock_id: int | None = None
) -> tuple[list[Lock], dict[str, object]]:
    """Up to *limit* locks from *cursor* on, and the `next_cursor` entry if more follow."""
    found = services().locks.find(repo, path=path, lock_id=lock_id, cursor=cursor, limit=limit + 1)
    more: dict[str, object] = {"next_cursor": str(found[limit].id)} if len(found) > limit else {}
    return found[:limit], more


@bp.post("/<path:repo>/info/lfs/locks")
def create_lock(repo: str) -> Response:
    """Lock a path for the caller: 201, or 409 with the lock that holds it."""
    repo, user, body = _write_request(repo, 'lock request (such as {"path": "art.psd"})')
    path = parse_lock_path(body.get("path"))
    ref = parse_ref(body.get("ref"))
    try:
        lock = services().locks.create(repo, path, user, ref)
    except LockExists as exc:
        return lfs_response(
            {
                "lock": exc.lock.to_json(),
                "message": f"already locked by {exc.lock.owner}",
                "request_id": request_id(),
            },
            409,
        )
    return lfs_response({"lock": lock.to_json()}, 201)


@bp.get("/<path:repo>/info/lfs/locks")
def list_locks(repo: str) -> Response:
    """Locks of the repository, filtered by path or id, paginated by cursor/limit."""
    repo, _user = _existing_repo(repo, "read")
    args = request.args
    path = args.get("path") or None
    if path is not None:
        path = normalize_lock_path(path)
    raw_id = args.get("id") or None
    lock_id = parse_lock_id(raw_id)
    if raw_id is not None and lock_id is None:
        return lfs_response({"locks": []})
    limit = parse_limit(args.get("limit"))
    cursor = parse_cursor(args.get("cursor"))
    page, more = _find_page(repo, limit, cursor, path, lock_id)
    return lfs_response({"locks": [lock.to_json() for lock in page], **more})


@bp.post("/<path:repo>/info/lfs/locks/verify")
def verify_locks(repo: str) -> Response:
    """Locks split into the caller's (`ours`) and everybody else's (`theirs`)."""
    repo, user, body = _write_request(repo, "lock verification request")
    limit = parse_limit(body.get("limit"))
    cursor = parse_cursor(body.get("cursor"))
    parse_ref(body.get("ref"))
    page, more = _find_page(repo, limit, cursor)
    return lfs_response(
        {
            "ours": [lock.to_json() for lock in page if lock.owner == user],
            "theirs": [lock.to_json() for lock in page if lock.owner != user],
            **more,
        }
    )


@bp.post("/<path:repo>/info/lfs/locks/<lock_id>/unlock")
def unlock(repo: str, lock_id: str) -> Response:
    """Remove a lock: the owner may; others only with force and admin access."""
    repo, user, body = _write_request(repo, 'unlock request (such as {"force": false})')
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise ApiError(422, f"force must be true or false, got {force!r}")
    svc = services()
    number = parse_lock_id(lock_id)
    lock = None if number is None else svc.locks.get(repo, number)
    if lock is None:
        raise ApiError(404, f"no lock with id {lock_id!r} in {repo!r}")
    if lock.owner != user:
        if not force:
            raise ApiError(
                403,
                f"{lock.path} is locked by {lock.owner}; only they can unlock it"
                " (or an admin with --force)",
            )
        if user_level(repo, user) != "admin":
            raise ApiError(
                403, f"forcing the unlock of {lock.owner}'s lock needs admin access to {repo!r}"
            )
    removed = svc.locks.delete(repo, lock.id)
    if removed is None:
        raise ApiError(404, f"lock {lock_id!r} was removed meanwhile")
    return lfs_response({"lock": removed.to_json()})
