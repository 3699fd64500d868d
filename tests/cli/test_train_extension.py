"""Adding a family or a positional encoding is one module and one YAML (tests/cli/extension/): each
registers its schema class and its builder, and attnlab-train trains it with no other change.

attnlab-train runs in this process once the two modules are imported, as a user's entry point runs it
(``import linear_pos, tinygpt; from attnlab.cli.train import main; main()``); what they registered
is taken back after each test."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from in_process import restored
from train_cli import TEXT, TINY, check, command_here, csv_series

EXTENSION = Path(__file__).resolve().parent / "extension"


@contextlib.contextmanager
def extensions_imported(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, ModuleType]]:
    """``tinygpt`` and ``linear_pos`` imported (registered), for the body only: the registries, the
    schema nodes that a command put in Hydra's config store for them, and the modules go after."""
    from hydra.core.config_store import ConfigStore

    from attnlab.blocks.positional import POSITIONAL
    from attnlab.models import MODEL_CLASSES
    from attnlab.schema.model import MODELS
    from attnlab.schema.pos import POSITIONS

    registries = (MODELS.schemas, POSITIONS.schemas, MODEL_CLASSES.table, POSITIONAL.table)
    saved = [dict(registry) for registry in registries]
    repo = ConfigStore.instance().repo
    for group in ("model", "pos"):  # a copy to store into, the group itself put back after
        monkeypatch.setitem(repo, group, dict(repo.get(group, {})))
    monkeypatch.syspath_prepend(str(EXTENSION))
    try:
        yield importlib.import_module("tinygpt"), importlib.import_module("linear_pos")
    finally:
        for registry, before in zip(registries, saved):
            registry.clear()
            registry.update(before)
        for name in ("tinygpt", "linear_pos"):
            sys.modules.pop(name, None)


@pytest.mark.slow
def test_a_new_family_with_a_new_positional_encoding_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    search = f"hydra.searchpath=[file://{EXTENSION / 'conf'}]"
    args = [search, "model=tinygpt", "pos=linear", "model.pos.slope=0.02", "logger=csv", f"run_dir={run}"]
    with extensions_imported(monkeypatch), restored():
        check(command_here([*args, *TINY, *TEXT], tmp_path))
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
    from attnlab.models import DecoderLM, build_model

    with extensions_imported(monkeypatch) as (tinygpt, linear_pos):
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
