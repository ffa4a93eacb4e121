"""Event payload builders: engine events to log events, closing events, the payload cap."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from codefy_jupyter.wire import run_events as ev
from codefy_jupyter.engine import NodeRegistry, param, run_graph


def test_engine_events_of_a_real_run_become_json_safe_log_events(tmp_path):
    reg = NodeRegistry()

    @reg.node("Emit", outputs={"v": "float"}, params={"x": param.float(1.0)})
    def emit(ctx, x):
        ctx.progress(1, 2, "half")
        ctx.log_metric("loss", np.float32(0.5), step=1)
        ctx.artifact("model", tmp_path / "m.pt", {"size": np.int64(3), "weights": torch.zeros(2, 2)})
        ctx.warn("careful", code="lr_high", lr=1.0)
        return {"v": x}

    raw = []
    run_graph({"nodes": [{"id": "e", "type": "Emit"}]}, registry=reg, on_event=raw.append)
    events = [ev.from_engine("r1", e) for e in raw]
    types = [e.type for e in events]
    assert types == ["node_status", "progress", "metric", "artifact", "run_warning", "node_status"]
    for e in events:
        assert e.payload["run_id"] == "r1"
        json.loads(ev.encode(e.payload))  # strict JSON
    metric = events[2].payload
    assert metric == {"run_id": "r1", "node_id": "e", "name": "loss", "value": 0.5, "step": 1}
    artifact = events[3].payload
    assert artifact["path"] == str(tmp_path / "m.pt")
    assert artifact["meta"] == {"size": 3, "weights": {"tensor": True, "shape": [2, 2], "dtype": "torch.float32"}}
    assert events[4].payload["code"] == "lr_high" and events[4].payload["params"] == {"lr": 1.0}


def test_unknown_engine_events_are_not_logged():
    assert ev.from_engine("r", {"event": "something_else"}) is None


def test_non_finite_numbers_stay_strict_json():
    assert ev.jsonable([float("nan"), float("inf"), -float("inf"), 1.5]) == ["NaN", "Infinity", "-Infinity", 1.5]
    assert ev.jsonable({"p": Path("/x"), "t": (1, 2)}) == {"p": "/x", "t": [1, 2]}


def test_closing_events_and_their_status():
    done = ev.execution_complete("r", duration_s=1.5, metrics={"acc": 0.9}, executed=3, cached=1)
    failed = ev.execution_error("r", {"node_id": "n", "message": "boom"})
    stopped = ev.execution_stopped("r", status="interrupted", code="server_restart", message="the server restarted")
    start = ev.execution_start("r", name="x", device="cpu", devices=["cpu"], seed=None, deterministic=False,
                               queue_key="cpu", started_at=1.0)
    assert [e.closing for e in (start, done, failed, stopped)] == [False, True, True, True]
    assert [ev.closing_status(e.type, e.payload) for e in (start, done, failed, stopped)] == [
        None, "succeeded", "failed", "interrupted"]
    assert stopped.payload["reason"] == {"code": "server_restart", "message": "the server restarted", "params": {}}
    with pytest.raises(ValueError):
        ev.execution_stopped("r", status="succeeded", code="x", message="y")


def test_cap_elides_the_largest_outputs_first_and_names_the_port():
    payload = {"run_id": "r", "node_id": "n", "outputs": {"small": "s", "big": "x" * 5000, "mid": "y" * 500}}
    capped = ev.cap_payload(payload, 1000)
    assert capped["outputs"]["small"] == "s" and capped["outputs"]["mid"] == "y" * 500
    assert capped["outputs"]["big"]["elided"] is True and capped["outputs"]["big"]["port"] == "big"
    assert len(ev.encode(capped).encode()) <= 1000
    assert payload["outputs"]["big"] == "x" * 5000  # the original is untouched


def test_cap_keeps_identity_when_nothing_else_fits():
    payload = {"run_id": "r", "node_id": "n", "node_type": "T", "message": "z" * 5000}
    capped = ev.cap_payload(payload, 200)
    assert capped["run_id"] == "r" and capped["node_id"] == "n" and "message" not in capped
    assert capped["elided"]["bytes"] > 5000


@pytest.mark.parametrize("cap", [0, -1])
def test_cap_disabled(cap):
    payload = {"run_id": "r", "message": "z" * 5000}
    assert ev.cap_payload(payload, cap) is payload


def test_metric_and_artifact_builders_match_the_engine_events():
    raw = {"event": "metric", "node_id": "n", "name": "loss", "value": float("nan"), "step": None}
    assert ev.metric("r", node_id="n", name="loss", value=float("nan"), step=None) == ev.from_engine("r", raw)
    raw = {"event": "artifact", "node_id": None, "kind": "plot", "path": "a.png", "meta": {"dpi": 72}}
    assert ev.artifact("r", node_id=None, kind="plot", path="a.png", meta={"dpi": 72}) == ev.from_engine("r", raw)
