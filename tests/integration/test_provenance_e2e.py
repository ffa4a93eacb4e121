"""Input provenance on a real control plane (jupyter-server with the extension, real SQLite): the
same CSV dataset and checkpoint read by a run in the control plane and by one on a real
`codefy agent start` over loopback give the same records in GET runs/{id}; without
options.provenance the run has none; a bad option is refused naming the field."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

from test_server_runs import call, wait_status
from test_workers_e2e import (  # noqa: F401 - fixtures
    agents, control, jp_server_config, server_token, until_connected,
)

from codefy_jupyter.engine import run_graph


def inputs_graph(tmp_path: Path) -> dict:
    """CSV -> MLP -> LoadModel of a checkpoint saved here first (same sizes: it loads)."""
    csv = tmp_path / "data.csv"
    csv.write_text("a,b,y\n" + "".join(f"{i},{i * 3 % 7},{i % 2}\n" for i in range(12)))
    weights = tmp_path / "weights.pt"
    nodes = [{"id": "csv", "type": "CSVDataset", "params": {"path": str(csv), "target_column": "y"}},
             {"id": "mlp", "type": "MLP", "params": {"hidden": 4}}]
    edges = [{"source": "csv", "source_port": "dataset", "target": "mlp", "target_port": "dataset"}]
    save = {"nodes": nodes + [{"id": "save", "type": "SaveModel", "params": {"filename": str(weights)}}],
            "edges": edges + [{"source": "mlp", "source_port": "model", "target": "save", "target_port": "model"}]}
    assert run_graph(save, data_dir=tmp_path / "prep").ok
    return {"nodes": nodes + [{"id": "load", "type": "LoadModel", "params": {"filename": str(weights)}}],
            "edges": edges + [{"source": "mlp", "source_port": "model", "target": "load", "target_port": "model"}]}


def expected(tmp_path: Path) -> list[dict]:
    def ident(name):
        file = (tmp_path / name).resolve()
        return {"path": str(file), "sha256": hashlib.sha256(file.read_bytes()).hexdigest(), "size": file.stat().st_size}
    return [{"node_id": "csv", "kind": "dataset", **ident("data.csv"), "revision": None, "rows": 12},
            {"node_id": "load", "kind": "model", **ident("weights.pt"), "revision": None, "rows": None}]


async def finished(jp_fetch, graph: dict, options: dict) -> dict:
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": options})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=180)
    assert done["status"] == "succeeded", done
    code, body = await call(jp_fetch, "api", "runs", run["id"])
    assert code == 200
    return body


async def test_local_and_worker_runs_record_the_same_inputs(jp_fetch, agents, tmp_path):
    graph = inputs_graph(tmp_path)
    local = await finished(jp_fetch, graph, {"provenance": True})
    assert local["inputs"] == expected(tmp_path)
    agent = agents()
    await until_connected(jp_fetch, agent)
    remote = await finished(jp_fetch, graph, {"provenance": True, "target": {"worker": "box"}})
    assert remote["inputs"] == local["inputs"]
    plain = await finished(jp_fetch, graph, {})
    assert "inputs" not in plain


async def cli(control: str, token: str, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "codefy_jupyter.cli", *args, "--url", control, "--token", token,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_codefy_run_provenance_and_runs_show(jp_fetch, control, server_token, tmp_path):
    graph_file = tmp_path / "g.json"
    graph_file.write_text(json.dumps(inputs_graph(tmp_path)))
    run = json.loads(await cli(control, server_token, "run", str(graph_file), "--provenance", "--json"))
    assert run["status"] == "succeeded" and run["options"]["provenance"] is True, run
    text = await cli(control, server_token, "runs", "show", run["id"])
    dataset, model = expected(tmp_path)
    assert f"{dataset['path']} sha256:{dataset['sha256'][:12]} ({dataset['size']} bytes, 12 rows)" in text, text
    assert f"{model['path']} sha256:{model['sha256'][:12]} ({model['size']} bytes)" in text, text


async def test_provenance_must_be_a_boolean(jp_fetch):
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": {"nodes": [], "edges": []}, "options": {"provenance": "yes"}})
    assert code == 422 and "options.provenance" in str(body), body
