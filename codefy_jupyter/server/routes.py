"""Every route of the extension under `{base_url}codefy/`: the REST handlers (handlers.py), the
ws/execution socket (execution_socket.py) and the workers' socket and routes (worker_handlers.py).
Assembled here, above all three, so that none of them imports another's module but the shared base."""

from __future__ import annotations

from typing import Any

from .execution_socket import ExecutionSocket
from .handlers import (
    ArtifactsHandler, CancelHandler, EventsHandler, MemoryEstimateHandler, MetricsHandler, NodesHandler,
    OpenAPIHandler, RunHandler, RunsHandler,
)
from .health import health_routes
from .output_handlers import output_routes
from .storage_handlers import storage_routes
from .study_handlers import study_routes
from .sweep_handlers import sweep_routes
from .worker_handlers import worker_routes


def route_table(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    run = r"(?P<run_id>[^/]+)"
    return [
        (f"{base}codefy/api/runs", RunsHandler, {}),
        (f"{base}codefy/api/runs/{run}", RunHandler, {}),
        (f"{base}codefy/api/runs/{run}/cancel", CancelHandler, {}),
        (f"{base}codefy/api/runs/{run}/events", EventsHandler, {}),
        (f"{base}codefy/api/runs/{run}/metrics", MetricsHandler, {}),
        (f"{base}codefy/api/runs/{run}/artifacts", ArtifactsHandler, {}),
        *storage_routes(base),
        *output_routes(base),
        (f"{base}codefy/api/nodes", NodesHandler, {}),
        (f"{base}codefy/api/memory-estimate", MemoryEstimateHandler, {}),
        (f"{base}codefy/api/openapi.yaml", OpenAPIHandler, {}),
        *health_routes(base),
        (f"{base}codefy/ws/execution", ExecutionSocket, {}),
        *worker_routes(base),
        *sweep_routes(base),
        *study_routes(base),
    ]
