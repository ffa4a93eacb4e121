"""Several control-plane URLs for one deployment: a leader and its standbys, each reachable on its own.

Agents (`codefy agent start --control URL1,URL2`), the CLI and the Python client (`--url`,
`CODEFY_URL`) take a comma-separated list. They talk to one URL at a time and move to the next
when it cannot be reached or answers that it is a standby (503 `standby`, whose `params.leader`
names the leader's URL: that one is tried next when it is in the list). One URL behind a load
balancer that routes by `GET codefy/api/health` works as well: it is a list of one.

Pure: parsing and the order of tries; the callers dial.
"""

from __future__ import annotations

from urllib.parse import urlsplit

SCHEMES = ("http", "https")


class ControlUrlError(ValueError):
    """A URL list that cannot be used; the message names the setting and the entry."""


def base_url(url: str) -> str:
    """The URL as a base: always ending with "/"."""
    return url if url.endswith("/") else url + "/"


def parse_control_urls(text: str, *, what: str = "--control") -> tuple[str, ...]:
    """`"http://a:8888/, https://b/"` -> ("http://a:8888/", "https://b/"): each a base URL, in the
    order given, duplicates dropped."""
    urls: list[str] = []
    for entry in (part.strip() for part in str(text).split(",")):
        if not entry:
            continue
        parts = urlsplit(entry)
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ControlUrlError(f"{what}: {entry!r} is not an http(s):// URL")
        if parts.query or parts.fragment:
            raise ControlUrlError(f"{what}: {entry!r}: a base URL has no query or fragment")
        url = base_url(entry)
        if url not in urls:
            urls.append(url)
    if not urls:
        raise ControlUrlError(f"{what}: no URL given")
    return tuple(urls)


class ControlUrls:
    """The URL to use now, and which one comes next after a failure. `failed()` moves on in the
    list's order, wrapping around; `leader_is(url)` jumps to the leader a standby named."""

    def __init__(self, urls: tuple[str, ...] | list[str]) -> None:
        if not urls:
            raise ControlUrlError("no control-plane URL")
        self.urls = tuple(base_url(u) for u in urls)
        self._index = 0

    @property
    def current(self) -> str:
        return self.urls[self._index]

    @property
    def several(self) -> bool:
        return len(self.urls) > 1

    def failed(self) -> str:
        """The current URL did not answer as a leader: the next one."""
        self._index = (self._index + 1) % len(self.urls)
        return self.current

    def leader_is(self, url: object) -> bool:
        """A standby named the leader: use it next when it is one of ours (an unknown URL is not
        followed: a standby's answer must not send agents and their tokens elsewhere)."""
        if not isinstance(url, str) or not url:
            return False
        wanted = base_url(url)
        if wanted in self.urls:
            self._index = self.urls.index(wanted)
            return True
        return False

    def joined(self) -> str:
        """The list as one value (what a stored credential remembers)."""
        return ",".join(self.urls)
