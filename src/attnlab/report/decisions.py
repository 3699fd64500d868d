"""The report's decisions: each configuration against a baseline on one metric, over seeds (the final
value, or the value at a matched budget of compute, ``report.compute``), and the time each
configuration took to reach a target (``trainer.target_metric``), with intervals
(``report.significance``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnlab.report.compute import Budget, parse_budget, values_at_budget
from attnlab.report.runs import ReportError
from attnlab.report.significance import LEVEL, MAX_SEEDS, compare, holm, verdict
from attnlab.report.sweep import SEED, Sweep, metric_mode
from attnlab.report.table import FINISHED, configuration_labels, format_number, shown_keys

TARGET_FIGURES = {"step": "steps", "tokens": "tokens", "flops": "FLOPs", "wall_time_s": "wall time (s)"}


@dataclass
class Decisions:
    """What the report decides with, from the command line: the baseline configuration (its label, or
    ``key=value`` parts of it; None: the first), the level of the tests, the matched budget
    (``tokens=2e6``, or an axis alone: the most every run reached; None: the final values)."""

    baseline: str | None = None
    level: float = LEVEL
    budget: str | None = None
    resolved_baseline: str | None = field(default=None, init=False)  # the label chosen
    matched: Budget | None = field(default=None, init=False)  # the budget compared at
    short: list[str] = field(default_factory=list, init=False)  # jobs that did not reach it


def labels_of(sweep: Sweep) -> pd.Series:
    """Each job's configuration label (its shown config keys but the seed)."""
    keys, _ = shown_keys(sweep.configs)
    return configuration_labels(sweep.configs, keys)


def choose_baseline(labels: pd.Series, given: str | None) -> str:
    """The configuration named ``given`` (its whole label, or ``key=value`` parts of it that only
    one configuration has), else the first. ReportError naming the configurations otherwise."""
    names = list(dict.fromkeys(labels))
    if given is None or given in names:
        return names[0] if given is None else given
    parts = {p.strip() for p in given.split(",")}
    found = [n for n in names if parts <= {p.strip() for p in n.split(",")}]
    if len(found) == 1:
        return found[0]
    what = "matches several configurations" if found else "names no configuration"
    raise ReportError(f"--baseline={given}: {what}; the configurations: {'; '.join(names)}")


def seed_values(values: pd.Series, labels: pd.Series, seeds: pd.Series) -> dict[str, dict[int, float]]:
    """Per configuration, its values by seed (the jobs with a value)."""
    known = values.dropna()
    table: dict[str, dict[int, float]] = {}
    for job, value in known.items():
        table.setdefault(labels[job], {})[seeds[job]] = float(value)
    return table


def compared_values(sweep: Sweep, decisions: Decisions, metric: str) -> pd.Series:
    """Each finished job's value of ``metric``: its final one, or at the matched budget (the jobs that
    did not reach it are recorded in ``decisions.short``)."""
    finished = sweep.runs.index[sweep.runs["status"].isin(FINISHED)]
    if decisions.budget is None:
        return sweep.runs.loc[finished, f"{metric} final"]
    axis, value = parse_budget(decisions.budget)
    values, decisions.matched = values_at_budget(sweep, finished, metric, axis, value)
    decisions.short = list(values.index[values.isna()])
    return values


def significance_table(sweep: Sweep, decisions: Decisions, metric: str) -> pd.DataFrame | None:
    """One row per configuration: its seeds, mean, and against the baseline the difference with its
    interval, the test and its p-value, Holm's adjusted p-value, the verdict, and the seeds that would
    detect the difference. None unless seeds are swept and there are two configurations or more."""
    keys, _ = shown_keys(sweep.configs)
    labels = labels_of(sweep)
    if SEED not in keys or labels.nunique() < 2 or f"{metric} final" not in sweep.runs:
        return None
    decisions.resolved_baseline = base = choose_baseline(labels, decisions.baseline)
    values = compared_values(sweep, decisions, metric)
    by_seed = seed_values(values, labels, sweep.configs[SEED])
    others = [name for name in dict.fromkeys(labels) if name != base]
    rng = np.random.default_rng(0)  # the intervals of a report are the same each time it is made
    empty: dict[int, float] = {}
    results = [compare(by_seed.get(base, empty), by_seed.get(n, empty), decisions.level, rng) for n in others]
    adjusted = holm([r.p_value for r in results])
    lower_is_better = metric_mode(metric, monitor_modes(sweep)) == "min"
    rows = [baseline_row(base, by_seed.get(base, empty))]
    for name, result, p in zip(others, results, adjusted):
        seeds_row = {"configuration": name, "n": f"{result.n_other}" + (" paired" if result.paired else "")}
        rows.append(
            {
                **seeds_row,
                "mean": format_number(np.mean(list(by_seed.get(name, empty).values()) or [math.nan])),
                "difference": format_number(result.difference),
                f"{1 - decisions.level:.0%} interval": interval_text(result.low, result.high),
                "test": ("paired t" if result.paired else "Welch t")
                if not math.isnan(result.p_value)
                else "",
                "p": format_number(result.p_value, 2),
                "p (Holm)": format_number(p, 2),
                "verdict": verdict(result, p, decisions.level, lower_is_better, metric),
                "seeds needed": needed_text(result.seeds_needed) if not p < decisions.level else "",
            }
        )
    return pd.DataFrame(rows).fillna("")


def baseline_row(name: str, values: dict[int, float]) -> dict[str, str]:
    mean = np.mean(list(values.values())) if values else math.nan
    return {"configuration": name, "n": str(len(values)), "mean": format_number(mean), "verdict": "baseline"}


def interval_text(low: float, high: float) -> str:
    return "" if math.isnan(low) else f"[{format_number(low)}, {format_number(high)}]"


def needed_text(seeds: int | None) -> str:
    if seeds is None:
        return ""
    return f"> {MAX_SEEDS}" if seeds > MAX_SEEDS else str(seeds)


def monitor_modes(sweep: Sweep) -> dict[str, str]:
    """Each monitored metric's ``task.monitor_mode``, as the runs' configs give it."""
    monitors = sweep.configs.get("task.monitor", pd.Series(dtype=object))
    modes = sweep.configs.get("task.monitor_mode", pd.Series(dtype=object))
    return {m: str(mode) for m, mode in zip(monitors, modes) if m is not None and mode is not None}


def target_table(sweep: Sweep, level: float = LEVEL) -> pd.DataFrame | None:
    """One row per configuration of runs that had a target (``trainer.target_metric``): how many of its
    seeds reached it, and the mean with its bootstrap interval of the steps, tokens, FLOPs and wall
    time to it over the seeds that did. None where no run had a target."""
    if "target metric" not in sweep.runs:
        return None
    runs = sweep.runs[sweep.runs["target metric"].notna()]
    labels = labels_of(sweep)[runs.index]
    rng = np.random.default_rng(0)  # the same intervals each time the report is made
    rows = []
    for name, group in runs.groupby(labels, sort=False):
        reached = group[group["target reached"].astype(bool)]
        first = group.iloc[0]
        sign = "<=" if first["target mode"] != "max" else ">="
        row = {
            "configuration": name,
            "target": f"{first['target metric']} {sign} {first['target value']:g}",
            "reached": f"{len(reached)}/{len(group)}",
        }
        for key, title in TARGET_FIGURES.items():
            numbers = pd.to_numeric(reached[f"target {key}"], errors="coerce").dropna().to_numpy(float)
            row[title] = mean_interval_text(numbers, level, rng)
        rows.append(row)
    return pd.DataFrame(rows)


def mean_interval_text(values: np.ndarray, level: float, rng: np.random.Generator) -> str:
    """``mean [low, high]``: the percentile bootstrap interval of the mean; the mean alone for one value."""
    if len(values) == 0:
        return ""
    if len(values) == 1:
        return format_number(values[0])
    means = rng.choice(values, (2000, len(values))).mean(axis=1)
    low, high = np.quantile(means, [level / 2, 1 - level / 2])
    return f"{format_number(values.mean())} [{format_number(low)}, {format_number(high)}]"
