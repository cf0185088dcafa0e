"""`python tools/demo_steps ARGS`: what tools/demo runs inside the environment."""

import sys
from pathlib import Path

# Run as a folder, Python puts tools/demo_steps/ first on sys.path; the package and
# tools/common.py are found from its parent, tools/.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from demo_steps import main  # noqa: E402

sys.exit(main())
