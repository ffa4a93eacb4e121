"""seed_everything: the same random streams as torch.manual_seed (with python's and numpy's), and on a
torch with only CPU generators, none of torch's lazy accelerator seeding (which records the caller's
whole stack each time)."""

from __future__ import annotations

import random
import traceback

import numpy as np
import pytest
import torch

from codefy_jupyter.engine.context import _cpu_generators_only, seed_everything


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(4).tolist(), torch.randint(0, 1000, (3,)).tolist()


def test_the_streams_are_torch_manual_seeds_and_pythons_and_numpys():
    for seed in (0, 7, 2**32 - 1):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        expected = draws()
        seed_everything(seed)
        assert draws() == expected
    seed_everything(1)
    one = draws()
    seed_everything(2)
    assert draws() != one


def test_a_cpu_only_torch_is_seeded_without_recording_stacks(monkeypatch):
    if not _cpu_generators_only(torch):
        pytest.skip("this torch has accelerator generators: torch.manual_seed is called, as it must be")
    calls = []
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: calls.append(1) or [])
    seed_everything(5)
    first = torch.rand(2).tolist()
    seed_everything(5)
    assert torch.rand(2).tolist() == first
    assert calls == []
    # torch.manual_seed itself does record them on this build: what the fast path avoids.
    torch.manual_seed(5)
    assert calls


def test_the_fast_path_is_only_for_a_build_without_accelerator_generators():
    assert _cpu_generators_only(torch) == (not torch.backends.cuda.is_built() and not torch.xpu._is_compiled()
                                           and not torch.mtia._is_compiled())
