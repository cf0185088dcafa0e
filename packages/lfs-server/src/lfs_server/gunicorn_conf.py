"""gunicorn settings for running lfs-server's app under your own nginx (shipped in the
wheel, so gunicorn reads it as a module):

    LFS_DATA_DIR=/srv/lfs gunicorn -c python:lfs_server.gunicorn_conf lfs_server.wsgi:app
    lfs-server nginx-config --data /srv/lfs > /etc/nginx/conf.d/lfs.conf   (then edit listen)

`lfs-server serve` starts gunicorn with these same settings itself.
"""

import os
from pathlib import Path

data = os.environ.get("LFS_DATA_DIR", "lfs-data")
# A unix socket that only nginx uses: the app trusts body-file paths only from requests
# carrying the proxy secret that the generated nginx config adds.
bind = f"unix:{Path(data).resolve() / 'run' / 'gunicorn.sock'}"
workers = int(os.environ.get("LFS_WORKERS", "2"))
# gunicorn's own error pages (requests it cannot parse) as git-lfs JSON, like the app's.
worker_class = "lfs_server.gunicorn_worker.JsonErrorSyncWorker"
# Verifying a large upload hashes the whole body; allow for multi-GiB objects.
timeout = 600
graceful_timeout = 10
loglevel = "warning"
