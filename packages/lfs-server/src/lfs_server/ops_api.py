"""Operations endpoints: `/healthz`, Prometheus-style `/metrics` and `/openapi.json`."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from flask import Blueprint, Response, current_app

from lfs_server.metrics import CONTENT_TYPE, StoreCollector
from lfs_server.web import lfs_response, services

bp = Blueprint("ops", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """200 when the store and the database answer, 503 when either does not.

    The answer names each part's kind and whether it is reachable: never an endpoint,
    a path or a credential.
    """
    svc = services()
    store_ok = _reachable(svc.store.check)
    database_ok = _reachable(svc.locks.check)
    ok = store_ok and database_ok
    return lfs_response(
        {
            "status": "ok" if ok else "unavailable",
            "store": {"kind": svc.store.kind, "reachable": store_ok},
            "database": {
                "kind": svc.locks.kind,
                "reachable": database_ok,
            },
        },
        200 if ok else 503,
    )


def _reachable(check: Callable[[], None]) -> bool:
    try:
        check()
    except Exception:  # any failure means "not reachable"; the log has the details
        current_app.logger.warning("health check failed", exc_info=True)
        return False
    return True


@bp.get("/metrics")
def metrics() -> Response:
    """Every worker's request metrics, plus gauges asked now: the store and the lock
    database answering, the objects stored (counted at most once per INVENTORY_SECONDS:
    counting lists the whole store)."""
    svc = services()

    def count() -> tuple[int, int]:
        objects = total = 0
        for obj in svc.store.iter_objects():
            objects += 1
            total += obj.size
        return objects, total

    gauges = StoreCollector(
        svc.store.check, svc.locks.check, count, svc.config.run_dir / "metrics-inventory.json"
    )
    return Response(svc.metrics.render(gauges), mimetype=CONTENT_TYPE)


def openapi_text() -> str:
    """The OpenAPI 3 description of the HTTP API shipped in the package (openapi.json)."""
    return resources.files("lfs_server").joinpath("openapi.json").read_text(encoding="utf-8")


@bp.get("/openapi.json")
def openapi() -> Response:
    """The OpenAPI 3 description of this server's HTTP API."""
    return Response(openapi_text(), mimetype="application/json")
