"""`CODEFY_SERVER_LOOP`: which event loop `codefy start` serves on, and its refusals."""

from __future__ import annotations

import asyncio

import pytest

from codefy_jupyter.server import event_loop
from codefy_jupyter.server.event_loop import LoopChoiceError, loop_choice, new_server_loop


@pytest.mark.parametrize("value, choice", [(None, "auto"), ("", "auto"), ("auto", "auto"), (" UVLoop ", "uvloop"),
                                           ("asyncio", "asyncio")])
def test_the_choice_is_read_case_and_space_blind(value, choice):
    assert loop_choice({} if value is None else {"CODEFY_SERVER_LOOP": value}) == choice


def test_an_unknown_loop_is_refused_naming_the_variable():
    with pytest.raises(LoopChoiceError, match=r"CODEFY_SERVER_LOOP='trio': expected one of auto, uvloop, asyncio"):
        loop_choice({"CODEFY_SERVER_LOOP": "trio"})


def test_auto_and_uvloop_give_uvloop_and_asyncio_gives_asyncios_own():
    import uvloop  # a dependency on Linux

    for choice, kind, name in (("auto", uvloop.Loop, "uvloop"), ("uvloop", uvloop.Loop, "uvloop"),
                               ("asyncio", asyncio.BaseEventLoop, "asyncio")):
        loop, said = new_server_loop(choice)
        try:
            assert isinstance(loop, kind) and said == name
            assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
        finally:
            loop.close()


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch):
    monkeypatch.setattr(event_loop, "_uvloop", lambda: None)
    loop, name = new_server_loop(loop_choice({}))
    loop.close()
    assert name == "asyncio"
    with pytest.raises(LoopChoiceError, match="uvloop is not installed here"):
        loop_choice({"CODEFY_SERVER_LOOP": "uvloop"})
