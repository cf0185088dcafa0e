"""Render the nginx configuration (a pure function of the settings) and find nginx."""

from __future__ import annotations

import os
import shutil
from importlib import resources

from lfs_server import __version__
from lfs_server.config import Config, ConfigError
from lfs_server.transfer_api import (
    INLINE_UPLOAD_PATH,
    S3_LOCATION,
    STORE_LOCATION,
    UPLOAD_CHECK_PATH,
)
from lfs_server.web import REALM

_PROXY_HEADERS = (
    "proxy_http_version 1.1",
    'proxy_set_header Connection ""',
    "proxy_set_header Host $http_host",
    "proxy_set_header X-Forwarded-Proto $scheme",
    "proxy_set_header X-Forwarded-For $remote_addr",
    "proxy_set_header X-Request-Id $request_id",
    "proxy_set_header X-Lfs-Proxy-Auth {secret}",
    "proxy_read_timeout 600s",
    "proxy_send_timeout 600s",
)


# Every status nginx itself may answer, with the message of its JSON body: clients get the
# git-lfs error format whoever answers. 494 (headers too large) goes out as 400.
_NGINX_ERRORS: tuple[tuple[int, int, str], ...] = (
    (400, 400, "bad request"),
    (403, 403, "forbidden"),
    (404, 404, "not found"),
    (405, 405, "method not allowed"),
    (408, 408, "request timed out"),
    (411, 411, "a Content-Length header is required"),
    (
        413,
        413,
        "request body is too large: API requests take up to {api_max_body} bytes of JSON,"
        " uploads objects of {max_body}",
    ),
    (
        412,
        412,
        "a precondition of this request (If-Match, If-Unmodified-Since) does not hold;"
        " downloads need none",
    ),
    (414, 414, "request URI is too long"),
    (416, 416, "the requested range is not satisfiable for this object"),
    (494, 400, "request headers are too large"),
    (500, 500, "internal server error"),
    (501, 501, "this transfer encoding is not implemented"),
    (502, 502, "the lfs-server application is not answering"),
    (503, 503, "service unavailable"),
    (504, 504, "the lfs-server application timed out"),
    (
        507,
        507,
        "insufficient storage: the server could not write the upload to its disk (full?);"
        " nothing was stored, retry later",
    ),
)


def _error_pages(indent: str, upload: bool) -> str:
    lines = []
    for status, sent, _message in _NGINX_ERRORS:
        if status == 507:
            continue
        if upload and status == 500:
            # nginx's own 500 on the upload location: the check could not run, or a body
            # nginx could not write (ENOSPC: the store's disk is full, answered 507).
            lines.append(f"{indent}error_page 500 = @lfs_upload_failed;")
        elif upload and status == 403:
            # The upload check refused: answer with its status and message.
            lines.append(f"{indent}error_page 403 = @lfs_refused;")
        elif sent != status:
            lines.append(f"{indent}error_page {status} ={sent} /_lfs_error/{status};")
        else:
            lines.append(f"{indent}error_page {status} /_lfs_error/{status};")
    return "\n".join(lines)


def _error_locations(max_body: str, api_max_body: int) -> str:
    lines = []
    for status, sent, message in _NGINX_ERRORS:
        text = message.format(max_body=max_body, api_max_body=api_max_body)
        body = '{"message": "%s", "request_id": "$request_id"}\\n' % text  # noqa: UP031
        lines.append(f"            location = /_lfs_error/{status} {{ return {sent} '{body}'; }}")
    return "\n".join(lines)


def s3_endpoint(config: Config) -> str:
    """The S3 endpoint URL nginx and boto3 talk to (AWS's regional one by default)."""
    return (config.s3_endpoint or f"https://s3.{config.s3_region}.amazonaws.com").rstrip("/")


_STORE_DOWN = "the object store did not answer; nothing was changed, retry in a moment"


def _s3_blocks(config: Config) -> tuple[str, str]:
    """(upstream block, locations) that let nginx stream objects from S3 (empty if local)."""
    if config.storage != "s3":
        return "", ""
    scheme, _, host = s3_endpoint(config).partition("://")
    host = host.split("/", 1)[0]
    default_port = "443" if scheme == "https" else "80"
    server = host if ":" in host.rsplit("]", 1)[-1] else f"{host}:{default_port}"
    upstream = f"""
    upstream lfs_s3 {{
        server {server};
        keepalive 32;
    }}
"""
    tls = ""
    if scheme == "https":
        tls = "\n            proxy_ssl_server_name on;"
        tls += f"\n            proxy_ssl_name {host.rsplit(':', 1)[0]};"
    location = f"""
        # Downloads from S3 (LFS_STORAGE=s3): reached only through the app's X-Accel-Redirect
        # to a short-lived presigned URL; nginx streams the store's answer to the client, so
        # clients only ever talk to us. The client's own headers (its action token) must not
        # reach the store; Range does.
        location {S3_LOCATION} {{
            internal;
            proxy_pass {scheme}://lfs_s3/;{tls}
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # Only Range reaches the store: a client's If-Match or other headers would get
            # the store's own XML answers (naming the bucket) instead of LFS JSON.
            proxy_pass_request_headers off;
            proxy_set_header Host {host};
            proxy_set_header Range $http_range;
            proxy_hide_header x-amz-request-id;
            proxy_hide_header x-amz-id-2;
            proxy_hide_header x-rgw-object-type;
            # Unbuffered, in 1 MiB reads: measured 0.91-0.93x of a direct presigned GET for
            # 300 MiB on an idle machine, against 0.88-0.91x with 16 x 256k buffers; no
            # other size or buffering did better at load 2-6 (docs/benchmarks/lfs-server.md,
            # 2026-12-04). What is left is nginx copying the body in and out (~0.09 s CPU
            # per 300 MiB in ~850 syscalls), which a CPU-bound machine pays in speed.
            # Never spooled to disk, whatever the gateway's X-Accel-Buffering says.
            proxy_buffering off;
            proxy_ignore_headers X-Accel-Buffering;
            proxy_max_temp_file_size 0;
            proxy_buffer_size 1m;
            proxy_buffers 4 1m;
            proxy_read_timeout 600s;
            proxy_intercept_errors on;
            error_page 404 /_lfs_error/404;
            error_page 416 /_lfs_error/416;
            error_page 400 401 403 500 502 503 504 =503 /_lfs_error/store;
        }}

        location = /_lfs_error/store {{
            internal;
            default_type application/vnd.git-lfs+json;
            add_header Retry-After 2 always;
            return 503 '{{"message": "{_STORE_DOWN}", "request_id": "$request_id"}}\n';
        }}
"""
    return upstream, location


# Statuses the upload check may refuse with (it answers nginx 403 and names the real one).
_REFUSED_STATUSES = (400, 401, 404, 411, 413, 422, 503, 507)


def _refused_returns(indent: str) -> str:
    lines = []
    for status in _REFUSED_STATUSES:
        lines.append(f"{indent}if ($lfs_refused_status = {status}) {{")
        if status == 401:
            for header in ("LFS-Authenticate", "WWW-Authenticate"):
                lines.append(f"{indent}    add_header {header} 'Basic realm=\"{REALM}\"' always;")
        lines.append(
            f"{indent}    return {status}"
            ' \'{"message": $lfs_refused_json, "request_id": "$request_id"}\\n\';'
        )
        lines.append(f"{indent}}}")
    return "\n".join(lines)


def nginx_path(value: object, setting: str) -> str:
    """*value* for a double-quoted nginx string; ConfigError naming *setting* if it cannot be.

    Quoted, a space, ';', '{', '}' or '#' is plain text to nginx; '"' and '\\' would end or
    escape the string, '$' starts a variable, and a control character ends the line.
    """
    text = str(value)
    bad = next((c for c in text if c in '"\\$' or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ConfigError(
            f"{setting} {text!r} holds {bad!r}, which nginx's configuration cannot carry;"
            " choose a folder without '\"', '\\', '$' or control characters"
        )
    return text


def api_max_body(config: Config) -> int:
    """Bytes an API request body may have: a full batch request fits (~100 bytes an object)."""
    return max(1 << 20, config.max_batch_objects * 512)


def socket_path(config: Config) -> str:
    """The unix socket gunicorn listens on and only nginx connects to."""
    return str(config.run_dir / "gunicorn.sock")


def render_nginx_config(
    config: Config, proxy_secret: str, upstream: str | None = None, nginx_workers: str = "auto"
) -> str:
    """The nginx.conf text for *config*; *upstream* defaults to the gunicorn unix socket."""
    template = resources.files("lfs_server").joinpath("nginx.conf.in").read_text(encoding="utf-8")
    # nginx inherits proxy_set_header only when a location sets none, so each location
    # that sets its own repeats the whole list.
    proxy_settings = "\n".join(
        f"            {line.format(secret=proxy_secret)};" for line in _PROXY_HEADERS
    )
    max_body = str(config.max_object_size) if config.max_object_size else "0"
    s3_upstream, s3_location = _s3_blocks(config)
    data_setting = "LFS_DATA_DIR (--data)"
    values = {
        "version": __version__,
        "nginx_workers": nginx_workers,
        "run_dir": nginx_path(config.run_dir, data_setting),
        "tmp_dir": nginx_path(config.tmp_dir, data_setting),
        "body_dir": nginx_path(
            config.body_dir, "LFS_NGINX_BODY_DIR" if config.nginx_body_dir else data_setting
        ),
        "repos_dir": nginx_path(config.repos_dir, data_setting),
        "upstream": nginx_path(upstream or f"unix:{socket_path(config)}", "--upstream"),
        "listen": config.listen,
        "max_body": max_body,
        "store_location": STORE_LOCATION,
        "s3_upstream": s3_upstream,
        "s3_location": s3_location,
        "proxy_settings": proxy_settings,
        "error_pages": _error_pages("        ", upload=False),
        "upload_error_pages": _error_pages("            ", upload=True),
        "upload_check": UPLOAD_CHECK_PATH,
        "inline_upload": INLINE_UPLOAD_PATH,
        "refused_returns": _refused_returns("            "),
        "message_507": dict((s, m) for s, _sent, m in _NGINX_ERRORS)[507],
        "api_max_body": str(api_max_body(config)),
        "error_locations": _error_locations(
            f"up to {max_body} bytes" if config.max_object_size else "any size",
            api_max_body(config),
        ),
    }
    text = template
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    return text


def find_nginx() -> str | None:
    """The nginx binary: $LFS_NGINX_BIN if set, else PATH (plus /usr/sbin, Debian's place)."""
    explicit = os.environ.get("LFS_NGINX_BIN")
    if explicit is not None:
        return explicit if os.access(explicit, os.X_OK) else None
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    return shutil.which("nginx", path=path)
