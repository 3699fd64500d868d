"""A run continued from its checkpoint with changed optimiser settings (the remedy for a diverged run):
refused by default in one line that names ``optim.on_resume=apply``; with it, the restored optimizer
and schedule take the new values, the change is printed, and ``summary.json`` and the checkpoints
record it; model and data changes stay refused. Resumed with nothing left to train, a finished run
tests again and its metrics.jsonl holds one test line."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from train_cli import CONTINUED_GPT, check, command_here

pytestmark = pytest.mark.slow
ARGS = CONTINUED_GPT
# The continuation: a lower constant rate and more weight decay from step 8 on, to step 12.
CHANGED = ["optim.lr=5e-4", "optim.schedule=constant", "optim.weight_decay=0.2"]
CONTINUE = ["run_dir=run", "ckpt_path=last", "trainer.max_steps=12", *CHANGED]


@pytest.fixture(scope="module")
def runs(built_once: Callable[..., Path]) -> Path:
    def first_refused_then_continued(cwd: Path) -> None:
        check(command_here([*ARGS, "trainer.max_steps=8", "run_dir=run"], cwd))
        (cwd / "first.jsonl").write_text((cwd / "run" / "metrics.jsonl").read_text())
        check(
            command_here([*ARGS, "trainer.max_steps=8", "run_dir=run", "ckpt_path=last"], cwd)
        )  # nothing to train
        (cwd / "again.jsonl").write_text((cwd / "run" / "metrics.jsonl").read_text())
        (cwd / "before.json").write_text((cwd / "run" / "summary.json").read_text())
        refused = command_here([*ARGS, *CONTINUE], cwd)
        (cwd / "refused.json").write_text(json.dumps([refused.returncode, refused.stdout, refused.stderr]))
        (cwd / "after_refusal.json").write_text((cwd / "run" / "summary.json").read_text())
        result = check(command_here([*ARGS, *CONTINUE, "optim.on_resume=apply"], cwd))
        (cwd / "continued.out").write_text(result.stdout + result.stderr)

    return built_once("continue", first_refused_then_continued)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_finished_run_resumed_in_place_tests_again_and_logs_its_test_once(runs: Path) -> None:
    first, again = records(runs / "first.jsonl"), records(runs / "again.jsonl")
    assert [r["step"] for r in again if "test/loss" in r] == [8]
    assert [r for r in again if "test/loss" not in r] == [r for r in first if "test/loss" not in r]


def test_changed_optimiser_settings_are_refused_in_one_line_naming_the_switch(runs: Path) -> None:
    code, _, stderr = json.loads((runs / "refused.json").read_text())
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: optim.lr=0.0005: the checkpoint ")
    assert "was trained with optim.lr=0.001" in lines[0]
    assert "add optim.on_resume=apply to continue with the changed optimiser settings" in lines[0]
    assert (runs / "after_refusal.json").read_text() == (runs / "before.json").read_text()


def test_the_continuation_trains_with_the_new_values_and_records_them(runs: Path) -> None:
    logged = records(runs / "run" / "metrics.jsonl")
    lr = {r["step"]: r["lr"] for r in logged if "lr" in r}
    assert [r["step"] for r in logged if "test/loss" in r] == [12]
    cosine_at_7 = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 5 / 6))  # 5 of its 6 decaying steps done
    assert lr[8] == pytest.approx(1e-3 * cosine_at_7)  # the first run's 8-step cosine (lr[s]: lambda(s - 1))
    assert lr[10] == lr[12] == pytest.approx(5e-4)  # the new constant rate, not 1e-3 nor the floor
    last = torch.load(runs / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    groups = last["optimizer_states"][0]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.2, 0.0]  # the decayed group's, the other none
    assert [g["initial_lr"] for g in groups] == [5e-4, 5e-4]
    assert last["lr_schedulers"][0]["lr_lambdas"][0]["name"] == "constant"
    assert last["optimizer_states"][0]["state"][0]["step"] == 12  # Adam's moments went on, not reset
    entry = {
        "step": 8,
        "ckpt_path": str((runs / "run" / "checkpoints" / "last.ckpt").resolve()),
        "changed": {
            "optim.lr": [0.001, 0.0005],
            "optim.weight_decay": [0.1, 0.2],
            "optim.schedule": ["cosine", "constant"],
        },
    }
    summary = json.loads((runs / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["continuations"] == [entry]
    assert last["attnlab_run"]["continuations"] == [entry]  # carried on by the next resume
    said = f"optim.on_resume=apply: from step 8 of {entry['ckpt_path']}: optim.lr 0.001 -> 0.0005"
    assert said in (runs / "continued.out").read_text()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("model.n_layers=3", "error: model.n_layers=3: the checkpoint "),
        ("optim.decay=all", "optim.on_resume=apply changes only optim.adamw.betas"),
    ],
)
def test_model_and_optimizer_shape_changes_stay_refused(runs: Path, override: str, named: str) -> None:
    args = [*ARGS, "run_dir=run", "ckpt_path=last", "optim.on_resume=apply", override, *CHANGED]
    result = command_here([*args, "trainer.max_steps=12"], runs)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert named in result.stderr
