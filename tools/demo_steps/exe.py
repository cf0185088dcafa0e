"""Step 4: pack an inference app into a Windows executable (exepy), run it (embeddedimport).

Windows' own resource lookup is checked with the C harness tools/harness/resdump.c (shared
with exepy's tests), built with mingw-w64 and run under Wine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from common import ROOT, say, sh, tool

from .report import Settings, Summary

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
    summary.facts["exe"]["standalone (Wine, no Python installed)"] = standalone_exe(app, work)
    summary.facts["exe"]["tkinter click counter (onefile, Wine + Xvfb)"] = tkinter_exe(work)
    summary.facts["exe"]["numpy app (onefile, Wine)"] = numpy_exe(work)


STANDALONE_MAIN = '''"""The demo's standalone app: pure Python, runs without an installed Python."""
import hashlib
import sys
from importlib.resources import files

model = files("demo_app").joinpath("model.onnx").read_bytes()
print(f"standalone: Python {sys.version.split()[0]} read {len(model)} model bytes, "
      f"sha256 {hashlib.sha256(model).hexdigest()[:16]}")
'''


def standalone_exe(app: Path, work: Path) -> str:
    """Build a one-file standalone app (exepy's launcher + official Windows CPython) and run
    it under Wine in a fresh prefix with no Python; skipped without Wine."""
    import hashlib

    wine, server = shutil.which("wine"), shutil.which("wineserver")
    if not (wine and server):
        return "skipped: Wine is missing"
    (app / "standalone.py").write_text(STANDALONE_MAIN)
    exe = work / "standalone.exe"
    sh([tool("exepy"), "runtime", "fetch", "3.13"])
    sh([tool("exepy"), "build", exe.resolve(), "standalone.py", "demo_app", "--runtime", "3.13",
        "--onefile"], cwd=app)  # fmt: skip
    prefix = work / "standalone-prefix"
    prefix.mkdir()
    env = dict(os.environ, WINEPREFIX=str(prefix), WINEDEBUG="-all",
               WINEDLLOVERRIDES="mscoree,mshtml=", DISPLAY="")  # fmt: skip
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    subprocess.run([server, "-p"], check=True, timeout=60, **quiet)  # type: ignore[call-overload]
    try:
        # Create the prefix first with no pipes open (its services keep their stdio); then
        # run CPython with pipes: under Wine it cannot start with files as stdio.
        subprocess.run([wine, "cmd", "/c", "exit"], timeout=300, check=False, **quiet)  # type: ignore[call-overload]
        ran = subprocess.run([wine, str(exe)], env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=300, check=False)  # fmt: skip
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)
    out = ran.stdout.decode("utf-8", "replace").strip()
    digest = hashlib.sha256((app / "demo_app" / "model.onnx").read_bytes()).hexdigest()[:16]
    if ran.returncode != 0 or digest not in out:
        raise RuntimeError(
            f"the standalone app failed under Wine (exit {ran.returncode}): {out} "
            f"{ran.stderr.decode('utf-8', 'replace')[-1000:]}"
        )
    say(f"    {out} ({exe.stat().st_size / 1e6:.1f} MB exe)")
    return f"{out} ({exe.stat().st_size} bytes)"


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

    harness_src = ROOT / "tools" / "harness" / "resdump.c"
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
    # Output through a file, not a pipe: wineserver outlives the program and can keep an
    # inherited pipe open, so reading the pipe to its end would hang.
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


COUNTER_MAIN = """\
import tkinter

root = tkinter.Tk()
root.title("exepy counter")
clicks = tkinter.IntVar(root, 0)
label = tkinter.Label(root, textvariable=clicks)
button = tkinter.Button(root, text="Click me", command=lambda: clicks.set(clicks.get() + 1))
label.pack()
button.pack()


def drive():  # the demo clicks for you
    for _ in range(5):
        button.invoke()
    print(f"counter: {clicks.get()} clicks, Tk {root.tk.call('info', 'patchlevel')}")
    root.destroy()


root.after(100, drive)
root.mainloop()
"""


def tkinter_exe(work: Path) -> str:
    """The original exepy's click counter as a one-file tkinter app on CPython 3.13, run
    under Wine + Xvfb in a fresh prefix (Tcl/Tk is built once per machine and cached)."""
    wine, server, xvfb = shutil.which("wine"), shutil.which("wineserver"), shutil.which("Xvfb")
    if not (wine and server and xvfb):
        return "skipped: Wine or Xvfb is missing"
    app = work / "counter"
    app.mkdir()
    (app / "counter.py").write_text(COUNTER_MAIN)
    exe = work / "counter.exe"
    sh([tool("exepy"), "runtime", "tk", "3.13"])
    sh([tool("exepy"), "build", exe.resolve(), "counter.py", "--runtime", "3.13", "--onefile"],
       cwd=app)  # fmt: skip
    prefix = work / "counter-prefix"
    prefix.mkdir()
    x = subprocess.Popen([xvfb, "-displayfd", "1", "-nolisten", "tcp"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert x.stdout is not None
    display = ":" + x.stdout.readline().strip()
    env = dict(os.environ, WINEPREFIX=str(prefix), WINEDEBUG="-all",
               WINEDLLOVERRIDES="mscoree,mshtml=", DISPLAY=display)  # fmt: skip
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    try:
        subprocess.run([server, "-p"], check=True, timeout=60, **quiet)  # type: ignore[call-overload]
        subprocess.run([wine, "cmd", "/c", "exit"], timeout=300, check=False, **quiet)  # type: ignore[call-overload]
        ran = subprocess.run([wine, str(exe)], env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=300, check=False)  # fmt: skip
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)
        x.terminate()
        x.wait(timeout=30)
        x.stdout.close()
    out = ran.stdout.decode("utf-8", "replace").strip()
    if ran.returncode != 0 or not out.startswith("counter: 5 clicks"):
        raise RuntimeError(
            f"the tkinter app failed under Wine (exit {ran.returncode}): {out} "
            f"{ran.stderr.decode('utf-8', 'replace')[-1000:]}"
        )
    say(f"    {out} ({exe.stat().st_size / 1e6:.1f} MB exe)")
    return f"{out} ({exe.stat().st_size} bytes)"


NUMPY_MAIN = """\
import numpy as np

a = np.array([[3.0, 1.0], [1.0, 2.0]])
x = np.linalg.solve(a, np.array([9.0, 8.0]))  # LAPACK through numpy's OpenBLAS
print(f"numpy {np.__version__}: solve {x.tolist()}, det {np.linalg.det(a):.1f}")
"""


def numpy_exe(work: Path) -> str:
    """A numpy app as one --onefile exe (numpy's Windows wheel inside, unpacked once per
    user at its first run), run twice under Wine in a fresh prefix; skipped without Wine.
    numpy 2.1.3: later releases call ucrtbase's crealf, which Wine 8 lacks."""
    import time

    wine, server = shutil.which("wine"), shutil.which("wineserver")
    if not (wine and server):
        return "skipped: Wine is missing"
    app = work / "numpy-app"
    app.mkdir()
    (app / "solve.py").write_text(NUMPY_MAIN)
    (app / "requirements.txt").write_text("numpy==2.1.3\n")
    exe = work / "solve.exe"
    sh([tool("exepy"), "build", exe.resolve(), "solve.py", "--runtime", "3.13",
        "-r", "requirements.txt"], cwd=app)  # fmt: skip
    prefix = work / "numpy-prefix"
    prefix.mkdir()
    env = dict(os.environ, WINEPREFIX=str(prefix), WINEDEBUG="-all",
               WINEDLLOVERRIDES="mscoree,mshtml=", DISPLAY="")  # fmt: skip
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    took = []
    try:
        subprocess.run([server, "-p"], check=True, timeout=60, **quiet)  # type: ignore[call-overload]
        subprocess.run([wine, "cmd", "/c", "exit"], timeout=300, check=False, **quiet)  # type: ignore[call-overload]
        for _ in range(2):  # the first run unpacks numpy; the second finds it
            started = time.monotonic()
            ran = subprocess.run([wine, str(exe)], env=env, stdin=subprocess.DEVNULL,
                                 capture_output=True, timeout=300, check=False)  # fmt: skip
            took.append(time.monotonic() - started)
            if ran.returncode != 0:
                break
    finally:
        subprocess.run([server, "-k"], env=env, check=False, timeout=60)
    out = ran.stdout.decode("utf-8", "replace").strip()
    if ran.returncode != 0 or "solve [2.0, 3.0], det 5.0" not in out:
        raise RuntimeError(
            f"the numpy app failed under Wine (exit {ran.returncode}): {out} "
            f"{ran.stderr.decode('utf-8', 'replace')[-1000:]}"
        )
    timing = f"first run {took[0]:.2f} s (unpacks numpy), then {took[1]:.2f} s"
    say(f"    {out} ({exe.stat().st_size / 1e6:.1f} MB exe; {timing})")
    return f"{out} ({exe.stat().st_size} bytes; {timing})"
