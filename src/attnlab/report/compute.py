"""Compute as an axis: each logged point of a run placed at its optimizer step, tokens trained on,
training FLOPs (Chinchilla's count) or wall time, and a metric read off a run's curve at a matched
budget of one of them, interpolated linearly between the run's logged points, never extrapolated.

Runs that differ in size or speed reach a given step at different costs: "B is better than A" holds
at equal compute, or it is not a claim (nanochat compares at equal steps, wall time and FLOPs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlab.report.runs import ReportError
from attnlab.report.sweep import Sweep

AXES = {
    "step": "optimizer step",
    "tokens": "tokens trained on (log scale)",
    "flops": "training FLOPs (Chinchilla's count, log scale)",
    "time": "wall time of training (s)",
}


def curve_axes(sweep: Sweep, curves: pd.DataFrame) -> dict[str, pd.Series]:
    """The x values of each curve point: the step; where every run's summary says how many tokens it
    trained on (and its FLOPs per token), the tokens and FLOPs at that step (tokens per step = tokens
    over steps); and the wall time where every line has one (``time_s`` of metrics.jsonl, which a
    resumed run continues from before its kill)."""
    axes = {"step": curves["step"]}
    runs = sweep.runs.loc[curves["job"].unique()]
    per_step = runs["train_tokens"] / runs["final_step"]
    if per_step.notna().all() and (per_step > 0).all():
        tokens = curves["step"] * per_step[curves["job"]].to_numpy()
        axes["tokens"] = tokens
        if runs["flops_per_token"].notna().all():
            axes["flops"] = tokens * runs["flops_per_token"][curves["job"]].to_numpy()
    if "time_s" in curves and curves["time_s"].notna().all() and len(curves):
        axes["time"] = curves["time_s"]
    return axes


@dataclass
class Budget:
    """A matched budget: ``axis`` (step, tokens, flops, time) and its value; ``auto`` where the value is
    the most that every run reached."""

    axis: str
    value: float
    auto: bool = False

    def text(self) -> str:
        unit = {"step": "steps", "tokens": "tokens", "flops": "FLOPs", "time": "s of wall time"}[self.axis]
        how = " (the most every run reached)" if self.auto else ""
        return f"{self.value:.4g} {unit}{how}"


def parse_budget(text: str) -> tuple[str, float | None]:
    """``tokens=2e6`` as ("tokens", 2e6); ``tokens`` alone as ("tokens", None): the most every run
    reached. ReportError naming the option for anything else."""
    axis, _, value = text.partition("=")
    if axis not in AXES:
        raise ReportError(f"--budget={text}: choose an axis of {', '.join(AXES)}, as tokens=2e6 or tokens")
    if not value:
        return axis, None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not number > 0 or not math.isfinite(number):
        raise ReportError(f"--budget={text}: the budget must be a positive number, as {axis}=2e6")
    return axis, number


def points(curves: pd.DataFrame, x: pd.Series, metric: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per job, the (x, value) of its logged values of ``metric``, in the order of x."""
    rows = curves.assign(x=x.to_numpy()).dropna(subset=[metric, "x"]).sort_values("x")
    return {job: (r["x"].to_numpy(float), r[metric].to_numpy(float)) for job, r in rows.groupby("job")}


def value_at(x: np.ndarray, y: np.ndarray, budget: float) -> float:
    """``y`` at ``budget`` linearly interpolated between the logged points around it; NaN outside the
    points (before the first, after the last: a budget the run did not reach is not extrapolated)."""
    if len(x) == 0 or budget < x[0] or budget > x[-1]:
        return math.nan
    return float(np.interp(budget, x, y))


def values_at_budget(
    sweep: Sweep, jobs: pd.Index, metric: str, axis: str, value: float | None
) -> tuple[pd.Series, Budget]:
    """The value of ``metric`` of each of ``jobs`` at the budget (``value`` on ``axis``, or the most
    every job reached), NaN for a job that did not reach it; and the budget. ReportError where the
    runs do not record the axis."""
    curves = sweep.curves[sweep.curves["job"].isin(jobs)]
    if metric not in curves:
        raise ReportError(f"--budget={axis}: no run logged {metric} during training")
    axes = curve_axes(sweep, curves)
    if axis not in axes:
        raise ReportError(
            f"--budget={axis}: not every run records it (tokens need summary.json's train_tokens, FLOPs "
            "its flops_per_token too, time the time_s of metrics.jsonl); choose one of " + ", ".join(axes)
        )
    logged = points(curves, axes[axis], metric)
    if value is None:
        reached = [x[-1] for x in (logged.get(job, (np.array([]), None))[0] for job in jobs) if len(x)]
        if not reached:
            raise ReportError(f"--budget={axis}: no run logged {metric}")
        budget = Budget(axis, float(min(reached)), auto=True)
    else:
        budget = Budget(axis, value)
    empty = (np.array([]), np.array([]))
    values = [value_at(*logged.get(job, empty), budget.value) for job in jobs]
    return pd.Series(values, index=jobs, dtype=float), budget
