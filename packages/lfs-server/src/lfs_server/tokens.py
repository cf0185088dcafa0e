"""Action tokens: what the batch API hands out so the client may GET/PUT/verify one object.

A token is `<expiry>.<user, base64url>.<mac>` where the MAC is keyed BLAKE2b over repo,
operation, oid, size, user and expiry. Nothing is stored server-side; a token for another
repo, oid, size or operation simply does not verify.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

KEY_BYTES = 32
_PERSON = b"lfs-action-v1"


class TokenError(Exception):
    """The token does not grant this request; `expired` tells a stale one from a bad one."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


@dataclasses.dataclass(frozen=True)
class Grant:
    """What a verified token allows."""

    user: str
    expires_at: int


class TokenSigner:
    """Issues and checks action tokens with one secret key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("token key must be at least 16 bytes")
        self._key = key[:64]

    def _mac(
        self, repo: str, operation: str, oid: str, size: int, user: str, expires_at: int
    ) -> str:
        message = "\0".join((repo, operation, oid, str(size), user, str(expires_at))).encode()
        return hashlib.blake2b(
            message, key=self._key, digest_size=32, person=_PERSON[:16]
        ).hexdigest()

    def issue(
        self, repo: str, operation: str, oid: str, size: int, user: str, expires_at: int
    ) -> str:
        """Return a token letting *user* do *operation* on (repo, oid, size) until *expires_at*."""
        user_b64 = base64.urlsafe_b64encode(user.encode()).decode().rstrip("=")
        return f"{expires_at}.{user_b64}.{self._mac(repo, operation, oid, size, user, expires_at)}"

    def verify(
        self, token: str, repo: str, operation: str, oid: str, size: int, now: float | None = None
    ) -> Grant:
        """Check *token* for this exact request; raise TokenError if it does not grant it."""
        parts = token.split(".")
        # isascii: str.isdigit() also accepts '¹²³', which int() then refuses.
        if len(parts) != 3 or not (parts[0].isascii() and parts[0].isdigit()) or len(parts[0]) > 12:
            raise TokenError("action token is malformed; request a new one with the batch API")
        expires_at = int(parts[0])
        try:
            padded = parts[1] + "=" * (-len(parts[1]) % 4)
            user = base64.urlsafe_b64decode(padded.encode()).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise TokenError(
                "action token is malformed; request a new one with the batch API"
            ) from None
        expected = self._mac(repo, operation, oid, size, user, expires_at)
        if not hmac.compare_digest(expected.encode(), parts[2].encode()):
            raise TokenError(
                f"action token does not grant {operation} of this object in this repository"
            )
        if (time.time() if now is None else now) >= expires_at:
            raise TokenError(
                "action token has expired; request a new one with the batch API", expired=True
            )
        return Grant(user, expires_at)


def load_or_create_key(path: Path) -> bytes:
    """Read the signing key at *path*, creating a random one (mode 0600) if it is missing."""
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(KEY_BYTES)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() fails if another process won the race; then use its key.
            os.link(tmp, path)
        except FileExistsError:
            key = path.read_bytes()
        finally:
            tmp.unlink()
    if len(key) < 16:
        raise ValueError(f"secret key file {path} holds {len(key)} bytes; it needs at least 16")
    return key


def proxy_secret(key: bytes) -> str:
    """The value nginx sends in X-Lfs-Proxy-Auth: proves a request came through our nginx."""
    return hashlib.blake2b(
        b"nginx-proxy", key=key[:64], digest_size=24, person=b"lfs-proxy-v1"
    ).hexdigest()
