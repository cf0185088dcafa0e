"""The steps of `tools/demo`, run inside the workspace environment.

Each step uses the packages the way a user would: the Python API where the user writes
Python (exporting a model), the console scripts everywhere else. `run_demo(settings)` is
also what tests/integration/test_demo.py calls, with a smaller model and fewer iterations.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass
class Settings:
    """How big the demo is: the full demo, or the CI-sized one of the integration tests."""

    out: Path
    channels: int = 32
    size: int = 64
    bench_iterations: int = 50
    lfs_objects: int = 3


@dataclass
class Step:
    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Summary:
    steps: list[Step] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)


def say(message: str) -> None:
    print(message, flush=True)


def sh(cmd: list[str | os.PathLike[str]], **kwargs: Any) -> str:
    """Run a command, echo it, return its stdout; raise with its output when it fails."""
    shown = " ".join(str(c) for c in cmd)
    say(f"    $ {shown}")
    result = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"`{shown}` exited {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )
    return result.stdout


def tool(name: str) -> str:
    """A console script of the environment the demo runs in."""
    return str(BIN / name)


# --- step 1: a model with DeformConv2d, exported three ways -----------------------------


def build_model(settings: Settings) -> Any:
    """A small CNN with three DeformConv2d layers whose offsets and masks are predicted."""
    import torch
    from torch import nn
    from torchvision.ops import DeformConv2d

    class DeformBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, offset_groups: int) -> None:
            super().__init__()
            k = 3
            self.offset = nn.Conv2d(cin, 2 * offset_groups * k * k, 3, stride, 1)
            self.mask = nn.Conv2d(cin, offset_groups * k * k, 3, stride, 1)
            self.conv = DeformConv2d(cin, cout, k, stride=stride, padding=1)
            self.act = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # Offsets of a few pixels: many samples land between pixels and some outside.
            offset = 4.0 * torch.tanh(self.offset(x))
            mask = torch.sigmoid(self.mask(x))
            return self.act(self.conv(x, offset, mask))

    c = settings.channels
    torch.manual_seed(0)
    # A dense-prediction head (per-pixel logits): errors are measured on a full feature map.
    model = nn.Sequential(
        nn.Conv2d(3, c, 3, 1, 1),
        nn.ReLU(),
        DeformBlock(c, c, 1, 1),
        DeformBlock(c, 2 * c, 2, 2),
        DeformBlock(2 * c, 2 * c, 1, 4),
        nn.Conv2d(2 * c, 10, 1),
    )
    # He initialisation keeps activations of order 1 through the layers, so the errors
    # reported against PyTorch are relative to outputs of a meaningful size.
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, DeformConv2d)):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
    return model.eval()


def export_models(settings: Settings, summary: Summary) -> dict[str, Path]:
    import deform_conv2d_onnx_exporter as dce
    import numpy as np
    import onnx
    import torch

    out = settings.out / "models"
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(settings)
    x = torch.randn(1, 3, settings.size, settings.size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(x).numpy()
    np.save(out / "input.npy", x.numpy())
    np.save(out / "reference.npy", reference)
    summary.facts["reference output"] = {
        "shape": list(reference.shape),
        "max_abs": float(np.abs(reference).max()),
        "mean_abs": float(np.abs(reference).mean()),
    }

    files = {
        "torchscript-decomposed": out / "torchscript_decomposed.onnx",
        "dynamo-native": out / "dynamo_native.onnx",
        "dynamo-decomposed": out / "dynamo_decomposed.onnx",
        "native-lowered": out / "native_lowered.onnx",
    }
    dce.register_deform_conv2d_onnx_op()
    torch.onnx.export(
        model,
        (x,),
        str(files["torchscript-decomposed"]),
        dynamo=False,
        opset_version=16,
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
    )
    dce.export(model, (x,), files["dynamo-native"], opset_version=19, input_names=["x"])
    dce.export(
        model,
        (x,),
        files["dynamo-decomposed"],
        opset_version=19,
        decompose=True,
        input_names=["x"],
    )
    sh([tool("deform-conv2d-onnx"), "lower", files["dynamo-native"], "-o", files["native-lowered"]])
    for label, path in files.items():
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto, full_check=True)
        ops = [n.op_type for n in proto.graph.node]
        summary.facts.setdefault("models", {})[label] = {
            "file": str(path.relative_to(settings.out)),
            "nodes": len(ops),
            "DeformConv nodes": ops.count("DeformConv"),
            "bytes": path.stat().st_size,
        }
        say(f"    {label}: {len(ops)} nodes, {ops.count('DeformConv')} DeformConv")
    return files


# --- step 2: check and benchmark on OpenVINO and onnxruntime -----------------------------


def check_and_bench(settings: Settings, files: dict[str, Path], summary: Summary) -> None:
    import numpy as np
    import onnxruntime as ort

    models = settings.out / "models"
    x = np.load(models / "input.npy")
    reference = np.load(models / "reference.npy")
    reports = settings.out / "reports"
    reports.mkdir(exist_ok=True)
    for label, path in files.items():
        say(f"  {label}")
        feed_arg = f"{_input_name(path)}={models / 'input.npy'}"
        sh([tool("openvino-runner"), "info", path, "--json", reports / f"{label}.info.json"])
        sh(
            [
                tool("openvino-runner"),
                "compare",
                path,
                "--input",
                feed_arg,
                "--json",
                reports / f"{label}.compare.json",
            ]
        )
        outputs = settings.out / "outputs" / f"{label}.npz"
        outputs.parent.mkdir(exist_ok=True)
        sh(
            [
                tool("openvino-runner"),
                "run",
                path,
                "--input",
                feed_arg,
                "--precision",
                "f32",
                "--output",
                outputs,
            ]
        )
        ov_out = next(iter(np.load(outputs).values()))
        bench_json = reports / f"{label}.bench.json"
        sh(
            [
                tool("openvino-runner"),
                "bench",
                path,
                "--iterations",
                str(settings.bench_iterations),
                "--precision",
                "f32",
                "--threads",
                "2",
                "--input",
                feed_arg,
                "--json",
                bench_json,
                "--no-progress",
            ]
        )
        ov_latency = _median_latency_ms(json.loads(bench_json.read_text()))

        row = {
            "format": label,
            "runtime": "openvino (f32)",
            "max_abs_error_vs_pytorch": float(np.max(np.abs(ov_out - reference))),
            "median_latency_ms": ov_latency,
        }
        summary.table.append(row)
        if summary.facts["models"][label]["DeformConv nodes"]:
            row["runtime"] = "openvino (f32, DeformConv extension)"

        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}
        ort_out = session.run(None, feed)[0]
        times = []
        for _ in range(settings.bench_iterations):
            started = time.perf_counter()
            session.run(None, feed)
            times.append((time.perf_counter() - started) * 1000)
        summary.table.append(
            {
                "format": label,
                "runtime": "onnxruntime",
                "max_abs_error_vs_pytorch": float(np.max(np.abs(ort_out - reference))),
                "median_latency_ms": float(np.median(times)),
            }
        )
    worst = max(r["max_abs_error_vs_pytorch"] for r in summary.table)
    if worst > 1e-3:
        raise RuntimeError(f"an export differs from PyTorch by {worst:.2e} (> 1e-3)")


def _input_name(path: Path) -> str:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    return next(i.name for i in graph.input if i.name not in initializers)


def _median_latency_ms(report: dict[str, Any]) -> float:
    """The median latency from an `openvino-runner bench --json` report."""
    return float(report["latency_ms"]["median"])


# --- step 3: version the models through a real Git LFS server ----------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def lfs_server(data: Path, port: int, log: Path) -> Iterator[str]:
    with open(log, "w") as log_file:
        proc = subprocess.Popen(
            [tool("lfs-server"), "serve", "--data", str(data), "--listen", f"127.0.0.1:{port}"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"lfs-server exited {proc.returncode}: {log.read_text()[-2000:]}"
                    )
                if _healthy(f"{url}/healthz"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("lfs-server did not start within 60 s")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def git_lfs_roundtrip(settings: Settings, files: dict[str, Path], summary: Summary) -> None:
    work = settings.out / "lfs"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = work / "server-data"
    user, password = "demo", "demo-password-123"
    sh(
        [
            tool("lfs-server"),
            "user",
            "add",
            user,
            "--data",
            data,
            "--grant",
            "demo/*=admin",
            "--password-stdin",
        ],
        input=password + "\n",
    )
    home = work / "home"
    home.mkdir()
    env = dict(
        os.environ,
        HOME=str(home),
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME="Demo",
        GIT_AUTHOR_EMAIL="demo@example.com",
        GIT_COMMITTER_NAME="Demo",
        GIT_COMMITTER_EMAIL="demo@example.com",
    )
    sh(["git", "lfs", "install", "--skip-repo"], env=env)
    port = free_port()
    with lfs_server(data, port, work / "server.log") as url:
        (home / ".git-credentials").write_text(f"http://{user}:{password}@127.0.0.1:{port}\n")
        sh(["git", "config", "--global", "credential.helper", "store"], env=env)
        remote = work / "remote.git"
        sh(["git", "init", "-q", "--bare", "-b", "main", remote], env=env)
        repo = work / "repo"
        sh(["git", "init", "-q", "-b", "main", repo], env=env)
        lfs_url = f"{url}/demo/models.git/info/lfs"
        sh(["git", "-C", repo, "config", "-f", ".lfsconfig", "lfs.url", lfs_url], env=env)
        sh(["git", "-C", repo, "lfs", "track", "*.onnx"], env=env)
        digests = {}
        for path in files.values():
            shutil.copy(path, repo / path.name)
            digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        sh(["git", "-C", repo, "add", "."], env=env)
        sh(["git", "-C", repo, "commit", "-qm", "models"], env=env)
        sh(["git", "-C", repo, "remote", "add", "origin", remote], env=env)
        started = time.monotonic()
        sh(["git", "-C", repo, "push", "-q", "origin", "main"], env=env)
        push_s = time.monotonic() - started
        clone = work / "clone"
        started = time.monotonic()
        sh(["git", "clone", "-q", remote, clone], env=env)
        clone_s = time.monotonic() - started
        for name, digest in digests.items():
            got = hashlib.sha256((clone / name).read_bytes()).hexdigest()
            if got != digest:
                raise RuntimeError(f"{name}: cloned bytes differ from pushed ones")
        name = next(iter(digests))
        sh(["git", "-C", clone, "lfs", "lock", name], env=env)
        locks = sh(["git", "-C", clone, "lfs", "locks"], env=env)
        if name not in locks:
            raise RuntimeError(f"lock on {name} not listed: {locks}")
        sh(["git", "-C", clone, "lfs", "unlock", name], env=env)
        left = sh(["git", "-C", clone, "lfs", "locks"], env=env)
        if name in left:
            raise RuntimeError(f"lock on {name} still listed after unlock")
    summary.facts["lfs"] = {
        "objects": len(digests),
        "bytes": sum(p.stat().st_size for p in files.values()),
        "push_s": round(push_s, 2),
        "clone_s": round(clone_s, 2),
        "checksums_equal": True,
        "lock_released": True,
    }


# --- step 4: pack an inference app into a Windows executable -----------------------------


APP_MAIN = '''"""A tiny inference app: loads its model from its own bundle, classifies an input."""
import sys
from importlib.resources import files

import numpy as np
import onnxruntime as ort

model = files("demo_app").joinpath("model.onnx").read_bytes()
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
inp = session.get_inputs()[0]
shape = [d if isinstance(d, int) else 1 for d in inp.shape]  # dynamic dims: 1
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
logits = session.run(None, {inp.name: x})[0]
print(f"demo_app: {len(model)} model bytes from the bundle; argv={sys.argv[1:]}; "
      f"class={int(logits.argmax())}")
'''


def pack_exe(settings: Settings, files: dict[str, Path], summary: Summary) -> None:
    work = settings.out / "exe"
    shutil.rmtree(work, ignore_errors=True)
    app = work / "app"
    (app / "demo_app").mkdir(parents=True)
    (app / "main.py").write_text(APP_MAIN)
    (app / "demo_app" / "__init__.py").write_text('"""The demo app\'s data package."""\n')
    shutil.copy(files["native-lowered"], app / "demo_app" / "model.onnx")
    base = find_pe_base()
    exe = work / "demo_app.exe"
    sh([tool("exepy"), "build", exe.resolve(), "main.py", "demo_app", "--base", base], cwd=app)
    listing = sh([tool("exepy"), "list", exe])
    say("    " + listing.strip().replace("\n", "\n    "))
    ran = sh([sys.executable, "-m", "embeddedimport", exe, "hello"])
    say(f"    {ran.strip()}")
    if "model bytes from the bundle" not in ran:
        raise RuntimeError(f"the bundled app did not run: {ran}")
    summary.facts["exe"] = {
        "base": str(base),
        "bytes": exe.stat().st_size,
        "python -m embeddedimport": ran.strip(),
    }
    harness = wine_resource_dump(exe, work)
    summary.facts["exe"]["windows resource lookup"] = harness


def find_pe_base() -> Path:
    """A real Windows executable available offline: pip's own launcher."""
    import pip

    launchers = sorted(Path(pip.__file__).parent.glob("_vendor/distlib/t64.exe"))
    if not launchers:
        raise RuntimeError("no PE base found (pip's distlib launchers are missing)")
    return launchers[0]


def wine_resource_dump(exe: Path, work: Path) -> str:
    """What Windows' own resource lookup sees, through the Wine harness; skipped without Wine."""
    import embeddedimport.bundle as bundle

    harness_src = ROOT / "tests" / "exepy" / "harness" / "resdump.c"
    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    wine = shutil.which("wine")
    if not (gcc and wine and harness_src.exists()):
        return "skipped: Wine, mingw-w64 or the harness source is missing"
    harness = work / "resdump.exe"
    sh([gcc, "-municode", "-O2", "-o", harness, harness_src])
    env = dict(
        os.environ,
        WINEPREFIX=str(work / "wineprefix"),
        WINEDEBUG="-all",
        WINEDLLOVERRIDES="mscoree,mshtml=",
        DISPLAY="",
    )
    out_file = work / "resdump.txt"
    # Output through a file, not a pipe: Wine's server may keep a pipe open (ENVIRONMENT.md).
    with open(work / "wine.log", "wb") as log:
        subprocess.run(
            [wine, str(harness), _windows_path(exe), _windows_path(out_file)],
            stdout=log,
            stderr=log,
            env=env,
            timeout=180,
            check=False,
        )
    subprocess.run(["wineserver", "-k"], env=env, check=False, timeout=60)
    if not out_file.exists():
        raise RuntimeError(f"the Wine harness wrote nothing: {(work / 'wine.log').read_text()}")
    wanted = {
        f"#{bundle.RT_RCDATA}\t#{bundle.BUNDLE_ID}",
        f"#{bundle.RT_RCDATA}\t#{bundle.COMMAND_ID}",
    }
    found = [
        line
        for line in out_file.read_text().splitlines()
        if line.startswith("RES\t") and "\t".join(line.split("\t")[1:3]) in wanted
    ]
    if len(found) != 2:
        raise RuntimeError(
            f"Windows' resource lookup (Wine) did not find the bundle:\n{out_file.read_text()}"
        )
    return "; ".join(" ".join(line.split("\t")[1:5]) for line in found)


def _windows_path(path: Path) -> str:
    """The path Wine's Z: drive gives a Unix path."""
    return "Z:" + str(path.resolve()).replace("/", "\\")


# --- orchestration ---------------------------------------------------------------------


def run_demo(settings: Settings) -> Summary:
    settings.out.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    files: dict[str, Path] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        say(f"\n== {len(summary.steps) + 1}. {name}")
        record = Step(name)
        summary.steps.append(record)
        started = time.monotonic()
        try:
            fn()
            record.ok = True
        except Exception as exc:  # a failed step is reported, and the demo goes on
            record.detail = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        record.seconds = round(time.monotonic() - started, 1)
        say(f"   {'ok' if record.ok else 'FAILED'} in {record.seconds} s")

    step(
        "export a DeformConv2d CNN three ways, lower the native one",
        lambda: files.update(export_models(settings, summary)),
    )
    if files:
        step(
            "check and benchmark every file on OpenVINO and onnxruntime",
            lambda: check_and_bench(settings, files, summary),
        )
        step(
            "push, clone, lock and unlock the models through lfs-server",
            lambda: git_lfs_roundtrip(settings, files, summary),
        )
        step(
            "pack an inference app into a Windows executable",
            lambda: pack_exe(settings, files, summary),
        )
    write_summary(settings, summary)
    return summary


def write_summary(settings: Settings, summary: Summary) -> None:
    lines = ["# Demo summary", ""]
    lines += ["| step | result | seconds |", "|---|---|---|"]
    for s in summary.steps:
        first_line = s.detail.splitlines()[0][:200].replace("|", "/") if s.detail else ""
        result = "ok" if s.ok else f"FAILED: {first_line}"
        lines.append(f"| {s.name} | {result} | {s.seconds} |")
    if summary.table:
        lines += [
            "",
            "| format | runtime | max abs error vs PyTorch | median latency (ms) |",
            "|---|---|---|---|",
        ]
        for row in summary.table:
            lines.append(
                f"| {row['format']} | {row['runtime']} | "
                f"{row['max_abs_error_vs_pytorch']:.2e} | {row['median_latency_ms']:.2f} |"
            )
    for key, value in summary.facts.items():
        lines += ["", f"## {key}", "", "```", json.dumps(value, indent=2), "```"]
    text = "\n".join(lines) + "\n"
    (settings.out / "summary.md").write_text(text)
    (settings.out / "summary.json").write_text(
        json.dumps(
            {
                "ok": summary.ok,
                "steps": [asdict(s) for s in summary.steps],
                "table": summary.table,
                "facts": summary.facts,
            },
            indent=2,
        )
        + "\n"
    )
    say("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/demo")
    parser.add_argument("--out", type=Path, default=ROOT / "demo-output")
    parser.add_argument("--quick", action="store_true", help="the CI-sized demo")
    args = parser.parse_args(argv)
    settings = Settings(out=args.out.resolve())
    if args.quick:
        settings = Settings(out=settings.out, channels=8, size=32, bench_iterations=5)
    started = time.monotonic()
    summary = run_demo(settings)
    say(
        f"demo {'OK' if summary.ok else 'FAILED'} in {time.monotonic() - started:.0f} s; "
        f"summary in {settings.out / 'summary.md'}"
    )
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
