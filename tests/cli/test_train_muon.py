"""``attnlab-train optim=muon``: a run killed (SIGKILL) after a checkpoint resumes to the same per-step
losses and validations as an uninterrupted run (Muon's momentum and AdamW's moments both continue).
The uninterrupted reference and the resumed run train in the test's own process; the killed run is an
attnlab-train process of its own, forked from the preloaded fork server (SIGKILL: nothing of it runs
after the kill)."""

from __future__ import annotations

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
    train_in_process,
)

pytestmark = pytest.mark.slow
STEPS = 12
ARGS = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "model.dropout=0.1",
    "logger=csv",
    "optim=muon",
    "optim.warmup_steps=3",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=5",
    "checkpoint.every_n_steps=4",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
]


@pytest.mark.process_contract("kills")
def test_a_killed_muon_run_resumes_to_the_same_losses(tmp_path: Path) -> None:
    with restored():
        train_in_process(ARGS, tmp_path / "full")
    killed_at = start_and_kill_after_first_checkpoint(ARGS, tmp_path, tmp_path / "killed")
    with restored():
        check(command_here([*ARGS, "run_dir=resumed", "ckpt_path=killed/checkpoints/last.ckpt"], tmp_path))
    assert 0 < killed_at < STEPS
    full, resumed = (
        csv_series(tmp_path / "full", "train/loss"),
        csv_series(tmp_path / "resumed", "train/loss"),
    )
    assert sorted(resumed) == list(range(killed_at, STEPS))
    assert resumed == {step: full[step] for step in resumed}  # bit for bit
    full_val = csv_series(tmp_path / "full", "val/loss")
    resumed_val = csv_series(tmp_path / "resumed", "val/loss")
    assert resumed_val and resumed_val == {step: full_val[step] for step in resumed_val}
