"""A WebSocket client that only reads, for the benchmarks' subscribers.

Ten subscribers decode every frame of every run on the same two cores as the server they
measure, so their client must cost little: through tornado's client each message took a chain of
futures and coroutine steps. This one is an asyncio Protocol: the handshake (RFC 6455 §4.1, the
accept key checked), then each unfragmented text frame in `data_received` goes straight to
`on_message(payload bytes)`. Pings are answered; a close frame or a lost connection ends it.
It sends only small control-free text messages (masked, as a client must). Not a general client:
no fragmented messages, no extensions.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from typing import Callable

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WsError(Exception):
    pass


def _accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One masked, final frame (every client frame is masked)."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n <= 0xFFFF:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i & 3] for i, b in enumerate(payload))


class WsReader(asyncio.Protocol):
    def __init__(self, host: str, path: str, headers: dict[str, str], on_message: Callable[[bytes], None]) -> None:
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._key = base64.b64encode(os.urandom(16))
        self._request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         f"Sec-WebSocket-Key: {self._key.decode()}\r\nSec-WebSocket-Version: 13\r\n"
                         + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
        self._on_message = on_message
        self._buffer = bytearray()
        self._upgraded = False
        self.transport: asyncio.Transport | None = None

    @classmethod
    async def connect(cls, host: str, port: int, path: str, headers: dict[str, str],
                      on_message: Callable[[bytes], None]) -> "WsReader":
        _, reader = await asyncio.get_running_loop().create_connection(
            lambda: cls(f"{host}:{port}", path, headers, on_message), host, port)
        await reader.opened
        return reader

    def send_text(self, text: str) -> None:
        assert self.transport is not None
        self.transport.write(client_frame(0x1, text.encode()))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self._request)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.opened, self.closed):
            if not future.done():
                future.set_exception(exc or WsError("the connection closed")) if future is self.opened \
                    else future.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            if not self._upgraded and not self._handshake():
                return
            self._frames()
        except WsError as err:
            if not self.opened.done():
                self.opened.set_exception(err)
            if not self.closed.done():
                self.closed.set_exception(err)
            self.close()

    def _handshake(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[:end + 4]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        if head[0].split()[1:2] != ["101"]:
            raise WsError(f"the server refused the upgrade: {head[0]}")
        if headers.get("sec-websocket-accept", "").encode() != _accept_key(self._key):
            raise WsError("the server's Sec-WebSocket-Accept does not match the key sent")
        self._upgraded = True
        self.opened.set_result(None)
        return True

    def _frames(self) -> None:
        buf, pos, size = self._buffer, 0, len(self._buffer)
        while size - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            if b1 & 0x80:
                raise WsError("a server frame was masked")
            n, head = b1 & 0x7F, 2
            if n == 126:
                if size - pos < 4:
                    break
                n, head = int.from_bytes(buf[pos + 2:pos + 4], "big"), 4
            elif n == 127:
                if size - pos < 10:
                    break
                n, head = int.from_bytes(buf[pos + 2:pos + 10], "big"), 10
            if size - pos < head + n:
                break
            payload = bytes(buf[pos + head:pos + head + n])
            pos += head + n
            opcode = b0 & 0x0F
            if not b0 & 0x80 or opcode == 0x0:
                raise WsError("fragmented messages are not supported by this client")
            if opcode == 0x1:
                self._on_message(payload)
            elif opcode == 0x9:  # ping: answer with the same payload
                assert self.transport is not None
                self.transport.write(client_frame(0xA, payload))
            elif opcode == 0x8:  # close
                self.close()
                break
        del buf[:pos]
