"""core/experiments/statistics.py held against numpy and scipy on fixed data: aggregates (numpy
std, ddof=1), the exact sign-flip p-value (scipy.stats.permutation_test, every sign pattern), the
percentile bootstrap interval (scipy.stats.bootstrap and a large numpy bootstrap), average ranks
(scipy.stats.rankdata per repetition), competition ranks with ties and in any order, and the
edges: nothing, all None, one value, zero and one pairs."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from codefy_jupyter.core.experiments import statistics as S
from codefy_jupyter.core.experiments.statistics import (
    EXACT_MAX_N,
    RankInfo,
    aggregate,
    average_ranks,
    best_of,
    competition_ranks,
    paired_comparison,
    paired_comparisons,
)

# Paired differences of lengths 3..12: gaussian draws, integers with ties among the |sums| (the
# observed pattern tied by others), a vector of one sign, and one with zero differences.
DIFFERENCES = [
    [0.31, -0.12, 0.45],
    [1.0, -1.0, 2.0, -2.0],
    [0.8, 1.1, 0.4, 0.9, 1.3],
    [2.0, 1.0, -1.0, 3.0, 0.0, 1.0],
    list(np.round(np.random.default_rng(7).normal(0.2, 1.0, 7), 6)),
    [1.0, 2.0, 3.0, -6.0, 1.0, 2.0, 3.0, 4.0],
    list(np.round(np.random.default_rng(8).normal(-0.5, 0.7, 9), 6)),
    [-0.02, -0.05, 0.01, -0.03, -0.04, -0.02, -0.06, 0.0, -0.01, -0.03],
    list(np.round(np.random.default_rng(9).normal(0.0, 2.0, 11), 6)),
    [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0],
]


def _pairs(differences, base=10.0):
    """Best and variant values whose paired differences are `differences` (variant - best)."""
    best = [base + i for i in range(len(differences))]
    return [b + d for b, d in zip(best, differences)], best


# ---------------------------------------------------------------------------------------------
# aggregate


def test_aggregate_matches_numpy_sample_std_and_mean():
    values = [0.52, 0.48, 0.61, 0.55, 0.47]
    result = aggregate(values)
    assert result["count"] == 5
    assert result["mean"] == pytest.approx(float(np.mean(values)), rel=1e-15)
    assert result["std"] == pytest.approx(float(np.std(values, ddof=1)), rel=1e-12)
    assert result["values"] == values


def test_aggregate_counts_only_finite_values_and_shows_the_others_as_none():
    result = aggregate([1.0, None, float("nan"), 3.0, float("inf"), -float("inf"), 2])
    assert result["count"] == 3
    assert result["mean"] == 2.0
    assert result["std"] == pytest.approx(float(np.std([1.0, 3.0, 2.0], ddof=1)))
    assert result["values"] == [1.0, None, None, 3.0, None, None, 2.0]


def test_aggregate_edges():
    assert aggregate([]) == {"count": 0, "mean": None, "std": None, "values": []}
    assert aggregate([None, None]) == {"count": 0, "mean": None, "std": None, "values": [None, None]}
    assert aggregate([None, 0.25]) == {"count": 1, "mean": 0.25, "std": None, "values": [None, 0.25]}
    assert aggregate([4.0, 4.0])["std"] == 0.0


def test_aggregate_mean_does_not_depend_on_the_order_of_the_values():
    # fsum: the same values in another order give exactly the same mean, so ties stay ties.
    values = [0.1, 0.7, 1e-17, 0.2, 0.3333333333]
    means = {aggregate(list(p))["mean"] for p in itertools.permutations(values)}
    assert len(means) == 1


def test_aggregate_near_the_float_range():
    assert aggregate([1e308, 1e308]) == {"count": 2, "mean": 1e308, "std": 0.0, "values": [1e308, 1e308]}
    assert aggregate([1e308, -1e308])["std"] == pytest.approx(math.sqrt(2) * 1e308)
    wide = aggregate([1.7e308, -1.7e308])
    assert wide["mean"] == 0.0 and wide["std"] is None  # past the float range: no number to show


def test_aggregate_refuses_what_is_not_a_number():
    with pytest.raises(TypeError):
        aggregate([1.0, "2"])
    with pytest.raises(TypeError):
        aggregate([True])


# ---------------------------------------------------------------------------------------------
# competition ranks


def test_competition_ranks_share_a_rank_and_skip_the_next():
    ranks = competition_ranks({"a": 0.5, "b": 0.3, "c": 0.3, "d": 0.9, "e": None}, "minimize")
    assert ranks == {
        "a": RankInfo(3, False, ()),
        "b": RankInfo(1, True, ("c",)),
        "c": RankInfo(1, True, ("b",)),
        "d": RankInfo(4, False, ()),
        "e": RankInfo(None, False, ()),
    }
    assert ranks["b"].to_json() == {"rank": 1, "tie": True, "tied_with": ["c"]}
    assert ranks["e"].to_json() == {"rank": None, "tie": False, "tied_with": []}


def test_competition_ranks_maximize_and_a_three_way_tie():
    ranks = competition_ranks({"x": 2.0, "y": 5.0, "z": 5.0, "w": 5.0, "v": 1.0}, "maximize")
    assert [ranks[k].rank for k in "yzwxv"] == [1, 1, 1, 4, 5]
    assert ranks["z"].tied_with == ("w", "y")
    assert not ranks["x"].tie and ranks["x"].tied_with == ()


def test_competition_ranks_leave_non_finite_values_unranked():
    ranks = competition_ranks({0: float("nan"), 1: float("inf"), 2: 1.0, 3: None}, "minimize")
    assert {k: v.rank for k, v in ranks.items()} == {0: None, 1: None, 2: 1, 3: None}


def test_competition_ranks_for_a_sweep_keyed_by_variant_index():
    ranks = competition_ranks({0: 0.2, 1: None, 2: 0.1, 3: 0.2}, "minimize")
    assert [ranks[i].rank for i in range(4)] == [2, None, 1, 2]
    assert ranks[0].tied_with == (3,) and ranks[3].tied_with == (0,)
    assert list(ranks) == [0, 1, 2, 3]  # the caller's order is kept for the keys


def test_competition_ranks_edges_and_a_bad_direction():
    assert competition_ranks({}, "maximize") == {}
    assert competition_ranks({"a": None}, "minimize") == {"a": RankInfo(None)}
    assert competition_ranks({"a": 3.0}, "maximize") == {"a": RankInfo(1)}
    with pytest.raises(ValueError, match="direction"):
        competition_ranks({"a": 1.0}, "lowest")


values_st = st.one_of(st.none(), st.sampled_from([0.1, 0.2, 0.5, 1.0, -3.0]),
                      st.floats(-10, 10, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text("abcdef", min_size=1, max_size=3), values_st, max_size=8),
       st.sampled_from(["minimize", "maximize"]), st.randoms(use_true_random=False))
def test_competition_ranks_do_not_depend_on_the_input_order(entries, direction, rnd):
    items = list(entries.items())
    rnd.shuffle(items)
    shuffled = competition_ranks(dict(items), direction)
    original = competition_ranks(entries, direction)
    assert shuffled == original
    # and they are competition ranks: 1 + the number strictly better
    sign = 1 if direction == "minimize" else -1
    for label, info in original.items():
        value = entries[label]
        if value is None:
            assert info == RankInfo(None)
            continue
        better = sum(1 for v in entries.values() if v is not None and sign * v < sign * value)
        equal = sorted(k for k, v in entries.items() if v == value and k != label)
        assert info == RankInfo(better + 1, bool(equal), tuple(equal))


def test_best_of_picks_the_first_label_of_a_tie_at_rank_one():
    assert best_of(competition_ranks({"b": 1.0, "a": 1.0, "c": 0.5}, "maximize")) == "a"
    assert best_of(competition_ranks({"b": 1.0, "c": 0.5}, "minimize")) == "c"
    assert best_of(competition_ranks({"b": None}, "minimize")) is None
    assert best_of({}) is None


# ---------------------------------------------------------------------------------------------
# average ranks


def test_average_ranks_match_scipy_rankdata_per_repetition():
    per_repetition = {
        "a": [0.30, 0.25, 0.40, None, 0.33],
        "b": [0.30, 0.20, 0.41, 0.50, 0.33],
        "c": [0.10, 0.25, float("nan"), 0.52, 0.33],
        "d": [0.90, 0.10, 0.40, 0.49],  # no fifth repetition
    }
    for direction, sign in (("minimize", 1.0), ("maximize", -1.0)):
        expected = {label: [] for label in per_repetition}
        for r in range(5):
            present = [(label, values[r]) for label, values in per_repetition.items()
                       if r < len(values) and values[r] is not None and math.isfinite(values[r])]
            ranks = stats.rankdata([sign * v for _, v in present], method="average")
            for (label, _), rank in zip(present, ranks):
                expected[label].append(float(rank))
        got = average_ranks(per_repetition, direction)
        assert got == pytest.approx({k: float(np.mean(v)) for k, v in expected.items()}, rel=1e-15)


def test_average_ranks_edges():
    assert average_ranks({}, "minimize") == {}
    assert average_ranks({"a": [None, None], "b": []}, "minimize") == {"a": None, "b": None}
    assert average_ranks({"a": [1.0], "b": [2.0]}, "maximize") == {"a": 2.0, "b": 1.0}
    with pytest.raises(ValueError, match="direction"):
        average_ranks({"a": [1.0]}, "up")


# ---------------------------------------------------------------------------------------------
# paired comparison: the sign-flip permutation p-value


@pytest.mark.parametrize("differences", DIFFERENCES, ids=lambda d: f"n{len(d)}")
def test_exact_p_value_matches_scipy_permutation_test(differences):
    values, best = _pairs(differences)
    result = paired_comparison(values, best)
    d = np.array(values) - np.array(best)
    reference = stats.permutation_test((d,), np.mean, permutation_type="samples",
                                       n_resamples=np.inf, alternative="two-sided")
    assert result["method"] == "exact"
    assert result["n"] == len(differences)
    assert result["p_value"] == pytest.approx(float(reference.pvalue), rel=1e-12)
    assert result["differences"] == pytest.approx(list(d), rel=0, abs=0)
    assert result["mean_difference"] == pytest.approx(float(np.mean(d)), rel=1e-12, abs=1e-15)


def _rational_p(differences):
    """The exact p in rational arithmetic: no rounding at all."""
    d = [Fraction(x) for x in differences]
    observed = abs(sum(d))
    patterns = list(itertools.product((1, -1), repeat=len(d)))
    return Fraction(sum(1 for s in patterns if abs(sum(a * b for a, b in zip(s, d))) >= observed),
                    len(patterns))


@pytest.mark.parametrize("differences", [
    ["0.1", "0.2", "-0.3", "0.5"],  # flipping {0.1, 0.2, -0.3} ties the observation in exact arithmetic
    ["0.7", "0.1", "0.2", "-0.3", "1.1", "-0.4"],
    ["1e-9", "3e-9", "-4e-9", "2e-9"],
])
def test_float_ties_with_the_observed_pattern_count(differences):
    floats = [float(x) for x in differences]
    exact = _rational_p([Fraction(x) for x in differences])
    assert paired_comparison(floats, [0.0] * len(floats))["p_value"] == float(exact)


def test_all_zero_differences_give_p_one_and_a_zero_width_interval():
    result = paired_comparison([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert result["p_value"] == 1.0 and result["ci95"] == [0.0, 0.0] and result["mean_difference"] == 0.0


def _enumerated_p(differences):
    d = np.array(differences)
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
    sums = signs @ d
    return float(np.mean(np.abs(sums) >= abs(d.sum()) * (1 - 1e-9)))


@pytest.mark.parametrize("n", [13, 16])
def test_monte_carlo_p_value_past_twelve_pairs_is_close_to_full_enumeration(n):
    differences = list(np.round(np.random.default_rng(n).normal(0.3, 1.0, n), 6))
    values, best = _pairs(differences)
    result = paired_comparison(values, best)
    assert result["method"] == "monte_carlo"
    # B = 10,000: the binomial sd of p is at most 0.005
    assert result["p_value"] == pytest.approx(_enumerated_p(np.array(values) - np.array(best)), abs=0.02)
    assert 1 / 10_001 <= result["p_value"] <= 1.0


def test_monte_carlo_p_is_never_zero_and_agrees_with_exact_when_forced():
    differences = [1.0, 1.2, 0.9, 1.1, 1.3, 1.05]  # every pattern but two below the observed |sum|
    exact = paired_comparison(differences, [0.0] * 6)
    forced = paired_comparison(differences, [0.0] * 6, exact_max_n=0)
    assert exact["method"] == "exact" and exact["p_value"] == 2 / 64
    assert forced["method"] == "monte_carlo"
    assert forced["p_value"] == pytest.approx(2 / 64, abs=0.01)
    far = paired_comparison([float(i) for i in range(1, 21)], [0.0] * 20)
    assert far["p_value"] == 1 / 10_001  # no random pattern reaches it; (0 + 1) / (B + 1)


# ---------------------------------------------------------------------------------------------
# paired comparison: the percentile bootstrap interval


@pytest.mark.parametrize("differences", [DIFFERENCES[2], DIFFERENCES[6], DIFFERENCES[9],
                                         list(np.round(np.random.default_rng(5).normal(0.1, 0.5, 32), 6))],
                         ids=lambda d: f"n{len(d)}")
def test_bootstrap_interval_is_close_to_scipy_and_to_a_large_numpy_bootstrap(differences):
    values, best = _pairs(differences)
    d = np.array(values) - np.array(best)
    result = paired_comparison(values, best)
    lo, hi = result["ci95"]
    assert lo <= result["mean_difference"] <= hi

    reference = stats.bootstrap((d,), np.mean, method="percentile", confidence_level=0.95,
                                n_resamples=10_000, rng=np.random.default_rng(0))
    # Monte-Carlo error of a 2.5 % quantile from 10,000 resamples is ~0.03 standard errors per
    # side; both intervals carry it, so allow 0.15 standard errors.
    tolerance = 0.15 * float(reference.standard_error)
    assert lo == pytest.approx(float(reference.confidence_interval.low), abs=tolerance)
    assert hi == pytest.approx(float(reference.confidence_interval.high), abs=tolerance)

    rng = np.random.default_rng(1)
    means = d[rng.integers(0, len(d), size=(200_000, len(d)))].mean(axis=1)
    big_lo, big_hi = np.percentile(means, [2.5, 97.5])
    assert lo == pytest.approx(float(big_lo), abs=tolerance)
    assert hi == pytest.approx(float(big_hi), abs=tolerance)


def test_bootstrap_and_p_are_reproducible_and_follow_the_seed():
    values, best = _pairs(DIFFERENCES[8])
    first = paired_comparison(values, best, seed=3)
    assert paired_comparison(values, best, seed=3) == first
    assert paired_comparison(values, best, seed=4)["ci95"] != first["ci95"]
    many = [float(x) for x in np.random.default_rng(2).normal(0.0, 1.0, 20)]
    one = paired_comparison(many, [0.0] * 20, seed=3)
    assert paired_comparison(many, [0.0] * 20, seed=3) == one
    assert paired_comparison(many, [0.0] * 20, seed=4)["p_value"] != one["p_value"]


def test_confidence_level_and_resamples_are_honoured_and_checked():
    values, best = _pairs(DIFFERENCES[6])
    wide = paired_comparison(values, best, confidence=0.99)["ci95"]
    narrow = paired_comparison(values, best, confidence=0.8)["ci95"]
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    assert paired_comparison(values, best, resamples=1)["ci95"][0] == paired_comparison(
        values, best, resamples=1)["ci95"][1]
    for bad in ({"resamples": 0}, {"resamples": 1.5}, {"confidence": 1.0}, {"confidence": 0.0}):
        with pytest.raises(ValueError):
            paired_comparison(values, best, **bad)


# ---------------------------------------------------------------------------------------------
# paired comparison: pairing, edges, every variant against the best


def test_pairs_only_over_repetitions_where_both_have_a_finite_value():
    result = paired_comparison([1.0, None, 3.0, float("nan"), 5.0, 6.0], [0.5, 1.0, None, 2.0, 4.0])
    assert result["repetitions"] == [0, 4]
    assert result["differences"] == [0.5, 1.0]
    assert result["n"] == 2 and result["mean_difference"] == 0.75
    assert result["method"] == "exact" and result["p_value"] == 0.5  # (+,+) and (-,-) of 4


def test_zero_and_one_pair():
    none = paired_comparison([None, 1.0], [2.0, None])
    assert none == {"n": 0, "repetitions": [], "differences": [], "mean_difference": None,
                    "ci95": None, "p_value": None, "method": None}
    one = paired_comparison([3.0], [1.0])
    assert one == {"n": 1, "repetitions": [0], "differences": [2.0], "mean_difference": 2.0,
                   "ci95": None, "p_value": None, "method": None}
    assert paired_comparison([], [])["n"] == 0
    assert paired_comparison([1.7e308], [-1.7e308])["n"] == 0  # the difference overflows


def test_paired_comparisons_against_the_best_ranked_variant():
    per_repetition = {
        "lr 1e-2": [0.40, 0.42, 0.39],
        "baseline": [0.30, 0.33, 0.31],
        "wide": [0.30, 0.31, None],
    }
    means = {label: aggregate(v)["mean"] if None not in v else None for label, v in per_repetition.items()}
    best = best_of(competition_ranks(means, "minimize"))
    assert best == "baseline"
    comparisons = paired_comparisons(per_repetition, best, seed=11)
    assert set(comparisons) == {"lr 1e-2", "wide"}
    lr = comparisons["lr 1e-2"]
    assert lr["against"] == "baseline" and lr["n"] == 3 and lr["method"] == "exact"
    assert lr["differences"] == pytest.approx([0.10, 0.09, 0.08])
    assert lr["p_value"] == 0.25  # all positive: 2 of 8 patterns reach it
    assert comparisons["wide"]["differences"] == pytest.approx([0.0, -0.02])
    assert comparisons["lr 1e-2"] == {"against": "baseline",
                                      **paired_comparison(per_repetition["lr 1e-2"],
                                                          per_repetition["baseline"], seed=11)}
    with pytest.raises(KeyError):
        paired_comparisons(per_repetition, "missing")


def test_exact_limit_is_twelve_pairs():
    assert EXACT_MAX_N == 12
    twelve = paired_comparison([float(i % 5) for i in range(12)], [0.5] * 12)
    thirteen = paired_comparison([float(i % 5) for i in range(13)], [0.5] * 13)
    assert twelve["method"] == "exact" and thirteen["method"] == "monte_carlo"


def test_random_module_state_is_left_alone():
    random.seed(123)
    before = random.random()
    random.seed(123)
    paired_comparison([1.0, 2.0, 0.5] * 5, [0.0] * 15)
    assert random.random() == before


@pytest.mark.parametrize("n", [2, 5, 12, 13, 20, 31, 32])
def test_the_numpy_resampling_gives_exactly_the_plain_python_answers(n):
    # The comparison's bootstrap and Monte Carlo sign flips run on numpy for speed; they must
    # draw the same numbers from the same generator state and add them in the same order.
    rng = random.Random(n)
    for trial in range(12):
        d = [rng.choice([rng.gauss(0, 1), float(rng.randint(-3, 3)), 0.1 * rng.randint(-9, 9), 1e6 * rng.random()])
             for _ in range(n)]
        seed = rng.randint(0, 2**32 - 1)
        resamples = [10_000, 997, 1][trial % 3]
        assert S._bootstrap_ci(d, 0.95, resamples, random.Random(seed)) == \
            S._bootstrap_ci_reference(d, 0.95, resamples, random.Random(seed))
        assert S._sign_flip_p(d, resamples, random.Random(seed + 1), S.EXACT_MAX_N) == \
            S._sign_flip_p_reference(d, resamples, random.Random(seed + 1), S.EXACT_MAX_N)
