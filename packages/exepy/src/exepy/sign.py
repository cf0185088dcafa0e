"""Authenticode signing and verification through ``osslsigncode`` (Debian, Homebrew, MSYS2).

exepy signs last, after every resource edit: any later edit breaks the signature, and
:class:`~exepy.editor.ResourceEditor` then strips it with a warning. The certificate table
goes after everything else in the file, an appended zip included; zipimport finds that zip's
end record by searching back from the end, so a signed standalone app still starts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SignError", "SignOptions", "Signature", "sign_bytes", "verify"]


class SignError(ValueError):
    """Signing or verifying failed; the message says why and what would work."""


@dataclass(frozen=True)
class SignOptions:
    """What to sign with: a PKCS#12 file (``.pfx``), its password in a file, a timestamp URL."""

    certificate: Path
    password_file: Path | None = None
    timestamp: str | None = None


@dataclass(frozen=True)
class Signature:
    """What ``osslsigncode verify`` found in a file."""

    signed: bool
    digest_ok: bool
    signer: str | None
    chain_ok: bool
    timestamped: bool

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "signed": self.signed,
            "digest_ok": self.digest_ok,
            "signer": self.signer,
            "chain_ok": self.chain_ok,
            "timestamped": self.timestamped,
        }


def _tool() -> str:
    found = shutil.which("osslsigncode")
    if found is None:
        raise SignError(
            "signing needs osslsigncode: apt-get install osslsigncode (brew install "
            "osslsigncode; on Windows signtool does the same)"
        )
    return found


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    return (errors or lines or ["no output"])[0].strip()


def sign_bytes(data: bytes, options: SignOptions, *, name: str = "app.exe") -> bytes:
    """*data* (a PE image) signed with Authenticode (SHA-256); the digest is checked after."""
    tool = _tool()
    certificate = Path(options.certificate)
    if not certificate.is_file():
        raise SignError(f"the certificate {os.fspath(certificate)} does not exist")
    if options.password_file is not None and not Path(options.password_file).is_file():
        raise SignError(f"the password file {os.fspath(options.password_file)} does not exist")
    with tempfile.TemporaryDirectory(prefix="exepy-sign-") as folder:
        unsigned, signed = Path(folder) / "unsigned.exe", Path(folder) / name
        unsigned.write_bytes(data)
        command = [tool, "sign", "-pkcs12", str(certificate), "-h", "sha256"]
        if options.password_file is not None:
            command += ["-readpass", str(options.password_file)]
        if options.timestamp:
            command += ["-ts", options.timestamp]
        done = subprocess.run(
            [*command, "-in", str(unsigned), "-out", str(signed)],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0 or not signed.is_file():
            raise SignError(
                f"osslsigncode could not sign with {os.fspath(certificate)}: {_last_line(done)}"
            )
        found = verify(signed)
        if not (found.signed and found.digest_ok):
            raise SignError("the signed output does not verify (osslsigncode verify)")
        return signed.read_bytes()


def verify(path: Path, ca_file: Path | None = None) -> Signature:
    """Check *path*'s Authenticode signature: present, digest matching the file, signer;
    the chain too, against *ca_file* (PEM) or the system's CA store."""
    tool = _tool()
    command = [tool, "verify", "-in", str(path)]
    if ca_file is not None:
        command += ["-CAfile", str(ca_file)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    text = done.stdout + done.stderr
    current = re.search(r"Current message digest\s*:\s*([0-9A-F]+)", text)
    calculated = re.search(r"Calculated message digest\s*:\s*([0-9A-F]+)", text)
    if current is None or calculated is None:
        return Signature(False, False, None, False, False)
    signer_part = text.split("Signer's certificate:", 1)[-1]
    subject = re.search(r"Subject:\s*(\S.*)", signer_part)
    return Signature(
        signed=True,
        digest_ok=current.group(1) == calculated.group(1),
        signer=subject.group(1).strip() if subject else None,
        chain_ok=done.returncode == 0,
        timestamped="Timestamp time:" in text,
    )
