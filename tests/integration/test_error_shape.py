"""One error shape everywhere: every route of the extension (read from its route table, so a new
route is covered the day it is added) and both sockets answer a refusal with
`{"error": {"code", "message", "params"}}`, on a real jupyter-server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter.server.routes import route_table

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def assert_error_shape(status: int, body: bytes, where: str) -> dict[str, Any]:
    assert status >= 400, where
    doc = json.loads(body)
    assert set(doc) == {"error"}, (where, doc)
    error = doc["error"]
    assert set(error) == {"code", "message", "params"}, (where, error)
    assert isinstance(error["code"], str) and error["code"], (where, error)
    assert isinstance(error["message"], str) and error["message"], (where, error)
    assert isinstance(error["params"], dict), (where, error)
    return error


def http_routes() -> list[tuple[str, type]]:
    routes = []
    for pattern, handler, _ in route_table("/"):
        if "/ws/" in pattern:
            continue
        path = re.sub(r"\(\?P<\w+>[^)]*\)", "nope", pattern).lstrip("/")
        routes.append((path, handler))
    return routes


async def fetch(jp_fetch, path: str, method: str, *, login: bool, body: Any = None) -> tuple[int, bytes]:
    kwargs: dict[str, Any] = {"method": method, "raise_error": False}
    if not login:
        kwargs["headers"] = {"Authorization": ""}
    if method in ("POST", "PUT", "PATCH"):
        kwargs["body"] = body if body is not None else b"[1, 2"
    response = await jp_fetch(*path.split("/"), **kwargs)
    return response.code, response.body


def test_the_route_table_is_what_this_test_walks():
    paths = {p for p, _ in http_routes()}
    assert "codefy/api/runs" in paths and "codefy/api/workers/nope/drain" in paths and len(paths) >= 14


@pytest.mark.parametrize("path,handler", http_routes(), ids=[p for p, _ in http_routes()])
async def test_every_route_refuses_in_the_one_shape(jp_fetch, path, handler):
    allowed = [m for m in METHODS if getattr(handler, m.lower()) is not getattr(web.RequestHandler, m.lower())]
    checked = 0
    for method in METHODS:
        if method not in allowed:
            status, body = await fetch(jp_fetch, path, method, login=True)
            assert status == 405
            assert assert_error_shape(status, body, f"{method} {path}")["code"] == "method_not_allowed"
            checked += 1
            continue
        # Without a login (the one route open to strangers, enroll, refuses the body instead).
        status, body = await fetch(jp_fetch, path, method, login=False)
        if status >= 400:
            assert_error_shape(status, body, f"{method} {path} without a login")
            checked += 1
        # With a login: an unknown id, a body that is not JSON, or arguments out of range.
        query = {"offset": "-1", "limit": "x", "cursor": "-1", "format": "xml"}
        status, body = await fetch(jp_fetch, path, method, login=True, body=None)
        if status < 400 and method == "GET":
            response = await jp_fetch(*path.split("/"), method="GET", params=query, raise_error=False)
            status, body = response.code, response.body
        if status >= 400:
            assert_error_shape(status, body, f"{method} {path}")
            checked += 1
    assert checked, f"no refusal of {path} was seen"


async def test_the_execution_socket_refuses_in_the_one_shape(jp_ws_fetch):
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    try:
        for frame in ("{", "[]", json.dumps({"type": "nope"}), json.dumps({"type": "subscribe", "run_id": "nope"})):
            await ws.write_message(frame)
            reply = json.loads(await ws.read_message())
            assert reply["type"] == "error", reply
            assert_error_shape(400, json.dumps({"error": reply["error"]}).encode(), frame)
    finally:
        ws.close()


async def test_the_worker_socket_refuses_in_the_one_shape(jp_serverapp, http_server_client, jp_http_port, jp_base_url):
    token = jp_serverapp.identity_provider.token
    ws = await websocket_connect(HTTPRequest(f"ws://localhost:{jp_http_port}{jp_base_url}codefy/ws/worker",
                                             headers={"Authorization": f"token {token}"}))
    try:
        await ws.write_message(json.dumps({"type": "heartbeat"}))
        reply = json.loads(await ws.read_message())
        assert reply["type"] == "reject", reply
        assert_error_shape(400, json.dumps({"error": {k: reply[k] for k in ("code", "message", "params")}}).encode(),
                           "a first frame that is not hello")
        assert await ws.read_message() is None and ws.close_code == 4400
    finally:
        ws.close()
