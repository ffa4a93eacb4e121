"""Where a sweep variant's table says it runs: the run row's placement, `any` for a waiting any run."""

from codefy_jupyter.core.experiments.children import child_placement


def test_a_waiting_any_run_shows_any_and_its_line():
    run = {"status": "queued", "worker_id": None, "devices": ["cuda"], "queue_key": "any/cuda"}
    assert child_placement(run) == {"worker_id": "any", "devices": ["cuda"], "queue_key": "any/cuda"}


def test_a_placed_or_local_run_keeps_its_row():
    placed = {"status": "running", "worker_id": "alpha", "devices": ["cuda:0"], "queue_key": "alpha/cuda:0"}
    assert child_placement(placed) == {k: placed[k] for k in ("worker_id", "devices", "queue_key")}
    # An any run this server took keeps its any line but runs here: no worker.
    here = {"status": "running", "worker_id": None, "devices": ["cpu"], "queue_key": "any/cpu"}
    assert child_placement(here)["worker_id"] is None
    local = {"status": "queued", "worker_id": None, "devices": ["cpu"], "queue_key": "cpu"}
    assert child_placement(local)["worker_id"] is None
