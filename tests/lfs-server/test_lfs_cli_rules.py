"""Issue 14: `lfs-server` behaves like a well-made Unix tool (one `lfs-server: error:` line,
exit 2 for what the user can fix, 130 on Ctrl-C, no traceback, nothing half-made), and a
pip user gets what the README tells them to use (the hook, the gunicorn settings)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from lfs_engines import Ceph
from lfs_testlib import cli, free_port, oid_of, start_server
from support import interrupt, read_only_mount

SCRIPT = str(Path(sys.executable).parent / "lfs-server")


def one_error_line(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lfs-server: error: "), result.stderr
    assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write to: a read-only tmpfs as root, mode 0555 otherwise."""
    path = tmp_path / "ro"
    path.mkdir()
    with read_only_mount(path) as mounted:
        if mounted:
            yield path
            return
    if os.geteuid() == 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    path.chmod(0o555)
    yield path
    path.chmod(0o755)


def test_user_add_into_a_read_only_folder_is_one_line(read_only_dir: Path) -> None:
    r = cli("user", "add", "carol", "--password-stdin", data=read_only_dir, stdin="pw\n")
    one_error_line(r, str(read_only_dir))
    assert list(read_only_dir.iterdir()) == []


def test_serve_into_a_read_only_folder_is_one_line(read_only_dir: Path) -> None:
    r = cli("serve", "--no-nginx", data=read_only_dir / "data")
    one_error_line(r, str(read_only_dir))


def test_failed_serve_leaves_no_half_made_data_folder(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    r = subprocess.run(
        [SCRIPT, "serve", "--data", str(data)],
        env={**os.environ, "LFS_NGINX_BIN": "/nonexistent/nginx"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    one_error_line(r, "nginx is not installed")
    assert not data.exists(), list(data.rglob("*"))


@pytest.mark.parametrize(
    "args", [("fsck",), ("user", "list"), ("repo", "list"), ("user", "remove", "bob")]
)
def test_mistyped_data_folder_is_an_error(tmp_path: Path, args: tuple[str, ...]) -> None:
    r = cli(*args, data=tmp_path / "mistyped")
    one_error_line(r, "does not exist")
    assert not (tmp_path / "mistyped").exists()


def test_hook_install_writes_a_working_hook(tmp_path: Path) -> None:
    bare = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    missing_url = cli("hook", "install", str(bare), data=Path())
    one_error_line(missing_url, "--url")
    url = "http://127.0.0.1:9/team.git/info/lfs"
    r = cli("hook", "install", str(bare), "--url", url, data=Path())
    assert r.returncode == 0, r.stderr
    hook = bare / "hooks/pre-receive"
    assert os.access(hook, os.X_OK) and sys.executable in hook.read_text()
    config = subprocess.run(
        ["git", "--git-dir", str(bare), "config", "lfs.url"], capture_output=True, text=True
    )
    assert config.stdout.strip() == url
    # The hook runs as git would run it (no venv on PATH) and asks lfs-server (down: refuse).
    ran = subprocess.run(
        [str(hook)],
        input="0" * 40 + " " + "1" * 40 + " refs/heads/main\n",
        cwd=bare,
        env={"PATH": "/usr/bin:/bin", "GIT_DIR": str(bare)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1 and "lfs-server: refusing push" in ran.stderr, ran.stderr
    # Someone else's hook is not replaced without --force.
    hook.write_text("#!/bin/sh\nexit 0\n")
    one_error_line(cli("hook", "install", str(bare), data=Path()), "--force")
    one_error_line(cli("hook", "install", str(tmp_path), data=Path()), "not a bare git")


def test_python_dash_m_and_version() -> None:
    for cmd in ([sys.executable, "-m", "lfs_server", "--version"], [SCRIPT, "--version"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0 and r.stdout.startswith("lfs-server "), (cmd, r)


def test_gunicorn_settings_ship_in_the_package() -> None:
    import importlib

    conf = importlib.import_module("lfs_server.gunicorn_conf")
    # One of the package's workers whose own error pages are git-lfs JSON, importable.
    module, _, name = conf.worker_class.rpartition(".")
    assert module == "lfs_server.gunicorn_worker" and name.startswith("JsonError"), name
    assert isinstance(getattr(importlib.import_module(module), name), type)
    assert conf.accesslog is None  # the app keeps the access log (LFS_ACCESS_LOG)


def test_gunicorn_run_by_hand_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "LFS_DATA_DIR": str(tmp_path / "data"), "LFS_WORKERS": "100"}
    r = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "python:lfs_server.gunicorn_conf",
         "lfs_server.wsgi:app"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode != 0
    assert r.stderr.strip() == (
        "lfs-server: error: LFS_WORKERS must be 1 to 64 (gunicorn processes of 4 threads"
        " each; add nodes for more), got 100"
    ), r.stderr
    assert not (tmp_path / "data").exists()


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    for i in range(3):
        r = cli("user", "add", f"u{i}", "--password-stdin", data=tmp_path, stdin="pw\n")
        assert r.returncode == 0, r.stderr
    shell = f"{SCRIPT} user list --data {tmp_path} | head -1"
    r = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("u0") and "Traceback" not in r.stderr, r.stderr


def test_ctrl_c_is_130_and_one_line(tmp_path: Path) -> None:
    """Ctrl-C while `user add` waits for its password on stdin."""
    result = interrupt(
        [SCRIPT, "user", "add", "carol", "--password-stdin", "--data", str(tmp_path)],
        settle=1.5,
        timeout=30,
        stdin=subprocess.PIPE,
    )
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == "lfs-server: interrupted", result.stderr
    assert not (tmp_path / "users.json").exists()


def test_readme_links_work_on_pypi() -> None:
    """The README is the wheel's long description: a relative link is dead on PyPI."""
    import re

    readme = Path(__file__).resolve().parents[2] / "packages/lfs-server/README.md"
    links = re.findall(r"\]\(([^)]+)\)", readme.read_text(encoding="utf-8"))
    assert links, "expected links to SECURITY.md and the repository"
    relative = [link for link in links if not link.startswith(("https://", "http://", "#"))]
    assert not relative, relative
    # Issue 28: a user reads it in five minutes; history lives in docs/benchmarks.
    assert len(readme.read_text(encoding="utf-8")) <= 10_000


@pytest.mark.parametrize("extra", [(), ("--no-nginx",)])
def test_serve_on_a_port_in_use_is_one_line_before_serving(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """A port another program listens on is refused before "serving" is printed and before
    nginx or gunicorn start (they used to retry for seconds, log a dozen lines, exit 1)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        r = cli("serve", "--listen", listen, *extra, data=tmp_path / "data")
    one_error_line(r, f"{listen} is already in use")
    assert "serving" not in r.stdout, r.stdout
    assert not (tmp_path / "data").exists(), list((tmp_path / "data").rglob("*"))


def test_a_second_serve_on_one_data_folder_touches_nothing() -> None:
    """A second serve (another port, the same --data) rewrote the first one's nginx.conf,
    removed its gunicorn socket (every request then 502) and would delete its uploads in
    flight as stale; the data folder is now locked while a serve runs."""
    server = start_server()  # a data folder nginx's workers may enter
    try:
        run = server.data / "run"
        before = {p.name: p.read_bytes() for p in run.glob("*.conf")}
        r = cli("serve", "--listen", f"127.0.0.1:{free_port()}", data=server.data)
        one_error_line(r, "another lfs-server serve (pid ")
        assert f"uses the data folder {server.data}" in r.stderr
        assert (run / "gunicorn.sock").exists()
        assert {p.name: p.read_bytes() for p in run.glob("*.conf")} == before
        for _ in range(6):
            assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
    finally:
        status = server.stop()
        shutil.rmtree(server.data, ignore_errors=True)
    assert status == 0


def test_broken_local_data_is_one_line_at_start(tmp_path: Path) -> None:
    """A users file that is not JSON answered every login 500; a lock database that is not
    SQLite stopped the workers booting with gunicorn's traceback; an access log in a
    missing folder outside the data folder made that folder (in / as root)."""
    listen = ("--no-nginx", "--listen", f"127.0.0.1:{free_port()}")
    data = tmp_path / "data"
    data.mkdir()
    (data / "users.json").write_text("{bad json")
    r = cli("serve", *listen, data=data)
    one_error_line(r, f"cannot read the user store: cannot read users file {data / 'users.json'}")
    assert "serving" not in r.stdout
    (data / "users.json").unlink()
    (data / "locks.sqlite3").write_bytes(b"this is not an SQLite database" * 100)
    r = cli("serve", *listen, data=data)
    one_error_line(r, "cannot read the lock database: file is not a database")
    (data / "locks.sqlite3").unlink()
    env = {**os.environ, "LFS_ACCESS_LOG": str(tmp_path / "typo" / "dir" / "a.log")}
    r = cli("serve", *listen, data=data, env=env)
    one_error_line(r, f"the folder {tmp_path / 'typo' / 'dir'} does not exist")
    assert not (tmp_path / "typo").exists()


def _cli_without(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a Python where *module* cannot be imported (as if not installed)."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; "
        "from lfs_server.cli import main; raise SystemExit(main())"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "env", "fragment"),
    [
        ("boto3", {"LFS_STORAGE": "s3", "LFS_S3_BUCKET": "lfs"}, "needs boto3"),
        ("psycopg", {"LFS_DATABASE_URL": "postgresql://lfs@127.0.0.1:1/lfs"}, "needs psycopg"),
    ],
)
@pytest.mark.parametrize("command", [("serve",), ("serve", "--no-nginx"), ("fsck",)])
def test_missing_optional_component_is_one_line(
    tmp_path: Path,
    module: str,
    env: dict[str, str],
    fragment: str,
    command: tuple[str, ...],
) -> None:
    """`serve` checks boto3 / psycopg up front as `fsck` does, instead of starting workers
    that die with tracebacks."""
    if command == ("fsck",) and module == "psycopg":
        command = ("user", "list")
    r = _cli_without(
        module,
        *command,
        "--data",
        str(tmp_path / "data"),
        env={**env, "LFS_LISTEN": f"127.0.0.1:{free_port()}"},
    )
    one_error_line(r, fragment)
    assert "serving" not in r.stdout, r.stdout
    assert not (tmp_path / "data").exists(), list((tmp_path / "data").rglob("*"))


def test_fsck_of_a_repository_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """`fsck --repo` with a mistyped name said "checked 0 objects, 0 bad" and exit 0."""
    r = cli("repo", "create", "team/game.git", data=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli("fsck", "--repo", "nope/x", data=tmp_path)
    one_error_line(r, "no repository nope/x in")
    assert "team/game" in r.stderr and "checked" not in r.stdout, (r.stdout, r.stderr)
    assert cli("fsck", "--repo", "team/game.git", data=tmp_path).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    one_error_line(cli("fsck", "--repo", "nope/x", data=empty), "holds no repositories yet")


def test_fsck_of_a_repository_that_does_not_exist_on_s3(ceph: Ceph, tmp_path: Path) -> None:
    """On S3 a repository is its marker key or objects under its prefix: a mistyped name
    (neither) is exit 2; objects copied in by hand without a marker are still checked."""
    bucket = ceph.create_bucket(f"lfs-fsck-repo-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env.update(ceph.s3_env(bucket))
    assert cli("repo", "create", "team/game", data=tmp_path, env=env).returncode == 0
    r = cli("fsck", "--repo", "nope/x", data=tmp_path, env=env)
    one_error_line(r, f"no repository nope/x in bucket {bucket}")
    assert "team/game" in r.stderr, r.stderr
    assert cli("fsck", "--repo", "team/game", data=tmp_path, env=env).returncode == 0
    blob = os.urandom(1000)
    oid = oid_of(blob)
    key = f"hand/copied.git/objects/{oid[:2]}/{oid[2:4]}/{oid}"
    ceph.client().put_object(Bucket=bucket, Key=key, Body=blob)  # type: ignore[attr-defined]
    r = cli("fsck", "--repo", "hand/copied", data=tmp_path, env=env)
    assert r.returncode == 0 and "checked 1 objects, 0 bad" in r.stdout, (r.stdout, r.stderr)


# --- issue 28: the shared CLI kit (--json, progress, completion, -o) ----------------------


def _bad_local_store(data: Path) -> tuple[str, str]:
    """A local store holding one good object and one whose bytes do not match its name."""
    good, bad = os.urandom(3000), oid_of(b"original")
    for oid, blob in ((oid_of(good), good), (bad, b"tampered")):
        path = data / "repos/team/game.git/objects" / oid[:2] / oid[2:4] / oid
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    return oid_of(good), bad


def test_listing_and_report_commands_write_json_to_stdout(tmp_path: Path) -> None:
    """`--json -`: stdout is the JSON alone, the human text goes to stderr."""
    import json

    for name, grant in (("ann", "team/*=write"), ("bo", "*=read")):
        r = cli("user", "add", name, "--grant", grant, "--password-stdin", data=tmp_path,
                stdin="pw\n")  # fmt: skip
        assert r.returncode == 0, r.stderr
    _good, bad = _bad_local_store(tmp_path)
    users = cli("user", "list", "--json", "-", data=tmp_path)
    assert users.returncode == 0 and "ann\tteam/*=write" in users.stderr, users.stderr
    assert json.loads(users.stdout) == [
        {"name": "ann", "grants": {"team/*": "write"}},
        {"name": "bo", "grants": {"*": "read"}},
    ]
    repos = cli("repo", "list", "--json", "-", data=tmp_path)
    assert json.loads(repos.stdout) == ["team/game"], repos.stdout
    fsck = cli("fsck", "--json", "-", data=tmp_path)
    assert fsck.returncode == 1 and "checked 2 objects, 1 bad" in fsck.stderr, fsck.stderr
    report = json.loads(fsck.stdout)
    assert report["checked"] == 2 and [b["oid"] for b in report["bad"]] == [bad], report
    # To a file: written atomically, the text stays on stdout.
    out = tmp_path / "fsck.json"
    fsck = cli("fsck", "--json", str(out), data=tmp_path)
    assert "checked 2 objects" in fsck.stdout and json.loads(out.read_text())["checked"] == 2
    assert [p.name for p in tmp_path.glob(".fsck.json*")] == []
    missing = cli("fsck", "--json", str(tmp_path / "no/such/dir/r.json"), data=tmp_path)
    one_error_line(missing, "does not exist")


def test_import_seed_json_lists_refused_files(tmp_path: Path) -> None:
    import json

    seed = tmp_path / "seed/repos/grp/game/.objects"
    blob = b"seeded"
    oid = oid_of(blob)
    (seed / oid[:2] / oid[2:4]).mkdir(parents=True)
    (seed / oid[:2] / oid[2:4] / oid).write_bytes(blob)
    (seed / "stray.txt").write_text("x")
    r = cli("import-seed", str(tmp_path / "seed"), "--json", "-", data=tmp_path / "data")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert report["imported"] == 1 and report["refused"] == 1, report
    assert report["refused_files"][0]["path"].endswith("stray.txt"), report


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the console script with stdout and stderr on a pseudo-terminal."""
    import pty

    output = bytearray()

    def read(fd: int) -> bytes:
        data = os.read(fd, 65536)
        output.extend(data)
        return data

    status = pty.spawn([SCRIPT, *args], read)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_progress_only_on_a_terminal_and_never_with_no_progress_or_json(tmp_path: Path) -> None:
    _bad_local_store(tmp_path)
    status, shown = _on_a_terminal("fsck", "--data", str(tmp_path))
    assert status == 1 and "2obj" in shown.replace(" ", ""), shown  # tqdm's "2 obj [..]"
    status, quiet = _on_a_terminal("fsck", "--no-progress", "--data", str(tmp_path))
    assert status == 1 and "obj" not in quiet.replace("objects", ""), quiet
    piped = cli("fsck", data=tmp_path)  # not a terminal: no bar
    assert "obj [" not in piped.stderr and "it/s" not in piped.stderr, piped.stderr
    status, as_json = _on_a_terminal("fsck", "--json", "-", "--data", str(tmp_path))
    assert status == 1 and "obj/s" not in as_json and "obj [" not in as_json, as_json


def test_completion_and_nginx_config_output_file(tmp_path: Path) -> None:
    for shell, marker in (("bash", "complete"), ("zsh", "#compdef")):
        r = subprocess.run([SCRIPT, "completion", shell], capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
        assert r.returncode == 0 and marker in r.stdout and "import-seed" in r.stdout, r.stderr
    target = tmp_path / "nginx.conf"
    target.write_text("old\n")
    r = cli("nginx-config", "-o", str(target), data=tmp_path / "data")
    assert r.returncode == 0 and r.stdout == "", (r.stdout, r.stderr)
    assert "client_body_in_file_only" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "nginx.conf"]
    one_error_line(cli("nginx-config", "-o", str(tmp_path), data=tmp_path / "data"), "folder")


def test_migrate_json_on_ceph(ceph: Ceph, tmp_path: Path) -> None:
    import json

    bucket = ceph.create_bucket(f"lfs-migrate-json-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env.update(ceph.s3_env(bucket))
    env.pop("LFS_STORAGE", None)
    _good, bad = _bad_local_store(tmp_path)
    r = cli("migrate", "--to", "s3", "--json", "-", data=tmp_path, env=env)
    assert r.returncode == 1 and "copied 1 objects" in r.stderr, (r.stdout, r.stderr)
    report = json.loads(r.stdout)
    assert report["copied"] == 1 and report["bytes_copied"] == 3000, report
    assert [b["oid"] for b in report["bad"]] == [bad], report


def test_token_ttl_beyond_s3_presign_limit_is_refused_at_start(tmp_path: Path) -> None:
    """Issue 25 (low): LFS_TOKEN_TTL above 604800 broke every direct-mode download (S3
    presigns for at most 7 days); it is refused with one line naming the setting."""
    env = {**os.environ, "LFS_TOKEN_TTL": "604801"}
    for args in (("user", "list"), ("serve", "--no-nginx")):
        r = cli(*args, data=tmp_path, env=env)
        one_error_line(r, "LFS_TOKEN_TTL must be at most 604800")
    ok = cli("user", "list", data=tmp_path, env={**os.environ, "LFS_TOKEN_TTL": "604800"})
    assert ok.returncode == 0, ok.stderr


def _hostile_local_store(data: Path) -> dict[str, str]:
    """A local store holding one good object and, under object names: a link to
    /etc/passwd (named by its real hash), a link to /dev/zero and a FIFO."""
    objects = data / "repos/team/game.git/objects"
    made = {}
    good = os.urandom(3000)
    passwd = Path("/etc/passwd").read_bytes()
    for kind, oid in (("good", oid_of(good)), ("passwd", oid_of(passwd)),
                      ("zero", oid_of(b"zero")), ("fifo", oid_of(b"fifo"))):  # fmt: skip
        path = objects / oid[:2] / oid[2:4] / oid
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "good":
            path.write_bytes(good)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/etc/passwd" if kind == "passwd" else "/dev/zero")
        made[kind] = oid
    return made


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script with a short timeout: reading a FIFO or /dev/zero never ends."""
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=60,
                          env=env, check=False)  # fmt: skip


def test_fsck_reads_regular_files_only(tmp_path: Path) -> None:
    """Issue 25 (low): fsck hung forever on a FIFO and on a link to /dev/zero."""
    made = _hostile_local_store(tmp_path)
    r = _run("fsck", "--data", str(tmp_path))
    assert r.returncode == 1 and "checked 4 objects, 3 bad" in r.stdout, (r.stdout, r.stderr)
    for kind in ("passwd", "zero"):
        assert f"BAD team/game {made[kind]}: nothing: it is a symbolic link" in r.stdout
    assert f"BAD team/game {made['fifo']}: nothing: it is not a regular file" in r.stdout


def test_migrate_copies_no_link_and_does_not_hang(ceph: Ceph, tmp_path: Path) -> None:
    """Issue 25 (low): `migrate --to s3` followed a link the local server refuses to serve
    (a reader then downloaded /etc/passwd from the bucket) and hung on a FIFO."""
    bucket = ceph.create_bucket(f"lfs-migrate-links-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    env.update(ceph.s3_env(bucket))
    env.pop("LFS_STORAGE", None)
    made = _hostile_local_store(tmp_path)
    r = _run("migrate", "--to", "s3", "--data", str(tmp_path), env=env)
    assert r.returncode == 1 and "copied 1 objects" in r.stdout, (r.stdout, r.stderr)
    pages = ceph.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)  # type: ignore[attr-defined]
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    assert [k for k in keys if k.endswith(made["good"])], keys
    for kind in ("passwd", "zero", "fifo"):
        assert not [k for k in keys if k.endswith(made[kind])], (kind, keys)


def test_data_folder_names_nginx_would_misread_are_quoted_or_refused() -> None:
    """Issue 25 (low): a data folder with a space, ';', '{}' gave only "nginx exited with
    status 1", and a '$' became an nginx variable. Such names now serve (quoted in the
    generated config); what nginx cannot carry at all is one line naming the setting."""
    import shutil

    from lfs_testlib import Api, make_data_dir, start_server

    parent = make_data_dir()
    try:
        data = parent / "my data; {x} #1"
        server = start_server(data, log=parent / "serve.log")
        try:
            blob = os.urandom(5000)
            Api(server).upload("quoted/repo", blob)
            action = Api(server).download_action("quoted/repo", oid_of(blob), len(blob))
            import requests

            got = requests.get(action["href"], headers=action["header"], timeout=30)
            assert got.status_code == 200 and got.content == blob
        finally:
            server.stop()
        for name, char in (("cost$5", "'$'"), ("two\nlines", "'\\n'"), ('say "hi"', "'\"'")):
            r = cli("serve", "--listen", f"127.0.0.1:{free_port()}", data=parent / name)
            one_error_line(r, f"holds {char}")
            assert "LFS_DATA_DIR" in r.stderr and not (parent / name).exists(), r.stderr
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (("--listen", "127.0.0.1:80; include /etc/passwd"), {}, "port must be ASCII digits"),
        (("--listen", "127.0.0.1:8_080"), {}, "port must be ASCII digits"),
        (("--listen", "127.0.0.1:\u0668\u0660\u0668\u0660"), {}, "port must be ASCII digits"),
        (("--listen", "x;y:8080"), {}, "host must be a name"),
        ((), {"LFS_LISTEN": "127.0.0.1:80 default_server"}, "LFS_LISTEN"),
        (
            (),
            {"LFS_STORAGE": "s3", "LFS_S3_BUCKET": "b", "LFS_S3_ENDPOINT": "http://h:80; x y"},
            "LFS_S3_ENDPOINT",
        ),
        (
            (),
            {"LFS_STORAGE": "s3", "LFS_S3_BUCKET": "b", "LFS_S3_ENDPOINT": "http://h/$host"},
            "LFS_S3_ENDPOINT",
        ),
    ],
)
def test_settings_cannot_inject_nginx_directives(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], fragment: str
) -> None:
    """Issue 25 (low): LFS_S3_ENDPOINT and --listen reached nginx.conf as written, and the
    port accepted '8_080' and Arabic digits (int() does)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LFS_")}
    r = cli("serve", *args, data=tmp_path / "data", env={**clean, **env})
    one_error_line(r, fragment)
    assert not (tmp_path / "data").exists()
    r = cli("nginx-config", *args, data=tmp_path / "data", env={**clean, **env})
    one_error_line(r, fragment)


def test_config_report_to_a_file_and_a_bad_config_file_stops_serve(tmp_path: Path) -> None:
    import json

    out = tmp_path / "settings.json"
    r = cli("config", "--json", str(out), data=tmp_path)
    assert r.returncode == 0 and "data_dir" in r.stdout, r.stderr
    settings = json.loads(out.read_text())["settings"]
    assert settings["data_dir"] == {"value": str(tmp_path), "source": "flag", "env": "LFS_DATA_DIR"}
    assert [p.name for p in tmp_path.glob(".settings.json*")] == []
    bad = tmp_path / "lfs.toml"
    bad.write_text("wokers = 4\n")
    r = cli("serve", "--config", str(bad), data=tmp_path / "never")
    one_error_line(r, "unknown key 'wokers' (did you mean 'workers'?)")
    assert not (tmp_path / "never").exists()


def test_nginx_config_upstream_is_checked_before_anything_is_made(tmp_path: Path) -> None:
    """`--upstream 'bad;host'` printed a config nginx then refused at start; now one line."""
    r = cli("nginx-config", "--upstream", "bad;host", data=tmp_path / "data")
    one_error_line(r, "--upstream (unix:PATH or HOST:PORT) must be HOST:PORT")
    assert r.stdout == "" and not (tmp_path / "data").exists()
    r = cli("nginx-config", "--upstream", "10.0.0.5:8000", data=tmp_path / "data")
    assert r.returncode == 0 and 'server "10.0.0.5:8000";' in r.stdout, r.stderr


def test_config_json_to_an_unwritable_file_prints_only_the_error(tmp_path: Path) -> None:
    """The settings table used to be printed before the --json FILE failed."""
    r = cli("config", "--json", str(tmp_path / "no/such/dir/settings.json"), data=tmp_path)
    one_error_line(r, "cannot write --json")
    assert r.stdout == ""
