"""Node registry: definitions, typed params, catalog hashes, entry-point packs, public exports."""

from __future__ import annotations

import pytest

import codefy_jupyter.engine as engine
from codefy_jupyter.engine import NodeRegistry, RegistryError, default_registry, lazy, param
from codefy_jupyter.engine.registry import ENTRY_POINT_GROUP


def test_builtin_packs_register_through_the_entry_point_group():
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert {"basic", "structure", "data", "models", "training", "evaluation"} <= names
    reg = NodeRegistry()
    loaded = reg.load_entry_points()
    assert set(loaded) >= names
    types = set(default_registry().types())
    expected = {"Int", "Float", "Add", "Scale", "Switch", "Sleep", "List", "Mean", "Subgraph", "Preset", "Map",
                "SyntheticClassification", "SyntheticRegression", "CSVDataset", "TrainTestSplit", "KFoldSplit",
                "DataLoader", "MLP", "Optimizer", "Loss", "SaveModel", "LoadModel", "TrainingLoop",
                "ClassificationMetrics", "RegressionMetrics"}
    assert expected <= types


def test_a_pack_may_be_a_register_function():
    reg = NodeRegistry()

    def register(r: NodeRegistry) -> None:
        @r.node("FromPack", outputs={"v": "int"})
        def from_pack(ctx):
            return {"v": 1}

    register(reg)
    assert reg.types() == ["FromPack"]


def test_definition_is_json_with_ports_params_and_flags():
    definition = default_registry().get("Scale").definition()
    assert definition == {
        "type": "Scale", "category": "basic", "description": "y = x * factor",
        "inputs": {"x": {"type": "float"}}, "outputs": {"y": "float"},
        "params": {"factor": {"type": "float", "default": 1.0, "min": 0, "max": 100}},
        "output_node": False, "async": False, "cacheable": True, "dynamic_ports": False,
    }
    switch = default_registry().get("Switch").definition()
    assert switch["inputs"]["on_true"] == {"type": "any", "lazy": True, "optional": True}
    assert default_registry().get("Sleep").definition()["async"] is True


def test_catalog_hashes_each_definition_and_the_whole_set():
    reg = NodeRegistry()

    @reg.node("A", outputs={"v": "int"}, params={"n": param.int(1, min=0)})
    def a(ctx, n):
        return {"v": n}

    first = reg.catalog()
    assert set(first["types"]) == {"A"} and len(first["types"]["A"]) == 64 and len(first["hash"]) == 64
    other = NodeRegistry()

    @other.node("A", outputs={"v": "int"}, params={"n": param.int(1, min=0)})
    def a2(ctx, n):
        return {"v": n}

    assert other.catalog() == first  # same definition, same hash: code location does not matter
    changed = NodeRegistry()

    @changed.node("A", outputs={"v": "int"}, params={"n": param.int(1, min=1)})
    def a3(ctx, n):
        return {"v": n}

    assert changed.catalog()["types"]["A"] != first["types"]["A"]
    assert changed.catalog()["hash"] != first["hash"]


def test_secret_defaults_never_reach_the_definition():
    reg = NodeRegistry()

    @reg.node("Api", outputs={}, params={"token": param.secret("s3cr3t")})
    def api(ctx, token):
        return {}

    assert reg.get("Api").definition()["params"]["token"] == {"type": "secret", "default": ""}


@pytest.mark.parametrize("kwargs,needle", [
    ({"params": {"x": param.int(0)}, "inputs": {"x": "int"}}, "both inputs and params"),
    ({"params": {"s": param.select("a", [])}}, "has no options"),
    ({"params": {"n": param.int(5, max=3)}}, "default of param 'n'"),
])
def test_bad_definitions_are_refused(kwargs, needle):
    reg = NodeRegistry()
    with pytest.raises(RegistryError, match=needle):
        reg.node("Bad", **kwargs)(lambda ctx, **kw: {})


def test_type_names_must_not_contain_a_slash():
    with pytest.raises(RegistryError, match="no '/'"):
        NodeRegistry().node("a/b")(lambda ctx: {})


def test_registering_another_function_under_a_taken_name_is_refused():
    reg = NodeRegistry()

    def first(ctx):
        return {}

    def second(ctx):
        return {}

    reg.node("X")(first)
    reg.node("X")(first)  # the same function again (a module re-imported) is fine
    with pytest.raises(RegistryError, match="already registered by .*first"):
        reg.node("X")(second)


def test_check_lazy_status_needs_lazy_inputs():
    reg = NodeRegistry()
    plain = reg.node("Plain", inputs={"x": "int"})(lambda ctx, x: {})
    with pytest.raises(RegistryError, match="no lazy inputs"):
        plain.check_lazy_status(lambda ctx, **kw: [])
    lazy_node = reg.node("Lazy", inputs={"x": lazy("int")})(lambda ctx, x: {})
    lazy_node.check_lazy_status(lambda ctx, **kw: ["x"])
    assert lazy_node.lazy_check is not None


@pytest.mark.parametrize("spec,value,ok", [
    (param.int(0), 3, True), (param.int(0), 3.0, True), (param.int(0), "3", False), (param.int(0), False, False),
    (param.float(0.0), 2, True), (param.float(0.0), float("nan"), False), (param.float(0.0), "x", False),
    (param.bool(), True, True), (param.bool(), 1, False),
    (param.string(), "x", True), (param.string(), 1, False),
    (param.select("a", ["a", "b"]), "b", True), (param.select("a", ["a", "b"]), "c", False),
    (param.secret(), "k", True), (param.json(), {"a": [1]}, True), (param.json(), {1, 2}, False),
])
def test_param_type_checks(spec, value, ok):
    _, reason = spec.check(value)
    assert (reason is None) is ok


def test_public_exports_are_exactly_the_curated_surface():
    assert sorted(engine.__all__) == sorted([
        "CancelToken", "EngineCallbacks", "EngineError", "ExecutionContext", "Expand", "Graph", "GraphError",
        "LRUCache", "NoCache", "NodeDef", "NodeFailure", "NodeRegistry", "OutputCache", "ParamSpec", "PortSpec",
        "PresetLibrary", "Problem", "RAMPressureCache", "RegistryError", "RunCancelled", "RunResult",
        "SessionCache", "default_registry", "execute_graph", "lazy", "node", "optional", "param",
        "parse_graph", "run_graph", "validate_graph",
    ])
    for name in engine.__all__:
        assert getattr(engine, name) is not None


def test_engine_imports_nothing_from_the_rest_of_the_package():
    import subprocess
    import sys

    code = ("import sys, codefy_jupyter.engine as e; e.default_registry();"
            "bad=[m for m in sys.modules if m.startswith(('codefy_jupyter.core','codefy_jupyter.server',"
            "'codefy_jupyter.agent','codefy_jupyter.kernel','codefy_jupyter.client','torch'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
