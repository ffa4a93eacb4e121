"""The Workers panel against a real worker agent: `codefy agent start` in a subprocess over loopback,
enrolled with the token the panel's "Add worker" shows, with a declared device inventory (two
cards; this machine has none).

The agent comes up connected with its devices and their slots; a run on one of its cards takes that
card's slot (1/1) while it runs; Drain and Undrain round-trip through the server; the agent killed
shows disconnected; after a restart of the server the enrolled worker is offline; Remove takes it
off the server (and the panel). Screenshots of each state go to <screenshots>/lab-workers/."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from lab_server import ARTIFACTS_ROOT, CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM, TOKEN, Lab, nap, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(840), NEEDS_CHROMIUM]
ARTIFACTS = ARTIFACTS_ROOT / "lab-workers"
INVENTORY = {"devices": [{"key": "cuda:0", "name": "Declared A", "uuid": "GPU-lab-aaaa", "memory_total_mib": 8192},
                         {"key": "cuda:1", "name": "Declared B", "uuid": "GPU-lab-bbbb", "memory_total_mib": 8192}]}


def start_agent(tmp_path: Path, command: str) -> tuple[subprocess.Popen, Path]:
    """The command the panel showed, run as it says (its --control and --token), with this test's
    name, folder and declared cards."""
    words = shlex.split(command)
    assert words[:3] == ["codefy", "agent", "start"], command
    control, token = words[words.index("--control") + 1], words[words.index("--token") + 1]
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(INVENTORY))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_"))}
    env.update(CODEFY_DEVICE_INVENTORY=str(inventory), JUPYTER_PLATFORM_DIRS="0",
               JUPYTER_DATA_DIR=str(tmp_path / "agent-jupyter"))
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", control, "--token", token,
             "--name", "box", "--data-dir", str(tmp_path / "agent")],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log_path


def stop(proc: subprocess.Popen) -> None:
    """The agent and the processes it started (its warm parent, run processes) are one group only
    when it makes one; kill the agent's children first by their parent id, then the agent."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    for child in family:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def until(fetch: Callable[[], Any], done: Callable[[Any], bool], what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what}: {value}"
        time.sleep(0.2)


def worker(lab: Lab, name: str = "box") -> dict[str, Any] | None:
    return next((w for w in lab.api("GET", "workers")["workers"] if w["name"] == name), None)


def test_workers_panel_with_a_real_agent(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    agent: subprocess.Popen | None = None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))

            def open_workers(lab: Lab):
                page.goto(f"{lab.url}lab?reset&token={TOKEN}")
                page.locator('.jp-SideBar li[data-id="codefy-workers"]').click(timeout=90_000)
                panel = page.locator("#codefy-workers")
                expect(panel.locator(".cdf-local")).to_be_visible(timeout=60_000)
                return panel

            with running_lab(tmp_path) as lab:
                panel = open_workers(lab)
                expect(panel.locator(".cdf-empty")).to_have_text("no workers connected")

                # Add worker: the command on screen is the one that enrolls the agent.
                panel.locator("button.cdf-add-worker").click()
                command = panel.locator(".cdf-command")
                expect(command).to_contain_text("codefy agent start --control", timeout=60_000)
                agent, log = start_agent(tmp_path, command.inner_text())
                card = panel.locator('.cdf-worker[data-worker="box"]')
                panel.locator("button.cdf-refresh").click()
                until(lambda: worker(lab), lambda w: w is not None and w["state"] == "connected",
                      "the agent never connected")
                panel.locator("button.cdf-refresh").click()
                expect(card).to_have_attribute("data-state", "connected", timeout=60_000)
                expect(card.locator(".cdf-status").first).to_have_text("connected")
                devices = card.locator(".cdf-devices tbody tr")
                expect(devices.locator("td.cdf-mono")).to_contain_text(["cpu", "cuda:0", "cuda:1"])

                # A run on cuda:0 of the worker holds that card's one slot while it runs.
                run_id = lab.api("POST", "runs", {"graph": nap(60), "name": "nap on box",
                                                  "options": {"target": {"worker": "box", "devices": ["cuda:0"]}}})["id"]
                lab.wait_status(run_id, "running")
                panel.locator("button.cdf-refresh").click()
                cuda0 = devices.filter(has=page.locator("td.cdf-mono", has_text="cuda:0"))
                expect(cuda0.locator("td").nth(1)).to_have_text("1/1", timeout=60_000)
                expect(card.locator(".cdf-worker-foot")).to_contain_text("running: 1")
                panel.screenshot(path=str(ARTIFACTS / "1-worker-connected-running.png"))
                lab.api("POST", f"runs/{run_id}/cancel")
                lab.wait_status(run_id, "cancelled")

                # Drain, then Undrain: each a round trip through the server.
                card.locator('button[data-action="drain"]').click()
                expect(card).to_have_attribute("data-state", "draining", timeout=60_000)
                assert worker(lab)["state"] == "draining"
                expect(card.locator('button[data-action="undrain"]')).to_be_visible()
                panel.screenshot(path=str(ARTIFACTS / "2-worker-draining.png"))
                card.locator('button[data-action="undrain"]').click()
                expect(card).to_have_attribute("data-state", "connected", timeout=60_000)
                assert worker(lab)["state"] == "connected"

                # The agent gone: disconnected, Undrain/Drain no longer offered.
                stop(agent)
                until(lambda: worker(lab), lambda w: w["state"] == "disconnected", "still connected")
                panel.locator("button.cdf-refresh").click()
                expect(card).to_have_attribute("data-state", "disconnected", timeout=60_000)
                expect(card.locator('button[data-action="drain"]')).to_have_count(0)
                panel.screenshot(path=str(ARTIFACTS / "3-worker-disconnected.png"))

            # The same server restarted: the enrolled worker is offline until its agent returns.
            with running_lab(tmp_path) as lab:
                assert worker(lab)["state"] == "offline"
                panel = open_workers(lab)
                card = panel.locator('.cdf-worker[data-worker="box"]')
                expect(card).to_have_attribute("data-state", "offline", timeout=60_000)
                panel.screenshot(path=str(ARTIFACTS / "4-worker-offline.png"))

                # Remove asks first; Cancel keeps it, Remove takes it off the server.
                card.locator('button[data-action="remove"]').click()
                page.locator(".jp-Dialog").get_by_role("button", name="Cancel").click()
                expect(page.locator(".jp-Dialog")).to_have_count(0)
                assert worker(lab) is not None
                card.locator('button[data-action="remove"]').click()
                page.locator(".jp-Dialog").get_by_role("button", name="Remove").click()
                expect(card).to_have_count(0, timeout=60_000)
                assert worker(lab) is None
                expect(panel.locator(".cdf-empty")).to_have_text("no workers connected")
                assert not errors, errors
        finally:
            browser.close()
            if agent is not None:
                stop(agent)
