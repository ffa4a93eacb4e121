"""The `codefy` command (`codefy = "codefy_jupyter.cli:main"`; also `python -m codefy_jupyter.cli`).

Modules: main (the parser and the dispatch), exec (`codefy exec`: a graph in this process), run
(`codefy run`, `codefy runs watch`: submit and follow live), runs (`codefy runs ls|show|...`), agent
(`codefy agent start|stop`: the entry of the worker agent in `agent/`), kernel_setup (`codefy
kernel-setup`), terminal (the live view), args (exit codes), output (printing shared by the
subcommands), servers (how long a watcher retries a server). The argument types, the server
arguments and `codefy run`'s flags are the client's (`client/flags.py`): the magics take the same.
"""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
