"""Placing runs on workers (pure scheduler): queue keys, worker value objects, same-card groups and
their limits, device resolution for worker targets, submit refusals, placement rules, wait reasons,
one-shot workers, removal and adoption. (Local-only rules: test_scheduling.py.)"""

from __future__ import annotations

import pytest

from codefy_jupyter.core.scheduling.queue import (
    CONNECTED, DISCONNECTED, DRAINING, INTERACTIVE, OFFLINE, Limits, LocalMachine, OfferedDevice, Placement, Run,
    RunQueue, SubmitError, WorkerOffer,
)
from codefy_jupyter.core.scheduling.slot_groups import Topology, split_slot
from codefy_jupyter.core.scheduling.device_sets import resolve_worker_device

MID = "a" * 64  # this server's machine-id digest
OTHER = "b" * 64


def cards(*uuids: str | None, extra: tuple = ()) -> tuple:
    return tuple(OfferedDevice(f"cuda:{i}", u) for i, u in enumerate(uuids)) + extra


def box(name: str = "box", *devices, **kw) -> WorkerOffer:
    return WorkerOffer(name, devices=devices or ("cuda:0",), **kw)


class Q:
    """A RunQueue with this server's cpu + cuda:0 (UUID GPU-L0) that numbers submits itself."""

    def __init__(self, limits: Limits | None = None, local_devices=None, machine_id=MID, **kw) -> None:
        local = LocalMachine(machine_id, cards("GPU-L0") if local_devices is None else local_devices)
        self.q = RunQueue(limits or Limits(), slots=("cpu", *(d.device for d in local.devices)), local=local, **kw)
        self.n = 0

    def add(self, run_id: str, device: str = "cpu", devices: tuple[str, ...] = (), worker: str = "local",
            **kw) -> Run:
        self.n += 1
        if worker != "local" and not devices and device not in ("cuda",):
            devices = (device,)
        run = Run(run_id, self.n, device, devices, worker=worker, **kw)
        self.q.submit(run)
        return run

    def go(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return [(p.run_id, p.worker, p.slots) for p in self.q.schedule()]

    def ids(self) -> list[str]:
        return [p.run_id for p in self.q.schedule()]

    def done(self, *run_ids: str) -> list[tuple[str, str, tuple[str, ...]]]:
        for rid in run_ids:
            self.q.finish(rid)
        return self.go()

    def why(self, run_id: str) -> tuple[str, str, dict] | None:
        notice = self.q.reason(run_id)
        return None if notice is None else (notice.code, notice.message, notice.params)

    def __getattr__(self, name):
        return getattr(self.q, name)


def refused(excinfo) -> tuple[str, dict]:
    return excinfo.value.code, excinfo.value.params


# --- runs and placements ----------------------------------------------------------------------


class TestRunAndPlacement:
    @pytest.mark.parametrize("kw,key", [
        ({"device": "cuda:0"}, "cuda:0"),
        ({"device": "cuda:0", "worker": "local"}, "cuda:0"),
        ({"device": "cuda", "worker": "gpu-box-1"}, "gpu-box-1/cuda"),
        ({"device": "cuda:0", "devices": ("cuda:0",), "worker": "gpu-box-1"}, "gpu-box-1/cuda:0"),
        ({"device": "cuda:1", "devices": ("cuda:1", "cuda:0"), "worker": "any"}, "any/cuda:1"),
        ({"device": "cpu", "worker": "any"}, "any/cpu"),
        ({"device": "cuda", "pool": "one-shot"}, "pool:one-shot/cuda"),
        ({"device": "cpu", "worker": "box.2"}, "box.2/cpu"),
    ])
    def test_queue_keys(self, kw, key):
        assert Run("r", 1, **kw).queue_key == key

    def test_a_pool_run_without_a_worker_goes_to_any_worker(self):
        run = Run("r", 1, "cuda", pool="one-shot")
        assert (run.worker, run.is_local, run.slots) == ("any", False, ())

    def test_worker_run_slots_are_chosen_when_it_starts(self):
        assert Run("r", 1, "cuda:0", ("cuda:0",), worker="box").slots == ()
        assert Run("r", 1, "cuda:0", ("cuda:0",)).slots == ("cuda:0",)

    @pytest.mark.parametrize("kw", [
        {"device": "cpu", "worker": "Box"}, {"device": "cpu", "worker": "a/b"}, {"device": "cpu", "worker": ""},
        {"device": "cpu", "pool": "warm"}, {"device": "cuda"}, {"device": "cuda", "worker": "local"},
        {"device": "cuda", "devices": ("cuda:0",), "worker": "box"},
    ])
    def test_inconsistent_runs_are_programming_errors(self, kw):
        with pytest.raises(ValueError):
            Run("r", 1, **kw)

    def test_placement_devices(self):
        assert Placement("r", "box/cuda", "cuda:1", ("box/cuda:1", "box/cuda:0"), "queued", False,
                         "box").devices == ("cuda:1", "cuda:0")
        assert Placement("r", "cuda:0", "cuda:0", ("cuda:0",), "queued", False).devices == ("cuda:0",)
        assert Placement("r", "cpu", "cpu", (), "interactive", False).devices == ("cpu",)


# --- the worker value object and groups -------------------------------------------------------


class TestWorkerOffer:
    def test_devices_are_canonical_with_the_cpu_implied_in_order(self):
        offer = WorkerOffer("box", devices=({"device": "cuda:1", "uuid": "U1"}, "cuda", {"key": "mps"}))
        assert offer.device_names() == ("cpu", "cuda:0", "cuda:1", "mps:0")
        assert (offer.uuid("cuda:1"), offer.uuid("cuda:0")) == ("U1", None)

    def test_never_reported(self):
        offer = WorkerOffer("box", state=OFFLINE, missing_types=None)
        assert (offer.devices, offer.device_names(), offer.online, offer.catalog_complete) == (None, (), False, False)

    @pytest.mark.parametrize("state,online,accepting", [
        (CONNECTED, True, True), (DRAINING, True, False), (DISCONNECTED, False, False), (OFFLINE, False, False)])
    def test_states(self, state, online, accepting):
        offer = WorkerOffer("box", state=state)
        assert (offer.online, offer.accepting) == (online, accepting)

    def test_catalog(self):
        assert WorkerOffer("box").catalog_complete
        assert not WorkerOffer("box", missing_types={"Conv2d"}).catalog_complete
        assert WorkerOffer("box", missing_types=["A"]).missing_types == frozenset({"A"})

    @pytest.mark.parametrize("kw", [
        {"name": "any"}, {"name": "local"}, {"name": "pool"}, {"name": "Box"}, {"name": "box/x"},
        {"name": "box", "state": "online"}, {"name": "box", "devices": ("gpu",)},
        {"name": "box", "limits": {"cuda:0": 0}}, {"name": "box", "limits": {"gpu": 1}},
        {"name": "box", "devices": ({"device": "cuda:0", "uuid": 7},)},
    ])
    def test_bad_values_are_programming_errors(self, kw):
        with pytest.raises(ValueError):
            WorkerOffer(**kw)

    def test_limits_are_canonical(self):
        assert WorkerOffer("box", limits={"cuda": 3}).limits == {"cuda:0": 3}


def topo(workers=(), limits=None, local=cards("GPU-L0"), machine_id=MID) -> Topology:
    return Topology(LocalMachine(machine_id, local), {w.name: w for w in workers}, limits or Limits())


class TestGroups:
    def test_a_card_groups_by_uuid_with_this_server_whatever_its_number(self):
        t = topo([box("box", *cards("GPU-X", "GPU-L0"))])
        assert t.group("box/cuda:1") == "cuda:0"
        assert t.members("cuda:0") == ("cuda:0", "box/cuda:1")
        assert t.group("box/cuda:0") == "card:GPU-X"

    def test_uuid_grouping_does_not_need_the_same_machine(self):
        assert topo([box("box", *cards("GPU-L0"))]).group("box/cuda:0") == "cuda:0"

    def test_two_workers_offering_one_card_share_it_without_this_server(self):
        t = topo([box("a", *cards("GPU-X")), box("b", *cards(None, "GPU-X"))])
        assert t.group("a/cuda:0") == t.group("b/cuda:1") == "card:GPU-X"
        assert t.members("card:GPU-X") == ("a/cuda:0", "b/cuda:1")

    def test_a_card_without_uuid_keeps_its_own_slot(self):
        t = topo([box("box", "cuda:0")], local=cards(None))
        assert (t.group("box/cuda:0"), t.group("cuda:0")) == ("box/cuda:0", "cuda:0")

    def test_same_machine_needs_loopback_and_the_machine_id(self):
        same = box("same", "mps:0", loopback=True, machine_id=MID)
        tunnel = box("tunnel", "mps:0", loopback=True, machine_id=OTHER)  # ssh -R: loopback, other machine
        claims = box("claims", "mps:0", loopback=False, machine_id=MID)  # self-reported id only
        t = topo([same, tunnel, claims], local=(OfferedDevice("mps:0"),))
        assert (t.same_machine(same), t.same_machine(tunnel), t.same_machine(claims)) == (True, False, False)
        assert (t.group("same/cpu"), t.group("same/mps:0")) == ("cpu", "mps:0")
        assert t.group("tunnel/cpu") == f"machine:{OTHER}/cpu"
        assert t.group("claims/cpu") == "claims/cpu"
        assert t.shares_local("same/cpu") and not t.shares_local("tunnel/cpu") and not t.shares_local("cpu")

    def test_two_agents_reporting_one_machine_share_its_cpu(self):
        t = topo([box("a", machine_id=OTHER), box("b", machine_id=OTHER), box("c")])
        assert t.group("a/cpu") == t.group("b/cpu") == f"machine:{OTHER}/cpu"
        assert t.group("c/cpu") == "c/cpu"

    def test_the_smallest_limit_among_online_providers_wins(self):
        t = topo([box("a", *cards("GPU-X"), limits={"cuda:0": 3}), box("b", *cards("GPU-X"))], Limits(gpu=2))
        gl = t.group_limit("card:GPU-X")
        assert (gl.limit, gl.limited_by) == (2, "b/cuda:0")

    def test_a_setting_override_beats_the_workers_own(self):
        t = topo([box("a", *cards("GPU-X"), limits={"cuda:0": 3})], Limits(overrides={"a/cuda:0": 5}))
        assert t.slot_limit("a/cuda:0") == 5

    def test_an_away_provider_counts_only_while_it_holds_a_run(self):
        t = topo([box("a", *cards("GPU-X"), limits={"cuda:0": 3}),
                  box("b", *cards("GPU-X"), state=DISCONNECTED)])
        assert t.group_limit("card:GPU-X").limit == 3
        assert t.group_limit("card:GPU-X", holding={"b/cuda:0"}) == t.group_limit("card:GPU-X", {"b/cuda:0"})
        assert t.group_limit("card:GPU-X", holding={"b/cuda:0"}).limited_by == "b/cuda:0"

    def test_a_draining_provider_still_counts(self):
        t = topo([box("a", *cards("GPU-X"), limits={"cuda:0": 3}), box("b", *cards("GPU-X"), state=DRAINING)])
        assert t.group_limit("card:GPU-X").limited_by == "b/cuda:0"

    def test_a_same_machine_worker_without_override_takes_this_servers_limit(self):
        same = dict(loopback=True, machine_id=MID)
        limits = Limits(cpu=2, overrides={"cpu": 6, "cuda:0": 2})
        t = topo([box("same", *cards("GPU-L0"), **same)], limits)
        assert (t.slot_limit("same/cpu"), t.slot_limit("same/cuda:0")) == (6, 2)
        assert t.group_limit("cuda:0") == t.group_limit("cuda:0")
        assert (t.group_limit("cuda:0").limit, t.group_limit("cuda:0").limited_by) == (2, "cuda:0")
        # ... and a smaller override of its own wins.
        t = topo([box("same", *cards("GPU-L0"), limits={"cuda:0": 1}, **same)], limits)
        assert (t.group_limit("cuda:0").limit, t.group_limit("cuda:0").limited_by) == (1, "same/cuda:0")

    def test_a_remote_worker_sharing_a_card_uses_its_own_default(self):
        t = topo([box("far", *cards("GPU-L0"))], Limits(overrides={"cuda:0": 3}))
        assert (t.group_limit("cuda:0").limit, t.group_limit("cuda:0").limited_by) == (1, "far/cuda:0")


# --- device resolution for worker targets ------------------------------------------------------


class TestResolveWorkerDevice:
    @pytest.mark.parametrize("option,graph,devices,offered,expect", [
        (None, None, None, ("cpu",), ("cpu", ("cpu",))),
        ("cuda", None, None, None, ("cuda", ())),
        (None, "cuda", None, None, ("cuda", ())),
        ("cuda:1", None, None, None, ("cuda:1", ("cuda:1",))),
        ("mps", None, None, None, ("mps:0", ("mps:0",))),
        ("auto", None, None, ("cpu", "cuda:0", "mps:0"), ("cuda", ())),
        ("auto", None, None, ("cpu", "mps:0"), ("mps:0", ("mps:0",))),
        ("auto", None, None, ("cpu",), ("cpu", ("cpu",))),
        (None, None, ["cuda:1", "cuda:0"], None, ("cuda:1", ("cuda:1", "cuda:0"))),
        ("cuda", None, ["cuda:1", "cuda:0"], None, ("cuda:1", ("cuda:1", "cuda:0"))),
        ("mps", None, ["mps:0"], None, ("mps:0", ("mps:0",))),
        ("auto", None, ["cuda:3"], None, ("cuda:3", ("cuda:3",))),
    ])
    def test_resolution(self, option, graph, devices, offered, expect):
        r = resolve_worker_device(option, graph, devices, offered)
        assert (r.device, r.devices) == expect

    def test_auto_for_a_worker_that_never_reported_is_refused(self):
        with pytest.raises(SubmitError) as exc:
            resolve_worker_device(None, "auto", None, None, worker="box")
        assert refused(exc) == ("device_auto_unknown", {"field": "graph.settings.device", "worker": "box"})
        assert "worker box has not reported its devices" in exc.value.message

    @pytest.mark.parametrize("option,devices,code", [
        ("cuda:0", ["cuda:1"], "device_not_in_set"), (None, ["cuda"], "device_set_bare_cuda"),
        ("gpu", None, "device_invalid"), (None, ["cpu", "cuda:0"], "device_set_mixed_kinds"),
    ])
    def test_refusals(self, option, devices, code):
        with pytest.raises(SubmitError) as exc:
            resolve_worker_device(option, None, devices, ("cpu",))
        assert exc.value.code == code


class TestResolveTarget:
    def test_local_is_exactly_resolve_run_device(self):
        q = Q()
        assert q.resolve_target(None, "cuda", None, None).devices == ("cuda:0",)
        assert q.resolve_target("local", "auto", None, None).device == "cuda:0"
        with pytest.raises(SubmitError) as exc:
            q.resolve_target("local", "cuda:1", None, None)
        assert exc.value.code == "device_unavailable"

    def test_auto_against_the_named_worker_or_everyone(self):
        q = Q(local_devices=())
        q.set_worker(box("gpu", "cuda:0"))
        q.set_worker(box("plain", "cpu"))
        assert q.resolve_target("gpu", "auto", None, None).device == "cuda"
        assert q.resolve_target("plain", "auto", None, None).device == "cpu"
        assert q.resolve_target("any", "auto", None, None).device == "cuda"
        with pytest.raises(SubmitError) as exc:
            q.resolve_target("nobody", "cpu", None, None)
        assert exc.value.code == "worker_unknown"

    def test_a_pool_resolves_against_one_shot_workers(self):
        q = Q()
        with pytest.raises(SubmitError):
            q.resolve_target(None, "auto", None, None, pool="one-shot")
        q.set_worker(box("shot", "mps:0", one_shot=True))
        assert q.resolve_target(None, "auto", None, None, pool="one-shot").device == "mps:0"


# --- refusals at submit -------------------------------------------------------------------------


class TestRefusals:
    def test_an_interactive_run_with_a_worker_target(self):
        q = Q()
        q.set_worker(box())
        for kw in ({"worker": "box"}, {"worker": "any"}, {"pool": "one-shot"}):
            with pytest.raises(SubmitError) as exc:
                q.q.submit(Run("r", 1, "cpu", ("cpu",), lane=INTERACTIVE, session="s", **kw))
            assert refused(exc)[0] == "worker_interactive" and exc.value.params["field"] == "options.lane"
            assert exc.value.status == 400 and q.get("r") is None

    def test_a_worker_never_enrolled_nor_seen(self):
        q = Q()
        with pytest.raises(SubmitError) as exc:
            q.add("r", "cpu", worker="ghost")
        assert refused(exc) == ("worker_unknown", {"field": "options.target.worker", "worker": "ghost"})
        assert q.waiting() == []

    def test_a_device_the_worker_does_not_offer(self):
        q = Q()
        q.set_worker(box("box", "cuda:0"))
        with pytest.raises(SubmitError) as exc:
            q.add("r", "cuda:1", ("cuda:1", "cuda:0"), worker="box")
        assert refused(exc) == ("device_not_offered", {
            "field": "options.target.devices", "worker": "box", "devices": ["cuda:1", "cuda:0"],
            "offered": ["cpu", "cuda:0"]})
        assert exc.value.message == ("options.target.devices: worker box does not offer cuda:1, cuda:0 "
                                     "(it last reported cpu, cuda:0)")
        with pytest.raises(SubmitError) as exc:
            q.q.check_placeable(Run("m", 9, "mps:0", ("mps:0",), worker="box"), device_field="graph.settings.device")
        assert exc.value.params["field"] == "graph.settings.device"
        q.set_worker(box("cpuonly", "cpu"))
        with pytest.raises(SubmitError):
            q.add("k", "cuda", worker="cpuonly")

    def test_the_last_report_counts_even_when_the_worker_is_away(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", state=DISCONNECTED))
        with pytest.raises(SubmitError):
            q.add("r", "cuda:1", worker="box")
        q.add("ok", "cuda:0", worker="box")  # away is not a refusal: it waits
        assert q.why("ok")[0] == "worker_disconnected"

    def test_runs_behind_a_run_waiting_for_its_worker_say_so(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", state=DISCONNECTED))
        q.add("a", "cuda:0", worker="box")
        q.add("b", "cuda:0", worker="box")
        assert q.go() == []
        assert q.why("a")[0] == "worker_disconnected"
        assert q.why("b") == ("behind_waiting_run",
                              "behind run a in the box/cuda:0 queue, which is held up: waiting for worker box to "
                              "reconnect",
                              {"run_id": "a", "name": None, "queue": "box/cuda:0", "code": "worker_disconnected",
                               "ahead": {"code": "worker_disconnected", "params": {"worker": "box"},
                                         "message": "waiting for worker box to reconnect"}})

    def test_an_enrolled_worker_that_never_reported_takes_any_device_and_graph(self):
        q = Q()
        q.set_worker(WorkerOffer("new", state=OFFLINE, missing_types=None))
        q.q.submit(Run("r", 1, "cuda:5", ("cuda:5",), worker="new"), node_types={"Anything"})
        assert q.why("r") == ("worker_disconnected", "waiting for worker new to reconnect", {"worker": "new"})

    def test_any_that_nobody_could_serve(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", state=DISCONNECTED))
        q.add("ok", "cuda", worker="any")  # only an away worker offers it (and this server): waits or runs
        with pytest.raises(SubmitError) as exc:
            q.add("r", "mps:0", worker="any")
        assert refused(exc) == ("device_not_offered", {"field": "options.device", "worker": "any",
                                                       "devices": ["mps:0"]})
        assert exc.value.message == "options.device: neither this server nor any worker it has seen offers mps:0"

    def test_any_with_a_set_only_this_server_has_is_refused_for_renumbering(self):
        q = Q(local_devices=cards("U0", "U1"))
        with pytest.raises(SubmitError) as exc:
            q.add("r", "cuda:0", ("cuda:0", "cuda:1"), worker="any")
        assert exc.value.code == "device_not_offered"
        assert "a worker renumbers the set from cuda:0" in exc.value.message
        with pytest.raises(SubmitError):
            q.add("one", "cuda:1", ("cuda:1",), worker="any")
        q.add("zero", "cuda:0", ("cuda:0",), worker="any")
        assert q.go() == [("zero", "local", ("cuda:0",))]

    def test_any_never_counts_one_shot_workers_as_offering(self):
        q = Q(local_devices=())
        q.set_worker(box("shot", "cuda:0", one_shot=True))
        with pytest.raises(SubmitError):
            q.add("r", "cuda", worker="any")

    def test_a_named_degraded_worker_missing_the_graphs_node_types(self):
        q = Q()
        q.set_worker(box("old", missing_types={"Conv2d", "Attention", "Unused"}))
        with pytest.raises(SubmitError) as exc:
            q.q.submit(Run("r", 1, "cuda:0", ("cuda:0",), worker="old"), node_types={"Conv2d", "Attention", "Add"})
        assert refused(exc) == ("worker_missing_node_types", {
            "field": "options.target.worker", "worker": "old", "missing_types": ["Attention", "Conv2d"]})
        assert exc.value.message == "options.target.worker: worker old lacks node types this graph uses: Attention, Conv2d"
        q.q.submit(Run("ok", 2, "cuda:0", ("cuda:0",), worker="old"), node_types={"Add"})
        assert q.go() == [("ok", "old", ("old/cuda:0",))]

    def test_a_pool_with_a_named_worker(self):
        q = Q()
        q.set_worker(box())
        with pytest.raises(SubmitError) as exc:
            q.q.submit(Run("r", 1, "cpu", ("cpu",), worker="box", pool="one-shot"))
        assert refused(exc)[0] == "pool_with_worker"

    def test_a_local_run_is_not_checked_here(self):
        q = Q()
        q.add("r", "cuda:7")  # resolve_run_device refuses this upstream; the queue keeps its old contract
        assert q.waiting()[0].run_id == "r"


# --- placement --------------------------------------------------------------------------------


class TestNamedWorker:
    def test_the_requested_device(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.add("a", "cuda:1", worker="box")
        q.add("b", "cuda:1", worker="box")
        q.add("c", "cpu", worker="box")
        q.add("d", "cpu", worker="box")
        q.add("e", "cpu", worker="box")
        assert q.go() == [("a", "box", ("box/cuda:1",)), ("c", "box", ("box/cpu",)), ("d", "box", ("box/cpu",))]
        assert q.position("b") == 1 and q.why("b") is None  # its turn: the card is busy
        assert q.done("a") == [("b", "box", ("box/cuda:1",))]
        p = q.placement("b")
        assert (p.worker, p.device, p.devices, p.queue_key) == ("box", "cuda:1", ("cuda:1",), "box/cuda:1")

    def test_the_kind_takes_the_first_free_card(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.add("pin", "cuda:0", worker="box")
        q.add("k1", "cuda", worker="box")
        q.add("k2", "cuda", worker="box")
        assert q.go() == [("pin", "box", ("box/cuda:0",)), ("k1", "box", ("box/cuda:1",))]
        assert q.why("k2") is None
        assert q.done("pin") == [("k2", "box", ("box/cuda:0",))]
        assert q.placement("k2").device == "cuda:0"

    def test_a_device_set_takes_every_slot_at_once_and_gives_them_back(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", "cuda:1", "cuda:2"))
        q.add("busy", "cuda:1", worker="box")
        q.add("set", "cuda:2", ("cuda:2", "cuda:1"), worker="box")
        q.add("later", "cuda:2", worker="box")  # same queue as the set: FIFO
        q.add("other", "cuda:0", worker="box")
        assert q.ids() == ["busy", "other"]
        assert q.why("set") == ("waiting_for_set_devices",
                                "waiting for box/cuda:1: a device-set run starts when every device is free",
                                {"devices": ["box/cuda:1"]})
        assert q.done("busy") == [("set", "box", ("box/cuda:2", "box/cuda:1"))]
        assert q.placement("set").devices == ("cuda:2", "cuda:1")
        assert q.done("set") == [("later", "box", ("box/cuda:2",))]

    def test_a_waiting_set_reserves_its_free_cards_on_the_worker(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.add("busy", "cuda:1", worker="box")
        q.add("set", "cuda:1", ("cuda:1", "cuda:0"), worker="box")
        q.go()
        q.add("sneak", "cuda:0", worker="box")
        q.add("kind", "cuda", worker="box")  # could take either card: reserves nothing, no reason
        assert q.ids() == []
        assert q.why("set") is None  # its own card is busy: its turn
        assert q.why("sneak") == ("device_reserved", "box/cuda:0 is reserved for run set, which waits ahead of this run",
                                  {"device": "box/cuda:0", "run_id": "set", "name": None})
        assert q.why("kind") is None
        assert q.done("busy") == [("set", "box", ("box/cuda:1", "box/cuda:0"))]

    def test_waits_while_draining_disconnected_or_offline_and_starts_when_back(self):
        q = Q()
        q.set_worker(box("gpu-box", "cuda:0", state=DRAINING))
        q.add("r", "cuda:0", worker="gpu-box")
        assert q.go() == []
        assert q.why("r") == ("worker_draining", "worker gpu-box is draining", {"worker": "gpu-box"})
        for state in (DISCONNECTED, OFFLINE):
            q.set_worker(box("gpu-box", "cuda:0", state=state))
            assert q.go() == []
            assert q.why("r") == ("worker_disconnected", "waiting for worker gpu-box to reconnect",
                                  {"worker": "gpu-box"})
        q.set_worker(box("gpu-box", "cuda:0"))
        assert q.go() == [("r", "gpu-box", ("gpu-box/cuda:0",))]

    def test_a_waiting_head_for_an_away_worker_reserves_nothing(self):
        q = Q()
        q.set_worker(box("same", *cards("GPU-L0"), loopback=True, machine_id=MID, state=DISCONNECTED))
        q.add("w", "cuda:0", worker="same")
        q.add("local", "cuda:0")
        assert q.ids() == ["local"]

    def test_a_worker_that_reports_fewer_devices_later(self):
        q = Q()
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.set_worker(box("box", "cuda:0", state=DISCONNECTED))
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.add("r", "cuda:1", worker="box")
        q.set_worker(box("box", "cuda:0"))
        assert q.go() == []
        assert q.why("r") == ("waiting_for_offer", "waiting for worker box to offer cuda:1",
                              {"devices": ["cuda:1"], "worker": "box"})

    def test_draining_does_not_stop_runs_already_executing(self):
        q = Q()
        q.set_worker(box("box", "cuda:0"))
        q.add("a", "cuda:0", worker="box")
        q.go()
        q.set_worker(box("box", "cuda:0", state=DRAINING))
        assert q.is_running("a") and q.statistics().queue("box/cuda:0").running == 1
        assert q.q.finish("a").run_id == "a"


class TestAny:
    def test_first_connected_non_draining_complete_worker_in_name_order_then_this_server(self):
        q = Q(Limits(cpu=1))
        q.set_worker(box("d-drain", "cpu", state=DRAINING))
        q.set_worker(box("c-degraded", "cpu", missing_types={"X"}))
        q.set_worker(box("b-one", "cpu"))
        q.set_worker(box("e-away", "cpu", state=DISCONNECTED))
        q.set_worker(box("a-shot", "cpu", one_shot=True))
        q.set_worker(box("f-two", "cpu"))
        q.set_worker(WorkerOffer("g-silent", missing_types=None))
        q.set_worker(box("h-extra", "cpu", missing_types=set()))  # extra types only: complete
        for i in range(5):
            q.add(f"r{i}", "cpu", worker="any")
        assert q.go() == [("r0", "b-one", ("b-one/cpu",)), ("r1", "f-two", ("f-two/cpu",)),
                          ("r2", "h-extra", ("h-extra/cpu",)), ("r3", "local", ("cpu",))]
        assert q.why("r4") is None and q.placement("r3").device == "cpu"

    def test_the_kind_on_this_server_is_cuda_0(self):
        q = Q(local_devices=cards("U0", "U1"))
        q.add("a", "cuda", worker="any")
        q.add("b", "cuda", worker="any")
        assert q.go() == [("a", "local", ("cuda:0",))]
        assert q.placement("a").device == "cuda:0"

    def test_a_renumbered_set_never_runs_here_and_waits_for_a_worker(self):
        q = Q(local_devices=cards("U0", "U1"))
        q.set_worker(box("box", "cuda:0", "cuda:1", state=DISCONNECTED))
        q.add("set", "cuda:0", ("cuda:0", "cuda:1"), worker="any")
        assert q.go() == []
        assert q.why("set") == ("waiting_for_offer", "waiting for a worker that offers cuda:0, cuda:1",
                                {"devices": ["cuda:0", "cuda:1"], "worker": "any"})
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        assert q.go() == [("set", "box", ("box/cuda:0", "box/cuda:1"))]

    def test_waiting_because_every_worker_that_offers_it_drains(self):
        q = Q(local_devices=())
        q.set_worker(box("gpu-box", "cuda:0", state=DRAINING))
        q.add("r", "cuda", worker="any")
        assert q.why("r") == ("waiting_for_offer", "waiting for a worker that offers cuda: gpu-box is draining",
                              {"devices": ["cuda"], "worker": "any", "draining": ["gpu-box"]})
        q.set_worker(box("gpu-box-2", "cuda:0", state=DRAINING))
        assert q.why("r")[1] == "waiting for a worker that offers cuda: gpu-box, gpu-box-2 are draining"
        q.set_worker(box("gpu-box-2", "cuda:0"))
        assert q.go() == [("r", "gpu-box-2", ("gpu-box-2/cuda:0",))]

    def test_any_sets_reserve_nothing(self):
        q = Q(local_devices=())
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.add("busy", "cuda:1", worker="box")
        q.add("set", "cuda:0", ("cuda:0", "cuda:1"), worker="any")
        q.add("single", "cuda:0", worker="box")
        assert q.ids() == ["busy", "single"]
        assert q.why("set")[0] == "waiting_for_set_devices"  # one place it could go: says what it waits for

    def test_a_sweep_over_two_workers_runs_two_at_once_and_takes_whichever_frees_first(self):
        q = Q(local_devices=())
        q.set_worker(box("a", "cuda:0"))
        q.set_worker(box("b", "cuda:0"))
        for i in range(4):
            q.add(f"v{i}", "cuda", worker="any")
        assert q.go() == [("v0", "a", ("a/cuda:0",)), ("v1", "b", ("b/cuda:0",))]
        assert q.done("v1") == [("v2", "b", ("b/cuda:0",))]
        assert q.done("v0") == [("v3", "a", ("a/cuda:0",))]


class TestSharedSlotsAndFifo:
    def same(self, q: Q, name: str = "same", **kw) -> None:
        q.set_worker(box(name, *cards("GPU-L0"), loopback=True, machine_id=MID, **kw))

    def test_a_local_run_and_a_same_machine_worker_run_never_share_a_card_under_limit_1(self):
        q = Q()
        self.same(q)
        q.add("w", "cuda:0", worker="same")
        q.add("l", "cuda:0")
        assert q.ids() == ["w"]
        assert q.why("l") is None
        stats = q.statistics()
        assert (stats.queue("cuda:0").running, stats.queue("cuda:0").limit) == (1, 1)
        assert q.done("w") == [("l", "local", ("cuda:0",))]

    def test_the_cpu_of_a_same_machine_worker_is_this_servers(self):
        q = Q(Limits(cpu=2))
        self.same(q)
        q.add("a", "cpu")
        q.add("b", "cpu", worker="same")
        q.add("c", "cpu", worker="same")
        assert q.ids() == ["a", "b"]

    @pytest.mark.parametrize("kw", [{"loopback": True, "machine_id": OTHER}, {"loopback": False, "machine_id": MID}])
    def test_a_tunnel_or_a_self_reported_id_alone_shares_nothing(self, kw):
        q = Q(Limits(cpu=1))
        q.set_worker(box("w", "cpu", **kw))
        q.add("a", "cpu")
        q.add("b", "cpu", worker="w")
        assert q.ids() == ["a", "b"]

    def test_the_oldest_head_among_queues_sharing_a_slot_goes_first(self):
        q = Q()
        self.same(q)
        q.add("hold", "cuda:0")
        q.go()
        q.add("w1", "cuda:0", worker="same")  # <worker>/cuda:0
        q.add("any1", "cuda", worker="any")  # any/cuda (the same card, here or on the worker)
        q.add("l1", "cuda:0")
        q.add("w2", "cuda", worker="same")
        assert q.done("hold") == [("w1", "same", ("same/cuda:0",))]
        assert q.done("w1") == [("any1", "same", ("same/cuda:0",))]
        assert q.done("any1") == [("l1", "local", ("cuda:0",))]
        assert q.done("l1") == [("w2", "same", ("same/cuda:0",))]

    def test_two_workers_offering_one_card_take_runs_as_one_card(self):
        q = Q(local_devices=())
        q.set_worker(box("ssh", *cards("GPU-X")))
        q.set_worker(box("enrolled", *cards(None, "GPU-X"), limits={"cuda:1": 4}))
        q.add("a", "cuda", worker="ssh")
        q.add("b", "cuda:1", worker="enrolled")
        assert q.ids() == ["a"]
        rows = {r.slot: r for r in q.slot_info()}
        assert rows["enrolled/cuda:1"].same_card == ("ssh/cuda:0",)
        assert (rows["enrolled/cuda:1"].limit, rows["enrolled/cuda:1"].limited_by) == (1, "ssh/cuda:0")
        assert (rows["enrolled/cuda:1"].taken, rows["ssh/cuda:0"].taken) == (1, 1)
        assert rows["enrolled/cuda:0"].same_card == () and rows["enrolled/cuda:0"].uuid is None

    def test_an_away_offerer_stops_counting_unless_it_holds_a_run(self):
        q = Q(local_devices=())
        q.set_worker(box("a", *cards("GPU-X"), limits={"cuda:0": 2}))
        q.set_worker(box("b", *cards("GPU-X")))
        q.add("a1", "cuda:0", worker="a")
        q.add("a2", "cuda:0", worker="a")
        assert q.ids() == ["a1"]  # b's limit of 1 applies while b is online
        q.set_worker(box("b", *cards("GPU-X"), state=DISCONNECTED))
        assert q.ids() == ["a2"]  # b is away and holds nothing there: a's limit
        q.finish("a1")
        q.finish("a2")
        q.set_worker(box("b", *cards("GPU-X")))
        q.add("b1", "cuda:0", worker="b")
        q.go()
        q.set_worker(box("b", *cards("GPU-X"), state=DISCONNECTED))  # b holds b1 while away
        q.add("a3", "cuda:0", worker="a")
        assert q.ids() == []
        assert [(r.limit, r.limited_by) for r in q.slot_info("a")] == [(2, "a/cpu"), (1, "b/cuda:0")]

    def test_slot_info_for_the_workers_panel(self):
        q = Q(Limits(overrides={"cuda:0": 2}))
        self.same(q)
        q.set_worker(box("far", *cards("GPU-F")))
        q.add("l", "cuda:0")
        q.go()
        rows = {r.slot: r for r in q.slot_info()}
        assert set(rows) == {"cpu", "cuda:0", "same/cpu", "same/cuda:0", "far/cpu", "far/cuda:0"}
        shared = rows["same/cuda:0"]
        assert (shared.provider, shared.device, shared.uuid, shared.limit, shared.taken, shared.limited_by,
                shared.same_card, shared.shared_with_local) == \
            ("same", "cuda:0", "GPU-L0", 2, 1, "cuda:0", ("cuda:0",), True)
        assert rows["cuda:0"].same_card == ("same/cuda:0",) and not rows["cuda:0"].shared_with_local
        assert rows["same/cpu"].shared_with_local and rows["same/cpu"].same_card == ("cpu",)
        assert not rows["far/cuda:0"].shared_with_local and rows["far/cuda:0"].same_card == ()
        assert [r.slot for r in q.slot_info("local")] == ["cpu", "cuda:0"]
        assert q.same_machine("same") and not q.same_machine("far") and not q.same_machine("nobody")

    def test_runs_keep_the_group_they_started_in(self):
        q = Q()
        self.same(q)
        q.add("w", "cuda:0", worker="same")
        q.go()
        q.set_worker(box("same", *cards("GPU-OTHER"), loopback=True, machine_id=MID))  # reports anew
        q.add("l", "cuda:0")
        assert q.ids() == []  # w still counts against this server's card
        q.finish("w")
        assert q.ids() == ["l"]


class TestSeededOnWorkers:
    def test_a_seeded_worker_run_does_not_take_this_servers_gate(self):
        q = Q()
        q.set_worker(box("a", "cuda:0"))
        q.set_worker(box("b", "cuda:0"))
        q.add("local", "cpu")
        q.add("s1", "cuda:0", worker="a", seeded=True)
        q.add("s2", "cuda:0", worker="b", seeded=True)
        q.add("after", "cpu")
        assert q.ids() == ["local", "s1", "s2", "after"]
        assert q.statistics().seeded_running is None

    def test_a_local_seeded_run_neither_waits_for_nor_holds_up_worker_runs(self):
        q = Q()
        q.set_worker(box("a", "cuda:0"))
        q.add("w1", "cuda:0", worker="a")
        q.add("seed", "cpu", seeded=True)
        q.add("w2", "cpu", worker="a")
        assert q.ids() == ["w1", "seed", "w2"]
        q.add("l", "cpu")
        assert q.ids() == [] and q.why("l")[0] == "seeded_run_executing"

    def test_a_waiting_local_seeded_run_does_not_hold_up_worker_runs(self):
        q = Q()
        q.set_worker(box("a", "cpu"))
        q.add("l", "cuda:0")
        q.add("seed", "cpu", seeded=True)
        q.add("w", "cpu", worker="a")
        q.add("l2", "cuda:3")
        assert q.ids() == ["l", "w"]
        assert q.why("l2")[0] == "waiting_for_seeded_run"

    def test_a_seeded_any_run_that_lands_here_runs_alone(self):
        q = Q(local_devices=())
        q.add("s", "cpu", worker="any", seeded=True)
        q.add("l", "cpu")
        assert q.ids() == ["s"]
        assert q.statistics().seeded_running == "s"
        assert q.why("l")[0] == "seeded_run_executing"

    def test_an_any_run_skips_this_server_while_a_seeded_run_executes_here(self):
        q = Q()
        q.set_worker(box("a", "cpu"))
        q.add("seed", "cuda:0", seeded=True)
        q.add("x", "cpu", worker="any")
        q.add("y", "cpu", worker="any")
        q.add("z", "cpu", worker="any")
        assert q.ids() == ["seed", "x", "y"]
        assert q.why("z") is None  # the worker is full: its turn (this server is busy with the seeded run)
        assert q.done("seed") == [("z", "local", ("cpu",))]


class TestOneShot:
    def test_a_pool_run_waits_for_a_one_shot_worker_and_each_takes_one_run(self):
        q = Q()
        q.set_worker(box("regular", "cuda:0"))
        q.add("p1", "cuda", pool="one-shot")
        q.add("p2", "cuda", pool="one-shot")
        assert q.go() == []
        assert q.why("p1") == ("one_shot_pool", "waiting for a one-shot worker that offers cuda",
                               {"devices": ["cuda"], "pool": "one-shot"})
        q.set_worker(box("shot.1", "cuda:0", one_shot=True))
        assert q.go() == [("p1", "shot.1", ("shot.1/cuda:0",))]
        q.finish("p1")
        assert q.go() == []  # it took its one run
        q.set_worker(box("shot.2", "cuda:0", "cuda:1", one_shot=True))
        assert q.go() == [("p2", "shot.2", ("shot.2/cuda:0",))]
        assert q.placement("p2").queue_key == "pool:one-shot/cuda"

    def test_run_id_takes_its_run_out_of_turn_and_no_other(self):
        q = Q()
        q.add("p1", "cpu", pool="one-shot")
        q.add("p2", "cpu", pool="one-shot")
        q.set_worker(box("shot", "cpu", one_shot=True, run_id="p2"))
        assert q.go() == [("p2", "shot", ("shot/cpu",))]
        assert q.why("p1")[0] == "one_shot_pool"

    def test_a_run_naming_a_one_shot_worker(self):
        q = Q()
        q.set_worker(box("shot", "cpu", one_shot=True, run_id="other"))
        q.add("n", "cpu", worker="shot")
        assert q.why("n") == ("one_shot_run_id", "one-shot worker shot was started for run other",
                              {"worker": "shot", "run_id": "other", "name": None})
        q.set_worker(box("shot", "cpu", one_shot=True))
        q.add("m", "cpu", worker="shot")
        assert q.ids() == ["n"]
        assert q.why("m") == ("one_shot_taken", "one-shot worker shot has already taken its run", {"worker": "shot"})

    def test_a_run_naming_a_one_shot_worker_that_left_waits_for_one_to_start(self):
        q = Q()
        q.set_worker(box("shot", "cpu", one_shot=True, state=DISCONNECTED))
        q.add("n", "cpu", worker="shot")
        assert q.go() == []
        assert q.why("n") == ("one_shot_start", "waiting for one-shot worker shot to start", {"worker": "shot"})
        q.set_worker(box("plain", "cpu", state=DISCONNECTED))  # a regular worker reconnects instead
        q.add("p", "cpu", worker="plain")
        assert q.why("p")[0] == "worker_disconnected"
        q.set_worker(box("shot", "cpu", one_shot=True))
        assert q.ids() == ["n"]

    def test_the_run_a_one_shot_worker_was_started_for_is_said_by_its_name(self):
        q = Q()
        q.add("other", "cpu", name="the job")  # runs here; the one-shot worker names it all the same
        assert q.ids() == ["other"]
        q.set_worker(box("shot", "cpu", one_shot=True, run_id="other"))
        q.add("n", "cpu", worker="shot")
        assert q.why("n") == ("one_shot_run_id", "one-shot worker shot was started for run 'the job'",
                              {"worker": "shot", "run_id": "other", "name": "the job"})

    def test_any_never_uses_a_one_shot_worker(self):
        q = Q(Limits(cpu=1))
        q.set_worker(box("shot", "cpu", one_shot=True))
        q.add("hold", "cpu")
        q.add("a", "cpu", worker="any")
        assert q.ids() == ["hold"]


class TestRemoveAndAdopt:
    def test_removing_a_worker_returns_its_waiting_runs(self):
        q = Q()
        q.set_worker(box("box", "cuda:0"))
        q.add("run", "cuda:0", worker="box")
        q.add("w1", "cuda:0", worker="box")
        q.add("any", "cuda", worker="any")
        q.add("w2", "cuda", worker="box")
        q.go()
        gone = q.remove_worker("box")
        assert [r.run_id for r in gone] == ["w1", "w2"]
        assert [r.run_id for r in q.waiting()] == [] and q.is_running("run") and q.is_running("any")
        assert q.worker("box") is None and q.remove_worker("box") == []
        assert q.statistics().queue("box/cuda:0").running == 1  # held until finish
        q.finish("run")
        assert q.statistics().queue("box/cuda:0") is None
        with pytest.raises(SubmitError):
            q.add("again", "cpu", worker="box")

    def test_adopting_a_run_after_a_restart_keeps_its_slots(self):
        q = Q()
        q.set_worker(box("same", *cards("GPU-L0"), loopback=True, machine_id=MID, state=DISCONNECTED))
        q.q.adopt(Run("old", 5, "cuda:0", ("cuda:0",), worker="same"), "same", ("same/cuda:0",))
        q.n = 5
        q.add("l", "cuda:0")
        assert q.ids() == []
        p = q.placement("old")
        assert (p.worker, p.slots, p.device) == ("same", ("same/cuda:0",), "cuda:0")
        q.finish("old")
        assert q.ids() == ["l"]

    def test_adopt_refuses_foreign_slots_and_duplicates(self):
        q = Q()
        run = Run("old", 1, "cpu", ("cpu",), worker="box")
        with pytest.raises(ValueError):
            q.q.adopt(run, "box", ("other/cpu",))
        q.q.adopt(run, "box", ("box/cpu",))
        with pytest.raises(ValueError):
            q.q.adopt(run, "box", ("box/cpu",))

    def test_statistics_list_worker_queues(self):
        q = Q()
        q.set_worker(box("box", "cuda:0"))
        q.add("a", "cuda", worker="box")
        q.add("b", "cuda", worker="box")
        q.go()
        stats = q.statistics()
        assert stats.queue("box/cuda").waiting == 1
        assert (stats.queue("box/cuda:0").running, stats.queue("box/cuda:0").limit) == (1, 1)
        assert split_slot("box/cuda:0") == ("box", "cuda:0") and split_slot("cpu") == ("local", "cpu")


def test_a_single_device_may_be_given_as_a_set_of_one_or_not_at_all():
    """RunService passes `devices=()` for a worker run on one device; `(device,)` means the same."""
    def run(devices):
        q = Q()
        q.set_worker(box("box", "cuda:0", "cuda:1"))
        q.q.submit(Run("a", 1, "cuda:1", devices, worker="box"))
        q.q.submit(Run("b", 2, "cuda:1", devices, worker="box"))
        with pytest.raises(SubmitError) as exc:
            q.q.submit(Run("c", 3, "cuda:2", tuple(d.replace("1", "2") for d in devices), worker="box"))
        return q.go(), q.why("b"), exc.value.params["field"]

    assert run(()) == run(("cuda:1",)) == ([("a", "box", ("box/cuda:1",))], None, "options.device")
