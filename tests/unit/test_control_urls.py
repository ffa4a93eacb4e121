"""Several control-plane URLs (a leader and its standbys): parsing, the order of tries, the redial pause."""

from __future__ import annotations

import pytest

from codefy_jupyter.agent.dialing import BACKOFF_FIRST_S, Backoff, Redial
from codefy_jupyter.wire.control_urls import ControlUrlError, ControlUrls, parse_control_urls


def test_a_list_is_split_trimmed_made_bases_and_deduplicated():
    assert parse_control_urls(" http://a:8888 , https://b/base,http://a:8888/,") == (
        "http://a:8888/", "https://b/base/")
    assert parse_control_urls("http://one") == ("http://one/",)


@pytest.mark.parametrize("text, named", [
    ("", "no URL given"), (" , ", "no URL given"), ("ftp://a/", "'ftp://a/'"), ("http://a/,b", "'b'"),
    ("http:///x", "'http:///x'"), ("http://a/?x=1", "no query"),
])
def test_bad_lists_are_refused_naming_the_setting_and_the_entry(text, named):
    with pytest.raises(ControlUrlError) as err:
        parse_control_urls(text, what="CODEFY_URL")
    assert str(err.value).startswith("CODEFY_URL: ") and named in str(err.value)


def test_failures_move_through_the_list_and_a_named_leader_is_taken_only_when_it_is_ours():
    urls = ControlUrls(["http://a/", "http://b", "http://c/"])
    assert urls.current == "http://a/" and urls.several
    assert urls.failed() == "http://b/" and urls.failed() == "http://c/" and urls.failed() == "http://a/"
    assert urls.leader_is("http://c") and urls.current == "http://c/"
    assert not urls.leader_is("http://evil.example/") and urls.current == "http://c/"
    assert not urls.leader_is(None) and not urls.leader_is(42)
    assert urls.joined() == "http://a/,http://b/,http://c/"
    single = ControlUrls(["http://a/"])
    assert not single.several and single.failed() == "http://a/"
    with pytest.raises(ControlUrlError):
        ControlUrls([])


class NoJitter(Backoff):
    def next(self) -> float:
        delay = self.current
        self.current = min(self.cap, self.current * 2)
        return delay


def test_the_next_url_is_tried_at_once_and_the_backoff_grows_per_failed_turn():
    redial = Redial(ControlUrls(["http://a/", "http://b/", "http://c/"]), NoJitter(first=1, cap=8))
    # A turn: two quick tries of the other URLs, then the turn's backoff.
    assert [redial.next() for _ in range(9)] == [BACKOFF_FIRST_S, BACKOFF_FIRST_S, 1,
                                                 BACKOFF_FIRST_S, BACKOFF_FIRST_S, 2,
                                                 BACKOFF_FIRST_S, BACKOFF_FIRST_S, 4]
    redial.reset()
    assert [redial.next() for _ in range(3)] == [BACKOFF_FIRST_S, BACKOFF_FIRST_S, 1]
    # One URL: the plain backoff, as before.
    one = Redial(ControlUrls(["http://a/"]), NoJitter(first=1, cap=4))
    assert [one.next() for _ in range(4)] == [1, 2, 4, 4]
