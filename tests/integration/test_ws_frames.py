"""Several text messages framed by us and written at once reach a real tornado WebSocket client
exactly as `write_message` would deliver them, at every length encoding of RFC 6455, and a
compressed connection falls back to tornado's own framing."""

from __future__ import annotations

import asyncio
import json

import pytest
from tornado import web, websocket
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from codefy_jupyter.server.ws_frames import _raw_stream, text_frame, write_texts

# Every header form: 7-bit length, 16-bit (126..65535), 64-bit (65536+), and an empty payload.
SIZES = [0, 1, 125, 126, 127, 65535, 65536, 200_000]


def payload(i: int, size: int) -> bytes:
    body = ("é" * size).encode()[:size]  # multi-byte UTF-8, cut back to whole characters below
    return body.decode("utf-8", "ignore").encode().ljust(size, b"x") if size else b""


class Sender(websocket.WebSocketHandler):
    compress = False
    raw: list[bool] = []  # per message asking for payloads: whether the one-write path was taken
    refused: list[bool] = []

    def get_compression_options(self):  # type: ignore[no-untyped-def]
        return {} if self.compress else None

    def on_message(self, message):  # type: ignore[no-untyped-def]
        ask = json.loads(message)
        if ask == "close-then-write":
            self.close()
            try:
                write_texts(self, [b"a", b"b"])
            except websocket.WebSocketClosedError:
                Sender.refused.append(True)
            return
        Sender.raw.append(_raw_stream(self) is not None)
        write_texts(self, [payload(i, n) for i, n in enumerate(ask)])


class CompressedSender(Sender):
    compress = True


@pytest.fixture
def server():
    sock, port = bind_unused_port()
    app = web.Application([("/plain", Sender), ("/deflate", CompressedSender)])
    http = HTTPServer(app)
    http.add_sockets([sock])
    Sender.raw, Sender.refused = [], []
    yield f"ws://127.0.0.1:{port}"
    http.stop()


def test_frame_headers_follow_rfc6455_length_forms():
    assert text_frame(b"") == b"\x81\x00"
    assert text_frame(b"x" * 125)[:2] == b"\x81\x7d"
    assert text_frame(b"x" * 126)[:4] == b"\x81\x7e\x00\x7e"
    assert text_frame(b"x" * 65535)[:4] == b"\x81\x7e\xff\xff"
    assert text_frame(b"x" * 65536)[:10] == b"\x81\x7f" + (65536).to_bytes(8, "big")
    assert len(text_frame(b"x" * 70_000)) == 10 + 70_000


@pytest.mark.parametrize("path, compressed", [("/plain", False), ("/deflate", True)])
async def test_messages_written_at_once_arrive_one_by_one_and_whole(server, path, compressed):
    ws = await websocket.websocket_connect(server + path, compression_options={} if compressed else None)
    await ws.write_message(json.dumps(SIZES))
    got = [await asyncio.wait_for(ws.read_message(), 60) for _ in SIZES]
    assert [len(m.encode() if isinstance(m, str) else m) for m in got] == SIZES
    assert [m.encode() for m in got] == [payload(i, n) for i, n in enumerate(SIZES)]
    # The plain connection took the one-write path; the compressed one left framing to tornado.
    assert Sender.raw == [not compressed]
    await ws.write_message(json.dumps([5]))  # a single message takes the same path
    assert await asyncio.wait_for(ws.read_message(), 60) == payload(0, 5).decode()
    assert Sender.raw == [not compressed] * 2
    ws.close()


async def test_a_closed_connection_refuses_the_write(server):
    ws = await websocket.websocket_connect(server + "/plain")
    await ws.write_message(json.dumps("close-then-write"))
    assert await asyncio.wait_for(ws.read_message(), 60) is None  # closed, nothing else arrived
    assert Sender.refused == [True]
    ws.close()
