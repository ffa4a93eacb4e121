"""The worker connection's protocol (core/workers/session.py) without a server: every path from
open to close, fed with real encoded frames, checked by the actions the session answers."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from codefy_jupyter.core.workers import session as ws
from codefy_jupyter.core.workers.session import (
    AWAITING_HELLO, CLOSED, JUDGING, OPEN, BadFrame, Close, Connected, Deliver, Judge, Record, Send, WorkerSession,
)
from codefy_jupyter.wire.protocol import (
    MAX_FRAME_BYTES, PROTOCOL_VERSION, Event, Heartbeat, Hello, Reject, RunAlive, RunStarted, Welcome, encode,
    encode_batch,
)


@dataclass
class FakeWorker:
    name: str = "box"


HELLO = encode(Hello(name="box", version="1", protocol_version=PROTOCOL_VERSION))
WELCOME = Welcome(worker_id="w1", name="box")


def event(run_id: str, seq: int) -> str:
    return encode(Event(run_id=run_id, seq=seq, event={"event": "node_start", "node_id": "n"}))


def welcomed() -> WorkerSession:
    s = WorkerSession(hello_timeout_s=10.0)
    assert s.opened() == []
    [judge] = s.received(HELLO)
    assert isinstance(judge, Judge)
    assert s.judged(WELCOME, FakeWorker()) == [Send(WELCOME), Connected(FakeWorker())]
    return s


def rejected(actions, code: str, close_code: int = ws.CLOSE_REJECTED) -> Reject:
    assert len(actions) == 2
    send, close = actions
    assert isinstance(send, Send) and isinstance(send.frame, Reject) and send.frame.code == code
    assert close == Close(close_code, send.frame.message[:120])
    return send.frame


# -- before the hello ---------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [ws.CLOSE_HOST_ORIGIN, ws.CLOSE_CREDENTIALS, 1013, 1011])
def test_a_refused_connection_closes_at_once_and_reads_nothing(code):
    s = WorkerSession(hello_timeout_s=10.0, refusal=(code, "why"))
    assert s.opened() == [Close(code, "why")]
    assert s.state == CLOSED
    assert s.received(HELLO) == []
    assert s.hello_deadline() == []
    assert s.closed(code) is None


def test_the_hello_is_judged_then_welcomed():
    s = WorkerSession(hello_timeout_s=10.0)
    assert s.opened() == [] and s.state == AWAITING_HELLO
    [judge] = s.received(HELLO)
    assert isinstance(judge, Judge) and judge.hello.name == "box"
    assert s.state == JUDGING
    assert s.hello_deadline() == []  # the deadline is for the hello's arrival, not its judgement
    worker = FakeWorker()
    assert s.judged(WELCOME, worker) == [Send(WELCOME), Connected(worker)]
    assert s.state == OPEN and s.worker is worker


def test_a_refused_hello_sends_the_reject_and_closes():
    s = WorkerSession(hello_timeout_s=10.0)
    s.received(HELLO)
    reject = Reject(code="version_mismatch", message="x" * 200)
    assert s.judged(reject, None) == [Send(reject), Close(ws.CLOSE_REJECTED, "x" * 120)]
    assert s.state == CLOSED
    assert s.received(HELLO) == []


def test_a_socket_that_closed_during_the_judgement_gets_nothing():
    s = WorkerSession(hello_timeout_s=10.0)
    s.received(HELLO)
    assert s.judged(WELCOME, FakeWorker(), still_open=False) == []
    assert s.state == CLOSED and s.worker is None


def test_no_hello_within_the_deadline():
    s = WorkerSession(hello_timeout_s=0.5)
    s.opened()
    reject = rejected(s.hello_deadline(), "hello_timeout", ws.CLOSE_HELLO_TIMEOUT)
    assert reject.params == {"seconds": 0.5} and "0.5 s" in reject.message
    assert s.state == CLOSED
    assert s.hello_deadline() == []


def test_the_deadline_after_the_welcome_does_nothing():
    assert welcomed().hello_deadline() == []


@pytest.mark.parametrize("first", [
    encode(Heartbeat()), encode(RunAlive(runs={})), event("r1", 1),
])
def test_the_first_frame_must_be_hello(first):
    s = WorkerSession(hello_timeout_s=10.0)
    reject = rejected(s.received(first), "hello_required")
    assert reject.params == {"type": json.loads(first)["type"]}


@pytest.mark.parametrize("message", ["not json", "[]", '{"type": "nope"}', '{"type": "hello"}',
                                     '{"type": "welcome", "worker_id": "w"}'])
def test_a_malformed_frame_before_the_hello_is_rejected_with_its_path(message):
    s = WorkerSession(hello_timeout_s=10.0)
    reject = rejected(s.received(message), rejected_code(message))
    assert "path" in reject.params


def rejected_code(message: str) -> str:
    from codefy_jupyter.wire.protocol import ProtocolError, decode

    try:
        decode(message, sender="agent")
    except ProtocolError as err:
        return err.code
    raise AssertionError("expected a refusal")


# -- after the welcome ----------------------------------------------------------------------------------

def test_frames_after_the_welcome_are_delivered_one_by_one():
    s = welcomed()
    [d1] = s.received(encode(Heartbeat(running=["r1"])))
    assert isinstance(d1, Deliver) and isinstance(d1.frame, Heartbeat)
    [d2] = s.received(event("r1", 1))
    assert isinstance(d2.frame, Event) and d2.frame.seq == 1
    [d3] = s.received(HELLO)  # a second hello is the WorkerService's to ignore
    assert isinstance(d3.frame, Hello)


def test_a_malformed_frame_after_the_welcome_is_dropped_alone_and_names_its_run():
    s = welcomed()
    [bad] = s.received('{"type": "event", "run_id": "r1", "seq": "x", "event": {}}')
    assert isinstance(bad, BadFrame) and bad.run_id == "r1"
    assert bad.params["worker"] == "box" and bad.params["code"] == bad.code and "path" in bad.params
    assert bad.message.startswith("worker box sent a frame that could not be read: ")
    assert s.state == OPEN
    [ok] = s.received(event("r1", 2))
    assert isinstance(ok, Deliver)


@pytest.mark.parametrize("message", ["not json", "[1]", '{"type": "nope"}', '{"type": "event", "run_id": 5}'])
def test_a_malformed_frame_that_names_no_run_warns_no_run(message):
    [bad] = welcomed().received(message)
    assert isinstance(bad, BadFrame) and bad.run_id is None


def test_a_batch_is_recorded_in_order():
    s = welcomed()
    [record] = s.received(encode_batch([event("r1", 1), event("r1", 2), event("r2", 1)]))
    assert isinstance(record, Record)
    assert [(f.run_id, f.seq) for f in record.frames] == [("r1", 1), ("r1", 2), ("r2", 1)]


def test_a_malformed_frame_in_a_batch_is_dropped_alone_after_what_came_before_it():
    s = welcomed()
    bad = '{"type":"event","run_id":"r2","seq":0,"event":{}}'
    actions = s.received(encode_batch([event("r1", 1), bad, event("r1", 2), event("r1", 3)]))
    assert [type(a) for a in actions] == [Record, BadFrame, Record]
    assert [f.seq for f in actions[0].frames] == [1]
    assert actions[1].run_id == "r2" and "frames[1]" in actions[1].params["path"]
    assert [f.seq for f in actions[2].frames] == [2, 3]


def test_a_batch_of_only_bad_frames_records_nothing():
    s = welcomed()
    actions = s.received('{"type":"batch","frames":[{"type":"event","run_id":"r1"},{"type":"heartbeat"}]}')
    assert [type(a) for a in actions] == [BadFrame, BadFrame]
    assert actions[0].run_id == "r1" and actions[1].run_id is None


def test_a_batch_whose_first_frame_is_bad_warns_first():
    s = welcomed()
    actions = s.received(encode_batch(['{"type":"event","run_id":"r1","seq":-1,"event":{}}',
                                       encode(RunStarted(run_id="r1", seq=1))]))
    assert [type(a) for a in actions] == [BadFrame, Record]


# -- closing ----------------------------------------------------------------------------------------------

def test_closing_before_the_welcome_drops_no_worker():
    s = WorkerSession(hello_timeout_s=10.0)
    s.opened()
    assert s.closed(1000) is None
    assert s.state == CLOSED and s.received(HELLO) == []


@pytest.mark.parametrize("code, text", [(1000, "connection closed (1000)"), (None, "connection closed"),
                                        (1006, "connection closed (1006)")])
def test_closing_after_the_welcome_says_how(code, text):
    s = welcomed()
    assert s.closed(code) == {"code": "connection_closed", "params": {"close_code": code}, "text": text}
    assert s.received(event("r1", 1)) == []


def test_a_frame_over_the_limit_is_named_as_the_reason():
    reason = welcomed().closed(1009, protocol_close=1009)
    assert reason["code"] == "frame_too_large"
    assert reason["params"] == {"close_code": 1009, "limit_bytes": MAX_FRAME_BYTES}


def test_run_id_of_reads_text_bytes_and_parsed_items():
    assert ws.run_id_of('{"run_id": "a"}') == "a"
    assert ws.run_id_of(b'{"run_id": "b"}') == "b"
    assert ws.run_id_of({"run_id": "c"}) == "c"
    assert ws.run_id_of({"run_id": 3}) is None
    assert ws.run_id_of(b"\xff") is None
    assert ws.run_id_of("[" * 100000) is None
