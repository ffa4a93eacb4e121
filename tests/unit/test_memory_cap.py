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
        "assert 0 in caps, caps\n"
        "ok = torch.empty(512 * 2**20, dtype=torch.uint8, device='cuda:0')\n"
        "try:\n"
        "    torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda:0')\n"
        "except torch.cuda.OutOfMemoryError:\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused" in out.stdout
