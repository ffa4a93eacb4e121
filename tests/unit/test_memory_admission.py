"""Memory admission on cards shared by memory (core/scheduling/memory_ledger.py), against fake
ledgers: the pure rule, then the run queue with workers whose cards are shared."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.errors import SubmitError
from codefy_jupyter.core.scheduling import memory_ledger as ml
from codefy_jupyter.core.scheduling.queue import OfferedDevice, Run, RunQueue, WorkerOffer

GiB = 1024  # MiB


# -- the pure rule -----------------------------------------------------------------------------


def test_budget_rounds_up_to_whole_mib():
    assert ml.budget_mib(1) == 1024
    assert ml.budget_mib(0.5) == 512
    assert ml.budget_mib(0.0001) == 1


def test_fits_on_an_empty_card():
    card = ml.CardMemory(free_mib=10 * GiB, total_mib=10 * GiB)
    assert ml.admit(4 * GiB, 500, card, [], slot="w/cuda:0") is None


def test_budget_plus_context_must_fit():
    card = ml.CardMemory(free_mib=4 * GiB, total_mib=4 * GiB)
    why = ml.admit(4 * GiB, 500, card, [], slot="w/cuda:0")
    assert why is not None and why.code == "memory_wait"
    assert why.params == {"device": "w/cuda:0", "need_mib": 4 * GiB + 500, "free_mib": 4 * GiB}


def test_runs_the_heartbeat_saw_count_against_total_not_twice():
    # A uses 3 GiB of its 4 GiB need already: free shows it, total - committed keeps the rest.
    card = ml.CardMemory(free_mib=7 * GiB, total_mib=10 * GiB, seen_running=frozenset({"a"}))
    holders = [ml.Holder("a", 4 * GiB)]
    assert ml.room_mib(card, holders) == 6 * GiB
    assert ml.admit(6 * GiB - 100, 100, card, holders, slot="s") is None
    assert ml.admit(6 * GiB, 100, card, holders, slot="s").code == "memory_wait"


def test_runs_started_after_the_heartbeat_are_subtracted_from_free():
    # Another process holds 5 GiB; run b started after the heartbeat (not in free yet).
    card = ml.CardMemory(free_mib=5 * GiB, total_mib=10 * GiB)
    holders = [ml.Holder("b", 2 * GiB)]
    assert ml.room_mib(card, holders) == 3 * GiB


def test_no_report_yet_waits():
    why = ml.admit(GiB, 0, None, [], slot="w/cuda:0")
    assert why.code == "memory_wait" and why.params["free_mib"] is None


def test_a_run_without_budget_takes_the_card_whole():
    card = ml.CardMemory(free_mib=10 * GiB, total_mib=10 * GiB)
    assert ml.admit(None, 500, card, [], slot="s") is None
    why = ml.admit(None, 500, card, [ml.Holder("a", GiB)], slot="s")
    assert why.code == "memory_no_budget" and why.params["whole"] is True
    why = ml.admit(GiB, 500, card, [ml.Holder("a", None)], slot="s")
    assert why.code == "memory_no_budget" and why.params["whole"] is False


@pytest.mark.parametrize("members, shared", [
    ([("w1", True, True)], True),
    ([("w1", True, False)], False),
    ([("w1", True, True), ("w2", True, False)], False),  # every online provider must share
    ([("w1", True, True), ("w2", False, False)], True),  # an away provider does not count
    ([("w1", False, True), ("w2", False, False)], False),  # none online: all listed decide
    ([("local", True, False), ("w1", True, True)], False),  # this server never shares
    ([], False),
])
def test_shared_group(members, shared):
    assert ml.shared_group(members) is shared


def test_card_memory_from_a_device_dict():
    card = ml.card_memory({"device": "cuda:0", "free_memory": 3 * ml.MIB * GiB, "total_memory": 8 * ml.MIB * GiB},
                          ["r1"])
    assert card == ml.CardMemory(3 * GiB, 8 * GiB, frozenset({"r1"}))
    assert ml.card_memory({"device": "cuda:0"}) is None


def test_budget_raised_names_both_budgets():
    why = ml.reason_budget_raised("w/cuda:0", 4, 6.5)
    assert why.code == "budget_raised" and why.params["memory_gib"] == 6.5


def test_only_a_memory_wait_of_a_raised_estimate_reads_budget_raised():
    wait = ml.reason_memory_wait("w/cuda:0", 7156, 1000)
    why = ml.raised(wait, 4.0, 6656)
    assert why.code == "budget_raised"
    assert why.params == {"device": "w/cuda:0", "estimate_gib": 4.0, "memory_gib": 6.5, "need_mib": 7156,
                          "free_mib": 1000}
    assert ml.raised(wait, None, 6656) is wait
    whole = ml.reason_no_budget("w/cuda:0", whole=False, running=1)
    assert ml.raised(whole, 4.0, 6656) is whole


# -- the run queue -----------------------------------------------------------------------------


def _queue(share=("cuda:0",), free=10 * GiB, total=10 * GiB, context=500, workers=("gpu",)):
    q = RunQueue()
    q.cuda_context_mib = context
    for i, name in enumerate(workers):
        q.set_worker(WorkerOffer(name, devices=(OfferedDevice("cuda:0", "GPU-same"),), shared_memory=frozenset(share)))
        q.set_card_memory(name, {"cuda:0": ml.CardMemory(free, total)})
    return q


def _run(run_id, order, mib=None, worker="gpu", wait=True, device="cuda:0"):
    return Run(run_id, order, device, worker=worker, memory_mib=mib, wait=wait)


def test_two_budgeted_runs_share_one_card():
    q = _queue()
    q.submit(_run("a", 1, 4 * GiB))
    q.submit(_run("b", 2, 4 * GiB))
    assert [p.run_id for p in q.schedule()] == ["a", "b"]


def test_a_third_waits_with_memory_wait_and_starts_when_one_ends():
    q = _queue()
    for i, rid in enumerate("abc", 1):
        q.submit(_run(rid, i, 4 * GiB))
    assert [p.run_id for p in q.schedule()] == ["a", "b"]
    why = q.reason("c")
    assert why.code == "memory_wait" and why.params["need_mib"] == 4 * GiB + 500
    q.finish("a")
    assert [p.run_id for p in q.schedule()] == ["c"]


def test_a_heartbeat_with_less_free_memory_holds_runs_back():
    q = _queue()
    q.set_card_memory("gpu", {"cuda:0": ml.CardMemory(2 * GiB, 10 * GiB)})  # someone else uses 8 GiB
    q.submit(_run("a", 1, 4 * GiB))
    assert q.schedule() == []
    assert q.reason("a").code == "memory_wait"
    q.set_card_memory("gpu", {"cuda:0": ml.CardMemory(9 * GiB, 10 * GiB)})
    assert [p.run_id for p in q.schedule()] == ["a"]


def test_unshared_card_keeps_one_run_per_card():
    q = _queue(share=())
    q.submit(_run("a", 1, 2 * GiB))
    q.submit(_run("b", 2, 2 * GiB))
    assert [p.run_id for p in q.schedule()] == ["a"]
    assert q.reason("b") is None  # waiting its turn


def test_every_provider_must_share_the_card():
    q = _queue(workers=("gpu", "gpu2"))
    q.set_worker(WorkerOffer("gpu2", devices=(OfferedDevice("cuda:0", "GPU-same"),)))  # not shared
    q.submit(_run("a", 1, 2 * GiB))
    q.submit(_run("b", 2, 2 * GiB))
    assert [p.run_id for p in q.schedule()] == ["a"]


def test_a_card_shared_by_both_providers_reads_one_ledger():
    q = _queue(workers=("gpu", "gpu2"))
    q.submit(_run("a", 1, 4 * GiB, worker="gpu"))
    q.submit(_run("b", 2, 4 * GiB, worker="gpu2"))
    q.submit(_run("c", 3, 4 * GiB, worker="gpu"))
    assert [p.run_id for p in q.schedule()] == ["a", "b"]
    assert q.reason("c").code == "memory_wait"


def test_no_budget_on_a_shared_card_waits_for_it_to_empty_and_holds_it():
    q = _queue()
    q.submit(_run("a", 1, 2 * GiB))
    q.submit(_run("whole", 2, None))
    q.submit(_run("c", 3, 2 * GiB))
    assert [p.run_id for p in q.schedule()] == ["a"]
    assert q.reason("whole").code == "memory_no_budget"
    assert q.reason("c").code == "behind_waiting_run"
    q.finish("a")
    assert [p.run_id for p in q.schedule()] == ["whole"]
    assert q.reason("c").code == "memory_no_budget"


def test_a_waiting_head_reserves_its_need_against_later_runs():
    q = _queue(free=10 * GiB)
    q.submit(_run("a", 1, 5 * GiB))
    q.schedule()
    q.submit(_run("big", 2, 5 * GiB, device="cuda:0"))  # does not fit beside a (context)
    q.submit(Run("small", 3, "cuda:0", devices=(), worker="gpu", memory_mib=GiB))
    # small is behind big in the same queue: FIFO; big's reservation is what it waits for.
    assert q.schedule() == []
    assert q.reason("big").code == "memory_wait"


def test_a_raised_estimate_waits_with_budget_raised_and_starts_when_it_fits():
    q = _queue()
    q.submit(_run("a", 1, 6 * GiB))
    q.schedule()
    q.submit(Run("b", 2, "cuda:0", worker="gpu", memory_mib=4 * GiB, raised_from_gib=2.0))
    assert q.schedule() == []
    why = q.reason("b")
    assert why.code == "budget_raised"
    assert why.params["estimate_gib"] == 2.0 and why.params["memory_gib"] == 4.0
    assert why.params["need_mib"] == 4 * GiB + 500 and why.params["free_mib"] == 4 * GiB - 500
    q.finish("a")
    assert [p.run_id for p in q.schedule()] == ["b"]


def test_a_raised_estimate_with_wait_false_is_refused_with_budget_raised():
    q = _queue()
    q.submit(_run("a", 1, 8 * GiB))
    q.schedule()
    with pytest.raises(SubmitError) as err:
        q.submit(Run("b", 2, "cuda:0", worker="gpu", memory_mib=3 * GiB, wait=False, raised_from_gib=1.0))
    assert err.value.params["reason"]["code"] == "budget_raised"
    assert not q.is_waiting("b")


def test_wait_false_is_refused_when_it_cannot_start_now():
    q = _queue()
    q.submit(_run("a", 1, 8 * GiB))
    q.schedule()
    with pytest.raises(SubmitError) as err:
        q.submit(_run("b", 2, 4 * GiB, wait=False))
    assert err.value.code == "memory_unavailable" and err.value.status == 409
    assert err.value.params["reason"]["code"] == "memory_wait"
    assert not q.is_waiting("b")
    q.submit(_run("c", 3, GiB, wait=False))  # fits: queued, starts on the next pass
    assert [p.run_id for p in q.schedule()] == ["c"]


def test_memory_budget_with_local_is_refused():
    q = RunQueue()
    with pytest.raises(SubmitError) as err:
        q.submit(Run("a", 1, "cpu", memory_mib=GiB))
    assert err.value.code == "memory_budget_local" and err.value.params["field"] == "options.target.memory_gib"


def test_a_budget_larger_than_the_card_is_refused_at_submit():
    q = _queue(total=8 * GiB, free=8 * GiB)
    with pytest.raises(SubmitError) as err:
        q.submit(_run("a", 1, 8 * GiB))
    assert err.value.code == "memory_over_card" and err.value.params["total_mib"] == 8 * GiB


def test_only_cuda_cards_are_shared():
    with pytest.raises(ValueError):
        WorkerOffer("gpu", devices=(OfferedDevice("cpu"),), shared_memory=frozenset({"cpu"}))


def test_device_set_on_shared_cards_needs_every_card():
    q = RunQueue()
    q.cuda_context_mib = 0
    q.set_worker(WorkerOffer("gpu", devices=("cuda:0", "cuda:1"), shared_memory=frozenset({"cuda:0", "cuda:1"})))
    q.set_card_memory("gpu", {"cuda:0": ml.CardMemory(10 * GiB, 10 * GiB), "cuda:1": ml.CardMemory(2 * GiB, 10 * GiB)})
    q.submit(Run("set", 1, "cuda:0", devices=("cuda:0", "cuda:1"), worker="gpu", memory_mib=4 * GiB))
    assert q.schedule() == []
    assert q.reason("set").params["device"] == "gpu/cuda:1"
    q.set_card_memory("gpu", {"cuda:1": ml.CardMemory(10 * GiB, 10 * GiB)})
    assert [p.slots for p in q.schedule()] == [("gpu/cuda:0", "gpu/cuda:1")]


def test_an_adopted_run_keeps_its_budget_on_the_shared_card():
    from codefy_jupyter.core.runs.recovery import adopted_run

    row = {"id": "old", "seed": None, "options": {"target": {"worker": "gpu", "memory_gib": 4}}}
    run, slots = adopted_run(row, {"worker": "gpu", "device": "cuda:0", "devices": ["cuda:0"]}, 1)
    assert run.memory_mib == 4 * GiB
    q = _queue()
    q.adopt(run, "gpu", slots)
    q.submit(_run("new", 2, 4 * GiB))
    assert [p.run_id for p in q.schedule()] == ["new"]  # 4.5 + 4.5 GiB fit in 10


def test_slot_info_shows_the_ledger_of_a_shared_card_only():
    q = _queue()
    q.submit(_run("a", 1, 4 * GiB))
    q.schedule()
    info = {s.slot: s for s in q.slot_info("gpu")}
    assert info["gpu/cuda:0"].memory == {"free_mib": 10 * GiB, "total_mib": 10 * GiB, "committed_mib": 4 * GiB + 500,
                                         "room_mib": 6 * GiB - 500, "runs": 1}
    assert info["gpu/cpu"].memory is None
