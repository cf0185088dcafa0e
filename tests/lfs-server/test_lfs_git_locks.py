"""git lfs lock / locks / unlock against the server, and the pre-receive hook enforcing locks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests
from lfs_testlib import GitEnv, Server, basic, cli, make_git_env

pytestmark = [pytest.mark.nginx, pytest.mark.gitlfs]


def setup_repo(
    server: Server, tmp_path: Path, repo: str
) -> tuple[Path, dict[str, GitEnv], dict[str, Path]]:
    users = {name: make_git_env(tmp_path, server.url, name) for name in ("alice", "bob", "boss")}
    alice = users["alice"]
    bare = tmp_path / "remote.git"
    alice.git("init", "--bare", str(bare))
    alice.git("config", "lfs.url", server.lfs(repo), cwd=bare)
    work = tmp_path / "alice"
    alice.git("init", str(work))
    alice.git("lfs", "track", "--lockable", "*.psd", cwd=work)
    (work / ".lfsconfig").write_text(f"[lfs]\n\turl = {server.lfs(repo)}\n")
    (work / "art.psd").write_bytes(b"layer one\n" * 100)
    (work / "notes.txt").write_text("notes\n")
    alice.git("add", ".", cwd=work)
    alice.git("commit", "-m", "art", cwd=work)
    alice.git("remote", "add", "origin", str(bare), cwd=work)
    alice.git("push", "origin", "main", cwd=work)
    clones = {"alice": work}
    for name in ("bob", "boss"):
        clones[name] = tmp_path / name
        users[name].git("clone", str(bare), str(clones[name]))
    return bare, users, clones


def install_hook(bare: Path, pusher: GitEnv) -> dict[str, str]:
    """Install lfs-server's pre-receive hook in *bare*; return the environment the hook
    needs on *pusher*'s pushes (it lists locks as the read-only user 'reader')."""
    installed = cli("hook", "install", str(bare), data=Path())
    assert installed.returncode == 0, installed.stderr
    return {
        "PATH": f"{Path(sys.executable).parent}:{pusher.env['PATH']}",
        "LFS_HOOK_USER": "reader",
        "LFS_HOOK_PASSWORD": "reader-pw",
    }


def push_unchecked(
    git: GitEnv, clone: Path, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`git push origin main` skipping the client's own lock check (--no-verify), as a
    misconfigured or old client would: only the server's hook stands in the way."""
    return git.git("push", "--no-verify", "origin", "main", cwd=clone, check=check, env=env)


def test_lock_list_unlock_with_git_lfs(server: Server, tmp_path: Path) -> None:
    _bare, users, clones = setup_repo(server, tmp_path, "locks/cli")
    alice, bob, boss = users["alice"], users["bob"], users["boss"]
    alice.git("lfs", "lock", "art.psd", cwd=clones["alice"])
    listed = bob.git("lfs", "locks", cwd=clones["bob"]).stdout
    assert "art.psd" in listed and "alice" in listed

    taken = bob.git("lfs", "lock", "art.psd", cwd=clones["bob"], check=False)
    assert taken.returncode != 0 and "already" in (taken.stderr + taken.stdout).lower()
    refused = bob.git("lfs", "unlock", "art.psd", cwd=clones["bob"], check=False)
    assert refused.returncode != 0
    forced = bob.git("lfs", "unlock", "--force", "art.psd", cwd=clones["bob"], check=False)
    assert forced.returncode != 0, "a writer must not force-unlock someone else's lock"
    assert "art.psd" in bob.git("lfs", "locks", cwd=clones["bob"]).stdout

    boss.git("lfs", "unlock", "--force", "art.psd", cwd=clones["boss"])
    assert "art.psd" not in alice.git("lfs", "locks", cwd=clones["alice"]).stdout
    bob.git("lfs", "lock", "art.psd", cwd=clones["bob"])
    bob.git("lfs", "unlock", "art.psd", cwd=clones["bob"])


def test_locks_api_pagination_and_verify(server: Server) -> None:
    url = server.lfs("locks/api")
    for i in range(5):
        r = requests.post(
            f"{url}/locks", json={"path": f"f{i}.bin"}, headers=basic("alice" if i % 2 else "bob")
        )
        assert r.status_code == 201, r.text
    clash = requests.post(f"{url}/locks", json={"path": "f1.bin"}, headers=basic("bob"))
    assert clash.status_code == 409 and clash.json()["lock"]["owner"]["name"] == "alice"
    seen, cursor = [], ""
    while True:
        page = requests.get(
            f"{url}/locks", params={"limit": 2, "cursor": cursor}, headers=basic("reader")
        ).json()
        seen += [lock["path"] for lock in page["locks"]]
        cursor = page.get("next_cursor", "")
        if not cursor:
            break
    assert seen == [f"f{i}.bin" for i in range(5)]
    one = requests.get(f"{url}/locks", params={"path": "f3.bin"}, headers=basic("reader")).json()[
        "locks"
    ]
    assert [lock["owner"]["name"] for lock in one] == ["alice"]
    by_id = requests.get(
        f"{url}/locks", params={"id": one[0]["id"]}, headers=basic("reader")
    ).json()["locks"]
    assert by_id == one
    verify = requests.post(
        f"{url}/locks/verify", json={"ref": {"name": "refs/heads/main"}}, headers=basic("alice")
    )
    body = verify.json()
    assert {lock["path"] for lock in body["ours"]} == {"f1.bin", "f3.bin"}
    assert {lock["path"] for lock in body["theirs"]} == {"f0.bin", "f2.bin", "f4.bin"}
    assert (
        requests.post(f"{url}/locks", json={"path": "x"}, headers=basic("reader")).status_code
        == 403
    )
    assert (
        requests.post(f"{url}/locks", json={"path": "../x"}, headers=basic("alice")).status_code
        == 422
    )
    assert (
        requests.post(f"{url}/locks/999999/unlock", json={}, headers=basic("alice")).status_code
        == 404
    )


def test_pre_receive_hook_refuses_pushes_touching_others_locks(
    server: Server, tmp_path: Path
) -> None:
    bare, users, clones = setup_repo(server, tmp_path, "locks/hook")
    alice, bob = users["alice"], users["bob"]
    hook_env = install_hook(bare, bob)
    alice.git("lfs", "lock", "art.psd", cwd=clones["alice"])

    # bob changes the locked file and pushes past his client's lock check: the server
    # must still refuse.
    (clones["bob"] / "art.psd").write_bytes(b"bob was here\n" * 50)
    bob.git("commit", "-am", "bob edits locked art", cwd=clones["bob"])
    refused = push_unchecked(bob, clones["bob"], {**hook_env, "REMOTE_USER": "bob"}, check=False)
    assert refused.returncode != 0
    assert "art.psd (locked by alice" in refused.stderr

    # A push touching only unlocked files goes through.
    bob.git("reset", "--hard", "origin/main", cwd=clones["bob"])
    (clones["bob"] / "notes.txt").write_text("bob's notes\n")
    bob.git("commit", "-am", "notes only", cwd=clones["bob"])
    push_unchecked(bob, clones["bob"], {**hook_env, "REMOTE_USER": "bob"})

    # The lock owner may push changes to the locked file.
    alice.git("pull", "--rebase", "origin", "main", cwd=clones["alice"])
    (clones["alice"] / "art.psd").write_bytes(b"layer two\n" * 100)
    alice.git("commit", "-am", "alice edits her locked art", cwd=clones["alice"])
    alice.git(
        "push", "origin", "main", cwd=clones["alice"], env={**hook_env, "REMOTE_USER": "alice"}
    )

    # lfs-server unreachable: the hook refuses rather than letting the push through.
    (clones["alice"] / "art.psd").write_bytes(b"layer three\n" * 100)
    alice.git("commit", "-am", "again", cwd=clones["alice"])
    alice.git("config", "lfs.url", "http://127.0.0.1:9/none.git/info/lfs", cwd=bare)
    down = push_unchecked(alice, clones["alice"], {**hook_env, "REMOTE_USER": "alice"}, check=False)
    assert down.returncode != 0 and "cannot list locks" in down.stderr


def test_pre_receive_hook_enforces_locks_on_non_ascii_and_quoted_paths(
    server: Server, tmp_path: Path
) -> None:
    """Paths git would C-quote ("caf\\303\\251.txt", "tab\\there.txt") and a decomposed
    (NFD) 'café' locked in composed form (NFC): one lock each, enforced by the hook."""
    bare, users, clones = setup_repo(server, tmp_path, "locks/quoted")
    bob = users["bob"]
    hook_env = {**install_hook(bare, bob), "REMOTE_USER": "bob"}
    url = server.lfs("locks/quoted")
    nfc, nfd = "caf\u00e9.txt", "cafe\u0301.txt"
    locked = {nfd: nfc, "tab\there.txt": "tab\there.txt", 'say "hi".txt': 'say "hi".txt'}
    locked["dir/\u00fcber \\ back.txt"] = "dir/\u00fcber \\ back.txt"
    for shown in locked.values():
        r = requests.post(f"{url}/locks", json={"path": shown}, headers=basic("alice"))
        assert r.status_code == 201, r.text
    # The same name decomposed is the same lock, stored composed.
    clash = requests.post(f"{url}/locks", json={"path": nfd}, headers=basic("bob"))
    assert clash.status_code == 409 and clash.json()["lock"]["path"] == nfc
    listed = requests.get(f"{url}/locks", params={"path": nfd}, headers=basic("bob")).json()
    assert [lock["path"] for lock in listed["locks"]] == [nfc]

    for on_disk, shown in locked.items():
        bob.git("reset", "--hard", "origin/main", cwd=clones["bob"])
        target = clones["bob"] / on_disk
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("bob was here\n")
        bob.git("add", "--", on_disk, cwd=clones["bob"])
        bob.git("commit", "-m", "bob edits a locked file", cwd=clones["bob"])
        refused = push_unchecked(bob, clones["bob"], hook_env, check=False)
        assert refused.returncode != 0, (on_disk, refused.stderr)
        assert f"{shown} (locked by alice" in refused.stderr, refused.stderr


def test_pre_receive_hook_refuses_force_pushes_that_rewind_or_drop_a_locked_file(
    server: Server, tmp_path: Path
) -> None:
    """Issue 25 H1: no new commit touches the locked file in a rewind (old..new is empty)
    or in an unrelated history that lacks it; the trees before and after differ."""
    bare, users, clones = setup_repo(server, tmp_path, "locks/force")
    alice, bob = users["alice"], users["bob"]
    hook_env = install_hook(bare, bob)
    (clones["alice"] / "art.psd").write_bytes(b"layer two\n" * 100)
    alice.git("commit", "-am", "v2", cwd=clones["alice"])
    alice.git(
        "push", "origin", "main", cwd=clones["alice"], env={**hook_env, "REMOTE_USER": "alice"}
    )
    alice.git("lfs", "lock", "art.psd", cwd=clones["alice"])
    head = alice.git("rev-parse", "HEAD", cwd=clones["alice"]).stdout.strip()
    bob_env = {**hook_env, "REMOTE_USER": "bob"}
    bob.git("fetch", "origin", cwd=clones["bob"])

    def main_head() -> str:
        return bob.git("--git-dir", str(bare), "rev-parse", "main").stdout.strip()

    rewind = bob.git("push", "--no-verify", "--force", "origin", f"{head}~1:main",
                     cwd=clones["bob"], check=False, env=bob_env)  # fmt: skip
    assert rewind.returncode != 0 and "art.psd (locked by alice" in rewind.stderr, rewind.stderr
    assert main_head() == head
    bob.git("checkout", "-q", "--orphan", "other", cwd=clones["bob"])
    bob.git("rm", "-q", "-rf", "--cached", ".", cwd=clones["bob"])
    bob.git("add", "notes.txt", cwd=clones["bob"])
    bob.git("commit", "-m", "unrelated history", cwd=clones["bob"])
    orphan = bob.git("push", "--no-verify", "--force", "origin", "other:main",
                     cwd=clones["bob"], check=False, env=bob_env)  # fmt: skip
    assert orphan.returncode != 0 and "art.psd (locked by alice" in orphan.stderr, orphan.stderr
    assert main_head() == head
    # The lock owner may rewind her own locked file; a new branch of old commits is fine.
    bob.git("push", "--no-verify", "origin", f"{head}~1:refs/heads/old", cwd=clones["bob"],
            env=bob_env)  # fmt: skip
    alice.git("push", "--force", "origin", "HEAD~1:main", cwd=clones["alice"],
              env={**hook_env, "REMOTE_USER": "alice"})  # fmt: skip
