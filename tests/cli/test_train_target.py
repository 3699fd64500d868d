"""``trainer.target_metric``/``target_value`` in a real run: it stops at the first validation at or
below the target, and summary.json's time, tokens and FLOPs to it are those of that step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
RUN = [
    "model=gpt-tiny",
    "data.seq_len=32",
    "data.batch_size=8",
    "trainer.max_steps=8",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "checkpoint.every_n_steps=100",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "logger=none",
]


def train_with_summary(overrides: list[str], run_dir: Path) -> tuple[dict, list[dict]]:
    """A run trained in this process as attnlab-train trains it, with its summary.json; the summary
    and the lines of its metrics.jsonl."""
    from hydra import compose, initialize_config_dir

    from attnlab.run.configs import register_schemas
    from attnlab.run.fit import train
    from attnlab.run.presets import config_dir
    from attnlab.schema.checks import validate
    from attnlab.training.summary import RunSummary

    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    summary = RunSummary(run_dir)
    train(validate(cfg), run_dir, summary=summary)
    summary.finish("completed")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "summary.json").read_text()), lines


def validations(lines: list[dict]) -> dict[int, dict]:
    return {line["step"]: line for line in lines if "val/loss" in line}


def test_a_run_stops_at_its_target_and_records_that_steps_cost(tmp_path: Path) -> None:
    _, free = train_with_summary(RUN, tmp_path / "free")
    losses = {step: line["val/loss"] for step, line in validations(free).items()}
    assert list(losses) == [2, 4, 6, 8] and losses[4] > losses[6]  # a falling curve to aim into
    target = (losses[4] + losses[6]) / 2  # above step 6's loss, below step 4's: reached at step 6

    summary, lines = train_with_summary(
        [*RUN, "trainer.target_metric=val/loss", f"trainer.target_value={target}"], tmp_path / "target"
    )
    assert summary["final_step"] == 6  # stopped there, not at max_steps=8
    assert max(validations(lines)) == 6
    record = summary["target"]
    assert record["reached"] is True and record["step"] == 6 and record["mode"] == "min"
    assert record["metric_value"] == pytest.approx(losses[6], rel=1e-5)
    assert record["wall_time_s"] == validations(lines)[6]["time_s"]
    assert record["tokens"] == 6 * 8 * 32 == summary["train_tokens"]
    per_token = summary["flops_per_token"]["chinchilla"]
    assert record["flops"] == pytest.approx(6 * 8 * 32 * per_token)


@pytest.mark.process_contract("kills")
def test_a_run_killed_before_its_target_counts_the_time_and_tokens_before_the_kill(tmp_path: Path) -> None:
    """SIGKILLed after step 5 (its last checkpoint: step 4), then the same command again: it resumes
    from step 4 and reaches the target at step 6, with the tokens of all 6 steps and the clock of
    metrics.jsonl, which goes on from the first process's step-4 line. The killed run is a process of
    its own, forked from the preloaded fork server (nothing of it runs after the kill); the restart is
    attnlab-train in this process."""
    from in_process import restored
    from train_cli import command_here, killed_cli

    _, free = train_with_summary(RUN, tmp_path / "free")
    losses = {step: line["val/loss"] for step, line in validations(free).items()}
    target = (losses[4] + losses[6]) / 2
    marker = tmp_path / "killed-once"
    kill = (
        f"+callbacks.kill={{_target_: fault_injection.KillOnceAtStep, step: 5, rank: 0, marker: '{marker}'}}"
    )
    command = [*RUN, "trainer.target_metric=val/loss", f"trainer.target_value={target}", kill]
    command += [
        "run_dir=killed",
        "ckpt_path=auto",
        "checkpoint.every_n_steps=4",
        "checkpoint.async_save=false",
    ]
    first = killed_cli(command, tmp_path)
    assert first.returncode != 0 and marker.exists()  # killed at step 5
    before = validations([json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").open()])
    assert max(before) == 4

    with restored():
        second = command_here(command, tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert (tmp_path / "killed" / "checkpoints" / "last.ckpt").is_file()
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    lines = validations([json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").open()])
    record = summary["target"]
    assert record["step"] == 6 and summary["final_step"] == 6
    assert record["tokens"] == 6 * 8 * 32  # counted before the kill too
    assert record["wall_time_s"] == lines[6]["time_s"] > lines[4]["time_s"] == before[4]["time_s"]
