"""Studies on a real jupyter-server with a real SQLite file: submit, schedule, rank, cancel, resume,
idempotency, budgets, the audit log, retention, and every refusal the seed names."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def mean_graph(values, nap=0.0):
    """Logs `mean` from node m (the mean of `values`); a Sleep of `nap` seconds first."""
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "vals", "type": "List", "params": {"values": values}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


OBJECTIVE = {"node_id": "m", "metric": "mean", "direction": "minimize"}


def spec(**extra):
    body = {"name": "tiny", "objective": OBJECTIVE, "base_graph": mean_graph([2, 4]),
            "variants": [{"label": "base", "ops": []},
                         {"label": "low", "graph": mean_graph([1, 2])},
                         {"label": "high", "graph": mean_graph([5, 7])}],
            "repetitions": 2, "seed": 7}
    body.update(extra)
    return body


async def call(jp_fetch, *path, method="GET", body=None, headers=None, **params):
    kwargs = {"method": method, "raise_error": False}
    if headers:
        kwargs["headers"] = headers
    if body is not None:
        kwargs["body"] = json.dumps(body)
    elif method == "POST":
        kwargs["body"] = b""
    if params:
        kwargs["params"] = params
    response = await jp_fetch("codefy", *path, **kwargs)
    ctype = response.headers.get("Content-Type", "")
    return response.code, (json.loads(response.body) if response.body and ctype.startswith("application/json")
                           else response.body)


async def post_study(jp_fetch, body, headers=None):
    return await call(jp_fetch, "api", "studies", method="POST", body=body, headers=headers)


async def wait_study(jp_fetch, study_id, statuses, timeout=60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, study = await call(jp_fetch, "api", "studies", study_id)
        assert code == 200, study
        if study["status"] in statuses:
            return study
        assert asyncio.get_running_loop().time() < deadline, f"study stayed {study['status']}"
        await asyncio.sleep(0.05)


async def all_events(jp_fetch, study_id):
    code, page = await call(jp_fetch, "api", "studies", study_id, "events", cursor=0)
    assert code == 200
    return page["events"]


async def test_a_study_runs_every_repetition_once_and_ranks_its_variants(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    assert study["created"] is True and study["seed"] == 7 and study["revision"] >= 1
    done = await wait_study(jp_fetch, study["id"], {"succeeded", "failed", "halted", "interrupted"})
    assert done["status"] == "succeeded", done
    assert [r["label"] for r in done["rankings"]] == ["low", "base", "high"], json.dumps([(v["label"], v["aggregate"], v["ineligible_reasons"], v["rank"]) for v in done["variants"]])
    assert [r["rank"] for r in done["rankings"]] == [1, 2, 3]
    by_label = {v["label"]: v for v in done["variants"]}
    assert by_label["low"]["aggregate"] == {"count": 2, "mean": 1.5, "std": 0.0, "values": [1.5, 1.5]}
    assert all(v["eligible"] and v["ineligible_reasons"] == [] for v in done["variants"])
    assert [rep["seed"] for rep in by_label["base"]["repetitions"]] == [7, 8]
    assert by_label["low"]["comparison"] is None and by_label["high"]["comparison"]["against"] == "low"
    assert done["counts"]["succeeded"] == 6
    code, runs = await call(jp_fetch, "api", "runs", limit=50)
    children = [r for r in runs["runs"] if r.get("study_id") == study["id"]]
    assert len(children) == 6 and len({r["study_attempt_id"] for r in children}) == 6
    assert {r["name"] for r in children} == {f"tiny / {label} / r{r}" for label in ("base", "low", "high")
                                             for r in (0, 1)}
    # repetition-major: every variant's r0 before any r1
    events = await all_events(jp_fetch, study["id"])
    assert [e["cursor"] for e in events] == list(range(1, len(events) + 1))
    submits = [(e["payload"]["repetition"], e["payload"]["variant"]) for e in events
               if e["type"] == "attempt_submitting"]
    assert submits == sorted(submits)
    assert events[0]["type"] == "study_created" and events[-1]["type"] == "study_finished"
    assert [r["label"] for r in events[-1]["payload"]["ranking"]] == ["low", "base", "high"]
    revisions = [e["payload"]["revision"] for e in events]
    assert revisions == sorted(revisions) and revisions[-1] == done["revision"]
