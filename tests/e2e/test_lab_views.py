"""The lab extension's graph viewer, Queue on…, sweep view and Studies panel in a real `jupyter lab`
and headless Chromium (the harness of lab_server.py).

A small graph file (`tiny.codefy.json`) opens in the graph viewer by its file type and shows one
box per node; Queue on… refuses a seed out of range inline, with the field highlighted, offers the
server's memory estimate as a budget (est.), then queues the graph on This server, and the nodes turn
done live. A sweep created through the REST API opens
from a child run's detail (Open parent sweep) with a row per variant; the Studies button lists a
study created through the API, whose view ranks its variants with the paired statistics; a study
stopped through the API offers Resume, which continues it (at the revision on screen) to success.
Screenshots go to tmp/artifacts/lab-views/ (ignored by git)."""

from __future__ import annotations

import json
import time
import urllib.error
from pathlib import Path

import pytest
from lab_server import ARTIFACTS_ROOT, CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM, TOKEN, Lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), NEEDS_CHROMIUM]
ARTIFACTS = ARTIFACTS_ROOT / "lab-views"


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def mean_graph(values: list[float], nap: float = 0.0) -> dict:
    """Logs `mean` from node m; a Sleep of `nap` seconds before it."""
    return {"nodes": [{"id": "vals", "type": "List", "label": "Values", "params": {"values": values}},
                      {"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


TINY = {"nodes": [*mean_graph([1, 2, 3], 0.2)["nodes"],
                  {"id": "k", "type": "Float", "params": {"value": 2.0}},
                  {"id": "s", "type": "Scale", "params": {"factor": 3.0}}],
        "edges": [*mean_graph([1, 2, 3])["edges"], edge("k", "value", "s", "x")]}


BAD = {"nodes": [{"id": "x", "type": "NoSuchNodeType", "params": {}}], "edges": []}
MLP = json.loads((Path(__file__).resolve().parents[2] / "examples" / "train_mlp.json").read_text())


def wait_for(fetch, done, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.3)


def test_graph_viewer_queue_sweep_and_studies(lab: Lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (lab.root / "tiny.codefy.json").write_text(json.dumps(TINY, indent=1))
    (lab.root / "train_mlp.json").write_text(json.dumps(MLP))
    (lab.root / "bad.codefy.json").write_text(json.dumps(BAD))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            # A plugin that fails to activate is only logged: count it as an error too.
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "codefy" in m.text else None)

            # The file type opens the graph viewer: one box per node, left to right.
            page.goto(f"{lab.url}lab/tree/tiny.codefy.json?token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer")
            nodes = viewer.locator("g.cdf-node")
            expect(nodes).to_have_count(len(TINY["nodes"]), timeout=60_000)
            x = {n: float(viewer.locator(f'g.cdf-node[data-node-id="{n}"]').get_attribute("transform")
                          .split("(")[1].split(",")[0]) for n in ("vals", "nap", "m")}
            assert x["vals"] < x["nap"] < x["m"], x
            viewer.locator('g.cdf-node[data-node-id="nap"]').click()
            expect(viewer.locator(".cdf-graph-side")).to_contain_text("seconds")
            page.screenshot(path=str(ARTIFACTS / "1-graph-viewer.png"))

            # Queue on…: a seed out of range is refused inline, the field highlighted; then queued.
            page.locator(".cdf-graph-document .cdf-tb-queue").first.click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog.locator("select[name=target]")).to_be_visible()
            expect(dialog.locator("select[name=target] option")).to_have_text(["This server", "Any available"])
            dialog.locator("input[name=seed]").fill("99999999999")
            dialog.locator("input[name=name]").fill("tiny from the viewer")
            dialog.get_by_role("button", name="Queue").click()
            expect(dialog.locator(".cdf-refusal")).to_contain_text("a seed is a whole number")
            expect(dialog.locator("input[name=seed].cdf-field-error")).to_be_visible()
            expect(dialog.locator("input[name=name]")).to_have_value("tiny from the viewer")
            page.screenshot(path=str(ARTIFACTS / "2-queue-on-refused.png"))
            # The server's memory estimate is offered as the budget; taking it fills the field.
            use = dialog.locator(".cdf-use-estimate")
            expect(use).to_have_text("Use 0.25 GiB est.")
            use.click()
            expect(dialog.locator("input[name=memoryGib]")).to_have_value("0.25")
            dialog.locator("input[name=memoryGib]").fill("")  # a budget is for a worker's shared card
            dialog.locator("input[name=seed]").fill("3")
            dialog.locator('input[name=device][value="cpu"]').check()
            dialog.get_by_role("button", name="Queue").click()
            expect(page.locator(".jp-Dialog")).to_have_count(0)
            link = viewer.locator(".cdf-graph-status .cdf-run-link")
            expect(link).to_be_visible(timeout=60_000)
            run_id = link.get_attribute("data-run-id")
            expect(viewer.locator('g.cdf-node[data-state="done"]')).to_have_count(len(TINY["nodes"]), timeout=60_000)
            run = lab.wait_status(run_id, "succeeded")
            assert run["name"] == "tiny from the viewer" and run["seed"] == 3 and run["device"] == "cpu", run
            page.screenshot(path=str(ARTIFACTS / "3-graph-viewer-done.png"))

            # Run: the interactive lane with the file as the session, so a second Run reuses its cache.
            toolbar = page.locator(".cdf-graph-document").first
            for expected in ("done", "cached"):
                previous = link.get_attribute("data-run-id")
                toolbar.locator(".cdf-tb-run").click()
                expect(link).not_to_have_attribute("data-run-id", previous, timeout=60_000)
                expect(viewer.locator('[data-role="run-status"]')).to_have_text("succeeded", timeout=60_000)
                interactive = lab.api("GET", f"runs/{link.get_attribute('data-run-id')}")
                assert interactive["lane"] == "interactive" and interactive["session"] == "lab:tiny.codefy.json"
                expect(viewer.locator(f'g.cdf-node[data-state="{expected}"]').first).to_be_visible()
                expect(viewer.locator('g.cdf-node[data-state="queued"]')).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "3b-graph-viewer-cached.png"))

            # New sweep (Runs panel) on the open graph: a list of values, the count, Start sweep.
            page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            runs = page.locator("#codefy-runs")
            runs.locator("button.cdf-new-sweep").click()
            dialog = page.locator(".jp-Dialog .cdf-sweep-dialog")
            param = dialog.locator('.cdf-sweep-param[data-node="nap"][data-param="seconds"]')
            param.locator("input[name=sweep]").check()
            param.locator("input[name=values]").fill("0, 0.05, 0.1")
            expect(dialog.locator(".cdf-variant-count [data-variants]")).to_have_text("3 variants")
            dialog.locator("input[name=metric]").fill("mean")
            page.screenshot(path=str(ARTIFACTS / "4-new-sweep.png"))
            sweep_reads: list[str] = []  # the view's reads of its sweep: after the first, long-polls
            page.on("request", lambda r: sweep_reads.append(r.url) if "/codefy/api/sweeps/" in r.url
                    and r.method == "GET" and "format=" not in r.url else None)
            page.locator(".jp-Dialog").get_by_role("button", name="Start sweep").click()
            made = page.locator(".cdf-sweep-view").filter(has_text="tiny.codefy.json")
            expect(made.locator(".cdf-sweep-table tbody tr")).to_have_count(3, timeout=60_000)
            expect(made.locator('[data-role="state"]')).to_have_text("finished", timeout=60_000)
            assert sweep_reads and "changes=" not in sweep_reads[0], sweep_reads
            assert all("changes=" in u and ("wait=2" in u or "wait=25" in u) for u in sweep_reads[1:]), sweep_reads

            # A sweep made through the API; a child's detail leads back to it (Open parent sweep).
            sweep = lab.api("POST", "sweeps", {
                "base_graph": mean_graph([1, 2]), "name": "naps",
                "sweep_spec": {"method": "grid", "params": [{"node_id": "nap", "param": "seconds", "values": [0, 0.1]}]},
                "objective": {"metric": "mean", "direction": "minimize"}})
            child = sweep["variants"][0]["run_id"]
            wait_for(lambda: lab.api("GET", f"sweeps/{sweep['sweep_id']}"), lambda s: s["state"] == "finished")
            runs.locator(f'tr.cdf-row[data-run-id="{child}"] .cdf-run-link').click()
            page.locator(f"#codefy-run-{child} button.cdf-open-sweep").click()
            view = page.locator(f"#codefy-sweep-{sweep['sweep_id']}")
            rows = view.locator(".cdf-sweep-table tbody tr")
            expect(rows).to_have_count(2, timeout=60_000)
            expect(view.locator('[data-role="state"]')).to_have_text("finished")
            expect(rows.first.locator(".cdf-col-objective")).to_have_text("1.5")
            # Equal objectives share rank 1.
            expect(view.locator(".cdf-col-rank")).to_have_text(["=1", "=1"])
            view.locator('th[data-sort="status"]').click()
            expect(view.locator(".cdf-curves svg")).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / "5-sweep-view.png"))

            # A study made through the API, in the Studies panel and its view.
            study = lab.api("POST", "studies", {
                "name": "tiny study", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
                "base_graph": mean_graph([2, 4]),
                "variants": [{"label": "base", "ops": []}, {"label": "low", "graph": mean_graph([1, 2])},
                             {"label": "high", "graph": mean_graph([5, 7])}],
                "repetitions": 2, "seed": 7})
            wait_for(lambda: lab.api("GET", f"studies/{study['id']}"), lambda s: s["status"] == "succeeded")
            runs.locator("button.cdf-studies").click()
            listing = page.locator("#codefy-studies")
            expect(listing.locator(f'tr[data-study-id="{study["id"]}"]')).to_be_visible(timeout=60_000)
            page.locator(".cdf-studies-panel").screenshot(path=str(ARTIFACTS / "6a-studies-panel.png"))
            listing.locator(f'tr[data-study-id="{study["id"]}"] .cdf-study-link').click()
            view = page.locator(f"#codefy-study-{study['id']}")
            expect(view.locator(".cdf-study-table tbody tr")).to_have_count(3, timeout=60_000)
            expect(view.locator(".cdf-study-table tbody tr").first).to_have_attribute("data-label", "low")
            expect(view.locator('tr[data-label="low"] .cdf-col-comparison')).to_have_text("best")
            expect(view.locator('tr[data-label="high"] .cdf-col-comparison')).to_contain_text("+4.5")
            expect(view.locator('tr[data-label="high"] .cdf-col-comparison')).to_contain_text("p=")
            expect(view.locator('tr[data-label="base"] .cdf-col-mean')).to_have_text("3 ± 0")
            page.screenshot(path=str(ARTIFACTS / "6-study-view.png"))

            # A stopped study: Resume continues it; the button goes with the status it answers.
            naps = lab.api("POST", "studies", {
                "name": "stopped study", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
                "base_graph": mean_graph([1, 2], 1.0), "variants": [{"label": "a", "ops": []},
                                                                   {"label": "b", "graph": mean_graph([3, 4], 1.0)}],
                "repetitions": 2, "seed": 3})
            lab.api("POST", f"studies/{naps['id']}/cancel", {})
            stopped = wait_for(lambda: lab.api("GET", f"studies/{naps['id']}"), lambda s: s["status"] == "cancelled")
            runs.locator("button.cdf-studies").click()
            listing.locator("button.cdf-refresh").click()
            listing.locator(f'tr[data-study-id="{naps["id"]}"] .cdf-study-link').click()
            view = page.locator(f"#codefy-study-{naps['id']}")
            expect(view.locator('[data-role="state"]')).to_have_text("cancelled", timeout=60_000)
            expect(view.locator("button.cdf-stop-study")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "6b-study-stopped.png"))
            follows: list[str] = []  # the view's reads while the study runs: long-polls at its revision
            page.on("request", lambda r: follows.append(r.url) if "/studies/" in r.url and "revision=" in r.url
                    else None)
            view.locator("button.cdf-resume-study").click()
            expect(view.locator('[data-role="state"]')).to_have_text("succeeded", timeout=90_000)
            assert follows and all("view=summary" in u and "wait=25" in u for u in follows), follows
            expect(view.locator("button.cdf-resume-study")).to_have_count(0)
            resumed = lab.api("GET", f"studies/{naps['id']}")
            assert resumed["status"] == "succeeded" and resumed["revision"] > stopped["revision"], resumed
            assert view.locator(".cdf-error").count() == 0

            # Any JSON graph opens through Open With → Codefy graph; the file's menu has Queue on….
            page.locator('.jp-SideBar li[data-id="filebrowser"]').click()
            page.locator(".jp-DirListing-itemText", has_text="train_mlp.json").click(button="right")
            expect(page.locator(".lm-Menu-itemLabel", has_text="Queue on…")).to_be_visible()
            page.locator(".lm-Menu-itemLabel", has_text="Open With").hover()
            page.locator(".lm-Menu-itemLabel", has_text="Codefy graph").click()
            mlp = page.locator(".cdf-graph-viewer").filter(has=page.locator('g.cdf-node[data-node-id="train"]'))
            expect(mlp.locator("g.cdf-node")).to_have_count(len(MLP["nodes"]), timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "7-open-with-codefy-graph.png"))

            # The server's refusal shows inline in Queue on…, in its own words.
            try:
                lab.api("POST", "runs", {"graph": BAD})
                raise AssertionError("the server took a graph with an unknown node type")
            except urllib.error.HTTPError as err:
                refused = json.loads(err.read())["error"]["message"]
            page.goto(f"{lab.url}lab/tree/bad.codefy.json?reset&token={TOKEN}")
            page.locator(".cdf-graph-document .cdf-tb-queue").first.click(timeout=60_000)
            page.locator(".jp-Dialog").get_by_role("button", name="Queue").click()
            expect(page.locator(".jp-Dialog .cdf-refusal")).to_contain_text(refused[:60])
            page.screenshot(path=str(ARTIFACTS / "8-queue-on-server-refusal.png"))
            assert not errors, errors
        finally:
            browser.close()
