"""What every blueprint shares: the per-app services, JSON responses, authentication.

Nothing here is module-level state: the services live on `app.extensions["lfs"]`, built
by `create_app`, and request data lives on `flask.g`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import threading
import time
from typing import Any

from flask import Response, current_app, g, request

from lfs_server.authcache import SharedAuthCache
from lfs_server.backends import open_users
from lfs_server.backends.base import (
    DatabaseUnavailable,
    LockStore,
    ObjectStore,
    UserStore,
    level_rank,
)
from lfs_server.config import Config
from lfs_server.loginlimit import LoginLimiter
from lfs_server.metrics import Metrics
from lfs_server.ssh import api_token_user
from lfs_server.tokens import TokenError, TokenSigner
from lfs_server.validation import ApiError, normalize_repo

MEDIA_TYPE = "application/vnd.git-lfs+json"
REALM = "lfs-server"
_AUTH_CACHE_SECONDS = 60.0


@dataclasses.dataclass
class Services:
    """The objects one app instance works with."""

    config: Config
    store: ObjectStore
    signer: TokenSigner
    locks: LockStore
    proxy_secret: str
    metrics: Metrics
    shared_auth: SharedAuthCache | None = None
    login_limiter: LoginLimiter | None = None
    _users: UserStore | None = None
    _auth_cache: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)
    _known_repos: set[str] = dataclasses.field(default_factory=set)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def repo_exists(self, repo: str) -> bool:
        """Whether *repo* exists, asking the store only until it has once said yes.

        Repositories are never removed, so a yes stays true; on S3 each question is a
        HEAD request (~1 ms of CPU in boto3), which every upload asked twice.
        """
        if repo in self._known_repos:
            return True
        if not self.store.repo_exists(repo):
            return False
        with self._lock:
            self._known_repos.add(repo)
        return True

    def ensure_repo(self, repo: str) -> None:
        """Create *repo* in the store unless it is known to exist."""
        if not self.repo_exists(repo):
            self.store.create_repo(repo)
            with self._lock:
                self._known_repos.add(repo)

    def users(self) -> UserStore:
        """The users (file or database), re-read when the CLI has changed them."""
        users = self._users
        if users is None:
            with self._lock:
                if self._users is None:
                    self._users = open_users(self.config)
                return self._users
        # Outside the lock: a database that is slow to answer holds up only this request.
        try:
            changed = users.refresh()
        except DatabaseUnavailable:
            # The database is away: logins go on with the users known a moment ago.
            changed = False
        if changed:
            with self._lock:
                self._auth_cache.clear()
        return users

    def check_password(self, name: str, password: str) -> bool:
        """Password check with a short in-memory cache (scrypt costs ~50 ms per check)."""
        users = self.users()
        key = hashlib.blake2b(f"{name}\0{password}".encode(), digest_size=32).hexdigest()
        now = time.monotonic()
        with self._lock:
            hit = self._auth_cache.get(key)
            if hit and hit[0] > now and hit[1] == name:
                return True
        # Another worker of this node may have paid the scrypt already (authcache.py).
        user = users.users.get(name)
        stored_hash = user.password_hash if user is not None else ""
        shared = self.shared_auth
        if not (shared and stored_hash and shared.hit(name, password, stored_hash)):
            limiter = self.login_limiter
            client = client_address()
            if limiter is not None:
                limiter.check(client, name)  # before the scrypt: a limited guess costs nothing
            if users.authenticate(name, password) is None:
                if limiter is not None:
                    limiter.failed(client, name)
                return False
            if shared and stored_hash:
                shared.remember(name, password, stored_hash)
        with self._lock:
            if len(self._auth_cache) > 1000:
                self._auth_cache.clear()
            self._auth_cache[key] = (now + _AUTH_CACHE_SECONDS, name)
        return True


def services() -> Services:
    """The services of the current app."""
    found: Services = current_app.extensions["lfs"]
    return found


def lfs_response(
    payload: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A JSON response with the git-lfs media type."""
    return Response(json.dumps(payload), status=status, mimetype=MEDIA_TYPE, headers=headers)


def error_response(status: int, message: str, **extra: Any) -> Response:
    """`{"message", "request_id", ...}` with *status*; 401 carries LFS-Authenticate."""
    body = {"message": message, "request_id": request_id(), **extra}
    headers = {}
    if status == 401:
        headers["LFS-Authenticate"] = f'Basic realm="{REALM}"'
        headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
    return lfs_response(body, status, headers)


def insufficient_storage(detail: str = "") -> Response:
    """507: the store's disk is full; nothing was stored or changed."""
    return error_response(
        507,
        "insufficient storage: the server's disk is full"
        + (f" ({detail})" if detail else "")
        + "; nothing was stored, retry when the administrator has freed space",
    )


def request_id() -> str:
    """The id of this request (nginx's $request_id when it came through nginx)."""
    rid: str | None = g.get("request_id")
    if rid is None:
        rid = ""
    return rid


def read_json() -> Any:
    """The request body as JSON (any content type; git-lfs sends its own media type)."""
    data = request.get_data(cache=False)
    try:
        value = json.loads(data or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "request body must be JSON (application/vnd.git-lfs+json)") from None
    except RecursionError:
        raise ApiError(400, "request body is JSON nested too deeply to be an LFS request") from None
    _check_unicode(value)
    return value


def _check_unicode(value: Any) -> None:
    """Refuse strings JSON can carry but UTF-8 cannot (a lone surrogate, `"\\ud800"`).

    Checked once here, for every key and string of every body, so no field reaches SQLite,
    a file name or the response encoder with one (each of those raised a 500).
    """
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ApiError(
                    400,
                    "request body holds a string that is not Unicode text (a lone UTF-16"
                    " surrogate escape such as \\ud800); send UTF-8 JSON",
                ) from None


def repo_from_path(raw: str) -> str:
    """Canonical repo name from the URL; records it for the access log."""
    repo = normalize_repo(raw)
    g.repo = repo
    return repo


def basic_credentials() -> tuple[str, str] | None:
    """(user, password) from a Basic Authorization header, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except ValueError:  # binascii.Error, UnicodeDecodeError, or non-ASCII text to decode
        raise ApiError(401, "Authorization header is not valid Basic credentials") from None
    name, sep, password = decoded.partition(":")
    if not sep:
        raise ApiError(401, "Basic credentials must be USER:PASSWORD")
    return name, password


def bearer_token() -> str | None:
    """The action token from `Authorization: Bearer ...`, or None."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def authorize(repo: str, needed: str) -> str:
    """Check the caller may act on *repo* at level *needed*; return the user name.

    The empty string is the anonymous user (only for read, when anonymous_read is on).
    Raises ApiError 401 (no or wrong credentials) or 403 (not allowed).
    """
    svc = services()
    creds = basic_credentials()
    token = bearer_token() if creds is None else None
    if creds is None and token is None:
        if needed == "read" and svc.config.anonymous_read:
            g.user = ""
            return ""
        raise ApiError(
            401,
            "credentials are required: log in with the user name and password lfs-server gave you",
        )
    if creds is None:
        # A token git-lfs-authenticate (`lfs-server ssh`) printed for this repository.
        try:
            name = api_token_user(svc.signer, token or "", repo, needed)
        except TokenError as exc:
            if needed == "read" and svc.config.anonymous_read:
                g.user = ""  # as before SSH tokens: any other Bearer reads anonymously
                return ""
            raise ApiError(401, str(exc)) from None
    else:
        name, password = creds
        if not svc.check_password(name, password):
            raise ApiError(401, f"wrong user name or password for {name!r}")
    g.user = name
    user = svc.users().users.get(name)
    if user is None:  # removed by the CLI a moment ago
        raise ApiError(401, f"wrong user name or password for {name!r}")
    level = user.level_for(repo)
    if level_rank(level) >= level_rank(needed):
        return name
    if needed == "read" and svc.config.anonymous_read:
        return name
    if level is None:
        raise ApiError(403, f"user {name!r} has no access to repository {repo!r}")
    raise ApiError(403, f"user {name!r} has {level} access to {repo!r}; {needed} access is needed")


def user_level(repo: str, name: str) -> str | None:
    """The level *name* holds on *repo* (None for anonymous or no access)."""
    if not name:
        return None
    user = services().users().users.get(name)
    return None if user is None else user.level_for(repo)


def authorize_action(repo: str, operation: str, oid: str, size: int | None) -> str:
    """Check an action token (or, failing that, Basic credentials) for a transfer.

    A bad or expired token is 403, which the git-lfs client retries by asking the batch
    API again; no credentials at all is 401. *size* None (a download of an object that is
    not stored) fails every token the same way a token for another object does.
    """
    token = bearer_token()
    if token is not None:
        try:
            if size is None:
                services().signer.verify(token, repo, operation, oid, -1)
                raise TokenError(
                    f"action token does not grant {operation} of this object in this repository"
                )
            grant = services().signer.verify(token, repo, operation, oid, size)
        except TokenError as exc:
            raise ApiError(403, str(exc)) from None
        g.user = grant.user
        _still_allowed(repo, grant.user, "read" if operation == "download" else "write")
        return grant.user
    needed = "read" if operation == "download" else "write"
    return authorize(repo, needed)


def _still_allowed(repo: str, name: str, needed: str) -> None:
    """Raise 403 unless the user a token was issued to still exists and holds *needed*.

    A token is signed, not stored: without this, one issued before its user was removed
    (or lost the grant) kept working until it expired.
    """
    svc = services()
    if needed == "read" and svc.config.anonymous_read:
        return
    user = svc.users().users.get(name) if name else None
    if user is None:
        raise ApiError(403, f"action token of {name or 'an anonymous user'!r} is no longer valid")
    if level_rank(user.level_for(repo)) < level_rank(needed):
        raise ApiError(403, f"user {name!r} no longer has {needed} access to {repo!r}")


def client_address() -> str:
    """The client's address: nginx's X-Forwarded-For when our nginx sent the request."""
    if from_our_nginx():
        forwarded = request.headers.get("X-Forwarded-For", "")
        if forwarded:
            return forwarded
    return request.remote_addr or ""


def from_our_nginx() -> bool:
    """Whether the request carries the secret only our nginx config adds."""
    sent = request.headers.get("X-Lfs-Proxy-Auth", "")
    return bool(sent) and hmac.compare_digest(sent.encode(), services().proxy_secret.encode())


def base_url(repo: str) -> str:
    """`<server>/<repo>.git/info/lfs`, for action hrefs."""
    svc = services()
    if svc.config.public_url:
        root = svc.config.public_url.rstrip("/")
    else:
        scheme = request.scheme
        if from_our_nginx():
            scheme = request.headers.get("X-Forwarded-Proto", scheme)
        root = f"{scheme}://{request.host}"
    return f"{root}/{repo}.git/info/lfs"
