"""Lab panels benchmark, in a real `jupyter lab` and headless Chromium (/usr/bin/chromium; the e2e
tests' harness, tests/e2e/lab_server.py), with `--runs` runs (10,000) already in the database:
retention off (CODEFY_RUN_RETENTION_KEEP_LAST=-1, as run_queue.py), so the database keeps them all
(with retention on it kept 200 finished runs); `runs_in_db` is the count the server answers.

`--runs N` puts them in through the API, as any client does (about 1.5 h for 1,000,000 on a 2-core
machine). `--generated N` instead writes N finished runs straight into the SQLite file of the data
dir `running_lab` serves, before the server starts: the rows, schema and fill of run_pages.py (its
`rows`, `create_schema`, `fill_sqlite`, then ANALYZE), about 300 s for 1,000,000. Generated runs
have no event logs (a listing reads none), which is all the Runs panel's figures need. `fill_s` is
the time of either fill.

`--panel-only` measures the Runs panel's open, Refresh and chip only and skips the event → DOM,
streaming and graph-viewer parts: those measure the event path, whose cost does not depend on how
many finished runs are stored (the panel's re-reads during them do, and are measured by Refresh).
Without it everything runs, at any size.

- `runs_panel_open`: the Runs panel listing its 50 rows out of all the runs: from the page's start
  (Lab's own start included) to the rows in the DOM; then Refresh and the Succeeded chip (each a
  server query over every run plus the redraw), clicked in the page, to the new rows in the DOM and
  to the next frame painted. Median and max of `--repeat`.
- `event_to_dom_ms`: the time from the server logging an event (its `created_at`, the stamp every
  event carries) to the page showing it (Date.now() when a MutationObserver sees the change), both
  clocks this machine's: for the Runs panel, a run's closing event to its row reading succeeded
  (40 staggered runs); for the graph viewer, each node_status event of a watched 80-node run to the
  node's box taking that state. p50 / p99 / max. The Runs panel's also says when the socket frame
  carrying the closing event reached the page (`frame_arrival`: the server's share of the latency).
- `streaming`: 10 runs at once, each a chain of 200 short Sleep nodes (their events all go to the
  panel, which follows every run): the page's frames (gaps between animation frames: p50 / p99 /
  max), its long tasks (> 50 ms: count, total), Refresh → rows while they stream, and the closing
  event → row latency of those 10 runs.
- `js`: the installed extension's JavaScript (bytes, gzipped), and which build it is (an editable
  install's development build, or the wheel's production build).

Targets (issue 14): event → DOM p50 ≤ 100 ms, p99 ≤ 300 ms; the panel open with 10,000 runs
≤ 300 ms; responsive while 10 runs stream.

    python benchmarks/lab_runs.py [--runs 10000 | --generated 1000000] [--panel-only] [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import publish
from run_pages import create_schema, fill_sqlite

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from lab_server import CHROMIUM, CHROMIUM_ARGS, QUICK, TOKEN, Lab, data_dir, nap, running_lab  # noqa: E402

P50_TARGET_MS, P99_TARGET_MS, OPEN_TARGET_MS = 100.0, 300.0, 300.0

# Records when each run row shows a status and each graph node box a state, first time only, keyed
# "run:<id>:<status>" / "node:<id>:<state>"; window.__seen is reset between measurements. The same
# for the codefy socket's frames as they arrive (window.__arrived, "run:<id>:<status>"), so a slow
# sample says whether the page or the delivery was slow.
OBSERVER = """
window.__seen = {}; window.__arrived = {};
const PageSocket = window.WebSocket;
window.WebSocket = class extends PageSocket {
  constructor(...args) {
    super(...args);
    if (!String(args[0]).includes('/codefy/ws/')) return;
    this.addEventListener('message', m => {
      const now = Date.now();
      if (typeof m.data !== 'string') return;
      let f; try { f = JSON.parse(m.data); } catch { return; }
      for (const x of (f.type === 'batch' ? f.frames : [f])) {
        const key = x && x.run_id ? 'run:' + x.run_id + ':' + x.status : null;
        if (key !== null && !(key in window.__arrived)) window.__arrived[key] = now;
      }
    });
  }
};
const note = (el, now) => {
  if (!el.matches) return;
  let key = null;
  if (el.matches('tr.cdf-row')) key = 'run:' + el.dataset.runId + ':' + el.dataset.status;
  else if (el.matches('g.cdf-node')) key = 'node:' + el.getAttribute('data-node-id') + ':' + el.getAttribute('data-state');
  if (key !== null && !(key in window.__seen)) window.__seen[key] = now;
};
new MutationObserver(records => {
  const now = Date.now();
  for (const r of records) {
    if (r.type === 'attributes') note(r.target, now);
    else for (const n of r.addedNodes) if (n.nodeType === 1) {
      note(n, now);
      n.querySelectorAll('tr.cdf-row, g.cdf-node').forEach(el => note(el, now));
    }
  }
}).observe(document, {subtree: true, childList: true, attributes: true,
                                      attributeFilter: ['data-status', 'data-state']});
"""

# Clicks a button of the Runs panel and waits for `changes` new table bodies (a chip redraws once at
# once, with the old rows, then with the server's answer; Refresh only then), then the next frame.
CLICK_TO_ROWS = """async ([selector, changes]) => {
  const panel = document.querySelector('#codefy-runs');
  let before = panel.querySelector('tbody');
  let seen = 0;
  const t0 = performance.now();
  let dom = null;
  await new Promise(resolve => {
    const obs = new MutationObserver(() => {
      const now = panel.querySelector('tbody');
      if (now && now !== before && now.querySelectorAll('tr.cdf-row').length) {
        before = now;
        if (++seen < changes) return;
        dom = performance.now() - t0; obs.disconnect(); resolve();
      }
    });
    obs.observe(panel, {subtree: true, childList: true});
    panel.querySelector(selector).click();
  });
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return {dom, paint: performance.now() - t0};
}"""

FRAMES_START = """() => {
  window.__frames = []; window.__long = [];
  let last = performance.now();
  const tick = now => { window.__frames.push(now - last); last = now; if (window.__framing) requestAnimationFrame(tick); };
  window.__framing = true; requestAnimationFrame(tick);
  window.__longObs = new PerformanceObserver(list => { for (const e of list.getEntries()) window.__long.push(e.duration); });
  window.__longObs.observe({type: 'longtask'});
}"""
FRAMES_STOP = """() => { window.__framing = false; window.__longObs.disconnect(); return {frames: window.__frames, long: window.__long}; }"""


def chain(n: int, seconds: float) -> dict[str, Any]:
    nodes = [{"id": "k", "type": "Float", "params": {"value": 1}}]
    nodes += [{"id": f"s{i}", "type": "Sleep", "params": {"seconds": seconds}} for i in range(n)]
    edges = [{"source": "k" if i == 0 else f"s{i - 1}", "source_port": "value", "target": f"s{i}", "target_port": "value"}
             for i in range(n)]
    return {"nodes": nodes, "edges": edges}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def spread(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(pct(values, 0.5), 1), "p99": round(pct(values, 0.99), 1),
            "max": round(max(values), 1)}


def med(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def events(lab: Lab, run_id: str) -> list[dict[str, Any]]:
    out, cursor = [], 0
    while True:
        page = lab.api("GET", f"runs/{run_id}/events?cursor={cursor}")
        out += page["events"]
        cursor = page["cursor"]
        if not page["more"]:
            return out


def idle(lab: Lab, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while lab.api("GET", "runs?status=queued,running&limit=1")["total"]:
        assert time.monotonic() < deadline, "runs still in progress"
        time.sleep(0.5)


def fill(lab: Lab, n: int) -> float:
    """n finished runs in the database, through the API as any client makes them."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: lab.submit(QUICK, f"filler {i}"), range(n)))
    idle(lab)
    return time.perf_counter() - t0


def generate(data_dir: Path, n: int) -> float:
    """n finished runs written straight into the SQLite file that the server at `data_dir` opens
    (run_pages.py's fill), before it starts. The server reads them as runs it had stored."""
    from codefy_jupyter.core.store.lock import DATABASE_FILE

    t0 = time.perf_counter()
    data_dir.mkdir(parents=True, exist_ok=True)
    database = data_dir / DATABASE_FILE
    asyncio.run(create_schema(str(database)))
    fill_sqlite(database, n)
    return time.perf_counter() - t0


def closing_latency(lab: Lab, seen: dict[str, float], run_ids: list[str]) -> list[float]:
    out = []
    for run_id in run_ids:
        closing = events(lab, run_id)[-1]
        key = f"run:{run_id}:succeeded"
        if key in seen:
            out.append(seen[key] - closing["created_at"] * 1000)
    return out


def page_stamps(page: Any) -> tuple[dict[str, float], dict[str, float]]:
    return page.evaluate("window.__seen"), page.evaluate("window.__arrived")


def js_size() -> dict[str, Any]:
    """The installed extension's JavaScript. An editable install (`make venv`) holds the development
    build (webpack's module banners, unminified); the wheel's production build is smaller: both are
    reported as what they are."""
    static = ROOT / "codefy_jupyter" / "labextension" / "static"
    files = sorted(static.glob("*.js"))
    raw = sum(f.stat().st_size for f in files)
    gz = sum(len(gzip.compress(f.read_bytes(), 9)) for f in files)
    development = any(b"/*!***" in f.read_bytes() for f in files)
    return {"build": "development" if development else "production", "files": len(files), "bytes": raw,
            "gzip_bytes": gz}


def panel_open(lab: Lab, page: Any, repeat: int) -> dict[str, Any]:
    """The Runs panel opened in a fresh Lab page, then Refresh and the Succeeded chip, `repeat` times."""
    rows = page.locator("#codefy-runs tr.cdf-row")
    load, refresh, chip = [], [], []
    for _ in range(repeat):
        page.goto(f"{lab.url}lab?reset&token={TOKEN}")
        page.locator('.jp-SideBar li[data-id="codefy-runs"]').click(timeout=90_000)
        rows.nth(49).wait_for(state="attached", timeout=60_000)
        load.append(page.evaluate("Math.min(...Object.entries(window.__seen)"
                                  ".filter(([k]) => k.startsWith('run:')).map(([, v]) => v))"
                                  " - performance.timeOrigin"))
        assert load[-1] < 1e9, "the page recorded no run rows"  # the observer saw nothing
        refresh.append(page.evaluate(CLICK_TO_ROWS, ["button.cdf-refresh", 1]))
        chip.append(page.evaluate(CLICK_TO_ROWS, ['button[data-filter="succeeded"]', 2]))
        page.evaluate(CLICK_TO_ROWS, ['button[data-filter="all"]', 2])
    return {"page_start_to_rows_ms": med(load),
            "refresh_to_rows_ms": med([r["dom"] for r in refresh]),
            "refresh_to_painted_ms": med([r["paint"] for r in refresh]),
            "chip_to_rows_ms": med([r["dom"] for r in chip]),
            "chip_to_painted_ms": med([r["paint"] for r in chip])}


def event_path(lab: Lab, page: Any) -> dict[str, Any]:
    """Event → DOM in the Runs panel (the page the panel is open in) and the graph viewer, and the
    10 streaming runs: the report's `event_to_dom_ms` and `streaming`."""
    # Runs panel: 40 runs ending one after another, each closing event to its row.
    page.evaluate("window.__seen = {}; window.__arrived = {}")
    staggered = [lab.submit(nap(1.0 + 0.1 * i), f"latency {i}") for i in range(40)]
    idle(lab)
    time.sleep(1.0)
    seen, arrived = page_stamps(page)
    panel_latency = closing_latency(lab, seen, staggered)
    panel_arrival = closing_latency(lab, arrived, staggered)

    # 10 runs streaming at once: frames, long tasks, Refresh, and their closing latency.
    page.evaluate("window.__seen = {}")
    page.evaluate(FRAMES_START)
    streaming = [lab.submit(chain(200, 0.02), f"stream {i}") for i in range(10)]
    lab.wait_status(streaming[0], "running")
    busy_refresh = []
    for _ in range(3):
        time.sleep(0.5)
        busy_refresh.append(page.evaluate(CLICK_TO_ROWS, ["button.cdf-refresh", 1]))
    idle(lab)
    time.sleep(1.0)
    frames = page.evaluate(FRAMES_STOP)
    stream_latency = closing_latency(lab, page.evaluate("window.__seen"), streaming)
    streamed = sum(len(events(lab, r)) for r in streaming)

    # Graph viewer: one run of an 80-node chain, each node_status event to its box.
    (lab.root / "chain.codefy.json").write_text(json.dumps(chain(80, 0.03)))
    page.goto(f"{lab.url}lab/tree/chain.codefy.json?reset&token={TOKEN}")
    viewer = page.locator(".lm-DockPanel-widget:not(.lm-mod-hidden) .cdf-graph-viewer")
    viewer.locator("g.cdf-node").nth(80).wait_for(state="attached", timeout=60_000)
    page.evaluate("window.__seen = {}")
    page.locator(".cdf-graph-document .cdf-tb-run").first.click()
    status = viewer.locator('[data-role="run-status"]')
    status.wait_for(timeout=30_000)
    deadline = time.monotonic() + 120
    while status.inner_text() != "succeeded":
        assert time.monotonic() < deadline, status.inner_text()
        time.sleep(0.2)
    run_id = viewer.locator(".cdf-graph-status .cdf-run-link").get_attribute("data-run-id")
    seen = page.evaluate("window.__seen")
    viewer_latency = [seen[f"node:{e['payload']['node_id']}:{e['payload']['status']}"] - e["created_at"] * 1000
                      for e in events(lab, run_id) if e["type"] == "node_status"
                      and f"node:{e['payload']['node_id']}:{e['payload']['status']}" in seen]

    to_dom = {"runs_panel": spread(panel_latency), "graph_viewer": spread(viewer_latency)}
    # Which of the staggered runs was slowest (0: the first to end, ~1 s after its submit).
    to_dom["runs_panel"]["slowest_run_index"] = (
        max(range(len(panel_latency)), key=panel_latency.__getitem__) if panel_latency else None)
    to_dom["runs_panel"]["frame_arrival"] = spread(panel_arrival)
    return {"event_to_dom_ms": to_dom, "streaming": {
        "runs": 10, "events": streamed, "frame_gap_ms": spread(frames["frames"]),
        "long_tasks": {"count": len(frames["long"]), "total_ms": round(sum(frames["long"]), 1),
                       "max_ms": round(max(frames["long"], default=0), 1)},
        "refresh_to_rows_ms": med([r["dom"] for r in busy_refresh]),
        "closing_event_to_row_ms": spread(stream_latency)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fill_kind = parser.add_mutually_exclusive_group()
    fill_kind.add_argument("--runs", type=int, help="finished runs put in through the API first (default 10000)")
    fill_kind.add_argument("--generated", type=int,
                           help="finished runs written straight into the SQLite store before the server starts")
    parser.add_argument("--panel-only", action="store_true",
                        help="only the Runs panel's open, Refresh and chip (no event → DOM, streaming, graph viewer)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.runs is None and args.generated is None:
        args.runs = 10_000
    if (args.runs if args.generated is None else args.generated) < 1:
        parser.error("--generated must be >= 1" if args.generated is not None else "--runs must be >= 1")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    began = time.perf_counter()
    from playwright.sync_api import sync_playwright

    report: dict[str, Any] = {"fill": "generated" if args.generated else "api",
                              "runs_in_db": args.generated or args.runs, "repeat": args.repeat}
    env = {"CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU": "64", "CODEFY_RUN_RETENTION_KEEP_LAST": "-1"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.generated:
            report["fill_s"] = round(generate(data_dir(Path(tmp)), args.generated), 1)
        with running_lab(Path(tmp), env=env) as lab:
            if args.runs:
                report["fill_s"] = round(fill(lab, args.runs), 1)
            # what the database holds, as the panel's count reads it (not the number asked for)
            report["runs_in_db"] = lab.api("GET", "runs?limit=1")["total"]
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1600, "height": 900})
                    page.add_init_script(OBSERVER)
                    report["runs_panel_open"] = panel_open(lab, page, args.repeat)
                    if not args.panel_only:
                        report.update(event_path(lab, page))
                finally:
                    browser.close()

    report["js"] = js_size()
    opened = report["runs_panel_open"]["refresh_to_painted_ms"]["median"] <= OPEN_TARGET_MS
    report["target"] = {"open_ms_at_most": OPEN_TARGET_MS, "open_met": opened}
    if not args.panel_only:
        both = report["event_to_dom_ms"].values()
        report["target"].update(event_to_dom_p50_ms_at_most=P50_TARGET_MS, event_to_dom_p99_ms_at_most=P99_TARGET_MS)
        opened = opened and all(s.get("n") and s["p50"] <= P50_TARGET_MS and s["p99"] <= P99_TARGET_MS for s in both)
    report["target"]["met"] = opened
    publish(args.out, began, **report)


if __name__ == "__main__":
    main()
