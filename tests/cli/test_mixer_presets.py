"""The mixer presets (``conf/model/{deepseek_v3,diffllama}``) build the mixer they name, and train
through attnlab-train (its end-of-run sample decodes from their caches)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from train_cli import TEXT, TINY, check, cli, csv_series

from attnlab.blocks.mixers import DifferentialAttention, LatentAttention
from attnlab.cli.app import config_dir, register_schemas
from attnlab.models import build_model
from attnlab.schema.load import to_object

PRESETS = {"deepseek_v3": LatentAttention, "diffllama": DifferentialAttention}


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_builds_its_mixer(preset: str) -> None:
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = to_object(compose("train", [f"model={preset}", "model.vocab_size=64"])).model
    cfg.check()
    model = build_model(cfg)
    assert all(isinstance(layer.self_attn.fn, PRESETS[preset]) for layer in model.stack.layers)


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains(preset: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    check(cli([f"model={preset}", "logger=csv", f"run_dir={run}", *TINY, *TEXT], tmp_path))
    losses = list(csv_series(run, "train/loss").values())
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
