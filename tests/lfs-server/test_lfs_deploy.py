"""deploy/: the documented pieces agree with the code, and the own-nginx setup works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from lfs_server.config import SETTINGS, Config
from lfs_testlib import Api, cli, free_port, make_data_dir, oid_of

PKG = Path(__file__).resolve().parents[2] / "packages/lfs-server"
KNOWN = {setting.env for setting in SETTINGS} | {
    "LFS_CONFIG_FILE",
    "LFS_NGINX_BIN",
    "LFS_HOOK_USER",
    "LFS_HOOK_PASSWORD",
    "LFS_FUZZ_EXAMPLES",  # the fuzz test's example count, not a server setting
    "LFS_ROOT",  # gitlfs_with_nginx's setting, in the README's mapping to ours
}


@pytest.mark.parametrize("name", ["deploy/Dockerfile", "deploy/compose.yaml", "README.md"])
def test_documented_variables_exist(name: str) -> None:
    used = set(re.findall(r"\bLFS_[A-Z_]+\b", (PKG / name).read_text()))
    assert used, name
    assert used <= KNOWN, used - KNOWN


def settings_table() -> str:
    """The README's Configuration table, made from config.SETTINGS (the one table)."""
    rows = ["| Key | Default | Meaning |", "| --- | --- | --- |"]
    for setting in SETTINGS:
        default = Config.__dataclass_fields__[setting.key].default
        if setting.default:
            shown = setting.default
        elif isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        else:
            shown = f"`{default}`"
        rows.append(f"| `{setting.key}` | {shown} | {setting.help} |")
    return "\n".join(rows) + "\n"


def test_readme_settings_table_is_the_settings_table() -> None:
    readme = (PKG / "README.md").read_text()
    table = settings_table()
    assert table in readme, f"the README's Configuration table must read:\n{table}"


def test_dockerfile_runs_the_tested_entrypoint() -> None:
    text = (PKG / "deploy/Dockerfile").read_text()
    assert 'ENTRYPOINT ["lfs-server"]' in text and 'CMD ["serve"]' in text
    assert "apt-get install -y --no-install-recommends nginx" in text


@pytest.mark.nginx
def test_own_nginx_with_printed_config_and_deploy_gunicorn_conf() -> None:
    from components import require_command

    nginx = require_command("nginx")
    data = make_data_dir()
    assert (
        cli(
            "user",
            "add",
            "alice",
            "--grant",
            "*=write",
            "--password-stdin",
            data=data,
            stdin="alice-pw\n",
        ).returncode
        == 0
    )
    port = free_port()
    conf = cli("nginx-config", "--listen", f"127.0.0.1:{port}", data=data)
    assert conf.returncode == 0, conf.stderr
    (data / "nginx.conf").write_text(conf.stdout)
    env = {**os.environ, "LFS_DATA_DIR": str(data)}
    gunicorn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "python:lfs_server.gunicorn_conf",
            "lfs_server.wsgi:app",
        ],
        env=env,
    )
    ngx = subprocess.Popen(
        [
            nginx,
            "-p",
            f"{data}/",
            "-c",
            str(data / "nginx.conf"),
            "-e",
            f"{data}/run/nginx-error.log",
            "-g",
            f"daemon off; pid {data}/run/own-nginx.pid;",
        ],
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass  # gunicorn's socket takes connections before a worker has booted
            time.sleep(0.1)

        class Own:
            def lfs(self, repo: str) -> str:
                return f"{url}/{repo}.git/info/lfs"

        api = Api(Own())  # type: ignore[arg-type]
        payload = os.urandom(30_000)
        api.upload("own/nginx", payload)
        action = api.download_action("own/nginx", oid_of(payload), len(payload))
        assert requests.get(action["href"], headers=action["header"], timeout=10).content == payload
    finally:
        ngx.send_signal(signal.SIGQUIT)
        gunicorn.send_signal(signal.SIGTERM)
        ngx.wait(timeout=20)
        gunicorn.wait(timeout=20)
