"""The worker executor's frame counts for the metrics, inside a real RunService over a real SQLite
file (no server): frames by type, the ones an agent replays from its spool after a reconnect (up to
the seq its run_alive listed), and the duplicates among them that are dropped."""

from __future__ import annotations

from codefy_jupyter._version import __version__
from codefy_jupyter.core.workers.handshake import Credential
from codefy_jupyter.wire.protocol import PROTOCOL_VERSION, Assign, Event, Hello, RunAlive, RunFinished, RunStarted

from test_worker_executor import SMALL, Link, box_connected, event, until


async def test_frames_replayed_after_a_reconnect_are_counted_and_duplicates_among_them_too(tmp_path):
    store, service, worker, link = await box_connected(tmp_path)
    try:
        workers = service.workers
        tally = workers.executor.tally
        run = await service.submit({"graph": SMALL, "options": {"target": {"worker": "box"}}})
        rid = run["id"]
        await until(lambda: any(isinstance(f, Assign) for f in link.frames))
        workers.frame(worker, RunStarted(run_id=rid, seq=1), link)
        for i in (2, 3, 4):
            workers.frame(worker, Event(run_id=rid, seq=i, event=event(i)), link)
        assert tally.replayed_total.value() == 0 and tally.duplicate_total.value() == 0

        # The socket drops; the agent dials again: it had assigned up to seq 6 and replays 3 to 6
        # (3 and 4 had arrived, 5 and 6 had not), then goes on live with 7.
        workers.closed("box", link, {"code": "closed", "params": {}, "text": "test drop"})
        await until(lambda: service._runs.executing(rid).status == "disconnected")
        catalog = service.registry.catalog()
        again = Link()
        hello = Hello(name="box", version=__version__, protocol_version=PROTOCOL_VERSION,
                      catalog_hash=catalog["hash"], node_types=catalog["types"], devices=[{"device": "cpu"}])
        _, back = await workers.hello(hello, Credential("server", "server"), again, loopback=True)
        assert back is not None
        workers.connected(back)
        workers.frame(back, RunAlive(runs={rid: 6}), again)
        for i in (3, 4, 5, 6, 7):
            workers.frame(back, Event(run_id=rid, seq=i, event=event(i)), again)
        workers.frame(back, RunFinished(run_id=rid, status="succeeded", seq=8), again)
        await until(lambda: service.reads.known_status(rid) == "succeeded")

        assert tally.replayed_total.value() == 4  # seqs 3 to 6
        assert tally.duplicate_total.value() == 2  # 3 and 4, dropped
        assert tally.received_total.samples() == {("run_started",): 1, ("event",): 8, ("run_finished",): 1}
        events, _, _ = await store.read_events(rid)
        assert [e.payload["node_id"] for e in events if e.type == "node_status"] == [f"n{i}" for i in range(2, 8)]
    finally:
        await service.shutdown()
        await store.close()
