"""The pure statistics of a study (and the ranking a sweep shares): aggregates, competition ranks,
paired comparisons against the best variant, average ranks. No I/O.

The stdlib only, but for the paired comparison's resampling: 10,000 bootstrap resamples and
10,000 sign patterns are ~30 ms of interpreter time per variant in plain Python, held while a
study's readers and its scheduling wait on the interpreter lock. numpy (imported on the first
comparison) draws the very same numbers from the very same Mersenne Twister state
(`random.Random`'s, handed over) and adds them in the same order, so the answers are identical to
the plain-Python reference kept beside it (`_bootstrap_ci_reference`, `_sign_flip_p_reference`;
the tests hold one against the other), ~5x faster. The tests hold every function against numpy
and scipy on fixed data.

Conventions shared by every function here:

- A value counts only when it is a finite real number. `None`, NaN and +-inf do not count; JSON
  cannot carry NaN or inf, so anything returned for the wire shows a non-finite input as `None`.
- `direction` is `"minimize"` or `"maximize"`; anything else is a `ValueError`.
- Labels (the keys of the mappings) are any hashable; where an order among them is needed (who a
  variant is tied with, which of several rank-1 variants is "best") they are sorted, so results
  never depend on the order the caller listed them in. Labels of one kind (all `str`, all `int`)
  sort naturally; mixed kinds fall back to sorting by type name and `repr`.
- Everything random (the bootstrap, the Monte-Carlo permutation test) draws from its own
  `random.Random(seed)`, created afresh for each variant, so the same data and seed give the same
  answer regardless of which other variants exist.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Literal, Mapping, Sequence, TypeVar

__all__ = [
    "Direction",
    "DIRECTIONS",
    "EXACT_MAX_N",
    "RankInfo",
    "aggregate",
    "average_ranks",
    "best_of",
    "competition_ranks",
    "paired_comparison",
    "paired_comparisons",
]

K = TypeVar("K", bound=Hashable)
Direction = Literal["minimize", "maximize"]
DIRECTIONS: tuple[str, ...] = ("minimize", "maximize")

# Up to this many pairs the sign-flip test enumerates all 2**n sign patterns (4,096 at 12); past
# it, a seeded Monte-Carlo sample of patterns.
EXACT_MAX_N = 12
# Two sums of the same differences that differ by less than this, relative to the sum of their
# absolute values, count as equal: enumeration adds in a different order than the observed sum
# was taken, and a pattern that ties the observation exactly must not be lost to rounding
# (rounding here is ~n * 2.2e-16 relative; real differences are far larger).
_TIE_TOLERANCE = 1e-9


# ---------------------------------------------------------------------------------------------
# helpers


def _finite(value: Any) -> float | None:
    """The value as a float when it is a finite real number, else None. A bool is not a number
    here (a metric logged as True is a bug upstream, not 1.0); a non-number is a TypeError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a statistic needs numbers or None, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int past the float range is not a finite float
        return None
    return number if math.isfinite(number) else None


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def _sorted_labels(labels: Iterable[K]) -> list[K]:
    labels = list(labels)
    try:
        return sorted(labels)  # type: ignore[type-var]
    except TypeError:  # mixed kinds of labels: still a fixed order
        return sorted(labels, key=lambda label: (type(label).__name__, repr(label)))


def _scale(xs: Sequence[float]) -> tuple[list[float], int]:
    """`xs` divided by a power of two 2**e so that squares and sums cannot overflow, and e (0 for
    ordinary values). Scaling by a power of two is exact, so results are the same as unscaled ones
    wherever those would not have overflowed."""
    biggest = max((abs(x) for x in xs), default=0.0)
    if biggest < 2.0**500:
        return list(xs), 0
    exponent = math.frexp(biggest)[1]
    return [math.ldexp(x, -exponent) for x in xs], exponent


def _unscale(value: float, exponent: int) -> float | None:
    """`value * 2**exponent`, or None past the float range."""
    try:
        return math.ldexp(value, exponent)
    except OverflowError:
        return None


def _mean(xs: Sequence[float]) -> float:
    """Mean of finite floats, correctly rounded sum (fsum) so it does not depend on their order:
    two variants with the same values in another order get exactly equal means, hence a tie.
    (Never past the float range: a mean is no bigger than the biggest value.)"""
    scaled, exponent = _scale(xs)
    return math.ldexp(math.fsum(scaled) / len(scaled), exponent)


def _sample_std(xs: Sequence[float]) -> float | None:
    """Sample standard deviation (n - 1), two-pass; None below two values or past the float
    range."""
    if len(xs) < 2:
        return None
    scaled, exponent = _scale(xs)
    centre = math.fsum(scaled) / len(scaled)
    variance = math.fsum((x - centre) ** 2 for x in scaled) / (len(scaled) - 1)
    return _unscale(math.sqrt(variance), exponent)


# ---------------------------------------------------------------------------------------------
# aggregates


def aggregate(values: Sequence[float | None]) -> dict[str, Any]:
    """The seed's per-variant aggregate over one value per repetition (None where a repetition
    has none):

        {"count": int, "mean": float | None, "std": float | None, "values": [float | None, ...]}

    `count`, `mean` and `std` are over the finite values only; `mean` is None when there are none,
    `std` is the sample standard deviation (n - 1) and None with fewer than two. `values` keeps
    one entry per repetition, in order, as given, except that NaN and +-inf become None: JSON
    cannot carry them, and they did not count. Which repetitions' values to pass (the current
    attempts that recorded the objective, failed ones included) is the caller's rule.
    """
    shown = [_finite(value) for value in values]
    counted = [value for value in shown if value is not None]
    return {
        "count": len(counted),
        "mean": _mean(counted) if counted else None,
        "std": _sample_std(counted),
        "values": shown,
    }


# ---------------------------------------------------------------------------------------------
# ranks


@dataclass(frozen=True)
class RankInfo:
    """One entry's place in a competition ranking. `rank` is None for an unranked entry, which is
    then never tied. `tied_with` are the other entries with exactly the same value, sorted."""

    rank: int | None
    tie: bool = False
    tied_with: tuple[Hashable, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The seed's three fields: {"rank", "tie", "tied_with": [...]}."""
        return {"rank": self.rank, "tie": self.tie, "tied_with": list(self.tied_with)}


def competition_ranks(entries: Mapping[K, float | None],
                      direction: Direction) -> dict[K, RankInfo]:
    """Competition ranks ("1, 1, 3") over the entries whose value is a finite number.

    A study passes each variant's mean, with None for an ineligible variant; a sweep passes each
    variant's objective value. Entries with exactly equal values share the better rank, each is
    marked `tie` and lists the others in `tied_with`; the next rank skips by the size of the tie.
    No tie-break is applied (the seed: "No run-time tie-break"), and since ties are decided on the
    values alone and `tied_with` is sorted, the result does not depend on the mapping's order.
    Entries with no finite value get `RankInfo(None, False, ())`.
    """
    _check_direction(direction)
    sign = 1.0 if direction == "minimize" else -1.0
    ranked: list[tuple[float, K]] = []
    result: dict[K, RankInfo] = {}
    for label, value in entries.items():
        number = _finite(value)
        if number is None:
            result[label] = RankInfo(None)
        else:
            ranked.append((sign * number, label))
    ranked.sort(key=lambda item: item[0])  # stable; ties are grouped below regardless of order
    start = 0
    while start < len(ranked):
        end = start
        while end < len(ranked) and ranked[end][0] == ranked[start][0]:
            end += 1
        group = _sorted_labels(label for _, label in ranked[start:end])
        tie = len(group) > 1
        for label in group:
            others = tuple(other for other in group if other != label)
            result[label] = RankInfo(start + 1, tie, others)
        start = end
    return {label: result[label] for label in entries}


def best_of(ranks: Mapping[K, RankInfo]) -> K | None:
    """The variant the paired comparisons are made against: the one ranked 1, and with a tie at
    rank 1 the first of the tied variants by label order (ties are not broken for the ranking;
    this only picks a reference, and any of the tied ones would be as good). None when nothing is
    ranked."""
    firsts = [label for label, info in ranks.items() if info.rank == 1]
    return _sorted_labels(firsts)[0] if firsts else None


def _average_ranks_of(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of `values` ascending, ties sharing the average of the ranks they span (scipy's
    rankdata(method="average"))."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end < len(order) and values[order[end]] == values[order[start]]:
            end += 1
        shared = (start + 1 + end) / 2  # mean of ranks start+1 .. end
        for position in range(start, end):
            ranks[order[position]] = shared
        start = end
    return ranks


def average_ranks(per_repetition: Mapping[K, Sequence[float | None]],
                  direction: Direction) -> dict[K, float | None]:
    """Each variant's rank averaged over the repetitions (a robust companion to the ranking of
    means: one outlying repetition moves a mean, not a rank).

    `per_repetition[label][r]` is the variant's value in repetition r (None, or a missing tail,
    where it has none). In each repetition the variants with a finite value there are ranked 1..m
    (1 best for `direction`; equal values share the average of their ranks), and a variant's
    result is the mean of its ranks over the repetitions where it has one; None where it has none.
    A repetition where fewer variants have a value ranks over fewer; pass only complete
    repetitions for a Friedman-style comparison.
    """
    _check_direction(direction)
    sign = 1.0 if direction == "minimize" else -1.0
    repetitions = max((len(values) for values in per_repetition.values()), default=0)
    collected: dict[K, list[float]] = {label: [] for label in per_repetition}
    for r in range(repetitions):
        present: list[tuple[K, float]] = []
        for label, values in per_repetition.items():
            number = _finite(values[r]) if r < len(values) else None
            if number is not None:
                present.append((label, sign * number))
        for (label, _), rank in zip(present, _average_ranks_of([v for _, v in present])):
            collected[label].append(rank)
    return {label: (math.fsum(ranks) / len(ranks) if ranks else None)
            for label, ranks in collected.items()}


# ---------------------------------------------------------------------------------------------
# paired comparison against the best variant


def _signed_sums(xs: Sequence[float]) -> list[float]:
    """All 2**len(xs) sums +-x0 +- x1 ...: entry `mask` negates xs[i] where bit i of mask is set
    (entry 0 is the plain sum). Built by doubling, 2**(n+1) additions in all."""
    sums = [0.0]
    for x in xs:
        sums = [s + x for s in sums] + [s - x for s in sums]
    return sums


def _twister(rng: random.Random) -> Any:
    """A numpy bit generator in `rng`'s state: its raw 32-bit outputs are the ones `rng` would
    draw next (CPython's random is MT19937 too)."""
    import numpy as np

    state = rng.getstate()[1]
    generator = np.random.MT19937(0)
    generator.state = {"bit_generator": "MT19937",
                       "state": {"key": np.array(state[:624], dtype=np.uint32), "pos": state[624]}}
    return generator


def _bootstrap_ci(differences: Sequence[float], confidence: float, resamples: int,
                  rng: random.Random) -> list[float]:
    """`_bootstrap_ci_reference`, with numpy: the same draws, sums and quantiles."""
    import numpy as np

    n = len(differences)
    raw = _twister(rng).random_raw(2 * n * resamples).reshape(-1, 2)
    # random.random(): 53 bits from two 32-bit outputs (a >> 5, b >> 6); choices() picks
    # floor(random() * n), as a float product.
    uniform = ((raw[:, 0] >> 5).astype(np.float64) * 67108864.0 + (raw[:, 1] >> 6)) * (1.0 / 9007199254740992.0)
    picked = np.asarray(differences, dtype=np.float64)[(uniform * float(n)).astype(np.intp).reshape(resamples, n)]
    # sum() adds left to right; so does a cumulative sum (a plain sum would add pairwise).
    means = np.sort(np.cumsum(picked, axis=1)[:, -1] / n).tolist()
    tail = (1.0 - confidence) / 2.0
    return [_quantile(means, tail), _quantile(means, 1.0 - tail)]


def _bootstrap_ci_reference(differences: Sequence[float], confidence: float, resamples: int,
                            rng: random.Random) -> list[float]:
    """Percentile bootstrap interval of the mean: `resamples` times, draw n differences with
    replacement and take their mean; the interval is the (1-c)/2 and (1+c)/2 quantiles of those
    means, linearly interpolated (numpy's default percentile, which scipy.stats.bootstrap's
    method="percentile" uses)."""
    n = len(differences)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    return [_quantile(means, tail), _quantile(means, 1.0 - tail)]


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction


def _sign_flip_p(differences: Sequence[float], resamples: int, rng: random.Random,
                 exact_max_n: int) -> tuple[float, str]:
    """`_sign_flip_p_reference`, its Monte Carlo with numpy: the same patterns and sums."""
    n = len(differences)
    if n <= exact_max_n or n > 32:  # exact, or getrandbits() would take more than one output
        return _sign_flip_p_reference(differences, resamples, rng, exact_max_n)
    import numpy as np

    tolerance = _TIE_TOLERANCE * math.fsum(abs(d) for d in differences)
    threshold = abs(math.fsum(differences)) - tolerance
    masks = _twister(rng).random_raw(resamples) >> np.uint64(32 - n)  # getrandbits(n), n <= 32
    total = np.zeros(resamples)
    for i in range(0, n, 8):
        total = total + np.array(_signed_sums(differences[i:i + 8]))[(masks & np.uint64(0xFF)).astype(np.intp)]
        masks = masks >> np.uint64(8)
    return (int(np.count_nonzero(np.abs(total) >= threshold)) + 1) / (resamples + 1), "monte_carlo"


def _sign_flip_p_reference(differences: Sequence[float], resamples: int, rng: random.Random,
                           exact_max_n: int) -> tuple[float, str]:
    """Two-sided sign-flip permutation p-value for "mean difference = 0", and the method.

    Under the null each paired difference is as likely to have either sign, so the reference
    distribution of the mean is over all 2**n sign patterns. The statistic is |sum| (the mean's n
    is the same for every pattern); a pattern counts when its |sum| reaches the observed one
    within a relative tolerance. Exact (n <= exact_max_n): the fraction of all 2**n patterns,
    the observed one included. Monte Carlo otherwise: `resamples` random patterns, p = (k + 1) /
    (resamples + 1), which counts the observed pattern once and is never 0.
    """
    n = len(differences)
    tolerance = _TIE_TOLERANCE * math.fsum(abs(d) for d in differences)
    if n <= exact_max_n:
        sums = _signed_sums(differences)
        threshold = abs(sums[0]) - tolerance
        return sum(1 for s in sums if abs(s) >= threshold) / len(sums), "exact"
    # Monte Carlo: each pattern is one getrandbits(n); its sum is read from tables of all signed
    # sums of 8-difference chunks, so a pattern costs n/8 look-ups, not n.
    chunks = [differences[i:i + 8] for i in range(0, n, 8)]
    tables = [_signed_sums(chunk) for chunk in chunks]
    threshold = abs(math.fsum(differences)) - tolerance
    hits = 0
    for _ in range(resamples):
        mask = rng.getrandbits(n)
        total = 0.0
        for table in tables:
            total += table[mask & 0xFF]
            mask >>= 8
        if abs(total) >= threshold:
            hits += 1
    return (hits + 1) / (resamples + 1), "monte_carlo"


def paired_comparison(values: Sequence[float | None], best_values: Sequence[float | None], *,
                      resamples: int = 10_000, confidence: float = 0.95, seed: int = 0,
                      exact_max_n: int = EXACT_MAX_N) -> dict[str, Any]:
    """One variant against the reference (best) variant, paired by repetition (all variants of a
    repetition share its seed, so the difference within a repetition removes the seed's luck).

        {"n": int,                        # repetitions where both have a finite value
         "repetitions": [int, ...],       # which ones (indices into the value lists)
         "differences": [float, ...],     # variant - best, in repetition order
         "mean_difference": float | None, # None when n == 0
         "ci95": [lo, hi] | None,         # percentile bootstrap of the mean; None when n < 2
         "p_value": float | None,         # two-sided sign-flip test of mean = 0; None when n < 2
         "method": "exact" | "monte_carlo" | None}   # how p_value was found; None with no p

    The key is "ci95" whatever `confidence` is; the studies report 95 %. A pair whose difference
    overflows the float range does not count. With identical differences every bootstrap mean is
    the same, so the interval has zero width. Cost: `resamples` draws of n values for the
    interval, plus 2**n sums (exact) or `resamples` patterns (Monte Carlo) for p: tens of
    milliseconds at n = 32; compute once per change of the data, not per read.
    """
    if not isinstance(resamples, int) or isinstance(resamples, bool) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    repetitions: list[int] = []
    differences: list[float] = []
    for r in range(min(len(values), len(best_values))):
        mine, best = _finite(values[r]), _finite(best_values[r])
        if mine is None or best is None:
            continue
        difference = mine - best
        if math.isfinite(difference):
            repetitions.append(r)
            differences.append(difference)
    n = len(differences)
    result: dict[str, Any] = {
        "n": n,
        "repetitions": repetitions,
        "differences": differences,
        "mean_difference": _mean(differences) if n else None,
        "ci95": None,
        "p_value": None,
        "method": None,
    }
    if n >= 2:
        # Separate generators, so the p-value does not depend on how many draws the interval took.
        result["ci95"] = _bootstrap_ci(differences, confidence, resamples, random.Random(seed))
        p_value, method = _sign_flip_p(differences, resamples, random.Random(seed + 1),
                                       exact_max_n)
        result["p_value"], result["method"] = p_value, method
    return result


def paired_comparisons(per_repetition: Mapping[K, Sequence[float | None]], best: K, *,
                       resamples: int = 10_000, confidence: float = 0.95, seed: int = 0,
                       exact_max_n: int = EXACT_MAX_N) -> dict[K, dict[str, Any]]:
    """`paired_comparison` of every variant other than `best` against `best` (usually
    `best_of(competition_ranks(...))`), each entry with `"against": best` added. The best variant
    itself has no entry. Every variant is compared, ineligible ones included (over the
    repetitions where both have a value); whether to show those is the caller's rule. Each variant
    uses a fresh `Random(seed)`, so an entry depends only on its own values and the best's.
    """
    if best not in per_repetition:
        raise KeyError(f"the reference variant {best!r} has no values")
    reference = per_repetition[best]
    comparisons: dict[K, dict[str, Any]] = {}
    for label, values in per_repetition.items():
        if label == best:
            continue
        comparisons[label] = {"against": best, **paired_comparison(
            values, reference, resamples=resamples, confidence=confidence, seed=seed,
            exact_max_n=exact_max_n)}
    return comparisons
