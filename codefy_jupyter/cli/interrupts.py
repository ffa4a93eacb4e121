"""`run(coro)`: asyncio.run for the commands that follow something live, with Ctrl+C that always
lands at once.

asyncio.run's own Ctrl+C handler runs in the main thread only once the loop wakes up. The kernel
may deliver the signal to any thread of the process (the default executor's, where tornado
resolves each connection's host), and then the loop sleeps on until its next event: for a follower
in a 25 s long-poll, up to 25 s after Ctrl+C. The loop's own signal handling writes to its wakeup
pipe from whichever thread takes the signal, so the loop wakes and the main task is cancelled at
once; that cancellation comes out as KeyboardInterrupt, as from asyncio.run, and a second Ctrl+C
stops at once even if the first one's cleanup is still under way."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    interrupted = False

    async def interruptible() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_sigint() -> None:
            nonlocal interrupted
            if interrupted:  # a second Ctrl+C does not wait for the first one's cleanup
                raise KeyboardInterrupt
            interrupted = True
            task.cancel()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            pass
        return await main

    try:
        return asyncio.run(interruptible())
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
