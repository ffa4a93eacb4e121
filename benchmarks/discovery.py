"""Server discovery benchmark: how long a command takes to find the codefy server it talks to.

It starts its own headless server (`codefy start`) on a free port, in a temporary data dir and an
isolated Jupyter runtime dir, and always stops it. Every figure is taken in fresh processes, as a
command runs (`--repeat` times each; median and max):

  - `codefy_start`: `discover()` with the server recorded in the data dir's server.json (the usual
    case: read the file, probe the server);
  - `jupyter_server`: `discover()` with no `codefy start` recorded for the data dir, so the server is
    found through its `jpserver-<pid>.json` in the runtime dir (as a JupyterLab would be);
  - `two_servers`: as `codefy_start`, with a second server running whose jpserver file is probed
    too, so it can be named beside the one picked;
  - `kernel`: `discover()` inside a real ipykernel that the second server started (the first
    lookup of a notebook: which server runs this kernel, through `api/kernels` of each candidate);
  - `import_ms`: importing the discovery module (the client package: tornado's HTTP client);
  - `list_running_servers_ms`: what the previous discovery paid first for a Jupyter server: import
    jupyter_server and call its `list_running_servers()`;
  - `runs_ls_ms`: a whole `codefy runs ls` (interpreter start, imports, discovery, one request).

Target: `discover()` ≤ 200 ms (median) whenever a server is found.

    python benchmarks/discovery.py [--repeat 15] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import codefy, free_port, publish

TARGET_MS = 200.0

TIMED_DISCOVERY = """
import json, time
t0 = time.perf_counter()
from codefy_jupyter.client.discovery import discover
t1 = time.perf_counter()
found = discover()
t2 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "discover_ms": (t2 - t1) * 1000, "url": found.url,
                  "source": found.source, "others": len(found.others)}))
"""

IN_KERNEL = """
import json, time
from codefy_jupyter.client.discovery import discover
t0 = time.perf_counter()
found = discover()
print(json.dumps({"discover_ms": (time.perf_counter() - t0) * 1000, "source": found.source}))
"""

TIMED_LISTING = """
import json, time
t0 = time.perf_counter()
from jupyter_server.serverapp import list_running_servers
servers = list(list_running_servers())
print(json.dumps({"ms": (time.perf_counter() - t0) * 1000, "servers": len(servers)}))
"""


def start(env: dict[str, str], data_dir: Path) -> None:
    proc = codefy(env, "start", "--data-dir", str(data_dir), "--port", str(free_port()))
    if proc.returncode != 0:
        raise SystemExit(f"codefy start failed: {proc.stderr}")


def python(env: dict[str, str], code: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def discovery(env: dict[str, str], repeat: int, expect_source: str) -> dict[str, Any]:
    runs = [python(env, TIMED_DISCOVERY) for _ in range(repeat)]
    assert all(r["source"] == expect_source for r in runs), runs
    return {"discover_ms": summary([r["discover_ms"] for r in runs]),
            "import_ms": summary([r["import_ms"] for r in runs]), "others_named": runs[-1]["others"]}


def in_kernel(state: dict[str, Any], runtime_dir: Path, repeat: int) -> dict[str, Any]:
    """`discover()` timed in a fresh kernel of the server, `repeat` kernels one after another."""
    import urllib.request

    from jupyter_client import BlockingKernelClient

    def call(method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(state["url"] + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Authorization": f"token {state['token']}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return json.loads(raw) if raw else None

    times = []
    for _ in range(repeat):
        kernel = call("POST", "api/kernels", {"name": "python3"})
        client = BlockingKernelClient(connection_file=str(runtime_dir / f"kernel-{kernel['id']}.json"))
        client.load_connection_file()
        client.start_channels()
        printed: list[str] = []
        try:
            client.wait_for_ready(timeout=60)
            client.execute_interactive(IN_KERNEL, timeout=60, output_hook=lambda m: printed.append(
                m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
        finally:
            client.stop_channels()
            call("DELETE", f"api/kernels/{kernel['id']}")
        result = json.loads("".join(printed))
        assert result["source"] == "kernel", result
        times.append(result["discover_ms"])
    return {"discover_ms": summary(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="codefy-discovery-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_"))}
        env.update(JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_DATA_DIR=str(root / "data"),
                   JUPYTER_RUNTIME_DIR=str(root / "runtime"), JUPYTER_PLATFORM_DIRS="0")
        first, second = root / "first", root / "second"
        start(env, first)
        try:
            recorded = {**env, "CODEFY_DATA_DIR": str(first)}
            unrecorded = {**env, "CODEFY_DATA_DIR": str(root / "nothing-here")}
            results: dict[str, Any] = {
                "codefy_start": discovery(recorded, args.repeat, "codefy start"),
                "jupyter_server": discovery(unrecorded, args.repeat, "jupyter server"),
            }
            start(env, second)
            try:
                results["two_servers"] = discovery(recorded, args.repeat, "codefy start")
                state = json.loads((second / "server.json").read_text())
                results["kernel"] = in_kernel(state, root / "runtime", max(3, args.repeat // 3))
                listing = [python(env, TIMED_LISTING)["ms"] for _ in range(max(3, args.repeat // 3))]
                results["list_running_servers_ms"] = summary(listing)
                walls = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    proc = codefy(recorded, "runs", "ls")
                    walls.append((time.perf_counter() - t0) * 1000)
                    assert proc.returncode == 0, proc.stderr
                results["runs_ls_ms"] = summary(walls)
            finally:
                codefy(env, "stop", "--data-dir", str(second))
        finally:
            codefy(env, "stop", "--data-dir", str(first))
    worst = max(results[k]["discover_ms"]["median"] for k in ("codefy_start", "jupyter_server", "two_servers", "kernel"))
    publish(args.out, began, repeat=args.repeat, discovery=results,
            target={"discover_median_ms_at_most": TARGET_MS, "worst_median_ms": worst, "met": worst <= TARGET_MS})


if __name__ == "__main__":
    main()
