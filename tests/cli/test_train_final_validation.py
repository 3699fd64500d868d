"""Every run ends with a validation at its last step and a best checkpoint, however short: an
Optuna search of runs shorter than one validation interval completes, a resumed run is
tested on its own weights, and a run that never validates says which settings to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from train_cli import TEXT, TINY, job_dirs, run_command

from attnlab import run as attnlab_run
from attnlab.cli.train import main as attnlab_train

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


def train(args: list[str], run_dir: Path) -> attnlab_run.RunResult:
    return attnlab_run.train(attnlab_run.run_config(args), run_dir)


def test_a_run_shorter_than_the_validation_interval_validates_at_its_last_step(tmp_path: Path) -> None:
    run = train(SHORT, tmp_path / "run").run_dir
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


def test_optuna_trials_shorter_than_the_validation_interval_complete(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        run_command(attnlab_train, ["hparams_search=optuna", "hydra.sweeper.n_trials=3", *SHORT], monkeypatch)
        == 0
    )
    assert len(job_dirs(tmp_path)) == 3
    (results,) = tmp_path.glob("multirun/*/*/optimization_results.yaml")
    assert yaml.safe_load(results.read_text())["best_value"] > 0


def test_a_resumed_run_is_tested_on_the_weights_it_trained(tmp_path: Path) -> None:
    args = [*SHORT, "trainer.val_every_n_steps=4", "trainer.max_steps=4"]
    train(args, tmp_path / "run")
    first = json.loads((tmp_path / "run" / "test_metrics.json").read_text())
    assert [r["step"] for r in jsonl(tmp_path / "run") if "val/loss" in r] == [4]  # once, not twice
    train([*args, "ckpt_path=last", "trainer.max_steps=6"], tmp_path / "run")
    assert [r["step"] for r in jsonl(tmp_path / "run") if "val/loss" in r] == [4, 6]
    resumed = json.loads((tmp_path / "run" / "test_metrics.json").read_text())
    assert first["ckpt_path"].endswith("best-step000004.ckpt")
    assert resumed["ckpt_path"].endswith("best-step000006.ckpt")  # validated at 6, and better than at 4
    assert resumed["metrics"]["test/loss"] < first["metrics"]["test/loss"]  # not step 4's again


def test_a_run_that_would_never_validate_is_one_line_before_it_starts(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """It was refused after the run directory, the model and 148 lines of output."""
    monkeypatch.chdir(tmp_path)
    args = [*SHORT, "trainer.limit_val_batches=0", "run_dir=run"]
    assert run_command(attnlab_train, args, monkeypatch, capsys) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: trainer.limit_val_batches=0: a run validates (task.monitor picks the best checkpoint and "
        "the test's): give a count of batches or a fraction above 0"
    ]
    assert not (tmp_path / "run").exists()
