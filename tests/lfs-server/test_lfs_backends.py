"""The backends package (issue 24 item 4): every registered backend holds every operation
of its Protocol, nothing outside `lfs_server.backends` asks which backend it has, and the
API works in-process (Flask's test client, no nginx) on what the Protocols give it."""

from __future__ import annotations

import base64
import hashlib
import importlib
import inspect
import io
import os
import re
import tokenize
from pathlib import Path
from typing import Any

import pytest
from lfs_server import backends
from lfs_server.app import create_app
from lfs_server.backends import base, localfs
from lfs_server.config import Config
from lfs_server.users import load_users

SRC = Path(backends.__file__).resolve().parents[1]


def _members(protocol: type) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


def _class(path: str) -> type:
    module, _, name = path.partition(":")
    found: type = getattr(importlib.import_module(module), name)
    return found


@pytest.mark.parametrize(
    ("registry", "protocol"),
    [
        (backends.OBJECT_STORES, base.ObjectStore),
        (backends.LOCK_STORES, base.LockStore),
        (backends.USER_STORES, base.UserStore),
    ],
    ids=["object stores", "lock stores", "user stores"],
)
def test_every_registered_backend_has_every_protocol_operation(
    registry: dict[str, str], protocol: type
) -> None:
    wanted = _members(protocol) - {"users", "tmp_dir", "location"}  # set per instance
    for name, path in registry.items():
        cls = _class(path)
        missing = sorted(m for m in wanted if not hasattr(cls, m))
        assert not missing, f"backend {name!r} ({path}) lacks {missing}"
        assert callable(getattr(cls, "from_config", None)), f"{path} has no from_config"
        for method in wanted:
            ours, theirs = getattr(cls, method), getattr(protocol, method, None)
            if callable(theirs) and callable(ours):
                want = list(inspect.signature(theirs).parameters)
                got = list(inspect.signature(ours).parameters)
                assert got[: len(want)] == want, f"{path}.{method}{got} != Protocol {want}"


# What only the backends package may ask: which backend is configured, or which one an
# object is. nginx.py renders the S3 proxy location of the nginx config (a deployment
# file, not a request); migrate is `--to s3` by definition.
_ASKS = re.compile(
    r"config \. storage\b|\. database_url\b|s3_transfer|isinstance \([^)]*(Store|DB)\b"
    r"|getattr \( [^)]*locks|\bS3Store\b|\bPg(Lock|User)DB\b"
    r"|\b(s3|postgres|localfs|sqlite|userfile) import\b"
)
_ALLOWED = {
    "config.py": None,  # the settings themselves
    "nginx.py": {"config . storage"},
    "cli.py": {"S3Store", "s3 import"},  # `migrate --to s3` builds its destination by name
    "migrate.py": {"S3Store", "s3 import"},
    # Re-exports of the names other code imported before the backends package.
    "storage.py": {"localfs import"},
    "locks.py": {"sqlite import"},
    "users.py": {"userfile import"},
}


def _code_lines(path: Path) -> dict[int, str]:
    """Each line's code tokens joined by spaces: no strings, docstrings or comments."""
    lines: dict[int, list[str]] = {}
    skip = {tokenize.STRING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE}
    skip |= {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    with path.open("rb") as fh:
        for token in tokenize.tokenize(fh.readline):
            if token.type not in skip and token.string.strip():
                lines.setdefault(token.start[0], []).append(token.string)
    return {number: " ".join(words) for number, words in lines.items()}


def test_no_module_outside_backends_asks_which_backend_it_has() -> None:
    found = []
    for path in sorted(SRC.glob("*.py")):
        allowed = _ALLOWED.get(path.name, set())
        if allowed is None:
            continue
        for number, code in _code_lines(path).items():
            for match in _ASKS.finditer(code):
                if match.group(0) not in allowed:
                    found.append(f"{path.name}:{number}: {code}")
    assert not found, "\n".join(found)
    # The pattern finds what it must (one line of each kind the refactor removed).
    probes = [
        "if config.storage == 's3':",
        "isinstance(svc.store, Store)",
        "getattr(app.extensions['lfs'].locks, 'path', Path())",
        "if self.config.database_url:",
        "from lfs_server.backends.s3 import S3Store",
    ]
    for probe in probes:
        tokens = tokenize.generate_tokens(io.StringIO(probe).readline)
        code = " ".join(t.string for t in tokens if t.type != tokenize.STRING and t.string.strip())
        assert _ASKS.search(code), probe


def test_an_added_backend_is_one_module_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store registered under a new name is what `open_store` builds, and the local
    store's module alone is enough to be one."""
    module = tmp_path / "mirror_store.py"
    module.write_text(
        "from lfs_server.backends.localfs import Store\n"
        "class Mirror(Store):\n"
        "    kind = 'mirror'\n"
        "    @classmethod\n"
        "    def from_config(cls, config):\n"
        "        return cls(config.root / 'mirror', config.tmp_dir)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backends.OBJECT_STORES, "mirror", "mirror_store:Mirror")
    store = backends.open_store(Config(data_dir=tmp_path / "data"), "mirror")
    assert store.kind == "mirror" and store.location == str(tmp_path / "data" / "mirror")
    with pytest.raises(ValueError, match="no object store backend named 'nope'; known: 'local'"):
        backends.open_store(Config(data_dir=tmp_path / "data"), "nope")


# --- the API in-process (stream mode: Flask reads and sends the bodies) -------------


@pytest.fixture
def client(tmp_path: Path) -> Any:
    config = Config(data_dir=tmp_path, body_mode="stream")
    users = load_users(config)
    users.add("alice", "pw", {"*": "admin"})
    users.save()
    app = create_app(config)
    app.config["TESTING"] = True
    return app.test_client()


AUTH = {"Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()}


def _action(client: Any, operation: str, data: bytes) -> dict[str, Any]:
    oid = hashlib.sha256(data).hexdigest()
    r = client.post(
        "/in/proc.git/info/lfs/objects/batch",
        json={"operation": operation, "objects": [{"oid": oid, "size": len(data)}]},
        headers=AUTH,
    )
    assert r.status_code == 200, r.data
    actions: dict[str, Any] = r.json["objects"][0]["actions"]
    for action in actions.values():
        action["href"] = "/" + action["href"].split("/", 3)[3]
    return actions


def test_in_process_upload_verify_download_ranges(client: Any) -> None:
    data = os.urandom(70_000)
    up = _action(client, "upload", data)
    assert (
        client.put(up["upload"]["href"], data=data, headers=up["upload"]["header"]).status_code
        == 200
    )
    # The PUT's 200 means verified and stored: the batch names no verify action, and a
    # client that verifies anyway (Basic credentials) is told the object is there.
    assert set(up) == {"upload"}
    verify = client.post(
        up["upload"]["href"].split("/upload/")[0] + "/verify",
        json={"oid": hashlib.sha256(data).hexdigest(), "size": len(data)},
        headers=AUTH,
    )
    assert verify.status_code == 200, verify.data
    down = _action(client, "download", data)["download"]
    whole = client.get(down["href"], headers=down["header"])
    assert whole.status_code == 200 and whole.data == data
    part = client.get(down["href"], headers={**down["header"], "Range": "bytes=1000-1999"})
    assert part.status_code == 206 and part.data == data[1000:2000]
    assert part.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    tail = client.get(down["href"], headers={**down["header"], "Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.data == data[-10:]
    past = client.get(down["href"], headers={**down["header"], "Range": f"bytes={len(data)}-"})
    assert past.status_code == 416 and "range" in past.json["message"]
    head = client.head(down["href"], headers=down["header"])
    assert head.status_code == 200 and head.headers["Content-Length"] == str(len(data))
    health = client.get("/healthz").json
    assert health["store"]["kind"] == "local" and health["database"]["kind"] == "sqlite"


def test_in_process_link_planted_in_the_store_is_never_served(client: Any, tmp_path: Path) -> None:
    data = b"secret elsewhere"
    up = _action(client, "upload", data)
    client.put(up["upload"]["href"], data=data, headers=up["upload"]["header"])
    oid = hashlib.sha256(data).hexdigest()
    stored = tmp_path / "repos/in/proc.git/objects" / oid[:2] / oid[2:4] / oid
    outside = tmp_path / "outside"
    outside.write_bytes(data)
    stored.chmod(0o644)
    stored.unlink()
    stored.symlink_to(outside)
    r = client.post(
        "/in/proc.git/info/lfs/objects/batch",
        json={"operation": "download", "objects": [{"oid": oid, "size": len(data)}]},
        headers=AUTH,
    )
    assert r.json["objects"][0]["error"]["code"] == 404


@pytest.fixture(params=["openat2", "one component at a time"])
def local_store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: Any) -> Any:
    """The local store, finding object folders with openat2 or without it."""
    if request.param != "openat2":
        monkeypatch.setattr(localfs, "_libc", None)
    elif localfs._libc is None:
        pytest.skip("this system has no openat2 (Linux >= 5.6)")
    store = localfs.Store(tmp_path / "repos", tmp_path / "tmp")
    yield store
    if request.param == "openat2" and localfs._libc is None:
        pytest.skip("openat2 was refused here (seccomp?): the fallback served this test")


def _publish(store: Any, data: bytes, repo: str = "r") -> Path:
    oid = hashlib.sha256(data).hexdigest()
    store.publish_stream(io.BytesIO(data), repo, oid, len(data))
    path: Path = store.object_path(repo, oid)
    return path


def test_local_publish_renames_through_no_link_planted_in_the_store(
    local_store: Any, tmp_path: Path
) -> None:
    data = b"first object"
    stored = _publish(local_store, data)
    # The object's fan-out folders exist now; move one outside and link it back.
    outside = tmp_path / "outside"
    outside.mkdir()
    fanout = stored.parent.parent
    fanout.rename(outside / fanout.name)
    fanout.symlink_to(outside / fanout.name, target_is_directory=True)
    before = {p: p.stat().st_ino for p in outside.rglob("*")}
    with pytest.raises(base.UnsafeStorePath, match="symbolic link"):
        _publish(local_store, data)
    # A repository folder that is a link is refused before any folder is made through it.
    (tmp_path / "repos/linked.git").symlink_to(outside, target_is_directory=True)
    with pytest.raises(base.UnsafeStorePath, match="symbolic link"):
        _publish(local_store, b"second object", repo="linked")
    assert {p: p.stat().st_ino for p in outside.rglob("*")} == before
    assert list((tmp_path / "tmp").iterdir()) == []


def test_local_objects_are_read_only_for_all_whatever_the_umask(local_store: Any) -> None:
    old = os.umask(0o077)
    try:
        stored = _publish(local_store, b"read by nginx's workers")
    finally:
        os.umask(old)
    assert stored.stat().st_mode & 0o777 == 0o444
    assert stored.read_bytes() == b"read by nginx's workers"
    for folder in (stored.parent, stored.parent.parent, local_store.repo_dir("r")):
        assert folder.stat().st_mode & 0o755 == 0o755, folder


def test_users_added_by_the_cli_are_seen_without_a_restart(client: Any, tmp_path: Path) -> None:
    bob = {"Authorization": "Basic " + base64.b64encode(b"bob:pw2").decode()}
    assert client.get("/in/proc.git/info/lfs/locks", headers=bob).status_code == 401
    users = load_users(Config(data_dir=tmp_path))
    users.add("bob", "pw2", {"in/*": "read"})
    users.save()
    os.utime(tmp_path / "users.json", (1, 1))  # a new mtime, even within the clock's tick
    assert client.get("/in/proc.git/info/lfs/locks", headers=bob).status_code == 200
    users.remove("bob")
    users.save()
    assert client.get("/in/proc.git/info/lfs/locks", headers=bob).status_code == 401


# --- the S3 store on a real Ceph RADOS Gateway (issue 25: no redundant HEAD, one pool) ---


def test_s3_verify_after_upload_sends_no_head_and_batches_reuse_one_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    import threading

    ceph = request.getfixturevalue("ceph")
    env = {"LFS_DATA_DIR": str(tmp_path), "LFS_STORAGE": "s3"}
    env.update(ceph.s3_env(ceph.create_bucket(f"lfs-heads-{os.urandom(4).hex()}")))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, env[var])
    store: Any = backends.open_store(Config.from_env(env))
    heads: list[str] = []
    store.client.meta.events.register(
        "before-call.s3.HeadObject", lambda params, **_: heads.append(params["url_path"])
    )
    data = [os.urandom(1000 + n) for n in range(20)]
    oids = [hashlib.sha256(d).hexdigest() for d in data]
    store.create_repo("s3/heads")

    assert store.stored_sizes("s3/heads", oids) == dict.fromkeys(oids)  # the batch asks
    assert len(heads) == 20
    threads = threading.active_count()
    for blob, oid in zip(data, oids, strict=True):
        store.publish_stream(io.BytesIO(blob), "s3/heads", oid, len(blob))
    heads.clear()
    # The verify that follows each upload: answered from what this process just stored.
    assert [store.stored_size("s3/heads", oid) for oid in oids] == [len(d) for d in data]
    assert heads == []
    # A batch always asks the store (a store that is down must say so before a transfer),
    # on the same pool of threads each time.
    for _round in range(3):
        sizes = store.stored_sizes("s3/heads", oids)
        assert sizes == {oid: len(d) for oid, d in zip(oids, data, strict=True)}
    assert len(heads) == 60
    assert threading.active_count() <= threads + 16
    pool = store._head_pool()
    assert store._head_pool() is pool
    # `migrate` checks what landed in the bucket itself.
    heads.clear()
    store.check_landed("s3/heads", oids[0], len(data[0]))
    assert len(heads) == 1
    # Another process (a new store object) knows nothing: it asks.
    other: Any = backends.open_store(Config.from_env(env))
    other.client.meta.events.register(
        "before-call.s3.HeadObject", lambda params, **_: heads.append(params["url_path"])
    )
    assert other.stored_size("s3/heads", oids[1]) == len(data[1]) and len(heads) == 2
