"""What the agent says about itself and how it finds its token: offered devices (NVML restricted by
its own CUDA_VISIBLE_DEVICES, a declared inventory), the socket URL, enrollment tokens, the 0600
credentials file, and the CLI's refusals. The agent process never imports torch."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest

from codefy_jupyter.agent import credentials as cr
from codefy_jupyter.agent.dialing import Backoff, Fatal, socket_url, worth_another_dial
from codefy_jupyter.agent.identity import Inventory, restrict_to_visible
from codefy_jupyter.cli import main

CARDS = [{"index": i, "name": f"GPU {i}", "uuid": f"GPU-{i}{i}{i}{i}-aaaa", "total_memory": 8 << 30, "free_memory": 1}
         for i in range(4)]


def test_all_cards_when_the_agent_has_no_visible_list():
    offered = restrict_to_visible(CARDS, None)
    assert [(d.device, d.visible_id, d.uuid) for d in offered] == [
        (f"cuda:{i}", str(i), f"GPU-{i}{i}{i}{i}-aaaa") for i in range(4)]


def test_the_agents_own_visible_list_renumbers_its_cards():
    offered = restrict_to_visible(CARDS, "2,GPU-0000,MIG-abc")
    assert [(d.device, d.visible_id, d.uuid) for d in offered] == [
        ("cuda:0", "2", "GPU-2222-aaaa"), ("cuda:1", "GPU-0000", "GPU-0000-aaaa"), ("cuda:2", "MIG-abc", "MIG-abc")]
    assert restrict_to_visible(CARDS, "") == []
    assert [d.device for d in restrict_to_visible(CARDS, "1,9,2")] == ["cuda:0"]  # CUDA stops at an invalid index


def test_a_declared_inventory_is_offered_as_declared(tmp_path):
    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"devices": [{"key": "cuda", "name": "A", "uuid": "GPU-x", "memory_total_mib": 1024},
                                            {"key": "cuda:3"}]}))
    inv = Inventory.probe({"CODEFY_DEVICE_INVENTORY": str(path)})
    assert inv.declared and [d.device for d in inv.devices] == ["cpu", "cuda:0", "cuda:3"]
    assert inv.hello()[1] == {"device": "cuda:0", "name": "A", "uuid": "GPU-x", "total_memory": 1024 << 20}
    assert inv.heartbeat() == []


def test_socket_url():
    assert socket_url("http://127.0.0.1:8888/") == "ws://127.0.0.1:8888/codefy/ws/worker"
    assert socket_url("https://lab.example.org/user/ann") == "wss://lab.example.org/user/ann/codefy/ws/worker"
    with pytest.raises(Fatal, match="--control"):
        socket_url("lab.example.org:8888")


def test_backoff_doubles_to_a_cap_and_resets():
    b = Backoff(first=1, cap=4)
    delays = [b.next() for _ in range(5)]
    assert 0.75 <= delays[0] <= 1.25 and 3 <= delays[-1] <= 5
    b.reset()
    assert b.next() <= 1.25


def test_a_refused_token_is_fatal_unless_the_local_server_now_records_another():
    assert not worth_another_dial("t1", rereads=False, recorded=None)  # --token, a worker token: fixed
    assert not worth_another_dial("t1", rereads=True, recorded="t1")  # the server's own token, refused
    assert worth_another_dial("t1", rereads=True, recorded="t2")  # restarted with another token
    assert worth_another_dial("t1", rereads=True, recorded=None)  # restarting: not recorded yet


def test_enrollment_tokens_are_told_apart():
    assert cr.is_enrollment_token("abcdef.0123456789abcdef0123456789abcdef")
    assert not cr.is_enrollment_token("cfw_" + "x" * 43)
    assert not cr.is_enrollment_token("0f67bd492fad2f419bd19ec76c8ad26340610fc77197b902")


def test_the_stored_worker_token_is_private_and_reused(tmp_path):
    store = cr.CredentialStore(tmp_path)
    path = store.save(cr.Stored("http://h/", "box", "cfw_secret", "d1"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert cr.resolve_token("http://h", "box", None, store, None, env={}) == ("cfw_secret", f"stored in {path}")
    # A stored token for another control plane is not sent there.
    with pytest.raises(cr.CredentialError, match="no token for worker 'box'"):
        cr.resolve_token("http://other/", "box", None, store, None, env={})
    assert cr.resolve_token("http://other/", "box", None, store, None, env={"CODEFY_TOKEN": "t"})[0] == "t"
    assert cr.resolve_token("http://h/", "box", "plain-token", store, None, env={})[0] == "plain-token"


def test_enrolling_against_nothing_says_where(tmp_path):
    with pytest.raises(cr.CredentialError, match="cannot enroll at http://127.0.0.1:9/codefy/api/workers/enroll"):
        cr.resolve_token("http://127.0.0.1:9/", "box", "abcdef.0123456789abcdef0123456789abcdef",
                         cr.CredentialStore(tmp_path), None, env={})


@pytest.mark.parametrize("argv, message", [
    (["--name", "Bad_Name"], "worker name 'Bad_Name' is not valid"),
    (["--name", "any"], "is reserved"),
    (["--run-id", "r1"], "--run-id takes the run of a one-shot agent"),
    (["--keep-runs", "-2"], "--keep-runs: expected a whole number >= -1 (-1 keeps all), got '-2'"),
    (["--keep-runs", "many"], "--keep-runs: expected a whole number >= -1"),
])
def test_cli_refusals_name_the_field(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["agent", "start", "--control", "http://127.0.0.1:9/", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_cli_refuses_a_malformed_keep_runs_variable(monkeypatch, capsys):
    monkeypatch.setenv("CODEFY_AGENT_KEEP_RUNS", "lots")
    with pytest.raises(SystemExit) as exc:
        main(["agent", "start", "--control", "http://127.0.0.1:9/"])
    assert exc.value.code == 2 and "CODEFY_AGENT_KEEP_RUNS: expected a whole number >= -1" in capsys.readouterr().err


def test_cli_refuses_a_malformed_pin(tmp_path, capsys):
    code = main(["agent", "start", "--control", "https://127.0.0.1:9/", "--pin-sha256", "nope", "--data-dir",
                 str(tmp_path)])
    assert code == 2 and "--pin-sha256 'nope' is not a sha256 digest" in capsys.readouterr().err


def test_agent_stop_with_no_agent_says_so(tmp_path, capsys):
    assert main(["agent", "stop", "--data-dir", str(tmp_path)]) == 1
    assert "no running agent in" in capsys.readouterr().err


def test_the_agent_process_never_imports_torch():
    code = ("import sys\n"
            "import codefy_jupyter.cli, codefy_jupyter.cli.agent, codefy_jupyter.agent.connection\n"
            "import codefy_jupyter.agent.runner, codefy_jupyter.agent.launch, codefy_jupyter.agent.identity\n"
            "from codefy_jupyter.agent.identity import Inventory\n"
            "Inventory.probe({})\n"
            "bad = [m for m in ('torch', 'codefy_jupyter.server', 'jupyter_server') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
