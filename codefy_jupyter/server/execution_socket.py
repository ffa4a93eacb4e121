"""`{base_url}codefy/ws/execution`: follow runs (replay from a cursor, then live, no gap) and
submit interactive runs; the `events` frames every follower of a run shares."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web, websocket

from ..core.errors import ServiceError, TooLarge
from ..core.runs.requests import SchemaError
from ..core.runs.run_service import RunService
from .handlers import AUTH_RESOURCE, error_body, owner_name
from .request_body import parse, write_error_shape
from .ws_frames import write_texts


class ExecutionSocket(ExtensionHandlerMixin, JupyterHandler, websocket.WebSocketHandler):
    """`/codefy/ws/execution`: follow runs (replay from a cursor, then live, no gap) and submit
    interactive runs for this connection's session.

    Client frames:
      {"type": "subscribe", "run_id": ..., "cursor": 0}    one run, from after `cursor`
      {"type": "subscribe", "all": true, "cursors"?: {run_id: seq}, "batch"?: true}
                                                         every run: those named from their cursor,
                                                         others live from now, new runs from 0;
                                                         with "batch", the events frames ready at
                                                         once travel together in `batch` frames
      {"type": "unsubscribe", "run_id": ...} / {"type": "unsubscribe", "all": true}
      {"type": "submit", "request_id"?: ..., "body": {"graph", "name"?, "options"?}}
                                                         an interactive run of this connection's
                                                         session (`?session=` on the URL, else one
                                                         per connection); followed from 0
    Server frames: {"type": "events", "run_id", "events", "cursor", "status"},
      {"type": "batch", "frames": [events frame, ...]} (only to a subscriber that asked for it; in
      order, as if sent one by one), {"type": "submitted", "request_id", "run"},
      {"type": "error", "request_id"?, "error"}.
    """

    auth_resource = AUTH_RESOURCE
    service: RunService

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        user = self.current_user
        if not self.authorizer.is_authorized(self, user, "read", AUTH_RESOURCE):
            raise web.HTTPError(403)
        try:
            self.service = await self.extensionapp.ready()
        except ServiceError as err:  # recovering, or no database: refused before the upgrade
            status, payload = error_body(err)
            if err.retry_after_s is not None:
                self.set_header("Retry-After", str(err.retry_after_s))
            self.set_status(status)
            self.finish(json.dumps(payload))
            return
        await websocket.WebSocketHandler.get(self, *args, **kwargs)

    @property
    def max_message_size(self) -> int:  # type: ignore[override]
        # Read past the cap by a margin, so a message a little over it gets a clear error frame;
        # one beyond the margin is closed by tornado with 1009 ("message too big").
        return self._max_body_bytes() + MESSAGE_MARGIN_BYTES

    def _max_body_bytes(self) -> int:
        return int(self.extensionapp.codefy_settings.request_max_body_bytes)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        write_error_shape(self, status_code, **kwargs)  # refusals before the upgrade (no login)

    def open(self, *args: Any, **kwargs: Any) -> None:
        self._follows: dict[str, asyncio.Task[None]] = {}
        self.session = self.get_argument("session", None) or f"ws-{uuid.uuid4().hex[:12]}"

    async def on_message(self, message: str | bytes) -> None:
        request_id = None
        try:
            limit = self._max_body_bytes()
            if len(message) > limit:
                raise TooLarge(f"the message ({len(message)} bytes) is over the limit of {limit} bytes "
                               "(setting request_max_body_bytes)", params={"limit_bytes": limit})
            frame = await parse(message, what="the frame")  # bad JSON, too deep, lone surrogates: refused
            if not isinstance(frame, dict):
                raise SchemaError("", "a frame is a JSON object")
            request_id = frame.get("request_id")
            kind = frame.get("type")
            if kind == "subscribe" and frame.get("all") is True:
                cursors = frame.get("cursors") or {}
                if not isinstance(cursors, dict) or not all(isinstance(v, int) and v >= 0 for v in cursors.values()):
                    raise SchemaError("cursors", "expected {run_id: seq >= 0}")
                batch = frame.get("batch", False)
                if not isinstance(batch, bool):
                    raise SchemaError("batch", "expected true or false")
                self._follow_task("*", self._follow_all(dict(cursors), batch))
            elif kind == "subscribe":
                run_id, cursor = frame.get("run_id"), frame.get("cursor", 0)
                if not isinstance(run_id, str):
                    raise SchemaError("run_id", "subscribe needs a run_id (or \"all\": true)")
                if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
                    raise SchemaError("cursor", "expected an integer >= 0")
                await self.service.check_cursor(run_id, cursor)  # 404 unknown run, 400 cursor past the end
                self._follow_task(run_id, self._follow(run_id, cursor))
            elif kind == "unsubscribe":
                task = self._follows.pop("*" if frame.get("all") is True else frame.get("run_id"), None)
                if task is not None:
                    task.cancel()
            elif kind == "submit":
                await self._submit(frame.get("body"), request_id)
            else:
                raise SchemaError("type", "expected 'subscribe', 'unsubscribe' or 'submit'")
        except Exception as err:
            frame_out: dict[str, Any] = {"type": "error", "error": error_body(err)[1]["error"]}
            if request_id is not None:
                frame_out["request_id"] = request_id
            self._send(frame_out)

    async def _submit(self, body: Any, request_id: Any) -> None:
        if not isinstance(body, dict):
            raise SchemaError("body", "expected the submit body {graph, name?, options?}")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise SchemaError("body.options", "expected an object")
        body = {**body, "options": {**options, "lane": "interactive", "session": self.session}}
        run = await self.service.submit(body, owner=owner_name(self.current_user))
        self._send({"type": "submitted", "request_id": request_id, "run": run})
        self._follow_task(run["id"], self._follow(run["id"], 0))

    def _follow_task(self, key: str, coro: Any) -> None:
        if key in self._follows:
            self._follows.pop(key).cancel()
        self._follows[key] = asyncio.get_running_loop().create_task(coro)

    async def _follow(self, run_id: str, cursor: int) -> None:
        try:
            while True:
                after = cursor
                status, texts, cursor, more = await self.service.live_page(run_id, cursor, wait=30.0)
                if texts:
                    self._send_text(events_frame(run_id, status, texts, after, cursor))
                if not more and status not in ("queued", "running", "disconnected"):
                    return
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the follower must say why it stopped, not vanish
            self._report(run_id, err)

    async def _follow_all(self, cursors: dict[str, int], batch: bool = False) -> None:
        log = self.service.events
        change_no = log.change_no
        named = list(cursors)
        for run_id in log.run_ids():
            cursors.setdefault(run_id, log.visible_seq(run_id) or 0)  # known runs: live from now
        todo = [rid for rid in log.run_ids() if (log.visible_seq(rid) or 0) > cursors[rid]]
        # The frames of one pass, sent together at its end: one `batch` message when the client
        # asked for it, else one message each, written to the socket at once.
        ready = _Batch(batch)
        try:
            for run_id in named:  # runs named with a cursor: replay them first (from the store if need be)
                cursor, more = cursors[run_id], True
                while more:
                    after = cursor
                    status, texts, cursor, more = await self.service.live_page(run_id, cursor, 0)
                    cursors[run_id] = cursor
                    if texts:
                        self._ship(events_frame(run_id, status, texts, after, cursor), ready)
            while True:
                for run_id in todo:
                    cursor = cursors.setdefault(run_id, 0)  # a run new since we subscribed: all of it
                    while (log.visible_seq(run_id) or 0) > cursor:
                        after = cursor
                        status, texts, cursor, _ = await self.service.live_page(run_id, cursor, 0)
                        cursors[run_id] = cursor
                        if not texts:
                            break
                        self._ship(events_frame(run_id, status, texts, after, cursor), ready)
                self._ship_batch(ready)
                await log.wait_change(change_no)  # every durable change wakes it: no timeout needed
                todo, change_no, _ = log.changed_since(change_no)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._ship_batch(ready)
            self._report(None, err)

    def _ship(self, frame: bytes, ready: _Batch) -> None:
        ready.frames.append(frame)
        ready.size += len(frame)
        if ready.size >= BATCH_BYTES:  # a long replay: several writes (several batch frames)
            self._ship_batch(ready)

    def _ship_batch(self, ready: _Batch) -> None:
        """The frames gathered so far: as one `batch` message, or as one message each, in one
        write to the socket either way."""
        if not ready.frames:
            return
        if ready.batch:
            self._send_texts([b'{"type":"batch","frames":[' + b",".join(ready.frames) + b"]}"])
        else:
            self._send_texts(ready.frames)
        ready.frames.clear()
        ready.size = 0

    def _report(self, run_id: str | None, err: Exception) -> None:
        status, body = error_body(err)
        if status == 500:
            self.log.exception("codefy: following %s failed", run_id or "all runs")
        self._send({"type": "error", "run_id": run_id, "error": body["error"]})

    def _send(self, frame: dict[str, Any]) -> None:
        self._send_text(json.dumps(frame, allow_nan=False, default=str))

    def _send_text(self, text: str | bytes) -> None:
        self._send_texts([text.encode() if isinstance(text, str) else text])

    def _send_texts(self, payloads: list[bytes]) -> None:
        """Every message this socket sends goes through here: framed by us, one socket write."""
        try:
            write_texts(self, payloads)
        except websocket.WebSocketClosedError:
            self.on_close()

    def on_close(self) -> None:
        for task in getattr(self, "_follows", {}).values():
            task.cancel()
        self._follows = {}


class _Batch:
    def __init__(self, batch: bool) -> None:
        self.batch = batch
        self.frames: list[bytes] = []
        self.size = 0


MESSAGE_MARGIN_BYTES = 1 << 20
BATCH_BYTES = 1 << 20  # a batch frame closes once it holds this much (a replay can be long)
FRAMES_KEPT_BYTES = 1 << 20  # the shared frames kept (the newest), in bytes: one round of followers
# Every follower of a run at the live edge sends the same frame: encode it once for all of them.
# Keyed by the run, the stretch of its log (immutable once durable) and the status it reports.
_frames: dict[tuple[str, int, int, str], bytes] = {}
_frames_bytes = 0


def events_frame(run_id: str, status: str, texts: list[str], after: int, cursor: int) -> bytes:
    """The `events` frame of `run_id`'s events after `after` up to `cursor` (`texts`, each
    encoded once by the event log), UTF-8 encoded (tornado sends bytes as they are)."""
    global _frames_bytes
    key = (run_id, after, cursor, status)
    frame = _frames.get(key)
    if frame is None:
        frame = (f'{{"type":"events","run_id":{json.dumps(run_id)},"events":[{",".join(texts)}],'
                 f'"cursor":{cursor},"status":{json.dumps(status)}}}').encode()
        if len(frame) <= FRAMES_KEPT_BYTES // 8:
            _frames[key] = frame
            _frames_bytes += len(frame)
            while _frames_bytes > FRAMES_KEPT_BYTES:
                _frames_bytes -= len(_frames.pop(next(iter(_frames))))
    return frame
