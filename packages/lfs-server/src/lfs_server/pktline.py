"""Git's pkt-line framing, as the git-lfs SSH protocol (`git-lfs-transfer`) uses it.

A packet is a 4-digit hex length (counting those 4 bytes) and its payload; `0000` is a
flush packet (end of a message), `0001` a delimiter (arguments | lines or data). Text
packets end in LF, which the reader strips.
"""

from __future__ import annotations

from typing import BinaryIO

FLUSH = 0
DELIM = 1
# The largest packet git allows: 65520 bytes with the header.
MAX_PAYLOAD = 65516


class PktLineError(Exception):
    """The peer sent bytes that are not pkt-line framing (the stream cannot be resynced)."""


class PktReader:
    """Reads packets from a binary stream."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def _exact(self, n: int) -> bytes:
        data = self._stream.read(n)
        if data is None or len(data) != n:
            got = 0 if not data else len(data)
            raise PktLineError(f"connection ended inside a packet ({got} of {n} bytes)")
        return data

    def read(self) -> bytes | int | None:
        """The next packet: its payload (bytes), FLUSH or DELIM, or None at a clean EOF."""
        head = self._stream.read(4)
        if not head:
            return None
        if len(head) != 4:
            raise PktLineError(f"connection ended inside a packet header ({head!r})")
        try:
            text = head.decode("ascii")
            if not all(c in "0123456789abcdefABCDEF" for c in text):
                raise ValueError
            length = int(text, 16)
        except (UnicodeDecodeError, ValueError):
            raise PktLineError(f"packet header {head!r} is not 4 hex digits") from None
        if length in (FLUSH, DELIM):
            return length
        if length < 4 or length > MAX_PAYLOAD + 4:
            raise PktLineError(f"packet length {length} is not a valid pkt-line length")
        return self._exact(length - 4)

    def read_text(self) -> str | int | None:
        """Like `read`, with a payload decoded as UTF-8 and one trailing LF removed."""
        packet = self.read()
        if not isinstance(packet, bytes):
            return packet
        try:
            text = packet.decode("utf-8")
        except UnicodeDecodeError:
            raise PktLineError("a text packet is not valid UTF-8") from None
        return text[:-1] if text.endswith("\n") else text


class PktWriter:
    """Writes packets to a binary stream; `flush_stream` pushes them to the peer."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def data(self, payload: bytes) -> None:
        """One packet per MAX_PAYLOAD bytes of *payload* (nothing for an empty one)."""
        view = memoryview(payload)
        for start in range(0, len(view), MAX_PAYLOAD):
            chunk = view[start : start + MAX_PAYLOAD]
            self._stream.write(b"%04x" % (len(chunk) + 4))
            self._stream.write(chunk)

    def text(self, line: str) -> None:
        """One text packet (LF added); a line too long for one packet is a bug of ours."""
        payload = line.encode("utf-8") + b"\n"
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"text packet of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        self.data(payload)

    def flush(self) -> None:
        """A flush packet (end of a message) and push everything written so far."""
        self._stream.write(b"0000")
        self._stream.flush()

    def delim(self) -> None:
        """A delimiter packet."""
        self._stream.write(b"0001")
