"""Pure decisions of the agent: which assigns it refuses at once, and how a run sees its cards."""

from __future__ import annotations

import pytest

from codefy_jupyter.agent.isolation import OfferedDevice, assign_refusal, visibility

OFFERED = {"cuda:0": OfferedDevice("cuda:0", "0"), "cuda:1": OfferedDevice("cuda:1", "1"),
           "cuda:2": OfferedDevice("cuda:2", "2"), "mps:0": OfferedDevice("mps:0")}


def refusal(device="cpu", devices=(), *, offered=OFFERED, known=(), draining=False, one_shot_used=False):
    return assign_refusal(run_id="r", device=device, devices=list(devices), offered=offered, known_runs=known,
                          draining=draining, one_shot_used=one_shot_used)


@pytest.mark.parametrize("device, devices", [("cpu", []), ("cuda:1", []), ("cuda:2", ["cuda:2", "cuda:0"]),
                                             ("cuda", ["cuda:1"]), ("mps", []), ("cuda:0", ["cuda:2", "cuda:0"])])
def test_honoured(device, devices):
    assert refusal(device, devices) is None


@pytest.mark.parametrize("kw, code", [
    ({"draining": True}, "agent_draining"),
    ({"known": ["r"]}, "duplicate_assign"),
    ({"one_shot_used": True}, "one_shot_taken"),
    ({"device": "cuda:5"}, "device_not_offered"),
    ({"device": "cuda:0", "devices": ["cuda:0", "cuda:7"]}, "device_not_offered"),
    ({"device": "cuda:0", "devices": ["cuda:0", "cpu"]}, "bad_device"),
    ({"device": "cuda:0", "devices": ["cuda:0", "cuda:0"]}, "bad_device"),
    ({"device": "cuda:1", "devices": ["cuda:2"]}, "bad_device"),
    ({"device": "tpu:0"}, "bad_device"),
])
def test_refused_with_a_code(kw, code):
    found = refusal(**kw)
    assert found is not None and found.code == code
    assert found.error()["code"] == code and found.error()["message"]


def test_a_device_nobody_offers_names_what_is_offered():
    found = refusal("cuda:5", offered={})
    assert found.params == {"missing": ["cuda:5"], "offered": ["cpu"]}


def test_cards_are_renumbered_in_assign_order():
    view = visibility("cuda:2", ["cuda:2", "cuda:0"], OFFERED)
    assert view.engine_device == "cuda:0" and view.cuda_visible_devices == "2,0"
    assert view.aliases == {"cuda:0": "cuda:2", "cuda:1": "cuda:0"} and view.visible_devices == ["cuda:2", "cuda:0"]
    # The run's device is the one it names; a bare kind means the first card of the set.
    assert visibility("cuda:0", ["cuda:2", "cuda:0"], OFFERED).engine_device == "cuda:1"
    assert visibility("cuda", ["cuda:1", "cuda:0"], OFFERED).engine_device == "cuda:0"
    assert visibility("cuda:1", [], OFFERED).cuda_visible_devices == "1"


def test_cpu_and_mps_runs_see_no_cuda_card():
    assert visibility("cpu", [], OFFERED).cuda_visible_devices == ""
    mps = visibility("mps", [], OFFERED)
    assert mps.engine_device == "mps:0" and mps.cuda_visible_devices == ""


def test_a_card_from_the_agents_own_visible_list_keeps_its_entry():
    offered = {"cuda:0": OfferedDevice("cuda:0", "GPU-1111"), "cuda:1": OfferedDevice("cuda:1", "5")}
    assert visibility("cuda:1", ["cuda:1", "cuda:0"], offered).cuda_visible_devices == "5,GPU-1111"
