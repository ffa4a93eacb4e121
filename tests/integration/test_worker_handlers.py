"""/codefy/ws/worker and /codefy/api/workers on a real jupyter-server with a real SQLite file, driven
by a raw WebSocket client that speaks the worker protocol (wire/protocol.py) itself: the
checks before accept, the hello, enrollment, a run on a worker from assign to its final status,
cancel, a dropped connection and its resume, the grace, and a late result."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter._version import __version__
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.server.worker_handlers import HELLO_TIMEOUT_SETTING

from test_server_runs import SMALL, all_events, call, wait_status


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                          "tornado_settings": {HELLO_TIMEOUT_SETTING: 1.0}},
            "CodefyApp": codefy}


def settings(**values):
    """Run one test against a server with these CodefyApp settings."""
    return pytest.mark.parametrize("jp_server_config", [values], indirect=True,
                                   ids=[",".join(f"{k}={v}" for k, v in values.items())])


class RawAgent:
    """A worker agent reduced to its wire: it sends the frames a test tells it to."""

    opened: list["RawAgent"] = []

    def __init__(self, conn: Any) -> None:
        RawAgent.opened.append(self)
        self.conn = conn
        self.acks: dict[str, int] = {}
        self.seq: dict[str, int] = {}

    @classmethod
    async def connect(cls, port: int, base: str, *, token: str | None, headers: dict[str, str] | None = None,
                      query: str = "") -> "RawAgent":
        all_headers = dict(headers or {})
        if token is not None:
            all_headers.setdefault("Authorization", f"token {token}")
        request = HTTPRequest(f"ws://localhost:{port}{base}codefy/ws/worker{query}", headers=all_headers)
        return cls(await websocket_connect(request))

    async def send(self, frame: wp.Frame) -> None:
        await self.conn.write_message(wp.encode(frame))

    async def send_raw(self, text: str) -> None:
        await self.conn.write_message(text)

    async def run_frame(self, frame: wp.RunFrame, seq: int | None = None) -> wp.RunFrame:
        """Number the frame with the run's next seq (or `seq`) and send it."""
        if seq is None:
            seq = self.seq.get(frame.run_id, 0) + 1
        self.seq[frame.run_id] = max(seq, self.seq.get(frame.run_id, 0))
        import dataclasses

        numbered = dataclasses.replace(frame, seq=seq)
        await self.send(numbered)
        return numbered

    async def recv(self, timeout: float = 120.0) -> wp.Frame | None:
        """The next frame (acks are noted and skipped); None once the server closed."""
        while True:
            message = await asyncio.wait_for(self.conn.read_message(), timeout)
            if message is None:
                return None
            frame = wp.decode(message, sender="server")
            if isinstance(frame, wp.Ack):
                self.acks[frame.run_id] = max(frame.seq, self.acks.get(frame.run_id, 0))
                continue
            return frame

    async def expect(self, kind: type, timeout: float = 120.0) -> Any:
        frame = await self.recv(timeout)
        assert isinstance(frame, kind), f"expected {kind.__name__}, got {frame!r} (close {self.conn.close_code})"
        return frame

    async def until_ack(self, run_id: str, seq: int, timeout: float = 120.0) -> None:
        """Read (and keep) frames until the run's frames up to `seq` are acknowledged."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.acks.get(run_id, 0) < seq:
            message = await asyncio.wait_for(self.conn.read_message(),
                                             max(0.01, deadline - asyncio.get_running_loop().time()))
            assert message is not None, f"closed ({self.conn.close_code}) before the ack of {seq}"
            frame = wp.decode(message, sender="server")
            if isinstance(frame, wp.Ack):
                self.acks[frame.run_id] = max(frame.seq, self.acks.get(frame.run_id, 0))

    async def closed(self, timeout: float = 120.0) -> int | None:
        """Read until the server closes; its close code."""
        while await asyncio.wait_for(self.conn.read_message(), timeout) is not None:
            pass
        return self.conn.close_code

    def close(self) -> None:
        self.conn.close()


async def catalog(jp_fetch) -> dict[str, Any]:
    code, body = await call(jp_fetch, "api", "nodes")
    assert code == 200
    return body["catalog"]


async def hello_frame(jp_fetch, name: str, **changes: Any) -> wp.Hello:
    cat = await catalog(jp_fetch)
    fields: dict[str, Any] = dict(name=name, version=__version__, protocol_version=wp.PROTOCOL_VERSION,
                                  catalog_hash=cat["hash"], node_types=cat["types"], capabilities=["ack"],
                                  devices=[{"device": "cpu"}], platform="linux", fingerprint={"python": "3.11"})
    fields.update(changes)
    return wp.Hello(**fields)


@pytest.fixture(autouse=True)
def _close_agents():
    yield
    while RawAgent.opened:
        RawAgent.opened.pop().close()


@pytest.fixture
def server_token(jp_serverapp, http_server_client):
    """The server's own token (and the server listening: http_server_client starts it)."""
    return jp_serverapp.identity_provider.token


@pytest.fixture
def agent_factory(jp_http_port, jp_base_url, jp_fetch, server_token):
    async def make(name: str | None = "box", *, token: str | None = None, welcome: bool = True,
                   headers: dict[str, str] | None = None, **hello: Any) -> RawAgent:
        agent = await RawAgent.connect(jp_http_port, jp_base_url, token=token or server_token, headers=headers)
        if name is None:
            return agent
        await agent.send(await hello_frame(jp_fetch, name, **hello))
        if welcome:
            frame = await agent.expect(wp.Welcome)
            assert frame.name == name
        return agent

    return make


async def submit_to(jp_fetch, worker: str, graph: dict | None = None, **options: Any) -> dict:
    code, run = await call(jp_fetch, "api", "runs", method="POST",
                           body={"graph": graph or SMALL, "name": "on-worker",
                                 "options": {"target": {"worker": worker}, **options}})
    assert code == 201, run
    return run


async def enroll(jp_fetch, name: str, **issue: Any) -> str:
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST", body=issue or None)
    assert code == 201, issued
    code, got = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                           body={"token": issued["token"], "name": name}, headers={"Authorization": ""})
    assert code == 201, got
    return got["worker_token"]


def node_event(node_id: str, status: str) -> dict[str, Any]:
    return {"type": "node_status", "payload": {"node_id": node_id, "node_type": "Float", "status": status}}


# -- who may connect -----------------------------------------------------------------------------------

async def test_an_origin_header_or_a_foreign_host_closes_with_4003(jp_http_port, jp_base_url, server_token):
    agent = await RawAgent.connect(jp_http_port, jp_base_url, token=server_token,
                                   headers={"Origin": f"http://localhost:{jp_http_port}"})
    assert await agent.closed() == 4003
    agent = await RawAgent.connect(jp_http_port, jp_base_url, token=server_token,
                                   headers={"Host": "gpu.example.com"})
    assert await agent.closed() == 4003


async def test_missing_or_unknown_credentials_close_with_4401(jp_http_port, jp_base_url, server_token):
    for token in ("", "not-the-server-token", "cfw_" + "x" * 43):
        agent = await RawAgent.connect(jp_http_port, jp_base_url, token=None,
                                       headers={"Authorization": f"token {token}" if token else ""})
        assert await agent.closed() == 4401, token
    # The other ways of presenting a token work as well as the header.
    for headers, query in (({"Authorization": "", "X-Codefy-Token": server_token}, ""),
                           ({"Authorization": ""}, f"?token={server_token}")):
        agent = await RawAgent.connect(jp_http_port, jp_base_url, token=None, headers=headers, query=query)
        await agent.send(wp.Heartbeat())  # not a hello: refused, but only after the token was accepted
        frame = await agent.expect(wp.Reject)
        assert frame.code == "hello_required"
        assert await agent.closed() == 4400


async def test_a_connection_without_hello_is_refused_after_the_deadline(agent_factory):
    agent = await agent_factory(None)
    frame = await agent.expect(wp.Reject)
    assert frame.code == "hello_timeout" and "no hello within 1 s" in frame.message
    assert await agent.closed() == 4408


async def test_hello_refusals_name_their_reason(agent_factory, jp_fetch):
    agent = await agent_factory("box", welcome=False, version="0.0.1")
    frame = await agent.expect(wp.Reject)
    assert frame.code == "version_mismatch"
    assert frame.message == f"version mismatch: worker 0.0.1, control plane {__version__}"
    assert await agent.closed() == 4400
    # The refusal is kept by the agent's name for the Workers panel, not only in the server log.
    code, listing = await call(jp_fetch, "api", "workers")
    kept = [r for r in listing["refused"] if r["name"] == "box"]
    assert [(r["code"], r["message"]) for r in kept] == [("version_mismatch", frame.message)]

    agent = await agent_factory("box", welcome=False, protocol_version=wp.PROTOCOL_VERSION + 1)
    frame = await agent.expect(wp.Reject)
    assert frame.code == "protocol_mismatch" and frame.params == {"worker": wp.PROTOCOL_VERSION + 1,
                                                                    "control_plane": wp.PROTOCOL_VERSION}

    for name in ("local", "any"):
        agent = await agent_factory(name, welcome=False)
        frame = await agent.expect(wp.Reject)
        assert frame.code == "reserved_name" and name in frame.message

    agent = await agent_factory(None)
    await agent.send_raw("{not json")
    frame = await agent.expect(wp.Reject)
    assert frame.code == "not_json"

    # A name is taken while another credential holds it; the same credential replaces it.
    token = await enroll(jp_fetch, "gpu-box")
    first = await agent_factory("gpu-box")  # the server's token may use any name
    other = await agent_factory("gpu-box", token=token, welcome=False)
    frame = await other.expect(wp.Reject)
    assert frame.code == "name_taken"
    code, listing = await call(jp_fetch, "api", "workers")
    assert [r["code"] for r in listing["refused"] if r["name"] == "gpu-box"] == ["name_taken"]
    second = await agent_factory("gpu-box")
    assert await first.closed() == 4409
    code, listing = await call(jp_fetch, "api", "workers")
    assert [w["state"] for w in listing["workers"] if w["name"] == "gpu-box"] == ["connected"]
    # Once the name connects, its old refusal is gone; the other name's stays.
    assert [r["name"] for r in listing["refused"] if r["name"] == "gpu-box"] == []
    assert "box" in [r["name"] for r in listing["refused"]]
    second.close()
    # A worker token is bound to its name.
    agent = await agent_factory("other-name", token=token, welcome=False)
    frame = await agent.expect(wp.Reject)
    assert frame.code == "name_mismatch" and "gpu-box" in frame.message


# -- enrollment ---------------------------------------------------------------------------------------

async def test_enrollment_tokens_are_single_use_bound_and_revocable(jp_fetch, jp_serverapp, agent_factory):
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST")
    assert code == 201 and issued["command"].startswith("codefy agent start --control http://")
    assert issued["command"].endswith(f"--token {issued['token']}")
    no_session = {"Authorization": ""}
    code, got = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                           body={"token": issued["token"], "name": "gpu-box"}, headers=no_session)
    assert code == 201 and got["name"] == "gpu-box"
    code, again = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                             body={"token": issued["token"], "name": "gpu-box-2"}, headers=no_session)
    assert code == 401 and again["error"]["code"] == "enrollment_used"
    code, bad = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                           body={"token": issued["token"], "name": "Local"}, headers=no_session)
    assert code == 400 and bad["error"]["params"]["field"] == "name"

    # Only hashes are stored.
    app = jp_serverapp.extension_manager.extension_points["codefy"].app
    raw = (app.codefy_settings.resolved_data_dir() / "codefy.sqlite").read_bytes()
    assert issued["token"].encode() not in raw and got["worker_token"].encode() not in raw

    # Enrolled, listed offline until it connects.
    code, listing = await call(jp_fetch, "api", "workers")
    assert [(w["name"], w["state"], w["enrolled"]) for w in listing["workers"]] == [("gpu-box", "offline", True)]

    # The name is taken: a fresh token cannot enroll it, a re-issue for it can (and revokes the old token).
    code, fresh = await call(jp_fetch, "api", "workers", "enrollments", method="POST")
    code, taken = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                             body={"token": fresh["token"], "name": "gpu-box"}, headers=no_session)
    assert code == 403 and taken["error"]["code"] == "worker_name_taken"
    connected = await agent_factory("gpu-box", token=got["worker_token"])
    rekeyed = await enroll(jp_fetch, "gpu-box", worker="gpu-box")
    assert await connected.closed() == 4401
    stale = await agent_factory(None, token=got["worker_token"])
    assert await stale.closed() == 4401
    agent = await agent_factory("gpu-box", token=rekeyed)

    # DELETE revokes the token, disconnects the worker and fails its queued runs.
    await call(jp_fetch, "api", "workers", "gpu-box", "drain", method="POST")
    waiting = await submit_to(jp_fetch, "gpu-box")
    code, _ = await call(jp_fetch, "api", "workers", "gpu-box", method="DELETE")
    assert code == 204
    assert await agent.closed() == 4410
    failed = await wait_status(jp_fetch, waiting["id"], {"failed"})
    events = await all_events(jp_fetch, failed["id"])
    assert events[-1]["type"] == "execution_error"
    assert events[-1]["payload"]["error"]["code"] == "worker_removed"
    gone = await agent_factory(None, token=rekeyed)
    assert await gone.closed() == 4401
    code, listing = await call(jp_fetch, "api", "workers")
    assert listing["workers"] == []
    code, missing = await call(jp_fetch, "api", "workers", "gpu-box", method="DELETE")
    assert code == 404 and missing["error"]["code"] == "worker_not_found"


async def test_enroll_is_rate_limited_per_client_address(jp_fetch):
    codes = []
    for _ in range(21):
        code, body = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                                body={"token": "abcdef.0123", "name": "box"}, headers={"Authorization": ""})
        codes.append((code, body["error"]["code"]))
    assert codes[:20] == [(401, "enrollment_unknown")] * 20
    assert codes[20] == (429, "rate_limited")


# -- runs on a worker ------------------------------------------------------------------------------------

async def test_a_run_on_a_worker_is_assigned_and_its_frames_become_its_log(jp_fetch, agent_factory):
    from codefy_jupyter.engine import default_registry, param

    reg = default_registry()
    if reg.get("NeedsKey") is None:
        @reg.node("NeedsKey", outputs={"ok": "bool"}, params={"key": param.secret("")})
        def needs_key(ctx, key):
            return {"ok": key == "s3cr3t"}
    agent = await agent_factory("box")
    graph = {"nodes": [{"id": "n", "type": "NeedsKey", "params": {"key": "s3cr3t"}}]}
    run = await submit_to(jp_fetch, "box", graph, seed=7)
    assign = await agent.expect(wp.Assign)
    assert assign.run_id == run["id"] and assign.device == "cpu" and assign.devices == ["cpu"]
    assert assign.graph["nodes"][0]["params"]["key"] == "s3cr3t"  # the vault's value travels to the worker
    assert assign.options.seed == 7 and assign.options.deterministic is False
    assert assign.options.max_parallel_nodes == 4 and assign.grace_s == 30
    rid = run["id"]
    await agent.run_frame(wp.RunStarted(run_id=rid, pid=4242, visible_devices=[], device_aliases={}))
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n", "running")))
    await agent.run_frame(wp.Metrics(run_id=rid, points=[{"name": "loss", "value": 0.5, "step": 1, "node_id": "n"},
                                                         {"name": "loss", "value": 0.25, "step": 2, "node_id": "n"}]))
    await agent.run_frame(wp.Artifact(run_id=rid, kind="checkpoint", path="ckpt/1.pt", node_id="n", meta={"epoch": 1}))
    await agent.run_frame(wp.RunWarning(run_id=rid, message="slow disk", code="slow_io", node_id="n"))
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n", "done")))
    running = await wait_status(jp_fetch, rid, {"running"})
    assert running["worker_id"] == "box" and running["queue_key"] == "box/cpu"
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=1, cached=0,
                                         metrics={"loss": 0.25}, duration_s=1.5))
    done = await wait_status(jp_fetch, rid, {"succeeded", "failed"})
    assert done["status"] == "succeeded"
    events = await all_events(jp_fetch, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events] == ["execution_start", "node_status", "metric", "metric", "artifact",
                                           "run_warning", "node_status", "execution_complete"]
    assert events[0]["payload"]["queue_key"] == "box/cpu" and events[0]["payload"]["seed"] == 7
    assert events[-1]["payload"]["metrics"] == {"loss": 0.25} and events[-1]["payload"]["executed"] == 1
    assert events[-1]["payload"]["duration_s"] == 1.5
    assert events[5]["payload"]["code"] == "slow_io"
    code, body = await call(jp_fetch, "api", "runs", rid, "metrics")
    assert [(m["name"], m["step"], m["value"]) for m in body["metrics"]] == [("loss", 1, 0.5), ("loss", 2, 0.25)]
    code, body = await call(jp_fetch, "api", "runs", rid, "artifacts")
    assert [(a["kind"], a["path"], a["meta"]) for a in body["artifacts"]] == [("checkpoint", "ckpt/1.pt", {"epoch": 1})]
    await agent.until_ack(rid, 7)  # everything acknowledged: the agent may drop its spool
    assert done["execution_facts"]["worker_resume"]["seq"] >= 6
    assert done["execution_facts"]["worker_pid"] == 4242


async def test_submit_refusals_for_worker_targets(jp_fetch, agent_factory):
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": SMALL, "options": {"target": {"worker": "nobody"}}})
    assert code == 400 and body["error"]["code"] == "worker_unknown"
    await agent_factory("box")
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": SMALL, "options": {"device": "cuda:0", "target": {"worker": "box"}}})
    assert code == 400 and body["error"]["code"] == "device_not_offered"
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": SMALL, "options": {"lane": "interactive", "session": "s",
                                                              "target": {"worker": "box"}}})
    assert code == 400 and body["error"]["code"] == "worker_interactive"


async def test_a_failed_run_keeps_the_workers_error_and_output_tail(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    await agent.run_frame(wp.RunFinished(run_id=run["id"], status="failed", exit_code=-11, signal=11,
                                         error={"type": "Crashed", "message": "the run's process died (SIGSEGV)"},
                                         output_tail="Segmentation fault\n"))
    done = await wait_status(jp_fetch, run["id"], {"failed", "succeeded"})
    assert done["status"] == "failed" and done["error"]["output_tail"] == "Segmentation fault\n"
    assert done["error"]["exit_code"] == -11 and done["error"]["message"].endswith("(SIGSEGV)")


async def test_a_workers_huge_error_and_endless_facts_are_kept_bounded(jp_fetch, agent_factory):
    from codefy_jupyter.core.workers import frame_bounds as fb

    agent = await agent_factory("box", capabilities=["ack", "run_facts"])
    run = await submit_to(jp_fetch, "box")
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    for i in range(fb.FACTS_KEPT_PER_RUN + 30):
        await agent.run_frame(wp.RunFacts(run_id=run["id"], kind="custom", facts={"i": i}))
    await agent.run_frame(wp.RunFacts(run_id=run["id"], kind="custom", facts={"blob": "x" * (fb.FACT_BYTES + 1)}))
    huge = "m" * 3_000_000
    last = await agent.run_frame(wp.RunFinished(
        run_id=run["id"], status="failed",
        error={"type": "Boom", "message": huge, "traceback": "t" * 3_000_000 + "\nBoom: the last line",
               "params": {"big": ["y" * 100] * 1000}}))
    await agent.until_ack(run["id"], last.seq)
    done = await wait_status(jp_fetch, run["id"], {"failed", "succeeded"})
    error = done["error"]
    assert done["status"] == "failed" and error["type"] == "Boom"
    assert error["truncated"] == ["message", "params", "traceback"] and "params" not in error
    assert len(error["message"]) < fb.ERROR_MESSAGE_CHARS + 100 and error["message"].startswith("mmm")
    assert error["traceback"].endswith("Boom: the last line") and len(error["traceback"]) < fb.ERROR_TRACEBACK_CHARS + 100
    # The closing event keeps the (bounded) error instead of eliding it under the payload cap.
    events = await all_events(jp_fetch, run["id"])
    closing = [e for e in events if e["type"] == "execution_error"]
    assert closing and closing[-1]["payload"]["error"]["type"] == "Boom", closing
    facts = done["execution_facts"]
    assert [f["facts"]["i"] for f in facts["run_facts"]] == list(range(fb.FACTS_KEPT_PER_RUN))
    assert facts["run_facts_dropped"] == {"too_many": 30, "too_large": 1}


async def test_cancel_is_forwarded_to_the_worker(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    await wait_status(jp_fetch, run["id"], {"running"})
    code, body = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
    assert code == 200
    cancel = await agent.expect(wp.Cancel)
    assert cancel.run_id == run["id"] and cancel.grace_s == 30
    await agent.run_frame(wp.RunFinished(run_id=run["id"], status="cancelled"))
    done = await wait_status(jp_fetch, run["id"], {"cancelled"})
    events = await all_events(jp_fetch, done["id"])
    assert events[-1]["type"] == "execution_stopped" and events[-1]["payload"]["status"] == "cancelled"


async def test_a_run_for_an_away_worker_waits_and_starts_when_it_connects(jp_fetch, agent_factory):
    await enroll(jp_fetch, "later")
    run = await submit_to(jp_fetch, "later")
    code, waiting = await call(jp_fetch, "api", "runs", run["id"])
    assert waiting["status"] == "queued"
    assert waiting["queue_reason"]["code"] == "worker_disconnected"
    assert waiting["queue_reason"]["message"] == "waiting for worker later to reconnect"
    agent = await agent_factory("later")
    assign = await agent.expect(wp.Assign)
    assert assign.run_id == run["id"]
    await call(jp_fetch, "api", "workers", "later", "drain", method="POST")
    drain = await agent.expect(wp.Drain)
    assert drain.draining is True
    second = await submit_to(jp_fetch, "later")
    code, waiting = await call(jp_fetch, "api", "runs", second["id"])
    assert waiting["queue_reason"]["message"] == "worker later is draining"
    code, listing = await call(jp_fetch, "api", "workers")
    (later,) = listing["workers"]
    assert later["state"] == "draining" and later["runs"] == [run["id"]]
    assert later["slots"][0]["slots"]["taken"] == 1
    await call(jp_fetch, "api", "workers", "later", "undrain", method="POST")
    assert (await agent.expect(wp.Drain)).draining is False
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    await agent.run_frame(wp.RunFinished(run_id=run["id"], status="succeeded"))
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    assign = await agent.expect(wp.Assign)
    assert assign.run_id == second["id"]


# -- a dropped connection -----------------------------------------------------------------------------

async def test_a_dropped_connection_resumes_with_replay_without_duplicates(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=rid))
    for i in range(1, 5):  # seq 2..5
        await agent.run_frame(wp.Event(run_id=rid, event=node_event(f"n{i}", "done")))
    await agent.until_ack(rid, 5)
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n5", "done")))  # seq 6, maybe not acked
    agent.close()
    gone = await wait_status(jp_fetch, rid, {"disconnected"})
    assert gone["status"] == "disconnected"
    code, listing = await call(jp_fetch, "api", "workers")
    assert listing["workers"][0]["state"] == "disconnected"

    back = await agent_factory("box")
    await back.send(wp.RunAlive(runs={rid: 9}))
    # The agent replays every frame it has no ack for: 6 again, then 7, a lost 8, and 9.
    await back.run_frame(wp.Event(run_id=rid, event=node_event("n5", "done")), seq=6)
    await back.run_frame(wp.Event(run_id=rid, event=node_event("n6", "done")), seq=7)
    await back.run_frame(wp.Event(run_id=rid, event=node_event("n8", "done")), seq=9)
    await wait_status(jp_fetch, rid, {"running"})
    await back.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=8), seq=10)
    await wait_status(jp_fetch, rid, {"succeeded"})
    events = await all_events(jp_fetch, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    nodes = [e["payload"]["node_id"] for e in events if e["type"] == "node_status"]
    assert nodes == ["n1", "n2", "n3", "n4", "n5", "n6", "n8"]  # nothing twice
    warnings = [(e["payload"]["code"], e["payload"]["params"]) for e in events if e["type"] == "run_warning"]
    assert [c for c, _ in warnings] == ["worker_disconnected", "worker_reconnected", "worker_frames_lost"]
    assert warnings[0][1]["worker"] == "box" and warnings[0][1]["reason"]["code"] == "connection_closed"
    assert warnings[2][1] == {"worker": "box", "first": 8, "last": 8}
    assert events[-1]["type"] == "execution_complete"
    await back.until_ack(rid, 10)


@settings(worker_resume_grace_s=1)
async def test_past_the_grace_the_run_ends_interrupted_and_a_late_result_is_kept(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=rid))
    await wait_status(jp_fetch, rid, {"running"})
    agent.close()
    done = await wait_status(jp_fetch, rid, {"interrupted"})
    events = await all_events(jp_fetch, rid)
    assert events[-1]["type"] == "execution_stopped"
    reason = events[-1]["payload"]["reason"]
    assert reason["code"] == "worker_gone" and reason["params"]["reason"]["code"] == "no_reconnect"
    assert done["execution_facts"]["error_reason"] == "worker_gone"
    code, listing = await call(jp_fetch, "api", "workers")
    assert listing["workers"][0]["slots"][0]["slots"]["taken"] == 0  # its slot is free again

    back = await agent_factory("box")
    await back.send(wp.RunAlive(runs={rid: 2}))
    cancel = await back.expect(wp.Cancel)
    assert cancel.run_id == rid and cancel.grace_s == 0
    await back.run_frame(wp.RunFinished(run_id=rid, status="succeeded"), seq=2)
    await back.until_ack(rid, 2)
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        code, row = await call(jp_fetch, "api", "runs", rid)
        if "late_result" in (row["execution_facts"] or {}):
            break
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    assert row["status"] == "interrupted" and row["execution_facts"]["late_result"]["status"] == "succeeded"
    assert len(await all_events(jp_fetch, rid)) == len(events)  # nothing after the closing event


@settings(worker_heartbeat_s=1)
async def test_a_silent_worker_is_disconnected_after_three_missed_heartbeats(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    assert await agent.closed() == 4408  # nothing sent for 3 s
    await wait_status(jp_fetch, run["id"], {"disconnected"})
    events = await all_events(jp_fetch, run["id"])
    warning = events[-1]["payload"]
    assert warning["code"] == "worker_disconnected"
    assert warning["params"]["reason"] == {"code": "no_heartbeat", "params": {"seconds": 3},
                                           "text": "no heartbeat for 3 s"}


async def test_malformed_and_stray_frames_lose_nothing(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=rid))
    await agent.send_raw(json.dumps({"type": "event", "run_id": rid, "seq": 2}))  # no event field
    await agent.run_frame(wp.Event(run_id="not-a-run", event=node_event("x", "done")), seq=1)
    stray = await agent.expect(wp.Cancel)
    assert stray.run_id == "not-a-run" and stray.grace_s == 0
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n", "done")), seq=2)
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded"), seq=3)
    await wait_status(jp_fetch, rid, {"succeeded"})
    events = await all_events(jp_fetch, rid)
    types = [e["type"] for e in events]
    assert types == ["execution_start", "run_warning", "node_status", "execution_complete"]
    assert events[1]["payload"]["code"] == "worker_bad_frame"
    assert events[1]["payload"]["params"]["path"] == "event.event"


async def test_a_batch_is_recorded_as_its_frames_one_by_one_and_a_bad_item_alone_is_dropped(jp_fetch, agent_factory):
    agent = await agent_factory("box", capabilities=["ack", "batch"])
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)

    def numbered(frame: wp.RunFrame, seq: int) -> str:
        return wp.encode(wp.numbered(frame, seq))

    await agent.send_raw(wp.encode_batch([
        numbered(wp.RunStarted(run_id=rid, pid=7), 1),
        numbered(wp.Event(run_id=rid, event=node_event("a", "done")), 2),
        json.dumps({"type": "event", "run_id": rid, "seq": 3}),  # no event field
        numbered(wp.Event(run_id="not-a-run", event=node_event("x", "done")), 1),
        numbered(wp.Metrics(run_id=rid, points=[{"name": "loss", "value": 0.5, "step": 1}]), 3),
    ]))
    stray = await agent.expect(wp.Cancel)
    assert stray.run_id == "not-a-run"
    await agent.until_ack(rid, 3)
    # A peer may send single frames and batches on one connection; a batch of one is fine too.
    await agent.send_raw(wp.encode_batch([numbered(wp.Event(run_id=rid, event=node_event("b", "done")), 4)]))
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded"), seq=5)
    await wait_status(jp_fetch, rid, {"succeeded"})
    events = await all_events(jp_fetch, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events] == ["execution_start", "node_status", "run_warning", "metric", "node_status",
                                           "execution_complete"]
    assert events[2]["payload"]["code"] == "worker_bad_frame"
    assert events[2]["payload"]["params"]["path"] == "batch.frames[2].event"
    await agent.until_ack(rid, 5)
    code, listing = await call(jp_fetch, "api", "workers")
    assert "batch" in listing["workers"][0]["capabilities"]


@settings(worker_one_shot_queue_timeout_s=3)
async def test_a_run_for_the_one_shot_pool_fails_when_none_takes_it_in_time(jp_fetch, agent_factory):
    await agent_factory("box")  # an ordinary worker: the pool never uses it
    code, run = await call(jp_fetch, "api", "runs", method="POST",
                           body={"graph": SMALL, "options": {"target": {"pool": "one-shot"}}})
    assert code == 201, run
    assert run["queue_key"] == "pool:one-shot/cpu" and run["options"]["target"]["pool"] == "one-shot"
    # The submit's answer shows the wait (a later read may come after the timeout on a busy machine).
    assert run["status"] == "queued" and run["queue_reason"]["code"] == "one_shot_pool", run
    failed = await wait_status(jp_fetch, run["id"], {"failed"})
    assert failed["error"]["code"] == "one_shot_queue_timeout"
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": SMALL, "options": {"target": {"pool": "two-shot"}}})
    assert code == 422 and body["error"]["params"]["field"] == "options.target.pool"


async def test_any_places_a_run_on_a_connected_worker_before_this_server(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "any")
    assert run["queue_key"] == "any/cpu"
    assign = await agent.expect(wp.Assign)
    assert assign.run_id == run["id"]
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    started = await wait_status(jp_fetch, run["id"], {"running"})
    assert started["worker_id"] == "box" and started["queue_key"] == "box/cpu"
    await agent.run_frame(wp.RunFinished(run_id=run["id"], status="succeeded"))
    await wait_status(jp_fetch, run["id"], {"succeeded"})


async def test_an_assign_lost_with_the_connection_is_sent_again(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    await agent.expect(wp.Assign)
    agent.close()  # gone before it started the run
    await wait_status(jp_fetch, run["id"], {"disconnected"})
    back = await agent_factory("box")
    await back.send(wp.RunAlive(runs={}))  # it has no such run
    again = await back.expect(wp.Assign)
    assert again.run_id == run["id"]
    await back.run_frame(wp.RunStarted(run_id=run["id"]))
    await back.run_frame(wp.RunFinished(run_id=run["id"], status="succeeded"))
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    events = await all_events(jp_fetch, run["id"])
    assert [e["type"] for e in events] == ["execution_start", "run_warning", "run_warning", "execution_complete"]
