"""The runner frees a run's cards before its files go home (transfer and S3 backends): real run
processes, a real engine writing a real file; only the upload is a hand-written stand-in at the
edge (it holds until the test lets it go, and asks `stop` as the real backends do)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from test_agent_runner import Harness, run_async
from codefy_jupyter.agent.transfer import before_upload, upload_order
from codefy_jupyter.wire.run_options import ExecutionOptions


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


SAVE = {"nodes": [{"id": "model", "type": "MLP", "params": {"in_features": 64, "out_features": 2, "hidden": 64}},
                  {"id": "save", "type": "SaveModel", "params": {"filename": "m.pt"}}],
        "edges": [edge("model", "model", "save", "model")]}
TRANSFER = {"backend": "transfer", "inputs": []}


class HeldUpload:
    """An upload that waits for `go` (asking `stop` meanwhile, between 'files')."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.go = threading.Event()
        self.began = threading.Event()

    def upload_outputs(self, run_id: str, folder: Path, stop: Any = None) -> list[tuple[str, int]]:
        self.began.set()
        while not self.go.wait(0.02):
            before_upload(stop)
        return [(p.relative_to(folder).as_posix(), p.stat().st_size) for p in upload_order(folder)]


def harness(tmp_path: Path) -> tuple[Harness, HeldUpload]:
    h = Harness(tmp_path, "spawn")
    upload = HeldUpload(tmp_path / "cache")
    h.runner.transfer = upload
    return h, upload


def test_released_comes_after_the_process_exits_and_before_the_end(tmp_path):
    async def scenario() -> None:
        h, upload = harness(tmp_path)
        try:
            done = h.start("r1", SAVE, storage=TRANSFER)
            released = await asyncio.wait_for(h.wait_for("r1", "released"), 60)
            proc = h.runner.runs["r1"]
            assert proc.launched.exited.done()  # the process is gone: its cards are free
            assert "finished" not in [k for k, _ in h.of("r1")]  # but the run has not ended
            assert released["upload_bytes"] == (proc.data_dir / "m.pt").stat().st_size > 0
            assert upload.began.wait(10)
            await asyncio.sleep(0.3)
            assert not done.done()
            upload.go.set()
            body = await done
        finally:
            await h.close()
        assert body["status"] == "succeeded"
        kinds = [k for k, _ in h.of("r1")]
        assert kinds.count("released") == 1 and kinds.index("released") < kinds.index("finished") == len(kinds) - 1

    run_async(scenario)


def test_a_cancel_during_the_upload_stops_it_and_ends_the_run_cancelled(tmp_path):
    async def scenario() -> None:
        h, upload = harness(tmp_path)
        try:
            done = h.start("r1", SAVE, storage=TRANSFER)
            await asyncio.wait_for(h.wait_for("r1", "released"), 60)
            assert upload.began.wait(10)
            assert h.runner.cancel("r1", 30.0, "stop")
            body = await asyncio.wait_for(done, 10)
        finally:
            upload.go.set()
            await h.close()
        assert body["status"] == "cancelled" and body["error"] is None
        codes = [b["payload"]["code"] for k, b in h.of("r1") if k == "event" and b["type"] == "run_warning"]
        assert codes == ["worker_upload_stopped"]
        assert (tmp_path / "agent-runs" / "r1" / "data" / "m.pt").is_file()  # it stays on the worker

    run_async(scenario)


def test_a_run_without_files_never_says_released(tmp_path):
    async def scenario() -> None:
        h, _ = harness(tmp_path)
        try:
            body = await h.start("r1", {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}}], "edges": []})
        finally:
            await h.close()
        assert body["status"] == "succeeded"
        assert "released" not in [k for k, _ in h.of("r1")]

    run_async(scenario)


def test_a_recording_run_releases_at_its_report_and_ends_once_its_files_are_home(tmp_path, monkeypatch):
    from codefy_jupyter.agent.child import WRITE_DELAY_ENV

    monkeypatch.setenv(WRITE_DELAY_ENV, "2")

    async def scenario() -> None:
        h, upload = harness(tmp_path)
        try:
            done = h.start("r1", SAVE, storage=TRANSFER, options=ExecutionOptions(record_outputs=True))
            await asyncio.wait_for(h.wait_for("r1", "released"), 60)
            proc = h.runner.runs["r1"]
            assert not proc.launched.exited.done()  # still writing its outputs, the upload already going
            assert upload.began.wait(10)
            assert not done.done()
            upload.go.set()
            body = await asyncio.wait_for(done, 30)
            assert body["status"] == "succeeded"
            await asyncio.wait_for(proc.task, 60)
        finally:
            await h.close()

    run_async(scenario)


def test_an_agent_stop_during_the_upload_lets_it_finish(tmp_path):
    async def scenario() -> None:
        h, upload = harness(tmp_path)
        try:
            done = h.start("r1", SAVE, storage=TRANSFER)
            await asyncio.wait_for(h.wait_for("r1", "released"), 60)
            assert upload.began.wait(10)
            h.runner.cancel_all(10.0, "the worker agent is stopping")
            await asyncio.sleep(0.3)
            assert not done.done()  # still uploading
            upload.go.set()
            body = await asyncio.wait_for(done, 10)
        finally:
            upload.go.set()
            await h.close()
        assert body["status"] == "succeeded"
        assert not [b for k, b in h.of("r1") if k == "event" and b["type"] == "run_warning"]

    run_async(scenario)
