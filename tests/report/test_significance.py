"""The statistics of the report's decisions against known answers: a published t-test, the false
positive rate of seed noise, the power to find a planted improvement, Holm's correction by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.report.significance import (
    compare,
    holm,
    one_sample_p,
    seeds_needed,
    t_test_power,
    verdict,
    welch_p,
)

# modded-nanogpt PR #45 ("Value Embed Unet", 2024-12-07): four final validation losses, tested
# against the record's target 3.28 with scipy.stats.ttest_1samp(..., alternative='less'): p=0.0137.
PR45_LOSSES = [3.2772, 3.2756, 3.2784, 3.2783]


def test_one_sample_t_of_modded_nanogpt_pr45_gives_its_p_value() -> None:
    assert one_sample_p(np.array(PR45_LOSSES), 3.28, alternative="less") == pytest.approx(0.0137, abs=5e-5)


def test_one_sample_t_statistic_by_hand() -> None:
    """t = (mean - 3.28) / (s / sqrt(n)) = -4.0315 with 3 degrees of freedom; the two-sided p-value is
    twice the one-sided one."""
    x = np.array(PR45_LOSSES)
    t = (x.mean() - 3.28) / (x.std(ddof=1) / math.sqrt(len(x)))
    assert t == pytest.approx(-4.0315, abs=1e-4)
    assert one_sample_p(x, 3.28) == pytest.approx(2 * one_sample_p(x, 3.28, "less"))


def test_seed_noise_is_declared_a_difference_in_5_percent_of_resamples() -> None:
    """Two configurations that differ only in seed: 5 seeds each drawn from one pool of 40 seeds'
    losses. At the 0.05 level, Welch's test may call 5% of such pairs different (here 5% ± 3%)."""
    rng = np.random.default_rng(1234)
    pool = 3.3 + 0.01 * rng.standard_normal(40)
    draws = 500
    declared = 0
    for _ in range(draws):
        a, b = rng.choice(pool, 5), rng.choice(pool, 5)
        declared += compare(a, b, rng=rng, resamples=50).p_value < 0.05
    assert 0.02 <= declared / draws <= 0.08


def test_paired_seed_noise_is_declared_a_difference_in_5_percent_of_resamples() -> None:
    rng = np.random.default_rng(99)
    pool = 3.3 + 0.01 * rng.standard_normal(40)
    draws, declared = 500, 0
    for _ in range(draws):
        a, b = rng.choice(pool, 5), rng.choice(pool, 5)
        result = compare(dict(enumerate(a)), dict(enumerate(b)), rng=rng, resamples=50)
        assert result.paired
        declared += result.p_value < 0.05
    assert 0.02 <= declared / draws <= 0.08


def test_an_improvement_of_three_standard_deviations_is_found_with_5_seeds() -> None:
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(200):
        base = 3.30 + 0.01 * rng.standard_normal(5)
        better = 3.27 + 0.01 * rng.standard_normal(5)
        result = compare(base, better, rng=rng, resamples=200)
        found += verdict(result, result.p_value, 0.05, True, "val/loss") == "better (lower val/loss)"
    assert found / 200 >= 0.95


def test_the_planted_improvement_has_its_interval_around_it() -> None:
    rng = np.random.default_rng(3)
    base = 3.30 + 0.01 * rng.standard_normal(5)
    better = 3.27 + 0.01 * rng.standard_normal(5)
    result = compare(base, better, rng=rng)
    assert result.low < better.mean() - base.mean() < result.high < 0
    assert result.difference == pytest.approx(better.mean() - base.mean())


def test_pairs_share_seeds_and_drop_the_others() -> None:
    """Seed 3 of the baseline has no partner: the pairs are seeds 1 and 2; every seed moved by -0.1."""
    result = compare({1: 3.0, 2: 3.2, 3: 9.0}, {1: 2.9, 2: 3.1})
    assert result.paired and result.n_other == 2
    assert result.difference == pytest.approx(-0.1)
    assert result.p_value == 0.0


def test_one_seed_a_side_is_not_tested() -> None:
    result = compare(np.array([3.0]), np.array([2.0]))
    assert math.isnan(result.p_value) and result.seeds_needed is None
    assert verdict(result, math.nan, 0.05, True, "val/loss").startswith("not tested")


def test_welch_against_its_formula() -> None:
    """Welch's t and its Welch-Satterthwaite degrees of freedom by hand, the p-value from scipy's t."""
    from scipy import stats

    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 4.0, 6.0, 8.0, 10.0])
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    t = (b.mean() - a.mean()) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    assert welch_p(a, b) == pytest.approx(2 * stats.t.sf(abs(t), dof))


def test_holm_by_hand() -> None:
    """Sorted 0.01, 0.02, 0.04 times 3, 2, 1, made monotone; NaN stays out of the count."""
    assert holm([0.04, 0.01, math.nan, 0.02]) == pytest.approx([0.04, 0.03, math.nan, 0.04], nan_ok=True)


def test_seeds_needed_gives_the_power_asked() -> None:
    """A difference of one standard deviation needs 17 seeds per side for 80% power at 0.05 (the
    textbook figure for a two-sample t-test, d = 1); one fewer falls short."""
    n = seeds_needed(0.01, 0.01, 0.05)
    assert n == 17
    assert t_test_power(1.0, n, 0.05) >= 0.8 > t_test_power(1.0, n - 1, 0.05)


def test_verdict_says_which_way_is_better() -> None:
    result = compare(np.array([0.5, 0.51, 0.52]), np.array([0.7, 0.71, 0.72]))
    assert verdict(result, result.p_value, 0.05, False, "val/acc") == "better (higher val/acc)"
    assert verdict(result, result.p_value, 0.05, True, "val/loss") == "worse (higher val/loss)"
    assert verdict(result, 0.2, 0.05, True, "val/loss") == "no detectable difference at 0.05"
