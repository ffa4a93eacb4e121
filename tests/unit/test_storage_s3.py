"""The S3 backend's pure decisions: key layout and what retention keeps (wire/s3_keys.py), the
session policy a run's credentials get, when they are refreshed, and which plan a placed run gets
(core/storage/s3.py, core/storage/plan.py)."""

from __future__ import annotations

import fnmatch

from codefy_jupyter.core.storage import plan as sp
from codefy_jupyter.core.storage.run_needs import FileInput
from codefy_jupyter.core.storage.s3 import keys_to_delete, refresh_delay, session_name, session_policy
from codefy_jupyter.wire import s3_keys
from codefy_jupyter.wire.codec import decode, encode
from codefy_jupyter.wire.frames import Credentials, SUPPORTED_CAPABILITIES

SHA = "ab" * 32


def test_keys_put_checkpoints_and_everything_else_apart():
    prefix = s3_keys.run_prefix("r1")
    assert prefix == "runs/r1/"
    assert s3_keys.input_key(SHA) == f"inputs/{SHA}"
    assert s3_keys.object_key(prefix, "checkpoints/train-epoch1.pt") == "runs/r1/checkpoint/train-epoch1.pt"
    assert s3_keys.object_key(prefix, "model.pt") == "runs/r1/output/model.pt"
    assert s3_keys.object_key(prefix, "sub/checkpoints/x") == "runs/r1/output/sub/checkpoints/x"


def test_retention_keeps_output_and_the_checkpoints_of_an_interrupted_run_only():
    prefix = "runs/r1/"
    keys = [prefix + "checkpoint/a.pt", prefix + "output/model.pt", prefix + "other.log", "runs/r10/checkpoint/b.pt",
            f"inputs/{SHA}"]
    assert keys_to_delete(keys, prefix, interrupted=False) == [prefix + "checkpoint/a.pt", prefix + "other.log"]
    assert keys_to_delete(keys, prefix, interrupted=True) == [prefix + "other.log"]


def _allowed(policy: dict, action: str, key: str, bucket: str = "b") -> bool:
    resource = f"arn:aws:s3:::{bucket}/{key}"
    return any(st["Effect"] == "Allow" and action in st["Action"]
               and any(fnmatch.fnmatchcase(resource, r) for r in st["Resource"]) for st in policy["Statement"])


def test_a_runs_session_policy_allows_its_prefix_and_its_inputs_only():
    policy = session_policy("b", "r1", [f"inputs/{SHA}", f"inputs/{SHA}"])
    assert _allowed(policy, "s3:PutObject", "runs/r1/checkpoint/a.pt")
    assert _allowed(policy, "s3:GetObject", "runs/r1/output/model.pt")
    assert _allowed(policy, "s3:GetObject", f"inputs/{SHA}")
    assert not _allowed(policy, "s3:PutObject", f"inputs/{SHA}")  # inputs are the control plane's to write
    assert not _allowed(policy, "s3:GetObject", "inputs/" + "cd" * 32)  # another run's input
    assert not _allowed(policy, "s3:GetObject", "runs/r2/output/model.pt")  # another run
    assert not _allowed(policy, "s3:GetObject", "runs/r10/output/model.pt")  # a run whose id extends ours
    assert not _allowed(policy, "s3:DeleteObject", "runs/r1/output/model.pt")
    assert not _allowed(policy, "s3:GetObject", "runs/r1/x", bucket="other")
    assert len(policy["Statement"][1]["Resource"]) == 1
    assert session_policy("b", "r1", [])["Statement"][0]["Sid"] == "RunPrefix"
    assert len(session_policy("b", "r1", [])["Statement"]) == 1


def test_session_names_fit_sts():
    assert session_name("0123abcd") == "codefy-0123abcd"
    assert len(session_name("x" * 100)) == 64
    assert session_name("a/b c") == "codefy-a-b-c"


def test_credentials_are_refreshed_with_a_third_of_their_life_left():
    assert refresh_delay(3600) == 2400
    assert refresh_delay(3) == 2
    assert refresh_delay(0.1) == 0.5


def test_transfer_runs_go_through_s3_on_workers_that_list_it_and_fall_back_on_others():
    inputs = (FileInput("csv", "path", "/data/uploads/a.csv"),)
    transfer = sp.plan_for(sp.TRANSFER, run_id="r1", data_dir="/data", label="data", mounts={}, inputs=inputs)
    s3 = sp.with_s3(transfer, run_id="r1", bucket="b", worker_has_s3=True)
    assert (s3.backend, s3.run_dir, s3.label, s3.inputs) == (sp.S3, "runs/r1/", "b", inputs)
    fallback = sp.with_s3(transfer, run_id="r1", bucket="b", worker_has_s3=False)
    assert (fallback.backend, fallback.fallback) == (sp.TRANSFER, True)
    assert sp.with_s3(transfer, run_id="r1", bucket=None, worker_has_s3=True) is transfer  # S3 off
    mount = sp.plan_for(sp.MOUNT, run_id="r1", data_dir="/data", label="data", mounts={"data": "/nas"})
    assert sp.with_s3(mount, run_id="r1", bucket="b", worker_has_s3=True) is mount  # the mount is better
    assert sp.StoragePlan.from_facts(s3.facts()).backend == sp.S3


def test_s3_artifact_rows_keep_the_bucket_and_key_and_read_back_as_urls(tmp_path):
    plan = sp.StoragePlan(sp.S3, run_dir="runs/r1/", label="b")
    assert plan.artifact_row("runs/r1/checkpoint/a.pt") == (sp.S3, "b", "runs/r1/checkpoint/a.pt")
    assert plan.artifact_row("/elsewhere/a.pt") == (None, None, "/elsewhere/a.pt")
    assert plan.artifact_row("runs/r2/checkpoint/a.pt") == (None, None, "runs/r2/checkpoint/a.pt")
    view = sp.read_view({"id": 7, "run_id": "r1", "path": "runs/r1/checkpoint/a.pt", "backend": "s3",
                         "mount_label": "b", "kind": "checkpoint"}, tmp_path, "data")
    assert view["path"] == "s3://b/runs/r1/checkpoint/a.pt" and view["download"] == "artifacts/7/download"
    assert (view["bucket"], view["key"], view["backend"]) == ("b", "runs/r1/checkpoint/a.pt", "s3")


def test_the_credentials_frame_is_the_servers_and_round_trips():
    frame = Credentials(run_id="r1", credentials={"access_key_id": "A", "secret_access_key": "S"})
    assert decode(encode(frame), sender="server") == frame
    assert "s3" in SUPPORTED_CAPABILITIES
