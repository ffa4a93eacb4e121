"""Notebook widgets (anywidget; one plain ESM file per widget, no build step): `RunsTable`,
`RunView`, `WorkersTable`, `QueueDialog`, `SweepView`, `StudyView`. They read and write only
through the REST API, via `codefy_jupyter.kernel.Client`; without a client they find the server
themselves."""

from .queue_dialog import QueueDialog
from .run_view import RunView
from .runs_table import RunsTable
from .study_view import StudyView
from .sweep_view import SweepView
from .workers_table import WorkersTable

__all__ = ["QueueDialog", "RunView", "RunsTable", "StudyView", "SweepView", "WorkersTable"]
