"""lfs-server beyond one machine, with real engines: objects in Ceph's RADOS Gateway (S3),
locks and users in PostgreSQL, several `lfs-server serve` nodes sharing them.

Judged by the real client (git + git-lfs) and by what the bucket holds: an object is
visible under its oid only once verified; a node or the store failing mid-push loses
nothing and leaves nothing half-visible.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from lfs_engines import Ceph, Postgres, start_postgres
from lfs_scale_support import Cluster
from lfs_testlib import (
    Api,
    Server,
    assert_lfs_error,
    basic,
    cli,
    make_data_dir,
    make_git_env,
    oid_of,
    push_lfs_repo,
)

pytestmark = [pytest.mark.nginx, pytest.mark.gitlfs]
TOOLS = Path(__file__).resolve().parents[2] / "tools/bench"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def cluster(ceph: Ceph, postgres: Postgres) -> Iterator[Cluster]:
    """Two nodes (proxy downloads) sharing one bucket, one database and one key."""
    c = Cluster(ceph, postgres)
    c.start_node()
    c.start_node()
    yield c
    c.stop()


def object_keys(c: Cluster, oid: str) -> list[str]:
    return [key for key in c.bucket_keys() if key.endswith(oid)]


# --- one node's protocol on S3 + PostgreSQL -------------------------------------------------


def test_upload_lands_in_the_bucket_only_after_verification(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    api = Api(node)
    data = os.urandom(300_000)
    oid = oid_of(data)
    actions, r = api.put_one_bit_off("scale/verify", data, 7)
    up = actions["upload"]
    assert r.status_code in (400, 422), r.text
    assert "SHA-256" in r.json()["message"]
    assert object_keys(cluster, oid) == [], "a rejected body must leave nothing in the bucket"
    assert list((node.data / "tmp/body").iterdir()) == []
    r = requests.put(up["href"], data=data, headers=up["header"], timeout=30)
    assert r.status_code == 200, r.text
    assert object_keys(cluster, oid) == [f"scale/verify.git/objects/{oid[:2]}/{oid[2:4]}/{oid}"]
    stored = cluster.s3().get_object(Bucket=cluster.bucket, Key=object_keys(cluster, oid)[0])  # type: ignore[attr-defined]
    assert stored["Body"].read() == data

    # Downloads go through nginx, which streams from the store (proxy mode); Range works.
    action = api.download_action("scale/verify", oid, len(data))
    assert action["href"].startswith(node.url)
    full = requests.get(action["href"], headers=action["header"], timeout=30)
    assert full.status_code == 200 and full.content == data
    assert not any(h.lower().startswith("x-amz") for h in full.headers)
    part = requests.get(
        action["href"], headers={**action["header"], "Range": "bytes=100-199"}, timeout=30
    )
    assert part.status_code == 206 and part.content == data[100:200]
    # Without a valid token nothing leaks from the store.
    bad = requests.get(action["href"], headers={"Authorization": "Bearer x.y.z"}, timeout=30)
    assert bad.status_code in (401, 403)


def test_healthz_names_kinds_not_secrets(cluster: Cluster) -> None:
    r = requests.get(cluster.nodes[0].url + "/healthz", timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["store"] == {"kind": "s3", "reachable": True}
    assert body["database"] == {"kind": "postgresql", "reachable": True}
    for secret in (cluster.bucket, "127.0.0.1", "AWS", "postgres", str(cluster.nodes[0].data)):
        assert secret not in r.text.replace('"postgresql"', ""), secret


def metric(text: str, name: str) -> int:
    """The value of the unlabelled sample *name* in a /metrics page."""
    found = [line for line in text.splitlines() if line.startswith(name + " ")]
    assert found, text
    return int(float(found[0].split()[1]))  # Prometheus text: `1.0`


def test_metrics_count_the_bucket_once_a_minute_not_per_scrape(
    ceph: Ceph, postgres: Postgres
) -> None:
    # A cluster of its own, so that no earlier scrape has counted for its node.
    c = Cluster(ceph, postgres)
    try:
        node = c.start_node()
        api = Api(node)
        api.upload("scale/metrics", os.urandom(1000))
        first = requests.get(node.url + "/metrics", timeout=30).text
        assert metric(first, "lfs_objects_stored") == 1
        assert metric(first, "lfs_stored_bytes") == 1000
        api.upload("scale/metrics", os.urandom(2000))
        second = requests.get(node.url + "/metrics", timeout=30).text
        # The new object is counted as uploaded at once; the bucket is not listed again.
        assert metric(second, "lfs_objects_uploaded_total") == 2
        assert metric(second, "lfs_objects_stored") == 1
        assert metric(second, "lfs_stored_bytes") == 1000
    finally:
        c.stop()


# --- two nodes --------------------------------------------------------------------------------


def test_push_through_one_node_clone_through_the_other(cluster: Cluster, tmp_path: Path) -> None:
    one, two = cluster.nodes
    g = make_git_env(tmp_path, one.url, "alice")
    files = {f"a{i}.bin": os.urandom(20_000 + i) for i in range(6)}
    files["big.bin"] = os.urandom(3 << 20)
    bare, _work = push_lfs_repo(g, tmp_path, one.lfs("scale/game"), files)
    for data in files.values():
        assert len(object_keys(cluster, sha(data))) == 1

    reader = make_git_env(tmp_path / "r", two.url, "reader")
    clone = tmp_path / "clone"
    reader.git("clone", "-c", f"lfs.url={two.lfs('scale/game')}", str(bare), str(clone))
    reader.git("config", "lfs.url", two.lfs("scale/game"), cwd=clone)
    (clone / ".lfsconfig").write_text(f"[lfs]\n\turl = {two.lfs('scale/game')}\n")
    reader.git("lfs", "pull", cwd=clone)
    for name, data in files.items():
        assert (clone / name).read_bytes() == data, name
    two_log = (two.data / "run/nginx-access.log").read_text()
    assert "/scale/game.git/info/lfs/objects/" in two_log, "downloads must go through node two"


def test_token_minted_by_one_node_works_on_the_other(cluster: Cluster) -> None:
    one, two = cluster.nodes
    data = os.urandom(10_000)
    oid = oid_of(data)
    actions = Api(one).upload_action("scale/tokens", oid, len(data))
    href = actions["upload"]["href"].replace(one.url, two.url)
    r = requests.put(href, data=data, headers=actions["upload"]["header"], timeout=30)
    assert r.status_code == 200, r.text
    action = Api(two).download_action("scale/tokens", oid, len(data))
    got = requests.get(
        action["href"].replace(two.url, one.url), headers=action["header"], timeout=30
    )
    assert got.status_code == 200 and got.content == data


def test_locks_taken_on_one_node_are_enforced_on_the_other(cluster: Cluster) -> None:
    one, two = cluster.nodes
    r = requests.post(
        one.lfs("scale/locks") + "/locks", json={"path": "art.psd"}, headers=basic("alice")
    )
    assert r.status_code == 201, r.text
    lock_id = r.json()["lock"]["id"]
    clash = requests.post(
        two.lfs("scale/locks") + "/locks", json={"path": "art.psd"}, headers=basic("bob")
    )
    assert clash.status_code == 409 and clash.json()["lock"]["owner"]["name"] == "alice"
    seen = requests.post(two.lfs("scale/locks") + "/locks/verify", json={}, headers=basic("bob"))
    assert [lock["path"] for lock in seen.json()["theirs"]] == ["art.psd"]
    refused = requests.post(
        f"{two.lfs('scale/locks')}/locks/{lock_id}/unlock", json={}, headers=basic("bob")
    )
    assert refused.status_code == 403
    done = requests.post(
        f"{two.lfs('scale/locks')}/locks/{lock_id}/unlock", json={}, headers=basic("alice")
    )
    assert done.status_code == 200, done.text
    listed = requests.get(one.lfs("scale/locks") + "/locks", headers=basic("alice")).json()
    assert listed["locks"] == []


def test_user_added_through_the_cli_logs_in_on_every_node(cluster: Cluster) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env.update(cluster.env())
    result = cli("user", "add", "carol", "--grant", "scale/*=read", "--password-stdin",
                 data=make_data_dir(), stdin="carol-pw\n", env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    time.sleep(1.2)  # nodes re-read the users' version at most once a second
    for node in cluster.nodes:
        r = requests.post(
            node.lfs("scale/users") + "/objects/batch",
            json={"operation": "download", "objects": [{"oid": "a" * 64, "size": 1}]},
            auth=("carol", "carol-pw"),
            timeout=30,
        )
        assert r.status_code == 200, (node.url, r.text)


def test_node_killed_mid_push_retry_through_the_other(
    ceph: Ceph, postgres: Postgres, tmp_path: Path
) -> None:
    c = Cluster(ceph, postgres)
    try:
        victim = c.start_node()
        survivor = c.start_node()
        g = make_git_env(tmp_path, victim.url, "alice")
        files = {f"p{i}.bin": os.urandom(2 << 20) for i in range(12)}
        bare, work = root_repo(g, tmp_path, victim.lfs("scale/kill"), files)
        push = subprocess.Popen(
            ["git", "push", "origin", "main"], cwd=work, env=g.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        # Kill the whole node (supervisor, nginx, gunicorn) once uploads are under way.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "PUT" not in _access_log(victim):
            time.sleep(0.05)
        time.sleep(0.3)
        _kill_node(victim)
        push.communicate(timeout=180)
        # Half-pushed: whatever is in the bucket is complete and verified.
        for key in c.bucket_keys("scale/kill.git/objects/"):
            body = c.s3().get_object(Bucket=c.bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
            assert sha(body) == key.rsplit("/", 1)[1], key
        # Retry through the survivor: the push completes and every object verifies.
        (work / ".lfsconfig").write_text(f"[lfs]\n\turl = {survivor.lfs('scale/kill')}\n")
        g.git("config", "lfs.url", survivor.lfs("scale/kill"), cwd=work)
        creds = g.home / ".git-credentials"
        host = survivor.url.split("://", 1)[1]
        creds.write_text(creds.read_text() + f"http://alice:alice-pw@{host}\n")
        g.git("push", "origin", "main", cwd=work)
        for data in files.values():
            keys = [k for k in c.bucket_keys("scale/kill.git/") if k.endswith(sha(data))]
            assert len(keys) == 1
        fresh = tmp_path / "fresh"
        g.git("-c", f"lfs.url={survivor.lfs('scale/kill')}", "clone", str(bare), str(fresh))
        for name, data in files.items():
            assert (fresh / name).read_bytes() == data, name
    finally:
        c.stop()


def root_repo(g: object, root: Path, lfs_url: str, files: dict[str, bytes]) -> tuple[Path, Path]:
    """A committed work tree and an empty bare remote (not pushed yet)."""
    bare, work = root / "remote.git", root / "work"
    g.git("init", "--bare", str(bare))  # type: ignore[attr-defined]
    g.git("init", str(work))  # type: ignore[attr-defined]
    g.git("lfs", "track", "*.bin", cwd=work)  # type: ignore[attr-defined]
    (work / ".lfsconfig").write_text(f"[lfs]\n\turl = {lfs_url}\n")
    for name, data in files.items():
        (work / name).write_bytes(data)
    g.git("add", ".", cwd=work)  # type: ignore[attr-defined]
    g.git("commit", "-m", "assets", cwd=work)  # type: ignore[attr-defined]
    g.git("remote", "add", "origin", str(bare), cwd=work)  # type: ignore[attr-defined]
    return bare, work


def _access_log(node: Server) -> str:
    try:
        return (node.data / "run/nginx-access.log").read_text()
    except FileNotFoundError:
        return ""


def _kill_node(node: Server) -> None:
    """SIGKILL the supervisor and every process of its children's groups (a power cut)."""
    children = []
    for pid_file in ("run/nginx.pid", "run/gunicorn.pid"):
        with contextlib.suppress(FileNotFoundError, ValueError):
            children.append(int((node.data / pid_file).read_text().strip()))
    node.proc.send_signal(signal.SIGKILL)
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    node.proc.wait()


def test_store_stopped_mid_upload_then_back(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    api = Api(node)
    stored = os.urandom(50_000)
    api.upload("scale/outage", stored)
    data = os.urandom(8 << 20)
    oid = oid_of(data)
    actions = api.upload_action("scale/outage", oid, len(data))
    up = actions["upload"]
    try:
        # Half the body is sent, the store goes away, then the rest of the body arrives.
        url = urlsplit(up["href"])
        conn = http.client.HTTPConnection(url.netloc, timeout=120)
        conn.putrequest("PUT", url.path)
        for name, value in {**up["header"], "Content-Length": str(len(data))}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(data[: len(data) // 2])
        cluster.ceph.stop_gateway()
        conn.send(data[len(data) // 2 :])
        answer = conn.getresponse()
        body = json.loads(answer.read())
        conn.close()
        assert answer.status == 503, body
        assert "object store" in body["message"] and "request_id" in body
        assert answer.getheader("Retry-After")
        health = requests.get(node.url + "/healthz", timeout=30)
        assert health.status_code == 503
        assert health.json()["store"] == {"kind": "s3", "reachable": False}
        assert health.json()["database"]["reachable"] is True
        batch = api.batch(
            "scale/outage",
            {"operation": "download", "objects": [{"oid": oid_of(stored), "size": len(stored)}]},
        )
        assert_lfs_error(batch, 503, "object store")
        # Locks live in the database: they keep working while the store is away.
        lock = requests.post(
            node.lfs("scale/outage") + "/locks", json={"path": "x.bin"}, headers=basic("alice")
        )
        assert lock.status_code == 201, lock.text
    finally:
        cluster.ceph.start_gateway()
    assert object_keys(cluster, oid) == [], "nothing half-visible after the outage"
    assert list((node.data / "tmp/body").iterdir()) == []
    # Recovery: the same upload succeeds, the earlier object is intact.
    deadline = time.monotonic() + 60
    while requests.get(node.url + "/healthz", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "store did not come back"
        time.sleep(0.5)
    obj = api.upload("scale/outage", data)
    assert "actions" in obj
    for blob in (stored, data):
        dl = api.download_action("scale/outage", oid_of(blob), len(blob))
        got = requests.get(dl["href"], headers=dl["header"], timeout=60)
        assert got.status_code == 200 and sha(got.content) == oid_of(blob)


# --- direct downloads, fsck and migration ------------------------------------------------


def test_serve_leaves_another_nodes_young_multipart_upload_alone(cluster: Cluster) -> None:
    # `serve` aborts multipart uploads older than an hour (a dead node's); one started a
    # moment ago may be another node's upload in progress and must survive a node's start.
    s3 = cluster.s3()
    key = "scale/young.git/objects/00/00/" + "0" * 64
    upload = s3.create_multipart_upload(Bucket=cluster.bucket, Key=key)  # type: ignore[attr-defined]
    try:
        node = cluster.start_node()
        listed = s3.list_multipart_uploads(Bucket=cluster.bucket)  # type: ignore[attr-defined]
        assert upload["UploadId"] in [u["UploadId"] for u in listed.get("Uploads", [])]
        log = node.log_text()
        assert "aborted" not in log and "could not look" not in log, log
        node.stop()
        cluster.nodes.remove(node)
    finally:
        s3.abort_multipart_upload(  # type: ignore[attr-defined]
            Bucket=cluster.bucket, Key=key, UploadId=upload["UploadId"]
        )


def test_import_seed_into_the_bucket(cluster: Cluster, tmp_path: Path) -> None:
    seed = tmp_path / "old-data"
    objects = seed / "repos/grp/seeded/.objects"
    good = [os.urandom(3000), b"seeded object"]
    bad = oid_of(b"what the name claims")
    for oid, data in [*((oid_of(d), d) for d in good), (bad, b"other bytes")]:
        (objects / oid[:2] / oid[2:4]).mkdir(parents=True, exist_ok=True)
        (objects / oid[:2] / oid[2:4] / oid).write_bytes(data)
    env = {**os.environ, **cluster.env()}
    r = cli("import-seed", str(seed), data=tmp_path / "cli", env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)  # the bad one is refused
    assert "imported 2 objects, 0 already present, 1 refused" in r.stdout, r.stdout
    assert object_keys(cluster, bad) == [], "a refused object must not reach the bucket"
    for data in good:
        assert len(object_keys(cluster, oid_of(data))) == 1
        # Every node serves it from the bucket.
        for node in cluster.nodes:
            action = Api(node).download_action("lfs/grp/seeded", oid_of(data), len(data))
            got = requests.get(action["href"], headers=action["header"], timeout=30)
            assert got.status_code == 200 and got.content == data
    again = cli("import-seed", str(seed), data=tmp_path / "cli", env=env)
    assert "imported 0 objects, 2 already present, 1 refused" in again.stdout, again.stdout


def retrying_503(send: Callable[[], requests.Response]) -> requests.Response:
    """*send()* again after each 503, as git-lfs does (up to 5 times, after Retry-After).

    After PostgreSQL comes back, each worker finds its old connection dead once and
    answers that one request with a retryable 503.
    """
    for _attempt in range(5):
        answer = send()
        if answer.status_code != 503:
            break
        time.sleep(float(answer.headers.get("Retry-After", "1")))
    return answer


def test_database_stopped_then_back(ceph: Ceph) -> None:
    # A PostgreSQL of its own: the session's is shared by the other tests.
    pg = start_postgres()
    c = Cluster(ceph, pg)
    try:
        node = c.start_node()
        api = Api(node)
        locks = node.lfs("scale/db-outage") + "/locks"
        stored = os.urandom(20_000)
        api.upload("scale/db-outage", stored)
        download = api.download_action("scale/db-outage", oid_of(stored), len(stored))
        before = requests.post(locks, json={"path": "before.bin"}, headers=basic("alice"))
        assert before.status_code == 201, before.text
        pg.halt()
        try:
            for r in (
                requests.post(locks, json={"path": "during.bin"}, headers=basic("alice")),
                requests.get(locks, headers=basic("alice"), timeout=30),
            ):
                assert_lfs_error(r, 503, "database")
                assert r.headers.get("Retry-After"), r.headers
            health = requests.get(node.url + "/healthz", timeout=30)
            assert health.status_code == 503
            assert health.json()["database"] == {"kind": "postgresql", "reachable": False}
            assert health.json()["store"]["reachable"] is True
            # Objects live in the store: a download with its token goes on.
            got = requests.get(download["href"], headers=download["header"], timeout=30)
            assert got.status_code == 200 and got.content == stored
        finally:
            pg.start()
        deadline = time.monotonic() + 60
        while requests.get(node.url + "/healthz", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the node did not see the database come back"
            time.sleep(0.5)
        during = retrying_503(
            lambda: requests.post(locks, json={"path": "during.bin"}, headers=basic("alice"))
        )
        assert during.status_code == 201, during.text
        listed = retrying_503(lambda: requests.get(locks, headers=basic("alice"), timeout=30))
        assert listed.status_code == 200, listed.text
        assert sorted(lock["path"] for lock in listed.json()["locks"]) == [
            "before.bin",
            "during.bin",
        ]
    finally:
        c.stop()
        pg.stop()


def test_direct_mode_hands_out_presigned_urls(
    ceph: Ceph, postgres: Postgres, tmp_path: Path
) -> None:
    c = Cluster(ceph, postgres, transfer="direct")
    try:
        node = c.start_node()
        api = Api(node)
        data = os.urandom(100_000)
        api.upload("scale/direct", data)
        action = api.download_action("scale/direct", oid_of(data), len(data))
        assert action["href"].startswith(ceph.endpoint) and "X-Amz-Signature" in action["href"]
        assert "header" not in action
        got = requests.get(action["href"], timeout=30)
        assert got.status_code == 200 and got.content == data
        signature = re.search(r"X-Amz-Signature=([0-9a-f]+)", action["href"])
        assert signature
        flipped = ("1" if signature.group(1)[0] == "0" else "0") + signature.group(1)[1:]
        tampered = action["href"].replace(signature.group(1), flipped)
        assert requests.get(tampered, timeout=30).status_code == 403
        g = make_git_env(tmp_path, node.url, "alice")
        files = {"d.bin": os.urandom(1 << 20)}
        bare, _ = push_lfs_repo(g, tmp_path, node.lfs("scale/direct"), files)
        clone = tmp_path / "clone"
        g.git("clone", str(bare), str(clone))
        assert (clone / "d.bin").read_bytes() == files["d.bin"]
    finally:
        c.stop()


def test_fsck_and_migrate_to_s3(ceph: Ceph, postgres: Postgres, tmp_path: Path) -> None:
    data_dir = make_data_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    good = [os.urandom(5000 + i) for i in range(5)]
    # A local store with five good objects and one whose bytes do not match its name.
    for blob in good:
        oid = oid_of(blob)
        path = data_dir / "repos/old/assets.git/objects" / oid[:2] / oid[2:4] / oid
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    damaged = oid_of(b"original")
    path = data_dir / "repos/old/assets.git/objects" / damaged[:2] / damaged[2:4] / damaged
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"tampered")
    c = Cluster(ceph, postgres)
    try:
        env.update(c.env())
        env.pop("LFS_STORAGE")
        result = cli("migrate", "--to", "s3", data=data_dir, env=env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"BAD old/assets {damaged}" in result.stdout
        assert "copied 5 objects" in result.stdout and "1 bad" in result.stdout
        assert not [k for k in c.bucket_keys() if k.endswith(damaged)]
        again = cli("migrate", "--to", "s3", data=data_dir, env=env)
        assert "copied 0 objects" in again.stdout and "5 already there" in again.stdout
        # fsck on the bucket: all good, then one object damaged in the store itself.
        env["LFS_STORAGE"] = "s3"
        ok = cli("fsck", data=data_dir, env=env)
        assert ok.returncode == 0 and "checked 5 objects, 0 bad" in ok.stdout, ok.stdout + ok.stderr
        victim = oid_of(good[0])
        key = f"old/assets.git/objects/{victim[:2]}/{victim[2:4]}/{victim}"
        c.s3().put_object(Bucket=c.bucket, Key=key, Body=b"bit rot")  # type: ignore[attr-defined]
        bad = cli("fsck", "--quarantine", data=data_dir, env=env)
        assert bad.returncode == 1 and f"BAD old/assets {victim}" in bad.stdout, bad.stdout
        keys = c.bucket_keys()
        assert key not in keys and f"_quarantine/old/assets.git/{victim}" in keys
        # The served repository answers from the bucket.
        node = c.start_node()
        action = Api(node).download_action("old/assets", oid_of(good[1]), len(good[1]))
        got = requests.get(action["href"], headers=action["header"], timeout=30)
        assert got.content == good[1]
    finally:
        c.stop()


def test_load_across_two_nodes_loses_nothing(
    ceph: Ceph, postgres: Postgres, tmp_path: Path
) -> None:
    c = Cluster(ceph, postgres)
    env = {**os.environ, **c.env()}
    report = tmp_path / "load.json"
    result = subprocess.run(
        [sys.executable, str(TOOLS / "lfs_load.py"), "--nodes", "2", "--clients", "32",
         "--one-user", "--duration", "6", "--max-size-kib", "256", "--workers", "2",
         "--seed", "7", "--json", str(report)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    [run] = json.loads(report.read_text())["runs"]  # the tool's numbers, not its wording
    assert run["nodes"] == 2 and run["clients"] == 32, run
    assert run["unexpected"] == 0 and run["unexpected_statuses"] == {}, run["statuses"]
    assert run["stored"] > 0, run
    assert (run["lost"], run["corrupted"], run["corrupt_reads"]) == (0, 0, 0), run
