"""``ckpt_path=auto``: the same command line starts a run, and resumes it after a restart (what
torchrun's and a scheduler's restarts rely on). Both starts run in this process (``command_here``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from in_process import restored
from train_cli import TEXT, TINY, check, command_here

pytestmark = pytest.mark.slow
GPT = [*TINY, *TEXT, "model=gpt-tiny", "sample.max_new_tokens=0", "logger=csv"]


def test_auto_starts_fresh_then_resumes_in_place(tmp_path: Path) -> None:
    args = [*GPT, "run_dir=run", "ckpt_path=auto"]
    with restored():
        check(command_here([*args, "trainer.max_steps=3"], tmp_path))
    run = tmp_path / "run"
    assert (run / "csv" / "metrics.csv").is_file() and not (run / "csv" / "resumed-1").exists()
    with restored():
        check(command_here([*args, "trainer.max_steps=6"], tmp_path))
    assert (run / "csv" / "resumed-1" / "metrics.csv").is_file()  # the second start resumed in place
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 6
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "train/loss" in r] == [1, 2, 3, 4, 5, 6]  # each step once
