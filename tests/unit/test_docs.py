"""Every setting is documented in the README, with its environment variable and default."""

from __future__ import annotations

from pathlib import Path

from codefy_jupyter.core.config import SETTINGS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_readme():
    for s in SETTINGS:
        row = next((line for line in README.splitlines() if line.startswith(f"| `{s.name}` |")), None)
        assert row is not None, f"{s.name} is not documented"
        assert f"`{s.env}`" in row


def test_every_cli_flag_is_in_the_readme():
    from codefy_jupyter.cli import build_parser

    parser = build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        assert f"codefy {name}" in README, f"codefy {name} is not documented"
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in README or f" {flag} " in README, f"codefy {name} {flag} is not documented"
