"""Each run's frames on their way: spooled before sending, sent live in order, replayed after a
reconnect from the spool, dropped once acked, reloaded after an agent restart."""

from __future__ import annotations

import asyncio
import json

from codefy_jupyter.agent.delivery import Deliveries
from codefy_jupyter.core.worker_protocol import MAX_FRAME_BYTES, Event, RunFinished, RunStarted, decode


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
