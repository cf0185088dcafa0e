"""Small uploads in one app request (issue 25): nginx holds a body under 100,000 bytes in
memory and sends it whole; the app checks, verifies, fsyncs and publishes it. Larger ones
still pass nginx's upload check before nginx reads their body into a file.
"""

from __future__ import annotations

import os

import pytest
import requests
from lfs_testlib import Api, Server, assert_lfs_error, basic, oid_of
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.nginx


@pytest.fixture
def api(server: Server) -> Api:
    return Api(server)


def app_requests(server: Server, endpoint: str) -> float:
    """How many requests the app has answered at *endpoint* (all statuses), from /metrics."""
    text = requests.get(server.url + "/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "lfs_requests"
        for sample in family.samples
        if sample.name == "lfs_requests_total" and sample.labels["endpoint"] == endpoint
    )


def stored(server: Server, repo: str, oid: str) -> bytes | None:
    path = server.data / "repos" / f"{repo}.git" / "objects" / oid[:2] / oid[2:4] / oid
    return path.read_bytes() if path.exists() else None


def test_a_small_upload_is_one_app_request_a_large_one_is_checked_first(
    api: Api, server: Server
) -> None:
    checks, puts = (
        app_requests(server, "transfer.upload_check"),
        app_requests(server, "transfer.upload"),
    )
    small = os.urandom(99_999)  # the largest that goes whole
    api.upload("small/one", small)
    assert stored(server, "small/one", oid_of(small)) == small
    assert app_requests(server, "transfer.upload") == puts + 1
    assert app_requests(server, "transfer.upload_check") == checks
    large = os.urandom(100_000)
    api.upload("small/one", large)
    assert stored(server, "small/one", oid_of(large)) == large
    assert app_requests(server, "transfer.upload_check") == checks + 1
    empty = b""
    api.upload("small/one", empty)
    assert stored(server, "small/one", oid_of(empty)) == b""


def test_a_refused_small_upload_stores_and_leaves_nothing(api: Api, server: Server) -> None:
    data = os.urandom(5000)
    oid = oid_of(data)
    url = f"{server.lfs('small/refused')}/upload/{oid}/{len(data)}"
    r = requests.put(url, data=data, timeout=10)
    assert_lfs_error(r, 401, "credentials are required")
    assert r.headers["LFS-Authenticate"].startswith("Basic")
    up = api.upload_action("small/refused", oid, len(data))["upload"]
    r = requests.put(url, data=data[:-1] + b"!", headers=up["header"], timeout=10)
    assert_lfs_error(r, 400, "SHA-256")
    r = requests.put(url, data=data + b"!", headers=up["header"], timeout=10)
    assert_lfs_error(r, 400, "Content-Length")
    r = requests.put(url, data=data, headers={"Authorization": "Bearer 1.YQ.00"}, timeout=10)
    assert_lfs_error(r, 403, "action token")
    assert stored(server, "small/refused", oid) is None
    # Neither nginx's body folder nor the app's temp folder keeps anything of them.
    assert list((server.data / "tmp/body").iterdir()) == []
    assert list((server.data / "tmp").glob("upload-*")) == []
    # The inline location is nginx's own: not reachable from outside.
    r = requests.put(server.url + "/_lfs/inline-upload", data=b"x", headers=basic("alice"))
    assert r.status_code == 404


def test_a_client_cannot_mark_its_upload_inline(api: Api, server: Server) -> None:
    # Only nginx's inline location says a body comes whole; the header from a client is
    # dropped, so a large upload still takes the checked path with its body file.
    data = os.urandom(150_000)
    oid = oid_of(data)
    up = api.upload_action("small/spoof", oid, len(data))["upload"]
    headers = {**up["header"], "X-Lfs-Body-Inline": "1"}
    r = requests.put(up["href"], data=data, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert stored(server, "small/spoof", oid) == data
