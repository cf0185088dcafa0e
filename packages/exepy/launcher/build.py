"""Rebuild exepy's launcher (``src/exepy/launcher-win-amd64.exe``) from ``launcher.c``.

The binary is committed so that the exepy wheel, an editable install and the Windows CI
job need no C compiler; tests/exepy/test_exepy_standalone.py rebuilds it with mingw-w64
and checks that the committed file is exactly what this script produces (the build is
reproducible: no timestamp, stripped). Run after editing launcher.c:

    python packages/exepy/launcher/build.py            # needs x86_64-w64-mingw32-gcc
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "launcher.c"
TARGET = HERE.parent / "src" / "exepy" / "launcher-win-amd64.exe"
# Page-sized file alignment: Wine maps such an image's sections straight from the file;
# with mingw's default 512 it reads every section into memory at each start, which for a
# --onefile app means the 9 MB runtime resource too.
FLAGS = [
    "-municode", "-O2", "-s", "-Wall", "-Wextra", "-Werror", "-Wl,--no-insert-timestamp",
    "-Wl,--file-alignment,4096", "-Wl,--section-alignment,4096",
]  # fmt: skip


def build(output: Path, gcc: str = "x86_64-w64-mingw32-gcc") -> Path:
    """Compile launcher.c into *output* with *gcc* (mingw-w64, x86_64)."""
    subprocess.run([gcc, *FLAGS, "-o", str(output), str(SOURCE)], check=True, timeout=300)
    return output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=TARGET, help=f"default: {TARGET}")
    args = parser.parse_args()
    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    if gcc is None:
        sys.stderr.write(
            "build.py: error: x86_64-w64-mingw32-gcc is missing "
            "(apt-get install gcc-mingw-w64-x86-64)\n"
        )
        return 2
    sys.stdout.write(f"{build(args.output, gcc)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
