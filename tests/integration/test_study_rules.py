"""Rules of the seed's Studies section that the other study tests leave to unit tests, here on a
real jupyter-server with a real SQLite file: a seed the server picks (and the wrap of seed + r),
the first events, competition ranks with ties, a variant with no objective value, an op on what
cannot be set, a child whose submit is refused (study_failed, then a resume), and a halted study's
ranking so far."""

from __future__ import annotations

import pytest

from test_studies import jp_server_config  # noqa: F401  (the server these tests run on)
from test_studies import (all_events, call, post_study, probe, probe_spec, register_probe_node, runs_of,
                          wait_study)

SEED_MAX = 2**32 - 1


async def test_a_study_without_a_seed_records_the_one_the_server_picked(jp_fetch):
    register_probe_node()
    body = probe_spec()
    del body["seed"]
    code, study = await post_study(jp_fetch, body)
    assert code == 201, study
    seed = study["seed"]
    assert isinstance(seed, int) and 0 <= seed <= SEED_MAX
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    for v in done["variants"]:
        assert [rep["seed"] for rep in v["repetitions"]] == [(seed + r) % 2**32 for r in range(2)]
    children = await runs_of(jp_fetch, study["id"])
    assert sorted(c["seed"] for c in children) == sorted([(seed + r) % 2**32 for r in range(2)] * 2)
    types = [e["type"] for e in await all_events(jp_fetch, study["id"])]
    assert types[:3] == ["study_created", "study_started", "attempt_submitting"]
    created = (await all_events(jp_fetch, study["id"]))[0]["payload"]
    assert created["seed"] == seed and created["variants"] == ["one", "three"] and created["repetitions"] == 2


async def test_repetition_seeds_wrap_past_2_32(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(seed=SEED_MAX, repetitions=3))
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    for v in done["variants"]:
        assert [rep["seed"] for rep in v["repetitions"]] == [SEED_MAX, 0, 1]
        assert [rep["current"]["seed"] for rep in v["repetitions"]] == [SEED_MAX, 0, 1]


async def test_equal_means_share_a_rank_and_the_next_rank_skips(jp_fetch):
    register_probe_node()
    variants = [{"label": "worse", "ops": [{"node_id": "p", "param": "value", "value": 5}]},
                {"label": "a", "ops": []},
                {"label": "b", "ops": [{"node_id": "p", "param": "value", "value": 1}]}]
    code, study = await post_study(jp_fetch, probe_spec(variants=variants, repetitions=2))
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    by_label = {v["label"]: v for v in done["variants"]}
    assert [(by_label[x]["rank"], by_label[x]["tie"]) for x in ("a", "b", "worse")] == [(1, True), (1, True),
                                                                                        (3, False)]
    assert by_label["a"]["tied_with"] == ["b"] and by_label["b"]["tied_with"] == ["a"]
    assert by_label["worse"]["tied_with"] == []
    assert [(r["label"], r["rank"]) for r in done["rankings"]] == [("a", 1), ("b", 1), ("worse", 3)]
    # The order variants were listed in does not decide: the same study listed the other way round.
    code, again = await post_study(jp_fetch, probe_spec(variants=variants[::-1], repetitions=2))
    flipped = await wait_study(jp_fetch, again["id"], {"succeeded"})
    assert {v["label"]: (v["rank"], v["tie"]) for v in flipped["variants"]} == {
        x: (by_label[x]["rank"], by_label[x]["tie"]) for x in by_label}


async def test_a_variant_whose_node_never_logged_the_objective_is_not_eligible(jp_fetch):
    register_probe_node()
    silent = {"nodes": [{"id": "p", "type": "Float", "params": {"value": 1.0}}], "edges": []}
    code, study = await post_study(jp_fetch, probe_spec(variants=[{"label": "one", "ops": []},
                                                                  {"label": "silent", "graph": silent}]))
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    quiet = {v["label"]: v for v in done["variants"]}["silent"]
    assert not quiet["eligible"] and quiet["rank"] is None
    assert quiet["ineligible_reasons"] == [{"repetition": r, "reason": "no_objective_value", "status": "succeeded"}
                                           for r in range(2)]
    assert quiet["aggregate"] == {"count": 0, "mean": None, "std": None, "values": [None, None]}
    assert [r["label"] for r in done["rankings"]] == ["one"] and done["best"] == "one"


@pytest.mark.parametrize("graph, op, code_", [
    ({"nodes": [{"id": "p", "type": "StudyProbe"}, {"id": "s", "type": "Subgraph"}], "edges": []},
     {"node_id": "s", "param": "graph", "value": "x"}, "param_node_instance"),
    ({"nodes": [{"id": "p", "type": "StudyProbe"}, {"id": "q", "type": "Preset"}], "edges": []},
     {"node_id": "q", "param": "preset", "value": "x"}, "param_node_instance"),
    ({"nodes": [{"id": "p", "type": "StudyProbe"}, {"id": "p", "type": "StudyProbe"}], "edges": []},
     {"node_id": "p", "param": "value", "value": 2}, "param_node_ambiguous"),
    (probe(), {"node_id": "nope", "param": "value", "value": 2}, "param_node_unknown"),
    (probe(), {"node_id": "p", "param": "nope", "value": 2}, "param_unknown"),
])
async def test_an_op_on_what_cannot_be_set_is_a_400_naming_it_and_writes_nothing(jp_fetch, graph, op, code_):
    register_probe_node()
    code, err = await post_study(jp_fetch, probe_spec(base_graph=graph, variants=[{"label": "a", "ops": []},
                                                                                  {"label": "b", "ops": [op]}]))
    assert code == 400 and err["error"]["code"] == code_, err
    assert err["error"]["params"]["field"] == "variants[1].ops[0]"
    code, listing = await call(jp_fetch, "api", "studies")
    assert listing["studies"] == []
    code, page = await call(jp_fetch, "api", "runs")
    assert page["runs"] == []


async def test_a_refused_child_submit_fails_the_study_and_a_resume_runs_the_repetition(
        jp_fetch, jp_serverapp, monkeypatch):
    from codefy_jupyter.core.errors import BadRequest

    register_probe_node()
    await call(jp_fetch, "api", "studies")  # the run queue is up once it has answered
    runs = jp_serverapp.extension_manager.extension_points["codefy"].app.experiments.runs
    real = runs.submit
    calls = []

    async def refuses_the_second(body, **kwargs):
        calls.append(kwargs["links"]["study_attempt_id"])
        if len(calls) == 2:
            raise BadRequest("the queue refused this child", code="test_refusal")
        return await real(body, **kwargs)

    monkeypatch.setattr(runs, "submit", refuses_the_second)
    code, study = await post_study(jp_fetch, probe_spec(repetitions=1))
    assert code == 201, study
    failed = await wait_study(jp_fetch, study["id"], {"failed"})
    monkeypatch.undo()
    assert failed["error"]["code"] == "test_refusal"
    lost = failed["variants"][1]["repetitions"][0]["current"]
    assert lost["status"] == "lost" and lost["error"]["code"] == "test_refusal" and lost["run_exists"] is False
    types = [e["type"] for e in await all_events(jp_fetch, study["id"])]
    assert types[-2:] == ["attempt_lost", "study_failed"]
    assert len(await runs_of(jp_fetch, study["id"])) == 1  # the refused child never existed
    code, resumed = await call(jp_fetch, "api", "studies", study["id"], "resume", method="POST",
                               body={"expected_revision": failed["revision"]})
    assert code == 200 and resumed["error"] is None
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    attempts = done["variants"][1]["attempts"]
    assert [(a["attempt"], a["status"]) for a in attempts] == [(1, "lost"), (2, "succeeded")]
    assert attempts[0]["seed"] == attempts[1]["seed"] == done["seed"]
    types = [e["type"] for e in await all_events(jp_fetch, study["id"])]
    assert "study_resumed" in types and "attempt_added" in types and types[-1] == "study_finished"


async def test_a_halted_study_reports_its_ranking_so_far(jp_fetch):
    register_probe_node()
    variants = [{"label": "one", "ops": []}, {"label": "three", "ops": [{"node_id": "p", "param": "value", "value": 3}]},
                {"label": "two", "ops": [{"node_id": "p", "param": "value", "value": 2}]}]
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=0.2), variants=variants,
                                                        repetitions=1, budget={"max_active_seconds": 0.5}))
    assert code == 201, study
    halted = await wait_study(jp_fetch, study["id"], {"halted"})
    event = (await all_events(jp_fetch, study["id"]))[-1]
    assert event["type"] == "study_halted" and event["payload"]["halt"] == halted["halt"]
    assert event["payload"]["revision"] == halted["revision"]
    assert event["payload"]["ranking"] == halted["rankings"]
    ranked = [r["label"] for r in halted["rankings"]]
    assert ranked[0] == "one" and "three" in ranked and halted["counts"]["succeeded"] == len(ranked)


async def test_a_resume_after_a_sibling_ended_in_an_interrupted_study_still_records_the_retried_child(jp_fetch):
    # Found by benchmarks/chaos.py: the sibling's end loaded the interrupted study's attempts into
    # memory, the resume's new attempt joined them without its stored fields (stop_reason...), and
    # the retried child's end then failed on the missing key: the study stayed running for ever.
    import asyncio

    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=2),
                                                        budget={"max_parallel_runs": 2}))
    assert code == 201, study
    sid = study["id"]
    deadline = asyncio.get_running_loop().time() + 60
    while True:  # seeded children here run one at a time: one runs, the next waits
        children = await runs_of(jp_fetch, sid)
        if sorted(r["status"] for r in children) == ["queued", "running"]:
            break
        assert asyncio.get_running_loop().time() < deadline, children
        await asyncio.sleep(0.05)
    running = next(r for r in children if r["status"] == "running")
    code, _ = await call(jp_fetch, "api", "runs", running["id"], "cancel", method="POST")
    assert code == 200
    # The waiting sibling runs on and ends in the interrupted study.
    settled = await wait_study(jp_fetch, sid, {"interrupted"})
    while settled["counts"]["queued"] + settled["counts"]["running"]:
        assert asyncio.get_running_loop().time() < deadline, settled["counts"]
        await asyncio.sleep(0.05)
        settled = await wait_study(jp_fetch, sid, {"interrupted"})
    assert settled["counts"]["succeeded"] == 1 and settled["counts"]["cancelled"] == 1, settled["counts"]
    code, _ = await call(jp_fetch, "api", "studies", sid, "resume", method="POST", body={})
    assert code == 200
    done = await wait_study(jp_fetch, sid, {"succeeded", "failed", "interrupted"}, timeout=90)
    assert done["status"] == "succeeded", done["counts"]
    attempts = [[(a["repetition"], a["attempt"], a["status"]) for a in v["attempts"]] for v in done["variants"]]
    retried = [a for v in attempts for a in v if a[1] > 1]
    assert retried == [(0, 2, "succeeded")] and (0, 1, "cancelled") in attempts[0], attempts
