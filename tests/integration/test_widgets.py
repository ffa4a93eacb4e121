"""The notebook widgets against a real server: a headless `codefy start` in a subprocess (a
notebook kernel is another process than its server, too), real runs, and the widgets created in
this process the way a kernel creates them, without a browser. Actions go in as the custom
messages the ESM sends (`_handle_custom_msg`, ipywidgets' own entry point for them)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest
from test_headless import SMALL, Servers
from test_server_runs import sleepy

from codefy_jupyter.client import Client, CodefyError
from codefy_jupyter.kernel.widgets import QueueDialog, RunsTable, RunView, WorkersTable
from codefy_jupyter.kernel.widgets._heartbeat import PULSE

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_mlp.json"
WAIT_S = 90


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    servers = Servers(tmp_path_factory.mktemp("widgets"))
    request.addfinalizer(servers.kill_leftovers)
    state = servers.start()
    yield state
    servers.stop()


@pytest.fixture
def client(server):
    with Client(url=server["url"], token=server["token"]) as c:
        yield c


def message(widget, content):
    """What the browser's `model.send(content)` delivers to the Python side."""
    widget._handle_custom_msg(content, [])


def test_run_view_follows_a_training_run_to_the_end(client):
    graph = json.loads(EXAMPLE.read_text())
    run = client.submit(EXAMPLE, name="mlp from a widget test")
    view = RunView(run["id"], client)
    try:
        assert view.wait(WAIT_S) == "succeeded"
        assert view.done and not view.following and view.follow_error == ""
        assert view.nodes == {n["id"]: "done" for n in graph["nodes"]}
        assert view.node_types["train"] == "TrainingLoop"
        train_loss = view.metrics["train_loss"]["train"]
        assert [step for step, _ in train_loss] == [float(e) for e in range(1, 11)]  # one point per epoch
        assert all(isinstance(v, float) for _, v in train_loss)
        assert view.progress["train"]["epoch"] == 10 and view.progress["train"]["epochs"] == 10
        assert view.progress["train"]["value"] == view.progress["train"]["total"]
        row = client.get(run["id"])
        assert view.cursor == row["last_seq"] and view.finished_at == row["finished_at"]
        assert (view.name, view.device, view.seed) == ("mlp from a widget test", "cpu", 42)
        assert view.queue_position is None and view.error is None
    finally:
        view.close()
    # Displayed again by run id (a restarted kernel): the same state from the log.
    again = RunView(run["id"], client)
    try:
        assert again.wait(WAIT_S) == "succeeded"
        assert again.nodes == view.nodes and again.metrics == view.metrics and again.cursor == view.cursor
    finally:
        again.close()


def test_run_view_shows_data_and_models_of_a_provenance_run(client, tmp_path):
    data = tmp_path / "rows.csv"
    data.write_text("a,b,y\n" + "".join(f"{i},{i * 3 % 5},{i % 2}\n" for i in range(9)))
    graph = {"nodes": [{"id": "csv", "type": "CSVDataset", "params": {"path": str(data), "target_column": "y"}}],
             "edges": []}
    run = client.submit(graph, name="reads a csv", provenance=True)
    view = RunView(run["id"], client)
    try:
        assert view.wait(WAIT_S) == "succeeded"
        digest = hashlib.sha256(data.read_bytes()).hexdigest()
        # What GET runs/{id} carries, as the view's Data and models rows.
        assert client.get(run["id"])["inputs"][0]["sha256"] == digest
        assert view.inputs == [{"kind": "dataset", "path": str(data.resolve()), "sha256": digest,
                                "digest": digest[:12], "detail": f"{data.stat().st_size} bytes, 9 rows"}]
    finally:
        view.close()
    plain = RunView(client.submit(graph, name="no provenance")["id"], client)
    try:
        assert plain.wait(WAIT_S) == "succeeded" and plain.inputs == []
    finally:
        plain.close()


def test_run_view_shows_the_place_in_line_then_the_run(client):
    blockers = [client.submit(sleepy(60), name=f"blocker {i}") for i in range(2)]  # both cpu slots
    waiting = client.submit(SMALL, name="waits its turn")
    view = RunView(waiting["id"], client)
    try:
        assert view.wait_until(lambda v: v.status == "queued" and v.queue_position == 1, WAIT_S)
        assert view.queue_key == "cpu" and view.nodes == {}
        for b in blockers:
            client.cancel(b["id"])
        assert view.wait(WAIT_S) == "succeeded"
        assert view.queue_position is None and view.nodes == {"k": "done", "s": "done"}
    finally:
        view.close()
    for b in blockers:
        assert client.wait(b["id"])["status"] == "cancelled"


def _beats_move(view: RunView, within_s: float) -> bool:
    """Whether the view's heartbeat goes up within `within_s` seconds."""
    start, done = view.heartbeat, threading.Event()
    for _ in range(int(within_s * 10)):
        if view.heartbeat > start:
            return True
        done.wait(0.1)
    return view.heartbeat > start


def test_the_kernel_beats_into_a_view_while_its_run_can_change_and_stops_after(client):
    slow = client.submit(sleepy(60), name="a view with a heartbeat")
    view = RunView(slow["id"], client)
    try:
        assert view.show_command == f"%codefy show {slow['id']}"
        assert view.heartbeat_s == PULSE.interval_s
        assert view.wait_until(lambda v: v.status == "running", WAIT_S)
        assert _beats_move(view, 5 * PULSE.interval_s)
        assert _beats_move(view, 5 * PULSE.interval_s)  # and on: a browser sees a live kernel
        state = view.get_state()
        assert state["heartbeat"] == view.heartbeat and state["show_command"] == view.show_command
        client.cancel(slow["id"])
        assert view.wait(WAIT_S) == "cancelled"
        # Finished: the pulse drops the view, the browser judges it no more.
        for _ in range(int(5 * PULSE.interval_s * 10)):
            if not view in PULSE:
                break
            threading.Event().wait(0.1)
        assert not view in PULSE
        assert not _beats_move(view, 2 * PULSE.interval_s)
    finally:
        view.close()


def test_a_closed_view_gets_no_more_beats(client):
    slow = client.submit(sleepy(60), name="a view closed while its run goes on")
    view = RunView(slow["id"], client)
    try:
        assert view.wait_until(lambda v: v.status == "running", WAIT_S)
        assert view in PULSE
    finally:
        view.close()
    assert not view in PULSE
    client.cancel(slow["id"])
    assert client.wait(slow["id"])["status"] == "cancelled"


def test_a_view_of_an_unknown_run_says_so(client):
    view = RunView("no-such-run", client)
    with pytest.raises(CodefyError) as info:
        view.wait(WAIT_S)
    assert "no-such-run" in str(info.value) and "no-such-run" in view.follow_error and not view.following
    view.close()
    with pytest.raises(ValueError, match="run_id"):
        RunView("  ", client)


def test_runs_table_lists_the_newest_50_with_the_count_and_filters(client):
    before = client.list()["total"]
    runs = [client.submit(SMALL, name=f"small {i}") for i in range(52)]
    for r in runs:
        assert client.wait(r["id"])["status"] == "succeeded"
    total = before + 52
    table = RunsTable(client, refresh_s=0)
    try:
        assert table.error is None
        assert len(table.rows) == 50 and table.total == total and table.count == f"50 of {total}"
        assert [r["id"] for r in table.rows[:3]] == [r["id"] for r in runs[::-1][:3]]  # newest first
        first = table.rows[0]
        assert (first["name"], first["status"], first["worker"], first["devices"]) == (
            "small 51", "succeeded", "This server", "cpu")
        assert first["actions"] == ["csv", "delete"] and first["final_loss"] == "-"  # SMALL logs no loss

        message(table, {"action": "filter", "filter": "queued"})
        assert table.filter == "queued" and table.rows == [] and table.count == "0 of 0"
        message(table, {"action": "filter", "filter": "succeeded"})
        succeeded = client.list(status="succeeded")["total"]
        assert table.total == succeeded and {r["status"] for r in table.rows} == {"succeeded"}
        message(table, {"action": "filter", "filter": "nope"})
        assert table.error["field"] == "filter" and table.filter == "succeeded"

        message(table, {"action": "delete", "run_id": runs[-1]["id"]})
        assert table.error is None and table.total == succeeded - 1
        assert runs[-1]["id"] not in {r["id"] for r in table.rows}
        with pytest.raises(CodefyError) as info:
            client.get(runs[-1]["id"])
        assert info.value.status == 404
    finally:
        table.close()


def test_runs_table_stop_watch_and_csv_go_through_the_api(client):
    table = RunsTable(client, refresh_s=0)
    train = client.submit(EXAMPLE, name="trained for its csv")
    slow = client.submit(sleepy(60), name="to be stopped")
    try:
        assert client.wait(train["id"])["status"] == "succeeded"
        message(table, {"action": "refresh"})
        row = next(r for r in table.rows if r["id"] == train["id"])
        assert row["final_loss"] not in ("-", "") and float(row["final_loss"]) > 0

        csv = table.csv(train["id"])
        header, *lines = csv.strip().splitlines()
        assert header == "node_id,name,step,value,created_at"
        assert sum(1 for line in lines if line.startswith("train,train_loss,")) == 10
        message(table, {"action": "csv", "run_id": train["id"]})
        assert table.message == f"metrics of run {train['id']} downloaded"

        message(table, {"action": "watch", "run_id": slow["id"]})
        watched = table.watched
        assert watched is not None and watched.run_id == slow["id"]
        assert watched.wait_until(lambda v: v.status == "running", WAIT_S)
        message(table, {"action": "refresh"})
        row = next(r for r in table.rows if r["id"] == slow["id"])
        assert row["status"] == "running" and row["actions"] == ["stop", "watch", "csv"]

        message(table, {"action": "delete", "run_id": slow["id"]})  # refused here: it is running
        assert table.error["field"] == "action" and "finished runs only" in table.error["message"]
        assert client.get(slow["id"])["status"] == "running"

        message(table, {"action": "stop", "run_id": slow["id"]})
        assert table.message == f"asked run {slow['id']} to stop"
        assert watched.wait(WAIT_S) == "cancelled"
        assert table.watch_state["status"] == "cancelled" and table.watch_state["run_id"] == slow["id"]
        message(table, {"action": "refresh"})
        row = next(r for r in table.rows if r["id"] == slow["id"])
        assert row["status"] == "cancelled" and row["actions"] == ["csv", "delete"]
    finally:
        table.close()
    assert watched._closing.is_set()  # closing the table stops what it watched


def test_workers_table_with_no_workers(client):
    table = WorkersTable(client, refresh_s=0)
    try:
        assert table.rows == [] and table.message == "no workers connected" and table.error is None
        message(table, {"action": "refresh"})
        assert table.message == "no workers connected" and table.updated_at is not None
        message(table, {"action": "launch"})
        assert table.error["field"] == "action"
    finally:
        table.close()


def test_queue_dialog_checks_submits_and_watches(client, tmp_path):
    graph_file = tmp_path / "small.json"
    graph_file.write_text(json.dumps({**SMALL, "settings": {"seed": 5}}))
    dialog = QueueDialog(str(graph_file), client)
    try:
        assert (dialog.graph_name, dialog.graph_nodes, dialog.graph_seed) == ("small.json", 2, 5)
        assert dialog.targets == [["local", "This server"], ["any", "Any available"]]
        assert "cpu" in dialog.device_choices

        before = client.list()["total"]
        message(dialog, {"action": "submit", "form": {"seed": "abc"}})
        assert dialog.error["field"] == "seed" and dialog.run is None
        message(dialog, {"action": "submit", "form": {"seed": "", "device": "tpu"}})
        assert dialog.error["field"] == "options.device" and dialog.error["status"] in (400, 422)
        assert dialog.run is None and client.list()["total"] == before  # nothing was queued

        message(dialog, {"action": "submit", "form": {"target": "local", "device": "cpu", "seed": "7",
                                                      "name": "from the dialog"}})
        assert dialog.error is None and dialog.run["status"] in ("queued", "running", "succeeded")
        run_id = dialog.run["id"]
        message(dialog, {"action": "watch"})
        # The browser gets the watched RunView as a model reference and draws that model in full.
        assert isinstance(dialog.watched, RunView) and dialog.watched.run_id == run_id
        assert dialog.get_state()["watched"] == f"IPY_MODEL_{dialog.watched.model_id}"
        assert dialog.watched.wait(WAIT_S) == "succeeded"
        assert dialog.watch_state["status"] == "succeeded" and dialog.watch_state["nodes_done"] == 2
        row = client.get(run_id)
        assert (row["name"], row["seed"], row["device"]) == ("from the dialog", 7, "cpu")

        dialog.submit(seed="", no_seed=True, name="unseeded")
        assert client.get(dialog.run["id"])["seed"] is None
        with pytest.raises(TypeError, match="colour"):
            dialog.submit(colour="red")
        first = dialog.watched
        message(dialog, {"action": "watch"})  # watching again replaces (and closes) the old view
        assert dialog.watched is not first and first._closing.is_set()
    finally:
        dialog.close()
    assert dialog.watched is None
    with pytest.raises(CodefyError) as info:
        QueueDialog(str(tmp_path / "missing.json"), client)
    assert info.value.code == "file_not_found"


def test_widgets_find_the_server_themselves_and_close_what_they_opened(client, server, monkeypatch):
    monkeypatch.setenv("CODEFY_URL", server["url"])
    monkeypatch.setenv("CODEFY_TOKEN", server["token"])
    slow = client.submit(sleepy(60), name="watched by a table that owns its client")
    table = RunsTable(refresh_s=0)  # Client() with no arguments: discovery (here the environment)
    try:
        assert table.error is None and slow["id"] in {r["id"] for r in table.rows}
        view = table.watch(slow["id"])
        assert view.wait_until(lambda v: v.status == "running", WAIT_S)
    finally:
        table.close()  # while the view may be inside a long poll on the table's client
    view._thread.join(WAIT_S)
    assert not view._thread.is_alive() and view.done
    assert table._client._loop.is_closed()  # the view closed the client it took over
    client.cancel(slow["id"])
    assert client.wait(slow["id"])["status"] == "cancelled"
