"""The pure run scheduler: limits and overrides, FIFO queues, device sets and their reservations,
the seeded gate, the interactive lane, positions, reasons, statistics. (Device resolution:
test_device_sets.py.)"""

from __future__ import annotations

import pytest

from codefy_jupyter.core.scheduling.queue import (
    INTERACTIVE, Limits, Notice, Placement, Run, RunQueue, SubmitError, build_limits, parse_concurrency_overrides,
)


# --- helpers ----------------------------------------------------------------------------------


class Q:
    """A RunQueue that numbers submits itself, and answers started run ids."""

    def __init__(self, limits: Limits | None = None, **kw) -> None:
        self.q = RunQueue(limits or Limits(), **kw)
        self.n = 0

    def add(self, run_id: str, device: str = "cpu", devices: tuple[str, ...] = (), **kw) -> None:
        self.n += 1
        self.q.submit(Run(run_id, self.n, device, devices, **kw))

    def go(self) -> list[str]:
        return [p.run_id for p in self.q.schedule()]

    def done(self, *run_ids: str) -> list[str]:
        for rid in run_ids:
            self.q.finish(rid)
        return self.go()

    def __getattr__(self, name):
        return getattr(self.q, name)


def code(excinfo) -> str:
    return excinfo.value.code


# --- limits -----------------------------------------------------------------------------------


class TestLimits:
    def test_defaults(self):
        lim = Limits()
        assert [lim.limit(s) for s in ("cpu", "cuda:0", "cuda:7", "mps:0")] == [2, 1, 1, 1]

    def test_worker_slots_use_the_defaults_by_kind(self):
        lim = Limits(gpu=3, cpu=5)
        assert (lim.limit("box/cuda:0"), lim.limit("box/cpu")) == (3, 5)

    def test_overrides_win(self):
        lim = Limits(overrides={"cuda:0": 2, "box/cuda:0": 4})
        assert (lim.limit("cuda:0"), lim.limit("cuda:1"), lim.limit("box/cuda:0")) == (2, 1, 4)

    @pytest.mark.parametrize("kw", [{"gpu": 0}, {"cpu": -1}, {"overrides": {"cpu": 0}}, {"gpu": 1.5}, {"cpu": True}])
    def test_limits_below_one_are_programming_errors(self, kw):
        with pytest.raises(ValueError):
            Limits(**kw)

    def test_parse_overrides(self):
        limits, warnings = parse_concurrency_overrides("cuda:0=2, cpu=8 ,local/cuda:1=3,gpu-box-1/cuda:0=3,cuda=4")
        assert limits == {"cuda:0": 4, "cpu": 8, "cuda:1": 3, "gpu-box-1/cuda:0": 3}
        assert [w.code for w in warnings] == ["concurrency_override_repeated"]
        assert warnings[0].params == {"entry": "cuda=4", "slot": "cuda:0"}

    def test_worker_entries_never_apply_to_this_server(self):
        limits, warnings = parse_concurrency_overrides("gpu-box-1/cuda:0=3,box.two/mps=2,local/mps=5")
        lim = Limits(overrides=limits)
        assert (lim.limit("cuda:0"), lim.limit("gpu-box-1/cuda:0"), lim.limit("box.two/mps:0"), lim.limit("mps:0")) \
            == (1, 3, 2, 5)
        assert warnings == ()

    @pytest.mark.parametrize("text", ["", None, " ", ",", "cpu=3,"])
    def test_empty_entries_are_quiet(self, text):
        _, warnings = parse_concurrency_overrides(text)
        assert warnings == ()

    @pytest.mark.parametrize("entry", [
        "cuda:0", "=2", "cuda:0=", "cuda:0=x", "cuda:0=1.5", "auto=2", "gpu=2", "any/cuda:0=2", "Box/cuda:0=2",
        "box/=2", "a/b/cuda:0=2", "box/auto=1", "-box/cpu=1", "cpu==2", "cpu=2=3", "cuda:0 2",
    ])
    def test_malformed_entries_are_ignored_with_a_warning_naming_them(self, entry):
        limits, warnings = parse_concurrency_overrides(f"cpu=4,{entry},cuda:1=2")
        assert limits == {"cpu": 4, "cuda:1": 2}
        assert [(w.code, w.params) for w in warnings] == [("concurrency_override_malformed", {"entry": entry})]
        assert entry in warnings[0].message

    @pytest.mark.parametrize("entry,value", [("cpu=0", 0), ("cpu=-3", -3)])
    def test_limits_below_one_become_one(self, entry, value):
        limits, warnings = parse_concurrency_overrides(entry)
        assert limits == {"cpu": 1}
        assert [(w.code, w.params) for w in warnings] == [
            ("concurrency_override_below_one", {"entry": entry, "slot": "cpu", "value": value})]

    def test_plus_sign_and_padding(self):
        assert parse_concurrency_overrides("cpu= +3 ")[0] == {"cpu": 3}

    def test_build_limits(self):
        limits, warnings = build_limits(0, -2, "cuda:0=2,nope")
        assert (limits.gpu, limits.cpu, limits.overrides) == (1, 1, {"cuda:0": 2})
        assert [w.code for w in warnings] == [
            "concurrency_limit_below_one", "concurrency_limit_below_one", "concurrency_override_malformed"]
        assert warnings[0].params == {"setting": "run_queue_max_concurrent_gpu", "value": 0}

    def test_build_limits_defaults(self):
        assert build_limits() == (Limits(), ())


# --- runs -------------------------------------------------------------------------------------


class TestRun:
    def test_slots_and_queue_key(self):
        assert Run("a", 1, "cuda:0").slots == ("cuda:0",)
        r = Run("a", 1, "cuda:1", ("cuda:1", "cuda:0"))
        assert (r.slots, r.queue_key) == (("cuda:1", "cuda:0"), "cuda:1")

    @pytest.mark.parametrize("kw", [
        {"device": "cuda:0", "devices": ("cuda:1", "cuda:0")},
        {"device": "cuda:0", "devices": ("cuda:0", "cuda:0")},
        {"device": "cpu", "lane": "express"},
    ])
    def test_inconsistent_runs_are_programming_errors(self, kw):
        with pytest.raises(ValueError):
            Run("a", 1, **kw)

    def test_duplicate_ids_and_decreasing_order_are_refused(self):
        q = RunQueue()
        q.submit(Run("a", 5, "cpu"))
        with pytest.raises(ValueError):
            q.submit(Run("a", 6, "cpu"))
        with pytest.raises(ValueError):
            q.submit(Run("b", 5, "cpu"))
        q.schedule()
        with pytest.raises(ValueError):
            q.submit(Run("a", 7, "cpu"))  # still running

    def test_interactive_limit_must_be_positive(self):
        with pytest.raises(ValueError):
            RunQueue(interactive_limit=0)


# --- one queue per device ---------------------------------------------------------------------


class TestQueues:
    def test_one_run_per_card_in_submit_order(self):
        q = Q()
        for rid in "abc":
            q.add(rid, "cuda:0")
        assert q.go() == ["a"]
        assert q.go() == []  # idempotent
        assert q.done("a") == ["b"]
        assert q.done("b") == ["c"]
        assert q.done("c") == []

    def test_two_on_the_cpu(self):
        q = Q()
        for rid in "abcd":
            q.add(rid, "cpu")
        assert q.go() == ["a", "b"]
        assert q.done("b") == ["c"]
        assert q.done("a", "c") == ["d"]

    def test_a_saturated_gpu_never_delays_the_cpu_and_cards_never_wait_on_each_other(self):
        q = Q()
        q.add("g1", "cuda:0")
        q.add("g2", "cuda:0")
        q.add("c1", "cpu")
        q.add("h1", "cuda:1")
        assert q.go() == ["g1", "c1", "h1"]
        assert q.is_waiting("g2") and q.reason("g2") is None

    def test_overrides_raise_a_slot(self):
        q = Q(Limits(overrides={"cuda:0": 2, "cpu": 1}))
        for rid in "abc":
            q.add(rid, "cuda:0")
        q.add("x", "cpu")
        q.add("y", "cpu")
        assert q.go() == ["a", "b", "x"]

    def test_placement_fields(self):
        q = Q()
        q.add("s", "cuda:1", ("cuda:1", "cuda:0"), seeded=True)
        assert q.q.schedule() == [Placement("s", "cuda:1", "cuda:1", ("cuda:1", "cuda:0"), "queued", True)]

    def test_finish_unknown_or_waiting_run(self):
        q = Q()
        q.add("a", "cuda:0")
        q.add("b", "cuda:0")
        q.go()
        for rid in ("b", "zzz"):
            with pytest.raises(KeyError):
                q.finish(rid)
        assert q.finish("a").run_id == "a"
        with pytest.raises(KeyError):
            q.finish("a")

    def test_positions_count_only_their_own_queue(self):
        q = Q()
        q.add("g1", "cuda:0")
        q.add("g2", "cuda:0")
        q.add("c1", "cpu")
        q.add("c2", "cpu")
        q.add("c3", "cpu")
        q.add("c4", "cpu")
        q.add("g3", "cuda:0")
        q.go()
        assert q.positions() == {"g2": 1, "g3": 2, "c3": 1, "c4": 2}
        assert [q.position(r) for r in ("g2", "g3", "c3", "c4")] == [1, 2, 1, 2]
        assert q.position("g1") is None and q.position("nope") is None

    def test_get_and_listing(self):
        q = Q()
        q.add("a", "cuda:0")
        q.add("b", "cuda:0")
        q.go()
        assert q.get("a").run_id == "a" and q.get("b").run_id == "b" and q.get("c") is None
        assert [r.run_id for r in q.running()] == ["a"] and [r.run_id for r in q.waiting()] == ["b"]
        assert q.is_running("a") and not q.is_waiting("a")


# Positions before the first schedule(): runs are in their queues at once.
def test_positions_before_schedule():
    q = Q()
    q.add("a", "cpu")
    q.add("b", "cpu")
    assert (q.position("a"), q.position("b")) == (1, 2)


# --- cancel -----------------------------------------------------------------------------------


class TestCancel:
    def test_a_waiting_run_leaves_the_line_at_once(self):
        q = Q()
        for rid in "abcd":
            q.add(rid, "cuda:0")
        q.go()
        assert q.cancel("c") is True
        assert q.positions() == {"b": 1, "d": 2}
        assert not q.is_waiting("c") and q.get("c") is None
        assert q.cancel("c") is False

    def test_an_executing_or_unknown_run_is_not_cancelled_here(self):
        q = Q()
        q.add("a", "cuda:0")
        q.go()
        assert q.cancel("a") is False and q.is_running("a")
        assert q.cancel("nope") is False

    def test_cancelling_the_head_offers_the_next(self):
        q = Q()
        q.add("a", "cuda:0")
        q.add("b", "cuda:0")
        assert q.cancel("a") is True
        assert q.go() == ["b"]

    def test_the_last_run_of_a_queue(self):
        q = Q()
        q.add("a", "cuda:0")
        assert q.cancel("a") and q.go() == []
        assert q.statistics().queue("cuda:0") is None

    def test_cancelling_a_set_run_drops_its_reservation(self):
        q = Q()
        q.add("x", "cuda:1")
        q.add("s", "cuda:0", ("cuda:0", "cuda:1"))
        q.add("y", "cuda:0")  # behind s in cuda:0's queue
        q.add("z", "cuda:2", ("cuda:2", "cuda:0"))  # a later set run needing cuda:0
        assert q.go() == ["x"]
        assert q.reason("z").code == "device_reserved"
        assert q.cancel("s")
        assert q.go() == ["y"]  # the head of cuda:0 now, older than z


# --- device sets and reservations ------------------------------------------------------------


class TestDeviceSetAdmission:
    def test_a_set_run_takes_every_slot_together_and_gives_them_all_back(self):
        q = Q()
        q.add("s", "cuda:0", ("cuda:0", "cuda:1"))
        q.add("a", "cuda:0")
        q.add("b", "cuda:1")
        assert q.go() == ["s"]
        st = q.statistics()
        assert (st.queue("cuda:0").running, st.queue("cuda:1").running) == (1, 1)
        assert q.done("s") == ["a", "b"]

    def test_a_set_waits_for_every_device_and_reserves_a_free_card(self):
        q = Q()
        q.add("x", "cuda:1")
        q.add("s", "cuda:0", ("cuda:0", "cuda:1"), name="wide")
        q.add("later", "cuda:0")
        q.add("other", "cuda:2")
        assert q.go() == ["x", "other"]
        # cuda:0 is free but reserved: it stays idle until cuda:1 frees.
        assert q.reason("s").to_dict()["params"] == {"devices": ["cuda:1"]}
        assert q.reason("s").code == "waiting_for_set_devices"
        assert q.reason("later").to_dict() == {  # behind s, by its name, and why s waits
            "code": "behind_waiting_run",
            "params": {"run_id": "s", "name": "wide", "queue": "cuda:0", "code": "waiting_for_set_devices",
                       "ahead": q.reason("s").to_dict()},
            "message": "behind run 'wide' in the cuda:0 queue, which is held up: waiting for cuda:1: a device-set "
                       "run starts when every device is free"}
        assert q.reasons()["later"] == q.reason("later")
        assert q.statistics().queue("cuda:0").running == 0
        assert q.done("x") == ["s"]
        assert q.done("s") == ["later"]

    def test_a_reservation_blocks_later_runs_of_other_queues(self):
        q = Q()
        q.add("x", "cuda:1")
        q.add("s", "cuda:1", ("cuda:1", "cuda:0"))  # waits in cuda:1's queue
        q.add("y", "cuda:0")  # later, cuda:0 is free but reserved by s
        assert q.go() == ["x"]
        assert q.reason("y").to_dict() == {  # s is unnamed: its id as every surface shows it
            "code": "device_reserved", "message": "cuda:0 is reserved for run s, which waits ahead of this run",
            "params": {"device": "cuda:0", "run_id": "s", "name": None}}
        assert q.reason("s") is None  # its own first device is busy: that is its turn
        assert q.done("x") == ["s"]
        assert q.done("s") == ["y"]

    def test_an_earlier_run_of_another_queue_is_served_first(self):
        q = Q()
        q.add("x", "cuda:0")
        q.add("y", "cuda:1")
        q.add("r", "cuda:1")  # older than s, waits behind y
        q.add("s", "cuda:0", ("cuda:0", "cuda:1"))
        assert q.go() == ["x", "y"]
        assert q.done("y") == ["r"]  # cuda:1 goes to the older head r, not to s's reservation
        assert q.done("x") == []  # s still needs cuda:1
        assert q.done("r") == ["s"]

    def test_oldest_head_wins_a_shared_slot(self):
        q = Q()
        q.add("x", "cuda:0")
        q.add("s", "cuda:1", ("cuda:1", "cuda:0"))
        q.add("r", "cuda:0")
        assert q.go() == ["x"]
        assert q.done("x") == ["s"]
        assert q.done("s") == ["r"]

    def test_reservations_are_first_come_first_served(self):
        q = Q()
        q.add("x", "cuda:1")
        q.add("s1", "cuda:0", ("cuda:0", "cuda:1"))
        q.add("s2", "cuda:2", ("cuda:2", "cuda:1"))
        assert q.go() == ["x"]
        assert q.reason("s2").to_dict()["params"] == {"devices": ["cuda:1"]}
        assert q.done("x") == ["s1"]
        assert q.reason("s2").code == "waiting_for_set_devices"
        assert q.done("s1") == ["s2"]

    def test_crossed_sets_do_not_deadlock(self):
        q = Q()
        q.add("a", "cuda:0")
        q.add("b", "cuda:1")
        q.add("s1", "cuda:0", ("cuda:0", "cuda:1"))
        q.add("s2", "cuda:1", ("cuda:1", "cuda:0"))
        assert q.go() == ["a", "b"]
        assert q.done("a") == []  # cuda:0 is s1's; s1 still needs cuda:1
        assert q.done("b") == ["s1"]
        assert q.done("s1") == ["s2"]

    def test_a_reservation_holds_only_the_room_it_needs(self):
        q = Q(Limits(overrides={"cuda:0": 3}))
        q.add("x", "cuda:1")
        q.add("a", "cuda:0")
        q.add("s", "cuda:1", ("cuda:1", "cuda:0"))
        q.add("b", "cuda:0")
        q.add("c", "cuda:0")
        # cuda:0 admits 3: a and b run, one unit stays for s; c waits for it.
        assert q.go() == ["x", "a", "b"]
        assert q.reason("c").code == "device_reserved"
        assert q.done("x") == ["s"]
        assert q.done("a") == ["c"]

    def test_a_set_run_position_counts_its_first_device_queue_only(self):
        q = Q()
        q.add("a", "cuda:1")
        q.add("b", "cuda:1")
        q.add("s", "cuda:0", ("cuda:0", "cuda:1"))
        q.go()
        assert q.positions() == {"b": 1, "s": 1}

    def test_a_set_with_limit_above_one_shares(self):
        q = Q(Limits(gpu=2))
        q.add("s1", "cuda:0", ("cuda:0", "cuda:1"))
        q.add("s2", "cuda:1", ("cuda:1", "cuda:0"))
        q.add("s3", "cuda:0", ("cuda:0", "cuda:1"))
        assert q.go() == ["s1", "s2"]
        assert q.done("s2") == ["s3"]


# --- the seeded gate --------------------------------------------------------------------------


class TestSeededGate:
    def test_a_run_behind_a_seeded_run_waiting_to_run_alone_says_why(self):
        # The seen case: an unseeded run at Queue #2 with a free cpu unit and no reason.
        q = Q()
        q.add("busy", "cpu")
        q.add("seed", "cpu", seeded=True, name="lr #1")
        q.add("behind", "cpu", name="baseline")
        q.add("last", "cpu")
        assert q.go() == ["busy"]
        assert q.q.position("behind") == 2 and q.q.statistics().queue("cpu").running == 1  # a free unit
        assert q.reason("seed").code == "waiting_to_run_alone"
        for rid in ("behind", "last"):
            assert q.reason(rid).to_dict() == {
                "code": "behind_waiting_run",
                "params": {"run_id": "seed", "name": "lr #1", "queue": "cpu", "code": "waiting_to_run_alone",
                           "ahead": {"code": "waiting_to_run_alone", "params": {"running": 1},
                                     "message": "a seeded run executes alone on this server: waiting for 1 run to "
                                                "finish"}},
                "message": "behind run 'lr #1' in the cpu queue, which is held up: a seeded run executes alone on "
                           "this server: waiting for 1 run to finish"}
        assert set(q.q.reasons()) == {"seed", "behind", "last"}
        assert q.done("busy") == ["seed"]
        assert q.reason("behind").code == "seeded_run_executing"  # the head now
        assert q.reason("behind").message == ("waiting for seeded run 'lr #1' to finish: a seeded run executes "
                                              "alone on this server, one at a time")
        assert q.reason("last").params == {"run_id": "behind", "name": "baseline", "queue": "cpu",
                                           "code": "seeded_run_executing", "ahead": q.reason("behind").to_dict()}
        assert q.done("seed") == ["behind", "last"]
        assert q.q.reasons() == {}

    def test_a_seeded_run_waits_for_everything_to_finish_and_claims_the_gate(self):
        q = Q()
        q.add("g", "cuda:0")
        q.add("seed", "cpu", seeded=True)
        q.add("later", "cuda:1")
        assert q.go() == ["g"]
        assert q.reason("seed").to_dict()["params"] == {"running": 1}
        assert q.reason("seed").code == "waiting_to_run_alone"
        assert q.reason("later").params == {"run_id": "seed", "name": None}
        assert q.reason("later").code == "waiting_for_seeded_run"
        assert q.reason("later").message == ("waiting for seeded run seed to start first: a seeded run executes "
                                             "alone on this server, so nothing starts before it")
        assert q.done("g") == ["seed"]

    def test_nothing_starts_while_a_seeded_run_executes(self):
        q = Q()
        q.add("seed", "cuda:0", seeded=True)
        q.add("c", "cpu")
        q.add("h", "cuda:1")
        assert q.go() == ["seed"]
        assert q.reason("c").to_dict()["params"] == {"run_id": "seed", "name": None}
        assert q.reason("c").code == "seeded_run_executing"
        assert q.statistics().seeded_running == "seed"
        assert q.done("seed") == ["c", "h"]

    def test_earlier_runs_of_other_queues_start_before_the_seeded_run(self):
        q = Q()
        q.add("c", "cpu")
        q.add("seed", "cuda:0", seeded=True)
        assert q.go() == ["c"]
        assert q.done("c") == ["seed"]

    def test_seeded_runs_execute_one_at_a_time(self):
        q = Q()
        q.add("s1", "cuda:0", seeded=True)
        q.add("s2", "cuda:1", seeded=True)
        q.add("s3", "cpu", seeded=True)
        assert q.go() == ["s1"]
        assert q.done("s1") == ["s2"]
        assert q.done("s2") == ["s3"]

    def test_a_seeded_head_whose_device_is_busy_lets_other_devices_work(self):
        q = Q()
        q.add("g", "cuda:0")
        q.add("seed", "cuda:0", seeded=True)
        q.add("c", "cpu")
        assert q.go() == ["g", "c"]
        assert q.reason("seed").code == "waiting_to_run_alone"  # also waits for c on the cpu
        assert q.done("g") == []  # its card is free now: it claims the gate and waits for c
        assert q.reason("seed").params == {"running": 1}
        q.add("c2", "cpu")
        assert q.go() == []
        assert q.done("c") == ["seed"]
        assert q.done("seed") == ["c2"]

    def test_a_seeded_head_only_waiting_for_its_own_device_waits_its_turn(self):
        q = Q()
        q.add("g", "cuda:0")
        q.add("seed", "cuda:0", seeded=True)
        assert q.go() == ["g"]
        assert q.reason("seed") is None

    def test_a_seeded_set_run(self):
        q = Q()
        q.add("seed", "cuda:0", ("cuda:0", "cuda:1"), seeded=True)
        q.add("c", "cpu")
        assert q.go() == ["seed"]
        assert q.done("seed") == ["c"]


# --- the interactive lane ---------------------------------------------------------------------


class TestInteractiveLane:
    def test_skips_the_fifo_and_ignores_the_slot_limit(self):
        q = Q()
        q.add("a", "cuda:0")
        q.add("b", "cuda:0")
        assert q.go() == ["a"]
        q.add("canvas", "cuda:0", lane=INTERACTIVE, session="tab1")
        assert q.go() == ["canvas"]
        st = q.statistics().queue("cuda:0")
        assert (st.waiting, st.running, st.limit, st.interactive) == (1, 1, 1, 1)
        assert q.position("canvas") is None

    def test_does_not_hold_a_queued_slot(self):
        q = Q()
        q.add("canvas", "cuda:0", lane=INTERACTIVE, session="tab1")
        q.add("a", "cuda:0")
        assert q.go() == ["canvas", "a"]

    def test_at_most_two_at_once(self):
        q = Q()
        q.add("i1", "cpu", lane=INTERACTIVE, session="s1")
        q.add("i2", "cpu", lane=INTERACTIVE, session="s2")
        with pytest.raises(SubmitError) as e:
            q.add("i3", "cpu", lane=INTERACTIVE, session="s3")
        assert (code(e), e.value.status, e.value.params) == ("interactive_busy", 503, {"limit": 2, "running": 2})
        assert q.get("i3") is None
        assert q.go() == ["i1", "i2"]
        q.finish("i1")
        q.add("i4", "cpu", lane=INTERACTIVE, session="s3")
        assert q.go() == ["i4"]

    def test_one_per_session(self):
        q = Q()
        q.add("i1", "cpu", lane=INTERACTIVE, session="s1")
        q.go()
        with pytest.raises(SubmitError) as e:
            q.add("i2", "cuda:0", lane=INTERACTIVE, session="s1")
        assert (code(e), e.value.status, e.value.params) == ("session_busy", 503, {"session": "s1", "run_id": "i1"})
        q.finish("i1")
        q.add("i3", "cpu", lane=INTERACTIVE, session="s1")
        assert q.go() == ["i3"]

    def test_the_session_check_comes_first(self):
        q = Q()
        q.add("i1", "cpu", lane=INTERACTIVE, session="s1")
        q.add("i2", "cpu", lane=INTERACTIVE, session="s2")
        with pytest.raises(SubmitError) as e:
            q.add("i3", "cpu", lane=INTERACTIVE, session="s1")
        assert code(e) == "session_busy"

    def test_configurable_limit_and_runs_without_a_session(self):
        q = Q(interactive_limit=3)
        for rid in ("i1", "i2", "i3"):
            q.add(rid, "cpu", lane=INTERACTIVE)
        with pytest.raises(SubmitError):
            q.add("i4", "cpu", lane=INTERACTIVE)
        assert q.statistics().interactive_limit == 3

    def test_held_up_by_an_executing_seeded_run_and_first_after_it(self):
        q = Q()
        q.add("seed", "cuda:0", seeded=True)
        q.add("c", "cpu")
        assert q.go() == ["seed"]
        q.add("canvas", "cpu", lane=INTERACTIVE, session="s1")
        assert q.go() == []
        assert q.reason("canvas").code == "seeded_run_executing"
        assert q.statistics().interactive_waiting == 1
        with pytest.raises(SubmitError):
            q.add("canvas2", "cpu", lane=INTERACTIVE, session="s1")  # waiting counts for its session
        assert q.done("seed") == ["canvas", "c"]

    def test_not_held_up_by_a_queued_seeded_run_that_waits(self):
        q = Q()
        q.add("g", "cuda:0")
        q.add("seed", "cpu", seeded=True)
        assert q.go() == ["g"]
        q.add("canvas", "cpu", lane=INTERACTIVE, session="s1")
        assert q.go() == ["canvas"]
        assert q.reason("seed").params == {"running": 2}
        assert q.done("g") == []
        assert q.done("canvas") == ["seed"]

    def test_a_seeded_interactive_run_executes_alone(self):
        q = Q()
        q.add("g", "cuda:0")
        q.add("c", "cpu")
        assert q.go() == ["g", "c"]
        q.add("canvas", "cpu", lane=INTERACTIVE, session="s1", seeded=True)
        q.add("later", "cuda:1")
        assert q.go() == []
        assert q.reason("canvas").code == "waiting_to_run_alone"
        assert q.reason("later").to_dict()["params"] == {"run_id": "canvas", "name": None}
        q.add("canvas2", "cpu", lane=INTERACTIVE, session="s2")
        assert q.go() == []
        assert q.reason("canvas2").code == "waiting_for_seeded_run"
        assert q.done("g") == []
        assert q.done("c") == ["canvas"]
        assert q.done("canvas") == ["canvas2", "later"]

    def test_a_waiting_interactive_run_can_be_cancelled(self):
        q = Q()
        q.add("seed", "cpu", seeded=True)
        q.go()
        q.add("canvas", "cpu", lane=INTERACTIVE, session="s1")
        assert q.cancel("canvas") is True
        assert q.statistics().interactive_waiting == 0
        q.add("canvas2", "cpu", lane=INTERACTIVE, session="s1")  # the session is free again
        assert q.done("seed") == ["canvas2"]


# --- reasons and statistics -------------------------------------------------------------------


class TestReasonsAndStatistics:
    def test_no_reason_for_running_unknown_or_queued_behind(self):
        q = Q()
        q.add("a", "cuda:0")
        q.add("b", "cuda:0")
        q.add("c", "cuda:0")
        q.go()
        assert [q.reason(r) for r in ("a", "b", "c", "nope")] == [None] * 4
        assert q.reasons() == {}

    def test_a_run_that_would_start_now_has_no_reason(self):
        q = Q()
        q.add("a", "cuda:0")
        assert q.reason("a") is None

    def test_reasons_do_not_change_the_queue(self):
        q = Q()
        q.add("x", "cuda:1")
        q.add("s", "cuda:0", ("cuda:0", "cuda:1"))
        q.add("seed", "cpu", seeded=True)
        before = (q.positions(), q.statistics())
        reasons = q.reasons()
        assert set(reasons) == {"s", "seed"}
        assert all(isinstance(v, Notice) for v in reasons.values())
        assert (q.positions(), q.statistics()) == before
        assert q.go() == ["x"]

    def test_statistics(self):
        q = Q(Limits(overrides={"cpu": 3}), slots=["cpu", "cuda:0", "cuda:1", "mps:0"])
        q.add("c1", "cpu")
        q.add("s", "cuda:0", ("cuda:0", "cuda:2"))
        q.add("g", "cuda:0")
        q.add("i", "cuda:1", lane=INTERACTIVE, session="t")
        q.go()
        st = q.statistics()
        rows = {s.key: (s.waiting, s.running, s.limit, s.interactive) for s in st.queues}
        assert rows == {"cpu": (0, 1, 3, 0), "cuda:0": (1, 1, 1, 0), "cuda:1": (0, 0, 1, 1),
                        "mps:0": (0, 0, 1, 0), "cuda:2": (0, 1, 1, 0)}
        assert [s.key for s in st.queues][:4] == ["cpu", "cuda:0", "cuda:1", "mps:0"]
        assert (st.interactive_running, st.interactive_waiting, st.interactive_limit, st.seeded_running) == \
            (1, 0, 2, None)
        assert st.queue("tpu") is None

    def test_the_same_calls_give_the_same_placements(self):
        def play():
            q = Q()
            out = []
            for i in range(6):
                q.add(f"r{i}", ["cpu", "cuda:0", "cuda:1"][i % 3], seeded=i == 4)
            q.add("s", "cuda:1", ("cuda:1", "cuda:0"))
            out.append(q.q.schedule())
            for rid in ("r0", "r1", "r2", "r3", "r4", "r5"):
                if q.is_running(rid):
                    q.finish(rid)
                out.append(q.q.schedule())
            return out
        assert play() == play()
