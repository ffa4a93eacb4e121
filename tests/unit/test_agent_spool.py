"""The agent's spool on real files: written before sending, acked frames dropped, reloaded after a
restart with exactly the unacked frames, and a torn last line ignored."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.agent.spool import SPOOL_FILE, RunSpool, SpoolError, run_dir, spooled_runs
from codefy_jupyter.wire.protocol import (
    Event, Metrics, ProtocolError, RunFinished, RunInbox, RunStarted, decode, encode,
)


def ev(i: int, run_id: str = "r1") -> Event:
    return Event(run_id=run_id, event={"event": "node_status", "i": i})


def lines(spool: RunSpool) -> list[str]:
    return spool.path.read_text().splitlines()


def test_a_frame_is_on_disk_before_it_is_returned_for_sending(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    frame = spool.add(RunStarted(run_id="r1", pid=42, visible_devices=["cuda:2"]))
    assert frame.seq == 1
    # Another reader sees it right away (flushed, not buffered in our process).
    assert [decode(line) for line in (tmp_path / "r1" / SPOOL_FILE).read_text().splitlines()] == [frame]
    assert spool.add(ev(1)).seq == 2
    batch = spool.add_many([ev(2), ev(3)])
    assert [f.seq for f in batch] == [3, 4]
    assert len(lines(spool)) == 4
    assert [f.seq for f in spool.unacked()] == [1, 2, 3, 4]
    spool.close()


def test_acks_drop_frames_and_survive_a_restart(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    sent = spool.add_many([ev(i) for i in range(10)])
    assert spool.ack(4) == 4
    assert spool.ack(2) == 0  # stale ack: nothing more, no marker
    assert len(lines(spool)) == 11  # acks append a marker; nothing is rewritten
    spool.close()
    again = RunSpool.open(tmp_path, "r1")
    assert again.unacked() == sent[4:]
    assert again.acked_seq == 4 and again.last_seq == 10
    assert again.add(ev(10)).seq == 11  # numbering continues
    with pytest.raises(ProtocolError) as info:
        again.ack(12)
    assert info.value.code == "ack_ahead"
    again.close()


def test_compaction_when_acked_frames_pile_up(tmp_path):
    spool = RunSpool.open(tmp_path, "r1", compact_after=50)
    spool.add_many([ev(i) for i in range(100)])
    spool.ack(30)
    assert len(lines(spool)) == 101  # 30 acked < 50: not yet
    spool.ack(60)  # 60 acked in the file >= 50 and >= 40 unacked: rewrite
    assert lines(spool)[0] == json.dumps({"_acked": 60})
    assert len(lines(spool)) == 41
    assert not (tmp_path / "r1" / (SPOOL_FILE + ".tmp")).exists()
    spool.add(ev(100))
    spool.close()
    again = RunSpool.open(tmp_path, "r1", compact_after=50)
    assert [f.seq for f in again.unacked()] == list(range(61, 102))
    # Everything acked and compacted: the marker alone keeps the numbering.
    again.ack(101)
    again.compact()
    assert lines(again) == [json.dumps({"_acked": 101})]
    again.close()
    third = RunSpool.open(tmp_path, "r1")
    assert third.unacked() == [] and third.add(ev(0)).seq == 102
    third.close()


def test_compaction_waits_while_unacked_frames_outnumber_acked_ones(tmp_path):
    spool = RunSpool.open(tmp_path, "r1", compact_after=10)
    spool.add_many([ev(i) for i in range(100)])
    spool.ack(20)
    assert len(lines(spool)) == 101  # rewriting 80 unacked lines to drop 20 would cost more than it saves
    spool.ack(50)
    assert len(lines(spool)) == 51
    spool.close()


def test_a_torn_last_line_is_ignored_and_cut_off(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    sent = spool.add_many([ev(i) for i in range(3)])
    spool.close()
    path = tmp_path / "r1" / SPOOL_FILE
    torn = encode(Event(run_id="r1", seq=4, event={"i": 3}))[:-7]
    with open(path, "a") as f:
        f.write(torn)  # the agent died mid-write: no newline
    again = RunSpool.open(tmp_path, "r1")
    assert again.unacked() == sent
    assert again.add(ev(3)).seq == 4  # the torn frame was never sent, so its seq is reused
    again.close()
    third = RunSpool.open(tmp_path, "r1")
    assert [f.seq for f in third.unacked()] == [1, 2, 3, 4]
    assert all(line.startswith("{") and line.endswith("}") for line in lines(third))
    third.close()


def test_a_torn_ack_marker_is_ignored(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    spool.add_many([ev(i) for i in range(3)])
    spool.close()
    with open(tmp_path / "r1" / SPOOL_FILE, "a") as f:
        f.write('{"_acked": ')
    again = RunSpool.open(tmp_path, "r1")
    assert [f.seq for f in again.unacked()] == [1, 2, 3]
    again.close()


def test_a_damaged_line_in_the_middle_is_an_error_naming_it(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    spool.add_many([ev(i) for i in range(3)])
    spool.close()
    path = tmp_path / "r1" / SPOOL_FILE
    content = path.read_text().splitlines()
    content[1] = content[1][:10]
    path.write_text("\n".join(content) + "\n")
    with pytest.raises(SpoolError, match="line 2"):
        RunSpool.open(tmp_path, "r1")
    path.write_text(encode(Event(run_id="other", seq=1, event={})) + "\n")
    with pytest.raises(SpoolError, match="not a frame of run r1"):
        RunSpool.open(tmp_path, "r1")


def test_a_frame_that_cannot_be_encoded_takes_no_seq(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    with pytest.raises(ValueError):
        spool.add_many([ev(0), Metrics(run_id="r1", points="not a list")])  # type: ignore[arg-type]
    assert [f.seq for f in spool.unacked()] == [1]
    assert len(lines(spool)) == 1  # the good frame before it was written
    with pytest.raises(ValueError, match="r2"):
        spool.add(ev(1, run_id="r2"))
    assert spool.add(ev(1)).seq == 2
    spool.close()


def test_run_ids_must_be_plain_names_and_runs_are_listed(tmp_path):
    for bad in ("../x", "a/b", "", ".", ".."):
        with pytest.raises(SpoolError):
            run_dir(tmp_path, bad)
    assert spooled_runs(tmp_path / "missing") == []
    with RunSpool.open(tmp_path, "b2"), RunSpool.open(tmp_path, "a1") as spool:
        spool.add(ev(0, run_id="a1"))
    assert spooled_runs(tmp_path) == ["a1", "b2"]
    done = RunSpool.open(tmp_path, "a1")
    done.ack(done.add(RunFinished(run_id="a1", status="succeeded")).seq)
    done.remove()
    assert spooled_runs(tmp_path) == ["b2"]


def test_durable_mode_writes_the_same_file(tmp_path):
    with RunSpool.open(tmp_path, "r1", durable=True) as spool:
        spool.add(ev(0))
        spool.ack(1)
    with RunSpool.open(tmp_path, "r1") as again:
        assert again.unacked() == [] and again.last_seq == 1


def test_restart_mid_stream_replays_exactly_the_unacked_frames(tmp_path):
    """100,000 frames through a spool and an inbox, with an agent restart in the middle."""
    now = [0.0]
    inbox = RunInbox("r1", clock=lambda: now[0])
    spool = RunSpool.open(tmp_path, "r1")
    recorded = 0
    for i in range(60_000):
        frame = spool.add(ev(i))
        if i < 59_000:  # the last 1,000 were spooled but never sent before the agent died
            recorded += inbox.accept(decode(encode(frame))).new
            inbox.persisted(frame.seq)
            ack = inbox.take_ack()
            if ack is not None and i < 58_500:
                spool.ack(ack.seq)
        now[0] += 0.001
    spool.close()  # the agent is killed here
    spool = RunSpool.open(tmp_path, "r1")
    replay = spool.unacked()
    assert [f.seq for f in replay] == list(range(spool.acked_seq + 1, 60_001))
    for frame in replay:
        recorded += inbox.accept(frame).new
        inbox.persisted(frame.seq)
    for i in range(60_000, 100_000):
        frame = spool.add(ev(i))
        recorded += inbox.accept(frame).new
        inbox.persisted(frame.seq)
        ack = inbox.take_ack()
        if ack is not None:
            spool.ack(ack.seq)
    spool.ack(inbox.take_ack(force=True).seq)
    assert recorded == 100_000 and inbox.gaps == [] and inbox.last_seq == 100_000
    assert len(spool) == 0
    assert len(lines(spool)) < 10_000  # compacted along the way
    spool.close()


def test_a_replay_sends_the_spooled_text_and_compaction_keeps_it(tmp_path):
    spool = RunSpool.open(tmp_path, "r1", compact_after=3)
    spool.add_many([ev(i) for i in range(6)])
    on_disk = lines(spool)
    assert spool.encoded_after(0) == list(enumerate(on_disk, start=1))
    assert spool.encoded_after(4) == [(5, on_disk[4]), (6, on_disk[5])] and spool.encoded_after(6) == []
    spool.ack(3)  # 3 acked >= 3 unacked: compacted, the texts written back as they were
    assert lines(spool)[1:] == on_disk[3:] and spool.encoded_after(0) == [(4, on_disk[3]), (5, on_disk[4]),
                                                                            (6, on_disk[5])]
    spool.close()
    again = RunSpool.open(tmp_path, "r1")
    assert again.encoded_after(0) == [(4, on_disk[3]), (5, on_disk[4]), (6, on_disk[5])]
    again.close()


def test_deferred_lines_are_written_before_anything_after_them(tmp_path):
    spool = RunSpool.open(tmp_path, "r1")
    spool.add(ev(0))
    ((second, text),) = spool.add_many_encoded([ev(1)], defer=True)
    spool.add_many_encoded([ev(2)], defer=True)
    assert second.seq == 2 and text == encode(second) and len(lines(spool)) == 1  # not on disk yet
    spool.write_deferred()
    assert [decode(line).seq for line in lines(spool)] == [1, 2, 3]
    spool.add_many_encoded([ev(3)], defer=True)
    spool.ack(2)  # an ack marker goes after the frame kept back, never before it
    assert [json.loads(line).get("seq", "ack") for line in lines(spool)] == [1, 2, 3, 4, "ack"]
    spool.add_many_encoded([ev(4)], defer=True)
    spool.close()  # closing writes what was kept back
    again = RunSpool.open(tmp_path, "r1")
    assert [f.seq for f in again.unacked()] == [3, 4, 5]
    again.add_many_encoded([ev(5)], defer=True)
    again.compact()  # compaction writes every unacked frame, the deferred one once
    again.close()
    assert [json.loads(line).get("seq", "ack") for line in lines(again)] == ["ack", 3, 4, 5, 6]


def test_the_agent_side_imports_neither_torch_nor_the_server():
    import subprocess
    import sys

    code = ("import sys, codefy_jupyter.agent.spool, codefy_jupyter.wire.protocol; "
            "print([m for m in ('torch', 'tornado', 'jupyter_server', 'codefy_jupyter.server') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
