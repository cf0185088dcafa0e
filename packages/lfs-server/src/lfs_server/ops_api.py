"""Operations endpoints: `/healthz`, Prometheus-style `/metrics` and `/openapi.json`."""

from __future__ import annotations

from importlib import resources

from flask import Blueprint, Response

from lfs_server.web import lfs_response, services

bp = Blueprint("ops", __name__)

_HELP = {
    "lfs_requests_total": "HTTP requests answered, by endpoint, method and status",
    "lfs_errors_total": "requests answered with a 4xx/5xx status, by endpoint and status",
    "lfs_upload_bytes_total": "bytes of objects verified and stored",
    "lfs_download_bytes_total": "bytes of objects handed out for download (full size per request)",
    "lfs_objects_uploaded_total": "objects verified and stored",
}


@bp.get("/healthz")
def healthz() -> Response:
    """200 when the store and the database answer."""
    svc = services()
    svc.locks.counters()
    return lfs_response({"status": "ok", "store": str(svc.store.repos_dir)})


@bp.get("/metrics")
def metrics() -> Response:
    """Counters shared by all workers, plus the objects currently stored."""
    svc = services()
    lines: list[str] = []
    seen: set[str] = set()
    for name, labels, value in svc.locks.counters():
        if name not in seen:
            seen.add(name)
            lines.append(f"# HELP {name} {_HELP.get(name, name)}")
            lines.append(f"# TYPE {name} counter")
        lines.append(f"{name}{{{labels}}} {value:.0f}" if labels else f"{name} {value:.0f}")
    count = total = 0
    for obj in svc.store.iter_objects():
        count += 1
        total += obj.size
    lines += [
        "# HELP lfs_objects_stored objects in the store",
        "# TYPE lfs_objects_stored gauge",
        f"lfs_objects_stored {count}",
        "# HELP lfs_stored_bytes bytes in the store",
        "# TYPE lfs_stored_bytes gauge",
        f"lfs_stored_bytes {total}",
    ]
    return Response("\n".join(lines) + "\n", mimetype="text/plain; version=0.0.4")


def openapi_text() -> str:
    """The OpenAPI 3 description of the HTTP API shipped in the package (openapi.json)."""
    return resources.files("lfs_server").joinpath("openapi.json").read_text(encoding="utf-8")


@bp.get("/openapi.json")
def openapi() -> Response:
    """The OpenAPI 3 description of this server's HTTP API."""
    return Response(openapi_text(), mimetype="application/json")
