"""The CLI's asyncio.run: Ctrl+C that lands on another thread of the process (the default executor's,
where tornado resolves hosts) still stops a follower sleeping in a long wait at once; asyncio.run's
own handler would run only when the loop woke by itself."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from codefy_jupyter.cli import interrupts

LONG_WAIT_S = 30.0


def sigint_on_another_thread(after_s: float) -> None:
    def poke() -> None:
        time.sleep(after_s)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    threading.Thread(target=poke, daemon=True).start()


def test_ctrl_c_on_another_thread_interrupts_a_long_wait_at_once():
    async def follower() -> str:
        sigint_on_another_thread(0.2)
        await asyncio.sleep(LONG_WAIT_S)
        return "woke by itself"

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        interrupts.run(follower())
    # Not the long wait: the loop was woken by the signal (plain asyncio.run returns after 30 s).
    assert time.monotonic() - started < LONG_WAIT_S / 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back afterwards


def test_a_second_ctrl_c_does_not_wait_for_the_first_ones_cleanup():
    async def stubborn() -> None:
        sigint_on_another_thread(0.2)
        try:
            await asyncio.sleep(LONG_WAIT_S)
        finally:  # a cleanup that takes long; the second Ctrl+C cuts it short
            sigint_on_another_thread(0.2)
            await asyncio.shield(asyncio.sleep(LONG_WAIT_S))

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        interrupts.run(stubborn())
    assert time.monotonic() - started < LONG_WAIT_S / 3


def test_a_coroutine_that_ends_or_fails_by_itself_is_untouched():
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def broken() -> None:
        raise ValueError("boom")

    async def cancelled_by_its_own_code() -> None:
        raise asyncio.CancelledError

    assert interrupts.run(answer()) == 42
    with pytest.raises(ValueError, match="boom"):
        interrupts.run(broken())
    with pytest.raises(asyncio.CancelledError):  # not a Ctrl+C: not turned into KeyboardInterrupt
        interrupts.run(cancelled_by_its_own_code())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
