"""codefy-jupyter: a run queue for ML node graphs in Jupyter."""

from ._version import __version__

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict]:
    from .server.app import CodefyApp

    return [{"module": "codefy_jupyter", "app": CodefyApp}]
