"""A study as GET studies/{id} reads it, kept up to date change by change for the clients that
poll it while it runs: a read applies what the audit log says changed since the previous one
(store `study_delta`) and encodes again only the variants whose attempts moved. Encoding every
attempt of a 1,024-attempt study on every read was most of a read's cost, and the readers' cost
slowed the study itself (one event loop, one interpreter lock)."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from . import state as st
from .plan import current_attempts
from .views import attempt_view, encode, study_head, study_text, summary_attempt

FULL, SUMMARY = "full", "summary"


class RenderedStudy:
    def __init__(self, bundle: Mapping[str, Any], runs_deleted: int) -> None:
        self.runs_deleted = runs_deleted  # the store's count when read: moved, read it all again
        self.study = bundle["study"]
        self.variants = bundle["variants"]
        self.labels = [v["label"] for v in self.variants]
        self.attempts: dict[str, dict[str, Any]] = {a["id"]: a for a in bundle["attempts"]}
        self.runs: dict[str, dict[str, Any]] = dict(bundle["runs"])
        # Encoded once and again only when they move: each attempt's view (a running study
        # changes a few attempts of many variants between two reads), each variant's entry.
        self.attempt_texts: dict[str, str] = {}
        self.current_texts: dict[str, str] = {}  # the end of a repetition's entry it is current in
        self.parts: dict[int, str] = {}  # variant index -> its variant_part, encoded
        self.heads = {v["variant"]: encode({"index": v["variant"], "label": v["label"], "ops": v["ops"]})[:-1]
                      for v in self.variants}
        self.dirty = set(self.attempts)  # attempt ids
        # The summary form (views.study_summary_view) the same way: each attempt's cut view and
        # each variant's repetitions list, encoded again only when they move.
        self.summary_texts: dict[str, str] = {}  # attempt id -> encode(summary_attempt(...))
        self.summary_reps: dict[int, str] = {}  # variant index -> its repetitions list, encoded
        self.summary_dirty = set(self.attempts)  # attempt ids
        self.result_texts: dict[str, tuple[Any, str]] = {}  # see views.study_text
        # view -> (revision, (body, ETag)) of its last rendering, see reusable()
        self.bodies: dict[str, tuple[int, tuple[bytes, str]]] = {}

    @property
    def cursor(self) -> int:
        return self.study["last_cursor"]

    def apply(self, delta: Mapping[str, Any]) -> None:
        self.study = delta["study"]
        for a in delta["attempts"]:
            self.attempts[a["id"]] = a
            self.dirty.add(a["id"])
            self.summary_dirty.add(a["id"])
        self.runs.update(delta["runs"])

    def attempt_list(self) -> list[dict[str, Any]]:
        return list(self.attempts.values())

    def reusable(self, view: str = FULL) -> tuple[bytes, str] | None:
        """The view's last rendering, when it is this revision's and time cannot move it (nothing
        in flight: budget_usage counts running children's seconds up to now)."""
        kept = self.bodies.get(view)
        if kept is None or kept[0] != self.study["revision"]:
            return None
        if any(a["status"] in st.IN_FLIGHT for a in self.attempts.values()):
            return None
        return kept[1]

    def _keep(self, view: str, body: bytes) -> tuple[bytes, str]:
        kept = (body, f'"{hashlib.sha1(body).hexdigest()}"')
        self.bodies[view] = (self.study["revision"], kept)
        return kept

    def render_summary(self, results: Mapping[str, Any], now: float) -> tuple[bytes, str]:
        """The summary form and its ETag, as `render` (off the loop, no `apply` under way): the
        text `encode(study_summary_view(...))` gives, from the variants' kept repetitions lists."""
        attempts = self.attempt_list()
        moved = {self.attempts[i]["variant"] for i in self.summary_dirty}
        moved.update(v["variant"] for v in self.variants if v["variant"] not in self.summary_reps)
        for attempt_id in self.summary_dirty:
            self.summary_texts[attempt_id] = encode(summary_attempt(self.attempts[attempt_id], self.runs))
        self.summary_dirty = set()
        if moved:
            current = current_attempts(a for a in attempts if a["variant"] in moved)
            for index in moved:
                reps = []
                for r in range(self.study["repetitions"]):
                    a = current.get((index, r))
                    reps.append(f'{{"repetition": {r}, "seed": {encode(a["seed"])}, "current": '
                                f'{self.summary_texts[a["id"]]}}}' if a else
                                f'{{"repetition": {r}, "seed": null, "current": null}}')
                self.summary_reps[index] = "[" + ", ".join(reps) + "]"
        parts = [self.heads[v["variant"]] + ', "repetitions": ' + self.summary_reps[v["variant"]] + "}"
                 for v in self.variants]
        text = study_text(study_head(self.study, attempts, now), parts, results, self.labels, self.result_texts)
        return self._keep(SUMMARY, text.encode())

    def render(self, results: Mapping[str, Any], now: float) -> tuple[bytes, str]:
        """The body and its ETag (as tornado computes it: the SHA-1 of the body), made off the
        event loop. Call with no `apply` under way (the caller serialises them). The text is the
        one `encode(study_view(...))` gives, put together from the pieces kept."""
        attempts = self.attempt_list()
        if self.dirty:
            moved = {self.attempts[i]["variant"] for i in self.dirty}
            for attempt_id in self.dirty:
                a = self.attempts[attempt_id]
                text = self.attempt_texts[attempt_id] = encode(attempt_view(a, self.runs))
                self.current_texts[attempt_id] = f'"seed": {encode(a["seed"])}, "current": {text}}}'
            self.dirty.clear()
            by_variant: dict[int, list[dict[str, Any]]] = {}
            for a in attempts:
                if a["variant"] in moved:
                    by_variant.setdefault(a["variant"], []).append(a)
            for index in moved:
                self.parts[index] = self._part(index, by_variant.get(index, []))
        text = study_text(study_head(self.study, attempts, now), [self.parts[v["variant"]] for v in self.variants],
                          results, self.labels, self.result_texts)
        return self._keep(FULL, text.encode())

    def _part(self, index: int, mine: list[dict[str, Any]]) -> str:
        """encode(variant_part(...)) from the attempts' texts."""
        mine.sort(key=lambda a: (a["repetition"], a["attempt"]))
        current = current_attempts(mine)
        reps = []
        for r in range(self.study["repetitions"]):
            a = current.get((index, r))
            reps.append(f'{{"repetition": {r}, ' + (self.current_texts[a["id"]] if a else '"seed": null, "current": null}'))
        return (self.heads[index] + ', "repetitions": [' + ", ".join(reps) + '], "attempts": ['
                + ", ".join(self.attempt_texts[a["id"]] for a in mine) + "]}")
