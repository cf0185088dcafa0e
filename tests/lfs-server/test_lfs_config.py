"""Settings (issue 24 item 5): one table behind the variables, the TOML config file, the
CLI's help and the README; file < environment < flags; `lfs-server config`."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lfs_server.config import SETTINGS, Config, ConfigError, load_config
from lfs_testlib import cli

SCRIPT = str(Path(sys.executable).parent / "lfs-server")

# A value other than the default for every Config field. A field missing here fails the
# first assertion below; a setting missing from SETTINGS fails the round trip.
NON_DEFAULT: dict[str, object] = {
    "data_dir": Path("/srv/lfs-data"),
    "listen": "0.0.0.0:9090",
    "workers": 7,
    "public_url": "https://lfs.example.com",
    "auto_create": False,
    "anonymous_read": True,
    "max_batch_objects": 17,
    "max_object_size": 0,
    "token_ttl": 99,
    "login_failures": 3,
    "db_busy_timeout": 4,
    "body_mode": "stream",
    "users_file": Path("/etc/lfs/users.json"),
    "locks_db": Path("/var/lib/lfs/locks.sqlite3"),
    "secret_key_file": Path("/etc/lfs/secret.key"),
    "nginx_body_dir": Path("/srv/lfs-data/body"),
    "access_log": "/var/log/lfs/access.log",
    "log_format": "json",
    "storage": "s3",
    "s3_endpoint": "http://rgw.example.com:7480",
    "s3_bucket": "lfs",
    "s3_region": "eu-west-1",
    "s3_prefix": "lfs/",
    "s3_transfer": "direct",
    "database_url": "postgresql://lfs:pw@db.example.com/lfs",
}


def test_config_env_roundtrip() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(Config)}
    assert set(NON_DEFAULT) == set(fields), set(fields) ^ set(NON_DEFAULT)
    assert all(NON_DEFAULT[name] != default for name, default in fields.items())
    config = Config(**NON_DEFAULT)  # type: ignore[arg-type]
    env = config.to_env()
    assert set(env) == {s.env for s in SETTINGS}
    assert Config.from_env(env) == config
    assert Config.from_env(Config.from_env(env).to_env()) == config


def test_the_table_is_the_config() -> None:
    assert [s.key for s in SETTINGS] == [f.name for f in dataclasses.fields(Config)]
    assert all(s.env == "LFS_" + s.key.upper() for s in SETTINGS)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    toml = _write(
        tmp_path / "lfs.toml",
        'data_dir = "data"\nlisten = "127.0.0.1:9001"\nworkers = 5\nanonymous_read = true\n'
        'users_file = "etc/users.json"\naccess_log = "off"\n'
        'database_url = "postgresql://lfs:hunter2@db/lfs"\n',
    )
    env = {"LFS_CONFIG_FILE": str(toml), "LFS_WORKERS": "6", "LFS_LISTEN": "127.0.0.1:9002"}
    loaded = load_config(env, None, listen="127.0.0.1:9003", public_url=None)
    config = loaded.config
    assert (config.listen, config.workers, config.anonymous_read) == ("127.0.0.1:9003", 6, True)
    # Paths in the file are relative to its folder, not to where the server starts.
    assert config.root == tmp_path / "data"
    assert config.users_path == tmp_path / "etc/users.json"
    assert loaded.file == toml
    sources = {row["key"]: row["source"] for row in loaded.describe()}
    assert sources["listen"] == "flag" and sources["workers"] == "env"
    assert sources["anonymous_read"] == "file" and sources["token_ttl"] == "default"
    shown = {row["key"]: row["value"] for row in loaded.describe()}
    assert shown["database_url"] == "postgresql://lfs:***@db/lfs"
    assert "hunter2" not in json.dumps(loaded.describe())
    assert shown["locks_db"] == str(tmp_path / "data/locks.sqlite3")  # the effective path
    # --config wins over LFS_CONFIG_FILE.
    other = _write(tmp_path / "other.toml", "workers = 9\n")
    assert load_config({"LFS_CONFIG_FILE": str(toml)}, other).config.workers == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('listn = "x:1"\n', "unknown key 'listn' (did you mean 'listen'?); the keys are data_dir,"),
        ('LFS_LISTEN = "x:1"\n', "unknown key 'LFS_LISTEN' (did you mean 'listen'?)"),
        (
            "[s3]\nbucket = 'b'\n",
            "[s3] is a table, but settings are top-level keys (did you mean 's3_bucket'?); the",
        ),
        (
            "[server]\nworkers = 4\n",
            "[server] is a table, but settings are top-level keys (did you mean 'workers'?)",
        ),
        ("[x]\ny = 1\n", "[x] is a table, but settings are top-level keys; the keys are data_dir,"),
        ('workers = "four"\n', "workers must be an integer, e.g. workers = 2, got 'four'"),
        ("workers = true\n", "workers must be an integer, e.g. workers = 2, got True (a boolean)"),
        ("anonymous_read = 1\n", "anonymous_read must be true or false, e.g. anonymous_read ="),
        ("listen = 8080\n", 'listen must be a string, e.g. listen = "127.0.0.1:8080", got 8080'),
        ("data_dir = 1979-05-27\n", "data_dir must be a string (a path)"),
        ("workers = [1]\n", "got [1] (an array)"),
        ('log_format = "xml"\n', "bad.toml: log_format must be 'text' or 'json', got 'xml'"),
        ("workers = \n", "is not valid TOML"),
        (b"workers = '\xff'\n", "cannot read config file"),
    ],
)
def test_bad_config_file_is_one_line_exit_2(
    tmp_path: Path, text: str | bytes, message: str
) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_bytes(text if isinstance(text, bytes) else text.encode())
    r = cli("config", "--config", str(toml), data=tmp_path)
    assert r.returncode == 2, r
    assert r.stderr.startswith("lfs-server: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(ConfigError):
        load_config({}, toml)


def test_missing_config_file_names_both_ways(tmp_path: Path) -> None:
    env = {**os.environ, "LFS_CONFIG_FILE": str(tmp_path / "nope.toml")}
    r = cli("user", "list", data=tmp_path, env=env)
    assert r.returncode == 2
    assert "nope.toml does not exist (from --config or LFS_CONFIG_FILE)" in r.stderr


def test_config_command_text_and_json(tmp_path: Path) -> None:
    toml = _write(tmp_path / "lfs.toml", 'workers = 4\ndatabase_url = "postgresql://u:pw@h/db"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["LFS_TOKEN_TTL"] = "60"
    r = subprocess.run(
        [SCRIPT, "config", "--config", str(toml), "--listen", "127.0.0.1:9", "--json", "-"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["config_file"] == str(toml)
    settings = report["settings"]
    assert list(settings) == [s.key for s in SETTINGS]
    assert settings["workers"] == {"value": 4, "source": "file", "env": "LFS_WORKERS"}
    assert settings["token_ttl"]["value"] == 60 and settings["token_ttl"]["source"] == "env"
    assert settings["listen"]["source"] == "flag" and settings["auto_create"]["value"] is True
    assert settings["database_url"]["value"] == "postgresql://u:***@h/db"
    assert "pw@" not in r.stdout + r.stderr
    # The text goes to stderr with --json -: one line per setting, key, source, value.
    lines = r.stderr.splitlines()
    assert lines[0] == f"config file: {toml}"
    assert lines[3].split() == ["workers", "file", "4"]
    assert len(lines) == 1 + len(SETTINGS)


def test_help_lists_every_variable_and_the_file() -> None:
    r = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=60, check=True)
    assert "LFS_CONFIG_FILE" in r.stdout
    for setting in SETTINGS:
        assert f"  {setting.env} " in r.stdout, setting.env


def test_ssh_forced_command_reads_its_config_file(tmp_path: Path) -> None:
    """sshd hands a forced command no environment: `lfs-server ssh --config FILE`."""
    data = tmp_path / "srv"
    r = cli("user", "add", "alice", "--grant", "*=read", "--password-stdin", data=data,
            stdin="pw\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    toml = _write(
        tmp_path / "lfs.toml", 'data_dir = "srv"\npublic_url = "https://lfs.example.com"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["SSH_ORIGINAL_COMMAND"] = "git-lfs-authenticate /team/game.git download"
    r = subprocess.run(
        [SCRIPT, "ssh", "--user", "alice", "--config", str(toml)],
        cwd=tmp_path / "srv",  # not where data_dir's "srv" is relative to
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["href"] == "https://lfs.example.com/team/game.git/info/lfs"
    assert answer["header"]["Authorization"].startswith("Bearer ")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
        # libpq also reads a password from the query: it leaked in `config` before.
        ("postgresql://u@h/db?sslmode=require&password=pw", "postgresql://u@h/db?sslmode=require&password=***"),
        ("postgresql://u:pw@h/db?PASSWORD=pw&x=1", "postgresql://u:***@h/db?PASSWORD=***&x=1"),
        ("postgresql://h/db", "postgresql://h/db"),
    ],
)  # fmt: skip
def test_config_masks_every_password_of_a_database_url(
    tmp_path: Path, url: str, shown: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["LFS_DATABASE_URL"] = url
    r = cli("config", "--json", "-", data=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["settings"]["database_url"]["value"] == shown
    assert "pw" not in r.stdout + r.stderr


def _run_in(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The console script run in *cwd*, where relative settings resolve."""
    return subprocess.run(
        [SCRIPT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("env_var", "value", "message"),
    [
        # Each would have become a file or folder of that name in the current folder.
        ("LFS_ACCESS_LOG", "OFF", "LFS_ACCESS_LOG must be 'off', 'stderr' or a file path,"
         " got 'OFF' (for a file of that name write ./OFF)"),
        ("LFS_ACCESS_LOG", "-", "got '-'"),
        ("LFS_ACCESS_LOG", "stdout", "got 'stdout'"),
        ("LFS_DATA_DIR", "", "LFS_DATA_DIR is empty; name a path, or leave it out for the"
         " default (lfs-data)"),
        ("LFS_USERS_FILE", "", "LFS_USERS_FILE is empty; name a path, or leave it out for the"
         " default (DATA/users.json)"),
        ("LFS_S3_ENDPOINT", "http://key:secret@rgw:7480",
         "without USER:PASSWORD@, got 'http://key:***@rgw:7480'"),
    ],
)  # fmt: skip
def test_bad_variable_is_one_line_exit_2(
    tmp_path: Path, env_var: str, value: str, message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env[env_var] = value
    r = _run_in(tmp_path, "config", env=env)
    assert r.returncode == 2, r
    assert r.stderr.startswith("lfs-server: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and "secret" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('access_log = "Off"\n', "got 'Off' (for a file of that name write ./Off)"),
        ('data_dir = ""\n', "lfs.toml: data_dir is empty; name a path, or leave it out"),
    ],
)
def test_file_value_that_would_mean_the_wrong_place(
    tmp_path: Path, text: str, message: str
) -> None:
    toml = _write(tmp_path / "lfs.toml", text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config({}, toml)


def test_config_shows_a_relative_access_log_where_serve_writes_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["LFS_ACCESS_LOG"] = "logs/access.log"
    r = _run_in(tmp_path, "config", "--json", "-", env=env)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["settings"]["access_log"]
    assert shown == {"value": str(tmp_path / "logs/access.log"), "source": "env",
                     "env": "LFS_ACCESS_LOG"}  # fmt: skip


def test_an_error_found_after_loading_names_the_values_origin(tmp_path: Path) -> None:
    """`serve` finds some problems (an access log it cannot append to) only after loading;
    the message names the variable, the file's key, the flag or the default it came from."""
    exc = ConfigError("LFS_WORKERS is bad", key="workers", problem="is bad")
    assert (
        str(load_config({}).named_by_origin(exc))
        == "the default workers (LFS_WORKERS unset) is bad"
    )
    assert str(load_config({"LFS_WORKERS": "3"}).named_by_origin(exc)) == "LFS_WORKERS is bad"
    conf = tmp_path / "lfs.toml"
    conf.write_text("workers = 3\n")
    loaded = load_config({}, conf)
    assert str(loaded.named_by_origin(exc)) == f"{conf}: workers is bad"
    assert str(load_config({}, workers=3).named_by_origin(exc)) == "--workers is bad"
    plain = ConfigError("no key")
    assert load_config({}).named_by_origin(plain) is plain
