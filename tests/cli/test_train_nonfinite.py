"""A diverging command: ``optim.lr=1e6`` without warmup or clipping gives a NaN loss at step 2.
The run ends there with one line naming the step and the value, and keeps ``last.ckpt`` of step 1
(finite); ``trainer.on_nonfinite=skip`` counts the skipped steps and stops after N in a row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_cli import TEXT, TINY, run_command

from attnlab.cli.train import main as attnlab_train

pytestmark = pytest.mark.slow
DIVERGES = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "optim.lr=1e6",
    "optim.warmup_steps=0",
    "trainer.gradient_clip_val=0",
    "trainer.max_steps=50",
    "checkpoint.every_n_steps=1",
    "logger=none",
]


def finite_checkpoint_step(path: Path) -> int:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values() if v.is_floating_point())
    return checkpoint["global_step"]


def train(args: list[str], tmp_path: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """attnlab-train in this process, in ``tmp_path``: its exit status, stdout and stderr."""
    monkeypatch.chdir(tmp_path)
    status = run_command(attnlab_train, args, monkeypatch, capsys)
    out, err = capsys.readouterr()
    return status, out, err


def test_a_nan_loss_stops_the_run_at_its_step_with_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    status, _, err = train([*DIVERGES, "run_dir=run"], tmp_path, monkeypatch, capsys)
    assert status == 1
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(
        "error: NonFiniteStep: step 2: loss=nan, gradient norm=nan (trainer.on_nonfinite=stop): stopped "
        "before the optimizer step, so the weights and checkpoints stay finite (traceback in "
    )
    assert finite_checkpoint_step(tmp_path / "run/checkpoints/last.ckpt") == 1
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("NonFiniteStep: step 2: loss=nan")


def test_skip_counts_the_skipped_steps_and_stops_after_n_in_a_row(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    args = [*DIVERGES, "run_dir=run", "trainer.on_nonfinite=skip", "trainer.max_nonfinite_skips=3"]
    status, out, err = train(args, tmp_path, monkeypatch, capsys)
    assert status == 1
    assert (
        "error: NonFiniteStep: step 4: loss=nan, gradient norm=nan: 3 optimizer steps in a row skipped" in err
    )
    for step in (2, 3):
        assert f"step {step}: loss=nan, gradient norm=nan: optimizer step skipped" in out + err
    lines = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert {r["step"]: r["train/skipped_steps"] for r in lines if "train/skipped_steps" in r} == {3: 1.0}
    assert finite_checkpoint_step(tmp_path / "run/checkpoints/last.ckpt") == 3  # skipped steps change nothing
