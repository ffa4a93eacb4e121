"""`codefy agent ssh`'s command lines, built without running ssh: the tunnel, the remote agent's
arguments, the token kept off every command line, and bad flags refused naming the flag."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from codefy_jupyter.cli.agent_ssh import Session, default_remote_port, split_agent_args
from codefy_jupyter.cli.main import build_parser


def session(*argv: str, control: str = "http://127.0.0.1:8888/lab%40x/") -> Session:
    local, rest = split_agent_args(["agent", "ssh", *argv])
    args = build_parser().parse_args(local)
    args.agent_args = rest or []
    return Session(args, args.name or "box", control, args.remote_port or default_remote_port(args.name or "box"))


def test_the_tunnel_leads_the_remote_loopback_to_the_control_plane():
    s = session("alice@gpu", "--port", "2222", "--identity", "/k", "--ssh-option", "ProxyJump=bastion",
                "--remote-port", "30001", "--remote-python", "/opt/py env/bin/python", "--name", "box",
                "--", "--mount", "data=/nas")
    cmd = s.tunnel_command()
    assert cmd[cmd.index("-R") + 1] == "30001:127.0.0.1:8888"
    assert ["-p", "2222"] == cmd[cmd.index("-p"):cmd.index("-p") + 2] and "-i" in cmd and "ProxyJump=bastion" in cmd
    assert "ExitOnForwardFailure=yes" in cmd and "BatchMode=yes" in cmd
    assert cmd[-2] == "alice@gpu"
    remote = shlex.split(cmd[-1])
    assert remote[:2] == ["sh", "-c"]
    script = remote[2]
    assert shlex.quote("/opt/py env/bin/python") in script
    assert "--control http://127.0.0.1:30001/lab%40x/ --name box --mount data=/nas --token-file -" in script


def test_only_agent_ssh_hands_on_what_follows_the_double_dash():
    assert split_agent_args(["agent", "ssh", "h", "--port", "2", "--", "--port", "3"]) == (
        ["agent", "ssh", "h", "--port", "2"], ["--port", "3"])
    assert split_agent_args(["run", "--", "x"]) == (["run", "--", "x"], None)


def test_a_remote_path_under_the_home_folder_is_the_remote_home():
    s = session("gpu", "--remote-python", "~/venv/bin/python", "--remote-log", "~/logs/a b.log")
    script = shlex.split(s.tunnel_command()[-1])[2]
    assert '"$HOME"/venv/bin/python -m codefy_jupyter.cli agent start' in script
    assert """>>"$HOME"/'logs/a b.log' 2>&1""" in script
    assert shlex.split(s.stop_command()[-1])[2].startswith('"$HOME"/venv/bin/python -m')


def test_the_remote_port_is_the_same_for_a_name_and_in_range():
    assert default_remote_port("box") == default_remote_port("box")
    assert all(20000 <= default_remote_port(n) < 40000 for n in ("a", "box", "gpu-box-17"))


def test_the_stop_command_names_the_agent_and_its_folder():
    cmd = session("gpu", "--name", "box", "--remote-data-dir", "/srv/agent").stop_command()
    assert "-R" not in cmd
    assert "agent stop --name box --data-dir /srv/agent" in shlex.split(cmd[-1])[2]


@pytest.mark.parametrize("argv, field", [
    (["--port", "0"], "--port"), (["--remote-port", "x"], "--remote-port"),
    (["--alive-interval", "0"], "--alive-interval"), (["--name", "Bad Name"], "--name"),
    (["--control", "ftp://h/"], "--control"), (["--token", "a", "--token-file", "f"], "--token-file"),
])
def test_bad_flags_are_refused_naming_the_flag(argv, field, tmp_path):
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "agent", "ssh", "gpu", *argv,
                           "--control", "http://127.0.0.1:1/", "--data-dir", str(tmp_path)]
                          if "--control" not in argv else
                          [sys.executable, "-m", "codefy_jupyter.cli", "agent", "ssh", "gpu", *argv,
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert field in done.stderr, done.stderr


def test_a_token_file_gives_its_first_line_and_an_empty_one_nothing(tmp_path):
    from codefy_jupyter.cli.agent_state import read_token_file

    (tmp_path / "t").write_text("  abcdef.0123  \nignored\n")
    (tmp_path / "empty").write_text("\n")
    assert read_token_file(str(tmp_path / "t")) == "abcdef.0123"
    assert read_token_file(str(tmp_path / "empty")) is None


def test_agent_start_refuses_two_tokens_naming_the_flag(tmp_path):
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control",
                           "http://127.0.0.1:1/", "--token", "a", "--token-file", str(tmp_path / "t"),
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--token-file" in done.stderr, done.stderr


def test_the_worker_name_comes_from_the_host():
    from codefy_jupyter.cli.agent_ssh import _name_from_host

    assert _name_from_host("alice@GPU_Box.lab.example.org") == "gpu-box"
    assert _name_from_host("_") == "worker" and _name_from_host("local") == "worker"
