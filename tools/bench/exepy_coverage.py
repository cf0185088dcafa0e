#!/usr/bin/env python3
"""How many real programs exepy builds into working Windows apps: a coverage table.

    tools/bench/exepy_coverage.py [--runtime 3.13] [--only NAME ...] [--modes onedir,onefile]

Each case is a small program that imports a popular package (or leans on a standard-library
behaviour apps rely on) and prints a real result. It is built the way a user would
(``exepy build OUT main.py --runtime V -r requirements.txt``, in ``--onedir`` and
``--onefile``) and run under Wine in one fresh prefix with no Python installed, stdio on
pipes. A case passes when the app exits 0 and prints the expected text. Prints one row per
case (the first line of the failure when it fails) and ``coverage: N/M`` per mode; cases
that fail only through a known Wine gap are listed apart and not counted (issue 22's rule).

Needs Wine and the package registries (pip downloads the wheels for win_amd64).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for src in ("exepy", "embeddedimport"):
    sys.path.insert(0, str(ROOT / "packages" / src / "src"))

from exepy import runtime  # noqa: E402
from exepy.cli import main as exepy_main  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One program: its requirements, its code, and text its output must contain."""

    requirements: str
    code: str
    expect: str
    wine_gap: str = ""  # why it cannot pass under Wine (not counted), if it cannot


CASES: dict[str, Case] = {
    # --- pure-Python packages -------------------------------------------------------------
    "requests": Case(
        "requests",
        "import requests\n"
        "r = requests.Request('GET', 'https://example.org/a', params={'q': 'x y'}).prepare()\n"
        "print(r.url)",
        "https://example.org/a?q=x+y",
    ),
    "idna": Case("idna", "import idna\nprint(idna.encode('bücher.de'))", "b'xn--bcher-kva.de'"),
    "certifi": Case(
        "certifi",
        "import certifi, os\nprint(os.path.getsize(certifi.where()) > 100000)",
        "True",
    ),
    "charset-normalizer": Case(
        "charset-normalizer",
        "from charset_normalizer import from_bytes\n"
        "print(from_bytes('Grüße aus Köln, schöne Grüße'.encode('utf-8')).best().encoding)",
        "utf_8",
    ),
    "urllib3": Case(
        "urllib3",
        "import urllib3\nprint(urllib3.util.parse_url('https://a.b:8080/p?q=1').port)",
        "8080",
    ),
    "six": Case("six", "import six\nprint(six.ensure_str(b'abc'))", "abc"),
    "attrs": Case(
        "attrs",
        "import attrs\n@attrs.define\nclass P:\n    x: int\n    y: int = 2\nprint(P(1))",
        "P(x=1, y=2)",
    ),
    "click": Case(
        "click",
        "import click\nfrom click.testing import CliRunner\n"
        "@click.command()\n@click.option('--n', default=1)\ndef c(n):\n    click.echo(n * 7)\n"
        "print(CliRunner().invoke(c, ['--n', '6']).output.strip())",
        "42",
    ),
    "rich": Case(
        "rich",
        "from rich.console import Console\nc = Console(record=True, width=40)\n"
        "c.print('[bold]hi[/bold] there')\nprint(c.export_text().strip())",
        "hi there",
    ),
    "colorama": Case("colorama", "import colorama\nprint(repr(colorama.Fore.RED))", "'\\x1b[31m'"),
    "tqdm": Case(
        "tqdm",
        "from tqdm import tqdm\nimport io\nprint(sum(tqdm(range(100), file=io.StringIO())))",
        "4950",
    ),
    "tomlkit": Case(
        "tomlkit",
        "import tomlkit\nprint(tomlkit.parse('a = 1\\n[b]\\nc = \"d\"')['b']['c'])",
        "d",
    ),
    "tomli": Case("tomli", "import tomli\nprint(tomli.loads('x = 3')['x'] * 2)", "6"),
    "packaging": Case(
        "packaging",
        "from packaging.version import Version\nprint(Version('1.10') > Version('1.9'))",
        "True",
    ),
    "python-dateutil": Case(
        "python-dateutil",
        "from dateutil import parser\nprint(parser.parse('2026-12-04T10:00:00+01:00').utcoffset())",
        "1:00:00",
    ),
    "pytz": Case(
        "pytz",
        "import pytz, datetime\n"
        "d = pytz.timezone('Europe/Paris').localize(datetime.datetime(2026, 7, 1))\n"
        "print(d.utcoffset())",
        "2:00:00",
    ),
    "tzdata+zoneinfo": Case(
        "tzdata",
        "import zoneinfo, datetime\n"
        "print(datetime.datetime(2026, 1, 1, tzinfo=zoneinfo.ZoneInfo('Asia/Tokyo')).utcoffset())",
        "9:00:00",
    ),
    "pygments": Case(
        "pygments",
        "from pygments import highlight\nfrom pygments.lexers import PythonLexer\n"
        "from pygments.formatters import HtmlFormatter\n"
        "print('class=\"k\"' in highlight('def f(): pass', PythonLexer(), HtmlFormatter()))",
        "True",
    ),
    "markdown": Case(
        "markdown",
        "import markdown\nprint(markdown.markdown('# Hi\\n\\n*x*', extensions=['toc']))",
        '<h1 id="hi">Hi</h1>',
    ),
    "docutils": Case(
        "docutils",
        "from docutils.core import publish_string\n"
        "print(b'<strong>b</strong>' in publish_string('**b**', writer_name='html'))",
        "True",
    ),
    "more-itertools": Case(
        "more-itertools",
        "import more_itertools as m\nprint(list(m.chunked(range(5), 2)))",
        "[[0, 1], [2, 3], [4]]",
    ),
    "sortedcontainers": Case(
        "sortedcontainers",
        "from sortedcontainers import SortedList\nprint(list(SortedList([3, 1, 2])))",
        "[1, 2, 3]",
    ),
    "networkx": Case(
        "networkx",
        "import networkx as nx\ng = nx.path_graph(5)\nprint(nx.shortest_path(g, 0, 4))",
        "[0, 1, 2, 3, 4]",
    ),
    "sympy": Case(
        "sympy",
        "import sympy as s\nx = s.symbols('x')\nprint(s.solve(x**2 - 4, x))",
        "[-2, 2]",
    ),
    "pyparsing": Case(
        "pyparsing",
        "import pyparsing as pp\n"
        "print(pp.Word(pp.nums)[1, ...].parse_string('1 22 333').as_list())",
        "['1', '22', '333']",
    ),
    "h11": Case(
        "h11",
        "import h11\nc = h11.Connection(h11.CLIENT)\n"
        "print(c.send(h11.Request(method='GET', target='/', headers=[('Host', 'a')]))[:14])",
        "b'GET / HTTP/1.1",
    ),
    "anyio": Case(
        "anyio",
        "import anyio\nasync def main():\n    await anyio.sleep(0)\n    return 5\n"
        "print(anyio.run(main))",
        "5",
    ),
    "httpx": Case(
        "httpx",
        "import httpx\nprint(httpx.URL('https://a.org/x').join('y'))",
        "https://a.org/y",
    ),
    "typing-extensions": Case(
        "typing-extensions",
        "from typing_extensions import TypedDict\nclass T(TypedDict):\n    a: int\n"
        "print(T.__required_keys__)",
        "frozenset({'a'})",
    ),
    "openpyxl": Case(
        "openpyxl",
        "import io, openpyxl\nwb = openpyxl.Workbook()\nwb.active['A1'] = 41\n"
        "wb.active['A2'] = '=A1+1'\nb = io.BytesIO()\nwb.save(b)\n"
        "print(openpyxl.load_workbook(io.BytesIO(b.getvalue())).active['A1'].value + 1)",
        "42",
    ),
    "tabulate": Case(
        "tabulate",
        "from tabulate import tabulate\nprint(tabulate([[1, 2]], headers=['a', 'b']))",
        "a    b",
    ),
    "wcwidth": Case("wcwidth", "import wcwidth\nprint(wcwidth.wcswidth('コンニチハ'))", "10"),
    "loguru": Case(
        "loguru",
        "import sys\nfrom loguru import logger\nlogger.remove()\n"
        "logger.add(sys.stdout, format='{level} {message}')\nlogger.info('logged')",
        "INFO logged",
    ),
    "platformdirs": Case(
        "platformdirs",
        "import platformdirs\nprint(platformdirs.user_data_dir('App', 'Me').endswith('App'))",
        "True",
    ),
    "filelock": Case(
        "filelock",
        "import filelock, tempfile, os\n"
        "p = os.path.join(tempfile.gettempdir(), 'exepy-cov.lock')\n"
        "with filelock.FileLock(p, timeout=5):\n    print('locked')",
        "locked",
    ),
    "jinja2": Case(
        "jinja2",
        "import jinja2\nprint(jinja2.Template('{{ x|upper }}!').render(x='hi'))",
        "HI!",
    ),
    # --- binary wheels (on disk: beside the exe, or unpacked once per user) ----------------
    "numpy": Case(
        "numpy==2.1.3",
        "import numpy as np\na = np.array([[3.0, 1.0], [1.0, 2.0]])\n"
        "print(np.linalg.solve(a, np.array([9.0, 8.0])).tolist())",
        "[2.0, 3.0]",
    ),
    "Pillow": Case(
        "Pillow",
        "import io\nfrom PIL import Image\nb = io.BytesIO()\n"
        "Image.new('RGB', (64, 32), (255, 0, 0)).save(b, 'PNG')\n"
        "im = Image.open(io.BytesIO(b.getvalue())).resize((8, 4))\n"
        "print(im.size, im.getpixel((1, 1)))",
        "(8, 4) (255, 0, 0)",
    ),
    "psutil": Case("psutil", "import psutil\nprint(psutil.cpu_count() >= 1)", "True"),
    "pyyaml": Case("pyyaml", "import yaml\nprint(yaml.safe_load('a: [1, 2]'))", "{'a': [1, 2]}"),
    "markupsafe": Case(
        "markupsafe", "from markupsafe import escape\nprint(escape('<a>'))", "&lt;a&gt;"
    ),
    "lxml": Case(
        "lxml",
        "from lxml import etree\nprint(etree.fromstring('<a><b>x</b></a>').findtext('b'))",
        "x",
    ),
    "cryptography": Case(
        "cryptography",
        "from cryptography.fernet import Fernet\nf = Fernet(Fernet.generate_key())\n"
        "print(f.decrypt(f.encrypt(b'secret')))",
        "b'secret'",
        wine_gap="its Rust extension imports bcryptprimitives.dll, which Wine 8 lacks",
    ),
    "pydantic": Case(
        "pydantic",
        "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nprint(M(x='5').x * 2)",
        "10",
        wine_gap="pydantic-core (Rust) imports bcryptprimitives.dll, which Wine 8 lacks",
    ),
    "msgpack": Case(
        "msgpack",
        "import msgpack\nprint(msgpack.unpackb(msgpack.packb({'a': [1, 2]})))",
        "{'a': [1, 2]}",
    ),
    # --- standard-library behaviours apps rely on --------------------------------------------
    "sqlite3": Case(
        "",
        "import sqlite3\nprint(sqlite3.connect(':memory:').execute('select 6*7').fetchone())",
        "(42,)",
    ),
    "ctypes": Case(
        "",
        "import ctypes\nprint(ctypes.windll.kernel32.GetCurrentProcessId() > 0)",
        "True",
    ),
    "ssl": Case(
        "",
        "import ssl\nc = ssl.create_default_context()\nprint(len(c.get_ca_certs()) > 0)",
        "True",
    ),
    "asyncio": Case(
        "",
        "import asyncio\nasync def f():\n    await asyncio.sleep(0.01)\n    return 3\n"
        "print(asyncio.run(f()))",
        "3",
    ),
    "threads": Case(
        "",
        "from concurrent.futures import ThreadPoolExecutor\n"
        "print(sum(ThreadPoolExecutor(4).map(lambda x: x * x, range(10))))",
        "285",
    ),
    "multiprocessing": Case(
        "",
        "import multiprocessing as mp\n"
        "def sq(x):\n    return x * x\n"
        "if __name__ == '__main__':\n"
        "    with mp.Pool(2) as p:\n        print(sum(p.map(sq, range(10))))",
        "285",
    ),
    "importlib.metadata": Case(
        "six",
        "import importlib.metadata as m\nprint(m.version('six').count('.') >= 1)",
        "True",
    ),
}


def _wine() -> tuple[str, str]:
    extra = os.pathsep.join([os.environ.get("PATH", ""), "/usr/lib/wine", "/usr/sbin"])
    wine, server = shutil.which("wine", path=extra), shutil.which("wineserver", path=extra)
    if wine is None or server is None:
        raise SystemExit("exepy_coverage: error: Wine is missing (apt-get install wine64 wine)")
    return wine, server


def _build(folder: Path, name: str, case: Case, version: str, mode: str) -> tuple[Path, str]:
    """Build *case* in *mode*; return the exe and '' or the build's error line."""
    work = folder / f"{name}-{mode}"
    work.mkdir(parents=True)
    (work / "main.py").write_text(case.code + "\n", encoding="utf-8")
    args = ["build", "dist" if mode == "onedir" else "main.exe", "main.py"]
    args += ["--runtime", version, f"--{mode}", "--no-progress"]
    if case.requirements:
        (work / "requirements.txt").write_text(case.requirements + "\n")
        args += ["-r", "requirements.txt"]
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = exepy_main(args)
    except SystemExit as exc:
        status = int(exc.code or 0)
    finally:
        os.chdir(cwd)
    exe = work / ("dist/main.exe" if mode == "onedir" else "main.exe")
    return exe, "" if status == 0 else "build: " + (err.getvalue().strip().splitlines() or ["?"])[
        -1
    ]


def _run(wine: str, env: dict[str, str], exe: Path, expect: str) -> str:
    """Run *exe*; '' when it passes, else the first line saying why."""
    try:
        proc = subprocess.run(
            [wine, str(exe)], env=env, stdin=subprocess.DEVNULL, capture_output=True,
            timeout=120, check=False, cwd=exe.parent,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "run: timed out after 120 s"
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode == 0 and expect in out:
        return ""
    errors = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    last = errors[-1] if errors else f"printed {out.strip()[:80]!r}"
    return f"run: exit {proc.returncode}: {last[:150]}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", default="3.13", help="CPython version (default 3.13)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these cases")
    parser.add_argument("--modes", default="onedir,onefile", help="onedir,onefile (default)")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"onedir", "onefile"}:
        parser.error("--modes takes onedir and/or onefile")
    names = args.only or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"no such case: {', '.join(unknown)} (cases: {', '.join(CASES)})")
    wine, server = _wine()
    found = runtime.fetch(args.runtime)
    results: dict[str, dict[str, str]] = {name: {} for name in names}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="exepy-coverage-") as folder:
        prefix = Path(folder) / "prefix"
        prefix.mkdir()
        env = {
            **os.environ,
            "WINEPREFIX": str(prefix),
            "WINEDEBUG": "-all",
            # wbemprox off: CPython 3.12+'s platform.uname() aborts in Wine's WMI otherwise
            "WINEDLLOVERRIDES": "mscoree,mshtml=;wbemprox=d",
            "DISPLAY": "",
        }
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.run([server, "-p"], env=env, check=True, **quiet)  # type: ignore[call-overload]
        try:
            subprocess.run([wine, "cmd", "/c", "exit"], env=env, check=False, **quiet)  # type: ignore[call-overload]
            for name in names:
                case = CASES[name]
                for mode in modes:
                    exe, why = _build(Path(folder), name, case, found.version, mode)
                    results[name][mode] = why or _run(wine, env, exe, case.expect)
                    shown = results[name][mode] or "pass"
                    print(f"{name:<20} {mode:<8} {shown}", file=sys.stderr, flush=True)
        finally:
            subprocess.run([server, "-k"], env=env, check=False)

    print(f"Python {found.version} under Wine; {len(names)} cases; "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    print()
    print("| case | " + " | ".join(modes) + " | first failure |")
    print("|---|" + "---|" * len(modes) + "---|")
    for name in names:
        marks = [("pass" if not results[name][m] else "FAIL") for m in modes]
        why = next((results[name][m] for m in modes if results[name][m]), "")
        gap = f" (Wine gap: {CASES[name].wine_gap})" if CASES[name].wine_gap else ""
        print(f"| {name} | " + " | ".join(marks) + f" | {why}{gap} |")
    print()
    counted = [n for n in names if not CASES[n].wine_gap]
    for mode in modes:
        passed = sum(1 for n in counted if not results[n][mode])
        share = 100 * passed / max(1, len(counted))
        print(f"coverage {mode}: {passed}/{len(counted)} ({share:.0f} %)")
    gaps = [n for n in names if CASES[n].wine_gap]
    if gaps:
        print("not counted (Wine gaps): " + ", ".join(f"{n} ({CASES[n].wine_gap})" for n in gaps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
