"""Files of worker runs, pure parts: which runs use files (run_needs, from node definitions), which
workers can serve them (placement.storage_backend and the scheduler's wait reasons and refusals),
and how a placed run's files and artifact rows are mapped (plan)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codefy_jupyter.core.scheduling.placement import storage_backend
from codefy_jupyter.core.scheduling.queue import LocalMachine, OfferedDevice, Run, RunQueue, SubmitError, WorkerOffer
from codefy_jupyter.core.storage import run_needs as rn
from codefy_jupyter.core.storage.plan import StoragePlan, plan_for, read_view, safe_relative
from codefy_jupyter.core.storage.transfer import TransferError, upload_target
from codefy_jupyter.engine import default_registry
from codefy_jupyter.engine.registry import NodeRegistry, RegistryError, param

DATA = "/srv/codefy"
REG = default_registry()


def graph(*nodes: dict) -> dict:
    return {"nodes": list(nodes), "edges": []}


def csv(path: str, node_id: str = "csv") -> dict:
    return {"id": node_id, "type": "CSVDataset", "params": {"path": path, "target_column": "y"}}


def loop(every: int = 0, resume: str = "") -> dict:
    return {"id": "train", "type": "TrainingLoop", "params": {"epochs": 2, "checkpoint_every": every,
                                                              "resume_from": resume}}


# -- run_files: from the nodes' declared file roles ------------------------------------------------

def test_the_builtin_nodes_declare_their_file_params():
    assert REG.get("CSVDataset").params["path"].file == "input"
    assert REG.get("TrainingLoop").params["checkpoint_every"].file == "writes"
    assert REG.get("TrainingLoop").params["resume_from"].file == "input"
    assert REG.get("SaveModel").params["filename"].file == "output"
    assert REG.get("LoadModel").params["filename"].file == "input"
    assert REG.get("CSVDataset").definition()["params"]["path"]["file"] == "input"
    assert "file" not in REG.get("Scale").definition()["params"]["factor"]


def test_a_graph_without_file_params_uses_no_files():
    found = rn.run_files(graph({"id": "k", "type": "Float", "params": {"value": 1}}, loop(every=0)), REG)
    assert not found.uses_files


def test_inputs_are_the_absolute_paths_and_writers_the_set_switches():
    found = rn.run_files(graph(csv(f"{DATA}/uploads/a.csv"), loop(every=1, resume="ckpt.pt")), REG)
    assert found.inputs == (rn.FileInput("csv", "path", f"{DATA}/uploads/a.csv"),)
    assert found.writes == ("train",)  # a relative resume_from names the run's own files
    assert rn.run_files(graph(csv("")), REG).inputs == ()


def test_a_pack_declares_its_own_file_params_and_an_unknown_role_is_refused():
    reg = NodeRegistry()

    @reg.node("Reads", params={"source": param.string("", file="input")})
    def reads(ctx, source):
        return {}

    assert rn.run_files(graph({"id": "r", "type": "Reads", "params": {"source": "/x/y"}}), reg).inputs[0].path == "/x/y"
    with pytest.raises(RegistryError, match="file role"):
        reg.node("Bad", params={"p": param.string("", file="sometimes")})(lambda ctx, p: {})


# -- classify: what a worker run needs ----------------------------------------------------------------

def need(*nodes: dict, sizes: dict | None = None, limit: int = 1000) -> rn.Need:
    found = rn.run_files(graph(*nodes), REG)
    return rn.classify(found, DATA, sizes or {}, limit)


def test_levels():
    assert need(loop(every=0)).level == rn.NONE
    assert need(loop(every=1)).level == rn.TRANSFER  # outputs alone go home by transfer
    up = f"{DATA}/uploads/a.csv"
    assert need(csv(up), sizes={up: 10}).level == rn.TRANSFER
    assert need(csv(up), sizes={up: 10}).relative == {up: "uploads/a.csv"}
    big = need(csv(up), sizes={up: 1001})
    assert big.level == rn.MOUNT and big.why["code"] == "inputs_too_big"
    other = need(csv(f"{DATA}/datasets/a.csv"))
    assert other.level == rn.MOUNT and other.why["code"] == "not_uploads"
    outside = need(csv("/home/me/a.csv"))
    assert outside.level == rn.SAME_MACHINE and outside.why["code"] == "outside_data_folder"


def test_a_path_that_climbs_out_of_the_data_folder_is_outside_it():
    assert need(csv(f"{DATA}/uploads/../../etc/passwd")).level == rn.SAME_MACHINE
    assert rn.inside(f"{DATA}x/a.csv", DATA) is None
    assert rn.inside(DATA, DATA) is None
    assert rn.inside(f"{DATA}/./uploads/a.csv", DATA) == "uploads/a.csv"


# -- which worker serves what -----------------------------------------------------------------------

@pytest.mark.parametrize("level,same,label,transfer,expected", [
    ("none", False, False, False, "none"),
    ("transfer", True, True, True, "local"),
    ("transfer", False, True, True, "mount"),  # a mount beats transfer
    ("transfer", False, False, True, "transfer"),
    ("transfer", False, False, False, None),
    ("mount", False, False, True, None),
    ("mount", False, True, False, "mount"),
    ("same_machine", False, True, True, None),
    ("same_machine", True, False, False, "local"),
])
def test_storage_backend(level, same, label, transfer, expected):
    assert storage_backend(level, same_machine=same, has_label=label, transfer=transfer) == expected


MID, OTHER = "a" * 64, "b" * 64


def queue(*offers: WorkerOffer) -> RunQueue:
    q = RunQueue(slots=("cpu",), local=LocalMachine(MID, ()))
    for offer in offers:
        q.set_worker(offer)
    return q


def worker(name: str, **kw) -> WorkerOffer:
    return WorkerOffer(name, devices=(OfferedDevice("cuda:0"),), machine_id=OTHER, **kw)


def test_a_run_that_uses_files_goes_only_to_a_worker_that_can_reach_them():
    q = queue(worker("a-plain"), worker("b-transfer", transfer=True), worker("c-mount", has_label=True))
    q.submit(Run("up", 1, "cuda:0", worker="any", files="transfer"))
    q.submit(Run("folder", 2, "cuda:0", worker="any", files="mount"))
    q.submit(Run("none", 3, "cuda:0", worker="any"))
    started = {p.run_id: p.worker for p in q.schedule()}
    assert started == {"up": "b-transfer", "folder": "c-mount", "none": "a-plain"}


def test_a_named_worker_without_the_label_leaves_the_run_waiting_with_a_reason():
    q = queue(worker("box", transfer=True))
    q.submit(Run("r", 1, "cuda:0", worker="box", files="mount"))
    assert q.schedule() == []
    why = q.reason("r")
    assert why.code == "waiting_for_storage"
    assert why.params == {"worker": "box", "need": "mount", "label": "data"}
    assert "worker box lacks the mount label data" in why.message
    q.set_worker(worker("box", has_label=True))  # the agent came back with --mount data=...
    assert [p.run_id for p in q.schedule()] == ["r"]


def test_any_waits_for_a_worker_with_what_it_needs():
    q = queue(worker("box"))
    q.submit(Run("r", 1, "cuda:0", worker="any", files="transfer"))
    assert q.schedule() == []
    assert q.reason("r").code == "waiting_for_storage"
    assert "a worker with the mount label data, or the transfer backend" in q.reason("r").message


def test_a_same_machine_worker_borrows_the_folder_without_declaring_it():
    here = WorkerOffer("here", devices=(OfferedDevice("cuda:0"),), machine_id=MID, loopback=True)
    q = queue(here)
    q.submit(Run("r", 1, "cuda:0", worker="here", files="same_machine"))
    assert [p.worker for p in q.schedule()] == ["here"]


def test_a_file_outside_the_data_folder_is_refused_for_a_worker_on_another_machine():
    q = queue(worker("box", has_label=True, transfer=True))
    with pytest.raises(SubmitError) as err:
        q.submit(Run("r", 1, "cuda:0", worker="box", files="same_machine"))
    assert err.value.code == "worker_storage_unavailable"
    assert err.value.params["field"] == "options.target.worker"


# -- the plan: rewritten inputs, artifact rows, read back ------------------------------------------------

def test_a_mount_plan_points_inputs_into_the_mount_and_stores_rows_relative_to_it():
    up = f"{DATA}/uploads/a.csv"
    found = rn.run_files(graph(csv(up), loop(every=1)), REG)
    classified = rn.classify(found, DATA, {up: 1}, 10)
    plan = plan_for("mount", run_id="r1", data_dir=DATA, label="data", mounts={"data": "/nas/c"},
                    inputs=found.inputs, relative=classified.relative)
    g = graph(csv(up), loop(every=1))
    out = plan.graph_for_worker(g)
    assert out["nodes"][0]["params"]["path"] == "/nas/c/uploads/a.csv"
    assert g["nodes"][0]["params"]["path"] == up  # the stored graph is not touched
    assert plan.assign_doc() == {"backend": "mount", "run_dir": "/nas/c/runs/r1", "label": "data"}
    assert plan.artifact_row("/nas/c/runs/r1/checkpoints/x.pt") == ("mount", "data", "runs/r1/checkpoints/x.pt")
    assert plan.artifact_row("/tmp/elsewhere.pt") == (None, None, "/tmp/elsewhere.pt")
    assert StoragePlan.from_facts(plan.facts()).artifact_row("/nas/c/runs/r1/a") == ("mount", "data", "runs/r1/a")
    row = {"id": 1, "run_id": "r1", "kind": "checkpoint", "path": "runs/r1/checkpoints/x.pt", "backend": "mount",
           "mount_label": "data"}
    view = read_view(row, Path(DATA), "data")
    assert view["path"] == f"{DATA}/runs/r1/checkpoints/x.pt" and view["relative_path"] == "runs/r1/checkpoints/x.pt"
    assert read_view({"path": "/x", "run_id": "r1"}, Path(DATA), "data")["backend"] == "local"


def test_a_transfer_plan_lists_inputs_by_hash_and_rows_are_under_the_runs_folder():
    plan = plan_for("transfer", run_id="r1", data_dir=DATA, label="data", mounts={})
    hashed = [{"node_id": "csv", "param": "path", "sha256": "f" * 64, "size": 3, "name": "a.csv"}]
    assert plan.assign_doc(hashed) == {"backend": "transfer", "inputs": hashed}
    assert plan.artifact_row("checkpoints/x.pt") == ("transfer", None, "checkpoints/x.pt")
    view = read_view({"run_id": "r1", "path": "checkpoints/x.pt", "backend": "transfer"}, Path(DATA), "data")
    assert view["path"] == f"{DATA}/runs/r1/checkpoints/x.pt"
    assert plan_for("local", run_id="r1", data_dir=DATA, label="data", mounts={}).assign_doc() == {
        "backend": "local", "run_dir": f"{DATA}/runs/r1"}
    assert plan_for("none", run_id="r1", data_dir=DATA, label="data", mounts={}).assign_doc() is None


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b", "a/\x00"])
def test_upload_paths_that_leave_the_folder_are_refused(tmp_path, path):
    assert safe_relative(path) is None
    with pytest.raises(TransferError) as err:
        upload_target(tmp_path, path)
    assert err.value.status == 400 and err.value.code == "bad_upload_path"


def test_an_upload_path_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "out").symlink_to(tmp_path)
    with pytest.raises(TransferError):
        upload_target(tmp_path / "run", "out/x")
    assert upload_target(tmp_path / "run", "checkpoints/x.pt") == (tmp_path / "run" / "checkpoints" / "x.pt").resolve()
