"""Models and helpers shared by the openvino-runner tests: small graphs built with
onnx.helper, the onnx wheel's light models with the rule for judging them on every CPU, and
`cli()`, which runs the command in-process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from openvino_runner.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def two_input_model(path: Path, outputs: tuple[str, str] = ("y", "z")) -> Path:
    """y = a * 2 + cast(b) with a: f32[?,4], b: i64[?,4]; z = relu(a).

    *outputs* renames the two outputs (y, z)."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["a", "two"], ["a2"]),
        helper.make_node("Add", ["a2", "bf"], [outputs[0]]),
        helper.make_node("Relu", ["a"], [outputs[1]]),
    ]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        nodes,
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("b", TensorProto.INT64, ["n", 4]),
        ],
        [
            helper.make_tensor_value_info(outputs[0], TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info(outputs[1], TensorProto.FLOAT, ["n", 4]),
        ],
        [two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def rounding_softmax_model(path: Path) -> Path:
    """prob = Softmax((x * 0 + 1) @ W) where every column of W is a permutation of the same
    1024 values spanning seven decades: whatever x is, the logits are mathematically equal
    and ~1e8, so each engine's summation order decides the (saturated) probabilities."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    k, c = 1024, 1000
    base = (rng.random(k) * 10.0 ** rng.integers(0, 7, k)).astype(np.float32)
    w = np.stack([rng.permutation(base) for _ in range(c)], axis=1)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "zero"], ["zeros"]),
            helper.make_node("Add", ["zeros", "one"], ["ones"]),
            helper.make_node("MatMul", ["ones", "W"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
        ],
        "rounding_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, c])],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.float32(0.0), "zero"),
            numpy_helper.from_array(np.float32(1.0), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


# -- the onnx wheel's light models, with the outputs onnx ships for them -------------------
# These models have constant weights, so every class gets the same logit, and most of them
# end in a Softmax over logits of enormous magnitude (light_squeezenet ~9.5e9, resnet50
# ~1.3e19, inception_v1 ~1.2e21, bvlc_alexnet ~3.6e12). At 9.5e9 one f32 step is 1024, and a
# softmax turns a logit difference d into output ratios of up to e^(2d): the probabilities
# are decided by the order in which an engine sums, not by the model. onnxruntime happens to
# give exactly equal logits (softmax 0.001 each, the expected file); OpenVINO f32 on AVX-512
# CPUs sums in another order, its logits spread over 3 steps (3e-7 relative: f32 rounding)
# and its softmax is 0.0/0.125 (issue 11). Comparing those probabilities with a tolerance
# tests the rounding of one CPU, not the conversion. So for these models the test compares
# what is meaningful on every CPU:
#  - the logits (the Softmax input, exposed as an extra graph output) against onnxruntime's,
#    with onnx's own model-test tolerance (rtol 1e-3), which f32 rounding cannot break;
#  - OpenVINO's softmax against a float64 softmax of OpenVINO's own logits: the softmax
#    itself is well-conditioned in its inputs (x - max(x) is exact for nearby floats), so
#    this holds tightly whether or not the logits came out equal;
#  - the probabilities against onnx's expected file only where the maths allows: when even
#    ROUNDING_STEPS f32 steps of logit error move the softmax by less than onnx's rtol.
LIGHT = ["squeezenet", "densenet121", "resnet50", "inception_v1", "shufflenet", "bvlc_alexnet"]
# Which light models end in an ill-conditioned softmax (checked against the rule below, so
# the strict check cannot silently disappear for a model that allows it).
ILL_CONDITIONED = {"squeezenet", "resnet50", "inception_v1", "bvlc_alexnet"}
ONNX_RTOL, ONNX_ATOL = 1e-3, 1e-7  # onnx's model-test rule
ROUNDING_STEPS = 1000  # generous: deep nets accumulate many roundings in their logits


def light_case(name: str) -> tuple[Path, str, np.ndarray, np.ndarray]:
    """Model path, input name, input, expected output: onnx's own rule for light models
    (input = arange(n) / n in the input's shape, unknown dims 1)."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    path = folder / f"light_{name}.onnx"
    model = onnx.load(str(path))
    initializers = {i.name for i in model.graph.initializer}
    graph_input = next(i for i in model.graph.input if i.name not in initializers)
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else 1
        for d in graph_input.type.tensor_type.shape.dim
    )
    n = int(np.prod(shape))
    data = (np.arange(n).reshape(shape) / n).astype(np.float32)
    expected = numpy_helper.to_array(onnx.load_tensor(str(folder / f"light_{name}_output_0.pb")))
    return path, graph_input.name, data, expected


def softmax64(logits: np.ndarray) -> np.ndarray:
    """Softmax in float64 with the light models' opset-9 rule (axis 1, the input flattened
    to 2-D there: squeezenet's (1, 1000, 1, 1) is one row of 1000)."""
    z = logits.astype(np.float64).reshape(logits.shape[0], -1)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(logits.shape)


def softmax_is_well_conditioned(logits: np.ndarray) -> bool:
    """True when ROUNDING_STEPS f32 steps of error in *logits* keep the softmax within
    onnx's rtol (a logit difference d scales softmax outputs by up to e^(2d) ~ 1 + 2d)."""
    step = float(np.spacing(np.float32(np.abs(logits).max())))
    return 2 * ROUNDING_STEPS * step <= ONNX_RTOL


def conv_net(path: Path) -> Path:
    """image f32[?,3,?,?] -> conv3x3(16) -> relu -> conv3x3(16) -> + -> global average pool."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c2", "r1"], ["s"]),
            helper.make_node("GlobalAveragePool", ["s"], ["pooled"]),
        ],
        "convnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path
