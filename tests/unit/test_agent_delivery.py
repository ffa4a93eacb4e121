"""Each run's frames on their way: spooled before sending, sent live in order, replayed after a
reconnect from the spool, dropped once acked, reloaded after an agent restart."""

from __future__ import annotations

import asyncio
import json

from codefy_jupyter.agent.delivery import Deliveries
from codefy_jupyter.wire.protocol import (
    BATCH_MAX_BYTES, BATCH_MAX_FRAMES, MAX_FRAME_BYTES, Batch, Event, RunFinished, RunStarted, decode, unpack,
)


def event(run_id: str, n: int) -> Event:
    return Event(run_id=run_id, event={"type": "progress", "payload": {"value": n}})


class Wire:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, text: str) -> None:
        self.sent.append(decode(text, sender="agent"))

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def seqs(self, run_id: str) -> list[int]:
        return [f.seq for f in self.sent if getattr(f, "run_id", None) == run_id]


OPEN: list[Deliveries] = []


def deliveries(path, owner: str = "box") -> Deliveries:
    d = Deliveries(path, owner)
    OPEN.append(d)
    return d


def run(coro):
    try:
        return asyncio.run(coro)
    finally:
        while OPEN:
            OPEN.pop().close()


def test_frames_wait_in_the_spool_then_replay_in_order_then_go_live(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        d.add("r1", RunStarted(run_id="r1", pid=1))
        for n in range(5):
            d.add("r1", event("r1", n))
        d.add("r2", event("r2", 0))
        wire = Wire()
        assert await d.connected(wire.send, wire.drain) == 7
        assert wire.seqs("r1") == [1, 2, 3, 4, 5, 6] and wire.seqs("r2") == [1]
        d.add("r1", event("r1", 5))  # live now
        assert wire.seqs("r1")[-1] == 7
        assert d.alive() == {"r1": 7, "r2": 1}

    run(scenario())


def test_a_reconnect_replays_only_what_was_not_acked(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        first = Wire()
        await d.connected(first.send, first.drain)
        for n in range(10):
            d.add("r1", event("r1", n))
        d.ack("r1", 6)
        d.disconnected()
        d.add("r1", event("r1", 10))  # while away: spooled only
        assert first.seqs("r1") == list(range(1, 11))
        second = Wire()
        assert await d.connected(second.send, second.drain) == 5
        assert second.seqs("r1") == [7, 8, 9, 10, 11]

    run(scenario())


def test_a_finished_and_acked_run_is_forgotten_but_keeps_its_folder(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        wire = Wire()
        await d.connected(wire.send, wire.drain)
        d.add("r1", event("r1", 0))
        d.add("r1", RunFinished(run_id="r1", status="succeeded"))
        d.add("r1", event("r1", 1))  # nothing after run_finished
        assert wire.seqs("r1") == [1, 2]
        (tmp_path / "r1" / "output.log").write_text("log")
        d.ack("r1", 1)
        assert "r1" in d.runs
        d.ack("r1", 2)
        assert "r1" not in d.runs and d.changed.is_set()
        assert not (tmp_path / "r1" / "spool.jsonl").exists() and (tmp_path / "r1" / "output.log").exists()

    run(scenario())


def test_after_a_restart_the_agent_finds_its_own_runs_and_closes_orphans(tmp_path):
    async def scenario() -> None:
        old = deliveries(tmp_path, "box")
        old.add("done", RunFinished(run_id="done", status="succeeded"))
        old.add("orphan", RunStarted(run_id="orphan", pid=1))
        old.add("orphan", event("orphan", 0))
        other = deliveries(tmp_path, "someone-else")
        other.add("theirs", event("theirs", 0))
        old.close()
        other.close()
        new = deliveries(tmp_path, "box")
        assert sorted(new.reload()) == ["done", "orphan"]
        wire = Wire()
        await new.connected(wire.send, wire.drain)
        orphan = [f for f in wire.sent if f.run_id == "orphan"]
        assert [f.seq for f in orphan] == [1, 2, 3]
        assert isinstance(orphan[-1], RunFinished) and orphan[-1].error["code"] == "agent_restarted"
        assert "theirs" not in new.alive()

    run(scenario())


def test_a_frame_too_large_to_send_becomes_a_warning(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        wire = Wire()
        await d.connected(wire.send, wire.drain)
        d.add("r1", Event(run_id="r1", event={"type": "progress", "payload": {"blob": "x" * (MAX_FRAME_BYTES + 1)}}))
        (frame,) = wire.sent
        assert frame.type == "warning" and frame.code == "worker_frame_too_large" and frame.seq == 1
        line = (tmp_path / "r1" / "spool.jsonl").read_text().splitlines()[0]
        assert json.loads(line)["type"] == "warning"

    run(scenario())


class BatchWire(Wire):
    """A connection that negotiated `batch`: records each message and unpacks batches."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def send(self, text: str) -> None:
        self.messages.append(text)
        frame = decode(text, sender="agent")
        self.sent.extend(unpack(frame) if isinstance(frame, Batch) else [frame])


def test_with_batch_the_frames_of_one_loop_turn_go_as_one_message_after_they_are_spooled(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        wire = BatchWire()
        assert await d.connected(wire.send, wire.drain, batch=True) == 0
        d.add("r1", RunStarted(run_id="r1", pid=1))
        for n in range(3):
            d.add("r1", event("r1", n))
        d.add("r2", event("r2", 0))
        assert wire.sent == []  # at the end of this turn
        await asyncio.sleep(0)
        assert len(wire.messages) == 1 and json.loads(wire.messages[0])["type"] == "batch"
        assert wire.seqs("r1") == [1, 2, 3, 4] and wire.seqs("r2") == [1]
        # Everything sent was on disk first.
        spooled = [decode(line) for line in (tmp_path / "r1" / "spool.jsonl").read_text().splitlines()]
        assert spooled == [f for f in wire.sent if f.run_id == "r1"]
        d.add("r1", event("r1", 3))  # alone in its turn: an ordinary frame
        await asyncio.sleep(0)
        assert decode(wire.messages[-1]).type == "event" and wire.seqs("r1")[-1] == 5

    run(scenario())


def test_with_batch_a_batch_is_bounded_and_a_replay_goes_in_batches(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        for n in range(BATCH_MAX_FRAMES + 10):
            d.add("r1", event("r1", n))
        wire = BatchWire()
        assert await d.connected(wire.send, wire.drain, batch=True) == BATCH_MAX_FRAMES + 10
        assert [len(unpack(decode(m))) for m in wire.messages] == [BATCH_MAX_FRAMES, 10]
        assert wire.seqs("r1") == list(range(1, BATCH_MAX_FRAMES + 11))
        wire.messages.clear()
        for n in range(BATCH_MAX_FRAMES + 1):  # live, in one turn: a full batch goes at once
            d.add("r2", event("r2", n))
        assert [len(unpack(decode(m))) for m in wire.messages] == [BATCH_MAX_FRAMES]
        await asyncio.sleep(0)
        assert decode(wire.messages[-1]).seq == BATCH_MAX_FRAMES + 1
        big = "x" * (BATCH_MAX_BYTES // 2)
        d.add("r3", Event(run_id="r3", event={"type": "progress", "payload": {"blob": big}}))
        d.add("r3", Event(run_id="r3", event={"type": "progress", "payload": {"blob": big}}))
        d.add("r3", event("r3", 2))
        await asyncio.sleep(0)
        assert [decode(m).type for m in wire.messages[-2:]] == ["event", "batch"]  # bytes bound the batch too
        assert wire.seqs("r3") == [1, 2, 3]

    run(scenario())


def test_with_batch_frames_queued_when_the_connection_drops_are_spooled_and_replayed(tmp_path):
    async def scenario() -> None:
        d = deliveries(tmp_path, "box")
        first = BatchWire()
        await d.connected(first.send, first.drain, batch=True)
        d.add("r1", event("r1", 0))
        d.add("r1", event("r1", 1))
        d.disconnected()  # before the end of the turn: nothing was sent, all is on disk
        await asyncio.sleep(0)
        assert first.sent == []
        assert len((tmp_path / "r1" / "spool.jsonl").read_text().splitlines()) == 2
        second = BatchWire()
        assert await d.connected(second.send, second.drain, batch=True) == 2
        assert second.seqs("r1") == [1, 2]
        d.ack("r1", 2)
        d.add("r1", RunFinished(run_id="r1", status="succeeded"))
        d.close()  # closing writes what a batch still held
        assert decode((tmp_path / "r1" / "spool.jsonl").read_text().splitlines()[-1]).seq == 3

    run(scenario())
