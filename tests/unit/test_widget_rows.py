"""The pure rules behind the Runs table, the Workers table and the Queue on… dialog."""

from __future__ import annotations

import re

import pytest

from codefy_jupyter.wire.run_options import SEED_MAX
from codefy_jupyter.kernel.widgets import queue_form as qf
from codefy_jupyter.kernel.widgets import runs_rows as rr
from codefy_jupyter.kernel.widgets import workers_rows as wr


def run(**fields):
    base = {"id": "3f1c9ab2c04e4d5f8b1a7e6d2c930f45", "name": "job", "status": "succeeded", "device": "cpu",
            "devices": ["cpu"], "queue_key": "cpu", "options": {"lane": "queued"}, "worker_id": None,
            "submitted_at": 1000.0, "started_at": 1000.0, "finished_at": 1012.5}
    base.update(fields)
    return base


# -- runs table -------------------------------------------------------------------------------


def test_filter_chips_map_to_statuses_and_refuse_unknown_ones():
    assert [k for k, _ in rr.FILTER_LABELS] == ["all", "running", "queued", "succeeded", "failed", "cancelled",
                                                "interrupted"]
    assert rr.statuses_for("all") is None
    assert rr.statuses_for("running") == ["running", "disconnected"]
    with pytest.raises(rr.ActionError) as info:
        rr.statuses_for("done")
    assert info.value.field == "filter" and "'done'" in str(info.value)


@pytest.mark.parametrize("status, actions", [
    ("queued", ["stop", "watch", "csv"]), ("running", ["stop", "watch", "csv"]),
    ("disconnected", ["stop", "watch", "csv"]), ("succeeded", ["csv", "delete"]),
    ("failed", ["csv", "delete"]), ("cancelled", ["csv", "delete"]), ("interrupted", ["csv", "delete"]),
])
def test_actions_per_status(status, actions):
    assert rr.allowed_actions(status) == actions


def test_action_messages_are_checked_against_the_rows():
    rows = {"a": "running", "b": "succeeded"}
    assert rr.check_action({"action": "stop", "run_id": "a"}, rows) == ("stop", "a")
    assert rr.check_action({"action": "delete", "run_id": "b"}, rows) == ("delete", "b")
    assert rr.check_action({"action": "refresh"}, rows) == ("refresh", None)
    assert rr.check_action({"action": "filter", "filter": "failed"}, rows) == ("filter", "failed")
    # A run the table has not listed yet is left to the server to judge.
    assert rr.check_action({"action": "stop", "run_id": "zzz"}, rows) == ("stop", "zzz")
    refusals = [
        ({"action": "delete", "run_id": "a"}, "action", "Delete is for finished runs only; run a is running"),
        ({"action": "stop", "run_id": "b"}, "action", "Stop is for queued or running runs only"),
        ({"action": "explode", "run_id": "a"}, "action", "unknown action 'explode'"),
        ({"action": "stop"}, "run_id", "stop needs a run_id"),
        ({"action": "filter", "filter": 3}, "filter", "unknown filter"),
        (["stop"], "action", "must be an object"),
    ]
    for content, field, message in refusals:
        with pytest.raises(rr.ActionError) as info:
            rr.check_action(content, rows)
        assert info.value.field == field and message in str(info.value)


def test_loss_format_switches_to_scientific_below_a_thousandth():
    assert rr.format_loss(0.1235) == "0.1235"
    assert rr.format_loss(0.00042) == "4.20e-4"
    assert rr.format_loss(0.0) == "0"
    assert rr.format_loss(None) == "-"


def test_worker_devices_queue_and_budget_columns():
    assert rr.worker_label(run()) == "This server"
    assert rr.worker_label(run(options={"target": {"worker": "local", "devices": ["cpu"]}})) == "This server"
    assert rr.worker_label(run(options={"target": {"worker": "any"}}, worker_id=None)) == "Any available"
    assert rr.worker_label(run(options={"target": {"worker": "any"}}, worker_id="gpu-box")) == "gpu-box"
    assert rr.worker_label(run(options={"target": {"worker": "gpu-box"}})) == "gpu-box"
    assert rr.devices_label(run(devices=["cuda:0", "cuda:1"])) == "cuda:0, cuda:1"
    assert rr.devices_label(run(devices=None, device="mps:0")) == "mps:0"
    assert rr.queue_label(run(status="queued", queue_position=3, queue_key="cuda:0")) == ("Queue #3", "cuda:0")
    assert rr.queue_label(run(status="queued", queue_position=1, queue_key="any/cuda")) == ("Any queue #1", "any/cuda")
    assert rr.queue_label(run(status="running")) == ("", "")
    assert rr.budget_label(run()) == "-"
    assert rr.budget_label(run(options={"target": {"memory_gib": 12}})) == "12 GiB"
    assert rr.budget_label(run(options={"target": {"memory_gib": 7.5, "memory_source": "estimate"}})) == "7.5 GiB est."
    raised = {"memory_gib": 2.5, "memory_source": "estimate", "estimate_raised_from": 1.0}
    assert rr.budget_label(run(options={"target": raised})) == "2.5 GiB est. (raised from 1 GiB)"


def test_a_table_row():
    row = rr.table_row(run(name="x" * 80, final_loss={"name": "val_loss", "value": 0.25}), now=2000.0)
    assert row["name"] == "x" * 63 + "…" and len(row["name"]) == rr.NAME_MAX
    assert (row["status"], row["worker"], row["devices"], row["duration"], row["final_loss"]) == (
        "succeeded", "This server", "cpu", "12.5 s", "0.25")
    assert row["final_loss_title"] == "val_loss"
    assert row["actions"] == ["csv", "delete"] and row["queue"] == "" and row["reason"] == ""
    waiting = rr.table_row(run(status="queued", name=None, started_at=None, finished_at=None, queue_position=2,
                               queue_reason={"code": "c", "message": "waiting for worker gpu-box to reconnect"}))
    assert waiting["name"] == "3f1c9ab2c04e" and waiting["started"] == "-" and waiting["duration"] == "-"
    assert waiting["queue"] == "Queue #2" and waiting["reason"] == "waiting for worker gpu-box to reconnect"
    # A reason the catalog knows is said in its words (wire/messages.json), as the CLI and Lab say it:
    # who is ahead by name, and why it waits.
    ahead = {"code": "memory_wait", "message": "m", "params": {"device": "cuda:0", "need_mib": 8192, "free_mib": 6144}}
    behind = rr.table_row(run(status="queued", queue_position=2, queue_reason={
        "code": "behind_waiting_run", "message": "behind run c2424d56f8b9bbb4, which waits for more than its turn",
        "params": {"run_id": "c2424d56f8b9bbb4", "name": "lr #1", "queue": "cuda:0", "code": "memory_wait",
                   "ahead": ahead}}))
    assert behind["reason"] == ("behind run 'lr #1' in the cuda:0 queue, which is held up: waiting for memory on "
                                "cuda:0: 6.0 GiB free of 8.0 GiB needed (budget and CUDA context)")
    running = rr.table_row(run(status="running", finished_at=None), now=1000.0 + 3 * 3600 + 120)
    assert running["duration"] == "3 h 2 min" and running["actions"] == ["stop", "watch", "csv"]
    assert rr.count_label(50, 312) == "50 of 312"


# -- workers table ----------------------------------------------------------------------------

LISTING = {
    "workers": [
        {"name": "gpu-box", "state": "online", "same_host": False,
         "devices": [{"device": "cuda:0", "slots": {"limit": 1, "taken": 1}},
                     {"device": "cuda:1", "slots": {"limit": 1, "taken": 0}}],
         "running_runs": ["r1"]},
        {"name": "a-laptop", "state": "draining", "same_host": True,
         "devices": [{"device": "cpu", "slots": {"limit": 2, "taken": 1}, "shared_with": "local"}], "runs": 2},
        {"id": "offline-box", "status": "offline", "devices": ["cuda:0"]},
    ],
    "local": {"devices": [{"device": "cpu", "slots": {"limit": 2, "taken": 1}}]},
}


def test_worker_rows_from_a_listing():
    rows, local = wr.worker_rows(LISTING)
    assert [r["name"] for r in rows] == ["a-laptop", "gpu-box", "offline-box"]
    laptop, box, offline = rows
    assert box == {"name": "gpu-box", "state": "online", "tone": "ok", "degraded": False, "missing_types": [],
                   "devices": "cuda:0, cuda:1", "slots": "1/2", "running": 1, "running_ids": ["r1"], "same_host": False}
    assert laptop["devices"] == "cpu (shared with this server)" and laptop["running"] == 2
    assert laptop["running_ids"] == [] and laptop["same_host"] is True
    assert (offline["state"], offline["devices"], offline["slots"], offline["running"]) == ("offline", "cuda:0", "-", 0)
    assert local == {"devices": "cpu", "slots": "1/2"}
    assert wr.worker_names(LISTING) == ["a-laptop", "gpu-box", "offline-box"]


def _api_states() -> set[str]:
    """Every worker state and catalog status the API can list, from the lists the code defines."""
    from codefy_jupyter.core.workers.handshake import CatalogDiff
    from codefy_jupyter.core.workers.registry import STATES

    return {*STATES, *(CatalogDiff(reported=True, matches=m).status for m in (True, False))}


def test_every_worker_state_the_api_lists_has_a_coloured_pill():
    from codefy_jupyter.kernel.widgets._base import CSS

    states = _api_states()
    assert {"connected", "draining", "disconnected", "offline", "degraded"} <= states
    uncoloured = {s for s in states if wr.state_tone(s) == wr.UNKNOWN_TONE}
    assert not uncoloured, f"worker states without a pill colour: {uncoloured} (add them to STATE_TONES)"
    css = CSS.read_text()
    for tone in {*wr.STATE_TONES.values(), wr.UNKNOWN_TONE}:
        assert re.search(rf"\.cdf-status\.cdf-tone-{tone} \{{[^}}]*background:", css), f"no colour for tone {tone}"
    assert wr.state_tone("rebooting") == wr.UNKNOWN_TONE  # a newer server's state still gets a pill


class _Link:
    peer = "127.0.0.1"

    def send(self, frame) -> None:
        pass

    def close(self, code: int, reason: str) -> None:
        pass


def test_rows_from_the_registrys_own_worker_views_carry_each_states_tone():
    from codefy_jupyter.core.workers.handshake import CatalogDiff
    from codefy_jupyter.core.workers.registry import Worker

    workers = [Worker(name="a-offline"), Worker(name="b-gone", seen=True), Worker(name="c-up", link=_Link()),
               Worker(name="d-drain", link=_Link(), draining=True),
               Worker(name="e-degraded", link=_Link(), catalog=CatalogDiff(reported=True, matches=False,
                                                                           worker_lacks=("MLP", "Scale")))]
    rows, _ = wr.worker_rows({"workers": [w.view() for w in workers]})
    assert [(r["state"], r["tone"], r["degraded"]) for r in rows] == [
        ("offline", "off", False), ("disconnected", "bad", False), ("connected", "ok", False),
        ("draining", "warn", False), ("connected", "ok", True)]
    assert rows[-1]["missing_types"] == ["MLP", "Scale"]


def test_empty_or_odd_listings_have_no_rows():
    assert wr.worker_rows([]) == ([], None)
    assert wr.worker_rows({"workers": []}) == ([], None)
    assert wr.worker_rows(None) == ([], None)
    assert wr.worker_rows([{"name": "w", "devices": [{"id": "cpu"}]}])[0][0]["devices"] == "cpu"


# -- queue dialog -----------------------------------------------------------------------------


def test_target_and_device_choices():
    assert qf.target_options(["gpu-box", "local"]) == [["local", "This server"], ["gpu-box", "Worker gpu-box"],
                                                       ["any", "Any available"]]
    choices = qf.device_choices(LISTING)
    assert choices[:len(qf.DEFAULT_DEVICES)] == qf.DEFAULT_DEVICES and choices.count("cuda:0") == 1
    assert "cuda:1" in choices
    assert qf.device_choices([]) == qf.DEFAULT_DEVICES


def test_form_to_submit_arguments():
    assert qf.submit_args({}) == {}
    assert qf.submit_args({"target": "local", "device": " cpu ", "seed": "7", "name": " job "}) == {
        "device": "cpu", "seed": 7, "name": "job"}
    assert qf.submit_args({"target": "any", "devices": "cuda:0, cuda:1"}) == {
        "worker": "any", "devices": ["cuda:0", "cuda:1"]}
    assert qf.submit_args({"target": "gpu-box", "no_seed": True}) == {"worker": "gpu-box", "seed": None}
    assert qf.submit_args({"seed": str(SEED_MAX)}) == {"seed": SEED_MAX}


@pytest.mark.parametrize("form, field, message", [
    ({"seed": "abc"}, "seed", "seed must be a whole number"),
    ({"seed": "-1"}, "seed", "seed must be from 0"),
    ({"seed": str(SEED_MAX + 1)}, "seed", "seed must be from 0"),
    ({"seed": "3", "no_seed": True}, "seed", "not both"),
    ({"devices": "cuda:0,,cuda:1"}, "devices", "comma-separated"),
])
def test_form_refusals_name_the_field(form, field, message):
    with pytest.raises(qf.FormError) as info:
        qf.submit_args(form)
    assert info.value.field == field and message in str(info.value)
