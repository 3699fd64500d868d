"""Every run ends with a validation at its last step and a best checkpoint, however short: an
Optuna search of runs shorter than one validation interval completes, a resumed run is
tested on its own weights, and a run that never validates says which settings to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from train_cli import TEXT, TINY, check, cli, job_dirs

pytestmark = pytest.mark.slow
# Shorter than the default validation interval (100 steps), which these runs keep.
SHORT = [
    *(a for a in TINY if not a.startswith(("trainer.val_every_n_steps", "trainer.max_steps"))),
    *TEXT,
    "model=gpt-tiny",
    "sample.max_new_tokens=0",
    "logger=none",
    "trainer.max_steps=5",
]


def jsonl(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_shorter_than_the_validation_interval_validates_at_its_last_step(tmp_path: Path) -> None:
    check(cli([*SHORT, "run_dir=run"], tmp_path))
    run = tmp_path / "run"
    assert [r["step"] for r in jsonl(run) if "val/loss" in r] == [5]
    assert (run / "checkpoints" / "best-step000005.ckpt").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["step"] == 5
    data = yaml.safe_load((run / "config.yaml").read_text())["data"]
    assert summary["train_tokens"] == 5 * data["batch_size"] * data["seq_len"]  # a run's compute, with:
    flops = summary["flops_per_token"]
    assert flops["seq_len"] == data["seq_len"] and 0 < flops["nanogpt"] < flops["chinchilla"]
    assert "appendix F" in flops["counts"]
    tested = json.loads((run / "test_metrics.json").read_text())
    assert tested["ckpt_path"].endswith("best-step000005.ckpt")


def test_optuna_trials_shorter_than_the_validation_interval_complete(tmp_path: Path) -> None:
    check(cli(["hparams_search=optuna", "hydra.sweeper.n_trials=3", *SHORT], tmp_path))
    assert len(job_dirs(tmp_path)) == 3
    (results,) = tmp_path.glob("multirun/*/*/optimization_results.yaml")
    assert yaml.safe_load(results.read_text())["best_value"] > 0


def test_a_resumed_run_is_tested_on_the_weights_it_trained(tmp_path: Path) -> None:
    args = [*SHORT, "trainer.val_every_n_steps=4", "trainer.max_steps=4", "run_dir=run"]
    check(cli(args, tmp_path))
    first = json.loads((tmp_path / "run" / "test_metrics.json").read_text())
    assert [r["step"] for r in jsonl(tmp_path / "run") if "val/loss" in r] == [4]  # once, not twice
    check(cli([*args, "ckpt_path=last", "trainer.max_steps=6"], tmp_path))
    assert [r["step"] for r in jsonl(tmp_path / "run") if "val/loss" in r] == [4, 6]
    resumed = json.loads((tmp_path / "run" / "test_metrics.json").read_text())
    assert first["ckpt_path"].endswith("best-step000004.ckpt")
    assert resumed["ckpt_path"].endswith("best-step000006.ckpt")  # validated at 6, and better than at 4
    assert resumed["metrics"]["test/loss"] < first["metrics"]["test/loss"]  # not step 4's again


def test_a_run_that_would_never_validate_is_one_line_before_it_starts(tmp_path: Path) -> None:
    """It was refused after the run directory, the model and 148 lines of output."""
    result = cli([*SHORT, "trainer.limit_val_batches=0", "run_dir=run"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: trainer.limit_val_batches=0: a run validates (task.monitor picks the best checkpoint and "
        "the test's): give a count of batches or a fraction above 0"
    ]
    assert not (tmp_path / "run").exists()
