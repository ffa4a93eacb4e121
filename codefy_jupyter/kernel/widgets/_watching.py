"""Watching one run from another widget (the Runs table's Watch, the Queue on… dialog after a
submit): a RunView follows it, and a digest of its state is mirrored into the host's `watch`
trait so the host's own ESM can draw a strip without rendering a second widget."""

from __future__ import annotations

from typing import Any

from .run_state_view import summary
from .run_view import RunView


class Watching:
    """Mixin for an anywidget with a synced `watch` Dict trait and a `_client`."""

    watched: RunView | None = None

    def watch(self, run_id: str) -> RunView:
        """Follow `run_id` (replacing what was watched); the RunView, to display in full."""
        self.unwatch()
        view = RunView(run_id, client=self._client)  # type: ignore[attr-defined]
        self.watched = view

        def mirror(_change: Any = None) -> None:
            if self.watched is view:
                self.watch_state = summary(view.state)  # type: ignore[attr-defined]

        view.observe(mirror, names=["cursor", "status", "queue_position", "queue_reason", "following"])
        mirror()
        return view

    def unwatch(self) -> None:
        view, self.watched = self.watched, None
        if view is not None:
            view.close()
        self.watch_state = {}  # type: ignore[attr-defined]

    def _close_watching(self, owns_client: bool) -> bool:
        """Stop watching as the host closes; whether the host must still close its client (the
        watched view takes that over while it is inside a request on the shared client)."""
        view = self.watched
        adopted = owns_client and view is not None and view._adopt_client()
        self.unwatch()
        return owns_client and not adopted
