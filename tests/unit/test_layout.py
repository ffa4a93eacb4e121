"""DESIGN.md's dependency rules, held against the import graph read from the code (every import,
lazy ones inside functions included; only `if TYPE_CHECKING:` blocks are left out, since they never
run). A newcomer who breaks a rule learns it here, with the file and the import that broke it."""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PKG = "codefy_jupyter"
STDLIB = frozenset(sys.stdlib_module_names)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node except what sits under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


@lru_cache(maxsize=None)
def import_graph() -> dict[str, set[str]]:
    """module -> the modules it imports (ours resolved to the deepest module that exists; others by
    their top-level name)."""
    ours = {_module_name(p): p for p in (ROOT / PKG).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in ours.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import submodule` imports the submodule
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in ours else mod for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] != PKG:
                    found.add(target.split(".")[0])
                    continue
                while target not in ours and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    found.add(target)
        graph[name] = found
    return graph


def _in(module: str, room: str) -> bool:
    return module == f"{PKG}.{room}" or module.startswith(f"{PKG}.{room}.")


def _ours(graph_targets: set[str]) -> set[str]:
    return {t for t in graph_targets if t.startswith(PKG + ".") or t == PKG}


def violations(room: str, allowed_rooms: tuple[str, ...], third_party: frozenset[str] | None = None,
               exceptions: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Imports from modules of `room` that reach outside `allowed_rooms` (ours) or, when
    `third_party` is given, outside the standard library and those packages. `exceptions`: for one
    module, more rooms or packages it may import."""
    found = []
    for module, targets in sorted(import_graph().items()):
        if not _in(module, room):
            continue
        extra = (exceptions or {}).get(module, ())
        for target in sorted(targets):
            if target.startswith(PKG):
                if target != PKG and not any(_in(target, r) for r in (*allowed_rooms, *extra)):
                    found.append(f"{module} imports {target}")
            elif third_party is not None and target not in STDLIB and target not in third_party \
                    and target not in extra:
                found.append(f"{module} imports {target}")
    return found


def test_the_engine_imports_nothing_of_ours_but_itself():
    assert violations("engine", ("engine", "_version")) == []


def test_wire_is_pure_and_imports_only_the_standard_library():
    # jupyter_core only to find the Jupyter data dir (lazily, with a fallback when it is missing).
    assert violations("wire", ("wire",), third_party=frozenset(),
                      exceptions={f"{PKG}.wire.local_server": ("jupyter_core",)}) == []


def test_core_imports_neither_tornado_nor_jupyter_server_nor_the_outer_rooms():
    # boto3 (the `s3` extra) only for the S3 backend's bucket, imported when S3 is on; psycopg
    # (the `postgresql` extra) only by the store's PostgreSQL backend, when store_url names one.
    assert violations("core", ("core", "wire", "engine", "_version"),
                      third_party=frozenset({"numpy", "psutil", "pynvml", "yaml", "torch"}),
                      exceptions={f"{PKG}.core.storage.s3": ("boto3", "botocore"),
                                  f"{PKG}.core.store.postgres": ("psycopg",)}) == []


def test_the_agent_imports_wire_and_only_its_run_child_imports_the_engine():
    # The run child (and the warm parent it forks from, and the catalog it reports) runs graphs.
    child_side = {f"{PKG}.agent.{m}": ("engine",) for m in ("child", "warm", "catalog", "ddp", "output_reader")}
    assert violations("agent", ("agent", "wire", "_version"), exceptions=child_side) == []


def test_the_client_imports_only_wire():
    # tornado for HTTP; jupyter_core (the runtime dir) and ipykernel (the kernel's own server) only
    # in discovery, lazily.
    assert violations("client", ("client", "wire", "_version"),
                      third_party=frozenset({"tornado"}),
                      exceptions={f"{PKG}.client.discovery": ("jupyter_core", "ipykernel")}) == []


def test_the_kernel_side_stands_on_the_client_not_the_control_plane_nor_the_cli():
    # The magics take `codefy run`'s own flags from the client (client/flags.py), as the CLI does.
    assert violations("kernel", ("kernel", "client", "wire", "_version")) == []


def test_the_cli_stands_on_the_client_not_the_kernel_side():
    # Three commands are more than clients: `codefy agent` is the worker agent's entry (with the
    # agent folder's files, which `codefy agent ssh` shares), `codefy exec` runs a graph in this
    # process, and `codefy start/stop` start and stop a control plane.
    assert violations("cli", ("cli", "client", "wire", "_version"),
                      exceptions={f"{PKG}.cli.agent": ("agent",), f"{PKG}.cli.agent_state": ("agent",),
                                  f"{PKG}.cli.exec": ("core", "engine"), f"{PKG}.cli.main": ("server",)}) == []


def test_the_kernel_side_and_the_cli_do_not_import_each_other():
    graph = import_graph()
    crossing = [f"{m} imports {t}" for m, targets in sorted(graph.items()) for t in sorted(targets)
                if (_in(m, "kernel") and _in(t, "cli")) or (_in(m, "cli") and _in(t, "kernel"))]
    assert crossing == []


def _private_names_taken() -> list[tuple[str, str, str]]:
    """(importer, module, name) for every `from module import _name` between two of our modules."""
    ours = {_module_name(p): p for p in (ROOT / PKG).rglob("*.py")}
    found = []
    for name, path in ours.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and mod != name:
                    found.append((name, mod, alias.name))
    return found


def test_the_cli_and_the_kernel_side_share_only_public_names():
    # Helpers one CLI module shares with another are public; the CLI and the kernel side use the
    # client's public API (inside the client, one spec module may share a helper with another).
    taken = [f"{importer} takes {module}.{name}" for importer, module, name in _private_names_taken()
             if _in(module, "cli") or (_in(module, "client") and not _in(importer, "client"))]
    assert taken == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_there_are_no_import_circles():
    circles = _circles({m: _ours(t) for m, t in import_graph().items()})
    assert circles == [], "\n".join(" <-> ".join(c) for c in circles)


def _room(module: str) -> str:
    """The room (`codefy_jupyter.X`) a module of ours stands in."""
    return ".".join(module.split(".")[:2])


def test_there_are_no_circles_between_rooms():
    # Modules may stand in one order while their rooms still loop (cli -> kernel -> cli did).
    rooms: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        if module == PKG:  # the package's face hands names on lazily from every room
            continue
        room = _room(module)
        rooms.setdefault(room, set()).update(_room(t) for t in _ours(targets) if t != PKG and _room(t) != room)
    circles = _circles(rooms)
    assert circles == [], "\n".join(" <-> ".join(c) for c in circles)


MODULE_LINES_MAX = 600  # STYLE.md 13: small modules, one job each


def test_no_module_is_over_600_lines():
    # No exceptions: a module that grows past this is split along its jobs (engine/executor.py into
    # executor, execution, pick_classes, run_result; studies/coordinator.py into coordinator and
    # reconcile), keeping every public name importable where it was.
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
             for path in (ROOT / PKG).rglob("*.py")}
    over = sorted((n, p) for p, n in sizes.items() if n > MODULE_LINES_MAX)
    assert over == [], f"modules over {MODULE_LINES_MAX} lines (split each along its jobs):\n" + "\n".join(
        f"  {path}: {lines} lines" for lines, path in reversed(over))


# The rooms of core/, bottom up (DESIGN.md): the run contract (core/contract/, with config, errors,
# telemetry and devices beside it) that every room stands on, then the store, the pure scheduling,
# then runs, workers and storage, then the experiments. A room imports only its own floor or lower.
CORE_FLOORS: tuple[tuple[str, ...], ...] = (
    ("contract", "config", "errors", "telemetry", "devices"),
    ("store",),
    ("scheduling",),
    ("runs", "workers", "storage"),
    ("experiments",),
)
# On one floor only these: runs and workers meet through the contract (workers implements the
# worker side runs is handed where the server wires them), and both read the storage plan.
CORE_SIDEWAYS = frozenset({("runs", "storage"), ("workers", "storage")})


def _core_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "core" else None


def core_order_violations(graph: dict[str, set[str]]) -> list[str]:
    floor = {room: level for level, rooms in enumerate(CORE_FLOORS) for room in rooms}
    found = []
    for module, targets in sorted(graph.items()):
        here = _core_room(module)
        if here is None:
            continue
        for target in sorted(targets):
            there = _core_room(target)
            if there is None or there == here:
                continue
            if here not in floor or there not in floor:
                found.append(f"{module} imports {target}: core room {here if here not in floor else there} "
                             "has no floor in CORE_FLOORS")
            elif floor[there] > floor[here]:
                found.append(f"{module} imports {target}: {here} stands below {there}")
            elif floor[there] == floor[here] and (here, there) not in CORE_SIDEWAYS:
                found.append(f"{module} imports {target}: {here} and {there} share a floor and meet "
                             "through the contract")
    return found


def test_core_rooms_stand_in_one_order():
    found = core_order_violations(import_graph())
    assert found == [], "\n".join(found)


def test_the_core_order_check_sees_an_import_upward_and_sideways():
    made_up = {f"{PKG}.core.store.queries": {f"{PKG}.core.runs.state"},
               f"{PKG}.core.runs.run_service": {f"{PKG}.core.workers.worker_service", f"{PKG}.core.storage.plan"}}
    assert core_order_violations(made_up) == [
        f"{PKG}.core.runs.run_service imports {PKG}.core.workers.worker_service: runs and workers share a floor and meet "
        "through the contract",
        f"{PKG}.core.store.queries imports {PKG}.core.runs.state: store stands below runs"]


# Two modules of one name in different rooms are allowed only where the name is one concern seen
# from each room (each room's part of a run's provenance, each side's acks). The run service, the
# worker service, the sweep and study services, the three record kinds, the executors and the two
# kinds of frames were once `service.py`, `records.py`, `executor(s).py` and `frames.py` in
# neighbouring rooms; a newcomer opened the wrong one. A new shared name is added here with why.
SHARED_MODULE_NAMES: dict[str, str] = {
    "__init__": "every package",
    "provenance": "each room's part of one run's provenance (engine captures, wire carries, store keeps)",
    "errors": "each room's error types, under the one error root",
    "transfer": "the two ends of a file transfer (agent sends, storage receives)",
    "system_sampling": "system samples taken on an agent and on the control plane",
    "state": "runs/state.py re-exports the lifecycle; studies/state.py is a study's lifecycle",
    "s3": "the two ends of the S3 backend (agent client, control-plane storage)",
    "retention": "what each side keeps (agent run folders, control-plane runs)",
    "results": "a sweep's and a study's results, side by side in experiments/",
    "registry": "the engine's node registry and the worker registry (rooms far apart)",
    "recorded": "recorded outputs: the engine keeps them, the control plane serves them",
    "plan": "the storage plan and a study's next-step plan (rooms far apart)",
    "outputs": "worker run outputs: the agent's side and the control plane's",
    "execution": "the engine's Execution and the contract's executor interface",
    "event_log": "the event log's interface (contract) and its implementation (runs)",
    "devices": "device names (wire) and the control plane's inventory (core)",
    "acks": "the ack protocol (wire) and the control plane's acking (workers)",
}


def shared_module_names(paths) -> dict[str, list[str]]:
    rooms: dict[str, list[str]] = {}
    for path in paths:
        rooms.setdefault(Path(path).stem, []).append(Path(path).as_posix())
    return {name: sorted(found) for name, found in rooms.items() if len(found) > 1}


def test_a_module_name_means_one_thing():
    shared = shared_module_names(p.relative_to(ROOT) for p in (ROOT / PKG).rglob("*.py")
                                 if "labextension" not in p.parts)
    unexplained = {name: paths for name, paths in shared.items() if name not in SHARED_MODULE_NAMES}
    assert unexplained == {}, ("modules of one name in different rooms; give each a name that says "
                               f"what it is, or add the name to SHARED_MODULE_NAMES with why: {unexplained}")
    gone = sorted(set(SHARED_MODULE_NAMES) - set(shared))
    assert gone == [], f"SHARED_MODULE_NAMES lists names no longer shared: {gone}"


def test_the_shared_name_check_sees_a_second_service():
    assert shared_module_names(["core/runs/run_service.py", "core/workers/service.py",
                                "core/experiments/sweeps/service.py"]) == {
        "service": ["core/experiments/sweeps/service.py", "core/workers/service.py"]}
