"""The event log's sink on a real store (SQLite, and PostgreSQL: `store_at`): seqs, the payload
cap, and the in-memory tail that followers read (it must hold a run's whole log, in order, however
its writes settle)."""

from __future__ import annotations

import asyncio
import threading

from codefy_jupyter.wire import run_events as ev
from codefy_jupyter.core.runs.event_log import EventLog
from codefy_jupyter.core.store.database import Store


def status(run_id: str, node: str, state: str) -> ev.RunEvent:
    return ev.RunEvent("node_status", {"run_id": run_id, "node_id": node, "status": state})


async def open_log(store_at, cap: int = 4096) -> tuple[Store, EventLog]:
    store = await Store.open(store_at("codefy.db"))
    return store, EventLog(store, payload_cap_bytes=cap, clock=lambda: 5.0)


def test_a_closing_write_in_the_same_transaction_as_a_flush_leaves_the_tail_whole(store_at):
    # The run service writes a run's closing event (with its final status) right after a flush
    # handed the run's earlier events to the store: both commit in one transaction, and the
    # closing writer hears of it first. Followers must still find every event in memory.
    async def main():
        store, log = await open_log(store_at)
        await store.create_run({"id": "r1", "status": "running"})
        log.track("r1", 0)
        for i in range(3):
            log.emit("r1", status("r1", f"n{i}", "running"))
        flushing = asyncio.ensure_future(log.flush())
        await asyncio.sleep(0)  # the flush has queued its append; the closing write queues behind it
        rows = log.take_closing("r1", ev.execution_complete("r1", duration_s=0.1, metrics={}, executed=3, cached=0))
        await store.update_run("r1", status="succeeded", events=rows)
        await log.committed("r1", rows)
        await flushing
        page = log.tail_page("r1", 0, log.flushed_seq("r1"), 1 << 20)
        assert page is not None, "the tail lost events: followers would fall back to the database"
        texts, cursor, more = page
        assert cursor == 4 and not more
        assert [t.split(",")[0] for t in texts] == ['{"seq":1', '{"seq":2', '{"seq":3', '{"seq":4']
        stored, _, _ = await store.read_events("r1", 0)
        assert [e.seq for e in stored] == [1, 2, 3, 4]
        await log.close()
        await store.close()

    asyncio.run(main())


def test_payloads_over_the_cap_are_elided_and_others_kept_as_emitted(store_at):
    async def main():
        store, log = await open_log(store_at, cap=200)
        await store.create_run({"id": "r1", "status": "running"})
        log.track("r1", 0)
        log.emit("r1", ev.RunEvent("node_status", {"run_id": "r1", "node_id": "n", "status": "ok", "é": "ü"}))
        log.emit("r1", ev.RunEvent("node_status", {"run_id": "r1", "node_id": "big", "status": "succeeded",
                                                   "outputs": {"y": "x" * 500}}))
        # Under the cap in characters, over it in UTF-8 bytes (what the cap counts).
        log.emit("r1", ev.RunEvent("node_status", {"run_id": "r1", "node_id": "wide", "status": "succeeded",
                                                   "outputs": {"y": "é" * 100}}))
        await log.flush()
        stored, _, _ = await store.read_events("r1", 0)
        assert stored[0].payload == {"run_id": "r1", "node_id": "n", "status": "ok", "é": "ü"}
        assert stored[1].payload["outputs"]["y"] == {"elided": True, "port": "y", "bytes": 508}
        assert stored[2].payload["outputs"]["y"] == {"elided": True, "port": "y", "bytes": 208}
        await log.close()
        await store.close()

    asyncio.run(main())


def test_only_the_newest_finished_runs_keep_their_tail_in_memory(store_at, monkeypatch):
    from codefy_jupyter.core.runs import event_log

    monkeypatch.setattr(event_log, "CLOSED_TAILS_KEPT", 3)

    async def main():
        store, log = await open_log(store_at)
        for n in range(5):
            run_id = f"r{n}"
            await store.create_run({"id": run_id, "status": "running"})
            log.track(run_id, 0)
            log.emit(run_id, status(run_id, "n", "running"))
            await log.flush()
            rows = log.take_closing(run_id, ev.execution_complete(run_id, duration_s=0.1, metrics={}, executed=1,
                                                                  cached=0))
            await store.update_run(run_id, status="succeeded", events=rows)
            await log.committed(run_id, rows)
        # The two oldest are read from the store again; the newest three still from memory.
        assert [log.tail_page(f"r{n}", 0, 2, 1 << 20) is None for n in range(5)] == [True, True, False, False, False]
        stored, _, _ = await store.read_events("r0", 0)
        assert [e.seq for e in stored] == [1, 2]
        await log.close()
        await store.close()

    asyncio.run(main())


def test_an_event_emitted_with_the_next_rides_with_it_or_is_written_alone_soon(store_at):
    async def main():
        store, log = await open_log(store_at)
        for run_id in ("r1", "r2"):
            await store.create_run({"id": run_id, "status": "running"})
            log.track(run_id, 0)
        writes = store.statistics().writes
        log.emit("r1", status("r1", "start", "running"), with_next=True)
        log.emit("r1", status("r1", "n", "running"))
        await log.flush()
        assert store.statistics().writes == writes + 1  # both events, one write
        assert [e.seq for e in (await store.read_events("r1", 0))[0]] == [1, 2]
        # Nothing follows: it is written on its own, shortly.
        log.emit("r2", status("r2", "start", "running"), with_next=True)
        assert log.flushed_seq("r2") == 0
        assert await log.wait_beyond("r2", 0, 5.0)
        assert [e.seq for e in (await store.read_events("r2", 0))[0]] == [1]
        await log.close()
        await store.close()

    asyncio.run(main())


def test_a_refused_closing_write_is_retaken_as_the_closing_event_alone_after_what_is_durable(store_at):
    """A closing write carries the run's queued events; when the store refuses them (here a real
    trigger), the run still ends: its closing event alone, numbered after the durable log,
    with the events it carried recorded as lost."""
    import sqlite3

    async def main():
        store, log = await open_log(store_at)
        await store.create_run({"id": "r1", "status": "running"})
        log.track("r1", 0)
        log.emit("r1", status("r1", "fine", "done"))
        await log.flush()
        target = store_at("codefy.db")
        if isinstance(target, str):  # PostgreSQL: the same refusal as a trigger function
            import psycopg

            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                             "IF NEW.payload LIKE '%poison%' THEN RAISE EXCEPTION 'the disk says no'; END IF; "
                             "RETURN NEW; END $$")
                conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON run_events FOR EACH ROW EXECUTE FUNCTION refuse()")
        else:
            conn = sqlite3.connect(target)
            conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON run_events WHEN NEW.payload LIKE '%poison%' "
                         "BEGIN SELECT RAISE(ABORT, 'the disk says no'); END")
            conn.commit()
            conn.close()
        log.emit("r1", status("r1", "poison", "done"))  # queued, not flushed: it rides with the closing write
        rows = log.take_closing("r1", ev.execution_complete("r1", duration_s=0.1, metrics={}, executed=2, cached=0))
        assert [r[0] for r in rows] == [2, 3]
        try:
            await store.update_run("r1", status="succeeded", events=rows)
        except Exception as refused:
            rows = log.retake_closing("r1", rows, refused)
        else:
            raise AssertionError("the trigger did not refuse the write")
        assert [r[0] for r in rows] == [2] and rows[0][1] == "execution_complete"
        await store.update_run("r1", status="succeeded", events=rows)
        await log.committed("r1", rows)
        stored, _, _ = await store.read_events("r1", 0)
        assert [(e.seq, e.type) for e in stored] == [(1, "node_status"), (2, "execution_complete")]
        assert log.lost["r1"]["first_seq"] == 2 and "the disk says no" in log.lost["r1"]["error"]
        await log.close()
        await store.close()

    asyncio.run(main())


def test_a_flush_whose_waiter_is_cancelled_still_lands_every_runs_events(store_at):
    # Whoever awaits a flush (a run's own task, a request) may be cancelled while the store commits
    # the writes it handed over, which hold other runs' events too. The store commits them anyway:
    # a cancelled waiter must not turn them into "lost" events (which ended a healthy run on a
    # worker event_log_write_failed, and renumbered its log over what was committed).
    async def main():
        store, log = await open_log(store_at)
        failed: list[str] = []
        log.on_write_failed = lambda run_id, lost: failed.append(run_id)
        for run_id in ("a", "c"):
            await store.create_run({"id": run_id, "status": "running"})
            log.track(run_id, 0)
            for i in range(4):
                log.emit(run_id, status(run_id, f"n{i}", "running"))
        # The writer thread is held busy so that the flush's writes are still queued when its
        # waiter is cancelled (on a loaded machine that window is long; here it is made certain).
        release = threading.Event()
        holding = store._submit(lambda conn: release.wait(60))
        for _ in range(3):
            await asyncio.sleep(0)  # the flush under way has handed its writes to the store and waits
        flushing = log._flusher  # whoever flushes: here the sink's own task; a worker run's acker too
        assert flushing is not None and not flushing.done()
        flushing.cancel()
        await asyncio.gather(flushing, return_exceptions=True)
        release.set()
        await holding
        await log.flush()
        for run_id in ("a", "c"):
            log.emit(run_id, status(run_id, "after", "running"))
        await log.flush()
        assert failed == [] and log.lost == {}
        for run_id in ("a", "c"):
            assert log.flushed_seq(run_id) == 5
            stored, _, _ = await store.read_events(run_id, 0)
            assert [e.seq for e in stored] == [1, 2, 3, 4, 5]
        await log.close()
        await store.close()

    asyncio.run(main())
