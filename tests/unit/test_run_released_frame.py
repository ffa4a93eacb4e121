"""The `run_released` frame (capability `run_released`): vocabulary, validation, negotiation,
its place in the per-run outbox (so it is spooled and replayed), and the agent's translation."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.agent.pipe_frames import message_frame
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.wire.protocol import Outbox, ProtocolError, RunFinished, RunInbox, RunReleased


def test_it_is_a_negotiated_agent_frame_outside_the_seeds_table():
    assert "run_released" in wp.SUPPORTED_CAPABILITIES and "run_released" in wp.KNOWN_CAPABILITIES
    assert wp.FRAME_TYPES["run_released"] is RunReleased and RunReleased.sender == "agent"
    assert RunReleased not in wp.AGENT_FRAMES and RunReleased in wp.CAPABILITY_FRAMES
    # An older agent that does not offer it: the welcome does not list it, no frame is ever sent.
    assert "run_released" not in wp.negotiate(["ack", "transfer"])
    assert "run_released" in wp.negotiate(["ack", "run_released"])


def test_round_trip_and_a_missing_upload_size():
    frame = RunReleased(run_id="r1", seq=3, upload_bytes=1 << 20)
    text = wp.encode(frame)
    assert json.loads(text) == {"type": "run_released", "run_id": "r1", "seq": 3, "upload_bytes": 1 << 20}
    assert wp.decode(text, sender="agent") == frame
    bare = wp.decode(json.dumps({"type": "run_released", "run_id": "r1", "seq": 1}), sender="agent")
    assert bare == RunReleased(run_id="r1", seq=1)
    # Unknown fields are ignored (protocol evolution).
    assert wp.decode(json.dumps({"type": "run_released", "run_id": "r1", "seq": 1, "later": True})) == bare


@pytest.mark.parametrize("raw, code, path", [
    ({"type": "run_released", "seq": 1}, "missing_field", "run_released.run_id"),
    ({"type": "run_released", "run_id": "r", "seq": 1, "upload_bytes": "x"}, "bad_field", "run_released.upload_bytes"),
    ({"type": "run_released", "run_id": "r", "seq": 0}, "bad_value", "run_released.seq"),
])
def test_malformed_frames_are_refused_with_the_field(raw, code, path):
    with pytest.raises(ProtocolError) as info:
        wp.decode(json.dumps(raw), sender="agent")
    assert info.value.code == code and info.value.path == path


def test_the_control_plane_never_sends_it():
    with pytest.raises(ProtocolError) as info:
        wp.decode(json.dumps({"type": "run_released", "run_id": "r", "seq": 1}), sender="server")
    assert info.value.code == "wrong_direction"


def test_it_is_numbered_kept_until_acked_and_replayed_like_any_run_frame():
    box = Outbox("r1")
    box.add(wp.Event(run_id="r1", event={"type": "progress", "payload": {}}))
    released = box.add(RunReleased(run_id="r1", upload_bytes=10))
    finished = box.add(RunFinished(run_id="r1", status="succeeded"))
    assert (released.seq, finished.seq) == (2, 3)
    box.ack(1)
    assert box.unacked() == [released, finished]  # what a reconnect replays, in order
    inbox = RunInbox("r1", clock=lambda: 0.0)
    assert inbox.accept(wp.Event(run_id="r1", seq=1, event={"type": "progress", "payload": {}})).new
    assert inbox.accept(released).new
    assert not inbox.accept(released).new  # a replayed duplicate is dropped by seq


def test_it_travels_in_a_batch():
    frames = [RunReleased(run_id="r1", seq=2), RunFinished(run_id="r1", seq=3, status="succeeded")]
    assert wp.unpack(wp.decode(wp.encode_batch([wp.encode(f) for f in frames]), sender="agent")) == frames


def test_the_agent_sends_it_only_when_negotiated():
    assert message_frame("r1", "released", {"upload_bytes": 5}, facts=False, released=True) == \
        RunReleased(run_id="r1", upload_bytes=5)
    assert message_frame("r1", "released", {"upload_bytes": None}, facts=False, released=True) == \
        RunReleased(run_id="r1")
    assert message_frame("r1", "released", {"upload_bytes": 5}, facts=True, released=False) is None
