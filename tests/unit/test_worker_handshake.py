"""Judging a worker's hello, and a graph's node types against a worker's catalog."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.core.workers import handshake as wh
from codefy_jupyter.core.workers.handshake import Accepted, Credential, Refused, ServerSide, check_hello
from codefy_jupyter.wire.protocol import PROTOCOL_VERSION, Hello, Welcome, decode, encode
from codefy_jupyter.engine.presets import PresetLibrary
from codefy_jupyter.engine.registry import default_registry

SERVER_TYPES = {"Add": "a1", "Mul": "m1", "Print": "p1"}
SERVER = ServerSide(version="0.1.0", catalog_hash="H", node_types=SERVER_TYPES, heartbeat_s=10, grace_s=30,
                    resume_grace_s=300)
TOKEN = Credential("worker", identity="w-1", bound_name="gpu-box")
SERVER_TOKEN = Credential("server", identity="server")


def hello(**kw) -> Hello:
    base = dict(name="gpu-box", version="0.1.0", protocol_version=PROTOCOL_VERSION, catalog_hash="H",
                node_types=dict(SERVER_TYPES), capabilities=["ack", "run_facts", "s3", "future_thing"])
    return Hello(**(base | kw))


def check(h: Hello, credential: Credential = TOKEN, connected=None):
    return check_hello(h, SERVER, credential=credential, connected=connected or {})


def test_a_matching_worker_is_welcomed_online():
    decision = check(hello())
    assert isinstance(decision, Accepted)
    assert decision.name == "gpu-box" and decision.status == "online" and not decision.replaces
    assert decision.capabilities == ("ack", "run_facts", "s3")
    welcome = decision.welcome("w-1")
    assert welcome == Welcome(worker_id="w-1", name="gpu-box", heartbeat_s=10.0, grace_s=30.0,
                              capabilities=["ack", "run_facts", "s3"], resume_grace_s=300.0, status="online")
    assert decode(encode(welcome)) == welcome


def test_version_mismatches_name_both_versions():
    decision = check(hello(version="0.0.9"))
    assert decision == Refused("version_mismatch", "version mismatch: worker 0.0.9, control plane 0.1.0",
                               {"worker": "0.0.9", "control_plane": "0.1.0"})
    decision = check(hello(protocol_version=2))
    assert isinstance(decision, Refused) and decision.code == "protocol_mismatch"
    assert decision.message == f"protocol version mismatch: worker 2, control plane {PROTOCOL_VERSION}"
    reject = decision.frame()
    assert reject.code == "protocol_mismatch" and decode(encode(reject)) == reject


@pytest.mark.parametrize("name", ["local", "any", "pool"])
def test_reserved_names_are_refused(name):
    decision = check(hello(name=name), SERVER_TOKEN)
    assert isinstance(decision, Refused) and decision.code == "reserved_name"
    assert name in decision.message and decision.params == {"name": name}


@pytest.mark.parametrize("name", ["", "GPU", "-box", "gpu_box", "gpu.box", "a" * 64, "gpu box", "pool:one-shot"])
def test_invalid_names_are_refused(name):
    decision = check(hello(name=name), SERVER_TOKEN)
    assert isinstance(decision, Refused) and decision.code == "bad_name"
    assert repr(name) in decision.message


@pytest.mark.parametrize("name", ["a", "0", "gpu-box-1", "a" * 63, "x-"])
def test_valid_names(name):
    assert wh.name_problem(name) is None
    assert isinstance(check(hello(name=name), SERVER_TOKEN), Accepted)


def test_instances_register_as_name_dot_instance():
    decision = check(hello(instance="job-17", one_shot=True, instance_id="i-1"))
    assert isinstance(decision, Accepted) and decision.name == "gpu-box.job-17"
    bad = check(hello(instance="Job 17"))
    assert isinstance(bad, Refused) and bad.code == "bad_instance" and bad.params == {"instance": "Job 17"}
    assert check(hello(instance="any")).code == "bad_instance"


def test_instances_past_the_cap_are_refused_naming_the_field_and_the_limit():
    few = ServerSide(version="0.1.0", catalog_hash="H", node_types=SERVER_TYPES, max_instances=2)
    job = hello(instance="job-3", one_shot=True)
    assert isinstance(check_hello(job, few, credential=TOKEN, connected={}, instances_held=1), Accepted)
    refused = check_hello(job, few, credential=TOKEN, connected={}, instances_held=2)
    assert isinstance(refused, Refused) and refused.code == "too_many_instances"
    assert refused.params == {"field": "instance", "name": "gpu-box", "limit": 2}
    assert "worker_max_instances = 2" in refused.message
    # The cap is on instances: the plain name is never refused for it.
    assert isinstance(check_hello(hello(), few, credential=TOKEN, connected={}, instances_held=50), Accepted)


def test_the_registry_forgets_idle_instances_and_counts_the_rest():
    from codefy_jupyter.core.workers.registry import WorkerRegistry

    class Link:
        peer = "127.0.0.1"

        def send(self, frame): ...

        def close(self, code, reason): ...

    registry = WorkerRegistry()
    for instance in ("a", "b", "c", "d"):
        h = hello(instance=instance)
        registry.register(check(h), h, TOKEN, link := Link(), now=0.0)
        if instance in ("b", "c"):
            registry.drop(f"gpu-box.{instance}", link, {"code": "closed"})
    registry.get("gpu-box.c").runs.add("run-1")  # disconnected, but a run waits for it
    registry.register(check(hello()), hello(), TOKEN, Link(), now=0.0)  # the plain name: not an instance
    assert registry.instances_held("gpu-box", besides="gpu-box.e") == 3  # a, c, d
    assert registry.get("gpu-box.b") is None and registry.get("gpu-box.c") is not None
    assert registry.get("gpu-box") is not None
    # Its own earlier entry (a reconnect) is not counted against it.
    assert registry.instances_held("gpu-box", besides="gpu-box.a") == 2


def test_a_worker_token_is_bound_to_its_name():
    decision = check(hello(name="other-box"))
    assert decision == Refused("name_mismatch", "this worker token belongs to worker 'gpu-box', not 'other-box'",
                               {"name": "other-box", "token_name": "gpu-box"})
    # The server's own token (a loopback agent) may use any name.
    assert isinstance(check(hello(name="other-box"), SERVER_TOKEN), Accepted)


def test_a_taken_name_is_refused_unless_the_same_credential_reconnects():
    taken = check(hello(), SERVER_TOKEN, connected={"gpu-box": "w-1"})
    assert taken == Refused("name_taken", "worker name 'gpu-box' is taken by another connected worker",
                            {"name": "gpu-box"})
    again = check(hello(), TOKEN, connected={"gpu-box": "w-1"})
    assert isinstance(again, Accepted) and again.replaces
    # Instances of one enrollment are distinct names.
    other = check(hello(instance="b"), TOKEN, connected={"gpu-box.a": "w-1"})
    assert isinstance(other, Accepted) and not other.replaces


def test_a_different_catalog_makes_the_worker_degraded_listing_what_each_side_lacks():
    decision = check(hello(catalog_hash="W", node_types={"Add": "a1", "Mul": "m2", "Resize": "r1"}))
    assert isinstance(decision, Accepted) and decision.status == "degraded"
    assert decision.catalog == wh.CatalogDiff(reported=True, matches=False, worker_lacks=("Print",),
                                              server_lacks=("Resize",), differing=("Mul",))
    welcome = decision.welcome("w-1")
    assert welcome.status == "degraded"
    assert welcome.missing_types == ["Print"] and welcome.extra_types == ["Resize"]


def test_a_worker_without_a_catalog_is_degraded_and_lacks_everything():
    decision = check(hello(catalog_hash=None, node_types=None))
    assert isinstance(decision, Accepted) and decision.status == "degraded"
    assert not decision.catalog.reported
    assert decision.catalog.worker_lacks == ("Add", "Mul", "Print")


def test_the_real_catalog_matches_itself():
    catalog = default_registry().catalog()
    server = ServerSide(version="0.1.0", catalog_hash=catalog["hash"], node_types=catalog["types"])
    decision = check_hello(hello(catalog_hash=catalog["hash"], node_types=catalog["types"]), server,
                           credential=TOKEN, connected={})
    assert isinstance(decision, Accepted) and decision.status == "online"


# -- graph node types ---------------------------------------------------------------------------------

def _write_preset(folder, name, types, extra_nodes=()):
    nodes = [{"id": f"n{i}", "type": t, "params": {}} for i, t in enumerate(types)] + list(extra_nodes)
    (folder / f"{name}.json").write_text(json.dumps({"nodes": nodes, "edges": [], "inputs": {}, "outputs": {}}))


def test_graph_node_types_includes_subgraphs_presets_and_map(tmp_path):
    _write_preset(tmp_path, "inner", ["Resize", "Crop"])
    _write_preset(tmp_path, "outer", ["Blur"], [{"id": "p", "type": "Preset", "params": {"preset": "inner"}}])
    _write_preset(tmp_path, "member", ["Train"])
    _write_preset(tmp_path, "loop", ["Echo"], [{"id": "p", "type": "Preset", "params": {"preset": "loop"}}])
    presets = PresetLibrary([tmp_path], include_env=False, include_builtin=False)
    graph = {
        "nodes": [
            {"id": "a", "type": "Add", "params": {}},
            {"id": "s", "type": "Subgraph", "params": {"graph": {"nodes": [
                {"id": "x", "type": "Mul", "params": {}},
                {"id": "deep", "type": "Subgraph", "params": {"graph": {"nodes": [
                    {"id": "y", "type": "Sqrt", "params": {}},
                    {"id": "p", "type": "Preset", "params": {"preset": "outer"}}]}}}]}}},
            {"id": "m", "type": "Map", "params": {"preset": "member"}},
            {"id": "self", "type": "Preset", "params": {"preset": "loop"}},  # a preset that holds itself
            {"id": "gone", "type": "Preset", "params": {"preset": "no-such-preset"}},
        ],
        "edges": [],
    }
    assert wh.graph_node_types(graph, presets) == {
        "Add", "Subgraph", "Mul", "Sqrt", "Preset", "Blur", "Resize", "Crop", "Map", "Train", "Echo"}


def test_graph_node_types_with_the_installed_presets():
    graph = {"nodes": [{"id": "m", "type": "Map", "params": {"preset": "mlp_member"}}], "edges": []}
    types = wh.graph_node_types(graph)
    assert {"Map", "Preset", "TrainingLoop", "MLP", "TrainTestSplit"} <= types


def test_graph_node_types_tolerates_junk():
    assert wh.graph_node_types({"nodes": [None, {"id": "x"}, {"type": 3},
                                          {"type": "Subgraph", "params": {"graph": "nope"}},
                                          {"type": "Preset", "params": None}]}, {}) == {"Subgraph", "Preset"}


def test_check_graph_types_names_what_the_worker_lacks():
    needed = {"Add", "Resize", "Crop"}
    refusal = wh.check_graph_types("gpu-box", needed, {"Add": "a1"})
    assert refusal == Refused("worker_missing_node_types",
                              "worker gpu-box lacks node types this graph uses: Crop, Resize",
                              {"worker": "gpu-box", "missing_types": ["Crop", "Resize"]})
    assert wh.check_graph_types("gpu-box", needed, ["Add", "Crop", "Resize", "Extra"]) is None
    assert wh.missing_node_types(needed, None) == ["Add", "Crop", "Resize"]
