"""The memory-sharing options at their edges: options.target's memory keys (422 shape checks and the
stored options), and an agent's cards shared by memory (--share-memory, declared free memory)."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.agent.identity import Inventory
from codefy_jupyter.core.runs.requests import SchemaError, options_doc, parse_submit
from codefy_jupyter.wire.devices import InventoryError

G = {"nodes": [], "edges": []}


def target(**keys):
    return parse_submit({"graph": G, "options": {"target": {"worker": "box", **keys}}}).options.target


def test_memory_keys_parse_with_their_defaults():
    t = target(memory_gib=7.5)
    assert (t.memory_gib, t.memory_source, t.wait) == (7.5, "declared", True)
    t = target(memory_gib=2, memory_source="estimate", wait=False)
    assert (t.memory_gib, t.memory_source, t.wait) == (2.0, "estimate", False)


@pytest.mark.parametrize("keys, path", [
    ({"memory_gib": 0}, "options.target.memory_gib"),
    ({"memory_gib": 4097}, "options.target.memory_gib"),
    ({"memory_gib": True}, "options.target.memory_gib"),
    ({"memory_gib": "4"}, "options.target.memory_gib"),
    ({"memory_gib": 4, "memory_source": "user"}, "options.target.memory_source"),
    ({"memory_source": "estimate"}, "options.target.memory_source"),
    ({"memory_gib": 4, "wait": "no"}, "options.target.wait"),
])
def test_bad_memory_keys_name_their_field(keys, path):
    with pytest.raises(SchemaError) as info:
        target(**keys)
    assert info.value.field == path


def test_stored_options_keep_the_budget_an_estimate_and_wait_false_only():
    class Resolved:
        requested = "cuda:0"

    req = parse_submit({"graph": G, "options": {"target": {"worker": "box", "memory_gib": 3}}})
    assert options_doc(req, Resolved())["target"] == {"worker": "box", "devices": [], "memory_gib": 3.0}
    req = parse_submit({"graph": G, "options": {"target": {"worker": "box", "memory_gib": 3,
                                                           "memory_source": "estimate", "wait": False}}})
    assert options_doc(req, Resolved())["target"] == {"worker": "box", "devices": [], "memory_gib": 3.0,
                                                      "memory_source": "estimate", "wait": False}


def _inventory(tmp_path, free):
    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"devices": [{"key": "cuda:0", "uuid": "GPU-a", "memory_total_mib": 8192,
                                             "memory_free_mib": free}, {"key": "cuda:1", "uuid": "GPU-b"}]}))
    return path, Inventory.probe({"CODEFY_DEVICE_INVENTORY": str(path)})


def test_a_shared_card_says_so_in_hello_with_its_memory(tmp_path):
    path, inv = _inventory(tmp_path, 6000)
    inv.share_by_memory(["cuda"])
    hello = {d["device"]: d for d in inv.hello()}
    assert hello["cuda:0"]["share"] == "memory" and hello["cuda:0"]["free_memory"] == 6000 * 2**20
    assert hello["cuda:0"]["total_memory"] == 8192 * 2**20 and "share" not in hello["cuda:1"]
    # The declared file is read again for each heartbeat.
    path.write_text(path.read_text().replace("6000", "1000"))
    assert inv.heartbeat() == [{"device": "cuda:0", "free_memory": 1000 * 2**20}]


@pytest.mark.parametrize("name", ["cpu", "cuda:7", "gpu0"])
def test_only_this_machines_cuda_cards_can_be_shared(tmp_path, name):
    _, inv = _inventory(tmp_path, 6000)
    with pytest.raises(InventoryError) as info:
        inv.share_by_memory([name])
    assert "--share-memory" in str(info.value)
