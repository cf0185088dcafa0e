"""Small ONNX models built with onnx.helper, shared by the openvino-runner tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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
    """prob = Softmax(x @ W) where every column of W is a permutation of the same 1024
    values spanning seven decades: the logits are mathematically equal and ~1e8, so each
    engine's summation order decides the (saturated) probabilities."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    k, c = 1024, 1000
    base = (rng.random(k) * 10.0 ** rng.integers(0, 7, k)).astype(np.float32)
    w = np.stack([rng.permutation(base) for _ in range(c)], axis=1)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
        ],
        "rounding_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, c])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path
