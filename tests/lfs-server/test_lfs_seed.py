"""Issue 13 item 8: `lfs-server import-seed DIR` brings objects over from the original
gitlfs_with_nginx layout (`repos/<repo>/.objects/aa/bb/<oid>`), hash-checked, nothing
skipped silently; the imported objects are served under the old URLs."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import requests
from lfs_testlib import Api, Server, cli, oid_of


def seed_object(repo_dir: Path, data: bytes, name: str | None = None) -> str:
    oid = name or oid_of(data)
    path = repo_dir / ".objects" / oid[:2] / oid[2:4] / oid
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return oid


@pytest.mark.nginx
def test_import_seed_verifies_reports_and_serves_under_the_old_urls(
    server: Server, tmp_path: Path
) -> None:
    seed = tmp_path / "old-data"
    game = seed / "repos/grp/game"
    good = [os.urandom(5000), b"second object", b""]
    oids = [seed_object(game, data) for data in good]
    bad_oid = seed_object(game, b"bytes that are not this oid", oid_of(b"something else"))
    (game / ".objects/zz").mkdir()
    (game / ".objects/zz/stray.txt").write_text("not an object")
    (seed / "repos/README").write_text("a note left by an admin")
    link_oid = oid_of(b"linked")
    link = game / ".objects" / link_oid[:2] / link_oid[2:4] / link_oid
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(tmp_path / "elsewhere")

    r = cli("import-seed", str(seed), data=server.data)
    assert r.returncode == 1, (r.stdout, r.stderr)  # it ran; some files were refused
    assert "imported 3 objects, 0 already present, 4 refused" in r.stdout, r.stdout
    refused = [line for line in r.stdout.splitlines() if line.startswith("REFUSED ")]
    assert len(refused) == 4, refused
    assert any(bad_oid in line and "SHA-256" in line for line in refused)
    assert any("stray.txt" in line for line in refused)
    assert any("README" in line and "not inside a .objects folder" in line for line in refused)
    assert any(link_oid in line and "not a regular file" in line for line in refused)
    assert not list((server.data / "repos").rglob(bad_oid))

    # Served under the old client configuration's URL: /lfs/<repo>/info/lfs.
    class OldUrl:
        def lfs(self, repo: str) -> str:
            return f"{server.url}/{repo}/info/lfs"

    api = Api(OldUrl())  # type: ignore[arg-type]
    for data, oid in zip(good, oids, strict=True):
        action = api.download_action("lfs/grp/game", oid, len(data))
        got = requests.get(action["href"], headers=action["header"], timeout=10).content
        assert hashlib.sha256(got).hexdigest() == oid

    again = cli("import-seed", str(seed), data=server.data)
    assert "imported 0 objects, 3 already present, 4 refused" in again.stdout, again.stdout


def test_import_seed_of_a_clean_seed_exits_0_and_a_wrong_folder_2(tmp_path: Path) -> None:
    seed = tmp_path / "old"
    seed_object(seed / "repos/solo", b"only object")
    r = cli("import-seed", str(seed), "--prefix", "", data=tmp_path / "data")
    assert r.returncode == 0 and "imported 1 objects" in r.stdout, (r.stdout, r.stderr)
    oid = oid_of(b"only object")
    stored = tmp_path / "data/repos/solo.git/objects" / oid[:2] / oid[2:4] / oid
    assert stored.read_bytes() == b"only object"
    for wrong, says in ((seed / "repos", "has no repos/ folder"), (tmp_path / "nope", "not")):
        r = cli("import-seed", str(wrong), data=tmp_path / "data2")
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stderr.startswith("lfs-server: error: ") and says in r.stderr, r.stderr


def test_import_seed_follows_no_linked_folder_and_says_so(tmp_path: Path) -> None:
    """Issue 25 (low): a linked `.objects` folder copied one repository's objects into
    another, and a linked repository folder was skipped without a REFUSED line."""
    seed = tmp_path / "old"
    oid = seed_object(seed / "repos/grp/a", b"a's object")
    (seed / "repos/grp/b").mkdir(parents=True)
    (seed / "repos/grp/b/.objects").symlink_to(seed / "repos/grp/a/.objects")
    outside = tmp_path / "outside"
    seed_object(outside, b"an object from outside the seed")
    (seed / "repos/grp/c").symlink_to(outside)
    r = cli("import-seed", str(seed), "--prefix", "", data=tmp_path / "data")
    assert r.returncode == 1 and "imported 1 objects" in r.stdout, (r.stdout, r.stderr)
    refused = [line for line in r.stdout.splitlines() if line.startswith("REFUSED ")]
    for name in ("grp/b/.objects", "grp/c"):
        assert any(name in line and "symbolic link" in line for line in refused), refused
    repos = tmp_path / "data/repos"
    assert list(repos.rglob(oid)) == [repos / "grp/a.git/objects" / oid[:2] / oid[2:4] / oid]
    assert not (repos / "grp/b.git").exists() and not (repos / "grp/c.git").exists()


def test_import_seed_checks_hash_and_space_before_writing(tmp_path: Path) -> None:
    """Issue 25 (low): a 2 GiB sparse file with a wrong hash was written to the store's
    disk in full before it was refused. On a 32 MiB store: a 200 MiB file named with a
    wrong hash is refused for its hash (not for a full disk), a right one for the space."""
    import shutil

    from components import missing

    data = tmp_path / "data"
    data.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        missing("a 32 MiB tmpfs for the store", f"mount needs root: {mounted.stderr.strip()}")
    try:
        seed = tmp_path / "old"
        big = 200 << 20
        objects = seed / "repos/grp/big/.objects"
        wrong = oid_of(b"not these bytes")
        (objects / wrong[:2] / wrong[2:4]).mkdir(parents=True)
        with open(objects / wrong[:2] / wrong[2:4] / wrong, "wb") as fh:
            fh.truncate(big)  # sparse: costs the seed's disk nothing
        right = oid_of(b"\0" * big)
        (objects / right[:2] / right[2:4]).mkdir(parents=True)
        with open(objects / right[:2] / right[2:4] / right, "wb") as fh:
            fh.truncate(big)
        r = cli("import-seed", str(seed), "--prefix", "", data=data)
        refused = [line for line in r.stdout.splitlines() if line.startswith("REFUSED ")]
        assert r.returncode == 1 and len(refused) == 2, (r.stdout, r.stderr)
        assert any(wrong in line and "SHA-256" in line for line in refused), refused
        assert any(right in line and "do not fit" in line for line in refused), "\n".join(refused)
        assert shutil.disk_usage(data).used < 1 << 20  # nothing of either was written
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)
