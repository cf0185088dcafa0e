"""The gunicorn entry point: `gunicorn lfs_server.wsgi:app` (settings from LFS_* variables)."""

from lfs_server.app import create_app
from lfs_server.config import Config

app = create_app(Config.from_env())
