"""`%codefy` and `%%codefy`: the run queue from a notebook cell (`%load_ext codefy_jupyter`).

    %codefy run graph.json [flags of `codefy run`]   submit, then show the live run view
    %codefy run $graph / %codefy run {graph}         a graph dict or Graph from the namespace
    %%codefy run [flags]                             the cell holds the graph (JSON or YAML)
    %codefy show [ID]                                the live view of a run (the last one by default)
    %codefy runs [--status S]                        the runs table
    %codefy workers                                  the workers table
    %codefy queue GRAPH                              the Queue on… dialog for a graph
    %codefy sweep ID / %codefy study ID              the live view of a sweep / a study
    %codefy cancel ID

The magics are clients of the server like `codefy run`: a run belongs to the server, so a kernel
restart loses only the view, and `%codefy show ID` picks the run up again. Every refusal (no
server, a 400/422, an unknown id, a bad flag) is a UsageError that prints the server's message and
its field, not a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import display
from IPython.utils.text import DollarFormatter
from traitlets import TraitError

from ..client import errors
from ..client.client import Client, load_graph
from ..client.discovery import find_server
from ..client.errors import CodefyError
from ..client.flags import add_run_arguments, add_server_arguments, submit_options

# A whole argument that names a variable: `$graph` or `{graph}`.
_NAMED = re.compile(r"(?<!\S)(?:\$([A-Za-z_]\w*)|\{([A-Za-z_]\w*)\})(?!\S)")
_CELL = "<cell>"  # stands for the graph of a %%codefy run cell in the parsed arguments

USAGE = """\
%codefy run GRAPH [flags]   submit a graph (a JSON file, or $var / {var}: a dict or a Graph) and show
                            its live view; flags as `codefy run` (--name --device --target --devices
                            --seed --no-seed --deterministic --record-outputs --provenance --url --token ...);
                            --detach prints the id only; --wait (or --timeout S) also blocks the
                            cell until the run ends; --json also returns the run as a dict
                            (`run = %codefy run g.json --json`; the final run with --wait)
%%codefy run [flags]        the same, with the graph written in the cell as JSON or YAML
%codefy show [ID]           the live view of a run (default: the last one submitted here)
%codefy runs [--status S]   the runs table (S: the filter chip: running, queued, succeeded, failed, ...)
%codefy workers             the workers table
%codefy queue GRAPH         the Queue on... dialog for a graph
%codefy sweep ID            the live view of a sweep (SweepView)
%codefy study ID            the live view of a study (StudyView)
%codefy cancel ID           cancel a queued or running run"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports to the cell instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, end="")
        raise _Done


class _Done(Exception):
    """`-h` printed its help: the magic has nothing more to do."""


def _run_parser() -> argparse.ArgumentParser:
    """`codefy run`'s own flags (the client's), so the magic takes exactly the CLI's."""
    top = _Parser(prog="%codefy", add_help=False)
    sub = top.add_subparsers(dest="command")
    run = sub.add_parser("run", help="submit a graph to a codefy server and follow the run", description=(
        "Submit a graph to the codefy server and show the live run view. The run belongs to the server: "
        "a kernel restart loses only the view (%codefy show ID shows it again). GRAPH is a JSON file, or "
        "$var / {var} naming a graph dict or Graph; in %%codefy run the cell holds the graph (JSON or YAML)."))
    add_run_arguments(run)
    return top


def _own_parser() -> argparse.ArgumentParser:
    top = _Parser(prog="%codefy", add_help=False)
    sub = top.add_subparsers(dest="command")
    show = sub.add_parser("show", help="the live view of a run")
    show.add_argument("run_id", nargs="?", metavar="ID")
    runs = sub.add_parser("runs", help="the runs table")
    runs.add_argument("--status", help="the filter chip to start on: all, running, queued, succeeded, failed, "
                      "cancelled or interrupted")
    sub.add_parser("workers", help="the workers table")
    queue = sub.add_parser("queue", help="the Queue on... dialog for a graph")
    queue.add_argument("graph", help="graph JSON file, or $var / {var}")
    sweep = sub.add_parser("sweep", help="the live view of a sweep")
    sweep.add_argument("sweep_id", metavar="ID")
    study = sub.add_parser("study", help="the live view of a study")
    study.add_argument("study_id", metavar="ID")
    cancel = sub.add_parser("cancel", help="cancel a queued or running run")
    cancel.add_argument("run_id", metavar="ID")
    for parser in sub.choices.values():
        add_server_arguments(parser)
    return top


@magics_class
class CodefyMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._clients: dict[tuple[str, str], Client] = {}
        self._found: Any = None  # the server discovery found
        self.last_run_id: str | None = None
        self.last_view: Any = None  # the last RunView shown
        self.last_widget: Any = None  # the last table or dialog shown

    @no_var_expand  # `$graph` may name a dict, which must not be pasted into the line as text
    @line_cell_magic
    def codefy(self, line: str, cell: str | None = None) -> Any:
        """The run queue: `%codefy run graph.json`, `%codefy runs`, ... (`%codefy` alone for help)."""
        try:
            return self._dispatch(line, cell)
        except _Done:
            return None
        except CodefyError as err:
            if err.code == "unreachable":
                self._found = None  # the server may have moved: look for it again next time
            raise UsageError(describe(err)) from None

    # -- parsing ---------------------------------------------------------------------------------
    def _dispatch(self, line: str, cell: str | None) -> Any:
        graphs: dict[str, Any] = {}
        words = self._split(line, graphs)
        if not words or words[0] in ("-h", "--help", "help"):
            print(USAGE)
            return None
        command = words[0]
        if cell is not None and command != "run":
            raise UsageError(f"%%codefy takes only `run` (the cell holds its graph), got {command!r}")
        if command == "run":
            if cell is not None:
                words.insert(1, _CELL)
            args = _run_parser().parse_args(words)
            return self._run(args, self._graph(args.graph, graphs, cell))
        if command not in ("show", "runs", "workers", "queue", "cancel", "sweep", "study"):
            raise UsageError(f"%codefy: unknown command {command!r}\n{USAGE}")
        args = _own_parser().parse_args(words)
        if command == "show":
            return self._show(args)
        if command == "cancel":
            run = self._client(args).cancel(args.run_id)
            print(f"■ cancel requested for run {run['id']} (status {run['status']})")
            return None
        return self._widget(command, args, graphs)

    def _split(self, line: str, graphs: dict[str, Any]) -> list[str]:
        """The line's words, with `$x` / `{x}` naming a dict or Graph set aside in `graphs`, and
        every other `$x` / `{expr}` expanded the way IPython expands magic lines."""
        ns = self.shell.user_ns

        def set_aside(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name in ns and (isinstance(ns[name], dict) or hasattr(ns[name], "to_dict")):
                key = f"__codefy_graph_{len(graphs)}__"
                graphs[key] = (name, ns[name])
                return key
            return match.group(0)

        line = _NAMED.sub(set_aside, line)
        try:
            line = DollarFormatter().vformat(line, args=[], kwargs=ns)
        except Exception:  # noqa: BLE001 - like IPython: a line that cannot be expanded stays as written
            pass
        try:
            return shlex.split(line)
        except ValueError as err:
            raise UsageError(f"%codefy: {err} in {line!r}") from None

    def _graph(self, given: str, graphs: dict[str, Any], cell: str | None) -> tuple[dict[str, Any], str]:
        """The graph to submit and the name shown for it."""
        if given == _CELL:
            return parse_cell(cell or ""), "cell"
        if given in graphs:
            name, value = graphs[given]
            return load_graph(value), name
        return load_graph(Path(given).expanduser()), Path(given).name

    # -- commands --------------------------------------------------------------------------------
    def _client(self, args: argparse.Namespace) -> Client:
        """One client per server, kept for the kernel's life: views follow runs with it."""
        chosen = any(getattr(args, k, None) for k in ("url", "token", "host", "port"))
        if chosen or os.environ.get("CODEFY_URL"):  # cheap to read each time, and may change
            server = _server(args)
        else:  # discovery probes Jupyter servers over HTTP: once per kernel, not once per cell
            if self._found is None:
                self._found = _server(args)
                for line in self._found.describe():  # which server, and why: said once per kernel
                    print(line)
            server = self._found
        key = (",".join(server.urls), server.token)  # a leader and its standbys: one client follows them
        if key not in self._clients:
            self._clients[key] = Client(url=key[0], token=server.token)
        return self._clients[key]

    def _run(self, args: argparse.Namespace, graph: tuple[dict[str, Any], str]) -> Any:
        client = self._client(args)
        try:
            run = client.submit(graph[0], **submit_options(args))
        except CodefyError as err:
            if err.status is not None and err.status != 403:
                raise UsageError(f"the server refused the run: {describe(err)}") from None
            raise
        self.last_run_id = run["id"]
        if args.detach:
            if args.json:
                return run
            print(f"submitted run {run['id']} ({graph[1]}, {run['status']} on {run.get('queue_key')}); "
                  f"`%codefy show {run['id']}` shows it")
            return None
        view = self._display_view(run["id"], client)
        if not (args.wait or args.timeout):
            return run if args.json else None
        finished = wait_for(view, args.timeout)
        final = client.get(run["id"])
        if args.json:
            return final
        if finished:
            print(summary(final))
        return None

    def _show(self, args: argparse.Namespace) -> None:
        run_id = args.run_id or self.last_run_id
        if not run_id:
            raise UsageError("%codefy show: which run? Give its id (no run was submitted from this kernel yet)")
        client = self._client(args)
        # An unknown id is the server's 404 (an ambiguous prefix its 409), said here rather than in
        # the view; the view follows the whole id a prefix stands for.
        run_id = client.get(run_id)["id"]
        self._display_view(run_id, client)

    def _display_view(self, run_id: str, client: Client) -> Any:
        from .widgets import RunView

        self.last_view = RunView(run_id, client=client)
        display(self.last_view)
        return self.last_view

    def _widget(self, command: str, args: argparse.Namespace, graphs: dict[str, Any]) -> None:
        from . import widgets

        client = self._client(args)
        if command == "runs":
            table = widgets.RunsTable(client=client)
            if args.status:
                try:
                    table.filter = args.status
                except TraitError as err:
                    table.close()
                    raise UsageError(f"%codefy runs: --status: {err}") from None
            self.last_widget = table
        elif command == "workers":
            self.last_widget = widgets.WorkersTable(client=client)
        elif command == "sweep":
            # An unknown id is the server's 404 (an ambiguous prefix its 409), said here; the view
            # follows the whole id.
            sweep_id = client.get_sweep(args.sweep_id)["sweep_id"]
            self.last_widget = widgets.SweepView(sweep_id, client=client)
        elif command == "study":
            study_id = client.get_study(args.study_id, view="summary")["id"]
            self.last_widget = widgets.StudyView(study_id, client=client)
        else:  # a file goes as its path, so the dialog names it
            given = args.graph
            graph = graphs[given][1] if given in graphs else str(Path(given).expanduser())
            self.last_widget = widgets.QueueDialog(graph, client=client)
        display(self.last_widget)


def _server(args: argparse.Namespace) -> Any:
    """The server the --url/--token/--host/--port of the line name, else the one discovery finds."""
    return find_server(url=args.url, token=args.token, host=args.host, port=args.port)


# -- pure helpers ----------------------------------------------------------------------------------


def describe(err: CodefyError) -> str:
    """The server's message, its field and status, as one short text (no traceback)."""
    return errors.describe(err)


def parse_cell(text: str) -> dict[str, Any]:
    """A %%codefy run cell: a graph object as JSON, else YAML."""
    if not text.strip():
        raise UsageError("%%codefy run: the cell is empty; write the graph in it as JSON or YAML")
    try:
        graph = json.loads(text)
    except json.JSONDecodeError as json_err:
        try:
            import yaml
        except ImportError:
            raise UsageError(f"%%codefy run: the cell is not valid JSON ({json_err.msg} at line {json_err.lineno} "
                             f"column {json_err.colno}), and YAML needs PyYAML (pip install pyyaml)") from None
        try:
            graph = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
            raise UsageError(f"%%codefy run: the cell is neither JSON nor YAML: "
                             f"{getattr(err, 'problem', None) or err}{where}") from None
    if not isinstance(graph, dict):
        raise UsageError(f"%%codefy run: the cell must hold a graph object (nodes, edges, settings), "
                         f"got {type(graph).__name__}")
    return graph


def wait_for(view: Any, timeout: float | None) -> bool:
    """Block until the view has followed its run to the end, or `timeout` seconds, or Ctrl+C;
    whether it got to the end. The run keeps going on the server either way."""
    try:
        view.wait(timeout)
        return True
    except TimeoutError:
        print(f"⧗ stopped waiting after {timeout:g} s: run {view.run_id} keeps going on the server; "
              "the view still follows it")
    except KeyboardInterrupt:
        print(f"■ stopped waiting: run {view.run_id} keeps going on the server; the view still follows it")
    return False


def summary(run: dict[str, Any]) -> str:
    status = run["status"]
    if status == "succeeded":
        return f"✓ run {run['id']} succeeded"
    error = run.get("error") or {}
    where = f" at node {error['node_id']}" if error.get("node_id") else ""
    message = f": {error['message']}" if error.get("message") else ""
    return f"{'✗' if status == 'failed' else '■'} run {run['id']} {status}{where}{message}"


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(CodefyMagics)
