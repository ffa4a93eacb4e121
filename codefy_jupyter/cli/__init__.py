"""The `codefy` command (`codefy = "codefy_jupyter.cli:main"`; also `python -m codefy_jupyter.cli`)."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
