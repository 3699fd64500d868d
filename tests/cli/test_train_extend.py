"""A finished run extended to more steps, into a new directory and in place: every logged step is in
``metrics.jsonl`` and in the report's curves exactly once, and the learning-rate schedule does what
``optim.on_extend`` says, which the run states."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import CONTINUED_GPT, check, command_here

from attnlab.report.sweep import read_sweep

pytestmark = pytest.mark.slow
ARGS = [*CONTINUED_GPT, "logger=csv"]
TRAIN_STEPS, VAL_STEPS = [2, 4, 6, 8, 10, 12], [4, 8, 12]


@pytest.fixture(scope="module")
def runs(built_once: Callable[..., Path]) -> Path:
    def first_then_extended(cwd: Path) -> None:
        check(command_here([*ARGS, "trainer.max_steps=8", "run_dir=first"], cwd))
        extended = ["trainer.max_steps=12", "run_dir=extended", "ckpt_path=first/checkpoints/last.ckpt"]
        result = check(command_here([*ARGS, *extended], cwd))
        (cwd / "extended.out").write_text(result.stdout + result.stderr)
        in_place = ["trainer.max_steps=12", "run_dir=first", "ckpt_path=last", "optim.on_extend=stretch"]
        (cwd / "in_place.out").write_text(check(command_here([*ARGS, *in_place], cwd)).stdout)

    return built_once("extend", first_then_extended)


def steps_of(records: list[dict], key: str) -> list[int]:
    return [r["step"] for r in records if r.get(key) is not None]


@pytest.mark.parametrize("run", ["extended", "first"])
def test_every_logged_step_is_in_metrics_jsonl_and_the_report_once(runs: Path, run: str) -> None:
    records = [json.loads(line) for line in (runs / run / "metrics.jsonl").read_text().splitlines()]
    assert steps_of(records, "train/loss") == TRAIN_STEPS
    assert steps_of(records, "val/loss") == VAL_STEPS
    assert steps_of(records, "test/loss") == [12]
    curves = read_sweep([runs / run]).curves
    assert curves.dropna(subset=["train/loss"])["step"].tolist() == TRAIN_STEPS
    assert curves.dropna(subset=["val/loss"])["step"].tolist() == VAL_STEPS


def lr_by_step(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["lr"] for r in map(json.loads, lines) if "lr" in r}


def test_extending_keeps_the_schedule_by_default_and_says_so(runs: Path) -> None:
    lr = lr_by_step(runs / "extended")
    assert lr[10] == lr[12] == pytest.approx(1e-4)  # the 8-step cosine's floor: 0.1 x optim.lr
    out = (runs / "extended.out").read_text()
    assert "trainer.max_steps=12 runs past the end of the checkpoint's cosine schedule (step 8)" in out
    assert "resumed into a new directory: its best checkpoints are chosen among its own" in out
    assert "dirpath has changed" not in out  # Lightning's warning, said in a line of ours instead
    summary = json.loads((runs / "extended" / "summary.json").read_text())
    assert summary["schedule"] == {"name": "cosine", "steps": 8, "checkpoint_steps": 8, "on_extend": "keep"}


def test_on_extend_stretch_stretches_the_schedule_to_the_new_max_steps(runs: Path) -> None:
    lr = lr_by_step(runs / "first")
    assert lr[10] > 2e-4 > lr[8] and lr[12] < lr[10]  # lr[s]: the rate of step s, lambda(s - 1)
    assert "now ends at step 12" in (runs / "in_place.out").read_text()
    summary = json.loads((runs / "first" / "summary.json").read_text())
    assert summary["schedule"] == {
        "name": "cosine",
        "steps": 12,
        "checkpoint_steps": 8,
        "on_extend": "stretch",
    }
