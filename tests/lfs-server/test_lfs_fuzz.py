"""Hostile input against the live server (nginx + gunicorn), driven by the shipped OpenAPI
description: malformed JSON, wrong types, huge values, unicode and traversal in repository
and lock paths, wrong content types and methods, real and forged tokens.

Every response must be documented for its operation in openapi.json and match the schema
there; every error must be the git-lfs JSON error body; no 5xx at all.

CI runs LFS_FUZZ_EXAMPLES (default 100) examples per operation, derandomized when CI is set.
A longer run:  LFS_FUZZ_EXAMPLES=3000 python -m pytest tests/lfs-server/test_lfs_fuzz.py -s
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import os
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lfs_server.ops_api import openapi_text
from lfs_server.tokens import TokenSigner
from lfs_testlib import LFS_MEDIA, USERS, Api, Server, oid_of

pytestmark = pytest.mark.nginx

SPEC: dict[str, Any] = json.loads(openapi_text())
EXAMPLES = int(os.environ.get("LFS_FUZZ_EXAMPLES", "100"))
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "PROPFIND"]
STATS: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
STORED = os.urandom(3000)  # uploaded once, so downloads and Ranges have something to hit

# --- a small JSON-schema check for the subset openapi.json uses ----------------------


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = SPEC
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def conforms(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Problems with *value* against *schema* (empty when it conforms)."""
    schema = resolve(schema)
    if value is None:
        return [] if schema.get("nullable") or not schema else [f"{where} is null"]
    kind = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    if kind and not checks[kind](value):
        return [f"{where} should be {kind}, got {value!r:.80}"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}={value!r} not in {schema['enum']}")
    if kind == "string":
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{where} is too short")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where}={value!r:.80} does not match {schema['pattern']}")
    if kind == "object":
        problems += [
            f"{where}.{k} is missing" for k in schema.get("required", []) if k not in value
        ]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problems += conforms(value[key], sub, f"{where}.{key}")
    if kind == "array":
        for i, item in enumerate(value):
            problems += conforms(item, schema.get("items", {}), f"{where}[{i}]")
    return problems


def operation(operation_id: str) -> tuple[str, str, dict[str, Any]]:
    for path, item in SPEC["paths"].items():
        for method, op in item.items():
            if method != "parameters" and op["operationId"] == operation_id:
                return path, method.upper(), op
    raise KeyError(operation_id)


def check_response(op_id: str, method: str, status: int, headers: Any, body: bytes) -> None:
    """The promises: no 5xx, errors are git-lfs JSON, documented statuses match the spec."""
    STATS[op_id][status] += 1
    assert status < 500, (status, body[:300])
    _path, right_method, op = operation(op_id)
    if status >= 400 and method != "HEAD":
        assert headers.get("Content-Type", "").startswith(LFS_MEDIA), (status, headers, body[:200])
        error = json.loads(body)
        problems = conforms(error, {"$ref": "#/components/schemas/Error"})
        assert not problems, (problems, error)
    if method != right_method:
        return
    documented = op["responses"]
    assert str(status) in documented, f"{op_id}: status {status} is not in openapi.json"
    response = documented[str(status)]
    if "$ref" in response:
        response = resolve(response)
    media = response.get("content", {}).get(LFS_MEDIA)
    if media is not None:
        problems = conforms(json.loads(body), media["schema"])
        assert not problems, (op_id, status, problems)


# --- what hostile clients send -------------------------------------------------------

TRICKY = [
    "..",
    "../..",
    "%2e%2e",
    "..%2f..%2fetc",
    "/etc/passwd",
    "a/../../b",
    "..\\..\\windows",
    "%00",
    "a%00b",
    "%zz",
    "%",
    ".git",
    "x.git",
    "a/.git/b",
    "con",
    " ",
    "ünïcödé/ré",
    "🙂/📦",
    "a" * 300,
    "/".join(["d"] * 40),
    "fuzz/ok",
    "fuzz/ok.git",
    "team/x.git",
]
hostile_text = st.one_of(
    st.sampled_from(TRICKY),
    st.text(max_size=30),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=200),
)
# Strings only JSON can carry: lone UTF-16 surrogates (`"\ud800"`), which no UTF-8 text
# holds; json.dumps sends them as escapes (issue 24 item 8).
surrogate_text = st.text(
    alphabet=st.one_of(st.characters(categories=["Cs"]), st.characters(codec="utf-8")),
    min_size=1,
    max_size=12,
).filter(lambda t: any("\ud800" <= c <= "\udfff" for c in t))
json_text = st.one_of(hostile_text, surrogate_text)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**62, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    json_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=8), surrogate_text), inner, max_size=4)
    ),
    max_leaves=10,
)
oids = st.one_of(
    st.just(oid_of(STORED)), st.binary(min_size=8, max_size=8).map(oid_of), hostile_text
)
sizes = st.one_of(st.just(len(STORED)), st.integers(min_value=-5, max_value=2**70), json_values)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], weight: int) -> Any:
    """*good* *weight* times out of *weight* + 1, else *bad* (one_of alone weighs branches
    evenly, and hostile values would drown out the requests that reach deep checks)."""
    return st.integers(0, weight).flatmap(lambda i: bad if i == 0 else good)


def maybe(valid: st.SearchStrategy[Any], weight: int = 2) -> st.SearchStrategy[Any]:
    """Mostly well-formed values (*weight* to 1), sometimes anything at all."""
    return mostly(valid, json_values, weight)


object_specs = st.fixed_dictionaries(
    {"oid": maybe(oids), "size": maybe(sizes)}, optional={"extra": json_values}
)
refs = st.one_of(
    st.none(),
    st.fixed_dictionaries({"name": maybe(st.one_of(st.just("refs/heads/main"), surrogate_text))}),
)
BODIES: dict[str, st.SearchStrategy[Any]] = {
    "batch": st.fixed_dictionaries(
        {
            "operation": maybe(st.sampled_from(["upload", "download"])),
            "objects": maybe(st.lists(maybe(object_specs), max_size=6)),
        },
        optional={
            "transfers": maybe(st.lists(st.sampled_from(["basic", "tus", "ssh"]), max_size=3)),
            "ref": maybe(refs),
            "hash_algo": maybe(st.sampled_from(["sha256", "sha512"])),
        },
    ),
    "verify": st.fixed_dictionaries({"oid": maybe(oids), "size": maybe(sizes)}),
    "createLock": st.fixed_dictionaries({"path": maybe(json_text)}, optional={"ref": maybe(refs)}),
    "verifyLocks": st.fixed_dictionaries(
        {},
        optional={
            "cursor": maybe(st.integers(0, 10**20).map(str)),
            "limit": maybe(st.integers(-3, 10**20)),
            "ref": maybe(refs),
        },
    ),
    "unlock": st.fixed_dictionaries({}, optional={"force": maybe(st.booleans()), "ref": refs}),
}


def encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def bodies(op_id: str) -> st.SearchStrategy[bytes]:
    shaped = BODIES.get(op_id, json_values)
    return st.one_of(
        shaped.map(encode),
        shaped.map(encode),
        json_values.map(encode),
        st.binary(max_size=300),
        shaped.map(lambda v: encode(v)[: max(1, len(encode(v)) // 2)]),  # truncated JSON
        st.sampled_from([b"", b"null", b"[" * 100000, b'{"a":' * 50000, b"\xff\xfe{}", b"{}" * 10]),
    )


CONTENT_TYPES = [
    LFS_MEDIA,
    LFS_MEDIA + "; charset=utf-8",
    "application/json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/octet-stream",
    "garbage/\x7f",
    None,
]


def auth_headers(signer: TokenSigner) -> st.SearchStrategy[dict[str, str]]:
    def basic(user: str, password: str) -> dict[str, str]:
        return {
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        }

    writer = st.just(basic("alice", USERS["alice"][0]))
    expired = signer.issue("fuzz/ok", "upload", "a" * 64, 1, "alice", 1)
    others = st.one_of(
        st.just({}),
        st.sampled_from(["alice", "reader", "teamonly", "boss"]).map(
            lambda u: basic(u, USERS[u][0])
        ),
        st.just(basic("alice", "wrong")),
        hostile_text.map(
            lambda t: {"Authorization": "Basic " + t.encode("utf-8", "replace").hex()}
        ),
        hostile_text.map(lambda t: {"Authorization": "Bearer " + t.encode().hex()}),
        st.just({"Authorization": "Bearer " + expired}),
    )
    return mostly(writer, others, 2)


# --- the live server and the requests -----------------------------------------------


@pytest.fixture(scope="module")
def target(server: Server) -> Iterator[tuple[Server, TokenSigner]]:
    Api(server).upload("fuzz/ok", STORED)
    yield server, TokenSigner((server.data / "secret.key").read_bytes())
    total = sum(sum(c.values()) for c in STATS.values())
    print(f"\nfuzz: {total} requests")
    for op_id, counts in sorted(STATS.items()):
        print(f"  {op_id:12s} {sum(counts.values()):6d}  {dict(sorted(counts.items()))}")


def send(
    server: Server, method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, Any, bytes]:
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(key, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def url_path(template: str, values: dict[str, str]) -> str:
    path = template
    for name, value in values.items():
        # '/' and '%' stay as sent: repo paths contain slashes, and raw escapes are a test.
        # A lone surrogate goes out as the bytes Python would make of it (%ED%A0%80).
        quoted = urllib.parse.quote(value, safe="/%", errors="surrogatepass")
        path = path.replace("{" + name + "}", quoted)
    return path


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
FUZZED = [
    "batch",
    "download",
    "upload",
    "verify",
    "listLocks",
    "createLock",
    "verifyLocks",
    "unlock",
]


@pytest.mark.parametrize("op_id", FUZZED)
@SETTINGS
@given(data=st.data())
def test_fuzz_operation(
    target: tuple[Server, TokenSigner], op_id: str, data: st.DataObject
) -> None:
    server, signer = target
    template, right_method, _op = operation(op_id)
    method = data.draw(st.sampled_from([right_method] * 3 * len(METHODS) + METHODS))
    good_repos = st.sampled_from(["fuzz/ok", "fuzz/ok.git", "fuzz/other", "team/a"])
    repo = data.draw(mostly(good_repos, hostile_text, 3))
    oid = data.draw(maybe(oids, 3).map(as_text))
    size = data.draw(maybe(st.integers(0, 2**70).map(str), 3).map(as_text))
    lock_id = data.draw(maybe(st.integers(0, 50).map(str), 3).map(as_text))
    path = url_path(template, {"repo": repo, "oid": oid, "size": size, "id": lock_id})
    if op_id == "listLocks":
        query = data.draw(
            st.dictionaries(
                st.sampled_from(["path", "id", "cursor", "limit", "refspec", "x"]),
                st.one_of(st.integers(-5, 2**70).map(str), hostile_text),
                max_size=4,
            )
        )
        path += "?" + urllib.parse.urlencode(query)
    headers = dict(data.draw(auth_headers(signer)))
    if op_id in ("download", "upload") and data.draw(st.booleans()):
        # A real token for exactly this request (when the values allow one).
        operation_name = "download" if op_id == "download" else "upload"
        number = int(size) if size.isdigit() else len(STORED)
        token = signer.issue(repo, operation_name, oid, number, "alice", int(time.time()) + 60)
        headers["Authorization"] = f"Bearer {token}"
    if op_id == "download":
        rng = data.draw(
            st.one_of(
                st.none(),
                st.tuples(st.integers(0, 5000), st.integers(0, 5000)).map(
                    lambda t: f"bytes={t[0]}-{t[1]}"
                ),
                hostile_text.map(lambda t: "bytes=" + t.encode().hex()),
            )
        )
        if rng:
            headers["Range"] = rng
    content_type = data.draw(st.sampled_from(CONTENT_TYPES))
    if content_type:
        headers["Content-Type"] = content_type
    body = data.draw(st.binary(max_size=5000) if op_id == "upload" else bodies(op_id))
    status, resp_headers, resp_body = send(server, method, path, headers, body)
    check_response(op_id, method, status, resp_headers, resp_body)


def test_openapi_document_is_served_and_covers_every_route(server: Server, tmp_path) -> None:
    served = requests.get(server.url + "/openapi.json", timeout=10)
    assert served.status_code == 200
    assert served.json() == SPEC
    assert SPEC["openapi"].startswith("3.")
    from lfs_server.app import create_app
    from lfs_server.config import Config

    app = create_app(Config(data_dir=tmp_path))
    routes = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule).replace("{lock_id}", "{id}")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            routes.add((path, method.lower()))
    # nginx's upload check: an `internal` location, not reachable by clients (tested).
    routes.discard(("/_lfs/upload-check", "get"))
    documented = {
        (path, method)
        for path, item in SPEC["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert routes == documented
    # Every $ref resolves, and every operation documents its errors with the Error schema.
    text = json.dumps(SPEC)
    for target_ref in set(re.findall(r'"\$ref": "([^"]+)"', text)):
        resolve({"$ref": target_ref})


# --- byte level: what http.client refuses to send ------------------------------------

# Any byte a header value or request target may physically carry (no CR/LF: they end the
# line; NUL and other controls included), weighted towards non-ASCII.
header_bytes = st.one_of(
    st.binary(max_size=120).map(lambda b: bytes(c for c in b if c not in (10, 13)) or b"\xb9"),
    st.lists(st.integers(0x20, 0xFF).filter(lambda c: c != 0x7F), max_size=120).map(bytes),
)
high_bytes = st.lists(st.integers(0x80, 0xFF), min_size=1, max_size=12).map(bytes)


def send_raw(server: Server, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send *request* as is; return (status, lower-cased headers, body)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while more := sock.recv(65536):
            answer += more
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers, body


@SETTINGS
@given(data=st.data())
def test_fuzz_bytes_in_headers_and_paths(target: tuple[Server, TokenSigner], data: Any) -> None:
    server, _signer = target
    method = data.draw(st.sampled_from(["GET", "PUT", "POST", "HEAD"]))
    oid = oid_of(STORED)
    where = data.draw(
        st.sampled_from(
            [
                f"/fuzz/ok.git/info/lfs/objects/{oid}",
                f"/fuzz/ok.git/info/lfs/upload/{oid}/{len(STORED)}",
                "/fuzz/ok.git/info/lfs/objects/batch",
                "/fuzz/ok.git/info/lfs/locks",
                "/fuzz/ok.git/info/lfs/locks/verify",
            ]
        )
    )
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(1, len(where)))
        where = where[:cut].encode() + data.draw(high_bytes) + where[cut:].encode()
    else:
        where = where.encode()
    if data.draw(st.booleans()):
        where += b"?limit=" + data.draw(high_bytes) + b"&path=" + data.draw(high_bytes)
    scheme = data.draw(st.sampled_from([b"Bearer ", b"Basic ", b"", b"bearer "]))
    auth = scheme + data.draw(header_bytes)
    extra_name = data.draw(st.sampled_from([b"Content-Type", b"X-Request-Id", b"Range", b"Host"]))
    extra = data.draw(header_bytes)
    body = data.draw(st.binary(max_size=200))
    request = (
        method.encode() + b" " + where + b" HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n"
        b"Authorization: " + auth + b"\r\n" + extra_name + b": " + extra + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    status, headers, resp_body = send_raw(server, request)
    STATS["bytes"][status] += 1
    assert status < 500, (status, request[:300], resp_body[:300])
    if status >= 400 and method != "HEAD":
        assert headers.get("content-type", "").startswith(LFS_MEDIA), (status, headers)
        assert isinstance(json.loads(resp_body).get("message"), str)


# --- issue 24 item 8: strings JSON can hold but UTF-8 cannot, in every field ----------

JSON_FIELDS = {
    "batch": [
        ("objects/batch", {"operation": "S", "objects": []}),
        ("objects/batch", {"operation": "upload", "objects": [{"oid": "S", "size": 1}]}),
        (
            "objects/batch",
            {"operation": "upload", "objects": [{"oid": oid_of(STORED), "size": "S"}]},
        ),
        ("objects/batch", {"operation": "download", "objects": [], "ref": {"name": "S"}}),
        ("objects/batch", {"operation": "download", "objects": [], "transfers": ["S"]}),
        ("objects/batch", {"operation": "download", "objects": [], "hash_algo": "S"}),
        ("objects/batch", {"operation": "download", "objects": [], "S": 1}),
    ],
    "verify": [("verify", {"oid": "S", "size": 1})],
    "locks": [
        ("locks", {"path": "S"}),
        ("locks", {"path": "a.bin", "ref": {"name": "S"}}),
        ("locks/verify", {"cursor": "S"}),
        ("locks/verify", {"ref": {"name": "S"}}),
        ("locks/1/unlock", {"ref": {"name": "S"}}),
        ("locks/1/unlock", {"force": "S"}),
    ],
}
CASES = [(where, body) for cases in JSON_FIELDS.values() for where, body in cases]


@pytest.mark.parametrize("surrogate", ["\ud800", "x\udfff.txt", "\ud83d"])
@pytest.mark.parametrize(
    ("where", "body"), CASES, ids=[f"{w}:{json.dumps(b)[:40]}" for w, b in CASES]
)
def test_lone_surrogates_are_4xx_lfs_json_in_every_field(
    target: tuple[Server, TokenSigner], where: str, body: dict[str, Any], surrogate: str
) -> None:
    """`{"path": "\\ud800.txt"}` was a 500: a string no UTF-8 text can hold reached
    SQLite or the response encoder. Every JSON field of every endpoint answers 4xx."""
    server, _signer = target
    text = json.dumps(body).replace('"S"', json.dumps(surrogate))
    assert "\\ud" in text
    token = base64.b64encode(f"alice:{USERS['alice'][0]}".encode()).decode()
    headers = {"Authorization": f"Basic {token}", "Content-Type": LFS_MEDIA}
    status, resp_headers, resp_body = send(
        server, "POST", f"/fuzz/ok.git/info/lfs/{where}", headers, text.encode()
    )
    assert 400 <= status < 500, (status, resp_body[:300])
    assert resp_headers.get("Content-Type", "").startswith(LFS_MEDIA), resp_headers
    assert isinstance(json.loads(resp_body).get("message"), str)
