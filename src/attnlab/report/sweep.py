"""A sweep as pandas DataFrames, built in one pass over the files of its run directories.

- ``configs``: one row per run, one column per dotted config key (``model.pos.name``, ``seed``);
- ``runs``: one row per run: status, error line, parameters, throughput, wall time, tokens trained on
  and FLOPs per token (Chinchilla's count), and the final and best value of every validation metric,
  the test metrics, and the monitored metric's best;
- ``curves``: every line of every ``metrics.jsonl``, one row per (run, step);
- ``evals``: one row per evaluation made with attnlab-eval, with the overrides it used.

Rows are indexed by the job's path relative to the sweep directory (``0_pos-rope``, ``1_pos-alibi``, ...
for a multirun: each job's number and label, ``training/names.py``), in natural order (2 before 10).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from attnlab.report.runs import ReportError, RunFiles, find_run_dirs, read_run

SEED = "seed"
# Metric names (after the last /) to minimise (bpb: bits per byte); all others are maximised.
LOWER_IS_BETTER = ("loss", "ppl", "bpb")
EVAL_COLUMNS = ["job", "name", "split", "ckpt"]


@dataclass
class Sweep:
    root: Path  # the folder the runs share: the sweep directory of a multirun
    configs: pd.DataFrame
    runs: pd.DataFrame
    curves: pd.DataFrame
    evals: pd.DataFrame
    eval_keys: list[str]  # the override columns of ``evals`` (``data.seq_len``, ...)

    @property
    def monitors(self) -> list[str]:
        """The monitored metrics of the runs (``task.monitor``, or ``--metric``), in order of appearance."""
        return list(self.runs["monitor"].dropna().unique())


def read_sweep(paths: Iterable[str | Path], metric: str | None = None) -> Sweep:
    """Read every run directory at or under ``paths``; ``metric`` replaces each run's ``task.monitor``
    as the metric whose best value is reported and plotted. ReportError for bad input."""
    paths = [str(p) for p in paths]
    files = [f for f in map(read_run, find_run_dirs(paths)) if f is not None]
    if not files:
        raise ReportError(f"{' '.join(paths)}: no run directories found (folders holding config.yaml)")
    root = Path(os.path.commonpath([f.path for f in files]))
    jobs = [job_name(f.path, root) for f in files]
    configs = config_frame(files, jobs)
    curves = curve_frame(files, jobs)
    runs = result_frame(files, jobs, configs, curves, metric)
    evals, eval_keys = eval_frame(files, jobs)
    if metric is not None:
        check_metric(metric, runs, evals)
    return Sweep(root, configs, runs, curves, evals, eval_keys)


def job_name(path: Path, root: Path) -> str:
    return path.name if path == root else path.relative_to(root).as_posix()


def config_frame(files: list[RunFiles], jobs: list[str]) -> pd.DataFrame:
    """The configs flattened to dotted keys, each value as the config holds it (an object column: a
    key that is null in one run and 64 in another shows 64, not 64.0); lists become their JSON text,
    so they compare as values. A key a run lacks is None, like a null."""
    configs = pd.DataFrame([flatten(f.config) for f in files], index=pd.Index(jobs, name="job"), dtype=object)
    return configs.where(configs.notna(), None)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"pos": {"name": "rope"}}}`` as ``{"model.pos.name": "rope"}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, list | dict) else value
    return flat


def curve_frame(files: list[RunFiles], jobs: list[str]) -> pd.DataFrame:
    """All metrics lines; lines of one run at one step merge into one row (the last value of each
    metric wins, so a step logged twice, e.g. by a resume, counts once)."""
    records = [{**record, "job": job} for f, job in zip(files, jobs) for record in f.metrics]
    if not records:
        return pd.DataFrame(columns=["job", "step", "time_s"])
    curves = pd.DataFrame.from_records(records)
    values = [c for c in curves.columns if c not in ("job", "step")]
    curves[values] = curves[values].apply(pd.to_numeric, errors="coerce")
    return curves.groupby(["job", "step"], sort=True).last().reset_index()


def run_status(f: RunFiles) -> str:
    """completed | failed | interrupted | incomplete (still running, or killed) | unknown (no summary.json)."""
    status = f.summary.get("status")
    if status == "running":
        return "incomplete"
    if status:
        return str(status)
    return "completed" if f.test_metrics else "unknown"


def metric_mode(metric: str, monitor_modes: dict[str, str]) -> str:
    """``min`` or ``max``: the run's ``task.monitor_mode`` for its monitor, else by the metric's name."""
    if metric in monitor_modes:
        return monitor_modes[metric]
    return "min" if metric.rsplit("/", 1)[-1] in LOWER_IS_BETTER else "max"


def result_frame(
    files: list[RunFiles], jobs: list[str], configs: pd.DataFrame, curves: pd.DataFrame, metric: str | None
) -> pd.DataFrame:
    """One row per run: status and summary figures (from the curves where summary.json lacks them),
    ``<metric> final`` and ``<metric> best`` for every validation metric and monitor, test metrics."""
    runs = pd.DataFrame(index=pd.Index(jobs, name="job"))
    runs["status"] = [run_status(f) for f in files]
    runs["error"] = [f.summary.get("error") for f in files]
    for key in ("n_params", "tokens_per_s", "samples_per_s", "wall_time_s", "final_step", "train_tokens"):
        runs[key] = pd.to_numeric(pd.Series([f.summary.get(key) for f in files], index=runs.index))
    resumed = configs["ckpt_path"].notna() if "ckpt_path" in configs else pd.Series(False, index=runs.index)
    runs.loc[resumed.to_numpy(), "train_tokens"] = float("nan")  # counted since the resume only: unknown
    counted = [(f.summary.get("flops_per_token") or {}).get("chinchilla") for f in files]
    runs["flops_per_token"] = pd.to_numeric(pd.Series(counted, index=runs.index))  # appendix F's count
    monitor = configs["task.monitor"] if "task.monitor" in configs else pd.Series(None, index=runs.index)
    runs["monitor"] = metric or monitor
    modes = configs.get("task.monitor_mode", pd.Series("min", index=runs.index))
    monitor_modes = dict(zip(monitor.dropna(), modes[monitor.notna()]))

    by_job = curves.groupby("job")
    fallbacks = {"wall_time_s": "time_s", "final_step": "step"}
    for key, column in fallbacks.items():
        runs[key] = runs[key].fillna(by_job[column].max())
    for key in ("tokens_per_s", "samples_per_s"):
        if f"train/{key}" in curves:
            runs[key] = runs[key].fillna(by_job[f"train/{key}"].median())

    tracked = [c for c in curves.columns if c.startswith("val/")]
    tracked += [m for m in runs["monitor"].dropna().unique() if m in curves and m not in tracked]
    final = by_job[tracked].last()
    for name in tracked:
        best = by_job[name].min() if metric_mode(name, monitor_modes) == "min" else by_job[name].max()
        runs[f"{name} best"] = best
        runs[f"{name} final"] = final[name]
    runs = runs.join(target_frame(files, runs.index))
    test = pd.DataFrame.from_records([f.test_metrics for f in files], index=runs.index)
    logged = [c for c in curves.columns if c.startswith("test/")]
    test = test.combine_first(by_job[logged].last()) if logged else test
    return runs.join(test.apply(pd.to_numeric, errors="coerce"))


TARGET_KEYS = ("metric", "value", "mode", "reached", "step", "tokens", "flops", "wall_time_s")


def target_frame(files: list[RunFiles], index: pd.Index) -> pd.DataFrame:
    """``target <key>`` columns of the runs that had a target (``summary.json``'s ``target``: what it
    was, whether the run reached it, and the steps, tokens, FLOPs and wall time to it); none otherwise."""
    records = [f.summary.get("target") or {} for f in files]
    if not any(records):
        return pd.DataFrame(index=index)
    rows = [{f"target {k}": r.get(k) for k in TARGET_KEYS} if r else {} for r in records]
    return pd.DataFrame.from_records(rows, index=index, columns=[f"target {k}" for k in TARGET_KEYS])


def eval_frame(files: list[RunFiles], jobs: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """One row per evaluation (the newest where a run was evaluated twice the same way), and the
    names of its override columns."""
    rows = []
    for f, job in zip(files, jobs):
        for e in f.evals:
            ckpt = Path(e["ckpt_path"] or "?").name.split("-")[0].removesuffix(".ckpt")  # best | last
            overrides = {
                k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in e["overrides"].items()
            }
            rows.append(
                {
                    "job": job,
                    "name": e["name"],
                    "split": e["split"],
                    "ckpt": ckpt,
                    **overrides,
                    **e["metrics"],
                }
            )
    evals = pd.DataFrame.from_records(rows, columns=None if rows else EVAL_COLUMNS)
    keys = sorted({k for f in files for e in f.evals for k in e["overrides"]})
    for key in keys:  # as given: data.batch_size=4 stays 4 where other evaluations lack the key
        evals[key] = pd.Series([row.get(key) for row in rows], index=evals.index, dtype=object)
    if rows:
        evals = evals.drop_duplicates(["job", "split", "ckpt", *keys], keep="last").reset_index(drop=True)
    return evals, keys


def evaluated_settings(sweep: Sweep) -> pd.DataFrame:
    """``sweep.evals`` with each override column filled, where an evaluation left the key as trained,
    with its run's own value: attnlab-eval records only what it changed, so an evaluation at the
    training length has no ``data.seq_len``, and a table would otherwise show it as null."""
    evals = sweep.evals.copy()
    for key in sweep.eval_keys:
        if key in sweep.configs:
            trained = pd.Series(sweep.configs.loc[evals["job"], key].to_numpy(), index=evals.index)
            evals[key] = evals[key].where(evals[key].notna(), trained)
    return evals


def check_metric(metric: str, runs: pd.DataFrame, evals: pd.DataFrame) -> None:
    """``--metric`` must name a metric some run logged."""
    if f"{metric} best" in runs or metric in runs or metric in evals:
        return
    known = sorted(c.removesuffix(" best") for c in runs.columns if c.endswith(" best"))
    known += sorted(c for c in runs.columns if c.startswith("test/"))
    raise ReportError(f"--metric={metric}: no run logged it; logged metrics: {', '.join(known) or 'none'}")
