"""The console script: users, repos, nginx-config, fsck, serve's supervision and dev mode."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from lfs_server.users import UserDB
from lfs_testlib import Api, Server, cli, free_port, make_data_dir, oid_of, start_server

SCRIPT = str(Path(sys.executable).parent / "lfs-server")


def test_help_is_quick_and_lists_env_vars() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [SCRIPT, "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0
    assert "LFS_DATA_DIR" in result.stdout and "serve" in result.stdout
    assert time.monotonic() - started < 10


def test_user_add_list_remove(tmp_path: Path) -> None:
    r = cli(
        "user",
        "add",
        "carol",
        "--grant",
        "team/*=write",
        "--grant",
        "docs=read",
        "--password-stdin",
        data=tmp_path,
        stdin="s3cret\n",
    )
    assert r.returncode == 0, r.stderr
    db = UserDB.load(tmp_path / "users.json")
    carol = db.users["carol"]
    assert (
        carol.password_hash.startswith(("scrypt:", "pbkdf2:"))
        and "s3cret" not in carol.password_hash
    )
    assert carol.level_for("team/game") == "write" and carol.level_for("docs") == "read"
    assert carol.level_for("other") is None
    assert db.authenticate("carol", "s3cret") and not db.authenticate("carol", "nope")
    assert (tmp_path / "users.json").stat().st_mode & 0o777 == 0o600
    listed = cli("user", "list", data=tmp_path)
    assert "carol\tdocs=read, team/*=write" in listed.stdout
    assert cli("user", "remove", "carol", data=tmp_path).returncode == 0
    assert "carol" not in cli("user", "list", data=tmp_path).stdout


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["user", "add", "bad name", "--password-stdin"], "pw\n", "user name must be"),
        (
            ["user", "add", "dave", "--grant", "x=owner", "--password-stdin"],
            "pw\n",
            "grant must be PATTERN=LEVEL",
        ),
        (["user", "add", "dave", "--password-stdin"], "\n", "password must not be empty"),
        (["user", "add", "dave"], "", "--password-stdin"),
        (["user", "remove", "nobody-here"], "", "no user named"),
        (["repo", "create", "../evil"], "", "not allowed"),
    ],
)
def test_user_mistakes_are_clear_errors(
    tmp_path: Path, args: list[str], stdin: str, message: str
) -> None:
    r = cli(*args, data=tmp_path, stdin=stdin)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr


def test_duplicate_user_needs_update(tmp_path: Path) -> None:
    assert (
        cli("user", "add", "erin", "--password-stdin", data=tmp_path, stdin="a\n").returncode == 0
    )
    again = cli("user", "add", "erin", "--password-stdin", data=tmp_path, stdin="b\n")
    assert again.returncode == 2 and "--update" in again.stderr
    upd = cli(
        "user",
        "add",
        "erin",
        "--update",
        "--grant",
        "*=admin",
        "--password-stdin",
        data=tmp_path,
        stdin="b\n",
    )
    assert upd.returncode == 0
    assert UserDB.load(tmp_path / "users.json").authenticate("erin", "b") is not None


def test_bad_environment_value_is_reported(tmp_path: Path) -> None:
    r = cli("user", "list", data=tmp_path, env={**os.environ, "LFS_WORKERS": "many"})
    assert r.returncode == 2 and "LFS_WORKERS must be an integer, got 'many'" in r.stderr


@pytest.mark.nginx
def test_nginx_config_is_valid_for_nginx(tmp_path: Path) -> None:
    from components import require_command

    nginx = require_command("nginx")
    data = make_data_dir()
    r = cli("nginx-config", "--listen", "127.0.0.1:18080", data=data)
    assert r.returncode == 0, r.stderr
    assert (
        "X-Lfs-Body-File $request_body_file" in r.stdout
        and "client_body_in_file_only clean" in r.stdout
    )
    conf = data / "check.conf"
    conf.write_text(r.stdout)
    (data / "run").mkdir(exist_ok=True)
    test = subprocess.run(
        [
            nginx,
            "-t",
            "-p",
            f"{data}/",
            "-c",
            str(conf),
            "-e",
            f"{data}/run/err.log",
            "-g",
            f"pid {data}/t.pid;",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert test.returncode == 0, test.stderr


def test_serve_without_nginx_says_what_to_do(tmp_path: Path) -> None:
    env = {**os.environ, "LFS_NGINX_BIN": str(tmp_path / "no-nginx-here")}
    r = subprocess.run(
        [SCRIPT, "serve", "--data", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert r.returncode == 2  # a required component is missing (the CLI rule)
    assert "nginx is not installed" in r.stderr and "--no-nginx" in r.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.nginx
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_nginx_and_gunicorn(signum: int) -> None:
    # Same entrypoint as the Dockerfile: `lfs-server serve` configured by LFS_* variables.
    srv = start_server(users=False)
    pids = [int((srv.data / "run" / name).read_text()) for name in ("nginx.pid", "gunicorn.pid")]
    assert all(_alive(p) for p in pids)
    srv.proc.send_signal(signum)
    # SIGTERM is the service manager's stop (0); Ctrl-C exits 130 like any interrupted tool.
    interrupted = signum == signal.SIGINT
    assert srv.proc.wait(timeout=30) == (130 if interrupted else 0)
    assert _wait_gone(pids)
    log = (srv.data / "serve.log").read_text()
    assert ("lfs-server: interrupted" if interrupted else "lfs-server: stopped") in log


@pytest.mark.nginx
@pytest.mark.parametrize(("victim", "other"), [("nginx", "gunicorn"), ("gunicorn", "nginx")])
def test_crashed_child_is_reported_and_the_rest_stopped(victim: str, other: str) -> None:
    srv = start_server(users=False)
    victim_pid = int((srv.data / f"run/{victim}.pid").read_text())
    other_pid = int((srv.data / f"run/{other}.pid").read_text())
    os.kill(victim_pid, signal.SIGKILL)
    try:
        status = srv.proc.wait(timeout=30)
    finally:
        srv.stop()
    assert status == 1
    assert f"{victim} exited unexpectedly" in (srv.data / "serve.log").read_text()
    assert _wait_gone([other_pid])
    # Nothing of the unit may keep answering on its port (a crashed nginx master's workers).
    port = int(srv.url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as probe:
        probe.settimeout(2)
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "something still listens on the port"


def test_no_nginx_dev_mode_roundtrip() -> None:
    srv = start_server(no_nginx=True)
    try:
        api = Api(srv)
        data = os.urandom(70_000)
        api.upload("dev/mode", data)
        action = api.download_action("dev/mode", oid_of(data), len(data))
        assert requests.get(action["href"], headers=action["header"], timeout=10).content == data
        part = requests.get(
            action["href"], headers={**action["header"], "Range": "bytes=10-19"}, timeout=10
        )
        assert part.status_code == 206 and part.content == data[10:20]
        bad = api.upload_action("dev/mode", oid_of(b"x" * 10), 10)["upload"]
        r = requests.put(bad["href"], data=b"y" * 10, headers=bad["header"], timeout=10)
        assert r.status_code == 400 and "SHA-256" in r.json()["message"]
        assert list((srv.data / "tmp").glob("upload-*")) == []
    finally:
        assert srv.stop() == 0


@pytest.mark.nginx
def test_fsck_finds_quarantines_and_upload_repairs(server: Server) -> None:
    api = Api(server)
    data = os.urandom(4096)
    oid = oid_of(data)
    api.upload("fsck/repo", data)
    stored = server.data / "repos/fsck/repo.git/objects" / oid[:2] / oid[2:4] / oid
    assert cli("fsck", "--repo", "fsck/repo", data=server.data).returncode == 0
    stored.chmod(0o644)
    stored.write_bytes(b"\0" * len(data))  # bit rot with the same size
    report = cli("fsck", "--repo", "fsck/repo", data=server.data)
    assert report.returncode == 1 and f"BAD fsck/repo {oid}" in report.stdout
    assert cli("fsck", "--repo", "fsck/repo", "--quarantine", data=server.data).returncode == 1
    assert not stored.exists()
    assert (server.data / "quarantine/fsck/repo.git" / oid).exists()
    obj = api.upload("fsck/repo", data)  # the batch offers an upload again
    assert "actions" in obj and stored.read_bytes() == data
    final = cli("fsck", "--repo", "fsck/repo", data=server.data)
    assert final.returncode == 0 and "checked 1 objects, 0 bad" in final.stdout
