"""The widgets' ESM modules in a real headless Chromium (Debian's `chromium`, never a downloaded
browser): a test page renders each module, exactly the text its widget class ships as `_esm`
(dom.js's helpers, then the widget's own module), with an in-page model implementing anywidget's
model interface, filled with state made by the same Python code the widgets sync. The DOM is
checked for the table's rows and for what clicks send to Python, and a screenshot for ink in each
row. A second page (views_page.html) lets virtual time pass: run views whose kernel stops beating
say so, the Queue on… dialog's Watch draws the watched RunView in full, and every worker state the
API lists gets a coloured pill."""

from __future__ import annotations

import functools
import html
import json
import re
import shutil
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from codefy_jupyter.core.workers.handshake import CatalogDiff
from codefy_jupyter.core.workers.registry import STATES, Worker
from codefy_jupyter.kernel.widgets import QueueDialog, RunsTable, RunView, WorkersTable
from codefy_jupyter.kernel.widgets.queue_form import device_choices, target_options
from codefy_jupyter.kernel.widgets.run_state_view import (RunViewState, apply_row, fold_all, show_command, summary,
                                                          to_traits)
from codefy_jupyter.kernel.widgets.runs_rows import FILTER_LABELS, count_label, table_row
from codefy_jupyter.kernel.widgets.workers_rows import NO_WORKERS, worker_rows

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH: install Debian's package (apt-get install -y chromium); "
                             ".ci/run installs it when missing")]
PAGE = Path(__file__).with_name("widget_page.html")
VIEWS_PAGE = Path(__file__).with_name("views_page.html")
FAKE_MODEL = Path(__file__).with_name("fake_model.js")
# The module files the page imports, each written from what its widget class ships.
MODULES = {"runs_table.js": RunsTable, "run_view.js": RunView, "workers_table.js": WorkersTable,
           "queue_dialog.js": QueueDialog}
WIDTH, HEIGHT = 1000, 1600
NOW = 1_700_000_000.0


def hexid(n: int) -> str:
    return f"{n:032x}"


def run_row(n: int, status: str, **fields) -> dict:
    row = {"id": hexid(n), "name": f"run {n}", "status": status, "device": "cpu", "devices": ["cpu"],
           "queue_key": "cpu", "options": {"lane": "queued"}, "worker_id": None, "submitted_at": NOW - 100,
           "started_at": NOW - 90, "finished_at": NOW - 10 if status not in ("queued", "running") else None}
    row.update(fields)
    return row


def view_state(with_system: bool = False) -> dict:
    log = [("execution_start", {"device": "cpu", "devices": ["cpu"], "seed": 42, "queue_key": "cpu",
                                "name": "mlp", "started_at": NOW - 30})]
    for node_id, node_type in (("data", "SyntheticClassification"), ("split", "TrainTestSplit"), ("model", "MLP")):
        log.append(("node_status", {"node_id": node_id, "node_type": node_type, "status": "done"}))
    for epoch in range(1, 4):
        log.append(("metric", {"node_id": "train", "name": "train_loss", "value": 1.0 / epoch, "step": epoch}))
        log.append(("metric", {"node_id": "train", "name": "val_loss", "value": 1.2 / epoch, "step": epoch}))
        if with_system:  # the run's system metrics (wire/system_metrics.py): no node, steps of their own
            log.append(("metric", {"node_id": None, "name": "system/cpu_percent", "value": 90.0 * epoch,
                                   "step": epoch - 1}))
            log.append(("metric", {"node_id": None, "name": "system/rss_bytes", "value": 2.0e8 * epoch,
                                   "step": epoch - 1}))
    log.append(("progress", {"node_id": "train", "node_type": "TrainingLoop", "value": 40, "total": 150,
                             "label": "epoch 3/10"}))
    events = [{"seq": i, "type": kind, "payload": payload} for i, (kind, payload) in enumerate(log, start=1)]
    return fold_all(RunViewState(hexid(1)), events)


# What GET runs/{id} carries for a run queued with provenance (`inputs`), drawn as Data and models.
INPUTS = [{"node_id": "data", "kind": "dataset", "path": "/data/iris.csv", "sha256": "59b722b71ebb" + "0" * 52,
           "size": 1024, "revision": "v3", "rows": 150},
          {"node_id": "load", "kind": "model", "path": "/data/weights.pt", "sha256": "0e41c7d2aa90" + "f" * 52,
           "size": 5311, "revision": None, "rows": None}]


def fixtures() -> dict:
    state = apply_row(view_state(with_system=True), {"status": "running", "inputs": INPUTS})
    runs = [run_row(1, "running", name="mlp", worker_id="gpu-box", device="cuda:2", devices=["cuda:2"],
                    cards=[{"device": "cuda:2", "name": "NVIDIA A100", "in_run": "cuda:0"}]),
            run_row(2, "queued", started_at=None, queue_position=2,
                    queue_reason={"code": "worker_away", "message": "waiting for worker gpu-box to reconnect"}),
            run_row(3, "succeeded"), run_row(4, "failed")]
    for r in runs:  # the API's final_loss (wire/run_summary.py) on the finished run
        if r["status"] == "succeeded":
            r["final_loss"] = {"name": "train_loss", "value": 0.00042}
    rows = [table_row(r, now=NOW) for r in runs]
    listing = {"workers": [{"name": "gpu-box", "state": "online",
                            "devices": [{"device": "cuda:0", "slots": {"limit": 1, "taken": 1}}],
                            "running_runs": ["r"]},
                           {"name": "laptop", "state": "draining",
                            "devices": [{"device": "cpu", "slots": {"limit": 2, "taken": 0}}]}],
               "local": {"devices": [{"device": "cpu", "slots": {"limit": 2, "taken": 1}}]}}
    worker_table, local = worker_rows(listing)
    out = {
        "runs": {"rows": rows, "total": 312, "count": count_label(len(rows), 312), "filter": "all",
                 "filters": FILTER_LABELS, "error": None, "message": "", "watch_state": summary(state)},
        "view": {**to_traits(state), "following": True, "follow_error": "", "heartbeat": 0, "heartbeat_s": 2.0,
                 "show_command": show_command(state.run_id)},
        "workers": {"rows": worker_table, "local": local, "message": "", "error": None},
        "noworkers": {"rows": [], "local": None, "message": NO_WORKERS, "error": None},
        "dialog": {"graph_name": "train_mlp.json", "graph_nodes": 8, "graph_seed": 42, "graph_device": "",
                   "targets": target_options(["gpu-box"]), "device_choices": device_choices(listing),
                   "target": "local", "device": "", "devices": "", "seed": "", "no_seed": False, "name": "",
                   "busy": False, "error": None, "watch_state": {},
                   "run": {"id": hexid(9), "status": "queued", "queue_key": "cpu"}},
    }
    # The fixtures use only traits the widgets really sync, so the page sees what a kernel sends.
    for key, cls in (("runs", RunsTable), ("view", RunView), ("workers", WorkersTable), ("noworkers", WorkersTable),
                     ("dialog", QueueDialog)):
        unknown = set(out[key]) - set(cls.class_trait_names(sync=True))
        assert not unknown, f"{key} fixture sets traits {cls.__name__} does not sync: {unknown}"
    return out


class _Link:
    peer = "127.0.0.1"

    def send(self, frame) -> None:
        pass

    def close(self, code: int, reason: str) -> None:
        pass


def views_fixtures() -> dict:
    """For views_page.html: the watched run's digest and model id, and a workers listing from the
    registry's own views with a worker in every state it defines, plus a degraded one."""
    workers = [Worker(name="a-offline"), Worker(name="b-gone", seen=True), Worker(name="c-up", link=_Link()),
               Worker(name="d-drain", link=_Link(), draining=True),
               Worker(name="e-degraded", link=_Link(), catalog=CatalogDiff(reported=True, matches=False,
                                                                           worker_lacks=("MLP",)))]
    assert {w.state for w in workers} == set(STATES)
    rows, local = worker_rows({"workers": [w.view() for w in workers]})
    return {"watched_id": "f" * 32, "watch_state": summary(view_state()),
            "all_workers": {"rows": rows, "local": local, "message": "", "error": None}}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the test output clean
        pass


@pytest.fixture
def site(tmp_path):
    """The page, each widget class's `_esm` and `_css` as the files the page loads, and fixtures.js,
    served over HTTP on loopback (module scripts do not load from file:// URLs)."""
    root = tmp_path / "site"
    root.mkdir()
    for name, cls in MODULES.items():
        (root / name).write_text(str(cls._esm), encoding="utf-8")
    (root / "widgets.css").write_text(str(RunsTable._css), encoding="utf-8")
    shutil.copy(PAGE, root / "index.html")
    shutil.copy(VIEWS_PAGE, root / "views.html")
    shutil.copy(FAKE_MODEL, root / "fake_model.js")
    (root / "fixtures.js").write_text("export default " + json.dumps({**fixtures(), **views_fixtures()}) + ";\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()
    server.server_close()
    thread.join()


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", "--mute-audio", f"--user-data-dir={tmp_path / 'profile'}", "--force-device-scale-factor=1",
         f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=90)


def page_report(dom: str) -> dict:
    match = re.search(r'<pre id="report">(.*?)</pre>', dom, re.S)
    assert match, "the page wrote no report:\n" + dom[-2000:]
    report = json.loads(html.unescape(match.group(1)))
    assert report["errors"] == [], report["errors"]
    return report


def ink(image, rect, *, threshold: int = 90) -> int:
    """Pixels in `rect` that differ clearly from the region's most common colour (its background)."""
    x, y, w, h = rect
    region = image.crop((x, y, x + w, y + h)).convert("RGB")
    background = max(region.getcolors(w * h), key=lambda c: c[0])[1]
    return sum(count for count, colour in region.getcolors(w * h)
               if sum(abs(a - b) for a, b in zip(colour, background)) > threshold)


def test_the_widgets_render_their_rows_and_send_their_actions(site, tmp_path):
    dumped = chromium(tmp_path, "--dump-dom", site)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = dumped.stdout
    report = page_report(dom)
    fx = fixtures()

    # Runs table: every row, in order, with its place in line and its reason, and the count.
    ids = [r["id"] for r in fx["runs"]["rows"]]
    assert report["run_rows"] == ids
    assert re.findall(r'<tr class="cdf-row[^"]*" data-run-id="([0-9a-f]{32})"', dom) == ids
    assert report["count"] == "4 of 312"
    assert report["queue_cells"] == ["Queue #2"] and report["reasons"] == ["waiting for worker gpu-box to reconnect"]
    # Devices names the card a run holds on hover (GET runs' cards), and nothing for one without.
    assert report["device_titles"] == ["cuda:2: NVIDIA A100 (cuda:0 in the run)", "", "", ""]
    assert "4.20e-4" in dom and ">Stop<" in dom and ">Watch<" in dom and ">CSV<" in dom and ">Delete<" in dom
    # Clicks become messages for Python; a chip sets the synced filter.
    assert report["runs_sent"] == [{"action": "stop", "run_id": ids[0]}, {"action": "delete", "run_id": ids[2]},
                                   {"action": "refresh"}]
    assert report["runs_filter"] == "failed" and report["runs_saved"] == 1 and report["active_chip"] == "failed"
    assert "Watching" in dom  # the watched run's strip

    # Run view: node states, epoch and batch bars, one chart line per series.
    assert report["view_nodes"] == {"data": "done", "split": "done", "model": "done", "train": "running"}
    assert report["bars"] == ["26.7%", "66.7%"]  # 2 of 10 epochs and 10 of the 15 batches of the third
    assert sorted(report["series"]) == [["system/cpu_percent", 3], ["system/rss_bytes", 3], ["train_loss", 3],
                                        ["val_loss", 3]]
    # The system metrics in charts of their own (percent, bytes): the training curves keep their scale.
    assert report["charts"] == [["train_loss", "val_loss"], ["system/cpu_percent"], ["system/rss_bytes"]]

    # Data and models: one row per file the run read, its digest cut to 12 digits (whole on hover).
    assert report["inputs_title"] == "Data and models"
    assert report["inputs"] == [
        ["dataset", "/data/iris.csv", "dataset", "/data/iris.csv", "sha256:59b722b71ebb", INPUTS[0]["sha256"],
         "1024 bytes, 150 rows, revision v3"],
        ["model", "/data/weights.pt", "model", "/data/weights.pt", "sha256:0e41c7d2aa90", INPUTS[1]["sha256"],
         "5311 bytes"]]

    # Workers: the rows, and the empty state.
    assert report["worker_rows"] == ["gpu-box", "laptop"]
    assert report["no_workers"] == "no workers connected"

    # Queue on…: choices, what Submit sends, a refused field marked.
    assert report["targets"] == ["This server", "Worker gpu-box", "Any available"]
    assert report["dialog_sent"] == [{"action": "submit", "form": {"target": "local", "device": "", "devices": "",
                                                                   "seed": "11", "no_seed": False,
                                                                   "name": "from the page"}}]
    assert report["invalid"] == ["seed"] and report["submitted"] == hexid(9)

    # The screenshot: ink in every table row and the chart's coloured lines.
    from PIL import Image

    shot = tmp_path / "widgets.png"
    taken = chromium(tmp_path, f"--screenshot={shot}", site)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    image = Image.open(shot)
    assert image.size == (WIDTH, HEIGHT)
    for rect in report["row_rects"] + report["worker_rects"]:
        assert rect[2] > 500 and rect[3] > 10, rect
        assert ink(image, rect) > 100, f"table row at {rect} is blank in the screenshot"
    x, y, w, h = report["chart_rect"]
    chart = image.crop((x, y, x + w, y + h)).convert("RGB")
    blue = sum(n for n, (r, g, b) in chart.getcolors(w * h) if b > 180 and r < 90 and g < 150)  # the #1f6feb line
    assert blue > 100, "the metrics chart has no line in the screenshot"


def test_views_say_when_their_kernel_went_away_and_the_dialog_watches_in_full(site, tmp_path):
    dumped = chromium(tmp_path, "--dump-dom", site.replace("index.html", "views.html"))
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    report = page_report(dumped.stdout)
    run_id = hexid(1)

    # A view whose kernel beats stays live; one whose kernel stopped beating says so after three
    # missed beats, with the command that gives a live view again.
    assert report["early"]["live"]["state"] == "live" and report["early"]["silent"]["state"] == "live"
    assert report["beats"] >= 8
    assert report["live"] == {"state": "live", "banner": None, "command": None, "banner_height": 0,
                              "banner_background": None}
    silent = report["silent"]
    assert silent["state"] == "disconnected" and silent["command"] == f"%codefy show {run_id}"
    assert "disconnected" in silent["banner"] and "kernel went away" in silent["banner"]
    assert "last seen running" in silent["banner"]
    assert silent["banner_height"] > 10 and silent["banner_background"] == "rgb(255, 248, 197)"
    # The comm closing says it at once (its beats were a minute apart); a finished run's view
    # never goes stale; beats coming back heal a view.
    assert report["closed"]["state"] == "disconnected" and report["closed"]["command"] == f"%codefy show {run_id}"
    assert report["finished"]["state"] == "live" and report["finished"]["banner"] is None
    assert report["stopped"]["state"] == "live" and report["stopped"]["banner"] is None
    assert report["healed_before"]["state"] == "disconnected" and report["healed_after"]["state"] == "live"

    # Queue on…'s Watch: the watched RunView's model drawn in full inside the dialog, no strip.
    assert report["dialog_sent"] == [{"action": "watch"}]
    watch = report["watch"]
    assert watch["run_views"] == 1 and watch["strip"] is False
    assert watch["nodes"] == {"data": "done", "split": "done", "model": "done", "train": "running"}
    # Its series: train_loss and val_loss, and its two system metrics in charts of their own.
    assert watch["bars"] == ["26.7%", "66.7%"] and watch["series"] == 4 and watch["title"] == "mlp"
    assert "run complete" in report["watch_after"] and "train_loss 0.25" in report["watch_after"]
    assert report["watch_cleared"] == {"run_views": 0, "strip": True}

    # Workers: a coloured pill for every state, and the degraded worker's second pill.
    pills = {(p["text"], p["tone"]) for p in report["pills"]}
    assert pills == {("offline", "off"), ("disconnected", "bad"), ("connected", "ok"), ("draining", "warn"),
                     ("degraded", "warn")}
    assert len(report["pills"]) == 6  # e-degraded: connected + degraded
    for pill in report["pills"]:
        assert pill["background"] != report["plain_pill_background"], pill
    backgrounds = {p["tone"]: p["background"] for p in report["pills"]}
    assert len(set(backgrounds.values())) == 4, backgrounds  # ok, warn, bad, off look different
    assert any("MLP" in p["title"] for p in report["pills"] if p["text"] == "degraded")
