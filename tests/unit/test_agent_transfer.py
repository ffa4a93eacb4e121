"""The agent's side of the transfer backend against a small real HTTP server on loopback: inputs
fetched by SHA-256 into the cache, a cached copy checked again (a damaged one fetched anew), a
download whose content does not match refused, outputs uploaded with interrupted checkpoints last."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from codefy_jupyter.agent.transfer import RunTransfer, TransferFailed, point_inputs, upload_order

CONTENT = b"a,b,y\n1,2,0\n3,4,1\n"
SHA = hashlib.sha256(CONTENT).hexdigest()


class Control:
    """The control plane's two routes, as far as the agent can tell."""

    def __init__(self) -> None:
        self.downloads = 0
        self.uploads: list[tuple[str, bytes, str]] = []
        self.serve = CONTENT
        control = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if not self.path.endswith(f"/codefy/api/runs/r1/inputs/{SHA}"):
                    self.send_response(404)
                    self.end_headers()
                    return
                control.downloads += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(control.serve)))
                self.end_headers()
                self.wfile.write(control.serve)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                path = parse_qs(urlsplit(self.path).query)["path"][0]
                control.uploads.append((path, body, self.headers["Authorization"]))
                self.send_response(201)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/base/"


@pytest.fixture
def control():
    c = Control()
    yield c
    c.server.shutdown()
    c.server.server_close()


INPUTS = [{"node_id": "csv", "param": "path", "sha256": SHA, "size": len(CONTENT), "name": "a.csv"}]


def test_inputs_come_once_into_the_cache_and_a_damaged_copy_comes_again(control, tmp_path):
    transfer = RunTransfer(control.url, "cfw_t", tmp_path / "cache")
    first = transfer.fetch_inputs("r1", INPUTS + INPUTS)  # the same input twice: fetched once
    assert control.downloads == 1 and first.downloaded == len(CONTENT) and first.cached == 0
    blob = Path(first.paths[0])
    assert blob.read_bytes() == CONTENT and first.paths[0] == first.paths[1]
    again = transfer.fetch_inputs("r1", INPUTS)
    assert control.downloads == 1 and again.downloaded == 0 and again.cached == 1
    blob.write_bytes(b"tampered")
    transfer.fetch_inputs("r1", INPUTS)
    assert control.downloads == 2 and blob.read_bytes() == CONTENT


def test_a_download_whose_content_does_not_match_its_hash_is_refused(control, tmp_path):
    control.serve = b"something else"
    with pytest.raises(TransferFailed, match="sha256"):
        RunTransfer(control.url, "cfw_t", tmp_path / "cache").fetch_inputs("r1", INPUTS)
    assert not any((tmp_path / "cache" / SHA).iterdir())  # nothing half-written is left to be trusted
    with pytest.raises(TransferFailed, match="bad sha256"):
        RunTransfer(control.url, "cfw_t", tmp_path / "cache").fetch_inputs("r1", [{"sha256": "../x"}])


def test_outputs_go_up_with_the_token_interrupted_checkpoints_last(control, tmp_path):
    folder = tmp_path / "data"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "train-epoch3-interrupted.pt").write_bytes(b"3")
    (folder / "checkpoints" / "train-epoch2.pt").write_bytes(b"2")
    (folder / "model.pt").write_bytes(b"m")
    (folder / "model.pt.partial").write_bytes(b"half")
    assert [p.name for p in upload_order(folder)][-1] == "train-epoch3-interrupted.pt"
    tokens = iter(["cfw_one", "cfw_two"])
    sent = RunTransfer(control.url, lambda: next(tokens, "cfw_two"), tmp_path / "cache").upload_outputs("r1", folder)
    assert [p for p, _ in sent] == ["checkpoints/train-epoch2.pt", "model.pt", "checkpoints/train-epoch3-interrupted.pt"]
    assert [(p, b) for p, b, _ in control.uploads] == [("checkpoints/train-epoch2.pt", b"2"), ("model.pt", b"m"),
                                                      ("checkpoints/train-epoch3-interrupted.pt", b"3")]
    assert control.uploads[0][2] == "token cfw_one"  # the token is read for each request (it may change)


def test_point_inputs_sets_each_listed_param():
    graph = {"nodes": [{"id": "csv", "type": "CSVDataset", "params": {"path": "/srv/uploads/a.csv"}}]}
    assert point_inputs(graph, INPUTS, ["/cache/x/blob"])["nodes"][0]["params"]["path"] == "/cache/x/blob"
