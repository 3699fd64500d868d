"""The mixer presets (``conf/model/{deepseek_v3,diffllama,qwen3_next}``) build the mixers they name, and
train through attnlab-train (its end-of-run sample decodes from their caches)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from in_process import restored
from train_cli import TEXT, TINY, check, command_here, csv_series

from attnlab.blocks.attention import SelfAttention
from attnlab.blocks.mixers import DifferentialAttention, GatedDeltaNet, LatentAttention
from attnlab.models import build_model
from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.load import to_object

PRESETS = {  # each layer's mixer
    "deepseek_v3": [LatentAttention] * 4,
    "diffllama": [DifferentialAttention] * 4,
    "qwen3_next": [GatedDeltaNet, GatedDeltaNet, GatedDeltaNet, SelfAttention],  # 3 linear : 1 full
}


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_builds_its_mixer(preset: str) -> None:
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = to_object(compose("train", [f"model={preset}", "model.vocab_size=64"])).model
    cfg.check()
    model = build_model(cfg)
    assert [type(layer.self_attn.fn) for layer in model.stack.layers] == PRESETS[preset]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains(preset: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    with restored():  # attnlab-train in this process
        check(command_here([f"model={preset}", "logger=csv", f"run_dir={run}", *TINY, *TEXT], tmp_path))
    losses = list(csv_series(run, "train/loss").values())
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
