"""Reserved worker names are refused everywhere a worker name is taken: the hello, enrollment, the
scheduler's worker offers and its per-worker limit overrides."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.scheduling.limits import parse_concurrency_overrides
from codefy_jupyter.core.scheduling.queue import WorkerOffer
from codefy_jupyter.core.workers.handshake import RESERVED_NAMES, name_problem
from codefy_jupyter.wire.names import RESERVED_WORKER_NAMES

# The REST routes beside /codefy/api/workers/{id} (server/worker_handlers.py worker_routes).
ROUTE_NAMES = ("enroll", "enrollments")


def test_the_routes_beside_a_worker_id_are_reserved():
    from codefy_jupyter.server.worker_handlers import worker_routes

    beside = {p.rsplit("/", 1)[-1] for p, _, _ in worker_routes("/") if p.startswith("/codefy/api/workers/")
              and "(?P<" not in p}
    assert beside == set(ROUTE_NAMES)
    assert beside <= RESERVED_WORKER_NAMES and RESERVED_NAMES == RESERVED_WORKER_NAMES


@pytest.mark.parametrize("name", sorted(RESERVED_WORKER_NAMES))
def test_a_reserved_name_is_refused_by_the_handshake_the_queue_and_the_limits(name):
    assert name_problem(name) == (f"worker name {name!r} is reserved "
                                  "(any, enroll, enrollments, local, pool)")
    with pytest.raises(ValueError, match="not a worker name"):
        WorkerOffer(name=name)
    overrides, notices = parse_concurrency_overrides(f"{name}/cuda:0=2")
    if name == "local":  # `local/<device>` is this server's own slot
        assert overrides == {"cuda:0": 2}
    else:
        assert overrides == {} and len(notices) == 1
