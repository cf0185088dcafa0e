"""``python -m exepy``: the same as the ``exepy`` console script."""

import sys

from exepy.cli import main

if __name__ == "__main__":
    sys.exit(main())
