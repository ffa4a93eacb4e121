"""What the server logs when a worker connects (slot_groups.connect_notes, pure): a CUDA card without
a UUID and a same-machine card with a UUID this server lacks (once each, by key), and a limit set for
a worker's slot that the shared card's rule lowers (every connect)."""

from __future__ import annotations

from codefy_jupyter.core.scheduling.queue import Limits, LocalMachine, OfferedDevice, WorkerOffer
from codefy_jupyter.core.scheduling.slot_groups import Topology, connect_notes

MID = "a" * 64


def topo(*offers: WorkerOffer, limits: Limits | None = None) -> Topology:
    local = LocalMachine(MID, (OfferedDevice("cuda:0", "GPU-L0"),))
    return Topology(local, {o.name: o for o in offers}, limits or Limits())


def test_a_card_without_a_uuid_is_noted_with_a_key_naming_its_slot():
    box = WorkerOffer("box", devices=(OfferedDevice("cuda:0"), OfferedDevice("cuda:1", "GPU-B1")))
    once, lowered = connect_notes(topo(box), "box")
    assert [key for key, _ in once] == [("no_uuid", "box/cuda:0")]
    assert "box's cuda:0 reports no UUID" in once[0][1] and lowered == []


def test_a_same_machine_card_this_server_lacks_is_noted_and_a_matching_one_is_not():
    here = WorkerOffer("here", devices=(OfferedDevice("cuda:0", "GPU-L0"), OfferedDevice("cuda:1", "GPU-X")),
                       machine_id=MID, loopback=True)
    once, _ = connect_notes(topo(here), "here")
    assert [key for key, _ in once] == [("unknown_uuid", "here/cuda:1", "GPU-X")]
    # The same report through a tunnel (loopback, another machine id) is another machine's card.
    away = WorkerOffer("away", devices=(OfferedDevice("cuda:1", "GPU-X"),), machine_id="b" * 64, loopback=True)
    assert connect_notes(topo(away), "away") == ([], [])


def test_an_override_the_shared_card_lowers_is_a_warning_naming_who_limits_it():
    here = WorkerOffer("here", devices=(OfferedDevice("cuda:0", "GPU-L0"),), machine_id=MID, loopback=True)
    limits = Limits(overrides={"cuda:0": 2, "here/cuda:0": 3})
    _, lowered = connect_notes(topo(here, limits=limits), "here")
    assert lowered == ["run queue limit here/cuda:0=3 is lowered to 2: cuda:0 is the same physical device and its "
                       "limit is smaller (the smallest limit of a shared card applies)"]
    # Two workers on one card: the worker's own limit, lowered by the other's smaller one.
    a = WorkerOffer("a", devices=(OfferedDevice("cuda:0", "GPU-S"),), limits={"cuda:0": 4})
    b = WorkerOffer("b", devices=(OfferedDevice("cuda:3", "GPU-S"),))
    assert connect_notes(topo(a, b), "a")[1] == [
        "run queue limit a/cuda:0=4 is lowered to 1: b/cuda:3 is the same physical device and its limit is smaller "
        "(the smallest limit of a shared card applies)"]
    # A lower override is the one that applies: nothing to say; an unknown worker: nothing either.
    assert connect_notes(topo(here, limits=Limits(overrides={"cuda:0": 2, "here/cuda:0": 1})), "here")[1] == []
    assert connect_notes(topo(here), "nobody") == ([], [])
