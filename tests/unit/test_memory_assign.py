"""A run admitted to a card shared by memory carries its budget in the assign (memory_budgets), on a
real RunService and store with a worker connected through a recording link; only to agents that
list the memory_budget capability; and heartbeats move the card's ledger."""

from __future__ import annotations


from codefy_jupyter._version import __version__
from codefy_jupyter.core.config import Settings
from codefy_jupyter.core.runs.run_service import RunService
from codefy_jupyter.core.workers.worker_service import WorkerService
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.workers.handshake import Credential
from codefy_jupyter.wire.frames import PROTOCOL_VERSION, Assign, Heartbeat, Hello
from test_worker_executor import SMALL, Link, until

MIB = 2 ** 20
CARD = {"device": "cuda:0", "uuid": "GPU-x", "total_memory": 8192 * MIB, "free_memory": 8192 * MIB, "share": "memory"}


async def connected(tmp_path, capabilities):
    store = await Store.open(tmp_path / "db.sqlite")
    service = RunService(store, Settings.load({"data_dir": str(tmp_path)}, env={}), data_dir=tmp_path, workers=WorkerService)
    await service.start()
    catalog = service.registry.catalog()
    link = Link()
    hello = Hello(name="box", version=__version__, protocol_version=PROTOCOL_VERSION, capabilities=capabilities,
                  catalog_hash=catalog["hash"], node_types=catalog["types"], devices=[{"device": "cpu"}, CARD])
    _, worker = await service.workers.hello(hello, Credential("server", "server"), link, loopback=True)
    service.workers.connected(worker)
    return store, service, worker, link


def submit(service, gib):
    return service.submit({"graph": SMALL, "options": {"device": "cuda:0",
                                                       "target": {"worker": "box", "memory_gib": gib}}})


async def test_the_assign_carries_the_budget_to_an_agent_that_caps(tmp_path):
    store, service, worker, link = await connected(tmp_path, ["memory_budget"])
    try:
        run = await submit(service, 2)
        await until(lambda: any(isinstance(f, Assign) for f in link.frames))
        assign = next(f for f in link.frames if isinstance(f, Assign))
        assert assign.run_id == run["id"] and assign.memory_budgets == {"cuda:0": 2048}
    finally:
        await service.shutdown()
        await store.close()


async def test_no_budget_in_the_assign_without_the_capability(tmp_path):
    store, service, worker, link = await connected(tmp_path, [])
    try:
        await submit(service, 2)
        await until(lambda: any(isinstance(f, Assign) for f in link.frames))
        assert next(f for f in link.frames if isinstance(f, Assign)).memory_budgets is None
    finally:
        await service.shutdown()
        await store.close()


async def test_a_heartbeat_with_more_free_memory_admits_a_waiting_run(tmp_path):
    store, service, worker, link = await connected(tmp_path, ["memory_budget"])
    try:
        workers = service.workers
        workers.frame(worker, Heartbeat(devices=[{"device": "cuda:0", "free_memory": 1024 * MIB}]), link)
        run = await submit(service, 2)
        assert run["queue_reason"]["code"] == "memory_wait"
        workers.frame(worker, Heartbeat(devices=[{"device": "cuda:0", "free_memory": 8000 * MIB}]), link)
        await until(lambda: any(isinstance(f, Assign) for f in link.frames))
    finally:
        await service.shutdown()
        await store.close()
