"""The Runs panel and the graph viewer at Lab's default layout: a 1280x800 page, the left sidebar at
its default width (nothing dragged), in a real `jupyter lab` and headless Chromium (lab_server.py).

Runs panel: a running run, one queued behind it and one that succeeded show their status, name,
place in line, queue reason and action buttons inside the viewport (not scrolled off); "Open in
main area" opens the same panel as a tab with every column. Graph viewer: the 8-node example
(examples/train_mlp.json) is fitted on open, every node box inside the viewer; + zooms so some are
off, Fit brings them all back, the wheel zooms and a drag pans; the running node is panned into
view; a second Run of a graph is drawn done from cache (not grey); nodes the server refused (an
unknown type, a missing input) are marked with the reason. Screenshots go to
tmp/artifacts/lab-default-layout/ (ignored by git)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_server import ARTIFACTS_ROOT, CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM, QUICK, TOKEN, Lab, nap, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), NEEDS_CHROMIUM]
ARTIFACTS = ARTIFACTS_ROOT / "lab-default-layout"
DEFAULT_PAGE = {"width": 1280, "height": 800}
MLP = json.loads((Path(__file__).resolve().parents[2] / "examples" / "train_mlp.json").read_text())


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


# Values → a nap of 4 s → Mean: the nap is the running node for a while.
NAPPY = {"nodes": [{"id": "vals", "type": "List", "params": {"values": [1, 2, 3]}},
                   {"id": "nap", "type": "Sleep", "params": {"seconds": 4}},
                   {"id": "m", "type": "Mean"}],
         "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}
# Float → Scale → Scale: every node cacheable (a Sleep is not), so a second run is all from the cache.
CHAIN = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}},
                   {"id": "t", "type": "Scale", "params": {"factor": 5}}],
         "edges": [edge("k", "value", "s", "x"), edge("s", "y", "t", "x")]}
# An unknown type (a typo of Scale) and a Mean whose input is not connected.
REFUSED = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                     {"id": "s", "type": "Scael", "params": {"factor": 3}},
                     {"id": "m", "type": "Mean"}],
           "edges": [edge("k", "value", "s", "x")]}


def inside(inner: dict | None, outer: dict | None, slack: float = 1.0) -> bool:
    assert inner and outer
    return (inner["x"] >= outer["x"] - slack and inner["y"] >= outer["y"] - slack
            and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
            and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack)


def launch(p):
    browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport=DEFAULT_PAGE)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "codefy" in m.text else None)
    return browser, page, errors


def test_runs_panel_at_the_default_sidebar_width(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Two cpu slots: with one busy, a seeded run waits to run alone and the run behind it says so.
    with running_lab(tmp_path, env={"CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU": "2"}) as lab:
        runs_panel_at_the_default_width(lab)


def runs_panel_at_the_default_width(lab: Lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    done = lab.submit(QUICK, "quick float")
    lab.wait_status(done, "succeeded")
    first = lab.submit(nap(600), "long nap")
    lab.wait_status(first, "running")
    seeded = lab.api("POST", "runs", {"graph": QUICK, "name": "seeded", "options": {"seed": 3}})["id"]
    second = lab.submit(nap(600), "waits its turn behind the seeded run")
    waiting = lab.api("GET", f"runs/{second}")
    assert waiting["queue_position"] == 2 and waiting["queue_reason"], waiting

    with sync_playwright() as p:
        browser, page, errors = launch(p)
        try:
            page.goto(f"{lab.url}lab?token={TOKEN}")
            page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            runs = page.locator("#codefy-runs")
            row = lambda run_id: runs.locator(f'tr.cdf-row[data-run-id="{run_id}"]')  # noqa: E731
            expect(row(second)).to_have_attribute("data-status", "queued", timeout=60_000)
            expect(row(first)).to_have_attribute("data-status", "running", timeout=60_000)
            # What a run is, where it waits and why, and what can be done: visible, not scrolled off.
            for cell in (".cdf-col-status .cdf-status", ".cdf-run-link", ".cdf-queue",
                         'button[data-action="stop"]', 'button[data-action="watch"]'):
                expect(row(second).locator(cell)).to_be_in_viewport()
            reason = runs.locator(f'tr.cdf-reason-row[data-run-id="{second}"] td.cdf-reason')
            expect(reason).to_be_in_viewport()
            assert reason.get_attribute("title") == reason.inner_text()  # the whole reason on hover
            for action in ("csv", "delete"):
                expect(row(done).locator(f'button[data-action="{action}"]')).to_be_in_viewport()
            expect(row(first).locator('button[data-action="stop"]')).to_be_in_viewport()
            # The panel scrolls nothing sideways: its content is as wide as the panel.
            scroll = runs.locator(".cdf-scroll")
            assert scroll.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), scroll.evaluate(
                "e => [e.scrollWidth, e.clientWidth]")
            # What the narrow panel leaves out is in the row's hover.
            assert "Worker: This server" in (row(second).get_attribute("title") or "")
            runs.screenshot(path=str(ARTIFACTS / "1-runs-default-width.png"))

            # Open in main area: the same list, every column.
            runs.locator("button.cdf-open-wide").click()
            wide = page.locator("#codefy-runs-wide")
            expect(wide.locator(f'tr.cdf-row[data-run-id="{second}"]')).to_be_visible(timeout=60_000)
            for key in ("name", "status", "devices", "duration", "worker", "budget", "started", "loss"):
                expect(wide.locator(f"th.cdf-col-{key}")).to_be_in_viewport()
                expect(wide.locator(f'tr.cdf-row[data-run-id="{done}"] td.cdf-col-{key}')).to_be_in_viewport()
            expect(wide.locator(f'tr.cdf-row[data-run-id="{done}"] button[data-action="csv"]')).to_be_in_viewport()
            page.screenshot(path=str(ARTIFACTS / "2-runs-main-area.png"))
            for run_id in (second, seeded, first):
                lab.api("POST", f"runs/{run_id}/cancel", {})
            assert not errors, errors
        finally:
            browser.close()


def test_graph_viewer_fits_zooms_and_marks(lab: Lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (lab.root / "train_mlp.codefy.json").write_text(json.dumps(MLP, indent=1))
    (lab.root / "nappy.codefy.json").write_text(json.dumps(NAPPY, indent=1))
    (lab.root / "chain.codefy.json").write_text(json.dumps(CHAIN, indent=1))
    (lab.root / "refused.codefy.json").write_text(json.dumps(REFUSED, indent=1))
    assert len(MLP["nodes"]) == 8

    with sync_playwright() as p:
        browser, page, errors = launch(p)
        try:
            # The 8-node example fits on open: every box inside the viewer's canvas.
            page.goto(f"{lab.url}lab/tree/train_mlp.codefy.json?token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer")
            canvas = viewer.locator(".cdf-graph-canvas")
            boxes = viewer.locator("g.cdf-node rect.cdf-node-box")
            expect(boxes).to_have_count(8, timeout=60_000)
            all_inside = lambda: all(inside(boxes.nth(i).bounding_box(), canvas.bounding_box())  # noqa: E731
                                     for i in range(8))
            assert all_inside()
            for i in range(8):
                expect(boxes.nth(i)).to_be_in_viewport()
            page.screenshot(path=str(ARTIFACTS / "3-viewer-fitted.png"))

            # + zooms in (some boxes leave the canvas); Fit brings every one back.
            fitted = float(canvas.get_attribute("data-scale"))
            for _ in range(4):
                viewer.locator("button.cdf-zoom-in").click()
            assert float(canvas.get_attribute("data-scale")) > fitted
            assert not all_inside()
            page.screenshot(path=str(ARTIFACTS / "4-viewer-zoomed.png"))
            viewer.locator("button.cdf-zoom-fit").click()
            assert float(canvas.get_attribute("data-scale")) == pytest.approx(fitted, abs=1e-3)
            assert all_inside()
            # The wheel zooms about the cursor; a drag pans.
            c = canvas.bounding_box()
            page.mouse.move(c["x"] + c["width"] / 2, c["y"] + c["height"] / 2)
            page.mouse.wheel(0, 300)
            expect(canvas).not_to_have_attribute("data-scale", f"{fitted:.4f}")
            before = boxes.first.bounding_box()
            page.mouse.move(c["x"] + 20, c["y"] + c["height"] - 20)
            page.mouse.down()
            page.mouse.move(c["x"] + 120, c["y"] + c["height"] - 60, steps=5)
            page.mouse.up()
            after = boxes.first.bounding_box()
            assert after["x"] == pytest.approx(before["x"] + 100, abs=2), (before, after)

            # A run: zoomed in on the first node, the running nap is panned into view.
            page.goto(f"{lab.url}lab/tree/nappy.codefy.json?reset&token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer")
            canvas = viewer.locator(".cdf-graph-canvas")
            expect(viewer.locator("g.cdf-node")).to_have_count(3, timeout=60_000)
            first = viewer.locator('g.cdf-node[data-node-id="vals"] rect.cdf-node-box').bounding_box()
            page.mouse.move(first["x"] + 10, first["y"] + 10)
            for _ in range(6):  # the wheel zooms in about the first node: the nap goes off to the right
                page.mouse.wheel(0, -300)
            napbox = viewer.locator('g.cdf-node[data-node-id="nap"] rect.cdf-node-box')
            assert not inside(napbox.bounding_box(), canvas.bounding_box())
            page.locator(".cdf-graph-document .cdf-tb-run").first.click()
            expect(viewer.locator('g.cdf-node[data-node-id="nap"]')).to_have_attribute(
                "data-state", "running", timeout=60_000)
            assert inside(napbox.bounding_box(), canvas.bounding_box())
            page.screenshot(path=str(ARTIFACTS / "5-viewer-running-in-view.png"))
            expect(viewer.locator('[data-role="run-status"]')).to_have_text("succeeded", timeout=60_000)
            expect(viewer.locator('g.cdf-node[data-state="done"]')).to_have_count(3)

            # The same graph twice: the second run's output comes from the cache, and the nodes
            # before it (which did not run) read done from cache too, not grey.
            page.goto(f"{lab.url}lab/tree/chain.codefy.json?reset&token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer")
            expect(viewer.locator("g.cdf-node")).to_have_count(3, timeout=60_000)
            link = viewer.locator(".cdf-graph-status .cdf-run-link")
            page.locator(".cdf-graph-document .cdf-tb-run").first.click()
            expect(viewer.locator('g.cdf-node[data-state="done"]')).to_have_count(3, timeout=60_000)
            previous = link.get_attribute("data-run-id")
            page.locator(".cdf-graph-document .cdf-tb-run").first.click()
            expect(link).not_to_have_attribute("data-run-id", previous, timeout=60_000)
            expect(viewer.locator('[data-role="run-status"]')).to_have_text("succeeded", timeout=60_000)
            expect(viewer.locator('g.cdf-node[data-state="cached"]')).to_have_count(3, timeout=60_000)
            expect(viewer.locator('g.cdf-node[data-node-id="k"] .cdf-node-note')).to_have_text("from cache")
            page.screenshot(path=str(ARTIFACTS / "6-viewer-from-cache.png"))

            # A refused graph: the nodes the server named are marked, with its reason.
            page.goto(f"{lab.url}lab/tree/refused.codefy.json?reset&token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer")
            expect(viewer.locator("g.cdf-node")).to_have_count(3, timeout=60_000)
            page.locator(".cdf-graph-document .cdf-tb-run").first.click()
            marked = viewer.locator("g.cdf-node[data-refused]")
            expect(marked).to_have_count(2, timeout=60_000)
            expect(viewer.locator('g.cdf-node[data-node-id="k"][data-refused]')).to_have_count(0)
            s = viewer.locator('g.cdf-node[data-node-id="s"]')
            expect(s.locator(".cdf-node-note")).to_have_text("refused")
            expect(s.locator("title")).to_contain_text("unknown node type 'Scael'")
            s.click()
            expect(viewer.locator(".cdf-graph-side")).to_contain_text("unknown node type 'Scael'")
            expect(viewer.locator('g.cdf-node[data-node-id="m"] title')).to_contain_text("not connected")
            page.screenshot(path=str(ARTIFACTS / "7-viewer-refused.png"))
            assert not errors, errors
        finally:
            browser.close()
