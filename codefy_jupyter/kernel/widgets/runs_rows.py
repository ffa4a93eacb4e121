"""The Runs table's rules, pure: filter chips, columns, the count, which actions a row offers and
how an action message from the browser is checked. The widget (`runs_table.py`) only fetches and
syncs; tests/unit/test_widget_rows.py covers these rules on plain run rows.

Columns follow the Runs panel of the spec: Run, Status, Worker, Devices, Budget, Started,
Duration, Final loss; a waiting run shows its place in line (Queue #N, or Any queue #N for an
`any` run) and, when it waits for more than its turn, the reason on a line of its own.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from ...client.numbers import format_loss
from ...wire import messages as words

LIST_LIMIT = 50  # the newest 50 runs, as the Runs panel
NAME_MAX = 64
ACTIVE = frozenset({"queued", "running", "disconnected"})
FINISHED = frozenset({"succeeded", "failed", "cancelled", "interrupted"})

# Chip -> the statuses it lists (None: every run). A disconnected run (its worker dropped and it
# may still be going) is listed with the running ones.
FILTERS: dict[str, list[str] | None] = {
    "all": None,
    "running": ["running", "disconnected"],
    "queued": ["queued"],
    "succeeded": ["succeeded"],
    "failed": ["failed"],
    "cancelled": ["cancelled"],
    "interrupted": ["interrupted"],
}
FILTER_LABELS = [[key, key.capitalize()] for key in FILTERS]
ACTIONS = ("stop", "watch", "csv", "delete")


class ActionError(ValueError):
    """A refused action message; `field` names the part of the message at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def statuses_for(chip: str) -> list[str] | None:
    if chip not in FILTERS:
        raise ActionError(f"unknown filter {chip!r}; one of {', '.join(FILTERS)}", "filter")
    return FILTERS[chip]


def allowed_actions(status: str) -> list[str]:
    """Stop and Watch for queued or running runs, CSV for every run, Delete for finished runs."""
    actions = []
    if status in ACTIVE:
        actions += ["stop", "watch"]
    actions.append("csv")
    if status in FINISHED:
        actions.append("delete")
    return actions


def check_action(content: Any, statuses: Mapping[str, str]) -> tuple[str, str | None]:
    """(action, run_id) of a message from the browser, checked against the rows it can see
    (`statuses`: run id -> status). Refresh and filter take no run id."""
    if not isinstance(content, Mapping):
        raise ActionError("an action message must be an object", "action")
    action = content.get("action")
    if action == "refresh":
        return "refresh", None
    if action == "filter":
        chip = content.get("filter")
        statuses_for(chip if isinstance(chip, str) else repr(chip))
        return "filter", chip
    if action not in ACTIONS:
        raise ActionError(f"unknown action {action!r}; one of refresh, filter, {', '.join(ACTIONS)}", "action")
    run_id = content.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise ActionError(f"{action} needs a run_id", "run_id")
    status = statuses.get(run_id)
    if status is not None and action not in allowed_actions(status):
        which = "queued or running" if action in ("stop", "watch") else "finished"
        raise ActionError(f"{action.capitalize()} is for {which} runs only; run {run_id} is {status}", "action")
    return action, run_id


def worker_label(run: Mapping[str, Any]) -> str:
    """This server for a local run, Any available for an any run not placed yet, else the worker."""
    if run.get("worker_id"):
        return str(run["worker_id"])
    target = (run.get("options") or {}).get("target") or {}
    worker = target.get("worker")
    if worker in (None, "", "local"):
        return "This server" if not target.get("pool") else f"pool {target['pool']}"
    if worker == "any":
        return "Any available"
    return str(worker)


def devices_label(run: Mapping[str, Any]) -> str:
    devices = run.get("devices") or ([run["device"]] if run.get("device") else [])
    return ", ".join(devices) or "-"


def cards_title(run: Mapping[str, Any]) -> str:
    """The Devices hover: one line per card the run holds (GET runs' `cards`), with its name and, on
    a worker that renumbered it, the name the run used for it; "" for a run without cards."""
    lines = []
    for card in run.get("cards") or ():
        device, name, in_run = card.get("device", ""), card.get("name"), card.get("in_run")
        line = f"{device}: {name}" if name else device
        lines.append(f"{line} ({in_run} in the run)" if in_run and in_run != device else line)
    return "\n".join(lines)


def queue_label(run: Mapping[str, Any]) -> tuple[str, str]:
    """(place in line, the queue's name for the hover) of a waiting run; ("", "") otherwise."""
    if run.get("status") != "queued":
        return "", ""
    key = run.get("queue_key") or ""
    pos = run.get("queue_position")
    prefix = "Any queue" if key.startswith("any/") else "Queue"
    return (f"{prefix} #{pos}" if pos else prefix), key


def budget_label(run: Mapping[str, Any]) -> str:
    target = (run.get("options") or {}).get("target") or {}
    gib = target.get("memory_gib")
    if not isinstance(gib, (int, float)) or isinstance(gib, bool):
        return "-"
    text = f"{gib:g} GiB"
    if target.get("memory_source") != "estimate":
        return text
    raised = target.get("estimate_raised_from")
    if isinstance(raised, (int, float)) and not isinstance(raised, bool):
        return f"{text} est. (raised from {raised:g} GiB)"
    return text + " est."


def format_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def duration_of(run: Mapping[str, Any], now: float) -> float | None:
    started = run.get("started_at")
    if not started:
        return None
    end = run.get("finished_at") or (now if run.get("status") in ACTIVE else None)
    return max(0.0, end - started) if end else None


def display_name(run: Mapping[str, Any]) -> str:
    name = run.get("name") or ""
    if len(name) > NAME_MAX:
        name = name[:NAME_MAX - 1] + "…"
    return name or str(run.get("id", ""))[:12]


def table_row(run: Mapping[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """One run of `GET …/runs` as the row the browser renders (every cell already a string). The
    final loss is the API's `final_loss` (wire/run_summary.py: the rule the CLI shows too)."""
    now = time.time() if now is None else now
    loss = run.get("final_loss") if isinstance(run.get("final_loss"), dict) else None
    queue, queue_title = queue_label(run)
    reason = run.get("queue_reason") if run.get("status") == "queued" else None
    return {
        "id": run.get("id", ""),
        "name": display_name(run),
        "status": run.get("status", ""),
        "worker": worker_label(run),
        "devices": devices_label(run),
        "devices_title": cards_title(run),
        "queue": queue,
        "queue_title": queue_title,
        "reason": words.text_of(reason),  # the catalog's words (wire/messages.json), as the CLI and Lab say it
        "budget": budget_label(run),
        "started": format_time(run.get("started_at")),
        "duration": format_duration(duration_of(run, now)),
        "final_loss": format_loss(loss["value"] if loss else None),
        "final_loss_title": loss["name"] if loss else "",
        "actions": allowed_actions(run.get("status", "")),
    }


def count_label(shown: int, total: int) -> str:
    return f"{shown} of {total}"


def csv_filename(run_id: str) -> str:
    return f"run-{run_id}-metrics.csv"
