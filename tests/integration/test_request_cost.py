"""One bad request must not starve the others: the issue's 10 MB body of `{"graph": {"nodes":
[1, 1, ...]}}` (just under the default size cap) against a real `codefy start` server, while
another client keeps reading the run list. Before, that body held the server for minutes and
answered hundreds of megabytes of problems; now it is refused in seconds with the first 100
problems and a count, and the other client is answered all along (how fast:
benchmarks/request_cost.py)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

import pytest

from test_headless import Servers, api

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


def post(state: dict[str, Any], body: bytes) -> tuple[int, bytes, float]:
    conn = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=100)
    started = time.perf_counter()
    try:
        conn.request("POST", "/codefy/api/runs", body=body, headers={
            "Authorization": f"token {state['token']}", "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read(), time.perf_counter() - started
    finally:
        conn.close()


def get_runs(conn: http.client.HTTPConnection, token: str) -> None:
    conn.request("GET", "/codefy/api/runs?limit=5", headers={"Authorization": f"token {token}"})
    response = conn.getresponse()
    assert response.status == 200
    json.loads(response.read())


def test_a_huge_bad_body_is_refused_while_gets_are_answered(servers):
    state = servers.start()
    assert api(state, "GET", "runs")[0] == 200
    body = ('{"graph": {"nodes": [' + ",".join(["1"] * 5_000_000) + "]}}").encode()
    assert 10_000_000 <= len(body) < 16 * 1024 * 1024  # the body; the default cap is 16 MiB

    answer: dict[str, Any] = {}
    poster = threading.Thread(target=lambda: answer.update(zip(("status", "body", "seconds"), post(state, body))))
    reader = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=30)
    get_runs(reader, state["token"])  # connected and warm
    answered = 0
    poster.start()
    while poster.is_alive():
        get_runs(reader, state["token"])  # each one asserts its 200
        answered += 1
        time.sleep(0.01)
    poster.join()
    reader.close()

    assert answer["status"] == 400
    assert len(answer["body"]) < 64 * 1024
    error = json.loads(answer["body"])["error"]
    assert error["code"] == "invalid_graph"
    assert len(error["params"]["problems"]) == 100 and error["params"]["more"] == 4_999_900
    # A generous deadline, not a speed check: before, this body held the server for minutes.
    assert answer["seconds"] < 60, f"the bad request took {answer['seconds']:.1f} s"
    # The other client was answered all along (before, it waited for the whole parse). How fast
    # (the issue's < 100 ms) is measured in benchmarks/request_cost.py, never in a test.
    assert answered >= 5, "the POST was over before the reader could ask anything"
