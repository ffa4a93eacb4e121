"""What a sweep's variants and a study's repetitions share as runs: the options they all get, the
refusals of options the experiment owns, and their names.

The options go to every child unchanged, except that the experiment owns seeding (`options.seed` is
refused) and always queues (`lane: interactive` is refused). An option the run API would refuse as
malformed is refused here as a 400 naming the field: the experiment's own schema took the options
object as a whole.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadRequest, SchemaError
from ..runs.requests import parse_submit

NAME_MAX = 64  # a child's name as the Runs panel lists it


def check_child_options(options: Any, what: str) -> dict[str, Any]:
    """The options every child of a sweep or study (`what`) gets, or BadRequest naming the field."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise BadRequest("options must be an object", code="invalid_options", params={"field": "options"})
    if "seed" in options:
        raise BadRequest(f"options.seed is not accepted: the {what} owns seeding"
                         + (" (use sweep_spec.seed with seed_variants)" if what == "sweep" else " (use seed)"),
                         code="seed_owned", params={"field": "options.seed"})
    if options.get("lane") == "interactive":
        raise BadRequest(f"lane: interactive is not accepted: a {what}'s runs always queue",
                         code="lane_interactive", params={"field": "options.lane"})
    try:
        parse_submit({"graph": {}, "options": options})
    except SchemaError as err:
        raise BadRequest(str(err), code="invalid_options", params={"field": err.field}) from None
    return dict(options)


def sweep_child_name(sweep_name: str | None, index: int) -> str | None:
    """`<sweep> #<index+1>`, the sweep's name cut so that the whole fits NAME_MAX; unnamed stays unnamed."""
    if not sweep_name:
        return None
    suffix = f" #{index + 1}"
    return sweep_name[:max(0, NAME_MAX - len(suffix))] + suffix


def study_child_name(study_name: str | None, label: str, repetition: int) -> str:
    """`<study> / <label> / r<n>`."""
    return f"{study_name or 'study'} / {label} / r{repetition}"


def child_placement(run: Any) -> dict[str, Any]:
    """Where a child runs: worker_id, devices and queue_key of its run row. The run row leaves an
    `any` run's worker_id empty until it is placed; a sweep's table shows `any` there instead,
    so a waiting any sweep variant does not read as one on this server."""
    worker, key = run.get("worker_id"), run.get("queue_key")
    if worker is None and run.get("status") == "queued" and isinstance(key, str) and key.startswith("any/"):
        worker = "any"
    return {"worker_id": worker, "devices": run.get("devices"), "queue_key": key}
