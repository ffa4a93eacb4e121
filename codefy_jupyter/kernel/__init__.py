"""Kernel side: the Python client (and, next, `%codefy` magics and notebook widgets). It reaches
the control plane over HTTP only, like any other client."""

from .client import AsyncClient, Client, load_graph
from .discovery import ServerInfo, discover
from .errors import CodefyError
from .graph_builder import Graph, NodeRef, Port

__all__ = ["AsyncClient", "Client", "CodefyError", "Graph", "NodeRef", "Port", "ServerInfo", "discover", "load_graph"]
