"""Bad requests on a real jupyter-server get a clean 4xx in the one error shape, never a 500 or a
dropped connection: bodies over the size cap (413 before they are read), numbers past SQLite's
range, lone surrogates, deep nesting (REST, /ws/execution and /ws/worker), requests without a
login, methods a route lacks (405 with Allow), too many enrollments (429 with Retry-After), and a
subscribe past the end of a run's log (as REST says it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter.wire import protocol as wp

from test_server_runs import SMALL, call, wait_status
from test_worker_handlers import RawAgent, _close_agents, hello_frame  # noqa: F401 (a fixture)

SMALL_CAP = 256 * 1024


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


small_cap = pytest.mark.parametrize("jp_server_config", [{"request_max_body_bytes": SMALL_CAP}], indirect=True,
                                    ids=["cap=256KiB"])


def assert_shape(body: Any, code: str, field: str | None = None) -> dict[str, Any]:
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "params"}, body
    assert body["error"]["code"] == code, body
    if field is not None:
        assert body["error"]["params"]["field"] == field, body
    return body["error"]


async def raw_request(port: int, head: str, body: bytes = b"", *, read_timeout: float = 60) -> tuple[int, dict, bytes]:
    """One request over a plain socket (a client that lies about, or streams, its body); the
    status, headers and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(1 << 20), read_timeout)
        while b"\r\n\r\n" not in raw:
            more = await asyncio.wait_for(reader.read(1 << 20), read_timeout)
            assert more, raw
            raw += more
        top, _, rest = raw.partition(b"\r\n\r\n")
        lines = top.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        length = int(headers.get("Content-Length", len(rest)))
        while len(rest) < length:
            more = await asyncio.wait_for(reader.read(1 << 20), read_timeout)
            assert more
            rest += more
        return int(lines[0].split()[1]), headers, rest
    finally:
        writer.close()


def token_of(jp_serverapp) -> str:
    return jp_serverapp.identity_provider.token


# -- item 4: size -------------------------------------------------------------------------------------

@small_cap
async def test_a_body_over_the_cap_is_refused_with_413_before_it_is_read(jp_serverapp, jp_http_port, jp_base_url,
                                                                         http_server_client):
    # The client announces 100 GB and sends none of it: the answer comes from the headers alone.
    head = (f"POST {jp_base_url}codefy/api/runs HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
            f"Authorization: token {token_of(jp_serverapp)}\r\nContent-Type: application/json\r\n"
            "Content-Length: 107374182400\r\n\r\n")
    status, headers, body = await raw_request(jp_http_port, head)
    assert status == 413
    error = assert_shape(json.loads(body), "body_too_large")
    assert error["params"] == {"limit_bytes": SMALL_CAP, "size_bytes": 107374182400}
    assert "request_max_body_bytes" in error["message"]


async def test_a_refusal_before_the_body_is_read_says_the_connection_closes(jp_serverapp, jp_http_port,
                                                                          jp_base_url, http_server_client):
    # No login and a body still to come: tornado closes this connection after the 403. Without
    # "Connection: close" a keep-alive proxy (JupyterHub's) sent the next request into the closed
    # socket and answered it 503 "your server appears to be down".
    head = (f"POST {jp_base_url}codefy/api/runs HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    status, headers, body = await raw_request(jp_http_port, head)
    assert status == 403 and headers.get("Connection") == "close", headers
    assert_shape(json.loads(body), "unauthenticated")
    # A refusal after the whole body arrived keeps the connection open as usual.
    payload = b'{"graph": 1}'
    head = (f"POST {jp_base_url}codefy/api/runs HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
            f"Authorization: token {token_of(jp_serverapp)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    status, headers, _ = await raw_request(jp_http_port, head, payload)
    assert status == 422 and "Connection" not in headers, headers


@small_cap
async def test_a_chunked_body_is_refused_once_it_passes_the_cap(jp_serverapp, jp_http_port, jp_base_url,
                                                                http_server_client):
    head = (f"POST {jp_base_url}codefy/api/runs HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
            f"Authorization: token {token_of(jp_serverapp)}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(SMALL_CAP // len(piece) + 2))
    status, _, body = await raw_request(jp_http_port, head, chunks)  # never finished: no last chunk
    assert status == 413
    assert assert_shape(json.loads(body), "body_too_large")["params"] == {"limit_bytes": SMALL_CAP}


@small_cap
async def test_a_body_at_the_cap_is_read(jp_fetch):
    pad = " " * (SMALL_CAP - len(json.dumps({"graph": SMALL})) - 1)
    response = await jp_fetch("codefy", "api", "runs", method="POST", body=json.dumps({"graph": SMALL}) + pad)
    assert response.code == 201


async def test_millions_of_problems_are_listed_as_the_first_100_and_a_count(jp_fetch):
    body = '{"graph": {"nodes": [' + ",".join(["1"] * 1_000_000) + "]}}"
    code, answer = await call(jp_fetch, "api", "runs", method="POST", body=json.loads(body))
    assert code == 400
    error = assert_shape(answer, "invalid_graph")
    assert len(error["params"]["problems"]) == 100 and error["params"]["more"] == 999_900
    assert error["params"]["problems"][99]["field"] == "nodes[99]"
    assert error["message"].endswith("  - and 999900 more") and "1000000 problems" in error["message"]
    assert len(json.dumps(answer)) < 64 * 1024


# -- item 5: 4xx, never 500 --------------------------------------------------------------------------

async def test_list_bounds_are_400_naming_the_field(jp_fetch):
    for params, field in (({"offset": 2**63}, "offset"), ({"offset": 10**30}, "offset"), ({"offset": -1}, "offset"),
                          ({"limit": -1}, "limit"), ({"limit": 10**30}, "limit"), ({"limit": "1e3"}, "limit"),
                          ({"offset": "9" * 5000}, "offset")):
        code, body = await call(jp_fetch, "api", "runs", **params)
        assert code == 400, (params, body)
        assert_shape(body, f"invalid_{field}", field)
    code, body = await call(jp_fetch, "api", "runs", offset=2**63 - 1)
    assert code == 200 and body["runs"] == []


async def test_lone_surrogates_are_422_naming_the_field(jp_fetch):
    graph = json.dumps(SMALL)
    cases = [
        ('{"graph": %s, "name": "run \\ud800"}' % graph, "name"),
        (graph.replace('"id": "k"', '"id": "k\\udc00"').join(['{"graph": ', "}"]), "graph.nodes[0].id"),
        ('{"graph": {"nodes": [{"id": "t", "type": "Text", "params": {"value": "\\udbff!"}}]}}',
         "graph.nodes[0].params.value"),
        ('{"graph": %s, "options": {"target": {"devices": ["\\ud800"]}}}' % graph, "options.target.devices[0]"),
    ]
    for raw, field in cases:
        response = await jp_fetch("codefy", "api", "runs", method="POST", body=raw, raise_error=False)
        assert response.code == 422, (raw, response.body)
        assert_shape(json.loads(response.body), "invalid_request", field)
    # Paired surrogates (how ensure_ascii encoders write emoji) are a character like any other.
    response = await jp_fetch("codefy", "api", "runs", method="POST",
                              body='{"graph": %s, "name": "\\ud83d\\ude00"}' % graph)
    assert json.loads(response.body)["name"] == "\U0001F600"


async def test_a_query_or_path_that_is_not_utf8_is_400_naming_it(jp_serverapp, jp_http_port, jp_base_url,
                                                                http_server_client):
    for target, field in (("runs?status=%ED%A0%80", "status"), ("runs/%ED%A0%80", "run_id")):
        head = (f"GET {jp_base_url}codefy/api/{target} HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
                f"Authorization: token {token_of(jp_serverapp)}\r\n\r\n")
        status, _, body = await raw_request(jp_http_port, head)
        assert status == 400, body
        assert_shape(json.loads(body), "invalid_unicode", field)


@pytest.mark.parametrize("levels", [300, 990, 20_000])
async def test_deep_nesting_is_422_naming_the_field(jp_fetch, levels):
    raw = '{"graph": {"nodes": [{"id": "a", "type": "Text", "params": {"value": ' + "[" * levels + "]" * levels + "}}]}}"
    response = await jp_fetch("codefy", "api", "runs", method="POST", body=raw, raise_error=False)
    assert response.code == 422
    error = assert_shape(json.loads(response.body), "invalid_request")
    assert error["params"]["field"].startswith("graph.nodes[0].params.value[0][0]")


async def test_bodies_that_are_not_json_are_400_with_a_position(jp_fetch):
    for raw in ('{"graph": ', '{"graph": {"nodes": [NaN]}}', '{"graph": {}} trailing'):
        response = await jp_fetch("codefy", "api", "runs", method="POST", body=raw, raise_error=False)
        assert response.code == 400
        assert_shape(json.loads(response.body), "invalid_json")


# -- the execution socket ----------------------------------------------------------------------------

async def next_frame(ws) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.read_message(), 60)
    assert message is not None, f"closed: {ws.close_code} {ws.close_reason}"
    return json.loads(message)


async def test_socket_submits_that_are_bad_get_error_frames_and_the_socket_goes_on(jp_fetch, jp_ws_fetch):
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    deep = "[" * 1000 + "]" * 1000
    bad = [
        ('{"type": "submit", "request_id": 1, "body": {"graph": {"nodes": %s}}}' % deep, "invalid_request",
         "body.graph.nodes[0][0][0]"),
        ('{"type": "submit", "request_id": 2, "body": {"graph": %s, "name": "\\ud800"}}' % json.dumps(SMALL),
         "invalid_request", "body.name"),
        ('{"type": "submit", "body": {"graph": {"nodes": [Infinity]}}}', "invalid_json", None),
    ]
    for message, code, field in bad:
        await ws.write_message(message)
        frame = await next_frame(ws)
        assert frame["type"] == "error" and frame["error"]["code"] == code, frame
        if field is not None:
            assert frame["error"]["params"]["field"].startswith(field)
    await ws.write_message(json.dumps({"type": "submit", "request_id": 3, "body": {"graph": SMALL}}))
    frame = await next_frame(ws)
    assert frame["type"] == "submitted" and frame["request_id"] == 3
    ws.close()


@small_cap
async def test_socket_messages_over_the_cap_get_an_error_frame_far_over_a_1009_close(jp_fetch, jp_ws_fetch):
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    over = json.dumps({"type": "submit", "body": {"graph": SMALL, "name": "x" * SMALL_CAP}})
    await ws.write_message(over)
    frame = await next_frame(ws)
    assert frame["type"] == "error" and frame["error"]["code"] == "body_too_large"
    assert frame["error"]["params"] == {"limit_bytes": SMALL_CAP}
    await ws.write_message(json.dumps({"type": "submit", "request_id": 1, "body": {"graph": SMALL}}))
    assert (await next_frame(ws))["type"] == "submitted"  # the socket is still good
    await ws.write_message("x" * (SMALL_CAP + (2 << 20)))
    while await asyncio.wait_for(ws.read_message(), 60) is not None:
        pass
    assert ws.close_code == 1009 and ws.close_reason
    ws.close()


async def test_subscribe_past_the_end_of_a_finished_run_says_what_rest_says(jp_fetch, jp_ws_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    code, rest = await call(jp_fetch, "api", "runs", run["id"], "events", cursor=10_000)
    assert code == 400
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    await ws.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": 10_000}))
    frame = await next_frame(ws)
    assert frame == {"type": "error", "error": rest["error"]}
    assert frame["error"]["code"] == "cursor_past_end" and frame["error"]["params"]["field"] == "cursor"
    last = rest["error"]["params"]["last_seq"]
    await ws.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": last}))
    await ws.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": last - 1}))
    frame = await next_frame(ws)  # at the end: nothing to send; one before it: the closing event
    assert frame["type"] == "events" and [e["seq"] for e in frame["events"]] == [last]
    ws.close()


# -- the worker socket -------------------------------------------------------------------------------

async def test_a_deeply_nested_worker_frame_is_refused_by_protocol_not_a_dropped_connection(
        jp_fetch, jp_serverapp, jp_http_port, jp_base_url, http_server_client):
    deep = '{"type": "hello", "x": ' + "[" * 5000 + "]" * 5000 + "}"
    agent = await RawAgent.connect(jp_http_port, jp_base_url, token=token_of(jp_serverapp))
    try:
        await agent.send_raw(deep)
        frame = await agent.expect(wp.Reject)
        assert frame.code == "too_deep"
        assert await agent.closed() == 4400 and agent.conn.close_reason
    finally:
        agent.close()
    # After the hello the frame is dropped alone (the agent keeps it) and the connection goes on.
    agent = await RawAgent.connect(jp_http_port, jp_base_url, token=token_of(jp_serverapp))
    try:
        await agent.send(await hello_frame(jp_fetch, "deep-box"))
        await agent.expect(wp.Welcome)
        await agent.send_raw('{"type": "event", "run_id": "r", "seq": 1, "event": ' + "[" * 5000 + "]" * 5000 + "}")
        await agent.send(wp.Heartbeat())
        code, listing = await call(jp_fetch, "api", "workers")
        assert [w["state"] for w in listing["workers"] if w["name"] == "deep-box"] == ["connected"]
        assert agent.conn.close_code is None
    finally:
        agent.close()


# -- item 8: the one error shape for HTTP errors ---------------------------------------------------------

async def test_requests_without_a_login_get_the_one_error_shape(jp_fetch):
    for parts, method, body in ((("api", "runs"), "GET", None), (("api", "runs"), "POST", "{}"),
                                (("api", "runs", "x", "cancel"), "POST", ""), (("api", "workers"), "GET", None),
                                (("api", "nodes"), "GET", None), (("api", "openapi.yaml"), "GET", None),
                                (("api", "workers", "w", "drain"), "POST", "")):
        response = await jp_fetch("codefy", *parts, method=method, body=body, headers={"Authorization": ""},
                                  raise_error=False)
        assert response.code == 403, parts
        error = assert_shape(json.loads(response.body), "unauthenticated")
        assert "token" in error["message"]


async def test_execution_socket_without_a_login_gets_the_one_error_shape(jp_http_port, jp_base_url,
                                                                          http_server_client):
    request = HTTPRequest(f"ws://127.0.0.1:{jp_http_port}{jp_base_url}codefy/ws/execution")
    with pytest.raises(HTTPClientError) as refused:
        await websocket_connect(request)
    assert refused.value.code == 403
    assert_shape(json.loads(refused.value.response.body), "unauthenticated")


async def test_a_method_a_route_lacks_is_405_with_allow(jp_fetch):
    for parts, method, allowed in ((("api", "runs"), "PUT", "GET, POST"), (("api", "runs", "x"), "PATCH", "GET, DELETE"),
                                   (("api", "nodes"), "DELETE", "GET")):
        response = await jp_fetch("codefy", *parts, method=method, body=None if method == "DELETE" else "{}",
                                  raise_error=False, allow_nonstandard_methods=True)
        assert response.code == 405 and response.headers["Allow"] == allowed, parts
        assert assert_shape(json.loads(response.body), "method_not_allowed")["params"]["allowed"] == allowed.split(", ")


async def test_too_many_enrollments_answer_429_with_retry_after(jp_fetch):
    for _ in range(21):
        response = await jp_fetch("codefy", "api", "workers", "enroll", method="POST", raise_error=False,
                                  body=json.dumps({"token": "abcdef.0123", "name": "box"}), headers={"Authorization": ""})
    assert response.code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert_shape(json.loads(response.body), "rate_limited")
