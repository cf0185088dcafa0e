"""Operations endpoints: `/healthz`, Prometheus-style `/metrics` and `/openapi.json`."""

from __future__ import annotations

from importlib import resources

from flask import Blueprint, Response

from lfs_server.metrics import CONTENT_TYPE
from lfs_server.web import lfs_response, services

bp = Blueprint("ops", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """200 when the store and the database answer."""
    svc = services()
    svc.locks.find("", limit=1)
    svc.metrics.counters()
    # No path: anyone may ask /healthz (issue 13).
    return lfs_response({"status": "ok"})


@bp.get("/metrics")
def metrics() -> Response:
    """Counters shared by all workers, plus the objects currently stored."""
    svc = services()
    count = total = 0
    for obj in svc.store.iter_objects():
        count += 1
        total += obj.size
    return Response(svc.metrics.render(count, total), mimetype=CONTENT_TYPE)


def openapi_text() -> str:
    """The OpenAPI 3 description of the HTTP API shipped in the package (openapi.json)."""
    return resources.files("lfs_server").joinpath("openapi.json").read_text(encoding="utf-8")


@bp.get("/openapi.json")
def openapi() -> Response:
    """The OpenAPI 3 description of this server's HTTP API."""
    return Response(openapi_text(), mimetype="application/json")
