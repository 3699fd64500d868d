"""Adding a family or a positional encoding is one module and one YAML (tests/cli/extension/): each
registers its schema class and its builder, and attnlab-train trains it with no other change."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from train_cli import TEXT, TINY, check, cli_env, csv_series

EXTENSION = Path(__file__).resolve().parent / "extension"
# attnlab-train, in a process that has imported the two modules (what a user's entry point does)
TRAIN = "import linear_pos, tinygpt; from attnlab.cli.train import main; main()"


def train_with_extensions(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = cli_env(cwd)
    env["PYTHONPATH"] = f"{EXTENSION}:{env['PYTHONPATH']}"
    search = f"hydra.searchpath=[file://{EXTENSION / 'conf'}]"
    return subprocess.run(
        [sys.executable, "-c", TRAIN, search, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_new_family_with_a_new_positional_encoding_trains(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["model=tinygpt", "pos=linear", "model.pos.slope=0.02", "logger=csv", f"run_dir={run}"]
    check(train_with_extensions([*args, *TINY, *TEXT], tmp_path))
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["family"] == "tinygpt" and config["model"]["readout_scale"] == 0.5
    assert config["model"]["pos"] == {"name": "linear", "slope": 0.02}
    losses = csv_series(run, "train/loss")
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(list(losses.values()))))
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["hyper_parameters"]["model"]["pos"]["name"] == "linear"


def test_the_extensions_build_and_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, registered for this test only: the model is the new class, its embeddings
    move with the position, and its logits are gpt's times the readout multiplier."""
    from attnlab.blocks.positional import POSITIONAL
    from attnlab.models import MODEL_CLASSES, DecoderLM, build_model
    from attnlab.schema.model import MODELS
    from attnlab.schema.pos import POSITIONS

    registries = (MODELS.schemas, POSITIONS.schemas, MODEL_CLASSES.table, POSITIONAL.table)
    saved = [dict(registry) for registry in registries]
    monkeypatch.syspath_prepend(str(EXTENSION))
    try:
        tinygpt, linear_pos = importlib.import_module("tinygpt"), importlib.import_module("linear_pos")
        cfg = tinygpt.TinyGPTConfig(vocab_size=11, pos=linear_pos.LinearPos(slope=0.5))
        cfg.check()
        torch.manual_seed(0)
        model = build_model(cfg).eval()
        assert type(model) is tinygpt.TinyGPT
        assert isinstance(model.embed.pos, linear_pos.LinearPositionalEncoding)
        moved = model.embed.pos.embed(torch.zeros(1, 4, cfg.d_model), torch.arange(4))
        assert torch.equal(moved[0, :, 0], torch.arange(4) * 0.5)
        gpt = DecoderLM(cfg).eval()
        gpt.load_state_dict(model.state_dict())
        ids = torch.tensor([[1, 2, 3, 4]])
        torch.testing.assert_close(model(ids), gpt(ids) * 0.5)
    finally:
        for registry, before in zip(registries, saved):
            registry.clear()
            registry.update(before)
        for name in ("tinygpt", "linear_pos"):
            sys.modules.pop(name, None)
