"""The first hour as the README tells it, in a real `jupyter lab` at 1280×800 with Lab's default
sidebar width, in Debian's Chromium, with a real worker agent (`codefy agent start` over loopback,
enrolled with the command the Workers panel shows): open the Runs panel, queue the example on the
agent from the graph viewer (a second agent under the same name is refused, and the Workers panel
says why), watch it run in the viewer, copy its id from Lab and use the id Lab
shows in `codefy runs show`, a run on one of the agent's (declared) cards named on hover over
Devices, a small sweep from New sweep (its objective suggested by the run listed) followed in its
view, a small study from `codefy study` followed in the Studies view, and a refused graph with the
server's suggestion. What is asserted is what a user sees: elements in the viewport, not only in
the DOM. Screenshots in the light theme
and again in JupyterLab Dark go to tmp/artifacts/first-hour/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from lab_server import ARTIFACTS_ROOT, CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM, TOKEN, nap, running_lab
from test_lab_panels import tiny_training
from test_lab_workers import start_agent, stop, until, worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(840), NEEDS_CHROMIUM]
ARTIFACTS = ARTIFACTS_ROOT / "first-hour"
TYPO = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2.0}},
                  {"id": "s", "type": "Scael", "params": {"factor": 3}}],
        "edges": [{"source": "k", "source_port": "value", "target": "s", "target_port": "x"}]}
# examples/study_lr.json made small: two learning rates, two seeded repetitions each, on this server.
STUDY = {"name": "first study", "base_graph": "example.codefy.json",
         "objective": {"node_id": "train", "metric": "train_loss", "direction": "minimize"},
         "variants": [{"label": "adam 3e-3", "ops": []},
                      {"label": "adam 1e-2", "ops": [{"node_id": "opt", "param": "lr", "value": 0.01}]}],
         "repetitions": 2, "seed": 7, "options": {"device": "cpu"}}


def dark_theme(url: str) -> None:
    """Settings → Theme → JupyterLab Dark, as the Settings Editor saves it."""
    body = json.dumps({"raw": json.dumps({"theme": "JupyterLab Dark"})}).encode()
    request = urllib.request.Request(f"{url}lab/api/settings/@jupyterlab/apputils-extension:themes", data=body,
                                     method="PUT", headers={"Authorization": f"token {TOKEN}",
                                                            "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()


def test_the_first_hour(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    agent = None
    with running_lab(tmp_path) as lab, sync_playwright() as p:
        (lab.root / "example.codefy.json").write_text(json.dumps(tiny_training(), indent=1))
        (lab.root / "typo.codefy.json").write_text(json.dumps(TYPO, indent=1))
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.context.grant_permissions(["clipboard-read", "clipboard-write"])
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"{lab.url}lab?reset&token={TOKEN}")

            # A worker: Add worker shows the command, which enrolls a real agent.
            page.locator('.jp-SideBar li[data-id="codefy-workers"]').click(timeout=90_000)
            workers = page.locator("#codefy-workers")
            workers.locator("button.cdf-add-worker").click()
            command = workers.locator(".cdf-command")
            expect(command).to_be_in_viewport(timeout=60_000)
            agent, _ = start_agent(tmp_path, command.inner_text())
            until(lambda: worker(lab), lambda w: w is not None and w["state"] == "connected", "the agent never connected")
            workers.locator("button.cdf-refresh").click()
            expect(workers.locator('.cdf-worker[data-worker="box"]')).to_be_in_viewport(timeout=60_000)
            expect(workers.locator(".cdf-count")).to_have_text("1 worker")
            page.screenshot(path=str(ARTIFACTS / "1-worker-added.png"))

            # A second agent under the taken name is refused; the panel says why, by its name.
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_"))}
            env.update(JUPYTER_PLATFORM_DIRS="0", JUPYTER_DATA_DIR=str(tmp_path / "twin-jupyter"))
            with open(tmp_path / "twin.log", "wb") as log:
                twin = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control",
                                         lab.url, "--token", TOKEN, "--name", "box", "--data-dir", str(tmp_path / "twin")],
                                        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                until(lambda: lab.api("GET", "workers").get("refused", []), lambda r: any(x["name"] == "box" for x in r),
                      "the twin was never refused")
            finally:
                stop(twin)
            workers.locator("button.cdf-refresh").click()
            refusal = workers.locator('.cdf-refusal-row[data-worker="box"]')
            expect(refusal).to_be_in_viewport(timeout=60_000)
            expect(refusal).to_have_attribute("data-code", "name_taken")
            expect(refusal.locator(".cdf-error")).to_contain_text("taken")
            page.screenshot(path=str(ARTIFACTS / "1b-agent-refused.png"))

            # The Runs panel, then the example in the viewer, queued on the agent's cpu.
            page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            runs = page.locator("#codefy-runs")
            expect(runs.locator(".cdf-title")).to_be_in_viewport()
            page.goto(f"{lab.url}lab/tree/example.codefy.json?token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer")
            expect(viewer.locator("g.cdf-node")).to_have_count(len(tiny_training()["nodes"]), timeout=60_000)
            for node in ("data", "train", "save"):
                expect(viewer.locator(f'g.cdf-node[data-node-id="{node}"]')).to_be_in_viewport()
            page.locator(".cdf-graph-document .cdf-tb-queue").first.click()
            dialog = page.locator(".jp-Dialog")
            dialog.locator("select[name=target]").select_option("box")
            dialog.locator('input[name=device][value="cpu"]').check()
            dialog.locator("input[name=name]").fill("first hour")
            dialog.get_by_role("button", name="Queue").click()
            expect(dialog).to_have_count(0, timeout=60_000)
            run = until(lambda: lab.api("GET", "runs?limit=5")["runs"],
                        lambda rs: any(r["name"] == "first hour" for r in rs), "the queued run")
            run_id = next(r["id"] for r in run if r["name"] == "first hour")
            expect(page.get_by_text(f"Queued run {run_id[:12]}")).to_be_in_viewport(timeout=30_000)

            # Watch it in the viewer: it reaches succeeded there, its nodes done and in view.
            expect(viewer.locator('[data-role="run-status"]')).to_have_text("succeeded", timeout=180_000)
            expect(viewer.locator('g.cdf-node[data-node-id="train"]')).to_have_attribute("data-state", "done")
            expect(viewer.locator('g.cdf-node[data-node-id="train"]')).to_be_in_viewport()
            assert lab.api("GET", f"runs/{run_id}")["worker_id"] in ("box", worker(lab)["id"])
            page.screenshot(path=str(ARTIFACTS / "2-viewer-watched.png"))

            # Its row in the Runs panel, its detail, Copy id; the id Lab shows works in the CLI.
            if not runs.is_visible():  # a click on the open tab would close the sidebar
                page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            row = runs.locator(f'tr.cdf-row[data-run-id="{run_id}"]')
            expect(row).to_be_in_viewport(timeout=60_000)
            expect(row).to_have_attribute("data-status", "succeeded")
            row.locator(".cdf-run-link").click()
            detail = page.locator(f".cdf-run-detail#codefy-run-{run_id}")
            shown = detail.locator(".cdf-run-id")
            expect(shown).to_be_in_viewport(timeout=60_000)
            detail.locator("button.cdf-copy-id").click()
            expect(detail.locator("button.cdf-copy-id")).to_have_text("Copied")
            assert page.evaluate("navigator.clipboard.readText()") == run_id
            expect(detail.locator('.cdf-run-metrics g.cdf-series[data-label="train_loss"] polyline').first
                   ).to_be_visible(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "3-run-detail.png"))
            cli = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "runs", "show", shown.inner_text(),
                                  "--url", lab.url, "--token", TOKEN],
                                 capture_output=True, text=True, timeout=120)
            assert cli.returncode == 0, cli.stderr
            assert run_id in cli.stdout and "succeeded" in cli.stdout, cli.stdout

            # A study from the terminal (README: `codefy study spec.json`), on this server meanwhile.
            (lab.root / "study.json").write_text(json.dumps(STUDY, indent=1))
            cli = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "study", str(lab.root / "study.json"),
                                  "--detach", "--json", "--url", lab.url, "--token", TOKEN],
                                 capture_output=True, text=True, timeout=120)
            assert cli.returncode == 0, cli.stderr
            study_id = json.loads(cli.stdout)["id"]

            # A run on one of the agent's cards: Devices names the card on hover, as the agent
            # declared it, and the name the run had for it (the worker renumbers from cuda:0).
            card_run = lab.api("POST", "runs", {"graph": nap(0.2), "name": "on a card",
                                                "options": {"target": {"worker": "box", "devices": ["cuda:1"]}}})["id"]
            lab.wait_status(card_run, "succeeded")
            devices = runs.locator(f'tr.cdf-row[data-run-id="{card_run}"] .cdf-device-list')
            expect(devices).to_be_in_viewport(timeout=60_000)
            expect(devices).to_have_text("cuda:1")
            devices.hover()
            expect(devices).to_have_attribute("title", "cuda:1: Declared B (cuda:0 in the run)")

            # New sweep (the Runs panel's toolbar) on the open example: the objective field suggests
            # what the listed runs recorded, Objective node the node that logged it; two learning rates.
            recorded = {m["name"] for m in lab.api("GET", f"runs/{run_id}/metrics")["metrics"]
                        if not m["name"].startswith("system/")}
            assert "train_loss" in recorded, recorded
            runs.locator("button.cdf-new-sweep").click()
            dialog = page.locator(".jp-Dialog .cdf-sweep-dialog")
            expect(dialog).to_be_in_viewport(timeout=60_000)
            suggested = dialog.locator("#cdf-metric-suggestions option")
            expect(suggested.first).to_be_attached(timeout=60_000)
            assert recorded <= set(suggested.evaluate_all("os => os.map(o => o.value)"))
            node = dialog.locator("select[name=nodeId]")
            expect(node.locator('option[value="train"]')).to_have_text("TrainingLoop (train) · logs train_loss")
            node.select_option("train")
            lr = dialog.locator('.cdf-sweep-param[data-node="opt"][data-param="lr"]')
            lr.locator("input[name=sweep]").check()
            lr.locator("input[name=values]").fill("0.01, 0.003")
            expect(dialog.locator(".cdf-variant-count [data-variants]")).to_have_text("2 variants")
            dialog.locator("select[name=target]").select_option("box")
            dialog.locator('input[name=device][value="cpu"]').check()
            dialog.locator("input[name=name]").fill("first sweep")
            page.screenshot(path=str(ARTIFACTS / "3b-new-sweep.png"))
            page.locator(".jp-Dialog").get_by_role("button", name="Start sweep").click()
            sweep = page.locator(".cdf-sweep-view").filter(has_text="first sweep")
            expect(sweep.locator(".cdf-sweep-table tbody tr")).to_have_count(2, timeout=60_000)
            expect(sweep.locator('[data-role="state"]')).to_have_text("finished", timeout=300_000)
            expect(sweep.locator(".cdf-col-rank").filter(has_text="1")).to_have_count(1)
            expect(sweep.locator(".cdf-sweep-table")).to_be_in_viewport()
            page.screenshot(path=str(ARTIFACTS / "3c-sweep-view.png"))

            # The study in the Studies view: ranked, and the smallest p-value two repetitions can reach.
            until(lambda: lab.api("GET", f"studies/{study_id}")["status"], lambda s: s == "succeeded",
                  "the study never succeeded", timeout=300)
            if not runs.is_visible():
                page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            runs.locator("button.cdf-studies").click()
            listing = page.locator("#codefy-studies")
            expect(listing.locator(f'tr[data-study-id="{study_id}"]')).to_be_in_viewport(timeout=60_000)
            listing.locator(f'tr[data-study-id="{study_id}"] .cdf-study-link').click()
            study = page.locator(f"#codefy-study-{study_id}")
            expect(study.locator(".cdf-study-table tbody tr")).to_have_count(2, timeout=60_000)
            expect(study.locator(".cdf-study-table")).to_be_in_viewport()
            expect(study.locator(".cdf-col-comparison").filter(has_text="best")).to_have_count(1)
            floor = study.locator(".cdf-p-floor")
            floor.scroll_into_view_if_needed()
            expect(floor).to_be_in_viewport()
            expect(floor).to_contain_text("0.5")
            page.screenshot(path=str(ARTIFACTS / "3d-study-view.png"))

            # A typo in a node type: refused, the node marked, the close match suggested.
            page.goto(f"{lab.url}lab/tree/typo.codefy.json?reset&token={TOKEN}")
            viewer = page.locator(".cdf-graph-viewer:visible")
            expect(viewer.locator("g.cdf-node")).to_have_count(2, timeout=60_000)
            page.locator(".cdf-graph-document:visible .cdf-tb-run").first.click()
            typo = viewer.locator('g.cdf-node[data-node-id="s"]')
            expect(viewer.locator('g.cdf-node[data-node-id="s"][data-refused]')).to_have_count(1, timeout=60_000)
            expect(typo).to_be_in_viewport()
            typo.click()
            side = viewer.locator(".cdf-graph-side")
            expect(side).to_contain_text("unknown node type 'Scael'")
            expect(side).to_contain_text("Scale")
            page.screenshot(path=str(ARTIFACTS / "4-refused-with-suggestion.png"))

            # The same steps' screens in JupyterLab Dark.
            dark_theme(lab.url)
            page.goto(f"{lab.url}lab/tree/example.codefy.json?token={TOKEN}")
            expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=90_000)
            if not runs.is_visible():
                page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            expect(runs.locator(f'tr.cdf-row[data-run-id="{run_id}"]')).to_be_in_viewport(timeout=60_000)
            expect(page.locator(".cdf-graph-viewer:visible g.cdf-node").first).to_be_in_viewport(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "5-dark-runs-and-viewer.png"))
            if not workers.is_visible():
                page.locator('.jp-SideBar li[data-id="codefy-workers"]').click()
            expect(workers.locator('.cdf-worker[data-worker="box"]')).to_be_in_viewport(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "6-dark-workers.png"))
            assert not errors, errors
        finally:
            browser.close()
            if agent is not None:
                stop(agent)
