"""The tables of a report: one row per job, one row per configuration (mean ± std over seeds), and
the evaluations. Which config keys are shown is decided here: those whose values differ between runs.
"""

from __future__ import annotations

import pandas as pd

from attnlab.report.sweep import SEED, Sweep, evaluated_settings

# Keys that say where a run lives or logs, not what it computes: never a difference worth a column.
BOOKKEEPING = ("run_dir", "ckpt_path", "logger.")
# Keys that training derives from another swept key: a scaling sweep's steps are what its compute
# budget buys at each size, so the budget is the swept key shown and the steps follow it.
DERIVED = {"trainer.max_steps": "trainer.compute_budget"}
# Swept keys shown before any key that determines them: a sweep with one batch size per compute budget
# is labelled by its budgets, the axis a scaling fit reads.
NAMED_FIRST = ("trainer.compute_budget",)
NAME = "run_name"  # a configuration's own name, where the runs were given one per configuration
FINISHED = ("completed", "unknown")  # runs whose results enter means (unknown: made before summary.json)
SUMMARY_COLUMNS = {
    "status": "status",
    "n_params": "params",
    "tokens_per_s": "tokens/s",
    "samples_per_s": "samples/s",
    "wall_time_s": "wall time (s)",
    "final_step": "steps",
}


def swept_keys(configs: pd.DataFrame) -> list[str]:
    """Config keys whose values differ between the runs, in config order, the seed last; a swept
    ``run_name`` first: a name the runs were given for their configuration (a preset of
    ``conf/variant/`` sets one) labels it, and the keys it determines then follow it unshown."""
    candidates = configs[[c for c in configs.columns if not c.startswith(BOOKKEEPING)]]
    varying = as_text(candidates).nunique() > 1
    keys = list(varying[varying].index)
    first = [k for k in keys if k == NAME]
    return first + [k for k in keys if k not in (SEED, NAME)] + [k for k in keys if k == SEED]


def shown_keys(configs: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    """The swept keys worth a column, and the others, each with the shown key that determines it
    (each value of the shown key always goes with one value of the other, as ``data.kind`` with
    ``model.family`` when families are swept, or ``model.pos.rope_base``, set only for RoPE, with
    ``model.pos.name``; or training derives it from a swept key, as the steps from a compute
    budget): such a column would say nothing new."""
    shown: list[str] = []
    hidden: dict[str, str] = {}
    text = as_text(configs)
    swept = swept_keys(configs)
    for key in sorted(swept, key=lambda k: k not in NAMED_FIRST):  # a budget names its twin, not the reverse
        if DERIVED.get(key) in swept:
            hidden[key] = DERIVED[key]
            continue
        twin = next((k for k in shown if k != SEED and key != SEED and determines(text, k, key)), None)
        if twin is None:
            shown.append(key)
        else:
            hidden[key] = twin
    return sorted(shown, key=swept.index), hidden


def determines(text: pd.DataFrame, a: str, b: str) -> bool:
    """Whether each value of ``a`` goes with a single value of ``b``."""
    return text[[a, b]].drop_duplicates()[a].is_unique


def configuration_labels(configs: pd.DataFrame, keys: list[str]) -> pd.Series:
    """``key=value, key=value`` of the shown keys other than the seed: the runs that share a label are
    seeds of one configuration."""
    keys = [k for k in keys if k != SEED]
    if not keys:
        return pd.Series("all runs", index=configs.index)
    text = as_text(configs[keys])
    parts = [k + "=" + text[k] for k in keys]
    return pd.concat(parts, axis=1).agg(", ".join, axis=1)


def metric_columns(sweep: Sweep) -> list[str]:
    """The result columns of ``sweep.runs``, the monitored metrics first, then validation, then test."""
    columns = [c for c in sweep.runs.columns if c.endswith((" best", " final")) or c.startswith("test/")]
    first = [c for m in sweep.monitors for c in (f"{m} best", f"{m} final", m) if c in columns]
    return first + [c for c in columns if c not in first]


def format_number(value: float, digits: int = 4) -> str:
    """``digits`` significant digits, thousands in full with separators (12,345 tokens/s), '' for missing."""
    if pd.isna(value):
        return ""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10**digits:  # no exponent for a std of 920 shown to two digits
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def job_table(sweep: Sweep) -> pd.DataFrame:
    """One row per job: the shown config keys, status, summary figures, metrics, and the error line
    of each failed job (the column appears when one failed)."""
    keys, _ = shown_keys(sweep.configs)
    runs = sweep.runs
    summary = [c for c in SUMMARY_COLUMNS if c == "status" or runs[c].notna().any()]
    table = as_text(sweep.configs[keys])
    table = table.join(runs[summary].rename(columns=SUMMARY_COLUMNS))
    numbers = [SUMMARY_COLUMNS[c] for c in summary if c != "status"]
    table[numbers] = table[numbers].map(format_number)
    table = table.join(runs[metric_columns(sweep)].map(format_number))
    if runs["error"].notna().any():
        table["error"] = runs["error"].fillna("")
    return table.reset_index()


def seed_table(sweep: Sweep) -> pd.DataFrame | None:
    """One row per configuration: ``mean ± std`` over its seeds of every figure, the number of
    finished seeds ``n``, and the status of all of them. None when the seed is not swept."""
    keys, _ = shown_keys(sweep.configs)
    if SEED not in keys:
        return None
    configs = as_text(sweep.configs[[k for k in keys if k != SEED]])
    labels = configuration_labels(sweep.configs, keys)
    runs = sweep.runs
    numbers = [c for c in SUMMARY_COLUMNS if c != "status" and runs[c].notna().any()]
    numbers += metric_columns(sweep)
    finished = runs[runs["status"].isin(FINISHED)]
    groups = finished[numbers].groupby(labels[finished.index], sort=False)
    table = configs.groupby(labels, sort=False).first()
    table["n"] = groups.size().reindex(table.index).fillna(0).astype(int)
    table["status"] = runs["status"].groupby(labels, sort=False).agg(_count_statuses)
    cells = mean_std_cells(groups[numbers].mean(), groups[numbers].std())
    table = table.join(cells.rename(columns=SUMMARY_COLUMNS)).fillna("")  # "" where no seed finished
    return table.reset_index(drop=True)


def eval_table(sweep: Sweep) -> pd.DataFrame | None:
    """One row per configuration and evaluation setting (overrides, split, checkpoint): ``mean ± std``
    of each metric over the seeds, and ``n``. None when no run was evaluated."""
    if sweep.evals.empty:
        return None
    evals = evaluated_settings(sweep)
    keys, _ = shown_keys(sweep.configs)
    keys = [k for k in keys if k != SEED]
    settings = [f"eval {k}" for k in sweep.eval_keys] + ["split", "ckpt"]
    frame = evals.rename(columns={k: f"eval {k}" for k in sweep.eval_keys})
    frame = frame.join(as_text(sweep.configs[keys]), on="job")
    metrics = [c for c in frame.columns if "/" in c]
    frame[settings] = as_text(frame[settings])
    groups = frame.groupby([*keys, *settings], sort=False)
    table = groups.size().rename("n").to_frame()
    table = table.join(mean_std_cells(groups[metrics].mean(), groups[metrics].std()))
    return table.reset_index()


def mean_std_cells(mean: pd.DataFrame, std: pd.DataFrame) -> pd.DataFrame:
    """``mean ± std`` text per cell; the mean alone where the std is 0 or undefined (one seed)."""
    mean_text = mean.map(format_number)
    std_text = std.map(lambda s: f" ± {format_number(s, 2)}" if s > 0 else "")
    return mean_text + std_text.where(mean.notna(), "")


def _count_statuses(statuses: pd.Series) -> str:
    counts = statuses.value_counts(sort=False)
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def as_text(values: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """Config values as the text a table shows and compares: ``null`` for a null or missing value
    (``astype(str)`` would keep those missing, and ``nunique`` would not count them)."""
    return values.astype(object).map(_config_text)


def _config_text(value: object) -> str:
    return "null" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)
