"""A run's `cards` (core/runs/cards.py): the cards of its device set by name, and the name the run
used for each (a worker renumbers CUDA cards from cuda:0 in the set's order; this server does not)."""

from __future__ import annotations

from codefy_jupyter.core.runs.cards import RunCards, in_run_names, inventory_names, run_cards

DECLARED = [{"key": "cuda:0", "name": "Declared A", "uuid": "GPU-a"}, {"key": "cuda:1", "uuid": "GPU-b"},
            {"key": "cuda:2", "name": "  "}, "not a device"]
HELLO = [{"device": "cpu"}, {"device": "cuda:0", "name": "A100"}, {"device": "cuda:2", "name": "H100"}]


def test_names_come_from_an_inventory_or_a_hello_and_unnamed_cards_are_left_out():
    assert inventory_names(DECLARED) == {"cuda:0": "Declared A"}
    assert inventory_names(HELLO) == {"cuda:0": "A100", "cuda:2": "H100"}


def test_a_local_run_keeps_its_names_and_a_worker_run_is_renumbered_in_its_sets_order():
    assert in_run_names(["cuda:2", "cuda:0"], False, None) == {"cuda:2": "cuda:2", "cuda:0": "cuda:0"}
    assert in_run_names(["cuda:2", "cuda:0"], True, None) == {"cuda:2": "cuda:0", "cuda:0": "cuda:1"}
    assert in_run_names(["mps:0"], True, None) == {"mps:0": "mps:0"}


def test_a_worker_runs_own_report_wins_over_the_rule():
    facts = {"device_aliases": {"cuda:0": "cuda:0", "cuda:1": "cuda:2"}}
    assert in_run_names(["cuda:2", "cuda:0"], True, facts) == {"cuda:2": "cuda:1", "cuda:0": "cuda:0"}
    # A page cuts large facts to {truncated: ...}: the rule still answers.
    assert in_run_names(["cuda:2"], True, {"truncated": True}) == {"cuda:2": "cuda:0"}


def test_a_placed_run_on_cards_lists_them_in_its_sets_order():
    row = {"status": "running", "worker_id": "box", "devices": ["cuda:2", "cuda:0"]}
    assert run_cards(row, {"cuda:0": "A100", "cuda:2": "H100"}) == [
        {"device": "cuda:2", "name": "H100", "in_run": "cuda:0"},
        {"device": "cuda:0", "name": "A100", "in_run": "cuda:1"}]
    local = {"status": "succeeded", "worker_id": None, "device": "cuda:1"}
    assert run_cards(local, {"cuda:0": "Declared A"}) == [{"device": "cuda:1", "name": None, "in_run": "cuda:1"}]


def test_a_waiting_run_and_a_cpu_run_hold_no_cards():
    assert run_cards({"status": "queued", "devices": ["cuda:0"]}, {"cuda:0": "A100"}) is None
    assert run_cards({"status": "running", "device": "cpu", "devices": ["cpu"]}, {}) is None
    assert run_cards({"status": "failed"}, {}) is None


def test_run_cards_asks_the_worker_side_for_a_worker_run_and_its_own_inventory_otherwise():
    asked: list[str] = []

    def worker_names(name: str) -> dict[str, str]:
        asked.append(name)
        return {"cuda:0": f"{name}'s card"}

    cards = RunCards({"cuda:0": "here"}, worker_names)
    worker_view = cards.add({"status": "running", "worker_id": "box", "devices": ["cuda:0"]})
    local_view = cards.add({"status": "running", "worker_id": None, "devices": ["cuda:0"]})
    cpu_view = cards.add({"status": "running", "worker_id": None, "devices": ["cpu"]})
    assert worker_view["cards"] == [{"device": "cuda:0", "name": "box's card", "in_run": "cuda:0"}]
    assert local_view["cards"] == [{"device": "cuda:0", "name": "here", "in_run": "cuda:0"}]
    assert "cards" not in cpu_view
    assert asked == ["box"]


def test_the_worker_side_names_a_workers_cards_from_its_row_while_it_is_away(tmp_path):
    import asyncio

    from codefy_jupyter.core.config import Settings
    from codefy_jupyter.core.runs.run_service import RunService
    from codefy_jupyter.core.store.database import Store
    from codefy_jupyter.core.workers.worker_service import WorkerService

    async def main() -> None:
        store = await Store.open(tmp_path / "db.sqlite")
        try:
            service = RunService(store, Settings.load({"data_dir": str(tmp_path)}, env={}), data_dir=tmp_path,
                                 workers=WorkerService, card_names={"cuda:0": "Declared A"})
            # An enrolled worker as the workers row keeps it: the devices of its last hello.
            service.workers.registry.load_enrolled([{"name": "box", "info": {"devices": HELLO}}])
            assert service.workers.card_names("box") == {"cuda:0": "A100", "cuda:2": "H100"}
            assert service.workers.card_names("nobody") == {}
            row = {"id": "r", "status": "succeeded", "worker_id": "box", "devices": ["cuda:2"], "graph": {}}
            assert service.reads.view(row)["cards"] == [{"device": "cuda:2", "name": "H100", "in_run": "cuda:0"}]
            here = {"id": "h", "status": "running", "worker_id": None, "devices": ["cuda:0"], "graph": {}}
            assert service.reads.view(here)["cards"] == [{"device": "cuda:0", "name": "Declared A", "in_run": "cuda:0"}]
        finally:
            await store.close()

    asyncio.run(main())
