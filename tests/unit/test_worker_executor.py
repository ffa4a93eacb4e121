"""The WorkerExecutor inside a real RunService over a real SQLite file (no server): the per-run inbox
bound that pauses reading, and the resume point that commits with the run's events."""

from __future__ import annotations

import asyncio

from codefy_jupyter._version import __version__
from codefy_jupyter.core.config import Settings
from codefy_jupyter.core.runs.run_service import RunService
from codefy_jupyter.core.workers.worker_service import WorkerService
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.workers.handshake import Credential
from codefy_jupyter.wire.protocol import (
    AGENT_RESTARTED, AGENT_STOPPED, PROTOCOL_VERSION, Ack, Assign, Cancel, Event, Hello, RunFinished, RunStarted,
)

SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}}], "edges": []}


class Link:
    """The socket edge: what the control plane sends, kept in order."""

    peer = "127.0.0.1"

    def __init__(self) -> None:
        self.frames: list = []
        self.closed: tuple[int, str] | None = None

    def send(self, frame) -> None:
        self.frames.append(frame)

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


async def until(predicate, timeout: float = 120.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def event(i: int) -> dict:
    return {"type": "node_status", "payload": {"node_id": f"n{i}", "status": "done"}}


async def box_connected(tmp_path, **hello_fields):
    """A RunService on a real store, with the worker "box" (cpu) connected through a Link."""
    store = await Store.open(tmp_path / "db.sqlite")
    service = RunService(store, Settings.load({"data_dir": str(tmp_path)}, env={}), data_dir=tmp_path, workers=WorkerService)
    await service.start()
    catalog = service.registry.catalog()
    link = Link()
    hello = Hello(name="box", version=__version__, protocol_version=PROTOCOL_VERSION,
                  catalog_hash=catalog["hash"], node_types=catalog["types"], devices=[{"device": "cpu"}], **hello_fields)
    _, worker = await service.workers.hello(hello, Credential("server", "server"), link, loopback=True)
    assert worker is not None
    service.workers.connected(worker)
    return store, service, worker, link


async def test_a_full_inbox_pauses_reading_until_its_frames_are_recorded(tmp_path):
    store, service, worker, link = await box_connected(tmp_path)
    try:
        workers = service.workers
        workers.executor.max_inbox = 5
        run = await service.submit({"graph": SMALL, "options": {"target": {"worker": "box"}}})
        rid = run["id"]
        await until(lambda: any(isinstance(f, Assign) for f in link.frames))

        # Frames arriving faster than they are recorded: past 5 unrecorded, reading pauses.
        waits = [workers.frame(worker, RunStarted(run_id=rid, seq=1), link)]
        waits += [workers.frame(worker, Event(run_id=rid, seq=i, event=event(i)), link) for i in range(2, 9)]
        assert waits[:5] == [None] * 5 and all(w is not None for w in waits[5:])
        await asyncio.wait_for(asyncio.gather(*waits[5:]), 10)  # resumes once the acker recorded them
        inbox = workers.executor._runs[rid].inbox
        assert inbox.unprocessed <= 2 and inbox.persisted_seq == 8

        # The resume point committed with the events it covers, before any ack went out.
        row = await store.get_run(rid)
        assert row["execution_facts"]["worker_resume"]["seq"] == 8 and row["last_seq"] == 8
        assert row["execution_facts"]["worker_resume"]["slots"] == ["box/cpu"]
        await until(lambda: any(isinstance(f, Ack) for f in link.frames))
        assert max(f.seq for f in link.frames if isinstance(f, Ack)) <= 8

        workers.frame(worker, RunFinished(run_id=rid, status="succeeded", seq=9), link)
        await until(lambda: service.reads.known_status(rid) == "succeeded")
        row = await store.get_run(rid)
        assert row["status"] == "succeeded" and row["last_seq"] == 9
        await until(lambda: any(isinstance(f, Ack) and f.seq == 9 for f in link.frames))
    finally:
        await service.shutdown()
        await store.close()


async def test_a_batch_is_recorded_in_order_and_pauses_reading_once_past_the_bound(tmp_path):
    store, service, worker, link = await box_connected(tmp_path, capabilities=["ack", "batch"])
    try:
        workers = service.workers
        workers.executor.max_inbox = 5
        run = await service.submit({"graph": SMALL, "options": {"target": {"worker": "box"}}})
        rid = run["id"]
        await until(lambda: any(isinstance(f, Assign) for f in link.frames))

        assert workers.frames(worker, [RunStarted(run_id=rid, seq=1), Event(run_id=rid, seq=2, event=event(2))],
                              link) is None  # under the bound: read on
        # 2 again (a duplicate), a stray run's frame, then enough to pass the bound: one wait for it all.
        batch = [Event(run_id=rid, seq=2, event=event(2)), Event(run_id="gone", seq=1, event=event(0))]
        batch += [Event(run_id=rid, seq=i, event=event(i)) for i in range(3, 12)]
        wait = workers.frames(worker, batch, link)
        assert wait is not None
        await asyncio.wait_for(wait, 10)
        inbox = workers.executor._runs[rid].inbox
        assert inbox.persisted_seq == 11 and inbox.duplicates == 1
        assert any(isinstance(f, Cancel) and f.run_id == "gone" for f in link.frames)
        workers.frame(worker, RunFinished(run_id=rid, status="succeeded", seq=12), link)
        await until(lambda: service.reads.known_status(rid) == "succeeded")
        events, _, more = await store.read_events(rid)
        assert not more
        nodes = [e.payload["node_id"] for e in events if e.type == "node_status"]
        assert nodes == [f"n{i}" for i in range(2, 12)]  # in order, nothing twice
    finally:
        await service.shutdown()
        await store.close()


async def test_a_graceful_shutdown_stops_worker_runs_and_closes_their_connections(tmp_path):
    store, service, worker, link = await box_connected(tmp_path)
    workers = service.workers
    run = await service.submit({"graph": SMALL, "options": {"target": {"worker": "box"}}})
    rid = run["id"]
    await until(lambda: any(isinstance(f, Assign) for f in link.frames))
    workers.frame(worker, RunStarted(run_id=rid, seq=1), link)

    async def agent() -> None:  # the agent stops the run when asked, as a real one does
        await until(lambda: any(isinstance(f, Cancel) for f in link.frames))
        workers.frame(worker, RunFinished(run_id=rid, status="cancelled", seq=2), link)

    answering = asyncio.get_running_loop().create_task(agent())
    try:
        await service.shutdown()
        await answering
        (cancel,) = [f for f in link.frames if isinstance(f, Cancel)]
        assert cancel.grace_s == 5 and cancel.run_id == rid
        assert link.closed == (1001, "the control plane is shutting down")
        row = await store.get_run(rid)
        assert row["status"] == "interrupted"
        last = await store.last_event(rid)
        assert last.type == "execution_stopped" and last.payload["reason"]["code"] == "server_shutdown"
    finally:
        await store.close()


async def test_a_run_its_agent_stopped_is_interrupted_and_a_cancelled_one_stays_cancelled(tmp_path):
    store, service, worker, link = await box_connected(tmp_path)
    workers = service.workers
    try:
        ends = {}
        for error in ({"code": AGENT_STOPPED, "type": "AgentStopped", "message": "the worker agent box was stopped"},
                      None):
            run = await service.submit({"graph": SMALL, "options": {"target": {"worker": "box"}}})
            rid = run["id"]
            await until(lambda: any(isinstance(f, Assign) and f.run_id == rid for f in link.frames))
            workers.frame(worker, RunStarted(run_id=rid, seq=1), link)
            workers.frame(worker, RunFinished(run_id=rid, status="cancelled", error=error, seq=2), link)
            # The row and its closing event commit together: once the row is final, so is the log.
            for _ in range(1000):
                if (await store.get_run(rid))["status"] in ("interrupted", "cancelled"):
                    break
                await asyncio.sleep(0.01)
            ends[error is None] = (await store.get_run(rid))["status"], (await store.last_event(rid)).payload
        (stopped, stopped_closing), (cancelled, cancelled_closing) = ends[False], ends[True]
        assert stopped == "interrupted" and stopped_closing["status"] == "interrupted"
        assert stopped_closing["reason"] == {"code": AGENT_STOPPED, "message": "the worker agent box was stopped",
                                             "params": {"worker": "box"}}
        assert cancelled == "cancelled" and cancelled_closing["reason"]["code"] == "cancelled"
    finally:
        await service.shutdown()
        await store.close()


async def test_a_run_whose_agent_died_under_it_is_interrupted_and_a_failed_one_stays_failed(tmp_path):
    # Found by benchmarks/chaos.py: a SIGKILLed agent's runs ended failed, a result a study never
    # runs again, so a repetition was lost to an agent crash.
    store, service, worker, link = await box_connected(tmp_path)
    workers = service.workers
    try:
        ends = {}
        died = {"code": AGENT_RESTARTED, "type": "AgentRestarted",
                "message": "the worker agent stopped while this run was executing; its process ended with it"}
        for error in (died, {"type": "ValueError", "message": "bad input"}):
            run = await service.submit({"graph": SMALL, "options": {"target": {"worker": "box"}}})
            rid = run["id"]
            await until(lambda: any(isinstance(f, Assign) and f.run_id == rid for f in link.frames))
            workers.frame(worker, RunStarted(run_id=rid, seq=1), link)
            workers.frame(worker, RunFinished(run_id=rid, status="failed", error=error, seq=2), link)
            for _ in range(1000):
                if (await store.get_run(rid))["status"] in ("interrupted", "failed"):
                    break
                await asyncio.sleep(0.01)
            ends[error is died] = (await store.get_run(rid))["status"], (await store.last_event(rid)).payload
        (restarted, restarted_closing), (failed, failed_closing) = ends[True], ends[False]
        assert restarted == "interrupted" and restarted_closing["status"] == "interrupted"
        assert restarted_closing["reason"]["code"] == AGENT_RESTARTED
        assert restarted_closing["reason"]["params"] == {"worker": "box"}
        assert failed == "failed" and failed_closing["status"] == "failed"
    finally:
        await service.shutdown()
        await store.close()
