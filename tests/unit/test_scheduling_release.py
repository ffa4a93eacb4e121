"""RunQueue.release: a worker run whose process has exited while its files upload gives its cards
(and card memory) back at once, yet stays executing until `finish` (core/scheduling/queue.py)."""

from __future__ import annotations

from codefy_jupyter.core.scheduling import memory_ledger as ml
from codefy_jupyter.core.scheduling.queue import OfferedDevice, Run, RunQueue, WorkerOffer
from codefy_jupyter.core.scheduling.quotas import Quotas

GiB = 1024


def _queue(share=()) -> RunQueue:
    q = RunQueue()
    q.cuda_context_mib = 500
    q.set_worker(WorkerOffer("gpu", devices=(OfferedDevice("cuda:0", "GPU-a"), OfferedDevice("cuda:1", "GPU-b")),
                             shared_memory=frozenset(share)))
    q.set_card_memory("gpu", {"cuda:0": ml.CardMemory(10 * GiB, 10 * GiB)})
    return q


def _run(run_id, order, device="cuda:0", devices=(), mib=None, owner=None):
    return Run(run_id, order, device, devices=devices, worker="gpu", memory_mib=mib, owner=owner)


def _used(q: RunQueue) -> dict[str, int]:
    return {s.slot: s.taken for s in q.slot_info("gpu")}


def test_a_released_run_frees_its_card_for_the_next_in_line():
    q = _queue()
    q.submit(_run("a", 1))
    q.submit(_run("b", 2))
    assert [p.run_id for p in q.schedule()] == ["a"]
    assert q.schedule() == []
    assert q.release("a") is True
    assert _used(q)["gpu/cuda:0"] == 0
    assert [p.run_id for p in q.schedule()] == ["b"]
    # Still executing: its row stays running, the service still finds where it ran.
    assert q.is_running("a") and q.is_released("a")
    assert q.placement("a").slots == ("gpu/cuda:0",)
    assert q.get("a").run_id == "a"
    assert _used(q)["gpu/cuda:0"] == 1  # b only


def test_release_is_idempotent_and_finish_after_it_frees_nothing_twice():
    q = _queue()
    q.submit(_run("a", 1))
    q.schedule()
    assert q.release("a") is True
    assert q.release("a") is False
    q.submit(_run("b", 2))
    assert [p.run_id for p in q.schedule()] == ["b"]
    assert q.finish("a").run_id == "a"
    # b still holds the card: finishing a did not give back b's unit.
    assert _used(q)["gpu/cuda:0"] == 1
    assert not q.is_running("a") and not q.is_released("a")
    q.submit(_run("c", 3))
    assert q.schedule() == []
    q.finish("b")
    assert [p.run_id for p in q.schedule()] == ["c"]


def test_a_device_set_run_releases_every_card_of_its_set():
    q = _queue()
    q.submit(_run("set", 1, devices=("cuda:0", "cuda:1")))
    q.schedule()
    assert _used(q) == {"gpu/cpu": 0, "gpu/cuda:0": 1, "gpu/cuda:1": 1}
    q.release("set")
    assert _used(q) == {"gpu/cpu": 0, "gpu/cuda:0": 0, "gpu/cuda:1": 0}
    q.finish("set")
    assert _used(q) == {"gpu/cpu": 0, "gpu/cuda:0": 0, "gpu/cuda:1": 0}


def test_release_refuses_unknown_waiting_and_local_runs_and_changes_nothing():
    q = _queue()
    q.submit(Run("local", 1, "cpu"))
    q.submit(_run("a", 2))
    q.submit(_run("b", 3))
    q.schedule()
    before = _used(q), q.statistics()
    assert q.release("nope") is False
    assert q.release("b") is False  # waiting
    assert q.release("local") is False  # this server's own run: its process is ours
    assert (_used(q), q.statistics()) == before
    assert q.is_waiting("b") and not q.is_released("local")


def test_released_memory_leaves_the_shared_card_ledger():
    q = _queue(share=("cuda:0",))
    q.submit(_run("a", 1, mib=6 * GiB))
    q.submit(_run("b", 2, mib=6 * GiB))
    assert [p.run_id for p in q.schedule()] == ["a"]
    assert q.reason("b").code == "memory_wait"
    q.release("a")
    assert [p.run_id for p in q.schedule()] == ["b"]


def test_a_released_run_still_counts_for_its_owner_quota_until_it_ends():
    q = _queue()
    q.quotas = Quotas(max_running=1)
    q.submit(_run("a", 1, owner="ann"))
    q.submit(_run("b", 2, device="cuda:1", owner="ann"))
    assert [p.run_id for p in q.schedule()] == ["a"]
    q.release("a")
    assert q.schedule() == []
    assert q.owner_counts("ann") == (1, 1)
    q.finish("a")
    assert [p.run_id for p in q.schedule()] == ["b"]


def test_an_adopted_run_can_be_released_again():
    q = _queue()
    q.set_worker(WorkerOffer("gpu", state="disconnected",
                             devices=(OfferedDevice("cuda:0", "GPU-a"), OfferedDevice("cuda:1", "GPU-b"))))
    q.adopt(_run("a", 1), "gpu", ["gpu/cuda:0"])
    assert q.release("a") is True
    assert _used(q)["gpu/cuda:0"] == 0
    q.finish("a")
