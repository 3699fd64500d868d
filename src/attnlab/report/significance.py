"""Is a difference between two configurations real? Tests and intervals over seeds (numpy and scipy).

Each configuration is a set of seeds, one number per seed (a final validation loss, a loss at a
matched budget, the steps to a target). Against a baseline:

- the difference of the means (the other minus the baseline), with a percentile bootstrap interval;
- Welch's t-test where both sides have two seeds or more; where both sides share seeds (the same
  data order and initialisation noise on both), the pairs are compared instead: the paired t-test
  (a one-sample t-test of the per-seed differences against 0) and a bootstrap of the differences;
- Holm's correction of the p-values over all the comparisons made against the baseline;
- a verdict in words, and where nothing is detected, the seeds per side that a two-sample t-test would
  need to detect the observed difference with 80% power.

modded-nanogpt accepts a speedrun record only with such a test over runs (its PR #45: a one-sample
t-test of four validation losses against 3.28, p = 0.0137); the same rule for any two configurations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.05  # the family-wise error rate of a report's comparisons (after Holm's correction)
RESAMPLES = 2000  # bootstrap resamples per interval
POWER = 0.8  # the chance of detecting a difference that the seeds-needed estimate asks for
MAX_SEEDS = 1000  # above this, "more than 1000": no experiment worth planning


@dataclass
class Comparison:
    """One configuration against the baseline, on one metric (``other - baseline``)."""

    n_baseline: int
    n_other: int
    paired: bool  # the seeds both sides share were compared pair by pair
    difference: float  # mean of other minus mean of baseline (paired: the mean per-seed difference)
    low: float  # the bootstrap interval of ``difference`` at 1 - level
    high: float
    p_value: float  # Welch's or the paired t-test, two-sided; NaN where a side has fewer than 2 seeds
    seeds_needed: int | None = None  # per side, for 80% power at the observed difference


def no_spread(values: np.ndarray) -> bool:
    """Whether ``values`` are equal up to rounding (a t-test of them would divide by rounding noise)."""
    return len(values) == 0 or np.ptp(values) <= 1e-9 * max(1.0, float(np.abs(values).max()))


def one_sample_p(values: np.ndarray, reference: float, alternative: str = "two-sided") -> float:
    """The p-value of Student's one-sample t-test of the mean of ``values`` against ``reference``
    (``alternative``: two-sided, less, greater); NaN for fewer than two values or no spread."""
    values = np.asarray(values, float)
    if len(values) < 2 or no_spread(values):
        return math.nan
    return float(stats.ttest_1samp(values, reference, alternative=alternative).pvalue)


def welch_p(baseline: np.ndarray, other: np.ndarray) -> float:
    """The two-sided p-value of Welch's t-test (unequal variances); NaN unless each side has two values
    and one side has some spread."""
    if len(baseline) < 2 or len(other) < 2 or (no_spread(baseline) and no_spread(other)):
        return math.nan
    return float(stats.ttest_ind(other, baseline, equal_var=False).pvalue)


def bootstrap_interval(
    baseline: np.ndarray,
    other: np.ndarray,
    level: float,
    rng: np.random.Generator,
    resamples: int = RESAMPLES,
) -> tuple[float, float]:
    """The percentile bootstrap interval (1 - ``level``) of mean(other) - mean(baseline), each side
    resampled with replacement on its own; NaN where a side has no value."""
    if len(baseline) == 0 or len(other) == 0:
        return math.nan, math.nan
    means_b = rng.choice(baseline, (resamples, len(baseline))).mean(axis=1)
    means_o = rng.choice(other, (resamples, len(other))).mean(axis=1)
    low, high = np.quantile(means_o - means_b, [level / 2, 1 - level / 2])
    return float(low), float(high)


def paired_interval(
    differences: np.ndarray, level: float, rng: np.random.Generator, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """The percentile bootstrap interval (1 - ``level``) of the mean per-seed difference, the pairs
    resampled with replacement."""
    means = rng.choice(differences, (resamples, len(differences))).mean(axis=1)
    low, high = np.quantile(means, [level / 2, 1 - level / 2])
    return float(low), float(high)


def compare(
    baseline: dict[int, float] | np.ndarray,
    other: dict[int, float] | np.ndarray,
    level: float = LEVEL,
    rng: np.random.Generator | None = None,
    resamples: int = RESAMPLES,
) -> Comparison:
    """``other`` against ``baseline``: values by seed (paired where both have two seeds or more in
    common, on those seeds only), or arrays of values (never paired)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    shared = (
        sorted(set(baseline) & set(other)) if isinstance(baseline, dict) and isinstance(other, dict) else []
    )
    if len(shared) >= 2:
        differences = np.array([other[s] - baseline[s] for s in shared], float)
        p = one_sample_p(differences, 0.0)
        if no_spread(differences) and differences[0] != 0:
            p = 0.0  # every seed moved by the same amount: no noise left to explain it
        low, high = paired_interval(differences, level, rng, resamples)
        result = Comparison(len(shared), len(shared), True, float(differences.mean()), low, high, p)
        spread = float(differences.std(ddof=1))
    else:
        b, o = (np.asarray(list(v.values()) if isinstance(v, dict) else v, float) for v in (baseline, other))
        low, high = bootstrap_interval(b, o, level, rng, resamples)
        difference = float(o.mean() - b.mean()) if len(b) and len(o) else math.nan
        result = Comparison(len(b), len(o), False, difference, low, high, welch_p(b, o))
        spread = pooled_std(b, o)
    result.seeds_needed = seeds_needed(result.difference, spread, level, paired=result.paired)
    return result


def pooled_std(a: np.ndarray, b: np.ndarray) -> float:
    """The pooled standard deviation of two samples (NaN where neither has two values)."""
    dof = max(len(a) - 1, 0) + max(len(b) - 1, 0)
    if dof == 0:
        return math.nan
    squares = (len(a) - 1) * (a.var(ddof=1) if len(a) > 1 else 0) + (len(b) - 1) * (
        b.var(ddof=1) if len(b) > 1 else 0
    )
    return float(math.sqrt(squares / dof))


def t_test_power(effect: float, n: int, level: float, paired: bool = False) -> float:
    """The power of the two-sided t-test at ``level`` to detect a standardised ``effect`` (difference
    over the std of one seed, or of one pair's difference where ``paired``) with ``n`` seeds per side:
    the noncentral t distribution's mass beyond the critical values."""
    dof = n - 1 if paired else 2 * n - 2
    noncentrality = effect * math.sqrt(n if paired else n / 2)
    critical = stats.t.ppf(1 - level / 2, dof)
    return float(stats.nct.sf(critical, dof, noncentrality) + stats.nct.cdf(-critical, dof, noncentrality))


def seeds_needed(
    difference: float, std: float, level: float, power: float = POWER, paired: bool = False
) -> int | None:
    """The least seeds per side (pairs where ``paired``) for the t-test at ``level`` to detect
    ``difference`` with ``power``, given the seed-to-seed ``std``; None where unknown (no spread, no
    difference), ``MAX_SEEDS + 1`` for more than ``MAX_SEEDS``."""
    if not (math.isfinite(difference) and math.isfinite(std)) or std == 0 or difference == 0:
        return None
    effect = abs(difference) / std
    # The normal approximation n = k (z_{1-level/2} + z_power)^2 / effect^2 (k = 2 seeds per side, 1 per
    # pair) is a lower bound (t has heavier tails than the normal): the search starts from it.
    z = stats.norm.ppf(1 - level / 2) + stats.norm.ppf(power)
    start = max(2, math.floor((1 if paired else 2) * (z / effect) ** 2))
    for n in range(start, MAX_SEEDS + 1):
        if t_test_power(effect, n, level, paired) >= power:
            return n
    return MAX_SEEDS + 1


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (NaN stays NaN and counts for nothing): a family of
    comparisons whose adjusted p-values are below the level holds its family-wise error at it."""
    p = np.asarray(p_values, float)
    known = np.flatnonzero(~np.isnan(p))
    order = known[np.argsort(p[known])]
    adjusted = np.full(len(p), math.nan)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def verdict(
    comparison: Comparison, p_adjusted: float, level: float, lower_is_better: bool, metric: str
) -> str:
    """``better (lower val/loss)``, ``worse (higher val/loss)``, ``no detectable difference at 0.05``,
    or why no test was made."""
    if math.isnan(p_adjusted):
        return "not tested: needs 2 seeds or more on each side"
    if p_adjusted >= level:
        return f"no detectable difference at {level:g}"
    lower = comparison.difference < 0
    direction = f"{'lower' if lower else 'higher'} {metric}"
    return f"{'better' if lower == lower_is_better else 'worse'} ({direction})"
