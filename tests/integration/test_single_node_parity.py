"""Single-node parity (seed: execution architecture, lanes): a run with no target never goes through
the worker code path, and its event sequence stays what it was. A real control plane runs fixed
graphs; the shape of each log (event types in order, each payload's keys, node ids and statuses;
no times, ids or digests) is compared with the snapshot in tests/shared/single_node_parity.json.

A change to the default path shows up here as a diff. When the change is meant, write the snapshot
again and commit it with the change: `CODEFY_UPDATE_PARITY=1 pytest tests/integration/test_single_node_parity.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_server_runs import all_events, call, edge, wait_status

SNAPSHOT = Path(__file__).resolve().parents[1] / "shared" / "single_node_parity.json"

GRAPHS: dict[str, dict[str, Any]] = {
    "succeeds": {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                           {"id": "s", "type": "Scale", "params": {"factor": 3}},
                           {"id": "l", "type": "List", "params": {"values": [1, 2, 3]}},
                           {"id": "m", "type": "Mean"}],
                 "edges": [edge("k", "value", "s", "x"), edge("l", "values", "m", "values")]},
    "fails": {"nodes": [{"id": "a", "type": "Float", "params": {"value": 1}}, {"id": "zero", "type": "Float"},
                        {"id": "div", "type": "Divide"}, {"id": "after", "type": "Scale"}],
              "edges": [edge("a", "value", "div", "a"), edge("zero", "value", "div", "b"),
                        edge("div", "result", "after", "x")]},
}


@pytest.fixture
def jp_server_config(tmp_path):
    # System metrics are sampled on a clock, so where their points fall in a log depends on the
    # machine's speed: off here (their path has its own tests, test_system_metrics_e2e.py).
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "system_metrics_interval_s": 0}}


def shape(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What must not drift: the order of event types, each payload's keys, which node and status."""
    out = []
    for e in events:
        payload = e["payload"]
        item: dict[str, Any] = {"type": e["type"], "keys": sorted(payload)}
        for key in ("node_id", "node_type", "status", "name", "code"):
            if isinstance(payload.get(key), str):
                item[key] = payload[key]
        if isinstance(payload.get("error"), dict):
            item["error_keys"] = sorted(payload["error"])
        out.append(item)
    return out


async def test_a_run_with_no_target_logs_the_events_of_the_snapshot(jp_fetch):
    got = {}
    for name, graph in GRAPHS.items():
        # Seeded: one node at a time, so the order of the log is fixed.
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": {"seed": 1}})
        assert code == 201, run
        done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"})
        assert done["worker_id"] is None and done["queue_key"] == "cpu"  # never the worker path
        got[name] = shape(await all_events(jp_fetch, run["id"]))
    if os.environ.get("CODEFY_UPDATE_PARITY") == "1":
        SNAPSHOT.write_text("{\n" + ",\n".join(  # one event a line, so a diff shows what changed
            f" {json.dumps(name)}: [\n" + ",\n".join("  " + json.dumps(e) for e in events) + "\n ]"
            for name, events in got.items()) + "\n}\n")
    expected = json.loads(SNAPSHOT.read_text())
    for name in GRAPHS:
        assert got[name] == expected[name], f"the {name!r} run's log changed shape; see this file's docstring"
