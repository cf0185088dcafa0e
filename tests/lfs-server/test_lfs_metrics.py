"""`/metrics` (issue 24 item 7): prometheus_client, its multiprocess mode under gunicorn.

Read back with prometheus_client's own parser, as a Prometheus server would read the page.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest
import requests
from lfs_testlib import Api, start_server
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of a /metrics page."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def request_labels(endpoint: str, method: str, status: str, **more: str) -> tuple:
    return tuple(sorted({"endpoint": endpoint, "method": method, "status": status, **more}.items()))


def test_one_process_metrics_and_scrape_time_gauges(tmp_path: Path) -> None:
    # The app in one process (as tests build it): no PROMETHEUS_MULTIPROC_DIR, own registry.
    from lfs_server.metrics import METRICS, Metrics, StoreCollector

    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    metrics = Metrics(tmp_path)
    metrics.record_request("transfer.upload", "PUT", 200, 5, 0.003)
    metrics.record_request("transfer.upload", "PUT", 200, 7, 0.2)
    metrics.record_request('we"ird\\', "GET", 404, 0, 0.001)
    metrics.record_request("unknown", "BREW", 405, 0, 0.001)  # any method: one series
    counts = []

    def count() -> tuple[int, int]:
        counts.append(1)
        return 2, 12

    def down() -> None:
        raise OSError("the database is away")

    gauges = StoreCollector(lambda: None, down, count, tmp_path / "inventory.json")
    text = metrics.render(gauges).decode()
    found = samples(text)
    assert found[("lfs_upload_bytes_total", ())] == 12
    assert found[("lfs_objects_uploaded_total", ())] == 2
    assert found[("lfs_errors_total", (("endpoint", 'we"ird\\'), ("status", "404")))] == 1
    upload = request_labels("transfer.upload", "PUT", "200")
    assert found[("lfs_requests_total", upload)] == 2
    assert found[("lfs_requests_total", request_labels("unknown", "other", "405"))] == 1
    assert found[("lfs_request_duration_seconds_count", upload)] == 2
    assert found[("lfs_request_duration_seconds_sum", upload)] == pytest.approx(0.203)
    # Cumulative buckets: 3 ms is under 5 ms, 200 ms only under 250 ms.
    bucket = "lfs_request_duration_seconds_bucket"
    assert found[(bucket, request_labels("transfer.upload", "PUT", "200", le="0.005"))] == 1
    assert found[(bucket, request_labels("transfer.upload", "PUT", "200", le="0.1"))] == 1
    assert found[(bucket, request_labels("transfer.upload", "PUT", "200", le="0.25"))] == 2
    assert found[("lfs_store_up", ())] == 1 and found[("lfs_lock_database_up", ())] == 0
    assert found[("lfs_objects_stored", ())] == 2 and found[("lfs_stored_bytes", ())] == 12
    # Every family shown has its help and type from the one table.
    for family in text_string_to_metric_families(text):
        kind, help_text = METRICS[family.name + ("_total" if family.type == "counter" else "")]
        assert (family.type, family.documentation) == (kind, help_text), family.name
    # A second scrape within the minute takes the inventory from the cache.
    metrics.render(StoreCollector(lambda: None, lambda: None, count, tmp_path / "inventory.json"))
    assert counts == [1]


def test_workers_share_metrics_and_a_dead_workers_requests_leave(tmp_path: Path) -> None:
    srv = start_server()
    try:
        api = Api(srv)
        for i in range(6):
            api.upload("metrics/shared", os.urandom(100 + i))
        # /metrics needs no login (SECURITY.md): unchanged.
        r = requests.get(srv.url + "/metrics", timeout=10)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
        found = samples(r.text)
        upload = request_labels("transfer.upload", "PUT", "200")
        # Whichever worker answered the scrape, it counts the uploads every worker served.
        assert found[("lfs_requests_total", upload)] == 6
        assert found[("lfs_request_duration_seconds_count", upload)] == 6
        inf = request_labels("transfer.upload", "PUT", "200", le="+Inf")
        assert found[("lfs_request_duration_seconds_bucket", inf)] == 6
        assert found[("lfs_objects_uploaded_total", ())] == 6
        assert found[("lfs_requests_in_flight", ())] == 1  # the scrape itself
        assert found[("lfs_objects_stored", ())] == 6
        # No database behind the counters: each worker's own files, readable by the server
        # alone.
        run = srv.data / "run"
        folder = run / "prometheus"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert not list(run.glob("metrics.sqlite3*"))
        assert {p.suffix for p in folder.iterdir()} == {".db"}

        # A worker dies: gunicorn's child_exit drops its in-flight gauge, its counts stay.
        live = {int(p.stem.rsplit("_", 1)[1]) for p in folder.glob("gauge_livesum_*.db")}
        victim = max(live)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while (folder / f"gauge_livesum_{victim}.db").exists():
            assert time.monotonic() < deadline, "child_exit did not drop the dead worker's gauge"
            time.sleep(0.1)
        after = samples(requests.get(srv.url + "/metrics", timeout=10).text)
        assert after[("lfs_requests_total", upload)] == 6
        assert after[("lfs_requests_in_flight", ())] == 1
    finally:
        srv.stop()
