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
from attnlab.report.table import FINISHED, as_text, configuration_labels, format_number, shown_keys

TARGET_FIGURES = {"step": "steps", "tokens": "tokens", "flops": "FLOPs", "wall_time_s": "wall time (s)"}

COMPUTE_BUDGET = "trainer.compute_budget"


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
    other_compute: list[str] = field(default_factory=list, init=False)  # left out: another compute budget


def labels_of(sweep: Sweep) -> pd.Series:
    """Each job's configuration label (its shown config keys but the seed)."""
    keys, _ = shown_keys(sweep.configs)
    return configuration_labels(sweep.configs, keys)


def other_compute(sweep: Sweep, labels: pd.Series, base: str) -> list[str]:
    """The configurations trained at another ``trainer.compute_budget`` than ``base``: a scaling sweep
    compares sizes within a budget (its IsoFLOP profiles), not a small budget's model with a large one's."""
    if COMPUTE_BUDGET not in sweep.configs:
        return []
    budgets = as_text(sweep.configs[COMPUTE_BUDGET])
    own = set(budgets[labels == base])
    return [name for name in dict.fromkeys(labels) if not set(budgets[labels == name]) <= own]


def choose_baseline(labels: pd.Series, given: str | None) -> str:
    """The configuration named ``given``: its whole label, or parts of it that only one configuration
    has (``key=value``, or a value alone: ``rope`` for ``model.pos.name=rope``); the first where
    ``given`` is None. ReportError naming the configurations otherwise."""
    names = list(dict.fromkeys(labels))
    if given is None or given in names:
        return names[0] if given is None else given
    wanted = [p.strip() for p in given.split(",")]
    found = [n for n in names if all(has_part(n, part) for part in wanted)]
    if len(found) == 1:
        return found[0]
    what = "matches several configurations" if found else "names no configuration"
    raise ReportError(f"--baseline={given}: {what}; the configurations: {'; '.join(names)}")


def has_part(label: str, part: str) -> bool:
    """Whether ``label`` (``key=value, key=value``) has ``part``: a ``key=value`` of it, or a value."""
    parts = [p.strip() for p in label.split(",")]
    return part in parts if "=" in part else part in [p.partition("=")[2] for p in parts]


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
    """One row per configuration, the baseline first: its seeds ``n`` and ``mean``, and against the
    baseline the ``difference`` with its interval (``low``, ``high``), the ``test`` and its ``p``,
    Holm's ``p (Holm)``, the ``verdict``, and the ``seeds needed`` to detect the difference where none
    was detected. Numbers as numbers (``significance.csv``; ``significance_text`` for report.md). None
    unless seeds are swept and there are two configurations or more."""
    keys, _ = shown_keys(sweep.configs)
    labels = labels_of(sweep)
    if SEED not in keys or labels.nunique() < 2 or f"{metric} final" not in sweep.runs:
        return None
    decisions.resolved_baseline = base = choose_baseline(labels, decisions.baseline)
    values = compared_values(sweep, decisions, metric)
    by_seed = seed_values(values, labels, sweep.configs[SEED])
    decisions.other_compute = other_compute(sweep, labels, base)
    others = [name for name in dict.fromkeys(labels) if name != base and name not in decisions.other_compute]
    rng = np.random.default_rng(0)  # the intervals of a report are the same each time it is made
    empty: dict[int, float] = {}
    results = [compare(by_seed.get(base, empty), by_seed.get(n, empty), decisions.level, rng) for n in others]
    adjusted = holm([r.p_value for r in results])
    lower_is_better = metric_mode(metric, monitor_modes(sweep)) == "min"
    rows = [{"configuration": base, "n": len(by_seed.get(base, empty)), "verdict": "baseline"}]
    for name, result, p in zip(others, results, adjusted):
        tested = not math.isnan(result.p_value)
        rows.append(
            {
                "configuration": name,
                "n": result.n_other,
                "difference": result.difference,
                "low": result.low,
                "high": result.high,
                "test": ("paired t" if result.paired else "Welch t") if tested else "",
                "p": result.p_value,
                "p (Holm)": p,
                "verdict": verdict(result, p, decisions.level, lower_is_better, metric),
                "seeds needed": needed_text(result.seeds_needed) if not p < decisions.level else "",
            }
        )
    table = pd.DataFrame(rows, columns=SIGNIFICANCE_COLUMNS)
    table["mean"] = [
        np.mean(list(by_seed.get(n, empty).values()) or [math.nan]) for n in table["configuration"]
    ]
    return table


SIGNIFICANCE_COLUMNS = [
    "configuration", "n", "mean", "difference", "low", "high", "test", "p", "p (Holm)", "verdict",
    "seeds needed",
]  # fmt: skip


def significance_text(table: pd.DataFrame, level: float) -> pd.DataFrame:
    """The significance table as report.md shows it: 4 significant digits, p-values 2, the interval
    as ``[low, high]``, nothing where a figure does not apply (the baseline's own row)."""
    text = pd.DataFrame({"configuration": table["configuration"], "n": table["n"]})
    text["mean"] = table["mean"].map(format_number)
    text["difference"] = table["difference"].map(format_number)
    text[f"{1 - level:.0%} interval"] = [interval_text(lo, hi) for lo, hi in zip(table["low"], table["high"])]
    text["test"] = table["test"]
    text["p"] = table["p"].map(lambda p: format_number(p, 2))
    text["p (Holm)"] = table["p (Holm)"].map(lambda p: format_number(p, 2))
    text["verdict"] = table["verdict"]
    text["seeds needed"] = table["seeds needed"]
    return text.fillna("")


def interval_text(low: float, high: float) -> str:
    return "" if pd.isna(low) else f"[{format_number(low)}, {format_number(high)}]"


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
    ``runs`` ``reached`` it, and the mean, ``low`` and ``high`` (bootstrap interval of the mean) of the
    steps, tokens, FLOPs and wall time to it over the runs that did (``time_to_target.csv``;
    ``target_text`` for report.md). None where no run had a target."""
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
            "reached": len(reached),
            "runs": len(group),
        }
        for key, title in TARGET_FIGURES.items():
            numbers = pd.to_numeric(reached[f"target {key}"], errors="coerce").dropna().to_numpy(float)
            mean, low, high = mean_interval(numbers, level, rng)
            row.update({f"{title} mean": mean, f"{title} low": low, f"{title} high": high})
        rows.append(row)
    return pd.DataFrame(rows)


def target_text(table: pd.DataFrame) -> pd.DataFrame:
    """The time-to-target table as report.md shows it: ``reached`` as ``k/n``, each figure as
    ``mean [low, high]`` (the mean alone for one run)."""
    text = table[["configuration", "target"]].copy()
    text["reached"] = [f"{k}/{n}" for k, n in zip(table["reached"], table["runs"])]
    for title in TARGET_FIGURES.values():
        mean, low, high = (table[f"{title} {part}"] for part in ("mean", "low", "high"))
        text[title] = [
            "" if pd.isna(m) else format_number(m) + ("" if pd.isna(lo) else f" {interval_text(lo, hi)}")
            for m, lo, hi in zip(mean, low, high)
        ]
    return text


def mean_interval(values: np.ndarray, level: float, rng: np.random.Generator) -> tuple[float, float, float]:
    """The mean of ``values`` and the percentile bootstrap interval of it (NaN for fewer than 2 values)."""
    if len(values) == 0:
        return math.nan, math.nan, math.nan
    if len(values) == 1:
        return float(values[0]), math.nan, math.nan
    means = rng.choice(values, (2000, len(values))).mean(axis=1)
    low, high = np.quantile(means, [level / 2, 1 - level / 2])
    return float(values.mean()), float(low), float(high)
