"""``python -m embeddedimport APP.exe [ARGS...]``: run a bundled application on any OS."""

import sys

from embeddedimport.cli import main

if __name__ == "__main__":
    sys.exit(main())
