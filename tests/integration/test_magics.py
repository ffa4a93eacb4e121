"""`%codefy` in a real IPython InteractiveShell against a real jupyter-server with the extension.

The server runs on the test's event loop, so every cell runs in a worker thread (`cell()`): the
magics' client blocks on HTTP that the loop must answer. The run view follows its run in its own
thread; its traitlets are asserted once the events have arrived."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from test_server_runs import sleepy
from traitlets.config import Config

from codefy_jupyter import Client, Graph

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_mlp.json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def small_training() -> dict[str, Any]:
    """The example graph, made small: a real TrainingLoop that logs metrics each epoch."""
    g = Graph.from_dict(json.loads(EXAMPLE.read_text()))
    g["data"].set(n_samples=120)
    g["train"].set(epochs=2)
    return g.to_dict()


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


@pytest.fixture
def server(jp_serverapp, jp_base_url, http_server_port, http_server, monkeypatch):
    """The server's URL and token, where discovery looks first (the environment)."""
    url = f"http://localhost:{http_server_port[-1]}{jp_base_url}"
    monkeypatch.setenv("CODEFY_URL", url)
    monkeypatch.setenv("CODEFY_TOKEN", jp_serverapp.identity_provider.token)
    return url


class Shell:
    def __init__(self, cwd: Path) -> None:
        config = Config()
        config.HistoryManager.enabled = False
        InteractiveShell.clear_instance()
        self.ip = InteractiveShell.instance(config=config)
        self.ip.run_line_magic("load_ext", "codefy_jupyter")
        self.ip.run_line_magic("cd", str(cwd))
        self.magics = self.ip.magics_manager.registry["CodefyMagics"]

    async def cell(self, source: str) -> Any:
        """Run one cell; (result, captured output) with the error it raised, if any."""

        def run() -> Any:
            with capture_output() as captured:
                result = self.ip.run_cell(source)
            return result, captured

        return await asyncio.to_thread(run)

    async def ok(self, source: str) -> Any:
        result, captured = await self.cell(source)
        assert result.success, (result.error_before_exec or result.error_in_exec, captured.stdout, captured.stderr)
        return result.result, captured

    async def refused(self, source: str) -> str:
        """The message of the UsageError a cell raised, with no traceback printed."""
        result, captured = await self.cell(source)
        err = result.error_in_exec
        assert type(err).__name__ == "UsageError", (err, captured.stdout, captured.stderr)
        assert "Traceback" not in captured.stdout + captured.stderr
        return str(err)

    def close(self) -> None:
        for widget in (self.magics.last_view, self.magics.last_widget):
            if widget is not None:
                widget.close()
        for client in self.magics._clients.values():
            client.close()
        InteractiveShell.clear_instance()


@pytest.fixture
def shell(tmp_path):
    s = Shell(tmp_path)
    yield s
    s.close()


async def test_run_a_graph_file_and_the_views_state_after_its_events(server, shell, tmp_path):
    (tmp_path / "train.json").write_text(json.dumps(small_training()))
    _, out = await shell.ok('%codefy run train.json --name "from a cell" --seed 3')
    view = shell.magics.last_view
    assert view is not None and view.run_id == shell.magics.last_run_id
    assert any(WIDGET_MIME in o.data for o in out.outputs)  # displayed as a widget
    assert await asyncio.to_thread(view.wait, 90) == "succeeded"
    assert view.status == "succeeded" and view.name == "from a cell" and view.seed == 3
    assert view.nodes == {n: "done" for n in ("data", "split", "loader", "model", "opt", "loss", "train", "eval")}
    assert {"train_loss", "val_loss", "val_accuracy", "accuracy"} <= set(view.metrics)
    assert [step for step, _ in view.metrics["train_loss"]["train"]] == [1, 2]
    assert view.result["accuracy"] == view.metrics["accuracy"]["eval"][-1][1]
    assert view.error is None and view.following is False and view.cursor > 0


async def test_graphs_from_the_namespace_and_from_the_cell(server, shell):
    shell.ip.user_ns["g"] = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}}], "edges": []}
    b = Graph()
    b.add("Scale", x=b.add("Float", value=2)["value"], factor=4)
    shell.ip.user_ns["b"] = b

    run, _ = await shell.ok("%codefy run $g --json --detach --name 'dict  graph'")
    assert run["name"] == "dict  graph" and run["status"] in ("queued", "running", "succeeded")
    _, out = await shell.ok("%codefy run {b} --detach")
    assert f"submitted run {shell.magics.last_run_id} (b, " in out.stdout
    assert shell.magics.last_view is None  # --detach shows no view

    final, _ = await shell.ok("%codefy run {b} --json --wait")
    assert final["status"] == "succeeded" and shell.magics.last_view.result == {}
    assert shell.magics.last_view.nodes == {"float": "done", "scale": "done"}

    _, out = await shell.ok("%%codefy run --wait\n"
                            "nodes:\n"
                            "  - {id: k, type: Float, params: {value: 3}}\n"
                            "  - {id: s, type: Scale, params: {factor: 2}}\n"
                            "edges:\n"
                            "  - {source: k, source_port: value, target: s, target_port: x}\n")
    assert f"✓ run {shell.magics.last_run_id} succeeded" in out.stdout
    run, _ = await shell.ok(f"%%codefy run --json --detach\n{json.dumps(sleepy(0))}")
    assert run["id"] == shell.magics.last_run_id

    # `{expr}` and `$name` that are not graphs expand as in any magic line.
    shell.ip.user_ns["label"] = "expanded"
    run, _ = await shell.ok("%codefy run $g --json --detach --name $label")
    assert run["name"] == "expanded"


async def test_show_picks_a_run_up_again_in_a_new_shell_and_cancel_stops_it(server, shell, tmp_path):
    run, _ = await shell.ok(f"%%codefy run --json --detach --name nap\n{json.dumps(sleepy(60))}")
    shell.close()

    again = Shell(tmp_path)  # a kernel restart: nothing of the old shell is left
    try:
        await again.ok(f"%codefy show {run['id'][:12]}")  # the 12 characters Lab and the widgets show
        view = again.magics.last_view
        assert view.run_id == run["id"] and view.show_command == f"%codefy show {run['id']}"
        assert await asyncio.to_thread(view.wait_until, lambda v: v.status == "running", 30)
        again.ip.user_ns["run"] = run
        _, out = await again.ok("%codefy cancel {run['id']}")
        assert f"cancel requested for run {run['id']}" in out.stdout
        assert await asyncio.to_thread(view.wait, 60) == "cancelled"
        assert view.nodes["nap"] in ("cancelled", "running") and view.name == "nap"
    finally:
        again.close()


async def test_tables_and_the_queue_dialog(server, shell, tmp_path):
    shell.ip.user_ns["g"] = {"nodes": [{"id": "k", "type": "Float"}], "edges": []}
    await shell.ok("%codefy run $g --wait")
    _, out = await shell.ok("%codefy runs --status succeeded")
    table = shell.magics.last_widget
    assert type(table).__name__ == "RunsTable" and table.filter == "succeeded"
    assert [r["id"] for r in table.rows] == [shell.magics.last_run_id] and table.total == 1
    assert any(WIDGET_MIME in o.data for o in out.outputs)
    table.close()  # its refresher thread stops
    assert "--status: " in await shell.refused("%codefy runs --status sideways")

    await shell.ok("%codefy workers")
    workers = shell.magics.last_widget
    assert type(workers).__name__ == "WorkersTable" and workers.error is None and workers.rows == []
    workers.close()

    (tmp_path / "one.json").write_text(json.dumps(shell.ip.user_ns["g"]))
    await shell.ok("%codefy queue one.json")
    dialog = shell.magics.last_widget
    assert type(dialog).__name__ == "QueueDialog" and (dialog.graph_name, dialog.graph_nodes) == ("one.json", 1)
    dialog.close()
    await shell.ok("%codefy queue $g")
    assert shell.magics.last_widget.graph_nodes == 1
    assert "graph file not found: two.json" in await shell.refused("%codefy queue two.json")


@pytest.mark.parametrize("source, words", [
    ("%codefy run missing.json", ["graph file not found: missing.json"]),
    ("%codefy run $nothing_here", ["graph file not found: $nothing_here"]),
    ("%codefy run {g} --device tpu", ["the server refused the run", "unknown device 'tpu'", "field: options.device",
                                      "HTTP 400"]),
    ("%codefy run {g} --name " + "x" * 201, ["at most 200 characters", "field: name", "HTTP 422"]),
    ("%codefy run {bad}", ["the server refused the run", "unknown node type 'Nope'", "HTTP 400, invalid_graph"]),
    ("%codefy run {typo}", ["the server refused the run", "unknown node type 'Scael'; did you mean 'Scale'?"]),
    ("%codefy run {g} --seed -1", ["%codefy run: argument --seed: seed must be from 0 to 4294967295, got -1"]),
    ("%codefy run {g} --detach --wait", ["not allowed with argument"]),
    ("%codefy show 0123456789abcdef", ["no run 0123456789abcdef", "HTTP 404, run_not_found"]),
    ("%codefy cancel 0123456789abcdef", ["no run 0123456789abcdef", "HTTP 404"]),
    ("%codefy show", ["%codefy show: which run?"]),
    ("%codefy frobnicate", ["unknown command 'frobnicate'"]),
    ("%%codefy runs\n{}", ["%%codefy takes only `run`"]),
    ("%%codefy run\n# only a comment\n", ["the cell must hold a graph object", "got NoneType"]),
    ("%%codefy run\n[1, 2]", ["the cell must hold a graph object", "got list"]),
    ("%%codefy run\nnodes: [\n", ["the cell is neither JSON nor YAML", "line 2"]),
    ('%codefy run "unclosed', ["No closing quotation"]),
])
async def test_refusals_print_the_message_and_field_not_a_traceback(server, shell, source, words):
    shell.ip.user_ns["g"] = {"nodes": [{"id": "k", "type": "Float"}], "edges": []}
    shell.ip.user_ns["bad"] = {"nodes": [{"id": "k", "type": "Nope"}], "edges": []}
    shell.ip.user_ns["typo"] = {"nodes": [{"id": "k", "type": "Scael"}], "edges": []}
    message = await shell.refused(source)
    for word in words:
        assert word in message


async def test_a_wrong_token_and_no_server(server, shell, monkeypatch):
    monkeypatch.setenv("CODEFY_TOKEN", "wrong")
    assert "(403 Forbidden): wrong or missing token" in await shell.refused("%codefy cancel abc")
    monkeypatch.setenv("CODEFY_URL", "http://127.0.0.1:9/")
    assert "cannot reach the codefy server at http://127.0.0.1:9/" in await shell.refused("%codefy cancel abc")


def test_help_and_usage_need_no_server(shell, capsys):
    result = shell.ip.run_cell("%codefy")
    assert result.success
    assert "%codefy run GRAPH [flags]" in capsys.readouterr().out
    assert shell.ip.run_cell("%codefy run -h").success
    assert "usage: %codefy run [-h]" in capsys.readouterr().out


def test_kernel_setup_installs_the_startup_file_that_loads_the_magics(tmp_path):
    from codefy_jupyter.cli.kernel_setup import STARTUP_CODE

    shipped = Path(__file__).parents[2] / "kernels" / "ipython_startup" / "00-codefy.py"
    assert shipped.read_text() == STARTUP_CODE  # the repository's copy is the one installed
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=120)

    setup = run("-m", "codefy_jupyter.cli", "kernel-setup")
    installed = tmp_path / "ipython" / "profile_default" / "startup" / "00-codefy.py"
    assert setup.returncode == 0 and f"installed {installed}" in setup.stdout
    assert installed.read_text() == STARTUP_CODE
    probe = "print(get_ipython().find_magic('codefy') is not None, [k for k in dir() if 'codefy' in k])"
    shell = run("-m", "IPython", "--no-banner", "-c", probe)
    assert shell.stdout.strip().endswith("True []"), shell.stdout + shell.stderr  # loaded, namespace left clean
    removed = run("-m", "codefy_jupyter.cli", "kernel-setup", "--remove")
    assert removed.returncode == 0 and not installed.exists()
    assert run("-m", "IPython", "--no-banner", "-c", probe).stdout.strip().endswith("False []")


async def test_a_graph_file_not_found_says_the_resolved_path_and_the_working_directory(shell, tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "g.json").write_text("{}")
    notebooks = tmp_path / "kernels"
    notebooks.mkdir()
    shell.ip.run_line_magic("cd", str(notebooks))  # a notebook's kernel starts in the notebook's folder
    message = await shell.refused("%codefy run examples/g.json")
    assert message == (f"graph file not found: examples/g.json (looked for {notebooks / 'examples' / 'g.json'}); "
                       f"working directory {notebooks}; there is ../examples/g.json "
                       f"({tmp_path / 'examples' / 'g.json'})")


def start_a_study_and_a_sweep() -> tuple[str, str]:
    """A one-variant study run to its end, and a two-variant sweep, through the Client (blocking:
    called off the server's loop)."""
    graph = {"nodes": [{"id": "k", "type": "Float"}, {"id": "vals", "type": "List", "params": {"values": [1, 2, 3]}},
                       {"id": "m", "type": "Mean"}],
             "edges": [{"source": "vals", "source_port": "values", "target": "m", "target_port": "values"}]}
    objective = {"node_id": "m", "metric": "mean", "direction": "minimize"}
    with Client() as client:
        study = client.study({"base_graph": graph, "objective": objective, "repetitions": 1,
                              "variants": [{"label": "one", "ops": []}]})
        assert client.wait_study(study["id"])["status"] == "succeeded"
        sweep = client.sweep({"base_graph": graph, "objective": objective,
                              "sweep_spec": {"params": [{"node_id": "k", "param": "value", "values": [1, 2]}]}})
    return study["id"], sweep["sweep_id"]


async def test_sweep_and_study_views(server, shell):
    study_id, sweep_id = await asyncio.to_thread(start_a_study_and_a_sweep)
    _, out = await shell.ok(f"%codefy study {study_id[:12]}")  # the 12 characters Lab shows
    view = shell.magics.last_widget
    assert type(view).__name__ == "StudyView" and any(WIDGET_MIME in o.data for o in out.outputs)
    assert view.study_id == study_id
    await asyncio.to_thread(view.wait, 60)
    assert view.status == "succeeded" and [r["label"] for r in view.rows] == ["one"]
    view.close()
    await shell.ok(f"%codefy sweep {sweep_id[:8]}")
    view = shell.magics.last_widget
    assert type(view).__name__ == "SweepView" and view.sweep_id == sweep_id
    await asyncio.to_thread(view.wait, 60)
    assert view.state == "finished" and [r["objective"] for r in view.rows] == [2.0, 2.0]
    assert "HTTP 404" in await shell.refused("%codefy study 0123456789abcdef")
    assert "HTTP 404" in await shell.refused("%codefy sweep 0123456789abcdef")
