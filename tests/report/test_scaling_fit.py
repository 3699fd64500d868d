"""The scaling fits recover known laws from synthetic runs generated from them."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.report.scaling import Law, Runs, budget_groups, fit_scaling, isoflop_profile, synthetic_runs

HOFFMANN_2022 = Law(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # approach 3 of the paper
BESIROGLU_2024 = Law(E=1.82, A=482.0, B=2085.4, alpha=0.348, beta=0.366)  # their refit of its data
BUDGETS = np.logspace(18, 21, 4)  # FLOPs


@pytest.mark.parametrize("law", [HOFFMANN_2022, BESIROGLU_2024], ids=["hoffmann2022", "besiroglu2024"])
def test_both_approaches_recover_the_law_the_runs_follow(law: Law) -> None:
    runs = synthetic_runs(law, BUDGETS, sizes_per_budget=7, noise=0.005, seed=1)
    fit = fit_scaling(runs, resamples=12, seed=0)
    for name in ("alpha", "beta"):  # approach 3
        truth = getattr(law, name)
        assert fit.estimates()[name] == pytest.approx(truth, abs=0.03)
        low, high = fit.intervals[name]
        assert low <= truth <= high, (name, low, high)
    a = law.beta / (law.alpha + law.beta)  # N_opt ∝ C^a follows from the law
    assert fit.n_opt.exponent == pytest.approx(a, abs=0.05)  # approach 2
    assert fit.d_opt.exponent == pytest.approx(1 - a, abs=0.05)
    assert len(fit.profiles) == len(BUDGETS)


def test_a_wrong_law_is_not_recovered() -> None:
    """The check above can fail: runs from one law are far from the other's exponents."""
    runs = synthetic_runs(HOFFMANN_2022, BUDGETS, sizes_per_budget=7, noise=0.005, seed=1)
    fit = fit_scaling(runs, resamples=0)
    assert abs(fit.estimates()["beta"] - BESIROGLU_2024.beta) > 0.05


def test_an_isoflop_profile_finds_the_minimum_of_its_parabola() -> None:
    n = np.logspace(6, 8, 5)
    loss = 2.0 + 0.1 * (np.log(n) - np.log(3e7)) ** 2
    c = np.full(5, 1e18)
    profile = isoflop_profile(Runs(n, c / (6 * n), c, loss))
    assert profile.n_opt == pytest.approx(3e7, rel=1e-6)
    assert profile.d_opt == pytest.approx(1e18 / (6 * 3e7), rel=1e-6)


def test_an_isoflop_profile_whose_minimum_lies_outside_the_sizes_is_refused() -> None:
    n = np.logspace(6, 8, 5)
    loss = 2.0 + 0.1 * (np.log(n) - np.log(1e9)) ** 2  # still falling at the largest size
    c = np.full(5, 1e18)
    assert isoflop_profile(Runs(n, c / (6 * n), c, loss)) is None


def test_runs_of_nearly_equal_compute_share_a_budget() -> None:
    groups = budget_groups(np.array([1e18, 1.1e18, 9.5e17, 1e19, 1.05e19]))
    assert list(groups) == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("law", [HOFFMANN_2022, BESIROGLU_2024], ids=["hoffmann2022", "besiroglu2024"])
def test_the_laws_optimal_allocation_minimises_it_at_fixed_compute(law: Law) -> None:
    """Along C = 6 N D, the law's loss is lowest at optimal_n (a grid of 2,001 sizes over four
    decades), and optimal_d spends the rest of the compute."""
    c = 1e21
    n = np.logspace(8, 12, 2001)
    best = n[np.argmin(law(n, c / (6 * n)))]
    assert law.optimal_n(c) == pytest.approx(best, rel=0.005)
    assert 6 * law.optimal_n(c) * law.optimal_d(c) == pytest.approx(c)
    assert law.optimal_n(8 * c) / law.optimal_n(c) == pytest.approx(8 ** law.values()["a"])
