"""What becomes, at start, of each run a previous process left active. Pure: the run service reads
the rows and their last events, asks `recover`, and does what it answers.

- `Repair`: the log, which is the record, already closed the run (a row written before status and
  closing event shared one transaction): the row takes the log's status. Not a transition.
- `Adopt`: a worker run with a resume point: it keeps its slots and waits, disconnected, for its
  worker to come back (no assign is sent).
- `Requeue`: a queued run, at a takeover (on PostgreSQL, this replica took the leader lease from
  another one, whose queue passes to it): it joins the new queue again, in its submit order (its
  row's `submit_order`, the order `active_runs` reads them in), so every waiting run keeps its
  order and place. At a restart (SQLite, or a replica on its own lease) the seed's rule holds:
  nothing resumes a queue.
- `Retire`: anything else ends interrupted (server_restart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...wire import run_events as ev
from ...wire.run_options import RunOptions
from ..scheduling.queue import Run
from ..contract import lifecycle as rs


@dataclass(frozen=True)
class Repair:
    status: str


@dataclass(frozen=True)
class Adopt:
    worker: str
    status: str  # disconnected: its worker's connection went with the old process
    started: float | None


@dataclass(frozen=True)
class Requeue:
    body: dict[str, Any]  # the submit body its row records, checked again as a submit would be


@dataclass(frozen=True)
class Retire:
    closing: ev.RunEvent


def recover(row: dict[str, Any], last: ev.RunEvent | Any | None, resume: dict[str, Any] | None,
            keep_queue: bool = False) -> Repair | Adopt | Requeue | Retire:
    """`last`: the run's last logged event (type, payload); `resume`: its worker resume point, if any;
    `keep_queue`: a takeover, whose queue passes to this process, so a queued run is requeued."""
    if last is not None and last.type in ev.CLOSING:
        return Repair(ev.closing_status(last.type, last.payload) or rs.INTERRUPTED)
    if keep_queue and row["status"] == rs.QUEUED:
        return Requeue(submit_body(row))
    if row["status"] in (rs.RUNNING, rs.DISCONNECTED) and resume is not None:
        status = row["status"] if row["status"] == rs.DISCONNECTED else rs.next_state(row["status"], rs.DISCONNECT)
        return Adopt(worker=resume["worker"], status=status, started=row.get("started_at"))
    return Retire(ev.execution_stopped(row["id"], status=rs.INTERRUPTED, code="server_restart",
                                       message=f"the server stopped while this run was {row['status']}; "
                                       "it did not resume"))


def not_requeued(row: dict[str, Any], why: str) -> Retire:
    """A queued run the new queue could not take back (its worker is gone, its SECRET values with
    the old process): it ends interrupted, saying why."""
    return Retire(ev.execution_stopped(row["id"], status=rs.INTERRUPTED, code="server_restart",
                                       message=f"this run was queued when the server that held it stopped, "
                                       f"and could not be queued again: {why}"))


def submit_body(row: dict[str, Any]) -> dict[str, Any]:
    """The submit body a queued run's row records (RunOptions.to_row wrote its options): what
    the new queue checks and queues again. The seed is the one chosen at the first submit."""
    return {"graph": row.get("graph") or {}, "name": row.get("name"),
            "options": RunOptions.from_row(row).to_submit()}


def adopted_run(row: dict[str, Any], resume: dict[str, Any], order: int) -> tuple[Run, list[str]]:
    """The adopted run as the queue holds it, and the slots it keeps."""
    name = resume["worker"]
    devices = tuple(resume.get("devices") or ())
    # Its budget keeps counting on a card shared by memory (without it the run would hold the card whole).
    options = RunOptions.from_row(row)
    run = Run(run_id=row["id"], order=order, device=resume["device"], devices=devices if len(devices) > 1 else (),
              seeded=options.seed is not None, worker=name, owner=row.get("owner"), name=row.get("name"),
              memory_mib=options.memory_mib)
    return run, list(resume.get("slots") or [f"{name}/{d}" for d in devices or (resume["device"],)])


__all__ = ["Adopt", "Repair", "Requeue", "Retire", "adopted_run", "not_requeued", "recover", "submit_body"]
