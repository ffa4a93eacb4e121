"""The run subprocess on its own: a real `python -m codefy_jupyter.agent.child` speaking `pipe.py`
messages over a socket pair, as the runner would drive it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import install_pack, pythonpath
from codefy_jupyter.agent import child, pipe
from codefy_jupyter.agent.isolation import child_environment, removed_variable, visibility, OfferedDevice
from codefy_jupyter.wire import run_events as ev


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


class Child:
    """One run process and the agent's end of its socket."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None) -> None:
        site = install_pack(tmp_path / "site")
        self.ours, theirs = socket.socketpair()
        self.log = open(tmp_path / "output.log", "wb")
        base = dict(os.environ, PYTHONPATH=pythonpath(site))
        base.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.agent.child", "--fd", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), env=base, stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self.reader = self.ours.makefile("rb")
        self.tmp_path = tmp_path

    def send(self, kind: str, body: dict[str, Any]) -> None:
        self.ours.sendall(pipe.encode(kind, body))

    def assign(self, graph: dict[str, Any], **spec: Any) -> None:
        self.send("assign", {"run_id": "run-1", "graph": graph, "device": "cpu",
                             "data_dir": str(self.tmp_path / "data"), "payload_cap_bytes": 131072, **spec})

    def next(self) -> tuple[str, dict[str, Any]]:
        line = self.reader.readline()
        assert line, "the run process closed its socket"
        return pipe.decode(line, kinds=pipe.CHILD_KINDS)

    def until_finished(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        while True:
            kind, body = self.next()
            out.append((kind, body))
            if kind == "finished":
                return out

    def close(self) -> int:
        self.reader.close()
        self.ours.close()
        code = self.proc.wait(timeout=120)
        self.log.close()
        return code


@pytest.fixture
def make_child(tmp_path):
    made: list[Child] = []

    def make(**kw: Any) -> Child:
        c = Child(tmp_path, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
        c.close()


SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [edge("k", "value", "s", "x")]}


def test_events_are_the_control_planes_own_payloads_then_finished(make_child):
    c = make_child()
    c.assign(SMALL)
    messages = c.until_finished()
    assert c.close() == child.EXIT_OK
    kinds = [k for k, _ in messages]
    assert kinds[0] == "capped" and set(kinds[1:-1]) == {"event"} and kinds[-1] == "finished"
    # Each event is exactly what core.run_events builds from the engine's callback.
    first = messages[1][1]
    raw = {"event": first["type"], **{k: v for k, v in first["payload"].items() if k != "run_id"}}
    assert ev.from_engine("run-1", raw) == ev.RunEvent(first["type"], first["payload"])
    finished = messages[-1][1]
    assert finished["status"] == "succeeded" and finished["executed"] == 2 and finished["error"] is None
    assert finished["duration_s"] > 0


def test_the_assign_environment_is_applied_before_the_run(make_child):
    c = make_child(env={"CUDA_VISIBLE_DEVICES": "7"})
    c.assign({"nodes": [{"id": "e", "type": "Environ"}], "edges": []},
             env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3,1"})
    messages = c.until_finished()
    seen = next(b["payload"] for k, b in messages if k == "event" and b["type"] == "run_warning")
    assert seen["code"] == "environ" and seen["node_id"] == "e"
    assert seen["params"]["CUDA_VISIBLE_DEVICES"] == "3,1" and seen["params"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_cancel_message_stops_the_run_cooperatively(make_child):
    c = make_child()
    c.assign({"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                        {"id": "nap", "type": "Sleep", "params": {"seconds": 60}}],
              "edges": [edge("k", "value", "nap", "value")]})
    while True:
        kind, body = c.next()
        if kind == "event" and body["payload"].get("node_id") == "nap":
            break
    c.send("cancel", {"reason": "stop"})
    finished = c.until_finished()[-1][1]
    assert finished["status"] == "cancelled"
    assert c.close() == child.EXIT_OK


def test_an_invalid_graph_fails_with_the_graph_problems(make_child):
    c = make_child()
    c.assign({"nodes": [{"id": "x", "type": "NoSuchNode"}], "edges": []})
    finished = c.until_finished()[-1][1]
    assert finished["status"] == "failed"
    assert finished["error"]["code"] == "invalid_graph" and finished["error"]["type"] == "GraphError"
    assert "NoSuchNode" in finished["error"]["message"]


def test_metrics_and_warnings_travel_as_log_events(make_child):
    c = make_child()
    c.assign({"nodes": [{"id": "m", "type": "List", "params": {"values": [1, 3]}}, {"id": "mean", "type": "Mean"},
                        {"id": "e", "type": "Environ"}],
              "edges": [edge("m", "values", "mean", "values")]}, facts=True)
    messages = c.until_finished()
    metrics = [b for k, b in messages if k == "event" and b["type"] == "metric"]
    assert metrics == [{"type": "metric", "payload": {"run_id": "run-1", "node_id": "mean", "name": "mean",
                                                      "value": 2.0, "step": None}}]
    assert [b["payload"]["code"] for k, b in messages if k == "event" and b["type"] == "run_warning"] == ["environ"]
    facts = [b for k, b in messages if k == "facts"]
    assert len(facts) == 1 and facts[0]["kind"] == "fingerprint"
    assert len(facts[0]["facts"]["digest"]) == 64 and facts[0]["facts"]["document"]["node_catalog"]


def test_the_run_process_ends_when_the_agent_goes_away(make_child):
    c = make_child()
    c.assign({"nodes": [{"id": "s", "type": "Stubborn", "params": {"seconds": 60}}], "edges": []})
    while c.next()[0] != "event":  # past `capped`: the node is running
        pass
    c.reader.close()
    c.ours.close()  # the agent is gone: cancel, then exit whatever the node does
    assert c.proc.wait(timeout=120) == child.EXIT_ORPHANED


def test_no_assign_is_a_clear_exit(make_child):
    c = make_child()
    c.ours.shutdown(socket.SHUT_WR)
    assert c.proc.wait(timeout=120) == child.EXIT_BAD_START
    assert "no assign arrived" in (c.tmp_path / "output.log").read_text()


# -- pure parts ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["CODEFY_TOKEN", "CODEFY_DB_PATH", "CODEFY_DB", "CODEFY_DATA_DIR", "JUPYTER_TOKEN",
                                  "JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN", "CODEFY_AGENT_TOKEN", "CODEFY_S3_SECRET_KEY",
                                  "codefy_token", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CODEFY_URL"])
def test_removed_variables(name):
    assert removed_variable(name)


@pytest.mark.parametrize("name", ["PATH", "PYTHONPATH", "CODEFY_PRESETS_DIR", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN",
                                  "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"])
def test_kept_variables(name):
    assert not removed_variable(name)


def test_child_environment_sets_the_device_variables():
    offered = {"cuda:0": OfferedDevice("cuda:0", "0"), "cuda:3": OfferedDevice("cuda:3", "GPU-abc")}
    env = child_environment({"PATH": "/bin", "CODEFY_TOKEN": "t", "CUDA_VISIBLE_DEVICES": "5"},
                            visibility("cuda:3", ["cuda:3", "cuda:0"], offered))
    assert env == {"PATH": "/bin", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "GPU-abc,0",
                   "PYTHONUNBUFFERED": "1"}
