"""What a run view says about a run beyond its row: its `final_loss` ({name, value} or None), by the
one rule in wire/run_summary.py, so the API, the CLI and the notebook widgets show the same loss."""

from __future__ import annotations

from typing import Any

from ...wire.run_summary import final_loss
from ..store.database import Store


async def add_final_loss(store: Store, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set `final_loss` on each view (one read for the page; a run that never started has none)."""
    points = await store.last_loss_points([v["id"] for v in views if v.get("started_at")])
    for view in views:
        view["final_loss"] = final_loss(points.get(view["id"], ()))
    return views
