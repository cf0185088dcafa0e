"""`python -m lfs_server`: the same as the `lfs-server` console script."""

from lfs_server.cli import main

raise SystemExit(main())
