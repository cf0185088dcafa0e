"""Render the nginx configuration (a pure function of the settings) and find nginx."""

from __future__ import annotations

import os
import shutil
from importlib import resources

from lfs_server import __version__
from lfs_server.config import Config
from lfs_server.transfer_api import STORE_LOCATION

_PROXY_HEADERS = (
    "proxy_http_version 1.1",
    'proxy_set_header Connection ""',
    "proxy_set_header Host $http_host",
    "proxy_set_header X-Forwarded-Proto $scheme",
    "proxy_set_header X-Forwarded-For $remote_addr",
    "proxy_set_header X-Request-Id $request_id",
    "proxy_set_header X-Lfs-Proxy-Auth {secret}",
    "proxy_read_timeout 600s",
    "proxy_send_timeout 600s",
)


def socket_path(config: Config) -> str:
    """The unix socket gunicorn listens on and only nginx connects to."""
    return str(config.run_dir / "gunicorn.sock")


def render_nginx_config(
    config: Config, proxy_secret: str, upstream: str | None = None, nginx_workers: str = "auto"
) -> str:
    """The nginx.conf text for *config*; *upstream* defaults to the gunicorn unix socket."""
    template = resources.files("lfs_server").joinpath("nginx.conf.in").read_text(encoding="utf-8")
    # nginx inherits proxy_set_header only when a location sets none, so each location
    # that sets its own repeats the whole list.
    proxy_settings = "\n".join(
        f"            {line.format(secret=proxy_secret)};" for line in _PROXY_HEADERS
    )
    max_body = str(config.max_object_size) if config.max_object_size else "0"
    values = {
        "version": __version__,
        "nginx_workers": nginx_workers,
        "run_dir": str(config.run_dir),
        "tmp_dir": str(config.tmp_dir),
        "body_dir": str(config.body_dir),
        "repos_dir": str(config.repos_dir),
        "upstream": upstream or f"unix:{socket_path(config)}",
        "listen": config.listen,
        "max_body": max_body,
        "store_location": STORE_LOCATION,
        "proxy_settings": proxy_settings,
    }
    text = template
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    return text


def find_nginx() -> str | None:
    """The nginx binary: $LFS_NGINX_BIN if set, else PATH (plus /usr/sbin, Debian's place)."""
    explicit = os.environ.get("LFS_NGINX_BIN")
    if explicit is not None:
        return explicit if os.access(explicit, os.X_OK) else None
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    return shutil.which("nginx", path=path)
