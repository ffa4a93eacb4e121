"""codefy-jupyter: a run queue for ML node graphs in Jupyter."""

from ._version import __version__

__all__ = ["__version__"]
