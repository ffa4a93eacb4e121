"""How clients read a study that runs: GET studies/{id}?view=summary (what the CLI, Client,
StudyView and the Lab study view poll) against the full form, its ETag and If-None-Match 304, and
the refusal of an unknown view. A real jupyter-server, a real SQLite file, real children."""

from __future__ import annotations

import asyncio
import json

from test_studies import jp_server_config  # noqa: F401  (the server these tests run on)
from test_studies import call, post_study, probe, probe_spec, register_probe_node, spec, wait_study

SUMMARY_ATTEMPT = {"attempt", "repetition", "seed", "run_id", "status", "objective_value", "stop_reason",
                   "run_exists"}


def cut(full):
    """The summary form, made from the full form by the documented rule."""
    out = {k: v for k, v in full.items()}
    out["variants"] = []
    for v in full["variants"]:
        v = {k: x for k, x in v.items() if k != "attempts"}
        v["repetitions"] = [{**rep, "current": None if rep["current"] is None else
                             {k: rep["current"][k] for k in SUMMARY_ATTEMPT}} for rep in v["repetitions"]]
        out["variants"].append(v)
    return out


async def fetch(jp_fetch, study_id, headers=None, **params):
    response = await jp_fetch("codefy", "api", "studies", study_id, params=params, headers=headers or {},
                              raise_error=False)
    return response


async def test_the_summary_form_is_the_full_form_without_attempts(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    code, summary = await call(jp_fetch, "api", "studies", study["id"], view="summary")
    assert code == 200
    assert summary == cut(done)
    assert all("attempts" not in v for v in summary["variants"])
    currents = [rep["current"] for v in summary["variants"] for rep in v["repetitions"]]
    assert len(currents) == 6 and all(c["status"] == "succeeded" and c["run_exists"] for c in currents)
    code, full = await call(jp_fetch, "api", "studies", study["id"], view="full")
    assert code == 200 and full == done


async def test_the_summary_form_while_the_study_runs(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=0.3),
                                                        budget={"max_parallel_runs": 1}))
    assert code == 201, study
    seen = set()
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        code, summary = await call(jp_fetch, "api", "studies", study["id"], view="summary")
        assert code == 200
        for v in summary["variants"]:
            for rep in v["repetitions"]:
                if rep["current"]:
                    assert set(rep["current"]) == SUMMARY_ATTEMPT
                    seen.add(rep["current"]["status"])
        if summary["status"] not in ("queued", "running"):
            break
        assert asyncio.get_running_loop().time() < deadline, summary
        await asyncio.sleep(0.05)
    assert summary["status"] == "succeeded" and "running" in seen
    code, full = await call(jp_fetch, "api", "studies", study["id"])
    assert cut(full) == summary


async def test_etag_and_if_none_match_on_a_settled_study(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    await wait_study(jp_fetch, study["id"], {"succeeded"})
    tags = {}
    for view in ("full", "summary"):
        first = await fetch(jp_fetch, study["id"], view=view)
        assert first.code == 200 and first.headers["Etag"]
        tags[view] = first.headers["Etag"]
        again = await fetch(jp_fetch, study["id"], headers={"If-None-Match": tags[view]}, view=view)
        assert again.code == 304 and again.body == b""
        other = await fetch(jp_fetch, study["id"], headers={"If-None-Match": '"not-it"'}, view=view)
        assert other.code == 200 and json.loads(other.body) == json.loads(first.body)
        assert other.headers["Etag"] == tags[view]
    assert tags["full"] != tags["summary"]
    # An ETag of one view is not the other's.
    cross = await fetch(jp_fetch, study["id"], headers={"If-None-Match": tags["full"]}, view="summary")
    assert cross.code == 200


async def test_an_etag_from_an_earlier_revision_gets_the_new_body(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=0.2),
                                                        budget={"max_parallel_runs": 1}))
    assert code == 201, study
    first = await fetch(jp_fetch, study["id"], view="summary")
    assert first.code == 200
    before = json.loads(first.body)
    await wait_study(jp_fetch, study["id"], {"succeeded"})
    later = await fetch(jp_fetch, study["id"], headers={"If-None-Match": first.headers["Etag"]}, view="summary")
    assert later.code == 200 and later.headers["Etag"] != first.headers["Etag"]
    assert json.loads(later.body)["revision"] > before["revision"]


async def test_an_unknown_view_is_refused_and_changes_nothing(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    code, err = await call(jp_fetch, "api", "studies", study["id"], view="tiny")
    assert code == 400 and err["error"]["code"] == "invalid_view"
    assert err["error"]["params"] == {"field": "view", "allowed": ["full", "summary"]}
    code, after = await call(jp_fetch, "api", "studies", study["id"])
    assert code == 200 and after == done
    code, err = await call(jp_fetch, "api", "studies", "nope", view="summary")
    assert code == 404 and err["error"]["code"] == "study_not_found"


# -- the long-poll: ?revision=&wait= ---------------------------------------------------------------
async def test_a_follower_at_the_current_revision_is_answered_at_the_next_change(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=0.3),
                                                        budget={"max_parallel_runs": 1}))
    assert code == 201, study
    revision, seen = study["revision"], []
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        response = await fetch(jp_fetch, study["id"], view="summary", revision=revision, wait=30)
        assert response.code == 200
        doc = json.loads(response.body)
        if doc["status"] not in ("queued", "running"):
            break
        # Answered only once the study moved past the revision held (or the wait ran out, which
        # 30 s never does for a study whose children end every 0.3 s).
        assert doc["revision"] > revision, (revision, doc["revision"])
        seen.append(doc["revision"])
        revision = doc["revision"]
        assert asyncio.get_running_loop().time() < deadline
    assert doc["status"] == "succeeded" and seen == sorted(set(seen)) and seen
    code, full = await call(jp_fetch, "api", "studies", study["id"])
    assert cut(full) == doc


async def test_a_follower_behind_or_of_a_settled_study_is_answered_at_once(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    loop = asyncio.get_running_loop()
    for revision in (1, done["revision"]):  # behind; at the settled study's own revision
        t0 = loop.time()
        response = await fetch(jp_fetch, study["id"], revision=revision, wait=60)
        assert response.code == 200 and json.loads(response.body) == done
        assert loop.time() - t0 < 30  # not held for the wait: the study will not move by itself
    # The wait is not needed for If-None-Match: the held body is current, so a 304.
    first = await fetch(jp_fetch, study["id"], view="summary")
    again = await fetch(jp_fetch, study["id"], headers={"If-None-Match": first.headers["Etag"]}, view="summary",
                        revision=done["revision"], wait=5)
    assert again.code == 304


async def test_a_long_poll_with_nothing_moving_answers_when_its_wait_runs_out(jp_fetch):
    register_probe_node()
    # One child that runs for 20 s: after its start, nothing changes in the study for a while.
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=20), repetitions=1,
                                                        budget={"max_parallel_runs": 1}))
    assert code == 201, study
    deadline = asyncio.get_running_loop().time() + 90
    while True:
        code, doc = await call(jp_fetch, "api", "studies", study["id"], view="summary")
        current = doc["variants"][0]["repetitions"][0]["current"]
        if current and current["status"] == "running":
            break
        assert asyncio.get_running_loop().time() < deadline, doc
        await asyncio.sleep(0.05)
    response = await fetch(jp_fetch, study["id"], view="summary", revision=doc["revision"], wait=0.5,
                           headers={"If-None-Match": "\"held\""})
    assert response.code == 200
    still = json.loads(response.body)
    assert still["revision"] == doc["revision"] and still["status"] == "running"
    code, _ = await call(jp_fetch, "api", "studies", study["id"], "cancel", method="POST", body={})
    assert code == 200


async def test_bad_revision_and_wait_are_refused_naming_the_field_and_change_nothing(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    for params, field, code_name in (({"revision": "-1", "wait": "1"}, "revision", "invalid_revision"),
                                     ({"revision": "x", "wait": "1"}, "revision", "invalid_revision"),
                                     ({"revision": "1", "wait": "61"}, "wait", "invalid_wait"),
                                     ({"revision": "1", "wait": "nan"}, "wait", "invalid_wait"),
                                     ({"revision": "1", "wait": "soon"}, "wait", "invalid_wait")):
        code, err = await call(jp_fetch, "api", "studies", study["id"], **params)
        assert code == 400, (params, err)
        assert err["error"]["code"] == code_name and err["error"]["params"]["field"] == field, err
    code, err = await call(jp_fetch, "api", "studies", "nope", revision=1, wait=5)
    assert code == 404 and err["error"]["code"] == "study_not_found"
    code, after = await call(jp_fetch, "api", "studies", study["id"])
    assert code == 200 and after == done


async def test_the_csv_form_refuses_the_arguments_the_json_form_refuses(jp_fetch):
    """Issue 27: format=csv ignored view, wait and revision; it checks them as the JSON form does."""
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    await wait_study(jp_fetch, study["id"], {"succeeded"})
    for params, field, code_name in (({"view": "tiny"}, "view", "invalid_view"),
                                     ({"revision": "-1"}, "revision", "invalid_revision"),
                                     ({"revision": "x"}, "revision", "invalid_revision"),
                                     ({"wait": "61"}, "wait", "invalid_wait"),
                                     ({"wait": "soon"}, "wait", "invalid_wait")):
        response = await fetch(jp_fetch, study["id"], format="csv", **params)
        assert response.code == 400, (params, response.body)
        err = json.loads(response.body)["error"]
        assert err["code"] == code_name and err["params"]["field"] == field, err
    table = await fetch(jp_fetch, study["id"], format="csv", view="summary", revision="0", wait="0")
    assert table.code == 200 and table.headers["Content-Type"].startswith("text/csv")
    assert table.body.decode().splitlines()[0].count(",") >= 3
