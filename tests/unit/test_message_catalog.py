"""The one message catalog (codefy_jupyter/wire/messages.json): the shared vectors that Lab's test
reads too (tests/shared/message_vectors.json), the TypeScript copy Lab builds from, the server's
wait reasons in the catalog's words, and that the catalog ships in the wheel."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from codefy_jupyter.core.scheduling import memory_ledger as ml
from codefy_jupyter.core.scheduling.offer_pass import behind, said
from codefy_jupyter.core.scheduling.scheduler_values import Run
from codefy_jupyter.wire import messages as words

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests" / "shared" / "message_vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("case", VECTORS, ids=lambda c: c["code"])
def test_each_vector_renders_its_words(case):
    assert words.render(case["code"], case["params"]) == case["text"]


def test_the_vectors_cover_every_code_of_the_catalog_and_every_worker_code():
    covered = {c["code"] for c in VECTORS if c["text"] is not None}
    assert set(words.catalog()) - covered == {"memory_budget_local", "memory_over_card", "unauthenticated",
                                              "forbidden", "waiting_for_turn", "one_shot_pool", "one_shot_taken",
                                              "one_shot_run_id", "waiting_for_set_devices"}
    # Every worker_* code the package says (errors, warnings, reasons) has words in the catalog.
    said_codes = set()
    for path in (ROOT / "codefy_jupyter").rglob("*.py"):
        said_codes |= set(re.findall(r'"(worker_[a-z_]+)"', path.read_text()))
    not_codes = {"worker_id", "worker_token", "worker_pid", "worker_routes", "worker_resume", "worker_warning"}
    from codefy_jupyter.core.config import SETTINGS

    settings = {c for c in said_codes if c.endswith("_s")} | {s.name for s in SETTINGS}
    assert sorted(said_codes - not_codes - settings - set(words.catalog())) == []


def test_lab_builds_from_the_same_catalog():
    ts = (ROOT / "labextension" / "src" / "messageCatalog.ts").read_text()
    assert ts == words.typescript(), "run: python -m codefy_jupyter.wire.messages > labextension/src/messageCatalog.ts"


def test_every_variant_uses_known_filters_and_placeholders_that_fill():
    for code, variants in words.catalog().items():
        for variant in variants:
            text = variant if isinstance(variant, str) else variant["text"]
            for _key, flt in re.findall(r"\{([A-Za-z0-9_.]+)(?:\|([a-z]+))?\}", text):
                assert flt in ("", "list", "gib", "who", "reason"), (code, flt)


def test_a_missing_placeholder_falls_back_to_the_server_message():
    assert words.text_of({"code": "worker_draining", "message": "as the server says", "params": {}}) == "as the server says"
    assert words.text_of({"code": "new_code", "message": "", "params": {}}) == "new_code"
    assert words.text_of(None) == "" and words.text_of("plain") == "plain"
    with pytest.raises(ValueError, match="worker_draining"):
        words.message("worker_draining", {})


def test_gib_rounds_half_up_in_integers():
    assert [words.gib(m) for m in (0, 51, 52, 256, 1024, 8704)] == ["0.0 GiB", "0.0 GiB", "0.1 GiB", "0.3 GiB",
                                                                    "1.0 GiB", "8.5 GiB"]


def test_the_server_reasons_are_the_catalogs_words_and_name_who_is_ahead():
    head = Run("c2424d56f8b9bbb4", 1, "cpu", seeded=True, name="lr #1")
    why = said("waiting_to_run_alone", {"running": 2})
    notice = behind(head, why)
    assert notice.params == {"run_id": head.run_id, "name": "lr #1", "queue": "cpu", "code": "waiting_to_run_alone",
                             "ahead": why.to_dict()}
    assert notice.message == ("behind run 'lr #1' in the cpu queue, which is held up: a seeded run executes alone "
                              "on this server: waiting for 2 runs to finish")
    memory = ml.reason_memory_wait("box/cuda:0", 8704, 6144)
    assert memory.message == words.render(memory.code, memory.params) == (
        "waiting for memory on box/cuda:0: 6.0 GiB free of 8.5 GiB needed (budget and CUDA context)")
    assert memory.params == {"device": "box/cuda:0", "need_mib": 8704, "free_mib": 6144}  # exact, for scripts


def test_the_catalog_ships_in_the_wheel():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "codefy_jupyter" in build["packages"]  # every file of the package, messages.json included
    assert not any("json" in p for p in build.get("exclude", ()))
    assert (ROOT / "codefy_jupyter" / "wire" / "messages.json").is_file()


def test_every_reason_the_scheduler_builds_has_words_and_an_unworded_one_cannot_fail_a_pass():
    from codefy_jupyter.core.scheduling import placement as wp
    from codefy_jupyter.core.scheduling import quotas as qt
    from codefy_jupyter.core.scheduling.device_sets import Notice

    built = [wp.reason_disconnected("box"), wp.reason_draining("box"), wp.reason_no_offer(["cuda"]),
             wp.reason_no_offer(["cuda"], draining=["a"]), wp.reason_no_offer(["cuda:1"], "box"),
             wp.reason_one_shot_pool(["cpu"]), wp.reason_one_shot_taken("job"), wp.reason_one_shot_run_id("job", "r"),
             wp.reason_one_shot_start("job"),
             ml.reason_memory_wait("box/cuda:0", 100, None), ml.reason_no_budget("box/cuda:0", whole=True, running=0),
             ml.reason_no_budget("box/cuda:0", whole=False, running=1), ml.reason_budget_raised("box/cuda:0", 4, 6.5),
             qt.reason_owner_quota(None, 1, 1), qt.reason_owner_quota("bob", 1, 1)]
    built += [wp.reason_storage(need, worker, "data", why) for need in ("transfer", "mount", "same_machine")
              for worker in ("any", "box") for why in (None, ("inputs_too_big", "too big"))]
    for notice in built:
        assert notice.message == words.render(notice.code, notice.params), notice
    # A params shape the catalog has no words for is still a notice (code and param names), not an error.
    assert Notice.worded("worker_draining", {}).message == "worker_draining []"
