"""A run killed after a checkpoint and resumed with ``ckpt_path`` logs the same per-step losses as an
uninterrupted run (model, optimizer, schedule, data position and dropout all continue exactly), and
keeps logging to the same wandb run.

The killed run is a process of its own, forked from the preloaded fork server (SIGKILL: nothing of it
runs after the kill); the uninterrupted
run and every resume run in this process (``command_here``). The tests that read the killed run are
process contracts; the uninterrupted run is built apart, so that the test that needs only it starts
no process."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from in_process import restored
from train_cli import (
    TEXT,
    TINY,
    check,
    command_here,
    csv_series,
    start_and_kill_after_first_checkpoint,
    wandb_history,
    wandb_run,
)

pytestmark = pytest.mark.slow
STEPS = 24
ARGS = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "model.dropout=0.1",
    "logger=many",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=7",
    "checkpoint.every_n_steps=5",
    "optim.warmup_steps=5",
    "test_after_fit=false",
]


def train_here(args: list[str], cwd: Path) -> None:
    """attnlab-train ``args`` in this process, in ``cwd``; it must succeed."""
    with restored():
        check(command_here(args, cwd))


@pytest.fixture(scope="module")
def full(built_once: Callable[..., Path]) -> Path:
    """The uninterrupted run (in this process)."""
    return built_once("resume-full", lambda cwd: train_here([*ARGS, "run_dir=full"], cwd)) / "full"


@pytest.fixture(scope="module")
def runs(built_once: Callable[..., Path], full: Path) -> dict[str, Path | int]:
    """The uninterrupted run, one SIGKILLed (a process) after its first checkpoint, and that one resumed
    from its checkpoint into another directory (here); the step it was killed at."""

    def killed_and_resumed(cwd: Path) -> None:
        killed_at = start_and_kill_after_first_checkpoint(ARGS, cwd, cwd / "killed")
        train_here([*ARGS, "run_dir=resumed", "ckpt_path=killed/checkpoints/last.ckpt"], cwd)
        (cwd / "killed_at").write_text(str(killed_at))

    cwd = built_once("resume-killed", killed_and_resumed)
    killed_at = int((cwd / "killed_at").read_text())
    return {"full": full, "killed": cwd / "killed", "resumed": cwd / "resumed", "step": killed_at}


@pytest.mark.process_contract("kills")
def test_resumed_losses_equal_the_uninterrupted_run(runs: dict) -> None:
    assert 0 < runs["step"] < STEPS
    full, resumed = csv_series(runs["full"], "train/loss"), csv_series(runs["resumed"], "train/loss")
    assert sorted(resumed) == list(range(runs["step"], STEPS))
    assert resumed == {step: full[step] for step in resumed}  # bit for bit
    full_val, resumed_val = csv_series(runs["full"], "val/loss"), csv_series(runs["resumed"], "val/loss")
    assert resumed_val == {step: full_val[step] for step in resumed_val}


@pytest.mark.process_contract("kills")
def test_resume_continues_the_same_wandb_run(runs: dict) -> None:
    (killed,) = (runs["killed"] / "wandb").glob("offline-run-*")  # offline-run-<time>-<run id>
    assert wandb_run(runs["resumed"])["run_id"] == killed.name.rsplit("-", 1)[1]
    assert min(wandb_history(runs["resumed"], "train/loss")) == runs["step"]


def jsonl_series(run_dir: Path, key: str) -> dict[int, float]:
    """{step: value} of a metric in the run's metrics.jsonl; each step must be there once."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if key in r]
    assert len(steps) == len(set(steps)), f"a step of {key} logged twice: {steps}"
    return {r["step"]: r[key] for r in records if key in r}


@pytest.mark.process_contract("kills")
def test_a_killed_run_says_so_and_its_metrics_file_continues_in_place(runs: dict) -> None:
    """SIGKILL leaves summary.json at "running". Resumed in place, metrics.jsonl drops what was logged
    after the checkpoint (and a line cut short by the kill), then holds each step once, the very
    values of the uninterrupted run."""
    assert json.loads((runs["killed"] / "summary.json").read_text())["status"] == "running"
    in_place = runs["killed"].with_name("killed-in-place")
    shutil.copytree(runs["killed"], in_place)
    with open(in_place / "metrics.jsonl", "a") as f:
        f.write('{"step": 23, "time_s": 1.0, "train/loss": 0.0}\n{"step": 24, "tr')
    train_here([*ARGS, f"run_dir={in_place.name}", "ckpt_path=last"], in_place.parent)
    full = jsonl_series(runs["full"], "train/loss")
    assert sorted(full) == list(range(1, STEPS + 1))  # steps done, as in checkpoint names
    # Lightning saves a step's checkpoint before it logs the step: a kill in between loses that line.
    lost = set() if runs["step"] in jsonl_series(runs["killed"], "train/loss") else {runs["step"]}
    expected = {step: loss for step, loss in full.items() if step not in lost}
    assert jsonl_series(in_place, "train/loss") == expected
    assert jsonl_series(in_place, "val/loss") == jsonl_series(runs["full"], "val/loss")
    assert sorted(jsonl_series(in_place, "val/loss")) == [7, 14, 21, 24]  # every 7 steps, and the last
    summary = json.loads((in_place / "summary.json").read_text())
    assert (summary["status"], summary["final_step"]) == ("completed", STEPS)


def test_ckpt_path_last_resumes_in_place(full: Path, tmp_path: Path) -> None:
    """``ckpt_path=last run_dir=<run>``: the newest last.ckpt of that directory; the run continues there
    (here for 4 more steps), and the metrics it logged before are kept. On a copy of the full run:
    the other tests (on other workers too) read the original."""
    cwd, original, full = tmp_path, full, tmp_path / "full"
    shutil.copytree(original, full)
    before = csv_series(full, "train/loss")
    train_here([*ARGS, "run_dir=full", "ckpt_path=last", f"trainer.max_steps={STEPS + 4}"], cwd)
    assert not (cwd / "outputs").exists()
    assert csv_series(full, "train/loss") == before
    continued = csv_series(full / "csv" / "resumed-1", "train/loss")
    assert sorted(continued) == list(range(STEPS, STEPS + 4))
