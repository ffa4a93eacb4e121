"""WebSocket text messages to one peer, framed here and written to the socket at once.

A follower of every run sends one `events` message per run it finds changed; under load one wake
finds several. Through `write_message` each message costs a frame built by tornado, an asyncio
Task (tornado's semi-synchronous write wrapper) and a `send()` that wakes the peer, and on the
benchmark's two cores those were about a quarter of the server loop's time. Here the messages of
one wake are framed together (RFC 6455 §5.2: server frames are never masked) and written once,
with no Task, even when there is only one. The peer sees exactly the messages it would have seen
one by one.

Tornado keeps framing private, so this writes to the connection's stream only when the
connection is the plain RFC 6455 protocol with no per-message compression negotiated; otherwise
(compression on, another tornado) it falls back to `write_message` for each message.
"""

from __future__ import annotations

import struct
from typing import Iterable, Sequence

from tornado import websocket
from tornado.iostream import StreamClosedError

_FIN_TEXT = 0x81  # FIN bit + opcode 1 (text)


def text_frame(payload: bytes) -> bytes:
    """One unmasked, unfragmented text frame carrying `payload` (UTF-8)."""
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", _FIN_TEXT, n)
    elif n <= 0xFFFF:
        header = struct.pack("!BBH", _FIN_TEXT, 126, n)
    else:
        header = struct.pack("!BBQ", _FIN_TEXT, 127, n)
    return header + payload


def text_frames(payloads: Iterable[bytes]) -> bytes:
    return b"".join(text_frame(p) for p in payloads)


def _raw_stream(handler: websocket.WebSocketHandler):  # type: ignore[no-untyped-def]
    """The stream to write framed bytes to, or None when framing must be left to tornado."""
    conn = handler.ws_connection
    if not isinstance(conn, websocket.WebSocketProtocol13) or conn.mask_outgoing:
        return None
    if getattr(conn, "_compressor", True) is not None:  # compressed (or a tornado without the field)
        return None
    return getattr(conn, "stream", None)


def write_texts(handler: websocket.WebSocketHandler, payloads: Sequence[bytes]) -> None:
    """Send `payloads` as text messages, in order. Raises WebSocketClosedError once the
    connection is closed (as `write_message` does)."""
    if not payloads:
        return
    if handler.ws_connection is None or handler.ws_connection.is_closing():
        raise websocket.WebSocketClosedError()
    stream = _raw_stream(handler)
    if stream is None:
        for payload in payloads:
            handler.write_message(payload)
        return
    try:
        stream.write(text_frames(payloads))
    except StreamClosedError:
        raise websocket.WebSocketClosedError() from None
