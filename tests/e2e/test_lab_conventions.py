"""Lab's conventions, in a real `jupyter lab` and Debian's Chromium: the extension's preferences
live in the Settings Editor (its schema is served, and a value set there reaches Queue on…), every
panel and dialog has a palette command, and in JupyterLab Dark every panel is readable: the text
of each status pill, node box and panel body stands out from what is behind it (a contrast ratio
measured on the computed colours), with screenshots of each in
tmp/artifacts/lab-conventions/."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from lab_server import ARTIFACTS_ROOT, CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM, TOKEN, Lab, nap

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), NEEDS_CHROMIUM]
ARTIFACTS = ARTIFACTS_ROOT / "lab-conventions"
TINY = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 0.03727593720314938}},
                  {"id": "s", "type": "Scale", "params": {"factor": 3.0}}],
        "edges": [{"source": "k", "source_port": "value", "target": "s", "target_port": "x"}]}

# The WCAG contrast ratio of an element's text colour over the first opaque background behind
# it. Chromium reports color-mix() results as `color(srgb r g b)` (0..1), plain ones as rgb().
CONTRAST = """(el) => {
  const parse = (c) => {
    let m = c.match(/^rgba?\\(([\\d.]+),\\s*([\\d.]+),\\s*([\\d.]+)(?:,\\s*([\\d.]+))?/);
    if (m) return [m[1] / 255, m[2] / 255, m[3] / 255, m[4] === undefined ? 1 : Number(m[4])];
    m = c.match(/^color\\(srgb ([\\d.]+) ([\\d.]+) ([\\d.]+)(?: \\/ ([\\d.]+))?/);
    if (m) return [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 1 : Number(m[4])];
    return null;
  };
  const lum = ([r, g, b]) => {
    const f = (v) => (v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4));
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const svgText = el instanceof SVGElement;
  const fg = parse(getComputedStyle(el)[svgText ? 'fill' : 'color']);
  let bg = null;
  if (svgText) {
    const box = el.closest('g.cdf-node')?.querySelector('.cdf-node-box');
    bg = box ? parse(getComputedStyle(box).fill) : null;
  }
  for (let n = el; !bg && n; n = n.parentElement) {
    const c = parse(getComputedStyle(n).backgroundColor);
    if (c && c[3] > 0.5) bg = c;
  }
  if (!fg || !bg) return 0;
  const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""


def user_settings(lab: Lab, plugin: str, values: dict) -> None:
    """Write Lab user settings as the Settings Editor does (before the page loads)."""
    package, name = plugin.split(":")
    path = lab.root.parent / "jupyter" / "config" / "lab" / "user-settings" / package / f"{name}.jupyterlab-settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))


def test_settings_palette_and_dark_theme(lab: Lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    user_settings(lab, "@jupyterlab/apputils-extension:themes", {"theme": "JupyterLab Dark"})
    user_settings(lab, "codefy-jupyter:panels", {"defaultTarget": "any", "refreshSeconds": 5})
    (lab.root / "tiny.codefy.json").write_text(json.dumps(TINY))

    # The schema is served with the build: the Settings Editor lists the extension's preferences.
    request = urllib.request.Request(f"{lab.url}lab/api/settings/codefy-jupyter:panels",
                                     headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        served = json.loads(response.read())
    assert set(served["schema"]["properties"]) == {"defaultTarget", "refreshSeconds"}, served["schema"]
    assert json.loads(served["raw"])["defaultTarget"] == "any"

    done = lab.submit(nap(0.1), "a short nap")
    lab.wait_status(done, "succeeded")
    waiting = lab.submit(nap(600), "a long nap")
    lab.wait_status(waiting, "running")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "codefy" in m.text else None)
            page.goto(f"{lab.url}lab/tree/tiny.codefy.json?token={TOKEN}")
            expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=90_000)

            def readable(locator, what: str, least: float = 4.5) -> None:
                expect(locator.first).to_be_in_viewport(timeout=60_000)
                for i in range(locator.count()):
                    ratio = locator.nth(i).evaluate(CONTRAST)
                    assert ratio >= least, f"{what} #{i}: contrast {ratio:.2f} in the dark theme"

            # The graph viewer: node labels over their boxes; the long float param at 4 digits.
            viewer = page.locator(".cdf-graph-viewer")
            expect(viewer.locator("g.cdf-node")).to_have_count(2, timeout=60_000)
            readable(viewer.locator(".cdf-node-label"), "node label")
            viewer.locator('g.cdf-node[data-node-id="k"]').click()
            expect(viewer.locator(".cdf-graph-side")).to_contain_text("0.03728")
            expect(viewer.locator(".cdf-graph-side")).not_to_contain_text("0.037275937")
            page.screenshot(path=str(ARTIFACTS / "1-dark-viewer.png"))

            # Queue on… starts on the preferred target the Settings Editor holds.
            page.locator(".cdf-graph-document .cdf-tb-queue").first.click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog.locator("select[name=target]")).to_have_value("any")
            readable(dialog.locator(".cdf-field > span:first-child"), "dialog label", 3.0)
            page.screenshot(path=str(ARTIFACTS / "2-dark-queue-on.png"))
            dialog.get_by_role("button", name="Cancel").click()

            # The Runs panel: every status pill and the panel's text.
            page.locator('.jp-SideBar li[data-id="codefy-runs"]').click()
            runs = page.locator("#codefy-runs")
            expect(runs.locator(f'tr.cdf-row[data-run-id="{waiting}"]')).to_have_attribute("data-status", "running",
                                                                                            timeout=60_000)
            readable(runs.locator(".cdf-status"), "status pill")
            readable(runs.locator(".cdf-title"), "panel title")
            runs.screenshot(path=str(ARTIFACTS / "3-dark-runs.png"))

            # A run's detail.
            runs.locator(f'tr.cdf-row[data-run-id="{done}"] .cdf-run-link').click()
            detail = page.locator(f".cdf-run-detail#codefy-run-{done}")
            expect(detail.locator(".cdf-events li").first).to_be_visible(timeout=60_000)
            readable(detail.locator(".cdf-facts dd .cdf-status"), "detail status")
            readable(detail.locator(".cdf-events li").first, "event line")
            page.screenshot(path=str(ARTIFACTS / "4-dark-run-detail.png"))

            # The Workers panel.
            page.locator('.jp-SideBar li[data-id="codefy-workers"]').click()
            workers = page.locator("#codefy-workers")
            readable(workers.locator(".cdf-title"), "workers title")
            workers.screenshot(path=str(ARTIFACTS / "5-dark-workers.png"))

            # The palette holds a command for every panel and dialog.
            page.keyboard.press("Control+Shift+C")
            palette = page.locator("#command-palette")
            expect(palette).to_be_visible()
            palette.locator("input").fill("Codefy")
            for label in ("Show Runs", "Open Runs in Main Area", "Show Workers", "Show Studies", "Queue on…",
                          "Run Graph Now", "New Sweep…", "Open Run by Id…", "Open Sweep by Id…", "Open Study by Id…"):
                expect(palette.locator(".lm-CommandPalette-item", has_text=label).first).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / "6-dark-palette.png"))
            # Open Run by Id… asks for the id and opens the run (a 12-character prefix, as Lab shows).
            palette.locator(".lm-CommandPalette-item", has_text="Open Run by Id…").first.click()
            prompt = page.locator(".jp-Dialog")
            prompt.locator("input").fill(waiting[:12])
            prompt.get_by_role("button", name="OK").click()
            expect(page.locator(f".cdf-run-detail#codefy-run-{waiting[:12]} .cdf-run-id")).to_have_text(
                waiting[:12], timeout=60_000)
            assert not errors, errors
        finally:
            browser.close()
    lab.api("POST", f"runs/{waiting}/cancel")
