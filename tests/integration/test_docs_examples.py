"""The documentation's code examples run as written.

A fenced block whose info string carries a test mark is an example (the mark is invisible on the
site and on GitHub: the first word picks the highlighting, the rest is ignored):

    ```sh test            a shell block, run with bash -e in the repository root
    ```python test        a Python block, run by this interpreter in the repository root
    ```sh test-server     ...against a real `codefy start` server (CODEFY_URL / CODEFY_TOKEN set)
    ```python test-server

Every block runs in a fresh process with this checkout's codefy_jupyter first on the path and
this interpreter's `codefy` first on PATH; a block fails on a non-zero exit. The server is one
headless `codefy start` for the whole module, on its own data dir and Jupyter dirs, stopped at the
end."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<fence>```+)(?P<lang>[a-z]+) (?P<mark>test|test-server)\s*\n(?P<body>.*?)^(?P=fence)\s*$",
                   re.MULTILINE | re.DOTALL)
LANGS = {"sh", "console", "python"}


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    lang: str
    server: bool
    body: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def examples() -> list[Example]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        if "_build" in path.parts:
            continue
        text = path.read_text()
        for m in FENCE.finditer(text):
            found.append(Example(str(path.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1, m["lang"],
                                 m["mark"] == "test-server", m["body"]))
    return found


EXAMPLES = examples()


def test_the_docs_have_examples_of_each_kind():
    kinds = {(e.lang, e.server) for e in EXAMPLES}
    assert {("sh", False), ("sh", True), ("python", False), ("python", True)} <= kinds, kinds
    assert all(e.lang in LANGS for e in EXAMPLES), [str(e) for e in EXAMPLES if e.lang not in LANGS]


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_", "JPY_"))}
    env.update(PYTHONPATH=str(ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               JUPYTER_CONFIG_DIR=str(tmp / "jupyter" / "config"), JUPYTER_DATA_DIR=str(tmp / "jupyter" / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp / "jupyter" / "runtime"), JUPYTER_PLATFORM_DIRS="0",
               CODEFY_DATA_DIR=str(tmp / "codefy"))
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("docs-server")
    env = base_env(tmp)
    started = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "start", "--port", str(free_port())],
                             cwd=tmp, env=env, capture_output=True, text=True, timeout=110)
    assert started.returncode == 0, started.stderr + started.stdout
    try:
        state = json.loads((tmp / "codefy" / "server.json").read_text())
        yield {**env, "CODEFY_URL": state["url"], "CODEFY_TOKEN": state["token"]}, tmp
    finally:
        subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "stop"], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=60)


def run(example: Example, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if example.lang == "python":
        cmd = [sys.executable, "-c", example.body]
    else:
        body = example.body
        if example.lang == "console":  # only the `$ ` lines are commands
            body = "\n".join(line[2:] for line in body.splitlines() if line.startswith("$ "))
        cmd = ["bash", "-e", "-o", "pipefail", "-c", body]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=100)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if not e.server], ids=str)
def test_offline_example_runs(example: Example, tmp_path: Path):
    done = run(example, base_env(tmp_path))
    assert done.returncode == 0, f"{example} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.server], ids=str)
def test_server_example_runs(example: Example, server):
    env, _ = server
    done = run(example, env)
    assert done.returncode == 0, f"{example} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
