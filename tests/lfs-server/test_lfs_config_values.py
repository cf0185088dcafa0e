"""Settings' values a new user got wrong (issue: lfs-server configuration leftovers): the
workers bound, errors naming where a value came from, an empty `--data`, `~` in paths, and
an access log that fails after start."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from lfs_server.config import Config, ConfigError, load_config
from lfs_testlib import start_server

SCRIPT = str(Path(sys.executable).parent / "lfs-server")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env.update(extra)
    return env


def _run(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The console script in *cwd* (where relative settings resolve), as a user types it."""
    return subprocess.run(
        [SCRIPT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _one_error(r: subprocess.CompletedProcess[str], message: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("lfs-server: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr


def _settings(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    assert r.returncode == 0, r.stderr
    settings: dict[str, dict[str, object]] = json.loads(r.stdout)["settings"]
    return settings


# Item 1: workers has an upper bound (fixed, not the CPU count: one file, every machine).
@pytest.mark.parametrize("workers", ["0", "65", "1000", "-1"])
@pytest.mark.parametrize("source", ["env", "flag", "file"])
def test_workers_outside_1_to_64_is_one_line_naming_its_origin(
    tmp_path: Path, source: str, workers: str
) -> None:
    toml = tmp_path / "lfs.toml"
    toml.write_text(f"workers = {workers}\n")
    args, env, origin = {
        "env": ((), _env(LFS_WORKERS=workers), "LFS_WORKERS"),
        "flag": (("--workers", workers), _env(), "--workers"),
        "file": (("--config", str(toml)), _env(), f"{toml}: workers"),
    }[source]
    r = _run(tmp_path, "config", *args, env=env)
    _one_error(r, f"{origin} must be 1 to 64 (gunicorn processes of 4 threads each; add nodes")
    assert f"got {workers}" in r.stderr


def test_workers_bounds_themselves_are_accepted(tmp_path: Path) -> None:
    from lfs_server.config import MAX_WORKERS

    assert MAX_WORKERS == 64
    for workers in ("1", "64"):
        r = _run(tmp_path, "config", "--json", "-", "--workers", workers, env=_env())
        assert _settings(r)["workers"] == {"value": int(workers), "source": "flag",
                                           "env": "LFS_WORKERS"}  # fmt: skip
    with pytest.raises(ConfigError, match="LFS_WORKERS must be 1 to 64"):
        Config(workers=65)


# Item 2: a bad value is named where it came from: the file and key, the variable, the flag.
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('listen = "8080"\n', "listen must be HOST:PORT, e.g. 127.0.0.1:8080, got '8080'"),
        ('listen = "h:99999"\n', "listen port must be 1-65535, got 99999"),
        ('log_format = "xml"\n', "log_format must be 'text' or 'json', got 'xml'"),
        ("token_ttl = 604801\n", "token_ttl must be at most 604800"),
        ('body_mode = "fast"\n', "body_mode must be 'nginx' or 'stream', got 'fast'"),
        ("login_failures = -1\n", "login_failures must be >= 0, got -1"),
        ('storage = "s3"\n', "storage is 's3', which needs s3_bucket (LFS_S3_BUCKET)"),
        ('access_log = "stdout"\n', "access_log must be 'off', 'stderr' or a file path"),
        ('storage = "s3"\ns3_bucket = "b"\ns3_endpoint = "ftp://h"\n',
         "s3_endpoint must be an http:// or https:// URL"),
    ],
)  # fmt: skip
def test_bad_file_value_names_the_file_and_key(tmp_path: Path, text: str, problem: str) -> None:
    toml = tmp_path / "lfs.toml"
    toml.write_text(text)
    r = _run(tmp_path, "config", "--config", str(toml), env=_env())
    _one_error(r, f"lfs-server: error: {toml}: {problem}")
    assert "LFS_" + problem.split()[0].upper() not in r.stderr
    with pytest.raises(ConfigError, match=f"^{re.escape(str(toml))}: "):
        load_config({}, toml)


def test_bad_value_names_the_variable_or_the_flag_it_came_from(tmp_path: Path) -> None:
    toml = tmp_path / "lfs.toml"
    toml.write_text('listen = "127.0.0.1:8080"\n')
    r = _run(tmp_path, "config", "--config", str(toml), env=_env(LFS_LISTEN="8080"))
    _one_error(r, "error: LFS_LISTEN must be HOST:PORT")
    r = _run(tmp_path, "config", "--config", str(toml), "--listen", "8080", env=_env())
    _one_error(r, "error: --listen must be HOST:PORT")
    # An API caller's override of a setting no option sets is named by its key.
    with pytest.raises(ConfigError, match=r"^body_mode must be 'nginx' or 'stream', got 'x'$"):
        load_config({}, None, body_mode="x")
    # A bad file value that a variable overrides is no error: the server never uses it.
    toml.write_text("workers = 1000\n")
    r = _run(tmp_path, "config", "--json", "-", "--config", str(toml), env=_env(LFS_WORKERS="3"))
    assert _settings(r)["workers"]["value"] == 3


# Item 3: an empty --data (or --config) would silently be the current folder.
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("config", "--data", ""), "--data is empty; name a path, or leave it out for the"
         " default (lfs-data)"),
        (("user", "add", "alice", "--password-stdin", "--data", ""), "--data is empty"),
        (("repo", "create", "team/x", "--data="), "--data is empty"),
        (("config", "--config", ""), "--config is empty; name a TOML file, or leave it out"),
        (("ssh", "--user", "alice", "--data", "", "--ssh-command",
          "git-lfs-authenticate team/x.git upload"), "--data is empty"),
    ],
)  # fmt: skip
def test_empty_data_flag_is_refused_not_the_current_folder(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    r = subprocess.run(
        [SCRIPT, *args], env=_env(), cwd=tmp_path, input="pw\n", capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    _one_error(r, message)
    assert list(tmp_path.iterdir()) == []


# Item 4: `~` and `~user` in paths from variables, the file and flags the shell left alone.
def test_tilde_in_paths_is_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    me = pwd.getpwuid(os.getuid())
    toml = home / "conf/lfs.toml"
    toml.parent.mkdir(parents=True)
    toml.write_text(f'users_file = "~/etc/users.json"\nlocks_db = "~{me.pw_name}/l.sqlite3"\n')
    env = _env(HOME=str(home), LFS_ACCESS_LOG="~/log/access.log",
               LFS_SECRET_KEY_FILE="~/key")  # fmt: skip
    r = _run(tmp_path, "config", "--json", "-", "--data=~/data", "--config=~/conf/lfs.toml",
             env=env)  # fmt: skip
    settings = _settings(r)
    assert settings["data_dir"]["value"] == str(home / "data")
    assert settings["users_file"] == {"value": str(home / "etc/users.json"), "source": "file",
                                      "env": "LFS_USERS_FILE"}  # fmt: skip
    assert settings["locks_db"]["value"] == str(Path(me.pw_dir).resolve() / "l.sqlite3")
    assert settings["access_log"]["value"] == str(home / "log/access.log")
    assert settings["secret_key_file"]["value"] == str(home / "key")
    assert json.loads(r.stdout)["config_file"] == str(toml)
    # A real command makes its files there, and no folder called '~' here.
    r = _run(tmp_path, "repo", "create", "team/x", "--data=~/data", env=_env(HOME=str(home)))
    assert r.returncode == 0, r.stderr
    assert (home / "data/repos").is_dir() and list(tmp_path.iterdir()) == [home]
    monkeypatch.setenv("HOME", str(home))
    assert load_config({"LFS_DATA_DIR": "~/d"}).config.root == home / "d"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {"LFS_DATA_DIR": "~no-such-user-lfs/x"},
         "LFS_DATA_DIR starts with '~no-such-user-lfs', but there is no user"
         " 'no-such-user-lfs'; give the full path, got '~no-such-user-lfs/x'"),
        (("--data=~no-such-user-lfs",), {}, "--data starts with '~no-such-user-lfs'"),
        (("--config=~no-such-user-lfs/lfs.toml",), {}, "--config starts with"),
        ((), {"LFS_ACCESS_LOG": "~no-such-user-lfs/a.log"}, "LFS_ACCESS_LOG starts with"),
    ],
)  # fmt: skip
def test_tilde_of_no_user_is_one_line_not_a_folder(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    r = _run(tmp_path, "config", *args, env=_env(**env))
    _one_error(r, message)
    assert list(tmp_path.iterdir()) == []


def test_tilde_of_no_user_in_the_file_names_file_and_key(tmp_path: Path) -> None:
    toml = tmp_path / "lfs.toml"
    toml.write_text('users_file = "~no-such-user-lfs/u.json"\n')
    expected = f"^{re.escape(str(toml))}: users_file starts with '~no-such-user-lfs'"
    with pytest.raises(ConfigError, match=expected):
        load_config({}, toml)


# Item 5: an access log that fails after start: one line, naming the file, then silence.
def _log_failures(err: str, log: Path) -> list[str]:
    assert "Traceback" not in err and "Logging error" not in err, err
    return [line for line in err.splitlines() if "cannot write the access log" in line]


@pytest.mark.parametrize("how", ["folder removed", "disk full"])
def test_access_log_failing_after_start_is_one_line_and_requests_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    from lfs_server.app import create_app

    log = tmp_path / "logs/access.log"
    app = create_app(Config(data_dir=tmp_path / "d", access_log=str(log)))
    client = app.test_client()
    assert client.get("/openapi.json").status_code == 200
    assert "/openapi.json" in log.read_text()
    if how == "folder removed":
        shutil.rmtree(log.parent)
        reason = "No such file or directory"
    else:
        log.unlink()
        log.symlink_to("/dev/full")  # every write: ENOSPC
        reason = "No space left on device"
    capsys.readouterr()
    for _ in range(5):
        assert client.get("/openapi.json").status_code == 200
    lines = _log_failures(capsys.readouterr().err, log)
    assert lines == [
        f"lfs-server: cannot write the access log {log}: {reason}; requests are still"
        " answered, their log lines lost until it can be written again"
    ]
    # Writable again: the lines come back, and a later failure is reported again.
    if how == "folder removed":
        log.parent.mkdir()
    else:
        log.unlink()
    assert client.get("/healthz").status_code == 200
    assert "/healthz" in log.read_text()
    shutil.rmtree(log.parent)
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert len(_log_failures(capsys.readouterr().err, log)) == 1


def test_served_access_log_folder_removed_costs_one_line_per_worker(tmp_path: Path) -> None:
    """The real `serve` (gunicorn, 2 workers): each request once printed a logging
    traceback into serve's output when the access log's folder was gone."""
    log = tmp_path / "logs/access.log"
    log.parent.mkdir()  # serve makes missing log folders inside the data folder only
    server = start_server(users=False, no_nginx=True, log=tmp_path / "serve.log",
                          extra_env={"LFS_ACCESS_LOG": str(log)})  # fmt: skip
    try:
        assert requests.get(f"{server.url}/openapi.json", timeout=10).status_code == 200
        shutil.rmtree(log.parent)
        # (A worker that boots only now makes the folder again: ask until one that has
        # lost its file answers, then some more.)
        for _ in range(100):
            assert requests.get(f"{server.url}/openapi.json", timeout=10).status_code == 200
            if _log_failures(server.log_text(), log):
                break
        for _ in range(8):
            assert requests.get(f"{server.url}/openapi.json", timeout=10).status_code == 200
    finally:
        status = server.stop()
    text = server.log_text()
    shutil.rmtree(server.data, ignore_errors=True)
    assert status == 0, text
    lines = _log_failures(text, log)
    assert 1 <= len(lines) <= 2, text  # once per worker process that answered
    assert all(f"the access log {log}: No such file or directory" in line for line in lines)
