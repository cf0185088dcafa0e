"""``python -m openvino_runner``: the same as the ``openvino-runner`` command."""

from openvino_runner.cli import main

raise SystemExit(main())
