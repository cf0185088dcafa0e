"""The gunicorn entry point: `gunicorn lfs_server.wsgi:app` (settings from LFS_* variables)."""

import os

from lfs_server.app import create_app
from lfs_server.config import Config
from lfs_server.fsmode import no_group_or_other_write
from lfs_server.metrics import MULTIPROC_ENV, prepare_multiprocess_dir

no_group_or_other_write()  # whatever umask gunicorn was started with
config = Config.from_env()
if MULTIPROC_ENV not in os.environ:
    # gunicorn started without lfs_server.gunicorn_conf (which names the folder): the
    # workers still share one, or each would answer /metrics with its own counts alone.
    prepare_multiprocess_dir(config.run_dir, clear=False)
app = create_app(config)
