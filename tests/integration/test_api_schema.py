"""Schemathesis against a real `codefy start` server and the openapi.yaml it serves, every check
on (`--checks all`: no server errors, responses that match the schema, schema-violating requests
refused, schema-valid ones accepted or refused as documented, 405 with Allow, ...), with bounded
examples and a fixed seed so the run is the same every time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_headless import Servers

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


@pytest.mark.timeout(600)
def test_the_api_conforms_to_its_served_openapi_description(servers, tmp_path):
    state = servers.start()
    st = Path(sys.executable).with_name("schemathesis")
    proc = subprocess.run(
        [str(st), "--config-file", str(CONFIG), "--no-color", "run", f"{state['url']}codefy/api/openapi.yaml",
         "--checks", "all", "--max-examples", "40", "--seed", "20261", "--workers", "1", "--no-shrink",
         "--request-timeout", "30", "-H", f"Authorization: token {state['token']}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=280)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-20000:]
    import yaml

    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "codefy_jupyter" / "server" / "openapi.yaml").read_text())
    operations = sum(1 for item in spec["paths"].values() for method in item
                     if method in ("get", "post", "put", "patch", "delete"))
    assert f"{operations} selected / {operations} total" in report, report[-4000:]
    assert "failures" not in report.splitlines()[-1], report[-4000:]
