"""The gunicorn entry point: `gunicorn lfs_server.wsgi:app` (settings from LFS_* variables)."""

from lfs_server.app import create_app
from lfs_server.config import Config
from lfs_server.fsmode import no_group_or_other_write

no_group_or_other_write()  # whatever umask gunicorn was started with
app = create_app(Config.from_env())
