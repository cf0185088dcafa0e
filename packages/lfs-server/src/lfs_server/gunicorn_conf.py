"""gunicorn settings for running lfs-server's app under your own nginx (shipped in the
wheel, so gunicorn reads it as a module):

    LFS_DATA_DIR=/srv/lfs gunicorn -c python:lfs_server.gunicorn_conf lfs_server.wsgi:app
    lfs-server nginx-config --data /srv/lfs > /etc/nginx/conf.d/lfs.conf   (then edit listen)

`lfs-server serve` starts gunicorn with this same file (its flags add bind, workers, pid).
"""

from typing import Any

from lfs_server.config import Config, ConfigError
from lfs_server.metrics import mark_worker_dead, prepare_multiprocess_dir

# The settings as the app reads them (variables, LFS_CONFIG_FILE): a bad one is one line.
try:
    _config = Config.from_env()
except ConfigError as exc:
    raise SystemExit(f"lfs-server: error: {exc}") from None
# A unix socket that only nginx uses: the app trusts body-file paths only from requests
# carrying the proxy secret that the generated nginx config adds.
bind = f"unix:{_config.run_dir / 'gunicorn.sock'}"
workers = _config.workers
# Threads, so that a worker waiting for an fsync, a close or the database answers other
# requests meanwhile; gunicorn's own error pages (requests it cannot parse) are git-lfs
# JSON, like the app's. 4 per worker (a constant, not a setting): git-lfs keeps 8
# transfers in flight, which the default 2 workers then take all at once.
worker_class = "lfs_server.gunicorn_worker.JsonErrorThreadWorker"
threads = 4
# nginx keeps idle connections to gunicorn open (upstream keepalive) and closes them after
# 60 s; gunicorn must not close first, or nginx could send a request on a closing one.
keepalive = 75
# Verifying a large upload hashes the whole body; allow for multi-GiB objects.
timeout = 600
graceful_timeout = 10
loglevel = "warning"
# No gunicorn access log: the app writes its own, with the user and repository gunicorn
# does not know (LFS_ACCESS_LOG, LFS_LOG_FORMAT; lfs_server/accesslog.py).
accesslog = None


def on_starting(server: Any) -> None:
    """In the master, before any worker: a fresh metrics folder the workers share."""
    prepare_multiprocess_dir(_config.run_dir, clear=True)


def child_exit(server: Any, worker: Any) -> None:
    """A worker died: its requests are no longer in flight (its counters stay counted)."""
    mark_worker_dead(worker.pid)
