"""The presets of current model families (``conf/model/{smollm3,gemma2,gpt_oss,qwen3,qwen3_next,phi3}``)
train through attnlab-train (run in this process, ``command_here``), and QK-clip with the largest-logit
metric runs in a real training run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from in_process import restored
from train_cli import TEXT, TINY, check, command_here, csv_series

PRESETS = ["smollm3", "gemma2", "gpt_oss", "qwen3", "qwen3_next", "phi3"]


def test_gemma2_trains_under_muon_with_qk_clip_and_logs_its_largest_logits(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["model=gemma2", "optim=muon", "optim.qk_clip=30", "optim.log_max_logits=true", "logger=csv"]
    with restored():
        check(command_here([*args, f"run_dir={run}", *TINY, *TEXT], tmp_path))
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["layout"] == "sliding full ..." and config["optim"]["qk_clip"] == 30
    largest = csv_series(run, "train/max_logit/stack.layers.1")
    assert len(largest) == 6 and all(0 < v <= 30 * (1 + 1e-5) for v in largest.values())
    assert all(torch.isfinite(torch.tensor(list(csv_series(run, "train/loss").values()))))


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_trains(preset: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    with restored():
        check(command_here([f"model={preset}", "logger=csv", f"run_dir={run}", *TINY, *TEXT], tmp_path))
    losses = list(csv_series(run, "train/loss").values())
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
