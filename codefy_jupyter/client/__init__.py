"""The Python client: `Client`/`AsyncClient`, server discovery, the graph builder, sweep and study
specs, and the flag parsers `codefy run` and `%codefy run` share. It reaches the control plane over
HTTP only, like any other client; `kernel/` (magics, widgets) and `cli/` both stand on it."""

from .client import AsyncClient, Client, load_graph
from .discovery import ServerInfo, discover
from .errors import CodefyError
from .graph_builder import Graph, NodeRef, Port

__all__ = ["AsyncClient", "Client", "CodefyError", "Graph", "NodeRef", "Port", "ServerInfo", "discover", "load_graph"]
