"""``python -m deform_conv2d_onnx_exporter``: the `deform-conv2d-onnx` console script."""

from deform_conv2d_onnx_exporter.cli import main

raise SystemExit(main())
