"""The lab extension in a real `jupyter lab` and a real headless Chromium (Debian's
/usr/bin/chromium through Python playwright; never a downloaded browser).

One server (a temp Jupyter environment, a token, the cpu queue capped at 1 run) and one page:
runs in progress when the page loads raise the toast; the Runs panel lists them live (the running
one, the one queued behind it as Queue #1); Stop takes the queued one out of the line; a run
submitted through the REST API appears and reaches succeeded without a reload; its detail shows
its events; a small training run's detail shows its metrics chart (Download CSV saves the metrics)
and its saved model with Copy path (the path on the clipboard is the file's); the Workers panel shows this server's devices and "Add worker" the exact
`codefy agent start --control … --token …` command. Screenshots of each step go to
tmp/artifacts/lab-panels/ (the repository's tmp/, ignored by git)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_server import ARTIFACTS_ROOT, CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM, QUICK, TOKEN, Lab, nap

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), NEEDS_CHROMIUM]
ARTIFACTS = ARTIFACTS_ROOT / "lab-panels"


def tiny_training() -> dict:
    """examples/train_mlp.json made small (300 samples, 3 epochs), its model saved (a `model` artifact)."""
    graph = json.loads((Path(__file__).resolve().parents[2] / "examples" / "train_mlp.json").read_text())
    for node in graph["nodes"]:
        if node["id"] == "data":
            node["params"]["n_samples"] = 300
        if node["id"] == "train":
            node["params"]["epochs"] = 3
    graph["nodes"].append({"id": "save", "type": "SaveModel", "params": {"filename": "tiny.pt"}})
    graph["edges"].append({"source": "train", "source_port": "model", "target": "save", "target_port": "model"})
    return graph


def test_runs_and_workers_panels_live(lab: Lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # The cpu queue takes one run at a time: a long nap runs, a second waits behind it.
    first = lab.submit(nap(600), "long nap")  # stopped below: it runs while a busy machine loads Lab
    lab.wait_status(first, "running")
    second = lab.submit(nap(600), "waits its turn")
    assert lab.api("GET", f"runs/{second}")["queue_position"] == 1

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"{lab.url}lab?token={TOKEN}")

            # The toast on load counts the runs in progress.
            expect(page.get_by_text("2 runs are in progress")).to_be_visible(timeout=60_000)

            # Open the Runs panel from the left sidebar and give the sidebar room.
            page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            runs = page.locator("#codefy-runs")
            expect(runs).to_be_visible()
            handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
            box = handle.bounding_box()
            if box:
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 100)
                page.mouse.down()
                page.mouse.move(1100, box["y"] + 100, steps=5)
                page.mouse.up()

            row = lambda run_id: runs.locator(f'tr.cdf-row[data-run-id="{run_id}"]')  # noqa: E731
            expect(row(first)).to_have_attribute("data-status", "running", timeout=60_000)
            expect(row(second)).to_have_attribute("data-status", "queued")
            expect(row(second).locator(".cdf-queue")).to_have_text("Queue #1")
            expect(row(second).locator(".cdf-queue")).to_have_attribute("title", "cpu")
            expect(row(second).locator(".cdf-col-worker")).to_have_text("This server")
            expect(runs.locator(".cdf-count")).to_have_text("2 of 2")
            runs.screenshot(path=str(ARTIFACTS / "1-runs-running-and-queued.png"))

            # Stop the queued run: it leaves the line, cancelled, without a reload.
            row(second).locator('button[data-action="stop"]').click()
            expect(row(second)).to_have_attribute("data-status", "cancelled", timeout=60_000)
            assert lab.api("GET", f"runs/{second}")["status"] == "cancelled"
            expect(row(second).locator('button[data-action="delete"]')).to_be_visible()
            # ...and the running one too, so the queue is free for the next.
            row(first).locator('button[data-action="stop"]').click()
            expect(row(first)).to_have_attribute("data-status", "cancelled", timeout=60_000)

            # A run submitted through the REST API appears and reaches succeeded, live.
            quick = lab.submit(QUICK, "quick float")
            expect(row(quick)).to_be_visible(timeout=60_000)
            expect(row(quick)).to_have_attribute("data-status", "succeeded", timeout=60_000)
            expect(runs.locator(".cdf-count")).to_have_text("3 of 3")
            runs.screenshot(path=str(ARTIFACTS / "2-runs-succeeded-live.png"))

            # The filter chip is applied by the server: Cancelled lists the two stopped runs.
            runs.locator('button[data-filter="cancelled"]').click()
            expect(runs.locator(".cdf-count")).to_have_text("2 of 2")
            expect(row(quick)).to_have_count(0)
            runs.locator('button[data-filter="all"]').click()
            expect(runs.locator(".cdf-count")).to_have_text("3 of 3")

            # Its detail: facts and the events of its log.
            row(quick).locator(".cdf-run-link").click()
            detail = page.locator(f"#codefy-run-{quick}")
            expect(detail.locator(".cdf-events li").first).to_be_visible(timeout=60_000)
            expect(detail.locator('.cdf-events li[data-type="execution_complete"]')).to_have_count(1, timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "3-run-detail.png"))

            # A training run's detail: its metrics as a chart with Download CSV, its model with Copy path.
            page.context.grant_permissions(["clipboard-read", "clipboard-write"])
            train = lab.submit(tiny_training(), "tiny training")
            expect(row(train)).to_have_attribute("data-status", "succeeded", timeout=120_000)
            row(train).locator(".cdf-run-link").click()
            detail = page.locator(f".cdf-run-detail#codefy-run-{train}")
            expect(detail.locator('.cdf-run-metrics g.cdf-series[data-label="train_loss"] polyline')).to_be_visible(
                timeout=60_000)
            saved = lab.api("GET", f"runs/{train}/artifacts")["artifacts"]
            model = next(a for a in saved if a["kind"] == "model")
            assert Path(model["path"]).is_file(), model
            artifact = detail.locator('.cdf-artifact[data-kind="model"]')
            expect(artifact).to_have_attribute("data-path", model["path"])
            expect(artifact).to_contain_text("tiny.pt")
            artifact.locator("button.cdf-copy-path").click()
            expect(artifact.locator("button.cdf-copy-path")).to_have_text("Copied")
            assert page.evaluate("navigator.clipboard.readText()") == model["path"]
            # The id as Lab shows it (12 characters) is one every reader takes; Copy id copies it whole.
            shown = detail.locator(".cdf-run-id")
            expect(shown).to_have_text(train[:12])
            assert lab.api("GET", f"runs/{shown.inner_text()}")["id"] == train
            detail.locator("button.cdf-copy-id").click()
            expect(detail.locator("button.cdf-copy-id")).to_have_text("Copied")
            assert page.evaluate("navigator.clipboard.readText()") == train
            with page.expect_download() as got:
                detail.locator("button.cdf-csv").click()
            csv = Path(got.value.path()).read_text()
            assert got.value.suggested_filename.endswith(".csv") and "train_loss" in csv, csv[:300]
            detail.screenshot(path=str(ARTIFACTS / "3b-run-detail-metrics-artifacts.png"))

            # The Workers panel: this server's devices, and Add worker's exact command.
            page.locator('.jp-SideBar li[data-id="codefy-workers"]').click()
            workers = page.locator("#codefy-workers")
            expect(workers.locator(".cdf-local")).to_be_visible(timeout=60_000)
            expect(workers.locator(".cdf-local")).to_contain_text("cpu")
            workers.locator("button.cdf-add-worker").click()
            command = workers.locator(".cdf-command")
            expect(command).to_contain_text("codefy agent start --control", timeout=60_000)
            text = command.inner_text()
            assert f"--control {lab.url}" in text and "--token " in text, text
            expect(workers.locator("button.cdf-copy")).to_be_visible()
            workers.screenshot(path=str(ARTIFACTS / "4-workers-add-worker.png"))
            page.screenshot(path=str(ARTIFACTS / "5-lab.png"))
            assert not errors, errors
        finally:
            browser.close()
