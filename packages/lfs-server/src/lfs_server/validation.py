"""Pure validation of everything a client sends: oids, sizes, repository paths, batch and
lock requests. Functions take plain data and return typed values or raise `ApiError`;
nothing here touches the filesystem, so a bad value is rejected before any path is built.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import Any

OID_RE = re.compile(r"[0-9a-f]{64}")
# One repository path component: letters, digits, '.', '_', '-', not starting with '.'.
_COMPONENT_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
MAX_REPO_DEPTH = 8
OPERATIONS = ("upload", "download")
HASH_ALGO = "sha256"
MAX_SIZE = 2**63 - 1


class ApiError(Exception):
    """An error answered as `{"message": ...}` with an HTTP status."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


@dataclasses.dataclass(frozen=True)
class ObjectSpec:
    """One entry of a batch request, after validation.

    `error` is set (code, message) when this object is refused; `oid`/`size` then echo
    what the client sent, as the batch response must.
    """

    oid: Any
    size: Any
    error: tuple[int, str] | None = None


@dataclasses.dataclass(frozen=True)
class BatchRequest:
    """A validated batch request."""

    operation: str
    objects: tuple[ObjectSpec, ...]
    transfers: tuple[str, ...]
    ref: str | None
    hash_algo: str


def check_oid(oid: object) -> str:
    """Return *oid* if it is 64 lowercase hex characters, else raise ApiError(422)."""
    if isinstance(oid, str) and OID_RE.fullmatch(oid):
        return oid
    raise ApiError(422, f"oid must be 64 lowercase hex characters (a SHA-256), got {_show(oid)}")


def check_size(size: object) -> int:
    """Return *size* if it is a non-negative integer (not a bool) below 2**63 (what a file
    can hold), else raise ApiError(422)."""
    if isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= MAX_SIZE:
        return size
    raise ApiError(422, f"size must be a non-negative integer below 2**63, got {_show(size)}")


def parse_size_text(text: str) -> int:
    """Parse a size from a URL or header (decimal digits only)."""
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ApiError(422, f"size must be a non-negative integer, got {_show(text)}")
    return int(text)


def normalize_repo(path: str) -> str:
    """Return the canonical repository name for a URL path such as `team/game.git`.

    The canonical name drops a trailing `.git` and surrounding slashes; every component
    must be a plain name (no `.`/`..`, no leading dot, no empty parts), so the name can
    never leave the data root once joined to it.
    """
    raw = path.strip("/")
    if raw.endswith(".git"):
        raw = raw[: -len(".git")]
    parts = raw.split("/")
    if not raw or len(parts) > MAX_REPO_DEPTH:
        raise ApiError(
            404,
            f"repository path must be 1-{MAX_REPO_DEPTH} components like team/game.git,"
            f" got {_show(path)}",
        )
    if parts[0].startswith("_"):
        # The server's own keys live beside the repositories (S3: `_repos/` markers,
        # `_quarantine/`): a repository must never be named into them.
        raise ApiError(
            404,
            f"repository path {_show(path)} is not allowed: names starting with '_' are"
            " reserved for the server",
        )
    for part in parts:
        if not _COMPONENT_RE.fullmatch(part) or part.endswith(".git"):
            raise ApiError(
                404,
                f"repository path component {_show(part)} is not allowed: use letters, digits,"
                " '.', '_' and '-', not starting with '.'",
            )
    return "/".join(parts)


def parse_ref(value: object) -> str | None:
    """The `ref` property: absent, null, or `{"name": "<refspec>"}`."""
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return str(value["name"])
    raise ApiError(
        422, f'ref must be null or an object {{"name": "refs/heads/..."}}, got {_show(value)}'
    )


def parse_batch(body: object, max_objects: int, max_object_size: int = 0) -> BatchRequest:
    """Validate a batch request body (already decoded from JSON).

    Whole-request problems raise ApiError (422, or 413 for too many objects); problems
    with single objects become per-object errors (422 bad oid/size or too large, 409
    unsupported hash algorithm) so the rest of the batch still proceeds.
    """
    if not isinstance(body, dict):
        raise ApiError(422, "batch request must be a JSON object with 'operation' and 'objects'")
    operation = body.get("operation")
    if operation not in OPERATIONS:
        raise ApiError(422, f"operation must be 'upload' or 'download', got {_show(operation)}")
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise ApiError(422, f"objects must be a list of {{oid, size}}, got {_show(objects)}")
    if len(objects) > max_objects:
        raise ApiError(
            413,
            f"a batch may name at most {max_objects} objects, got {len(objects)};"
            " split the request",
        )
    transfers = body.get("transfers", ["basic"])
    if transfers is None:
        transfers = ["basic"]
    if not isinstance(transfers, list) or not all(isinstance(t, str) for t in transfers):
        raise ApiError(422, f"transfers must be a list of adapter names, got {_show(transfers)}")
    ref = parse_ref(body.get("ref"))
    hash_algo = body.get("hash_algo", HASH_ALGO)
    if hash_algo is None:
        hash_algo = HASH_ALGO
    if not isinstance(hash_algo, str):
        raise ApiError(422, f"hash_algo must be a string such as 'sha256', got {_show(hash_algo)}")
    specs = [_object_spec(item, hash_algo, max_object_size) for item in objects]
    return BatchRequest(operation, tuple(specs), tuple(transfers), ref, hash_algo)


def _object_spec(item: object, hash_algo: str, max_object_size: int) -> ObjectSpec:
    if not isinstance(item, dict):
        return ObjectSpec(
            None, None, (422, f"each object must be {{oid, size}}, got {_show(item)}")
        )
    oid, size = item.get("oid"), item.get("size")
    try:
        check_oid(oid)
        size = check_size(size)
    except ApiError as exc:
        return ObjectSpec(oid, size, (422, exc.message))
    if hash_algo != HASH_ALGO:
        return ObjectSpec(
            oid, size, (409, f"hash_algo {hash_algo!r} is not supported; this server uses 'sha256'")
        )
    if max_object_size and size > max_object_size:
        return ObjectSpec(
            oid,
            size,
            (
                422,
                f"object is {size} bytes; this server accepts objects"
                f" up to {max_object_size} bytes",
            ),
        )
    return ObjectSpec(oid, size)


def parse_verify(body: object) -> tuple[str, int]:
    """The verify request body `{oid, size}`."""
    if not isinstance(body, dict):
        raise ApiError(422, "verify request must be a JSON object {oid, size}")
    return check_oid(body.get("oid")), check_size(body.get("size"))


def normalize_lock_path(path: str) -> str:
    """The one spelling of a lock path: Unicode NFC.

    macOS writes 'café' decomposed (NFD), most other systems composed (NFC); both are the
    same file to a user, so both sides of every comparison (the API, the stored locks, the
    pre-receive hook) use NFC.
    """
    return unicodedata.normalize("NFC", path)


def parse_lock_path(value: object) -> str:
    """A lock path: a non-empty relative path inside the working tree, '/'-separated, NFC."""
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise ApiError(
            422,
            f"path must be a non-empty string (a file path in the repository), got {_show(value)}",
        )
    if (
        value.startswith("/")
        or "\0" in value
        or any(p in ("", ".", "..") for p in value.split("/"))
    ):
        raise ApiError(
            422,
            "path must be relative to the repository root without '.' or '..' parts,"
            f" got {_show(value)}",
        )
    return normalize_lock_path(value)


def parse_limit(value: object, default: int = 100, maximum: int = 1000) -> int:
    """A page size for lock listings: 1..maximum (strings from query strings allowed)."""
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return min(value, maximum)
    raise ApiError(422, f"limit must be a positive integer, got {_show(value)}")


MAX_SQL_INT = 2**63 - 1


def parse_lock_id(value: str | None) -> int | None:
    """A lock id from a URL or query string, or None if it cannot name a lock (no lock has
    an id that is not a decimal number within SQLite's integer range)."""
    if value and value.isascii() and value.isdigit() and int(value) <= MAX_SQL_INT:
        return int(value)
    return None


def parse_cursor(value: object) -> int:
    """A lock-listing cursor: the decimal id of the first lock of the page ('' = start)."""
    if value is None or value == "":
        return 0
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19:
        return int(value)
    raise ApiError(
        422, f"cursor must be a next_cursor value from a previous listing, got {_show(value)}"
    )


def _show(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
