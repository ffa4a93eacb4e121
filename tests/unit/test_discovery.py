"""Server discovery's decision (which server, why, who else) and its probing deadline, with no servers:
candidates are what the files would say, probes are hand-written."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from codefy_jupyter.client.discovery import (
    ABSENT, CODEFY, CODEFY_START, FORBIDDEN, JUPYTER, RECOVERING, TIMEOUT, UNCHECKED, UNREACHABLE, Candidate,
    choose, no_server_message, probe_all,
)

STATE = "/data/codefy/server.json"
START = Candidate("http://127.0.0.1:9000/", "tok-s", CODEFY_START, STATE, pid=10, answer=CODEFY)
LAB_OLD = Candidate("http://127.0.0.1:8888/", "tok-a", JUPYTER, "/rt/jpserver-11.json", pid=11, root_dir="/home/u",
                    started_at=100.0, answer=CODEFY)
LAB_NEW = Candidate("http://127.0.0.1:8889/", "tok-b", JUPYTER, "/rt/jpserver-12.json", pid=12, root_dir="/proj",
                    started_at=200.0, answer=CODEFY)
PLAIN = Candidate("http://127.0.0.1:8890/", "tok-c", JUPYTER, "/rt/jpserver-13.json", pid=13, answer=ABSENT)


def test_the_codefy_start_server_comes_first_and_the_others_are_named():
    found = choose([START, LAB_OLD, PLAIN], in_kernel=False, state_file=STATE)
    assert (found.url, found.token, found.source) == (START.url, "tok-s", "codefy start")
    assert found.why == f"the `codefy start` server recorded in {STATE}"
    assert found.others == ("http://127.0.0.1:8888/ (Jupyter server pid 11, root /home/u)",)  # not the plain one
    assert found.describe() == [
        f"server {START.url} — the `codefy start` server recorded in {STATE}",
        "  also running: http://127.0.0.1:8888/ (Jupyter server pid 11, root /home/u)",
        "  (pass --url to use another)"]
    assert "tok" not in str(found.as_dict())


def test_with_no_codefy_start_the_newest_jupyter_server_and_the_reason():
    found = choose([LAB_OLD, LAB_NEW], in_kernel=False, state_file=STATE)
    assert found.url == LAB_NEW.url and found.source == "jupyter server"
    assert found.why == ("the newest of 2 running Jupyter servers with codefy-jupyter (pid 12, root /proj); "
                         f"no `codefy start` server is running (none in {STATE})")
    assert len(found.others) == 1 and LAB_OLD.url in found.others[0]

    alone = choose([LAB_OLD, PLAIN], in_kernel=False, state_file=STATE)
    assert alone.why.startswith("the only running Jupyter server with codefy-jupyter (pid 11")
    assert alone.others == ()


def test_a_silent_codefy_start_is_said_and_a_busy_one_still_wins():
    gone = replace(START, answer=UNREACHABLE)
    found = choose([gone, LAB_OLD], in_kernel=False, state_file=STATE)
    assert found.url == LAB_OLD.url
    assert found.why.endswith(f"; the `codefy start` server in {STATE} does not answer")

    busy = choose([replace(START, answer=TIMEOUT), LAB_OLD], in_kernel=False, state_file=STATE)
    assert busy.url == START.url and "busy: it did not answer within 1 s" in busy.why

    recovering = choose([replace(START, answer=RECOVERING)], in_kernel=False, state_file=STATE)
    assert recovering.url == START.url


def test_in_a_kernel_the_server_running_it_wins():
    mine = replace(LAB_OLD, serves_kernel=True)
    found = choose([START, mine, LAB_NEW], in_kernel=True, state_file=STATE)
    assert (found.url, found.source, found.why) == (LAB_OLD.url, "kernel", "the Jupyter server running this kernel")
    assert {START.url, LAB_NEW.url} == {o.split()[0] for o in found.others}
    # Outside a kernel the same answers pick the codefy start server.
    assert choose([START, mine], in_kernel=False, state_file=STATE).url == START.url


def test_nothing_usable_is_none_and_the_message_lists_what_was_seen():
    refused = replace(LAB_OLD, answer=FORBIDDEN)
    assert choose([PLAIN, refused], in_kernel=False, state_file=STATE) is None
    assert choose([], in_kernel=False, state_file=STATE) is None
    text = no_server_message([PLAIN, refused], STATE)
    assert text.startswith(f"no codefy server found: start one with `codefy start` (none recorded in {STATE})")
    assert "http://127.0.0.1:8890/ (jupyter server, pid 13): no codefy-jupyter extension" in text
    assert "http://127.0.0.1:8888/ (jupyter server, pid 11): refused its recorded token" in text
    # A token-refusing server is named beside one that works.
    found = choose([START, refused], in_kernel=False, state_file=STATE)
    assert "refused its recorded token" in found.others[0]


def test_probing_stops_waiting_for_a_hung_server_once_the_choice_is_settled():
    hung = threading.Event()

    def probe(candidate, kernel_id, timeout):
        if candidate.source == JUPYTER:
            hung.wait(timeout)  # a server that never answers
            return replace(candidate, answer=TIMEOUT)
        return replace(candidate, answer=CODEFY)

    began = time.monotonic()
    probed = probe_all([replace(START, answer=UNCHECKED), replace(LAB_OLD, answer=UNCHECKED)], None,
                       timeout=60, grace=0.05, probe=probe)
    elapsed = time.monotonic() - began
    hung.set()
    assert elapsed < 30, elapsed  # not the 60 s timeout
    assert [c.answer for c in probed] == [CODEFY, UNCHECKED]
    assert choose(probed, in_kernel=False, state_file=STATE).url == START.url


def test_probing_gives_up_at_the_timeout_and_a_silent_codefy_start_is_a_timeout():
    def probe(candidate, kernel_id, timeout):
        time.sleep(60)  # daemon threads: they do not hold the test run's exit
        return replace(candidate, answer=CODEFY)

    began = time.monotonic()
    probed = probe_all([replace(START, answer=UNCHECKED), replace(LAB_OLD, answer=UNCHECKED)], None,
                       timeout=0.2, grace=0.05, probe=probe)
    assert time.monotonic() - began < 30  # the timeout, not the 60 s answers
    assert [c.answer for c in probed] == [TIMEOUT, UNCHECKED]


def test_in_a_kernel_every_answer_is_awaited():
    def probe(candidate, kernel_id, timeout):
        if candidate.source == JUPYTER:
            time.sleep(0.3)
            return replace(candidate, answer=CODEFY, serves_kernel=kernel_id == "k-1")
        return replace(candidate, answer=CODEFY)

    probed = probe_all([replace(START, answer=UNCHECKED), replace(LAB_OLD, answer=UNCHECKED)], "k-1",
                       timeout=60, grace=0.01, probe=probe)
    assert probed[1].serves_kernel
    assert choose(probed, in_kernel=True, state_file=STATE).source == "kernel"
