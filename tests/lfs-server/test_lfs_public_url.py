"""A public URL (`--public-url`, `LFS_PUBLIC_URL`, `public_url`, `ssh --url`) begins every
action href: one git-lfs cannot use is refused at start, not mid-push. Found trying the
0.1.0 wheel: `serve --public-url 127.0.0.1:8080` started, then `git push` failed with
git-lfs's `missing protocol: "127.0.0.1:8080/team/demo.git/info/lfs/upload/..."`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lfs_server.config import Config, ConfigError

SCRIPT = str(Path(sys.executable).parent / "lfs-server")
BAD = ["127.0.0.1:8080", "lfs.example.com", "ftp://lfs.example.com", "https://", "http://a b"]


def _config(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env.update(extra)
    return subprocess.run(
        [SCRIPT, "config", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("url", BAD)
def test_a_public_url_git_lfs_cannot_use_is_one_line(tmp_path: Path, url: str) -> None:
    toml = tmp_path / "lfs.toml"
    toml.write_text(f'public_url = "{url}"\n')
    for args, extra, origin in [
        (("--public-url", url), {}, "--public-url"),
        ((), {"LFS_PUBLIC_URL": url}, "LFS_PUBLIC_URL"),
        (("--config", str(toml)), {}, f"{toml}: public_url"),
    ]:
        r = _config(tmp_path, *args, **extra)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stderr == (
            f"lfs-server: error: {origin} must be an http:// or https:// URL,"
            f" e.g. https://lfs.example.com, got {url!r}\n"
        )


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "https://lfs.example.com/", "https://h.example/lfs"]
)
def test_http_and_https_public_urls_are_accepted(url: str) -> None:
    assert Config(public_url=url).public_url == url


def test_ssh_url_is_checked_too(tmp_path: Path) -> None:
    """`lfs-server ssh --url` hands out the same hrefs (git-lfs-authenticate)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env["SSH_ORIGINAL_COMMAND"] = "git-lfs-authenticate team/demo.git download"
    args = ["ssh", "--user", "alice", "--data", str(tmp_path), "--url", "lfs.example.com"]
    r = subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr == (
        "lfs-server: error: --url must be an http:// or https:// URL,"
        " e.g. https://lfs.example.com, got 'lfs.example.com'\n"
    )
    with pytest.raises(ConfigError, match="LFS_PUBLIC_URL must be an http:// or https:// URL"):
        Config(public_url="lfs.example.com")
