"""``report.md``, its plots and ``runs.csv``: what attnlab-report writes into a sweep directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnlab.report.decisions import (
    Decisions,
    choose_baseline,
    labels_of,
    significance_table,
    significance_text,
    target_table,
    target_text,
)
from attnlab.report.files import write_text_whole
from attnlab.report.plots import write_plots
from attnlab.report.runs import log
from attnlab.report.scaling import Runs, ScalingFit, fit_scaling
from attnlab.report.scaling_plots import profile_table, scaling_plots, scaling_table
from attnlab.report.sweep import SEED, Sweep, evaluated_settings, metric_mode
from attnlab.report.table import eval_table, job_table, seed_table, shown_keys, swept_keys

REPORT_FILE = "report.md"
PLOTS_DIR = "plots"
RUNS_CSV = "runs.csv"
SIGNIFICANCE_CSV = "significance.csv"
TARGET_CSV = "time_to_target.csv"
TARGET_TITLE = "Time to target (mean [95% bootstrap interval] over the seeds that reached it)"
SCALING_TITLE = "Scaling fit (Chinchilla approaches 2 and 3, 95% bootstrap intervals)"
PROFILES_TITLE = "IsoFLOP minima (approach 2: each budget's parabola in log N)"
SCALING_RESAMPLES = 100
MIN_SCALING_RUNS = 6  # two budgets of three sizes: the least that gives a parabola per budget and a line
# The config keys a scaling sweep may vary: the model's shape, how long it trains, and the seed. A sweep
# that varies anything else (the positional encoding, the task) compares different things, not sizes.
SCALING_KEYS = ("model.d_model", "model.n_layers", "model.n_heads", "model.n_kv_heads", "model.d_ff",
                "model.head_dim", "trainer.max_steps", "trainer.max_epochs", "trainer.compute_budget",
                "data.batch_size", SEED)  # fmt: skip


@dataclass
class Report:
    markdown: Path
    csv: Path
    plots: list[Path]
    tables: dict[str, pd.DataFrame]  # title -> table, in the order of report.md
    decision_csvs: list[Path] = field(default_factory=list)  # significance.csv, time_to_target.csv


def write_report(
    sweep: Sweep, out_dir: Path, command: str = "attnlab-report", decisions: Decisions | None = None
) -> Report:
    """Write ``report.md``, ``plots/*.png`` and ``runs.csv`` (every config key and result of every
    run, for your own pandas) into ``out_dir``; where seeds are swept, each configuration against the
    baseline of ``decisions`` (``significance.csv``), and the time to a target where runs had one
    (``time_to_target.csv``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    decisions = decisions or Decisions()
    tables = report_tables(sweep)
    csvs = decision_tables(sweep, decisions, tables, out_dir)
    plots = write_plots(sweep, out_dir / PLOTS_DIR, decisions.resolved_baseline)
    fit = sweep_scaling_fit(sweep)
    if fit is not None:
        tables[SCALING_TITLE] = scaling_table(fit)
        if fit.profiles:
            tables[PROFILES_TITLE] = profile_table(fit)
        plots += scaling_plots(fit, out_dir / PLOTS_DIR)
    csv = write_text_whole(out_dir / RUNS_CSV, runs_csv(sweep))
    text = markdown(sweep, tables, [p.relative_to(out_dir) for p in plots], command, decisions)
    return Report(write_text_whole(out_dir / REPORT_FILE, text), csv, plots, tables, csvs)


def significance_title(metric: str, decisions: Decisions) -> str:
    where = f"at {decisions.matched.text()}" if decisions.matched else "final value"
    return f"Significance: {metric}, {where}, against {decisions.resolved_baseline}"


def decision_tables(
    sweep: Sweep, decisions: Decisions, tables: dict[str, pd.DataFrame], out_dir: Path
) -> list[Path]:
    """Add the significance table (the first monitored metric) and the time-to-target table to
    ``tables``; write each as a CSV too; their paths."""
    written = []
    metric = sweep.monitors[0] if sweep.monitors else None
    significance = significance_table(sweep, decisions, metric) if metric else None
    if significance is not None:
        tables[significance_title(metric, decisions)] = significance_text(significance, decisions.level)
        written.append(write_text_whole(out_dir / SIGNIFICANCE_CSV, significance.to_csv(index=False)))
    else:
        if decisions.budget or decisions.baseline:
            log.warning("no significance table: it compares configurations of several seeds each")
        labels = labels_of(sweep)
        if labels.nunique() > 1:  # the curves' bold line
            decisions.resolved_baseline = choose_baseline(labels, decisions.baseline)
    targets = target_table(sweep, decisions.level)
    if targets is not None:
        tables[TARGET_TITLE] = target_text(targets)
        written.append(write_text_whole(out_dir / TARGET_CSV, targets.to_csv(index=False)))
    return written


def runs_csv(sweep: Sweep) -> str:
    """``runs.csv``: a ``training`` row per run (every config key, status, summary figures, best,
    final and test metrics), then an ``evaluation`` row per attnlab-eval of a run (its run's config,
    what the evaluation changed as ``eval <key>``, its split and checkpoint, and the metrics it
    measured), so that every number of the report's tables is in the file."""
    training = sweep.configs.join(sweep.runs)
    training.insert(0, "row", "training")
    if sweep.evals.empty:
        return training.to_csv()
    settings = {k: f"eval {k}" for k in [*sweep.eval_keys, "name", "split", "ckpt"]}
    evals = evaluated_settings(sweep).rename(columns=settings)
    configs = sweep.configs.loc[evals["job"]].reset_index(drop=True)
    evaluation = pd.concat([configs, evals.drop(columns="job")], axis=1).set_index(evals["job"])
    evaluation.insert(0, "row", "evaluation")
    return pd.concat([training, evaluation]).to_csv()


def report_tables(sweep: Sweep) -> dict[str, pd.DataFrame]:
    tables = {"Runs": job_table(sweep)}
    seeds = seed_table(sweep)
    if seeds is not None:
        tables["Configurations (mean ± std over seeds)"] = seeds
    evals = eval_table(sweep)
    if evals is not None:
        tables[
            "Evaluations (attnlab-eval, mean ± std over seeds)" if seeds is not None else "Evaluations"
        ] = evals
    return tables


def scaling_runs(sweep: Sweep) -> Runs | None:
    """The finished runs that carry parameters, tokens and FLOPs per token, as points (N, D, C = D x
    FLOPs per token, final value of the monitored loss); None unless they differ only in size, length
    and seed (``SCALING_KEYS``), there are enough of them, and the monitor is a loss (lower is better)."""
    if any(key not in SCALING_KEYS for key in swept_keys(sweep.configs)):
        return None  # the runs differ in more than size and length: no one law describes them
    runs = sweep.runs
    monitor = sweep.monitors[0] if sweep.monitors else None
    if monitor is None or metric_mode(monitor, {}) != "min" or f"{monitor} final" not in runs:
        return None
    keys = ["n_params", "train_tokens", "flops_per_token", f"{monitor} final"]
    usable = runs[runs["status"].isin(("completed",))][keys].dropna()
    if (
        len(usable) < MIN_SCALING_RUNS
        or usable["n_params"].nunique() < 3
        or usable["train_tokens"].nunique() < 2
    ):
        return None  # too few runs, or seeds of one size and length: no law in N and D to fit
    n, d, per_token, loss = (usable[k].to_numpy(dtype=float) for k in keys)
    return Runs(n, d, d * per_token, loss)


def sweep_scaling_fit(sweep: Sweep) -> ScalingFit | None:
    """The scaling fit of a sweep whose runs carry what it needs, else None (the report is unchanged)."""
    runs = scaling_runs(sweep)
    return fit_scaling(runs, resamples=SCALING_RESAMPLES) if runs is not None else None


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it, as the command was given: a
    report committed with a study names its runs' folder, not the machine it ran on."""
    return path.relative_to(Path.cwd()).as_posix() if path.is_relative_to(Path.cwd()) else str(path)


def markdown(
    sweep: Sweep,
    tables: dict[str, pd.DataFrame],
    plots: list[Path],
    command: str,
    decisions: Decisions | None = None,
) -> str:
    lines = [f"# Sweep report: {shown_path(sweep.root)}", "", *overview(sweep), ""]
    for title, table in tables.items():
        notes = table_notes(title, sweep, decisions or Decisions())
        lines += [f"## {title}", "", *notes, table.to_markdown(index=False), ""]
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}]({p.as_posix()})\n" for p in plots]
    lines += [f"Made by `{command}` from the run directories' files alone.", ""]
    return "\n".join(lines)


def overview(sweep: Sweep) -> list[str]:
    """Counts by status, what was monitored and what was swept."""
    counts = sweep.runs["status"].value_counts(sort=False)
    lines = [f"{len(sweep.runs)} runs: " + ", ".join(f"{n} {status}" for status, n in counts.items()) + "."]
    modes = {m: metric_mode(m, {}) for m in sweep.monitors}
    modes.update(dict(zip(sweep.configs.get("task.monitor", []), sweep.configs.get("task.monitor_mode", []))))
    monitored = [f"{m} ({'lower' if modes.get(m) == 'min' else 'higher'} is better)" for m in sweep.monitors]
    lines.append(f"Monitored: {', '.join(monitored) or 'nothing'}.")
    keys, hidden = shown_keys(sweep.configs)
    lines.append(f"Swept: {', '.join(keys) or 'nothing (all runs share one config)'}.")
    if hidden:
        pairs = ", ".join(f"{k} (with {twin})" for k, twin in hidden.items())
        lines.append(f"Not shown, as shown keys determine them: {pairs}.")
    return lines


def table_notes(title: str, sweep: Sweep, decisions: Decisions) -> list[str]:
    if title.startswith("Significance"):
        return significance_notes(decisions)
    if title == TARGET_TITLE:
        return [
            "Runs with `trainer.target_metric` stop at the first validation at or past "
            "`trainer.target_value`. `reached`: seeds that got there of those that ran; each figure is "
            "the mean to the target over the seeds that reached it, with its interval (the mean alone "
            "for one seed). Wall time counts the time before a kill of a resumed run.",
            "",
        ]
    if title == "Runs":
        return [
            "One row per job. `best` and `final`: the best and the last value logged during training; "
            "`test/*`: the best checkpoint on the test split. A failed job keeps its row and its error.",
            "",
        ]
    if title.startswith("Configurations"):
        return [
            f"One row per configuration (runs that differ only by `{SEED}`). `n`: the seeds that "
            "completed, which the means are over; `status` counts all seeds, failed and incomplete ones too.",
            "",
        ]
    if title == SCALING_TITLE:
        return [
            "Each completed run's final monitored loss against its parameters N (`n_params`), tokens D "
            "(`train_tokens`) and compute C = D x FLOPs per token (Chinchilla's count, "
            "`flops_per_token`). Approach 2: a parabola in log N per budget (runs within 26% of "
            "compute), its minimum, and log-log lines through the minima (`a2`, `b2`). Approach 3: "
            "L(N, D) = E + A/N^α + B/D^β by Huber loss on log L and L-BFGS (Hoffmann et al. 2022). "
            f"Intervals: {SCALING_RESAMPLES} refits on runs resampled with replacement.",
            "",
        ]
    if title == PROFILES_TITLE:
        return [
            "A budget has a row when its parabola opens upward and its minimum lies between its "
            "smallest and largest size; D_opt is read off the budget's line of log D against log N.",
            "",
        ]
    keys = ", ".join(f"`eval {k}`" for k in sweep.eval_keys) or "none"
    return [f"Evaluations of the runs' checkpoints; settings changed from the training run: {keys}.", ""]


def significance_notes(decisions: Decisions) -> list[str]:
    """What the columns of the significance table mean, and the runs short of the budget."""
    level = f"{decisions.level:g}"
    notes = [
        "`difference`: the configuration's mean minus the baseline's (`paired t`: the mean per-seed "
        f"difference over the seeds both ran); its interval: percentile bootstrap at {1 - decisions.level:.0%}. "
        "`p`: Welch's t-test, or the paired t-test where both sides share 2 seeds or more; `p (Holm)`: "
        f"corrected for the comparisons of this table. `verdict`: better or worse at the level {level} "
        "after the correction, else no detectable difference; `seeds needed`: seeds per side for the "
        f"t-test at {level} (two-sample, or paired) to detect the observed difference with 80% power.",
        "",
    ]
    if decisions.matched is not None:
        notes[0] += (
            f" Each run's value at {decisions.matched.text()}: its curve interpolated linearly between "
            "its logged values, never extrapolated."
        )
    if decisions.short:
        short = ", ".join(decisions.short)
        notes += [
            f"No value at the budget (left out): {short}. Each did not reach it, or reached it before its first validation.",
            "",
        ]
    if decisions.other_compute:
        notes += [
            f"Trained at another trainer.compute_budget than the baseline (left out: {len(decisions.other_compute)} "
            "configurations): sizes are compared within one budget, as an IsoFLOP profile holds them.",
            "",
        ]
    return notes
