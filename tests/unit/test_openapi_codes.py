"""openapi.yaml lists every status and error code each REST operation can answer, as the code
says (tests/unit/route_codes.py reads the raise sites and the call graph from each handler): an
operation's `x-codes` maps a status to its codes, `x-codes-every-route` (at the top) holds the
ones every route shares, and each of those statuses is among the operation's responses. A new
raise site, or a code the spec keeps after the code dropped it, fails here with the route and
the file:line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from tornado import web

import route_codes as rc
from codefy_jupyter.server.handlers import PATH_IDS
from codefy_jupyter.server.routes import route_table

SPEC = yaml.safe_load((Path(__file__).resolve().parents[2] / "codefy_jupyter/server/openapi.yaml").read_text())
METHODS = ("get", "post", "delete")

# Not entered by the walk: start-up, run once behind `ready()` (a failure there is answered as the
# 503 store_locked / store_unavailable / recovering that `ready` raises itself).
BOUNDARIES = frozenset({
    "codefy_jupyter.core.store.database.Store.open",
    "codefy_jupyter.core.runs.run_service.RunService.start",
    "codefy_jupyter.core.experiments.experiments_service.Experiments.start",
})

# jupyter-server's own refusals of a route behind its login (`@web.authenticated`, `@authorized`):
# no login, or an authorizer that says no. Rendered by request_body.error_shape.
LOGIN = {403: {"unauthenticated", "forbidden"}}

# Answered but not found by the walk. The recorded-outputs reads: the pending read's future gets
# these from the worker's connection (closed, or an answer it cannot read), not from a call under
# the handler.
EXTRA = {
    # The store's EnrollmentRefused codes (core/store/workers.py), re-raised by
    # core/workers/enrollment.py as 403 for a token bound elsewhere, else 401.
    ("post", "/workers/enroll"): {401: {"enrollment_unknown", "enrollment_used", "enrollment_expired"},
                                  403: {"enrollment_bound", "worker_name_taken"}},
    # The bucket's refusals (core/storage/s3.py S3Error), from the backend `s3_artifact` hands back
    # untyped (`tuple[Any, str]`), so the walk cannot follow `s3.open`.
    ("get", "/runs/{run_id}/artifacts/{artifact_id}/download"): {502: {"s3_unavailable"}},
    ("get", "/execution/outputs/{run_id}"): {503: {"worker_connection_closed", "worker_bad_answer"}},
    ("get", "/execution/outputs/{run_id}/{node_id}/{port}"): {503: {"worker_connection_closed",
                                                                   "worker_bad_answer"}},
}

# Reachable but never answered, with why.
NOT_ANSWERED = {
    # Sweeps and studies refuse options.lane interactive (400 lane_interactive) before any child
    # is submitted, so the interactive lane's busy refusals cannot come back.
    ("post", "/sweeps"): {503: {"interactive_busy", "session_busy"}},
    ("post", "/studies"): {503: {"interactive_busy", "session_busy"}},
}


def _spec_path(pattern: str) -> str:
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern.removeprefix("/codefy/api"))


def operations() -> list[tuple[str, str, type]]:
    out = []
    for pattern, handler, _ in route_table("/"):
        if "/ws/" in pattern or pattern.endswith("openapi.yaml"):
            continue
        for method in METHODS:
            if getattr(handler, method) is not getattr(web.RequestHandler, method):
                out.append((method, _spec_path(pattern), handler))
    return out


def _login_required(handler: type, method: str) -> bool:
    ix = rc.index()
    node = ix.funcs[ix.method(f"{handler.__module__}.{handler.__qualname__}", method)].node
    return any(ast.unparse(d) == "web.authenticated" for d in node.decorator_list)


def _resolves_path_ids(handler: type, path: str) -> bool:
    """Whether `api` makes the path's ids whole before the method runs (handlers.resolve_path_ids):
    the walk does not enter decorators, so it is walked as an entry of its own."""
    return getattr(handler, "resolves_ids", False) and any(f"{{{name}}}" in path for name in PATH_IDS)


def found(method: str, path: str, handler: type) -> dict[int, dict[str, set[str]]]:
    """status -> code -> where, what the code answers on this operation."""
    codes = rc.operation_codes(handler, method, BOUNDARIES)
    if _resolves_path_ids(handler, path):
        for status, by_code in rc.operation_codes(handler, "resolve_path_ids", BOUNDARIES).items():
            for name, where in by_code.items():
                codes.setdefault(status, {}).setdefault(name, set()).update(where)
    extra = dict(EXTRA.get((method, path), {}))
    if _login_required(handler, method):
        for status, names in LOGIN.items():
            extra[status] = extra.get(status, set()) | names
    for status, names in extra.items():
        for name in names:
            codes.setdefault(status, {}).setdefault(name, {"server/request_body.py error_shape, or EXTRA"})
    for status, names in NOT_ANSWERED.get((method, path), {}).items():
        for name in names:
            codes.get(status, {}).pop(name, None)
    return {s: c for s, c in codes.items() if c}


def documented(method: str, path: str) -> dict[int, set[str]]:
    """The spec's codes for one operation: its own `x-codes`, every route's, and the login's
    unless the operation says it needs no session (`security: []`)."""
    op = SPEC["paths"][path][method]
    tables = [SPEC["x-codes-every-route"], op.get("x-codes") or {}]
    if op.get("security") != []:
        tables.append(SPEC["x-codes-behind-login"])
    out: dict[int, set[str]] = {}
    for table in tables:
        for status, names in table.items():
            out.setdefault(int(status), set()).update(names)
    return out


OPS = operations()


def test_every_operation_is_walked():
    assert len(OPS) >= 33, [f"{m} {p}" for m, p, _ in OPS]


@pytest.mark.parametrize("method,path,handler", OPS, ids=[f"{m.upper()} {p}" for m, p, _ in OPS])
def test_the_spec_lists_the_codes_and_statuses_the_code_answers(method, path, handler):
    where = f"{method.upper()} {path}"
    op = SPEC["paths"][path][method]
    assert (op.get("security") == []) == (not _login_required(handler, method)), \
        f"{where}: security: [] in openapi.yaml exactly when the handler needs no login"
    code, spec = found(method, path, handler), documented(method, path)
    missing = sorted(f"{s} {c} ({sorted(code[s][c])[0]})" for s in code for c in code[s] if c not in spec.get(s, ()))
    stale = sorted(f"{s} {c}" for s in spec for c in spec[s] if c not in code.get(s, {}))
    assert not missing, f"{where}: answered, and not in openapi.yaml: {missing}"
    assert not stale, f"{where}: in openapi.yaml, and never answered: {stale}"
    responses = {int(s) for s in op["responses"]}
    assert set(spec) <= responses, f"{where}: no response for status {sorted(set(spec) - responses)}"
    refusals = {s for s in responses if s >= 400}
    assert refusals <= set(spec), f"{where}: response {sorted(refusals - set(spec))} that nothing answers"


def test_every_refusal_names_its_code_where_the_walk_can_read_it():
    """A code built at run time (a variable, a computed f-string) is a code this test cannot
    check against the spec: only jupyter-server's own HTTP errors are rendered that way."""
    known = {"codefy_jupyter.server.request_body.error_shape",  # jupyter-server's HTTP errors (LOGIN)
             "codefy_jupyter.core.workers.enrollment.Enrollment.enroll"}  # the store's codes (EXTRA)
    opaque = {f: sites for f, sites in rc.sites().opaque.items() if f not in known}
    assert not opaque, opaque


def test_the_walk_finds_what_the_issue_found_missing():
    """Issue 27: these 400s were answered and not in the spec; the walk must see them."""
    by_op = {(m, p): found(m, p, h) for m, p, h in OPS}
    assert "cursor_past_end" in by_op[("get", "/runs/{run_id}/events")][400]
    assert "memory_budget_local" in by_op[("post", "/runs")][400]
    assert "idempotency_key_mismatch" in by_op[("post", "/studies")][400]
    # and does not wander: a read of one run cannot answer a study's refusal
    assert set(by_op[("get", "/runs/{run_id}")]) == {400, 403, 404, 409, 413, 503, 507}
    # Issue 28: every reader by id takes a unique prefix and refuses an ambiguous one; a route
    # without an id in its path, or an agent's (it names its run whole), does not.
    assert "ambiguous_id" in by_op[("get", "/runs/{run_id}")][409]
    assert "ambiguous_id" in by_op[("post", "/studies/{study_id}/resume")][409]
    assert "ambiguous_id" not in by_op[("post", "/runs")].get(409, {})
    assert 409 not in by_op[("get", "/runs/{run_id}/inputs/{sha256}")]
