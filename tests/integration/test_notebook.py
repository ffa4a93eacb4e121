"""kernels/example.ipynb executed by nbclient in a real ipykernel against a real jupyter-server with
the extension: `%codefy run` to completion, the client's metrics, the builder, no error output.

The kernel finds the server through CODEFY_URL / CODEFY_TOKEN in its environment, as a kernel of
any other server would; the notebook is awaited on the server's own event loop."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from codefy_jupyter.client import AsyncClient, ServerInfo

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).parents[2] / "kernels" / "example.ipynb"


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def outputs_text(cell: dict) -> str:
    text = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            text.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            text.append(out["data"].get("text/plain", "") + out["data"].get("text/markdown", ""))
        elif out["output_type"] == "error":
            text.append(f"{out['ename']}: {out['evalue']}")
    return "".join(text)


async def test_the_example_notebook_runs_the_example_graph_to_completion(jp_serverapp, jp_base_url,
                                                                        http_server_port, http_server, tmp_path):
    url = f"http://localhost:{http_server_port[-1]}{jp_base_url}"
    token = jp_serverapp.identity_provider.token
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEFY_")}
    env.update(CODEFY_URL=url, CODEFY_TOKEN=token, IPYTHONDIR=str(tmp_path / "ipython"),
               MPLBACKEND="agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=90, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    # The kernel's environment: how a kernel of another server would be pointed at this one.
    await client.async_execute(env=env)

    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert not any(o["output_type"] == "error" for o in cell.get("outputs", [])), outputs_text(cell)
        assert "Traceback" not in outputs_text(cell) and "UsageError" not in outputs_text(cell)
    submit = next(c for c in code if "%codefy run ../examples/train_mlp.json" in c.source)
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in submit.outputs)
    assert "'succeeded'" in outputs_text(next(c for c in code if "client.wait(" in c.source))
    assert "accuracy:" in outputs_text(next(c for c in code if "matplotlib" in c.source))

    api = AsyncClient(server=ServerInfo(url, token, "arguments"))
    try:
        runs = {r["name"]: r for r in (await api.list())["runs"]}
        assert set(runs) == {"notebook example", "lr 0.01, 5 epochs"}
        assert all(r["status"] == "succeeded" for r in runs.values())
        names = {p["name"] for p in await api.metrics(runs["notebook example"]["id"])}
        assert {"train_loss", "val_loss", "val_accuracy", "accuracy"} <= names
    finally:
        await api.close()
