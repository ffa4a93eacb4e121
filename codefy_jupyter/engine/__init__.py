"""The graph engine: node registry, graph validation, dynamic topological scheduler, caches.

Public surface (other code and outside tests rely on it; `tests/unit/test_engine_exports.py` guards it).
"""

from .cache import LRUCache, NoCache, OutputCache, RAMPressureCache, SessionCache
from .context import CancelToken, EngineCallbacks, ExecutionContext
from .errors import EngineError, GraphError, NodeFailure, Problem, RegistryError, RunCancelled
from .executor import execute_graph, run_graph
from .expansion import Expand
from .graph import Graph, parse_graph, validate_graph
from .presets import PresetLibrary
from .registry import NodeDef, NodeRegistry, ParamSpec, PortSpec, default_registry, lazy, node, optional, param
from .run_result import RunResult

__all__ = [
    "CancelToken", "EngineCallbacks", "EngineError", "ExecutionContext", "Expand", "Graph", "GraphError",
    "LRUCache", "NoCache", "NodeDef", "NodeFailure", "NodeRegistry", "OutputCache", "ParamSpec", "PortSpec",
    "PresetLibrary", "Problem", "RAMPressureCache", "RegistryError", "RunCancelled", "RunResult", "SessionCache",
    "default_registry", "execute_graph", "lazy", "node", "optional", "param", "parse_graph", "run_graph",
    "validate_graph",
]
