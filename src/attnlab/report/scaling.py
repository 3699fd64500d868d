"""Scaling laws fitted from a sweep's final losses, as Hoffmann et al. 2022 ("Chinchilla") fit them.

Each run is a point (N parameters, D training tokens, C training FLOPs, L final loss).

- **Approach 2, IsoFLOP profiles**: the runs of one compute budget, their loss as a parabola in
  log N; its minimum is that budget's compute-optimal N (and D, read off the budget's runs at that
  N). Across budgets, ``N_opt = k C^a`` and ``D_opt = k' C^b`` are straight lines in log-log.
- **Approach 3, the parametric law** ``L(N, D) = E + A / N^α + B / D^β``: the Huber loss (δ = 1e-3)
  of ``log L`` against ``LSE(a - α log N, b - β log D, e)`` (with A = e^a, B = e^b, E = e^e), minimised
  with L-BFGS from the best starts of the paper's grid. It implies ``a = β / (α + β)``, ``b = α / (α + β)``.
- **Bootstrap**: runs resampled with replacement and both fits redone; the 2.5 and 97.5 percentiles
  of each estimate are its 95% interval (Besiroglu et al. 2024 report their refit this way).

numpy and scipy only; the plots are in ``report/scaling_plots.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize
from scipy.special import huber, logsumexp

HUBER_DELTA = 1e-3  # Hoffmann et al. 2022, section 3.3
BUDGET_TOLERANCE_DEX = 0.1  # runs within 10**0.1 (26%) of compute share a budget
STARTS = 8  # L-BFGS runs from the best points of the grid
BOOTSTRAP_STARTS = 2  # the same, for each bootstrap refit (beside the full fit)
# Tight: the Huber objective is nearly piecewise linear, and L-BFGS's defaults stop near any start.
TOLERANCES = {"ftol": 1e-14, "gtol": 1e-10, "maxiter": 2000}
# The grid of initialisations of Hoffmann et al. 2022, appendix D.2 (α, β, e, a, b).
GRID = {
    "alpha": np.arange(0.0, 2.01, 0.5),
    "beta": np.arange(0.0, 2.01, 0.5),
    "e": np.arange(-1.0, 1.01, 0.5),
    "a": np.arange(0.0, 25.1, 5.0),
    "b": np.arange(0.0, 25.1, 5.0),
}
LAW_NAMES = ("E", "A", "B", "alpha", "beta", "a", "b")  # a, b: the exponents of N_opt and D_opt


@dataclass
class Runs:
    """The points a law is fitted to: parameters, training tokens, training FLOPs and final loss."""

    n: np.ndarray
    d: np.ndarray
    c: np.ndarray
    loss: np.ndarray

    def __post_init__(self) -> None:
        self.n, self.d, self.c, self.loss = (
            np.asarray(x, dtype=float) for x in (self.n, self.d, self.c, self.loss)
        )

    def take(self, index: np.ndarray) -> Runs:
        return Runs(self.n[index], self.d[index], self.c[index], self.loss[index])


@dataclass
class Profile:
    """One budget's IsoFLOP profile: ``loss = p[0] x² + p[1] x + p[2]`` with ``x = log N``, and its minimum."""

    budget: float  # FLOPs: the geometric mean of its runs' compute
    coeffs: np.ndarray
    n_opt: float
    d_opt: float
    runs: Runs


@dataclass
class PowerLaw:
    """``y = k C^exponent``: a straight line in log-log."""

    exponent: float
    log_k: float

    def __call__(self, c: np.ndarray) -> np.ndarray:
        return np.exp(self.log_k) * np.asarray(c, dtype=float) ** self.exponent


@dataclass
class Law:
    """``L(N, D) = E + A / N^alpha + B / D^beta`` and the Huber objective it reached."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float = float("nan")

    def __call__(self, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return (
            self.E
            + self.A / np.asarray(n, dtype=float) ** self.alpha
            + self.B / np.asarray(d, dtype=float) ** self.beta
        )

    def optimal_n(self, c: np.ndarray) -> np.ndarray:
        """The N that minimises the law at compute ``c`` spent as C = 6 N D (Hoffmann et al. 2022,
        eq. 4): ``G (C/6)^a`` with ``G = (alpha A / (beta B))^(1/(alpha+beta))``."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        return g * (np.asarray(c, dtype=float) / 6) ** self.values()["a"]

    def optimal_d(self, c: np.ndarray) -> np.ndarray:
        """The tokens that go with ``optimal_n`` at compute ``c`` (C = 6 N D)."""
        return np.asarray(c, dtype=float) / (6 * self.optimal_n(c))

    def values(self) -> dict[str, float]:
        """Its parameters and the allocation exponents it implies (N_opt ∝ C^a, D_opt ∝ C^b)."""
        total = self.alpha + self.beta or float("nan")  # a degenerate fit: no allocation exponents
        return {"E": self.E, "A": self.A, "B": self.B, "alpha": self.alpha, "beta": self.beta,
                "a": self.beta / total, "b": self.alpha / total}  # fmt: skip


@dataclass
class ScalingFit:
    """Both approaches on all runs, and 95% bootstrap intervals of every estimate."""

    runs: Runs
    profiles: list[Profile]
    n_opt: PowerLaw | None  # approach 2; None with fewer than two budgets that have a minimum
    d_opt: PowerLaw | None
    law: Law  # approach 3
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)

    def estimates(self) -> dict[str, float]:
        """Every estimate by name: the law's (approach 3) and ``a2``/``b2`` (approach 2's exponents)."""
        values = self.law.values()
        if self.n_opt is not None:
            values.update(a2=self.n_opt.exponent, b2=self.d_opt.exponent)
        return values


# -- approach 2 ---------------------------------------------------------------------------------------


def budget_groups(c: np.ndarray, tolerance_dex: float = BUDGET_TOLERANCE_DEX) -> np.ndarray:
    """A budget number per run: sorted by compute, a new budget starts where log10 C jumps by more than
    ``tolerance_dex`` (the runs of one budget spend about the same compute, not exactly)."""
    log_c = np.log10(c)
    order = np.argsort(log_c)
    starts = np.concatenate([[0], (np.diff(log_c[order]) > tolerance_dex).astype(int)])
    groups = np.empty(len(c), dtype=int)
    groups[order] = np.cumsum(starts)
    return groups


def isoflop_profile(runs: Runs) -> Profile | None:
    """The parabola in log N through one budget's losses (least squares), and its minimum. None
    with fewer than three sizes, or a parabola that opens downward or whose minimum lies outside the
    sizes tried (the minimum would be an extrapolation)."""
    log_n = np.log(runs.n)
    if len(np.unique(log_n)) < 3:
        return None
    coeffs = np.polyfit(log_n, runs.loss, 2)
    if coeffs[0] <= 0:
        return None
    x_opt = -coeffs[1] / (2 * coeffs[0])
    if not log_n.min() <= x_opt <= log_n.max():
        return None
    log_d_line = np.polyfit(log_n, np.log(runs.d), 1)  # on one budget, log D falls linearly with log N
    budget = float(np.exp(np.log(runs.c).mean()))
    return Profile(budget, coeffs, float(np.exp(x_opt)), float(np.exp(np.polyval(log_d_line, x_opt))), runs)


def isoflop_profiles(runs: Runs) -> list[Profile]:
    """The profile of every budget that has one, by increasing compute."""
    groups = budget_groups(runs.c)
    profiles = [isoflop_profile(runs.take(groups == g)) for g in np.unique(groups)]
    return [p for p in profiles if p is not None]


def power_law(c: np.ndarray, y: np.ndarray) -> PowerLaw:
    """``log y = exponent log C + log k`` by least squares."""
    exponent, log_k = np.polyfit(np.log(c), np.log(y), 1)
    return PowerLaw(float(exponent), float(log_k))


def optimal_allocation(profiles: list[Profile]) -> tuple[PowerLaw | None, PowerLaw | None]:
    """N_opt(C) and D_opt(C) through the profiles' minima; None for fewer than two budgets."""
    if len(profiles) < 2:
        return None, None
    c = np.array([p.budget for p in profiles])
    return power_law(c, np.array([p.n_opt for p in profiles])), power_law(
        c, np.array([p.d_opt for p in profiles])
    )


# -- approach 3 ---------------------------------------------------------------------------------------


def huber_objective(
    theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_loss: np.ndarray
) -> tuple[float, np.ndarray]:
    """Hoffmann et al. 2022, eq. 3 in log space, and its gradient: theta = (a, b, e, alpha, beta),
    ``sum Huber_δ(LSE(a - alpha log N, b - beta log D, e) - log L)``."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    top = terms.max(axis=0)
    exps = np.exp(terms - top)
    total = exps.sum(axis=0)
    residual = top + np.log(total) - log_loss  # LSE, computed stably
    slope = np.clip(residual, -HUBER_DELTA, HUBER_DELTA)  # Huber's derivative
    w = exps / total * slope  # d LSE / d term (a softmax), weighted by the loss's slope
    grad = np.array([w[0].sum(), w[1].sum(), w[2].sum(), -(w[0] * log_n).sum(), -(w[1] * log_d).sum()])
    return float(huber(HUBER_DELTA, residual).sum()), grad


def grid_starts(
    log_n: np.ndarray, log_d: np.ndarray, log_loss: np.ndarray, count: int = STARTS
) -> np.ndarray:
    """The ``count`` points of the paper's grid of initialisations with the lowest objective, each
    (a, b, e, alpha, beta): every point is evaluated at once, and L-BFGS runs only from the best."""
    alpha, beta, e, a, b = (g.ravel() for g in np.meshgrid(*GRID.values(), indexing="ij"))
    theta = np.stack([a, b, e, alpha, beta], axis=1)
    terms = np.stack([a[:, None] - alpha[:, None] * log_n, b[:, None] - beta[:, None] * log_d,
                      np.broadcast_to(e[:, None], (len(e), len(log_n)))])  # fmt: skip
    objective = huber(HUBER_DELTA, logsumexp(terms, axis=0) - log_loss).sum(axis=1)
    return theta[np.argsort(objective)[:count]]


def fit_law(runs: Runs, starts: np.ndarray | None = None) -> Law:
    """Approach 3: L-BFGS (scipy) from each start (default: the best of the paper's grid); the fit with
    the lowest objective wins."""
    data = (np.log(runs.n), np.log(runs.d), np.log(runs.loss))
    starts = grid_starts(*data) if starts is None else starts
    best = min(
        (
            minimize(huber_objective, x0, args=data, jac=True, method="L-BFGS-B", options=TOLERANCES)
            for x0 in starts
        ),
        key=lambda result: result.fun,
    )
    a, b, e, alpha, beta = best.x
    return Law(
        float(np.exp(e)), float(np.exp(a)), float(np.exp(b)), float(alpha), float(beta), float(best.fun)
    )


def law_start(law: Law) -> np.ndarray:
    """A fitted law as a starting point (a, b, e, alpha, beta)."""
    return np.array([np.log(law.A), np.log(law.B), np.log(law.E), law.alpha, law.beta])


# -- both, with intervals -----------------------------------------------------------------------------


def fit_scaling(runs: Runs, resamples: int = 200, seed: int = 0) -> ScalingFit:
    """Both approaches on ``runs``, and 95% intervals from ``resamples`` bootstrap refits."""
    profiles = isoflop_profiles(runs)
    n_opt, d_opt = optimal_allocation(profiles)
    law = fit_law(runs)
    fit = ScalingFit(runs, profiles, n_opt, d_opt, law)
    fit.intervals = bootstrap_intervals(fit, resamples, seed) if resamples else {}
    return fit


def bootstrap_intervals(fit: ScalingFit, resamples: int, seed: int) -> dict[str, tuple[float, float]]:
    """The 2.5 and 97.5 percentiles of each estimate over fits to runs drawn with replacement. Each
    refit of the law starts from the full fit and from the grid's few best points for its own sample."""
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {}
    for _ in range(resamples):
        runs = fit.runs.take(rng.integers(0, len(fit.runs.n), len(fit.runs.n)))
        data = (np.log(runs.n), np.log(runs.d), np.log(runs.loss))
        starts = np.vstack([law_start(fit.law), grid_starts(*data, count=BOOTSTRAP_STARTS)])
        values = fit_law(runs, starts).values()
        n_opt, d_opt = optimal_allocation(isoflop_profiles(runs))
        if n_opt is not None:
            values.update(a2=n_opt.exponent, b2=d_opt.exponent)
        for name, value in values.items():
            samples.setdefault(name, []).append(value)
    return {
        name: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for name, v in samples.items()
    }


def synthetic_runs(
    law: Law, budgets: np.ndarray, sizes_per_budget: int, noise: float, seed: int = 0, span_dex: float = 1.0
) -> Runs:
    """Runs on an IsoFLOP grid (C = 6 N D) whose losses follow ``law`` times ``1 + noise * N(0, 1)``:
    per budget, ``sizes_per_budget`` sizes spread over ``span_dex`` decades on both sides of the
    law's compute-optimal N. For tests, and to see what a sweep of a given shape can resolve."""
    rng = np.random.default_rng(seed)
    n = np.concatenate(
        [law.optimal_n(c) * np.logspace(-span_dex, span_dex, sizes_per_budget) for c in budgets]
    )
    c = np.repeat(np.asarray(budgets, dtype=float), sizes_per_budget)
    d = c / (6 * n)
    loss = law(n, d) * (1 + noise * rng.standard_normal(len(n)))
    return Runs(n, d, c, loss)
