"""The heartbeat a kernel ticks into its live run views (widgets/_heartbeat.py): one thread for
all views, a view dropped when it needs no more beats (or its beat raises), and no thread once no
view needs one. Real threads on a short interval; the tests wait for conditions, never time them."""

from __future__ import annotations

import threading

from codefy_jupyter.kernel.widgets._heartbeat import Pulse

WAIT_S = 10


class FakeView:
    """Beats `needs` times, then says it needs no more."""

    def __init__(self, needs: int, *, broken: bool = False) -> None:
        self.needs, self.broken = needs, broken
        self.beats = 0
        self.beaten = threading.Event()
        self.threads: set[str] = set()

    def _beat(self) -> bool:
        self.threads.add(threading.current_thread().name)
        if self.broken:
            raise RuntimeError("a view that cannot be ticked")
        self.beats += 1
        if self.beats >= self.needs:
            self.beaten.set()
        return self.beats < self.needs


def wait_for(predicate) -> bool:
    done = threading.Event()
    for _ in range(WAIT_S * 100):
        if predicate():
            return True
        done.wait(0.01)
    return predicate()


def test_one_thread_beats_every_view_until_each_needs_no_more_then_ends():
    pulse = Pulse(interval_s=0.01, name="test-pulse")
    short, long = FakeView(2), FakeView(5)
    pulse.add(short)
    pulse.add(long)
    assert pulse.running
    assert long.beaten.wait(WAIT_S)
    assert (short.beats, long.beats) == (2, 5)  # each dropped when it said so, never ticked again
    assert short.threads == long.threads == {"test-pulse"}
    assert wait_for(lambda: not pulse.running) and len(pulse) == 0
    # The next view starts a new thread.
    again = FakeView(1)
    pulse.add(again)
    assert again.beaten.wait(WAIT_S) and wait_for(lambda: not pulse.running)


def test_a_discarded_or_broken_view_gets_no_more_beats_and_the_others_go_on(caplog):
    pulse = Pulse(interval_s=0.3)  # long enough that `gone` is discarded before the first tick
    broken, gone, going = FakeView(10, broken=True), FakeView(1000), FakeView(3)
    for view in (broken, gone, going):
        pulse.add(view)
    pulse.discard(gone)
    assert going.beaten.wait(WAIT_S)
    assert gone.beats == 0 and len(broken.threads) == 1
    assert "heartbeat failed" in caplog.text
    assert wait_for(lambda: not pulse.running)
