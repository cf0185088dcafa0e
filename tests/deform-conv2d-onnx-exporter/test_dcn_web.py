"""The decomposed graph runs in onnxruntime-web (WebAssembly, the npm package) under Node.

onnxruntime-web is installed with npm, once per machine, into
``$MONOREPO_CACHE/pymonorepo-npm/onnxruntime-web-VERSION`` (default ``~/.cache``). Off CI a
missing node or npm skips these tests with the reason; in CI it fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from components import require_command
from dcn_support import ATOL, CASES, Case, case_ids, torchscript_export
from deform_conv2d_onnx_exporter import lower_deform_conv

VERSION = "1.31.1"
RUN = """
import * as ort from "onnxruntime-web";
import { readFileSync } from "node:fs";
ort.env.wasm.numThreads = 1;
const [model, feedsPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(feedsPath, "utf8"));
const session = await ort.InferenceSession.create(readFileSync(model), {
  executionProviders: ["wasm"],
});
const feeds = {};
for (const [name, { shape, data }] of Object.entries(spec)) {
  feeds[name] = new ort.Tensor("float32", Float32Array.from(data), shape);
}
const out = await session.run(feeds);
const result = {};
for (const [name, t] of Object.entries(out)) {
  result[name] = { shape: t.dims, data: Array.from(t.data) };
}
console.log(JSON.stringify(result));
"""


@pytest.fixture(scope="module")
def ort_web() -> Path:
    """A folder holding node_modules/onnxruntime-web and the runner script."""
    require_command("node", "nodejs")
    npm = require_command("npm", "npm")
    base = os.environ.get("MONOREPO_CACHE") or os.environ.get("XDG_CACHE_HOME")
    cache = Path(base or Path.home() / ".cache") / "pymonorepo-npm"
    folder = cache / f"onnxruntime-web-{VERSION}"
    if not (folder / "node_modules" / "onnxruntime-web" / "package.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".onnxruntime-web-", dir=cache))
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(staging),
             f"onnxruntime-web@{VERSION}"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.fail(f"npm install onnxruntime-web@{VERSION} failed: {done.stderr[-500:]}")
        try:
            staging.rename(folder)  # another run may have won the race: keep its copy
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    (folder / "run.mjs").write_text(RUN)
    return folder


def run_web(folder: Path, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    with tempfile.TemporaryDirectory() as scratch:
        path, data = Path(scratch) / "m.onnx", Path(scratch) / "feeds.json"
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = min(model.ir_version, 10)  # onnxruntime-web 1.31 reads IR <= 13
        onnx.save(model, path)
        data.write_text(
            json.dumps(
                {k: {"shape": list(v.shape), "data": v.ravel().tolist()} for k, v in feeds.items()}
            )
        )
        done = subprocess.run(
            ["node", str(folder / "run.mjs"), str(path), str(data)],
            capture_output=True, text=True, timeout=300, cwd=folder,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]
    (result,) = json.loads(done.stdout).values()
    return np.array(result["data"], np.float32).reshape(result["shape"])


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_lowered_graph_matches_torchvision_in_onnxruntime_web(case: Case, ort_web: Path) -> None:
    feeds = case.inputs(seed=2)
    want = case.reference(feeds)
    for opset in (19, 13):  # GridSample and GatherND variants
        got = run_web(ort_web, lower_deform_conv(case.onnx_deform_conv(19), opset), feeds)
        error = float(np.abs(got - want).max())
        assert error <= ATOL, f"opset {opset}: max abs error {error:.3g}"


def test_torchscript_export_runs_in_onnxruntime_web(ort_web: Path) -> None:
    case = CASES[2]
    feeds = case.inputs(*case.other_size(), seed=2)  # dynamic batch, height and width
    got = run_web(ort_web, torchscript_export(case, 16), feeds)
    assert float(np.abs(got - case.reference(feeds)).max()) <= ATOL
