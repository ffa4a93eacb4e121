"""The run process's allocator cap on a card shared by memory (agent/memory_cap.py): the decision
everywhere, the cap itself where CUDA is present (a GPU machine)."""

from __future__ import annotations

import pytest

from codefy_jupyter.agent import memory_cap

GiB = 1024 ** 3


def test_fraction_is_the_budget_over_the_card_under_the_runs_own_name():
    # The agent's cuda:2 is the run's cuda:0 (CUDA_VISIBLE_DEVICES renumbers it).
    caps = memory_cap.fractions({"cuda:2": 4096}, {"cuda:0": "cuda:2"}, {0: 16 * GiB})
    assert caps == {0: 0.25}


def test_a_budget_above_the_card_is_the_whole_card_and_unknown_cards_are_skipped():
    assert memory_cap.fractions({"cuda:0": 64 * 1024}, {}, {0: 16 * GiB}) == {0: 1.0}
    assert memory_cap.fractions({"cuda:1": 1024}, {}, {0: 16 * GiB}) == {}
    assert memory_cap.fractions({"cpu": 1024}, {}, {0: 16 * GiB}) == {}


def test_a_ddp_rank_keeps_its_own_budget_and_gets_zero_on_the_others():
    # The run's set is the agent's cuda:3 and cuda:1 (run names cuda:0 and cuda:1), 4 GiB each.
    aliases = {"cuda:0": "cuda:3", "cuda:1": "cuda:1"}
    budgets = {"cuda:3": 4096, "cuda:1": 4096}
    totals = {0: 16 * GiB, 1: 32 * GiB}
    assert memory_cap.fractions(budgets, aliases, totals, own=0) == {0: 0.25, 1: 0.0}
    assert memory_cap.fractions(budgets, aliases, totals, own=1) == {0: 0.0, 1: 0.125}
    # A card without a budget is left alone, even beside a rank's own.
    assert memory_cap.fractions({"cuda:3": 4096}, aliases, totals, own=1) == {0: 0.0}


def test_the_ranks_limits_merge_into_one_memory_limit_under_the_agents_names():
    aliases = {"cuda:0": "cuda:3", "cuda:1": "cuda:1"}
    totals = {0: 16 * GiB, 1: 32 * GiB}
    rank0 = memory_cap.limits({0: 0.25, 1: 0.0}, aliases, totals)
    rank1 = memory_cap.limits({0: 0.0, 1: 0.125}, aliases, totals)
    assert rank0 == {"cuda:3": {"bytes": 4 * GiB, "fraction": 0.25}, "cuda:1": {"bytes": 0, "fraction": 0.0}}
    assert memory_cap.merge_limits([rank0, rank1, None]) == {
        "cuda:3": {"bytes": 4 * GiB, "fraction": 0.25}, "cuda:1": {"bytes": 4 * GiB, "fraction": 0.125}}
    assert memory_cap.merge_limits([None, {}]) is None


def test_nothing_to_cap_without_budgets_or_cuda():
    assert memory_cap.apply({}, {}) == {}
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert memory_cap.apply({"cuda:0": 1024}, {}) == {}


def test_cpu_peak_is_this_process_resident_set():
    peak = memory_cap.cpu_peak_bytes()
    assert peak is not None and peak > 10 * 1024 * 1024


def test_cuda_allocation_past_the_budget_fails(tmp_path):
    """On a GPU machine: a run process capped to 1 GiB cannot allocate 2 GiB, and can allocate 512 MiB."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (checked on a GPU machine)")
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from codefy_jupyter.agent import memory_cap\n"
        "caps = memory_cap.apply({'cuda:0': 1024}, {})\n"
        "assert abs(caps['cuda:0']['bytes'] - 2**30) < 2**20, caps\n"
        "ok = torch.empty(512 * 2**20, dtype=torch.uint8, device='cuda:0')\n"
        "try:\n"
        "    torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda:0')\n"
        "except torch.cuda.OutOfMemoryError:\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused" in out.stdout
