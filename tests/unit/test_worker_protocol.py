"""The worker protocol: frames round-trip, malformed frames are refused with a code and a field path,
and the outbox/inbox pair delivers every per-run frame exactly once across drops and replays."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.wire import codec
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.wire.run_options import SEED_MAX, ExecutionOptions
from codefy_jupyter.wire.protocol import (
    Ack, Assign, Event, Hello, Metrics, Outbox, ProtocolError, RunAlive, RunFinished, RunInbox, Welcome,
)

# -- strategies built from the frames' own annotations ------------------------------------------------

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=8)
_nonneg = st.floats(min_value=0, max_value=1e6, allow_nan=False)

# Fields whose values have rules beyond their type.
_OVERRIDES: dict[str, Any] = {
    "run_id": _text.filter(bool),
    "status": st.sampled_from(sorted(wp.RUN_FINISHED_STATUSES)),
    "heartbeat_s": st.floats(min_value=0.001, max_value=1e6),
    "grace_s": _nonneg,
    "resume_grace_s": st.none() | _nonneg,
    "runs": st.dictionaries(_text, st.integers(min_value=0)),
    "cpu_threads": st.none() | st.integers(min_value=1, max_value=2**16),
    "cpu_count": st.none() | st.integers(min_value=1, max_value=2**16),
    # The assign's options: a typed value on both ends (wire/run_options.py ExecutionOptions).
    "options": st.builds(ExecutionOptions, seed=st.none() | st.integers(min_value=0, max_value=SEED_MAX),
                         deterministic=st.booleans(), record_outputs=st.booleans(), provenance=st.booleans(),
                         max_parallel_nodes=st.integers(min_value=1, max_value=64),
                         payload_cap_bytes=st.integers(min_value=0, max_value=2**31)),
}


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    if hint is str:
        return _text
    if hint is int:
        return st.integers()
    if hint is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if hint is bool:
        return st.booleans()
    if hint is Any:
        return _json
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_text, _strategy(args[1]), max_size=3)
    inner = [a for a in args if a is not type(None)][0]
    return st.none() | _strategy(inner)


def frames(cls: type[wp.Frame]) -> st.SearchStrategy[wp.Frame]:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name == "seq":
            kwargs[f.name] = st.integers(min_value=0 if cls is Ack else 1, max_value=2**53)
        else:
            kwargs[f.name] = _OVERRIDES[f.name] if f.name in _OVERRIDES else _strategy(hints[f.name])
    return st.builds(cls, **kwargs)


ALL_FRAMES = wp.AGENT_FRAMES + wp.SERVER_FRAMES


@pytest.mark.parametrize("cls", ALL_FRAMES, ids=lambda c: c.type)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_frame_round_trips(cls, data):
    frame = data.draw(frames(cls))
    text = wp.encode(frame)
    assert "\n" not in text  # one frame is one spool line
    assert wp.decode(text) == frame
    assert wp.decode(text.encode("utf-8"), sender=cls.sender) == frame


def test_the_seeds_frame_table_is_complete():
    assert {c.type for c in wp.AGENT_FRAMES} == {
        "hello", "heartbeat", "run_alive", "run_started", "event", "metrics", "artifact", "warning",
        "run_facts", "run_finished", "output_answer"}
    assert {c.type for c in wp.SERVER_FRAMES} == {"welcome", "reject", "assign", "cancel", "drain", "ack",
                                                  "fetch_output", "cancel_fetch", "drop_outputs"}
    assert wp.PROTOCOL_VERSION == 3


def test_unknown_fields_are_ignored():
    text = json.dumps({"type": "ack", "run_id": "r1", "seq": 5, "from_the_future": {"x": [1]}})
    assert wp.decode(text) == Ack(run_id="r1", seq=5)


def test_optional_fields_may_be_omitted_and_none_is_not_sent():
    frame = wp.decode('{"type":"cancel","run_id":"r1"}')
    assert frame == wp.Cancel(run_id="r1", grace_s=None)
    assert "grace_s" not in wp.encode(frame)


# -- malformed frames ---------------------------------------------------------------------------------

def _refused(data: Any, code: str, path: str | None = None, **kw: Any) -> ProtocolError:
    if not isinstance(data, (str, bytes)):
        data = json.dumps(data)
    with pytest.raises(ProtocolError) as info:
        wp.decode(data, **kw)
    assert info.value.code == code, info.value
    assert info.value.path == path
    if path:
        assert path in str(info.value)
    return info.value


@pytest.mark.parametrize("text", ["", "{", "not json", b"\xff\xfe", "{'type': 'ack'}"])
def test_not_json(text):
    _refused(text, "not_json")


@pytest.mark.parametrize("text", ["[]", '"ack"', "3", "null", "true"])
def test_not_an_object(text):
    _refused(text, "not_object")


def test_missing_and_bad_type():
    _refused({"run_id": "r"}, "missing_type", "type")
    _refused({"type": 7}, "bad_field", "type")
    err = _refused({"type": "launch_missiles"}, "unknown_type", "type")
    assert "launch_missiles" in str(err) and "hello" in str(err)


def test_wrong_direction():
    _refused({"type": "assign", "run_id": "r", "graph": {}, "device": "cpu"}, "wrong_direction", "type",
             sender="agent")
    _refused({"type": "hello", "name": "a", "version": "1", "protocol_version": 3}, "wrong_direction", "type",
             sender="server")


def _minimal(cls: type[wp.Frame]) -> dict[str, Any]:
    """A valid wire object with only the required fields."""
    samples = {str: "x", int: 1, float: 1.0, bool: True}
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {"type": cls.type}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            origin = typing.get_origin(hint)
            out[f.name] = samples.get(hint) if origin is None else {list: [], dict: {}}[origin]
    if issubclass(cls, wp.RunFrame):
        out["seq"] = 1
    if cls is RunFinished:
        out["status"] = "succeeded"
    return out


def _wrong_value(hint: Any) -> Any:
    """A value of the wrong JSON type for an annotation."""
    if dataclasses.is_dataclass(hint):
        return 5  # an object on the wire
    if hint is str:
        return 5
    if hint in (int, float):
        return "5"
    if hint is bool:
        return 1
    origin = typing.get_origin(hint)
    if origin is list:
        return {"a": 1}
    if origin is dict:
        return [1]
    return _wrong_value([a for a in typing.get_args(hint) if a is not type(None)][0])


_FIELDS = [(cls, f) for cls in ALL_FRAMES for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("cls,fld", _FIELDS, ids=[f"{c.type}.{f.name}" for c, f in _FIELDS])
def test_every_field_refuses_a_wrong_type_and_names_itself(cls, fld):
    raw = _minimal(cls)
    assert wp.decode(json.dumps(raw)).type == cls.type
    hint = typing.get_type_hints(cls)[fld.name]
    if hint is Any:
        return
    raw[fld.name] = _wrong_value(hint)
    _refused(raw, "bad_field", f"{cls.type}.{fld.name}")


@pytest.mark.parametrize("cls,fld", [(c, f) for c, f in _FIELDS if f.default is dataclasses.MISSING
                                     and f.default_factory is dataclasses.MISSING],
                         ids=lambda x: getattr(x, "type", None) or getattr(x, "name", ""))
def test_every_required_field_is_required(cls, fld):
    raw = _minimal(cls)
    del raw[fld.name]
    _refused(raw, "missing_field", f"{cls.type}.{fld.name}")


def test_seq_is_required_on_the_wire_for_per_run_frames():
    _refused({"type": "event", "run_id": "r", "event": {}}, "bad_value", "event.seq")


def test_nested_paths():
    hello = _minimal(Hello) | {"devices": [{"device": "cpu"}, "cuda:0"]}
    _refused(hello, "bad_field", "hello.devices[1]")
    _refused(_minimal(Hello) | {"node_types": {"Add": "h", "Mul": 3}}, "bad_field", "hello.node_types.Mul")
    _refused(_minimal(Hello) | {"capabilities": ["ack", None]}, "bad_field", "hello.capabilities[1]")
    _refused({"type": "run_alive", "runs": {"r1": 3, "r2": "4"}}, "bad_field", "run_alive.runs.r2")
    _refused(_minimal(Assign) | {"devices": ["cuda:0", 1]}, "bad_field", "assign.devices[1]")
    _refused(_minimal(Metrics) | {"points": [{"name": "loss"}, 2.0]}, "bad_field", "metrics.points[1]")


@pytest.mark.parametrize("raw,path", [
    ({"type": "event", "run_id": "r", "seq": 0, "event": {}}, "event.seq"),
    ({"type": "event", "run_id": "r", "seq": -3, "event": {}}, "event.seq"),
    ({"type": "event", "run_id": "", "seq": 1, "event": {}}, "event.run_id"),
    ({"type": "ack", "run_id": "r", "seq": -1}, "ack.seq"),
    ({"type": "run_finished", "run_id": "r", "seq": 1, "status": "exploded"}, "run_finished.status"),
    ({"type": "welcome", "worker_id": "w", "heartbeat_s": 0}, "welcome.heartbeat_s"),
    ({"type": "welcome", "worker_id": "w", "grace_s": -1}, "welcome.grace_s"),
    ({"type": "cancel", "run_id": "r", "grace_s": -0.5}, "cancel.grace_s"),
    ({"type": "run_alive", "runs": {"r1": -1}}, "run_alive.runs.r1"),
])
def test_bad_values(raw, path):
    _refused(raw, "bad_value", path)


def test_integers_are_not_booleans_and_floats_are_not_integers():
    _refused({"type": "ack", "run_id": "r", "seq": True}, "bad_field", "ack.seq")
    _refused({"type": "ack", "run_id": "r", "seq": 1.5}, "bad_field", "ack.seq")
    assert wp.decode('{"type":"cancel","run_id":"r","grace_s":3}').grace_s == 3.0


def test_oversized_frames_are_refused_before_parsing():
    big = '{"type":"event","run_id":"r","seq":1,"event":{"x":"' + "a" * wp.MAX_FRAME_BYTES + '"}}'
    _refused(big, "frame_too_large")
    _refused(big.encode(), "frame_too_large")
    # Multi-byte characters count as their UTF-8 size.
    _refused('{"type":"x","p":"' + "é" * (wp.MAX_FRAME_BYTES // 2 + 10) + '"}', "frame_too_large")
    wp.check_frame_size("é" * (wp.MAX_FRAME_BYTES // 2 - 1))
    with pytest.raises(ProtocolError) as info:
        wp.encode(Event(run_id="r", seq=1, event={"x": "a" * wp.MAX_FRAME_BYTES}))
    assert info.value.code == "frame_too_large"


def test_encode_refuses_our_own_mistakes():
    with pytest.raises(ValueError, match="event.seq"):
        wp.encode(Event(run_id="r", event={}))  # never numbered by an outbox
    with pytest.raises(ValueError, match="ack.seq"):
        wp.encode(Ack(run_id="r", seq="3"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wp.encode({"type": "ack"})  # type: ignore[arg-type]


def test_protocol_error_renders_as_the_error_shape():
    err = _refused({"type": "ack", "run_id": "r", "seq": "x"}, "bad_field", "ack.seq")
    assert err.to_dict() == {"code": "bad_field", "message": str(err), "params": {"path": "ack.seq"}}


# -- capabilities -------------------------------------------------------------------------------------

def test_capabilities_are_the_intersection():
    assert wp.negotiate(["ack", "s3", "record_outputs", "warp_drive", "one_shot"]) == [
        "ack", "one_shot", "record_outputs", "s3"]
    assert wp.negotiate(["s3", "ack"], supported={"ack", "s3", "mounts"}) == ["ack", "s3"]
    assert wp.negotiate([]) == []
    assert wp.SUPPORTED_CAPABILITIES <= wp.KNOWN_CAPABILITIES
    assert {"mounts", "transfer", "memory_budget", "s3", "record_outputs"} <= wp.KNOWN_CAPABILITIES


# -- outbox and inbox ---------------------------------------------------------------------------------

class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _event(run_id: str = "r1", i: int = 0) -> Event:
    return Event(run_id=run_id, event={"i": i})


def test_outbox_numbers_keeps_and_drops():
    box = Outbox("r1")
    sent = [box.add(_event(i=i)) for i in range(5)]
    assert [f.seq for f in sent] == [1, 2, 3, 4, 5]
    assert box.ack(3) == 3
    assert [f.seq for f in box.unacked()] == [4, 5]
    assert box.ack(2) == 0  # stale
    assert box.acked_seq == 3
    with pytest.raises(ProtocolError) as info:
        box.ack(6)
    assert info.value.code == "ack_ahead"
    with pytest.raises(ValueError, match="r2"):
        box.add(_event("r2"))
    assert box.add(_event()).seq == 6


def test_outbox_reloaded_continues_numbering():
    frames_ = [dataclasses.replace(_event(i=i), seq=i) for i in range(1, 6)]
    box = Outbox("r1", acked_seq=2, unacked=frames_)
    assert [f.seq for f in box.unacked()] == [3, 4, 5]
    assert box.add(_event()).seq == 6
    assert Outbox("r1", last_seq=9, acked_seq=9).add(_event()).seq == 10
    with pytest.raises(ValueError, match="out of order"):
        Outbox("r1", unacked=[frames_[2], frames_[1]])


def test_inbox_drops_duplicates_and_records_gaps():
    clock = FakeClock()
    inbox = RunInbox("r1", clock=clock)
    box = Outbox("r1")
    sent = [box.add(_event(i=i)) for i in range(10)]
    assert inbox.accept(sent[0]) == wp.Received(True)
    assert inbox.accept(sent[0]) == wp.Received(False)
    assert inbox.accept(sent[1]).new
    assert inbox.accept(sent[4]) == wp.Received(True, gap=(3, 4))
    assert inbox.accept(sent[2]) == wp.Received(False)  # behind the gap: too late, dropped
    assert inbox.accept(sent[5]) == wp.Received(True)
    assert inbox.gaps == [(3, 4)]
    assert inbox.duplicates == 2
    assert inbox.last_seq == 6
    with pytest.raises(ValueError, match="r2"):
        inbox.accept(dataclasses.replace(_event("r2"), seq=1))


def _fill(inbox: RunInbox, box: Outbox, n: int) -> list[Event]:
    out = []
    for i in range(n):
        frame = box.add(_event(i=i))
        assert inbox.accept(frame).new
        out.append(frame)
    return out


def test_ack_every_64_frames_after_persisting():
    clock = FakeClock()
    inbox, box = RunInbox("r1", clock=clock), Outbox("r1")
    _fill(inbox, box, 63)
    inbox.persisted(63)
    assert not inbox.ack_due() and inbox.take_ack() is None
    _fill(inbox, box, 1)
    assert inbox.take_ack() is None  # the 64th arrived but is not persisted yet
    inbox.persisted(64)
    assert inbox.ack_due()
    assert inbox.take_ack() == Ack(run_id="r1", seq=64)
    assert inbox.take_ack() is None
    assert inbox.acked_seq == 64
    _fill(inbox, box, 100)
    assert inbox.take_ack() is None  # nothing persisted: nothing to ack however many arrived
    inbox.persisted(150)
    assert inbox.take_ack() == Ack(run_id="r1", seq=150)


def test_ack_one_second_after_the_first_unacked_frame():
    clock = FakeClock()
    inbox, box = RunInbox("r1", clock=clock), Outbox("r1")
    assert inbox.next_ack_at() is None
    _fill(inbox, box, 3)
    inbox.persisted(3)
    assert inbox.next_ack_at() == 1001.0
    clock.now = 1000.999
    assert inbox.take_ack() is None
    clock.now = 1001.0
    assert inbox.take_ack() == Ack(run_id="r1", seq=3)
    assert inbox.next_ack_at() is None
    # The timer starts again at the next frame, not at the last ack.
    clock.now = 1005.0
    _fill(inbox, box, 1)
    inbox.persisted(4)
    assert inbox.next_ack_at() == 1006.0
    clock.now = 1005.5
    assert inbox.take_ack() is None
    assert inbox.take_ack(force=True) == Ack(run_id="r1", seq=4)
    assert inbox.take_ack(force=True) is None  # nothing owed


def test_ack_timer_keeps_running_for_frames_not_persisted_at_ack_time():
    clock = FakeClock()
    inbox, box = RunInbox("r1", clock=clock), Outbox("r1")
    _fill(inbox, box, 5)
    inbox.persisted(2)
    clock.now += 1
    assert inbox.take_ack() == Ack(run_id="r1", seq=2)
    assert inbox.unprocessed == 3
    inbox.persisted(5)
    assert inbox.unprocessed == 0
    assert inbox.take_ack() is None
    clock.now += 1
    assert inbox.take_ack() == Ack(run_id="r1", seq=5)
    with pytest.raises(ValueError, match="never accepted"):
        inbox.persisted(6)


def test_a_replay_of_acked_frames_is_acked_again():
    """The agent lost our ack (the socket dropped first): its replay of frames we acked gets a new ack."""
    clock = FakeClock()
    inbox, box = RunInbox("r1", clock=clock), Outbox("r1")
    sent = _fill(inbox, box, 10)
    inbox.persisted(10)
    assert inbox.take_ack(force=True) == Ack(run_id="r1", seq=10)
    for frame in sent:  # the replay
        assert not inbox.accept(frame).new
    clock.now += 1
    assert inbox.take_ack() == Ack(run_id="r1", seq=10)


def test_inbox_resumes_from_a_stored_point():
    inbox = RunInbox("r1", clock=FakeClock(), last_seq=100)
    assert not inbox.accept(dataclasses.replace(_event(), seq=100)).new
    assert inbox.accept(dataclasses.replace(_event(), seq=101)) == wp.Received(True)
    assert inbox.gaps == []


def test_replay_after_reconnect_gives_exactly_the_unacked_frames():
    clock = FakeClock()
    box = Outbox("r1")
    inbox = RunInbox("r1", clock=clock)
    recorded: list[int] = []
    for i in range(200):
        frame = box.add(_event(i=i))
        if i < 150:  # the socket drops after frame 150 was sent; 150..199 only spooled
            if inbox.accept(wp.decode(wp.encode(frame))).new:
                recorded.append(frame.seq)
            inbox.persisted(frame.seq)
            ack = inbox.take_ack()
            if ack is not None and i < 130:  # acks after frame 130 are lost with the socket
                box.ack(wp.decode(wp.encode(ack)).seq)
    replay = box.unacked()
    assert [f.seq for f in replay] == list(range(box.acked_seq + 1, 201))
    assert box.acked_seq == 128
    for frame in replay:
        if inbox.accept(wp.decode(wp.encode(frame))).new:
            recorded.append(frame.seq)
        inbox.persisted(frame.seq)
    assert recorded == list(range(1, 201))
    assert inbox.gaps == []
    assert inbox.duplicates == 150 - 128
    box.ack(inbox.take_ack(force=True).seq)
    assert box.unacked() == []


def test_100000_frames_are_delivered_exactly_once_with_two_drops():
    clock = FakeClock()
    box = Outbox("r1")
    inbox = RunInbox("r1", clock=clock)
    recorded = 0
    connected = True
    for i in range(100_000):
        frame = box.add(Event(run_id="r1", event={"event": "node_status", "i": i}))
        if i in (30_000, 70_000):
            connected = False
        if not connected and i in (30_500, 70_500):
            connected = True
            for old in box.unacked():
                recorded += inbox.accept(wp.decode(wp.encode(old))).new
                inbox.persisted(old.seq)
            continue
        if connected:
            recorded += inbox.accept(wp.decode(wp.encode(frame))).new
            inbox.persisted(frame.seq)
            ack = inbox.take_ack()
            if ack is not None:
                box.ack(ack.seq)
        clock.now += 0.0001
    box.ack(inbox.take_ack(force=True).seq)
    assert recorded == 100_000
    assert inbox.last_seq == 100_000 and inbox.gaps == []
    assert len(box) == 0


def test_bounded_inbox_pauses_reading_with_hysteresis():
    limit = wp.INBOX_MAX_FRAMES
    assert limit == 10_000
    assert wp.should_pause_reading(limit, paused=False) is False
    assert wp.should_pause_reading(limit + 1, paused=False) is True
    assert wp.should_pause_reading(limit // 2 + 1, paused=True) is True
    assert wp.should_pause_reading(limit // 2, paused=True) is False
    clock = FakeClock()
    inbox, box = RunInbox("r1", clock=clock), Outbox("r1")
    _fill(inbox, box, limit + 1)
    assert wp.should_pause_reading(inbox.unprocessed, paused=False)
    inbox.persisted(limit + 1)
    assert not wp.should_pause_reading(inbox.unprocessed, paused=True)


def test_frames_are_immutable():
    frame = Welcome(worker_id="w1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        frame.worker_id = "w2"  # type: ignore[misc]
    assert RunAlive().runs == {}


# -- batches (capability `batch`) ---------------------------------------------------------------------

def test_batch_is_a_negotiated_capability_outside_the_seeds_table():
    assert "batch" in wp.SUPPORTED_CAPABILITIES and "batch" in wp.KNOWN_CAPABILITIES
    assert wp.negotiate(["ack"]) == ["ack"]  # an agent that does not offer it never gets batches
    assert wp.Batch not in wp.AGENT_FRAMES and wp.FRAME_TYPES["batch"] is wp.Batch


def test_a_batch_joins_encoded_frames_and_unpacks_to_the_same_frames_in_order():
    frames_ = [Event(run_id="r1", seq=i, event={"type": "progress", "payload": {"value": i, "é": "\n"}})
               for i in range(1, 4)] + [RunFinished(run_id="r2", seq=1, status="succeeded")]
    text = wp.encode_batch([wp.encode(f) for f in frames_])
    batch = wp.decode(text, sender="agent")
    assert isinstance(batch, wp.Batch)
    assert wp.unpack(batch) == frames_
    assert json.loads(text)["frames"][0] == json.loads(wp.encode(frames_[0]))
    with pytest.raises(ValueError):
        wp.encode_batch([])
    _refused({"type": "batch", "frames": []}, "bad_value", "batch.frames")
    _refused({"type": "batch", "frames": {}}, "bad_field", "batch.frames")
    _refused({"type": "batch"}, "missing_field", "batch.frames")
    _refused({"type": "batch", "frames": [{"type": "ack", "run_id": "r", "seq": 1}]}, "wrong_direction", "type",
             sender="server")


def test_a_malformed_item_is_refused_alone_with_its_index_in_the_path():
    good = json.loads(wp.encode(Event(run_id="r1", seq=1, event={})))
    items = [good, {"type": "event", "run_id": "r1", "seq": 2}, 7, {"run_id": "r1"},
             {"type": "heartbeat"}, {"type": "batch", "frames": [good]}, {"type": "ack", "run_id": "r", "seq": 1},
             {"type": "metrics", "run_id": "r1", "seq": 3, "points": [{"name": "loss"}, 2.0]},
             {"type": "event", "run_id": "r1", "seq": 0, "event": {}}, good | {"seq": 4}]
    out = wp.unpack(wp.Batch(frames=items))
    assert out[0] == Event(run_id="r1", seq=1, event={}) and out[-1] == Event(run_id="r1", seq=4, event={})
    refused = [(e.code, e.path) for e in out[1:-1]]
    assert refused == [
        ("missing_field", "batch.frames[1].event"), ("bad_field", "batch.frames[2]"),
        ("missing_type", "batch.frames[3].type"), ("bad_value", "batch.frames[4].type"),
        ("bad_value", "batch.frames[5].type"), ("wrong_direction", "batch.frames[6].type"),
        ("bad_field", "batch.frames[7].points[1]"), ("bad_value", "batch.frames[8].seq")]
    assert all(isinstance(e, ProtocolError) and e.path in str(e) for e in out[1:-1])


@settings(max_examples=200, deadline=None)
@given(run_id=_text, seq=st.integers(min_value=-2, max_value=2**53), event=_json, points=_json)
def test_the_fast_paths_decide_as_the_generic_checks(run_id, seq, event, points):
    # Event and metrics frames skip the generic field loop; what they accept and refuse must not change.
    for raw in ({"type": "event", "run_id": run_id, "seq": seq, "event": event},
                {"type": "metrics", "run_id": run_id, "seq": seq, "points": points},
                {"type": "metrics", "run_id": run_id, "seq": seq, "points": [event]}):
        fast = generic = None
        try:
            fast = wp.from_dict(raw, sender="agent")
        except ProtocolError as err:
            fast = (err.code, err.path)
        try:
            cls = wp.FRAME_TYPES[raw["type"]]
            values = {s.name: s.check(raw[s.name], f"{cls.type}.{s.name}") for s in codec._specs(cls) if s.name in raw}
            frame = cls(**values)
            codec._check_values(frame)
            generic = frame
        except ProtocolError as err:
            generic = (err.code, err.path)
        assert fast == generic
        if isinstance(fast, wp.Frame):
            assert wp.decode(wp.encode(fast)) == fast
            with pytest.raises(dataclasses.FrozenInstanceError):
                fast.seq = 1  # type: ignore[misc]


def test_numbered_is_replace_with_a_seq_and_the_outbox_takes_numbered_frames():
    frame = RunFinished(run_id="r1", status="failed", error={"code": "x"}, metrics={"loss": 1.0})
    assert wp.numbered(frame, 7) == dataclasses.replace(frame, seq=7) and frame.seq == 0
    box = Outbox("r1", last_seq=4)
    assert box.add_numbered(wp.numbered(frame, 5)).seq == 5 and box.last_seq == 5
    with pytest.raises(ValueError, match="next seq is 6"):
        box.add_numbered(wp.numbered(frame, 7))
    with pytest.raises(ValueError):
        box.add_numbered(wp.numbered(RunFinished(run_id="r2", status="failed"), 6))
    assert [f.seq for f in box.unacked()] == [5]
