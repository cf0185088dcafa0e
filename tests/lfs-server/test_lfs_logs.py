"""The app's access log (issue 24 item 6): off, stderr or a file, text or JSON lines, and
never into the terminal of a user's shell by default; with the real `lfs-server serve`
(nginx + gunicorn)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from lfs_testlib import basic, cli, free_port, make_data_dir, start_server

SCRIPT = str(Path(sys.executable).parent / "lfs-server")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _some_requests(url: str) -> None:
    for _ in range(3):
        r = requests.post(
            f"{url}/logs/demo.git/info/lfs/locks/verify",
            json={},
            headers=basic("alice"),
            timeout=10,
        )
        assert r.status_code == 200, r.text


def _wait_for(check: object, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.nginx
def test_default_access_log_stays_off_a_terminal() -> None:
    """`serve &` in a user's shell: its stderr is the terminal, the lines go to the run dir."""
    from components import require_command

    require_command("nginx")
    data = make_data_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["LFS_LOGIN_FAILURES"] = "0"
    r = cli("user", "add", "alice", "--grant", "*=write", "--password-stdin", data=data,
            stdin="alice-pw\n", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    port = free_port()
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [SCRIPT, "serve", "--data", str(data), "--listen", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen = b""

    def read_terminal() -> bytes:
        nonlocal seen
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            seen += chunk
        return seen

    try:
        _wait_for(lambda: b"lfs-server: serving" in read_terminal(), 60)
        url = f"http://127.0.0.1:{port}"
        _some_requests(url)
        access = data / "run/access.log"
        # The three requests' lines land somewhere: in the run folder (or, wrongly, here).
        _wait_for(
            lambda: (
                (access.is_file() and access.read_text().count("/locks/verify") == 3)
                or b"/locks/verify" in read_terminal()
            )
        )
        time.sleep(0.5)
        terminal = read_terminal().decode(errors="replace")
        assert "/locks/verify" not in terminal and "request_id=" not in terminal, terminal
        assert f"access log: {access}" in terminal, terminal
        assert access.read_text().count("/locks/verify") == 3
        line = access.read_text().splitlines()[-1]
        assert 'user=alice repo=logs/demo "POST /logs/demo.git/info/lfs/locks/verify"' in line
        assert " status=200 " in line, line
    finally:
        proc.terminate()
        status = proc.wait(timeout=30)
        os.close(master)
        shutil.rmtree(data, ignore_errors=True)
    assert status == 0


@pytest.mark.nginx
def test_access_log_off_and_json_from_a_config_file() -> None:
    data = make_data_dir()
    (data / "conf").mkdir()
    # A relative path in the file is relative to the file's folder.
    toml = _write(
        data / "conf/lfs.toml", 'access_log = "../logs/access.jsonl"\nlog_format = "json"\n'
    )
    server = start_server(data, extra_env={"LFS_CONFIG_FILE": str(toml)})
    try:
        _some_requests(server.url)
        jsonl = data / "logs/access.jsonl"
        _wait_for(lambda: jsonl.is_file() and jsonl.read_text().count("/locks/verify") == 3)
        record = json.loads(jsonl.read_text().splitlines()[-1])
        assert record["user"] == "alice" and record["repo"] == "logs/demo"
        assert (record["method"], record["status"]) == ("POST", 200)
        assert record["path"] == "/logs/demo.git/info/lfs/locks/verify"
        assert set(record) == {
            "time", "request_id", "user", "repo", "method", "path", "status", "bytes", "time_ms"
        }  # fmt: skip
        assert "/locks/verify" not in server.log_text()
        # logrotate moves the file away: each worker reopens the path at its next line.
        rotated = jsonl.rename(jsonl.with_name("access.jsonl.1"))
        _some_requests(server.url)
        _wait_for(lambda: jsonl.is_file() and jsonl.read_text().count("/locks/verify") == 3)
        assert rotated.read_text().count("/locks/verify") == 3
    finally:
        status = server.stop()
        if status != 0:
            shutil.rmtree(data, ignore_errors=True)
    assert status == 0

    # LFS_ACCESS_LOG=off over the file: no access lines anywhere of the app's.
    off = start_server(data, extra_env={"LFS_CONFIG_FILE": str(toml), "LFS_ACCESS_LOG": "off"},
                       users=False)  # fmt: skip
    try:
        before = jsonl.read_text() + rotated.read_text()
        _some_requests(off.url)
        # nginx still logs every request to its own file.
        nginx_log = data / "run/nginx-access.log"
        _wait_for(lambda: nginx_log.read_text().count("/locks/verify") >= 6)
        time.sleep(0.5)
        assert jsonl.read_text() + rotated.read_text() == before
        assert "/locks/verify" not in off.log_text() and not (data / "run/access.log").exists()
        assert "access log: off" in off.log_text()
    finally:
        status = off.stop()
        shutil.rmtree(data, ignore_errors=True)
    assert status == 0


def test_unwritable_access_log_is_one_line_at_start_not_500s(tmp_path: Path) -> None:
    """A directory as LFS_ACCESS_LOG once answered every request 500 (the handler opened
    the file inside the request); `serve` now refuses it before starting anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["LFS_ACCESS_LOG"] = str(tmp_path)
    r = cli("serve", "--no-nginx", "--listen", f"127.0.0.1:{free_port()}", data=tmp_path / "d",
            env=env)  # fmt: skip
    assert r.returncode == 2, r
    assert r.stderr == (
        f"lfs-server: error: LFS_ACCESS_LOG {tmp_path} cannot be appended to (Is a"
        " directory); name a writable file, or 'stderr' or 'off'\n"
    )
    assert "serving" not in r.stdout
    # The message names where the value came from: the config file's key.
    del env["LFS_ACCESS_LOG"]
    conf = tmp_path / "lfs.toml"
    conf.write_text('access_log = "logs"\n')
    (tmp_path / "logs").mkdir()
    r = cli("serve", "--no-nginx", "--config", str(conf), "--listen",
            f"127.0.0.1:{free_port()}", data=tmp_path / "d", env=env)  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith(
        f"lfs-server: error: {conf}: access_log {tmp_path / 'logs'} cannot be appended to"
    ), r


def test_access_log_that_fails_later_never_fails_the_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log file gone bad after start (here: replaced by a directory) costs the line and
    one line on stderr (no logging traceback), but the request is still answered."""
    from lfs_server.app import create_app
    from lfs_server.config import Config

    log = tmp_path / "access.log"
    app = create_app(Config(data_dir=tmp_path / "d", access_log=str(log)))
    client = app.test_client()
    assert client.get("/openapi.json").status_code == 200
    assert "/openapi.json" in log.read_text()
    log.unlink()
    log.mkdir()  # logrotate-like replacement the worker cannot reopen
    assert client.get("/openapi.json").status_code == 200
    err = capsys.readouterr().err
    assert f"cannot write the access log {log}: Is a directory" in err and "Traceback" not in err
