"""The SweepView and StudyView ES modules in a real headless Chromium (Debian's `chromium`), as
tests/e2e/test_widget_esm.py does for the other widgets: each module is exactly the text its class
ships as `_esm`, rendered with an in-page anywidget model filled with state made by the same
Python code the widgets sync; the DOM is checked for rows, sortable headers and what clicks send,
and a screenshot for ink in every row and coloured chart lines."""

from __future__ import annotations

import functools
import json
import shutil
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from test_widget_esm import CHROMIUM, FAKE_MODEL, HEIGHT, WIDTH, _Quiet, chromium, ink, page_report

from codefy_jupyter.client.study_report import budget_text, progress
from codefy_jupyter.kernel.widgets import StudyView, SweepView
from codefy_jupyter.kernel.widgets.experiment_rows import sort_rows, study_rows, study_series, sweep_rows, sweep_state

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH")]
PAGE = Path(__file__).with_name("experiment_page.html")


def sweep_doc() -> dict:
    variants = []
    for i, (status, objective, rank) in enumerate((("succeeded", 0.8, 2), ("succeeded", 0.4, 1), ("failed", None, None),
                                                    ("running", None, None))):
        variants.append({"index": i, "run_id": f"{i:032x}", "status": status, "objective": objective, "rank": rank,
                         "tied_with": [], "params": [{"node_id": "opt", "param": "lr", "value": 10.0 ** -(i + 1)}],
                         "final_metrics": {"val_loss": objective} if objective else {}, "run_exists": True,
                         "worker_id": "gpu-box" if i % 2 else None, "devices": ["cuda:0"] if i % 2 else ["cpu"]})
    return {"sweep_id": "a" * 32, "name": "lr", "state": "running",
            "counts": {"succeeded": 2, "failed": 1, "running": 1},
            "objective": {"metric": "val_loss", "direction": "minimize", "node_id": "train"}, "variants": variants}


def study_doc() -> dict:
    def v(index, label, values, rank, comparison=None):
        return {"index": index, "label": label, "rank": rank, "tie": False, "tied_with": [], "eligible": True,
                "ineligible_reasons": [], "average_rank": float(rank), "comparison": comparison,
                "aggregate": {"count": 3, "mean": sum(values) / 3, "std": 0.1, "values": values},
                "repetitions": [{"repetition": r, "seed": 7 + r, "current": {"status": "succeeded",
                                                                             "objective_value": x}}
                                for r, x in enumerate(values)]}
    return {"id": "b" * 32, "name": "lr study", "status": "cancelled", "revision": 31, "repetitions": 3, "seed": 7,
            "objective": {"node_id": "train", "metric": "val_loss", "direction": "minimize"}, "best": "small",
            "budget_usage": {"max_parallel_runs": {"limit": 1, "used": 0}, "max_runs": {"limit": 9, "used": 6},
                             "max_active_seconds": {"limit": None, "used": 12.5}, "exhausted": None},
            "variants": [v(0, "big", [0.9, 1.0, 1.1], 2, {"mean_difference": 0.5, "ci95": [0.4, 0.6], "p_value": 0.25,
                                                           "against": "small"}),
                         v(1, "small", [0.4, 0.5, 0.6], 1)]}


def fixtures() -> dict:
    sweep, study = sweep_doc(), study_doc()
    objective = sweep["objective"]
    p = progress(study)
    out = {
        "sweep": {**sweep_state(sweep), "sweep_id": sweep["sweep_id"], "sort_key": "rank", "descending": False,
                  "rows": sort_rows(sweep_rows(sweep), "rank"), "error": None, "message": "", "follow_error": "",
                  "watched": None,
                  "curves": {"#1": [[1, 1.2], [2, 0.9], [3, 0.8]], "#2": [[1, 1.0], [2, 0.6], [3, 0.4]]}},
        "study": {"study_id": study["id"], "name": study["name"], "status": study["status"],
                  "revision": study["revision"], "objective": f"minimize {objective['metric']} of train", "progress": p,
                  "budget_text": budget_text(p["budget"]), "halt": None, "series": study_series(study),
                  "rows": sort_rows(study_rows(study), "rank"), "sort_key": "rank", "descending": False, "error": None,
                  "message": "", "follow_error": "", "watched": None},
    }
    for key, cls in (("sweep", SweepView), ("study", StudyView)):
        unknown = set(out[key]) - set(cls.class_trait_names(sync=True))
        assert not unknown, f"{key} fixture sets traits {cls.__name__} does not sync: {unknown}"
    return out


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    (root / "sweep_view.js").write_text(str(SweepView._esm), encoding="utf-8")
    (root / "study_view.js").write_text(str(StudyView._esm), encoding="utf-8")
    (root / "widgets.css").write_text(str(SweepView._css), encoding="utf-8")
    shutil.copy(PAGE, root / "index.html")
    shutil.copy(FAKE_MODEL, root / "fake_model.js")
    (root / "fixtures.js").write_text("export default " + json.dumps(fixtures()) + ";\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()
    server.server_close()
    thread.join()


def test_sweep_and_study_views_render_sort_and_send_their_actions(site, tmp_path):
    dumped = chromium(tmp_path, "--dump-dom", site)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    report = page_report(dumped.stdout)

    # Sweep: ranked rows first, empty objectives last; sortable Rank / Status / Objective headers.
    assert report["sweep_rows"] == ["2", "1", "3", "4"]
    assert report["sweep_heads"] == ["Rank ▲", "#", "Objective", "Status"]
    assert sorted(report["sweep_series"]) == ["#1", "#2"] and report["stop_disabled"] is False
    assert report["sweep_sent"] == [{"action": "sort", "key": "objective"}, {"action": "open", "run_id": f"{1:032x}"},
                                    {"action": "stop"}, {"action": "csv"}]
    assert report["arrow"] == "Objective ▼"
    # Study: best first, the paired difference with its interval, budget, Cancel/Resume.
    assert report["study_rows"] == [["small", "1"], ["big", "2"]]
    text = report["study_text"]
    assert "+0.5 [0.4, 0.6]" in text and "0.5 ± 0.1" in text and "0.9, 1, 1.1" in text
    assert "runs 6/9" in text and "6/6 done" in text and "rev 31" in text
    assert report["resume_disabled"] is False and sorted(report["study_series"]) == ["big", "small"]
    assert report["study_sent"] == [{"action": "sort", "key": "mean"}, {"action": "resume"}]  # Cancel is off

    from PIL import Image

    shot = tmp_path / "experiments.png"
    taken = chromium(tmp_path, f"--screenshot={shot}", site)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    image = Image.open(shot)
    assert image.size == (WIDTH, HEIGHT)
    for rect in report["sweep_rects"] + report["study_rects"]:
        assert rect[2] > 500 and rect[3] > 10, rect
        assert ink(image, rect) > 100, f"table row at {rect} is blank in the screenshot"
    for rect in (report["sweep_chart"], report["study_chart"]):
        x, y, w, h = rect
        chart = image.crop((x, y, x + w, y + h)).convert("RGB")
        blue = sum(n for n, (r, g, b) in chart.getcolors(w * h) if b > 180 and r < 90 and g < 150)
        assert blue > 100, f"the chart at {rect} has no line in the screenshot"
