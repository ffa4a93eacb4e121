"""Where a sweep variant's table and a study attempt say they run: the run row's placement, `any`
for a waiting any run."""

from codefy_jupyter.core.experiments.children import child_placement
from codefy_jupyter.core.experiments.studies.views import attempt_view


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


def attempt(status: str, run_id: str = "r1") -> dict:
    return {"id": "a1", "attempt": 1, "run_id": run_id, "status": status, "repetition": 0, "seed": 7}


def test_a_study_attempt_reads_its_placement_as_a_sweep_variant_does():
    waiting = {"status": "queued", "worker_id": None, "devices": ["cuda"], "queue_key": "any/cuda"}
    view = attempt_view(attempt("queued"), {"r1": waiting})
    assert (view["worker_id"], view["devices"], view["queue_key"]) == ("any", ["cuda"], "any/cuda")
    assert view["run_exists"] is True
    placed = {"status": "running", "worker_id": "alpha", "devices": ["cuda:0"], "queue_key": "alpha/cuda:0"}
    view = attempt_view(attempt("running"), {"r1": placed})
    assert (view["worker_id"], view["devices"], view["queue_key"]) == ("alpha", ["cuda:0"], "alpha/cuda:0")
    # A child that no longer exists (pruned) carries no placement at all.
    gone = attempt_view(attempt("succeeded"), {})
    assert gone["run_exists"] is False and "worker_id" not in gone
