"""One rule for ids on every REST reader (issue 28): a unique prefix of 8 or more characters stands
for its run, sweep or study; one that starts several ids is refused with 409 ambiguous_id listing
them; a shorter one is an unknown id (404). And an unknown node type's 400 suggests close types."""

from __future__ import annotations

import asyncio

import pytest

from test_server_runs import SMALL, call, sleepy, wait_status
from test_studies import spec as study_spec


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def codefy_app(jp_serverapp):
    return jp_serverapp.extension_manager.extension_points["codefy"].app


async def test_a_twelve_character_prefix_reads_and_acts_on_its_run(jp_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "name": "p"})
    assert code == 201, run
    full, short = run["id"], run["id"][:12]
    await wait_status(jp_fetch, full, {"succeeded"})
    code, got = await call(jp_fetch, "api", "runs", short)
    assert code == 200 and got["id"] == full and got["status"] == "succeeded"
    code, page = await call(jp_fetch, "api", "runs", short[:8], "events", cursor=0)
    assert code == 200 and page["events"] and page["events"][0]["type"] == "execution_start"
    code, metrics = await call(jp_fetch, "api", "runs", short, "metrics")
    assert code == 200 and metrics["run_id"] == full
    code, text = await call(jp_fetch, "api", "runs", short, "metrics", format="csv")
    assert code == 200 and text.startswith(b"node_id,name,step,value")
    code, arts = await call(jp_fetch, "api", "runs", short, "artifacts")
    assert code == 200 and arts["run_id"] == full
    code, err = await call(jp_fetch, "api", "runs", short, "cancel", method="POST")
    assert code == 409 and err["error"]["code"] == "run_finished", err
    # Under 8 characters a prefix is not looked up: an unknown id, as before.
    code, err = await call(jp_fetch, "api", "runs", full[:7])
    assert code == 404 and err["error"]["code"] == "run_not_found", err
    code, _ = await call(jp_fetch, "api", "runs", short, method="DELETE")
    assert code == 204
    code, err = await call(jp_fetch, "api", "runs", full)
    assert code == 404 and err["error"]["code"] == "run_not_found"


async def test_a_prefix_cancels_a_running_run(jp_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(30)})
    assert code == 201, run
    await wait_status(jp_fetch, run["id"], {"running"})
    code, cancelled = await call(jp_fetch, "api", "runs", run["id"][:10], "cancel", method="POST")
    assert code == 200 and cancelled["id"] == run["id"], cancelled
    await wait_status(jp_fetch, run["id"], {"cancelled"})


async def test_two_runs_sharing_a_prefix_answer_409_with_both_candidates(jp_fetch, jp_serverapp):
    service = await codefy_app(jp_serverapp).ready()
    ids = ["5a5a5a5a0001aaaa", "5a5a5a5a0002bbbb"]
    for run_id in ids:  # the server's own submitters choose ids (a study stamps its children)
        await service.submit({"graph": SMALL}, run_id=run_id)
    for run_id in ids:
        await wait_status(jp_fetch, run_id, {"succeeded"})
    for path in (("api", "runs", "5a5a5a5a"), ("api", "runs", "5a5a5a5a000", "events"),
                 ("api", "runs", "5a5a5a5a0", "metrics")):
        code, err = await call(jp_fetch, *path)
        assert code == 409, (path, err)
        assert err["error"]["code"] == "ambiguous_id"
        params = err["error"]["params"]
        assert params["candidates"] == ids and params["kind"] == "run" and params["field"] == "run_id"
        assert params["more"] is False and ids[0] in err["error"]["message"] and ids[1] in err["error"]["message"]
    code, err = await call(jp_fetch, "api", "runs", "5a5a5a5a", method="DELETE")
    assert code == 409 and err["error"]["code"] == "ambiguous_id"
    # One more character tells them apart.
    code, got = await call(jp_fetch, "api", "runs", "5a5a5a5a0002")
    assert code == 200 and got["id"] == ids[1]
    # A whole id is itself even where it starts another.
    await service.submit({"graph": SMALL}, run_id="5a5a5a5a0001")
    await wait_status(jp_fetch, "5a5a5a5a0001", {"succeeded"})
    code, got = await call(jp_fetch, "api", "runs", "5a5a5a5a0001")
    assert code == 200 and got["id"] == "5a5a5a5a0001"


async def test_more_candidates_than_shown_are_counted_not_listed(jp_fetch, jp_serverapp):
    service = await codefy_app(jp_serverapp).ready()
    ids = [f"7e7e7e7e{i:08d}" for i in range(12)]
    for run_id in ids:
        await service.submit({"graph": SMALL}, run_id=run_id)
    code, err = await call(jp_fetch, "api", "runs", "7e7e7e7e")
    assert code == 409, err
    params = err["error"]["params"]
    assert params["candidates"] == ids[:10] and params["more"] is True
    for run_id in ids:
        await wait_status(jp_fetch, run_id, {"succeeded"})


async def test_a_sweep_and_a_study_are_read_by_a_prefix(jp_fetch):
    from test_studies import mean_graph

    body = {"base_graph": mean_graph([2, 4]), "name": "ids",
            "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": [0.0, 0.01]}]},
            "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"}}
    code, sweep = await call(jp_fetch, "api", "sweeps", method="POST", body=body)
    assert code == 201, sweep
    code, got = await call(jp_fetch, "api", "sweeps", sweep["sweep_id"][:12])
    assert code == 200 and got["sweep_id"] == sweep["sweep_id"], got
    code, text = await call(jp_fetch, "api", "sweeps", sweep["sweep_id"][:8], format="csv")
    assert code == 200 and text.startswith(b"rank,index,run_id")
    code, err = await call(jp_fetch, "api", "sweeps", sweep["sweep_id"][:7])
    assert code == 404 and err["error"]["code"] == "sweep_not_found"

    code, study = await call(jp_fetch, "api", "studies", method="POST", body=study_spec(repetitions=1))
    assert code == 201, study
    code, got = await call(jp_fetch, "api", "studies", study["id"][:12])
    assert code == 200 and got["id"] == study["id"], got
    code, page = await call(jp_fetch, "api", "studies", study["id"][:12], "events", cursor=0)
    assert code == 200 and page["events"], page
    code, err = await call(jp_fetch, "api", "studies", study["id"][:6])
    assert code == 404 and err["error"]["code"] == "study_not_found"
    deadline = asyncio.get_running_loop().time() + 120
    while True:  # leave nothing running behind the test
        code, got = await call(jp_fetch, "api", "studies", study["id"][:12])
        _, sw = await call(jp_fetch, "api", "sweeps", sweep["sweep_id"][:12])
        if got["status"] in ("succeeded", "failed", "halted", "interrupted") and sw["state"] in ("finished", "failed") \
                and not sw["counts"].get("queued") and not sw["counts"].get("running"):
            break
        assert asyncio.get_running_loop().time() < deadline, (got["status"], sw["state"])
        await asyncio.sleep(0.1)


async def test_an_unknown_node_type_is_refused_with_close_matches(jp_fetch):
    graph = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}}, {"id": "s", "type": "Scael"},
                       {"id": "z", "type": "Zzyzx"}], "edges": []}
    code, err = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    assert code == 400 and err["error"]["code"] == "invalid_graph", err
    problems = {p["node_id"]: p for p in err["error"]["params"]["problems"]}
    assert problems["s"]["code"] == "unknown_type"
    assert problems["s"]["params"] == {"type": "Scael", "suggestions": ["Scale"]}
    assert "unknown node type 'Scael'; did you mean 'Scale'?" in problems["s"]["message"]
    assert "did you mean 'Scale'?" in err["error"]["message"]
    assert problems["z"]["params"] == {"type": "Zzyzx", "suggestions": []}
    assert "did you mean" not in problems["z"]["message"]
