"""codefy-jupyter: a run queue for ML node graphs in Jupyter."""

from ._version import __version__

__all__ = ["AsyncClient", "Client", "CodefyError", "Graph", "__version__"]


def __getattr__(name: str):  # noqa: ANN202 - lazy: `import codefy_jupyter` must stay light (no tornado)
    if name in ("AsyncClient", "Client", "CodefyError"):
        from . import client

        return getattr(client, name)
    if name == "Graph":
        from .client.graph_builder import Graph

        return Graph
    raise AttributeError(f"module 'codefy_jupyter' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:  # noqa: ANN001 - `%load_ext codefy_jupyter`
    from .kernel.magics import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points() -> list[dict]:
    from .server.app import CodefyApp

    return [{"module": "codefy_jupyter", "app": CodefyApp}]


def _jupyter_labextension_paths() -> list[dict]:
    # The prebuilt lab extension (labextension/, built into codefy_jupyter/labextension); the
    # wheel also installs it to share/jupyter/labextensions/codefy-jupyter.
    return [{"src": "labextension", "dest": "codefy-jupyter"}]
