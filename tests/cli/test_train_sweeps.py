"""Multiruns: one job per logger, an Optuna search, and a sweep in which one job fails without
taking the others' results with it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from train_cli import TEXT, TINY, check, command_here, csv_series, job_dirs, wandb_history

pytestmark = pytest.mark.slow
GPT = [*TINY, *TEXT, "model=gpt-tiny", "sample.max_new_tokens=0"]


def test_each_logger_writes_only_its_files(tmp_path: Path) -> None:
    check(command_here(["-m", "logger=wandb,csv,tensorboard,none", *GPT], tmp_path))
    wandb, csv, tensorboard, none = job_dirs(tmp_path)
    assert wandb_history(wandb, "train/loss").keys() == set(range(6))
    assert csv_series(csv, "train/loss").keys() == set(range(6))
    assert list((tensorboard / "tensorboard").glob("events.out.tfevents.*"))
    for job, present in ((wandb, "wandb"), (csv, "csv"), (tensorboard, "tensorboard"), (none, None)):
        assert {p.name for p in job.iterdir()} & {"wandb", "csv", "tensorboard"} == ({present} - {None})
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert (job / "metrics.jsonl").is_file()  # whatever the logger, none included
    # Its steps count the optimizer steps done (as checkpoint names do); Lightning's loggers lag by one.
    logged = [json.loads(line) for line in (none / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["train/loss"] for r in logged if "train/loss" in r}
    assert losses == pytest.approx({step + 1: loss for step, loss in csv_series(csv, "train/loss").items()})


def test_a_failed_job_leaves_the_others_intact(tmp_path: Path) -> None:
    fail = "+callbacks.fault={_target_:fault_injection.FailAtStep,step:2,seed:3}"  # job 1 only
    result = command_here(["-m", "seed=1,3,5", fail, "logger=many", *GPT], tmp_path)
    assert result.returncode == 1
    assert "error: job 1 (" in result.stderr and "RuntimeError: deliberate failure at step 2" in result.stderr
    assert "error: 1 job(s) of the multirun failed:" in result.stderr
    ok_0, failed, ok_2 = job_dirs(tmp_path)
    for job in (ok_0, ok_2):
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert (job / "test_metrics.json").is_file()
        assert wandb_history(job, "train/loss").keys() == set(range(6))
    assert "deliberate failure at step 2" in (failed / "train.log").read_text()
    assert not (failed / "test_metrics.json").exists()


def test_optuna_search_runs_its_trials_and_reports_the_best(tmp_path: Path) -> None:
    check(command_here(["hparams_search=optuna", "hydra.sweeper.n_trials=3", "logger=csv", *GPT], tmp_path))
    jobs = job_dirs(tmp_path)
    assert len(jobs) == 3
    (results,) = tmp_path.glob("multirun/*/*/optimization_results.yaml")
    found = yaml.safe_load(results.read_text())
    assert set(found["best_params"]) == {"optim.lr", "optim.warmup_steps", "model.dropout"}
    best_val = [min(csv_series(job, "val/loss").values()) for job in jobs]  # the monitored metric
    assert math.isclose(found["best_value"], min(best_val), rel_tol=1e-6)


def test_a_failed_single_run_ends_with_one_line_and_its_traceback_in_the_log(tmp_path: Path) -> None:
    fail = "+callbacks.fault={_target_:fault_injection.FailAtStep,step:2}"
    result = command_here([fail, "logger=wandb", *GPT], tmp_path)
    (run,) = tmp_path.glob("outputs/*/*")
    label = run.name.split("_", 1)[1]  # after the time: the overrides of what it trains
    assert label.startswith("trainer.max_steps-6+trainer.val_every_n_steps-3+")
    assert "callbacks" not in run.name and "logger" not in run.name  # what it trains, not how it is written
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: RuntimeError: deliberate failure at step 2 (traceback in {run / 'train.log'})"
    )
    log = (run / "train.log").read_text()
    assert "Traceback (most recent call last)" in log and "fault_injection.py" in log
    assert wandb_history(run, "train/loss").keys() == {0}  # step 1 failed before it was logged
