"""One bad request must not starve the others: the issue's 10 MB body of `{"graph": {"nodes":
[1, 1, ...]}}` (just under the default size cap) against a real `codefy start` server, while
another client keeps reading the run list. Before, that body held the server for minutes and
answered hundreds of megabytes of problems; now it is refused in seconds with the first 100
problems and a count, and concurrent GETs are answered in under 100 ms."""

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


def timed_get(conn: http.client.HTTPConnection, token: str) -> float:
    started = time.perf_counter()
    conn.request("GET", "/codefy/api/runs?limit=5", headers={"Authorization": f"token {token}"})
    response = conn.getresponse()
    assert response.status == 200
    json.loads(response.read())
    return time.perf_counter() - started


def test_a_huge_bad_body_is_refused_quickly_while_gets_stay_fast(servers):
    state = servers.start()
    assert api(state, "GET", "runs")[0] == 200
    body = ('{"graph": {"nodes": [' + ",".join(["1"] * 5_000_000) + "]}}").encode()
    assert 10_000_000 <= len(body) < 16 * 1024 * 1024  # the body; the default cap is 16 MiB

    answer: dict[str, Any] = {}
    poster = threading.Thread(target=lambda: answer.update(zip(("status", "body", "seconds"), post(state, body))))
    reader = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=30)
    timed_get(reader, state["token"])  # connected and warm
    # What this machine gives now, without the POST: the GETs' own latency, and how long a
    # whole-document C parse of the body takes (the stall the sliced parser avoids). The bounds
    # below are the on an idle machine and grow with these on a busy one.
    baseline = sorted(timed_get(reader, state["token"]) for _ in range(20))
    began = time.perf_counter()
    json.loads(body)
    whole = time.perf_counter() - began
    latencies: list[float] = []
    poster.start()
    while poster.is_alive():
        latencies.append(timed_get(reader, state["token"]))
        time.sleep(0.01)
    poster.join()
    reader.close()

    assert answer["status"] == 400
    assert len(answer["body"]) < 64 * 1024
    error = json.loads(answer["body"])["error"]
    assert error["code"] == "invalid_graph"
    assert len(error["params"]["problems"]) == 100 and error["params"]["more"] == 4_999_900
    assert answer["seconds"] < 60, f"the bad request took {answer['seconds']:.1f} s"
    assert len(latencies) >= 5, "the POST was over before the reader could measure anything"
    # Under 100 ms as the issue asks; the bound is on the 90th percentile because this 2-core box is
    # shared with other test runs, whose scheduling can add tens of ms to any one request (beside
    # busy cores: three times the GETs' own 90th percentile without the POST). The worst one is
    # bounded too: a whole-document C parse stalls the loop for ~0.2-0.8 s on an idle machine, for
    # about `whole` on this one now; the sliced parser's worst stays well under half of that.
    ordered = sorted(latencies)
    p90, worst = ordered[int(len(ordered) * 0.9) - 1], ordered[-1]
    base_p90 = baseline[int(len(baseline) * 0.9) - 1]
    report = (f"{len(latencies)} GETs, 90th percentile {p90 * 1000:.0f} ms, worst {worst * 1000:.0f} ms "
              f"(without the POST: 90th percentile {base_p90 * 1000:.0f} ms; a whole parse {whole:.2f} s)")
    assert p90 < max(0.1, 3 * base_p90), report
    assert worst < max(0.25, whole / 2), report
