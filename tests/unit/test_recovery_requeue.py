"""What recovery decides for a queued run a previous process left (core/runs/recovery.py): requeued
where the queue outlives the process (PostgreSQL), retired on SQLite (the seed's restart rule), and
the submit body its row gives back, checked again as the first submit was."""

from __future__ import annotations

from types import SimpleNamespace

from codefy_jupyter.core.runs import recovery
from codefy_jupyter.core.runs.requests import options_doc, parse_submit, secret_fields
from codefy_jupyter.engine import NodeRegistry, param

GRAPH = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}}], "edges": []}


def row(**extra):
    return {"id": "r1", "status": "queued", "name": "first", "graph": GRAPH, "seed": 7, "deterministic": True,
            "session": None, "options": {"lane": "queued", "record_outputs": False, "requested_device": None},
            **extra}


def test_a_queued_run_is_requeued_only_where_the_queue_outlives_the_process():
    assert isinstance(recovery.recover(row(), None, None, keep_queue=True), recovery.Requeue)
    retired = recovery.recover(row(), None, None)
    assert isinstance(retired, recovery.Retire) and retired.closing.payload["status"] == "interrupted"
    # An executing in-process run dies with its process either way; a closed log is repaired.
    running = recovery.recover(row(status="running"), None, None, keep_queue=True)
    assert isinstance(running, recovery.Retire)
    closed = SimpleNamespace(type="execution_complete", payload={"status": "succeeded"})
    assert recovery.recover(row(), closed, None, keep_queue=True) == recovery.Repair("succeeded")


def test_the_body_a_row_gives_back_parses_to_the_submit_it_recorded():
    body = {"graph": GRAPH, "name": "n", "options": {
        "seed": 7, "deterministic": True, "record_outputs": True, "provenance": True, "device": "cpu",
        "lane": "interactive", "session": "s1", "cpu_threads": 3,
        "target": {"worker": "gpu1", "devices": ["cuda:0", "cuda:1"], "memory_gib": 4.0, "memory_source": "estimate",
                   "wait": False}}}
    req = parse_submit(body)
    resolved = SimpleNamespace(requested="cpu")
    stored = row(name="n", seed=7, deterministic=True, session="s1", options=options_doc(req, resolved))
    again = parse_submit(recovery.submit_body(stored))
    assert again == req


def test_a_row_without_options_still_gives_a_body_that_parses():
    again = parse_submit(recovery.submit_body({"id": "r", "status": "queued", "graph": GRAPH}))
    assert again.graph == GRAPH and again.options.seed is None and again.options.seed_given


def test_a_run_that_could_not_be_queued_again_ends_interrupted_saying_why():
    retired = recovery.not_requeued(row(), "worker gpu1 was removed")
    assert retired.closing.payload["status"] == "interrupted"
    assert "worker gpu1 was removed" in retired.closing.payload["reason"]["message"]


def test_secret_fields_names_each_secret_value_a_graph_sets():
    registry = NodeRegistry()

    @registry.node("Api", outputs={"y": "float"}, params={"token": param.secret(), "n": param.int(1)})
    def api(ctx, token, n):
        return {"y": 1.0}

    graph = {"nodes": [{"id": "x", "type": "Api", "params": {"token": "hunter2", "n": 2}},
                       {"id": "y", "type": "Api", "params": {"n": 3}}], "edges": []}
    assert secret_fields(graph, registry) == ["x.token"]
    assert secret_fields(GRAPH, registry) == []
