"""`codefy run` and `codefy runs ...` as real subprocesses against a real headless server from
`codefy start`: output lines, exit codes, and that the run outlives whatever stops the watching."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from codefy_jupyter.wire.cpu_threads import available_cores
from test_headless import Servers, api, edge, submit, wait_status

pytestmark = pytest.mark.slow

SMALL = {"nodes": [{"id": "l", "type": "List", "params": {"values": [1, 2, 3]}}, {"id": "avg", "type": "Mean"},
                   {"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [edge("l", "values", "avg", "values"), edge("k", "value", "s", "x")]}

DIV_BY_ZERO = {"nodes": [{"id": "a", "type": "Float", "params": {"value": 1}},
                         {"id": "z", "type": "Float", "params": {"value": 0}},
                         {"id": "div", "type": "Divide"}],
               "edges": [edge("a", "value", "div", "a"), edge("z", "value", "div", "b")]}


def sleepy(seconds: float) -> dict[str, Any]:
    return {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                      {"id": "nap", "type": "Sleep", "params": {"seconds": seconds}}],
            "edges": [edge("k", "value", "nap", "value")]}


class Cli:
    """The shared server and a `codefy` that finds it through CODEFY_DATA_DIR (its server.json)."""

    def __init__(self, servers: Servers, state: dict[str, Any]) -> None:
        self.servers, self.state = servers, state
        self.env = {**servers.env, "CODEFY_DATA_DIR": str(servers.data_dir)}
        self.cwd = servers.cwd

    def graph(self, name: str, graph: Any) -> str:
        path = self.cwd / name
        path.write_text(graph if isinstance(graph, str) else json.dumps(graph))
        return str(path)

    def __call__(self, *args: str, env: dict[str, str] | None = None,
                 timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], cwd=self.cwd,
                              env=env or self.env, capture_output=True, text=True, timeout=timeout)
        assert "Warning" not in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-u", "-m", "codefy_jupyter.cli", *args], cwd=self.cwd,
                                env=env or self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def cancel_all(self) -> None:
        """Free the cpu queue for the next test: cancel whatever a test left active."""
        code, page = api(self.state, "GET", "runs?status=queued,running")
        assert code == 200, page
        for run in page["runs"]:
            api(self.state, "POST", f"runs/{run['id']}/cancel")
        for run in page["runs"]:
            wait_status(self.state, run["id"], {"cancelled", "succeeded", "failed", "interrupted"})


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Any:
    servers = Servers(tmp_path_factory.mktemp("run-cli"))
    try:
        state = servers.start()
        yield Cli(servers, state)
        servers.stop()
    finally:
        servers.kill_leftovers()


@pytest.fixture
def cli(shared) -> Any:
    yield shared
    shared.cancel_all()


def run_id_of(text: str) -> str:
    match = re.search(r"Run ID\s+([0-9a-f]+)", text)
    assert match, text
    return match.group(1)


def read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 90) -> str:
    """stdout lines up to and including the first that contains `needle`."""
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        assert time.monotonic() < deadline, seen
        line = proc.stdout.readline()
        assert line, f"stdout closed before {needle!r}: {seen}{proc.stderr.read()}"
        seen += line
    return seen


def finish(proc: subprocess.Popen[str], timeout: float = 90) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()  # reap it and close its pipes
        raise
    assert "Warning" not in err and "Traceback" not in err, err
    return proc.returncode, out, err


# -- codefy run -------------------------------------------------------------------------------


def test_run_succeeds_with_node_lines_and_a_result_block(cli):
    proc = cli("run", cli.graph("small.json", SMALL), "--name", "small one", "--seed", "7")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    run_id = run_id_of(out)
    assert "=== Run submitted ===" in out
    assert re.search(r"Name\s+small one", out) and re.search(r"Graph\s+small\.json", out)
    assert re.search(r"Device\s+cpu", out) and re.search(r"Seed\s+7", out)
    assert f"codefy runs watch {run_id}" in out
    assert "▸ started on cpu, seed 7" in out
    for line in ("✓ l (List)", "✓ avg (Mean)", "✓ k (Float)", "✓ s (Scale)", "· avg: mean 2"):
        assert line in out, out
    assert "✓ run complete" in out and "(4 executed, 0 cached)" in out
    result = out[out.index("✓ run complete"):]
    assert re.search(r"Result\s+succeeded", result) and re.search(r"mean\s+2\n", result)
    row = wait_status(cli.state, run_id, {"succeeded"})
    assert row["name"] == "small one" and row["seed"] == 7


def test_run_json_prints_the_final_run(cli):
    proc = cli("run", cli.graph("small.json", SMALL), "--json", "--no-seed", "--record-outputs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads(proc.stdout)
    assert run["status"] == "succeeded" and run["seed"] is None
    assert run["options"]["record_outputs"] is True


def test_a_failing_node_exits_1_with_the_structured_error(cli):
    proc = cli("run", cli.graph("div.json", DIV_BY_ZERO))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "✗ run failed" in out
    assert re.search(r"Node\s+div \(Divide\)", out)
    assert re.search(r"Exception\s+ValueError", out)
    assert re.search(r"Message\s+input 'b' is zero: cannot divide a \(1\.0\) by zero", out)
    assert re.search(r"Result\s+failed", out)
    assert "✓ run complete" not in out


def test_detach_prints_the_run_and_leaves_it_running(cli):
    proc = cli("run", cli.graph("nap.json", sleepy(30)), "--detach", "--name", "walk away")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = run_id_of(proc.stdout)
    assert "▸ started" not in proc.stdout  # it did not watch
    row = wait_status(cli.state, run_id, {"running"})
    assert row["name"] == "walk away"

    as_json = cli("run", cli.graph("small.json", SMALL), "--detach", "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["status"] in ("queued", "running", "succeeded")


def test_timeout_exits_1_and_the_run_keeps_going(cli):
    began = time.monotonic()
    proc = cli("run", cli.graph("nap.json", sleepy(300)), "--timeout", "1.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - began < 100  # not the run's 300 s (a busy machine's start is slow)
    run_id = run_id_of(proc.stdout)
    assert "▸ started" in proc.stdout
    assert f"stopped watching after 1.5 s: run {run_id} is still running and keeps going on the server" \
        in proc.stderr
    assert wait_status(cli.state, run_id, {"running"})["finished_at"] is None


def test_ctrl_c_stops_watching_only(cli):
    proc = cli.popen("run", cli.graph("nap.json", sleepy(30)))
    seen = read_until(proc, "▸ started")
    run_id = run_id_of(seen)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, out + err
    assert f"stopped watching (Ctrl+C): run {run_id} keeps going on the server" in err
    assert f"Watch it again with `codefy runs watch {run_id}`" in err
    time.sleep(0.3)
    assert wait_status(cli.state, run_id, {"running"})["finished_at"] is None


def test_a_cancel_from_another_client_ends_the_watch_with_1(cli):
    proc = cli.popen("run", cli.graph("nap.json", sleepy(30)))
    run_id = run_id_of(read_until(proc, "▸ started"))
    cancel = cli("runs", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert run_id in cancel.stdout and "■" in cancel.stdout
    code, out, err = finish(proc)
    assert code == 1, out + err
    assert "■ cancelled" in out and re.search(r"Result\s+cancelled", out)
    assert wait_status(cli.state, run_id, {"cancelled"})["status"] == "cancelled"


def test_a_waiting_run_reports_its_place_in_line(cli):
    blockers = [submit(cli.state, sleepy(30)) for _ in range(2)]  # cpu runs two at once
    for run in blockers:
        wait_status(cli.state, run["id"], {"running"})
    proc = cli.popen("run", cli.graph("small.json", SMALL))
    seen = read_until(proc, "○ queued")
    assert "○ queued  position 1 on cpu" in seen
    api(cli.state, "POST", f"runs/{blockers[0]['id']}/cancel")
    code, out, err = finish(proc)
    assert code == 0, seen + out + err
    assert "▸ started" in out and "✓ run complete" in out


def test_missing_and_invalid_graph_files(cli):
    missing = cli("run", str(cli.cwd / "nope.json"))
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"error: graph file not found: {cli.cwd / 'nope.json'}" in missing.stderr
    broken = cli("run", cli.graph("broken.json", "{ not json"))
    assert broken.returncode == 1
    assert "broken.json is not valid JSON: Expecting property name" in broken.stderr
    listed = cli("run", cli.graph("list.json", "[1, 2]"))
    assert listed.returncode == 1 and "does not hold a graph object" in listed.stderr


def test_a_rejected_submit_prints_the_servers_message_and_field(cli):
    too_long = cli("run", cli.graph("small.json", SMALL), "--name", "x" * 300)
    assert too_long.returncode == 1
    assert "error: the server refused the run: name: at most 200 characters" in too_long.stderr
    assert "field: name" in too_long.stderr and "HTTP 422" in too_long.stderr

    device = cli("run", cli.graph("small.json", SMALL), "--device", "quantum")
    assert device.returncode == 1
    assert "unknown device 'quantum'" in device.stderr and "field: options.device" in device.stderr
    assert "HTTP 400, device_invalid" in device.stderr

    unknown = cli("run", cli.graph("bad-type.json", {"nodes": [{"id": "n", "type": "NoSuchNode"}], "edges": []}))
    assert unknown.returncode == 1
    assert "unknown node type 'NoSuchNode'" in unknown.stderr and "invalid_graph" in unknown.stderr
    assert "did you mean" not in unknown.stderr  # nothing registered is close to it

    typo = cli("run", cli.graph("typo.json", {"nodes": [{"id": "n", "type": "Scael"}], "edges": []}))
    assert typo.returncode == 1
    assert "node 'n', type: unknown node type 'Scael'; did you mean 'Scale'?" in typo.stderr, typo.stderr


def test_bad_arguments_exit_2(cli):
    graph = cli.graph("small.json", SMALL)
    for args in (["--seed", "-1"], ["--seed", "1", "--no-seed"], ["--detach", "--wait"], ["--timeout", "0"],
                 ["--devices", "cuda:0,,cuda:1"], ["--port", "70000"]):
        proc = cli("run", graph, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "usage: codefy run" in proc.stderr
    assert cli("runs").returncode == 2


def test_a_wrong_token_is_refused_clearly(cli):
    proc = cli("run", cli.graph("small.json", SMALL), "--token", "wrong")
    assert proc.returncode == 1
    assert "refused the request (403 Forbidden): wrong or missing token" in proc.stderr
    listed = cli("runs", "ls", "--url", cli.state["url"], "--token", "wrong")
    assert listed.returncode == 1 and "403 Forbidden" in listed.stderr


def test_host_and_port_reach_the_server_with_its_recorded_token(cli):
    proc = cli("run", cli.graph("small.json", SMALL), "--host", "127.0.0.1", "--port", str(cli.state["port"]),
               "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["status"] == "succeeded"


def test_no_server_found(tmp_path):
    lonely = Servers(tmp_path)  # its own, empty data and runtime dirs
    env = {**lonely.env, "CODEFY_DATA_DIR": str(lonely.data_dir)}
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    proc = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "error: no codefy server found: start one with `codefy start`" in proc.stderr
    ls = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "runs", "ls", "--json"], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=120)
    assert ls.returncode == 1
    assert json.loads(ls.stdout)["error"]["code"] == "no_server"


def test_a_server_gone_mid_watch_ends_with_a_clear_message(tmp_path):
    servers = Servers(tmp_path)
    try:
        state = servers.start()
        env = {**servers.env, "CODEFY_DATA_DIR": str(servers.data_dir), "CODEFY_RECONNECT_S": "1"}
        path = tmp_path / "nap.json"
        path.write_text(json.dumps(sleepy(30)))
        proc = subprocess.Popen([sys.executable, "-u", "-m", "codefy_jupyter.cli", "run", str(path)], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run_id = run_id_of(read_until(proc, "▸ started"))
        os.kill(state["pid"], signal.SIGKILL)
        code, out, err = finish(proc)
        assert code == 1, out + err
        assert f"lost the codefy server at {state['url']} while watching run {run_id}" in err
        assert "The run may still be going on the server" in err
    finally:
        servers.kill_leftovers()


# -- codefy runs ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(shared) -> dict[str, str]:
    """One succeeded and one failed run, by id."""
    ok = submit(shared.state, SMALL, name="listed ok")
    bad = submit(shared.state, DIV_BY_ZERO, name="listed bad")
    wait_status(shared.state, ok["id"], {"succeeded"})
    wait_status(shared.state, bad["id"], {"failed"})
    return {"ok": ok["id"], "bad": bad["id"]}


def test_runs_ls_table_filter_paging_and_json(cli, finished):
    proc = cli("runs", "ls", "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "WHERE", "DEVICE", "QUEUE", "STARTED", "DURATION", "LOSS"]
    code, page = api(cli.state, "GET", "runs?limit=1")
    assert re.fullmatch(rf"2 of {page['total']}", lines[-1])
    assert len(lines) == 4

    failed = cli("runs", "ls", "--status", "failed")
    assert failed.returncode == 0
    row = next(line for line in failed.stdout.splitlines() if line.startswith(finished["bad"]))
    assert "listed bad" in row and " failed " in row and " cpu " in row
    assert finished["ok"] not in failed.stdout

    as_json = cli("runs", "ls", "--status", "succeeded", "--limit", "50", "--offset", "0", "--json")
    doc = json.loads(as_json.stdout)
    assert {r["status"] for r in doc["runs"]} == {"succeeded"} and doc["limit"] == 50
    assert finished["ok"] in [r["id"] for r in doc["runs"]]

    bogus = cli("runs", "ls", "--status", "bogus")
    assert bogus.returncode == 1
    assert "unknown status 'bogus'" in bogus.stderr and "field: status" in bogus.stderr


def test_runs_ls_shows_the_queue_position_of_a_waiting_run(cli):
    blockers = [submit(cli.state, sleepy(30)) for _ in range(2)]
    for run in blockers:
        wait_status(cli.state, run["id"], {"running"})
    waiting = submit(cli.state, SMALL, name="in line")
    proc = cli("runs", "ls", "--status", "queued")
    row = next(line for line in proc.stdout.splitlines() if line.startswith(waiting["id"]))
    assert "in line" in row and " queued " in row and " #1 " in row
    shown = cli("runs", "show", waiting["id"])
    assert re.search(r"Queue\s+position 1 on cpu", shown.stdout)


def test_runs_show_text_and_json(cli, finished):
    proc = cli("runs", "show", finished["bad"])
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"Run ID\s+{finished['bad']}", proc.stdout)
    assert re.search(r"Name\s+listed bad", proc.stdout) and re.search(r"Status\s+failed", proc.stdout)
    assert "node div (Divide): ValueError: input 'b' is zero" in proc.stdout
    ok = cli("runs", "show", finished["ok"])
    assert re.search(r"mean\s+2\s+\(avg\)", ok.stdout)
    doc = json.loads(cli("runs", "show", finished["ok"], "--json").stdout)
    assert doc["id"] == finished["ok"] and doc["status"] == "succeeded"
    # The CPU thread budget it ran with, and why (the server's default: 2 cpu slots).
    cores = available_cores()
    assert re.search(rf"CPU threads\s+{max(1, cores // 2)} \({cores} cores / 2 cpu slots\)", ok.stdout), ok.stdout
    assert doc["execution_facts"]["cpu_threads"] == {"threads": max(1, cores // 2), "source": "auto", "cores": cores,
                                                     "slots": 2}


def test_runs_events_text_json_cursor_and_follow(cli, finished):
    proc = cli("runs", "events", finished["bad"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "execution_start" in lines[0] and lines[0].split()[0] == "1"
    assert "execution_error" in lines[-2] and "cannot divide" in lines[-2]
    assert re.fullmatch(r"\d+ events, run failed, cursor \d+", lines[-1])

    doc = json.loads(cli("runs", "events", finished["bad"], "--cursor", "2", "--json").stdout)
    assert doc["events"][0]["seq"] == 3 and doc["events"][-1]["type"] == "execution_error"
    assert doc["status"] == "failed"

    follow = cli("runs", "events", finished["ok"], "--follow", "--json")
    assert follow.returncode == 0
    events = [json.loads(line) for line in follow.stdout.splitlines()]
    assert events[0]["type"] == "execution_start" and events[-1]["type"] == "execution_complete"


def test_runs_metrics_table_csv_plot_json(cli, finished):
    table = cli("runs", "metrics", finished["ok"])
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["NODE", "METRIC", "POINTS", "LAST", "MIN", "MAX"]
    assert table.stdout.splitlines()[1].split() == ["avg", "mean", "1", "2", "2", "2"]
    csv = cli("runs", "metrics", finished["ok"], "--csv")
    assert csv.stdout.splitlines()[0] == "node_id,name,step,value,created_at"
    assert csv.stdout.splitlines()[1].startswith("avg,mean,,2.0,")
    plot = cli("runs", "metrics", finished["ok"], "--plot")
    assert "avg/mean  (1 points)" in plot.stdout and "last 2" in plot.stdout
    doc = json.loads(cli("runs", "metrics", finished["ok"], "--json").stdout)
    assert [(p["name"], p["value"]) for p in doc["metrics"]] == [("mean", 2.0)]
    none = cli("runs", "metrics", finished["bad"])
    assert none.returncode == 0 and "recorded no metrics" in none.stdout
    assert cli("runs", "metrics", finished["ok"], "--csv", "--plot").returncode == 2


def test_runs_cancel_and_rm(cli):
    run = submit(cli.state, sleepy(30), name="to cancel")
    wait_status(cli.state, run["id"], {"running"})
    active_rm = cli("runs", "rm", run["id"])
    assert active_rm.returncode == 1 and "HTTP 409" in active_rm.stderr
    cancel = cli("runs", "cancel", run["id"], "--json")
    assert cancel.returncode == 0, cancel.stderr
    assert json.loads(cancel.stdout)["id"] == run["id"]
    wait_status(cli.state, run["id"], {"cancelled"})
    again = cli("runs", "cancel", run["id"])
    assert again.returncode == 1 and "HTTP 409" in again.stderr

    removed = cli("runs", "rm", run["id"])
    assert removed.returncode == 0 and removed.stdout.strip() == f"deleted run {run['id']}"
    assert api(cli.state, "GET", f"runs/{run['id']}")[0] == 404
    as_json = cli("runs", "rm", submit_done(cli.state), "--json")
    assert as_json.returncode == 0 and set(json.loads(as_json.stdout)) == {"deleted", "server"}


def submit_done(state) -> str:
    run = submit(state, SMALL)
    wait_status(state, run["id"], {"succeeded"})
    return run["id"]


@pytest.mark.parametrize("action", ["show", "cancel", "rm", "events", "metrics"])
def test_runs_with_an_unknown_id(cli, action):
    proc = cli("runs", action, "0123456789abcdef")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "error: no run 0123456789abcdef" in proc.stderr and "HTTP 404, run_not_found" in proc.stderr
    as_json = cli("runs", action, "0123456789abcdef", "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "run_not_found"


# -- which server, pipes, watch ---------------------------------------------------------------


def many_epochs(epochs: int) -> dict[str, Any]:
    """The example training graph, tiny per epoch (one batch), run for many epochs."""
    graph = json.loads((Path(__file__).parents[2] / "examples" / "train_mlp.json").read_text())
    params = {"data": {"n_samples": 96}, "loader": {"batch_size": 96}, "train": {"epochs": epochs},
              "model": {"hidden": 8}}
    for n in graph["nodes"]:
        n.setdefault("params", {}).update(params.get(n["id"], {}))
    return graph


def test_every_command_says_which_server_it_uses_and_why(cli, finished):
    said = f"server {cli.state['url']} — the `codefy start` server recorded in {cli.servers.state_file}"
    for args in (["runs", "ls"], ["runs", "show", finished["ok"]], ["runs", "metrics", finished["ok"], "--csv"],
                 ["runs", "events", finished["ok"], "--follow", "--json"], ["run", cli.graph("s.json", SMALL)]):
        proc = cli(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert proc.stderr.splitlines()[0] == said, (args, proc.stderr)
        assert said not in proc.stdout
    as_json = cli("runs", "show", finished["ok"], "--json")
    assert said not in as_json.stderr
    assert json.loads(as_json.stdout)["server"] == {
        "url": cli.state["url"], "source": "codefy start", "others": [],
        "why": f"the `codefy start` server recorded in {cli.servers.state_file}"}
    ran = json.loads(cli("run", cli.graph("s.json", SMALL), "--json").stdout)
    assert ran["status"] == "succeeded" and ran["server"]["url"] == cli.state["url"]
    given = cli("runs", "ls", "--url", cli.state["url"], "--token", cli.state["token"])
    assert given.stderr.startswith(f"server {cli.state['url']} — given with --url/--host/--port")


def test_a_closed_pipe_ends_a_command_quietly(cli, finished):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    proc = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "runs", "show", finished["ok"]],
                          cwd=cli.cwd, env=cli.env, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception" not in proc.stderr


def test_runs_events_into_head_stops_quietly_and_a_piped_run_prints_few_lines(cli):
    proc = cli("run", cli.graph("long.json", many_epochs(400)), "--seed", "1", timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 45, proc.stdout  # not one line per epoch
    assert any(re.match(r"  · train step 400: train_loss", line) for line in lines), proc.stdout
    assert "✓ run complete" in proc.stdout
    run_id = run_id_of(proc.stdout)

    # Its log is long (a metric event per epoch): far more than a pipe holds, so head goes first.
    events = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "runs", "events", run_id],
                              cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-n", "3"], stdin=events.stdout, capture_output=True, timeout=120)
    events.stdout.close()
    err = events.stderr.read().decode()
    events.stderr.close()
    assert events.wait(timeout=120) == 141, err
    assert len(head.stdout.decode().splitlines()) == 3
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception" not in err


def test_runs_watch_replays_a_finished_run_like_codefy_run(cli, finished):
    ok = cli("runs", "watch", finished["ok"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("=== Run ===\n") and re.search(rf"Run ID\s+{finished['ok']}", ok.stdout)
    assert re.search(r"Name\s+listed ok", ok.stdout) and re.search(r"Status\s+succeeded", ok.stdout)
    for line in ("▸ started on cpu", "✓ avg (Mean)", "· avg: mean 2", "✓ run complete", "(4 executed, 0 cached)"):
        assert line in ok.stdout, ok.stdout
    assert re.search(r"Result\s+succeeded", ok.stdout)

    bad = cli("runs", "watch", finished["bad"])
    assert bad.returncode == 1
    assert "✗ run failed" in bad.stdout and re.search(r"Node\s+div \(Divide\)", bad.stdout)
    as_json = cli("runs", "watch", finished["bad"], "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["status"] == "failed"
    unknown = cli("runs", "watch", "0123456789abcdef")
    assert unknown.returncode == 1 and "HTTP 404, run_not_found" in unknown.stderr


def test_the_twelve_characters_lab_shows_are_an_id_every_command_takes(cli, finished):
    full, short = finished["ok"], finished["ok"][:12]
    shown = cli("runs", "show", short)
    assert shown.returncode == 0, shown.stderr
    assert re.search(rf"Run ID\s+{full}", shown.stdout) and re.search(r"Status\s+succeeded", shown.stdout)
    watched = cli("runs", "watch", short)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert re.search(rf"Run ID\s+{full}", watched.stdout) and "✓ run complete" in watched.stdout
    followed = cli("runs", "events", short[:8], "--follow")
    assert followed.returncode == 0, followed.stderr
    assert "execution_start" in followed.stdout and "execution_complete" in followed.stdout
    metrics = cli("runs", "metrics", short, "--json")
    assert metrics.returncode == 0 and json.loads(metrics.stdout)["metrics"], metrics.stderr
    too_short = cli("runs", "show", full[:7])
    assert too_short.returncode == 1 and "HTTP 404, run_not_found" in too_short.stderr


def test_runs_watch_follows_a_running_run_to_its_end(cli):
    # 10 s: still running when `codefy runs watch` has started and read it, on a busy machine too.
    run = submit(cli.state, sleepy(10), name="watched")
    wait_status(cli.state, run["id"], {"running"})
    proc = cli.popen("runs", "watch", run["id"])
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert re.search(r"Status\s+running", out) and "▸ started on cpu" in out
    assert "✓ nap (Sleep)" in out and "✓ run complete" in out

    long = submit(cli.state, sleepy(30))
    wait_status(cli.state, long["id"], {"running"})
    proc = cli.popen("runs", "watch", long["id"])
    read_until(proc, "▸ started")
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130 and f"Watch it again with `codefy runs watch {long['id']}`" in err


def test_a_relative_graph_path_not_found_says_where_it_looked(cli):
    (cli.cwd / "examples").mkdir(exist_ok=True)
    (cli.cwd / "examples" / "g.json").write_text(json.dumps(SMALL))
    sub = cli.cwd / "kernels"
    sub.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", "examples/g.json"], cwd=sub,
                          env=cli.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (f"error: graph file not found: examples/g.json (looked for {sub / 'examples' / 'g.json'}); "
            f"working directory {sub}; there is ../examples/g.json ({cli.cwd / 'examples' / 'g.json'})") \
        in proc.stderr


def test_cli_widget_rows_and_api_show_the_same_final_loss(cli):
    """The seen case: `runs ls` showed val_loss where RunsTable showed train_loss for one run."""
    from codefy_jupyter.cli.output import value_text
    from codefy_jupyter.client.client import Client
    from codefy_jupyter.kernel.widgets import RunsTable
    from codefy_jupyter.kernel.widgets.runs_rows import format_loss

    graph = json.loads((Path(__file__).parents[2] / "examples" / "train_mlp.json").read_text())
    next(n for n in graph["nodes"] if n["id"] == "train")["params"]["epochs"] = 3
    run = submit(cli.state, graph, name="final loss")
    wait_status(cli.state, run["id"], {"succeeded"}, timeout=90)

    code, points = api(cli.state, "GET", f"runs/{run['id']}/metrics")
    assert code == 200
    last = {p["name"]: p["value"] for p in points["metrics"]}
    assert last["val_loss"] != last["train_loss"]  # the two series the views used to disagree on
    code, view = api(cli.state, "GET", f"runs/{run['id']}")
    assert code == 200 and view["final_loss"] == {"name": "val_loss", "value": last["val_loss"]}
    code, page = api(cli.state, "GET", "runs?limit=50")
    assert next(r for r in page["runs"] if r["id"] == run["id"])["final_loss"] == view["final_loss"]

    listed = cli("runs", "ls")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run["id"]))
    assert row.endswith(f"{value_text(last['val_loss'])} (val_loss)"), row
    shown = cli("runs", "show", run["id"])
    assert re.search(rf"Final loss\s+{re.escape(value_text(last['val_loss']))} \(val_loss\)", shown.stdout)

    with Client(url=cli.state["url"], token=cli.state["token"]) as client:
        table = RunsTable(client, refresh_s=0)
        try:
            cells = next(r for r in table.rows if r["id"] == run["id"])
            assert (cells["final_loss"], cells["final_loss_title"]) == (format_loss(last["val_loss"]), "val_loss")
        finally:
            table.close()


def test_a_run_behind_a_seeded_run_waiting_to_run_alone_says_why(cli):
    """The seen case: an unseeded run at Queue #2 with a free cpu slot and no reason."""
    busy = submit(cli.state, sleepy(30), name="busy")
    wait_status(cli.state, busy["id"], {"running"})
    seeded = submit(cli.state, SMALL, name="seeded", options={"seed": 7})
    behind = submit(cli.state, SMALL, name="behind")
    code, head = api(cli.state, "GET", f"runs/{seeded['id']}")
    assert head["queue_reason"]["code"] == "waiting_to_run_alone"
    code, view = api(cli.state, "GET", f"runs/{behind['id']}")
    assert code == 200 and view["status"] == "queued" and view["queue_position"] == 2
    reason = view["queue_reason"]
    assert reason["code"] == "behind_waiting_run"
    assert reason["params"] == {"run_id": seeded["id"], "name": "seeded", "queue": "cpu", "code": "waiting_to_run_alone",
                                "ahead": head["queue_reason"]}
    # Who is ahead by name, and why it waits; the code stays in the payload for scripts.
    said = ("behind run 'seeded' in the cpu queue, which is held up: a seeded run executes alone on this server: "
            "waiting for 1 run to finish")
    assert reason["message"] == said
    shown = cli("runs", "show", behind["id"])
    assert re.search(r"Waiting for\s+" + re.escape(said), shown.stdout), shown.stdout
