"""The Flask application factory: `create_app(config)` wires services and blueprints."""

from __future__ import annotations

import errno
import os
import sqlite3
import time
import uuid

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from lfs_server import batch_api, locks_api, ops_api, transfer_api
from lfs_server.accesslog import AccessLog
from lfs_server.authcache import KEY_ENV as AUTH_CACHE_KEY_ENV
from lfs_server.authcache import SharedAuthCache
from lfs_server.backends import open_locks, open_store
from lfs_server.backends.base import DatabaseUnavailable, StoreUnavailable, UnsafeStorePath
from lfs_server.config import Config
from lfs_server.loginlimit import LoginLimiter
from lfs_server.metrics import Metrics
from lfs_server.sqlitewal import classify_db_error
from lfs_server.tokens import TokenSigner, load_or_create_key, proxy_secret
from lfs_server.validation import ApiError
from lfs_server.web import Services, error_response, insufficient_storage


def create_app(config: Config) -> Flask:
    """Build the WSGI app for *config* (creates the data directories and key if missing)."""
    app = Flask("lfs_server", static_folder=None)
    # A URL with '//' is not a route: werkzeug would answer it with a 308 redirect, which
    # LFS clients do not follow for PUT/POST; they get a JSON 404 instead.
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = None
    # Flask would answer OPTIONS itself with an empty text/html 200; the LFS API has no
    # OPTIONS, so it gets the JSON 405 (with Allow) every other unknown method gets.
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    for path in (config.repos_dir, config.tmp_dir, config.run_dir):
        path.mkdir(parents=True, exist_ok=True)
    key = load_or_create_key(config.key_path)
    app.extensions["lfs"] = Services(
        config=config,
        store=open_store(config),
        signer=TokenSigner(key),
        locks=open_locks(config),
        proxy_secret=proxy_secret(key),
        metrics=Metrics(config.run_dir),
        shared_auth=SharedAuthCache(
            config.run_dir / "auth-cache.sqlite3", os.environ.get(AUTH_CACHE_KEY_ENV)
        ),
        login_limiter=LoginLimiter(
            config.run_dir / "logins.sqlite3", config.login_failures, config.login_failures
        )
        if config.login_failures
        else None,
    )
    for blueprint in (batch_api.bp, transfer_api.bp, locks_api.bp, ops_api.bp):
        app.register_blueprint(blueprint)
    app.wsgi_app = app.extensions["lfs"].metrics.count_in_flight(app.wsgi_app)  # type: ignore[method-assign]
    _install_hooks(app, AccessLog(config))
    return app


def _install_hooks(app: Flask, log: AccessLog) -> None:

    @app.before_request
    def _start() -> None:
        g.start = time.monotonic()
        g.request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        g.user = None
        g.repo = None

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        response = error_response(exc.status, exc.message, **exc.extra)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            response.headers["Retry-After"] = str(retry_after)
        return response

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        message = {
            404: f"no such endpoint: {request.method} {request.path}",
            405: f"method {request.method} is not allowed on {request.path}",
        }.get(status, exc.description or exc.name)
        response = error_response(status, message)
        allowed = getattr(exc, "valid_methods", None)
        if status == 405 and allowed:
            response.headers["Allow"] = ", ".join(allowed)
        return response

    @app.errorhandler(UnsafeStorePath)
    def _unsafe_path(exc: UnsafeStorePath) -> Response:
        app.logger.warning("refused a link in the store: %s", exc)
        return error_response(403, f"refused: {exc}")

    @app.errorhandler(OSError)
    def _os_error(exc: OSError) -> Response:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return insufficient_storage()
        return _crash(exc)

    @app.errorhandler(StoreUnavailable)
    @app.errorhandler(DatabaseUnavailable)
    def _unavailable(exc: Exception) -> Response:
        # The store or the database is down: a retryable 503, never a half-done change.
        app.logger.warning("%s (%s)", exc, exc.__cause__ or "no detail")
        response = error_response(503, str(exc))
        response.headers["Retry-After"] = "2"
        return response

    @app.errorhandler(sqlite3.Error)
    def _db_error(exc: sqlite3.Error) -> Response:
        # The lock database's error, or one of the node's own SQLite files (run/).
        svc = app.extensions["lfs"]
        kind = svc.locks.classify_error(exc) or classify_db_error(exc, svc.config.run_dir / "x")
        if kind == "busy":
            response = error_response(
                503,
                "the lock database is busy (another writer holds it); nothing was changed,"
                " retry in a moment",
            )
            response.headers["Retry-After"] = "1"
            return response
        if kind == "full":
            return insufficient_storage()
        return _crash(exc)

    @app.errorhandler(Exception)
    def _crash(exc: Exception) -> Response:
        app.logger.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "internal server error; the server log has the details")

    @app.after_request
    def _account(response: Response) -> Response:
        _drain_body()
        elapsed = time.monotonic() - g.get("start", time.monotonic())
        endpoint = request.endpoint or "unknown"
        nbytes = g.get("object_bytes") or response.content_length or 0
        response.headers["X-Request-Id"] = g.get("request_id", "")
        log.write(
            request_id=g.get("request_id") or "",
            user=g.get("user"),
            repo=g.get("repo"),
            method=request.method,
            path=request.path,
            status=response.status_code,
            nbytes=nbytes,
            time_ms=elapsed * 1000,
        )
        try:
            app.extensions["lfs"].metrics.record_request(
                endpoint, request.method, response.status_code, nbytes, elapsed
            )
        except Exception:  # metrics must never break a request
            app.logger.exception("could not update counters")
        return response


def _drain_body() -> None:
    """Read what is left of the request body before answering.

    gunicorn's sync worker closes the connection after each response; closing it with
    unread bytes makes the kernel reset it, and nginx, possibly still sending the body,
    then answers 502 instead of our response. nginx bounds API bodies (16m), and an
    upload body never reaches the app in nginx mode.
    """
    try:
        while request.stream.read(1 << 16):
            pass
    except (OSError, ValueError, HTTPException):
        pass
