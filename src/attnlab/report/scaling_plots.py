"""The scaling fit in a report: its table (markdown) and three PNGs.

- ``isoflop.png``: final loss against parameters, one colour per compute budget, each budget's fitted
  parabola in log N and its minimum (approach 2);
- ``loss_vs_flops.png``: every run's final loss against its training FLOPs, coloured by size;
- ``law_fit.png``: every run's final loss against its tokens, one colour per size, and the fitted law
  L(N, D) of approach 3 through each size's tokens (the check of the fit by eye);
- ``optimal_allocation.png``: the compute-optimal N and D of each budget against C, the fitted power
  laws and their 95% bootstrap bands, beside the allocation the law of approach 3 implies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import LogNorm

from attnlab.report.plots import new_figure, save
from attnlab.report.scaling import PowerLaw, ScalingFit

LOSS_LABEL = "final loss (nats per token)"
PARAMS_LABEL = "parameters N (all, embeddings included)"
TOKENS_LABEL = "training tokens D"
FLOPS_LABEL = "training compute C (FLOPs, Chinchilla's count)"
DESCRIPTIONS = {
    "E": "irreducible loss (nats per token)",
    "A": "parameter term's coefficient",
    "B": "data term's coefficient",
    "alpha": "parameter exponent α",
    "beta": "data exponent β",
    "a": "N_opt ∝ C^a, from the law: β/(α+β)",
    "b": "D_opt ∝ C^b, from the law: α/(α+β)",
    "a2": "N_opt ∝ C^a, IsoFLOP minima (approach 2)",
    "b2": "D_opt ∝ C^b, IsoFLOP minima (approach 2)",
}


def scaling_table(fit: ScalingFit) -> pd.DataFrame:
    """One row per estimate: its value on all runs and its 95% bootstrap interval."""
    rows = []
    for name, value in fit.estimates().items():
        low, high = fit.intervals.get(name, (np.nan, np.nan))
        rows.append({"estimate": name, "meaning": DESCRIPTIONS[name], "value": f"{value:.4g}",
                     "95% interval": f"[{low:.4g}, {high:.4g}]"})  # fmt: skip
    return pd.DataFrame(rows)


def profile_table(fit: ScalingFit) -> pd.DataFrame:
    """One row per budget whose IsoFLOP parabola has its minimum inside the sizes tried: the budget,
    its runs, the minimum's N, D, tokens per parameter and loss (approach 2's points)."""
    rows = [{"budget C (FLOPs)": f"{p.budget:.4g}", "runs": len(p.runs.n), "N_opt": f"{p.n_opt:,.0f}",
             "D_opt": f"{p.d_opt:,.0f}", "D_opt / N_opt": f"{p.d_opt / p.n_opt:.3g}",
             "loss at the minimum": f"{np.polyval(p.coeffs, np.log(p.n_opt)):.4f}"}
            for p in fit.profiles]  # fmt: skip
    return pd.DataFrame(rows)


def scaling_plots(fit: ScalingFit, out_dir: Path) -> list[Path]:
    """The loss against compute of every run, and where some budget's profile has a minimum inside
    its sizes (approach 2), the IsoFLOP profiles and the allocation they give."""
    if not fit.profiles:
        return [loss_vs_flops_plot(fit, out_dir), law_plot(fit, out_dir)]
    return [isoflop_plot(fit, out_dir), loss_vs_flops_plot(fit, out_dir), law_plot(fit, out_dir),
            allocation_plot(fit, out_dir)]  # fmt: skip


def isoflop_plot(fit: ScalingFit, out_dir: Path) -> Path:
    fig, ax = new_figure()
    colours = colormaps["viridis"](np.linspace(0, 0.9, max(len(fit.profiles), 1)))
    for profile, colour in zip(fit.profiles, colours):
        runs = profile.runs
        ax.scatter(runs.n, runs.loss, color=colour, label=f"C = {profile.budget:.2g} FLOPs")
        x = np.linspace(np.log(runs.n.min()), np.log(runs.n.max()), 100)
        ax.plot(np.exp(x), np.polyval(profile.coeffs, x), color=colour)
        ax.scatter([profile.n_opt], [np.polyval(profile.coeffs, np.log(profile.n_opt))], marker="*", s=150,
                   color=colour, edgecolor="black", zorder=3)  # fmt: skip
    ax.scatter([], [], marker="*", s=150, color="white", edgecolor="black", label="parabola's minimum")
    ax.set(xscale="log", xlabel=PARAMS_LABEL, ylabel=LOSS_LABEL,
           title="IsoFLOP profiles: parabolas in log N, minima starred")  # fmt: skip
    ax.legend(title="compute budget", fontsize="small")
    return save(fig, out_dir / "isoflop.png")


def loss_vs_flops_plot(fit: ScalingFit, out_dir: Path) -> Path:
    fig, ax = new_figure()
    runs = fit.runs
    points = ax.scatter(runs.c, runs.loss, c=np.log10(runs.n), cmap="viridis")
    fig.colorbar(points, ax=ax, label="log10 of the parameters N")
    ax.set(xscale="log", xlabel=FLOPS_LABEL, ylabel=LOSS_LABEL, title="Every run: final loss against compute")
    return save(fig, out_dir / "loss_vs_flops.png")


def law_plot(fit: ScalingFit, out_dir: Path) -> Path:
    """The runs' losses against their tokens, coloured by size, and the fitted law at each size over
    the tokens that size was trained on; E, the loss no size or length goes below, dotted."""
    fig, ax = new_figure()
    runs, law = fit.runs, fit.law
    norm = LogNorm(runs.n.min(), runs.n.max())
    points = ax.scatter(runs.d, runs.loss, c=runs.n, cmap="viridis", norm=norm, zorder=3)
    fig.colorbar(points, ax=ax, label=PARAMS_LABEL)
    for n in np.unique(runs.n):
        d = runs.d[runs.n == n]
        line = np.logspace(np.log10(d.min()), np.log10(d.max()), 50)
        ax.plot(line, law(n, line), color=colormaps["viridis"](norm(n)))
    ax.plot([], [], color="grey", label="the law at each size N")
    ax.axhline(law.E, color="grey", linestyle=":", label=f"E = {law.E:.3g} (irreducible)")
    ax.set(xscale="log", xlabel=TOKENS_LABEL, ylabel=LOSS_LABEL,
           title=f"Fitted law E + A/N^α + B/D^β, α = {law.alpha:.3f}, β = {law.beta:.3f}")  # fmt: skip
    ax.legend(fontsize="small")
    return save(fig, out_dir / "law_fit.png")


def allocation_plot(fit: ScalingFit, out_dir: Path) -> Path:
    fig, ax = new_figure()
    c = np.array([p.budget for p in fit.profiles])
    ax.scatter(c, [p.n_opt for p in fit.profiles], color="C0", label="N_opt (parameters), IsoFLOP minima")
    ax.scatter(c, [p.d_opt for p in fit.profiles], color="C1", label="D_opt (tokens), IsoFLOP minima")
    grid = np.logspace(np.log10(c.min()), np.log10(c.max()), 50)
    if fit.n_opt is not None:
        power_line(ax, grid, fit.n_opt, fit.intervals.get("a2"), "C0", "N_opt")
        power_line(ax, grid, fit.d_opt, fit.intervals.get("b2"), "C1", "D_opt")
    law, values = fit.law, fit.law.values()
    ax.plot(grid, law.optimal_n(grid), color="C0", linestyle="--",
            label=f"N_opt of the fitted law ∝ C^{values['a']:.3f} (C = 6ND)")  # fmt: skip
    ax.plot(grid, law.optimal_d(grid), color="C1", linestyle="--",
            label=f"D_opt of the fitted law ∝ C^{values['b']:.3f} (C = 6ND)")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel=FLOPS_LABEL, ylabel="parameters N or tokens D",
           title="Compute-optimal allocation, 95% bootstrap bands")  # fmt: skip
    fig.set_size_inches(7.5, 6.5)
    fig.legend(fontsize="small", loc="outside lower center", ncols=2)
    return save(fig, out_dir / "optimal_allocation.png")


def power_line(ax: object, c: np.ndarray, law: PowerLaw, interval: tuple[float, float] | None,
               colour: str, name: str) -> None:  # fmt: skip
    """The fitted line, and the band of lines through the geometric mean of C whose exponents span the
    interval (the band of the exponent, pivoting where the fit is best determined)."""
    ax.plot(c, law(c), color=colour, label=f"{name} ∝ C^{law.exponent:.3f}")
    if interval is None:
        return
    pivot = np.exp(np.log(c).mean())
    ends = [law(pivot) * (c / pivot) ** exponent for exponent in interval]
    ax.fill_between(c, np.minimum(*ends), np.maximum(*ends), color=colour, alpha=0.2,
                    label=f"{name} exponent in [{interval[0]:.3f}, {interval[1]:.3f}]")  # fmt: skip
