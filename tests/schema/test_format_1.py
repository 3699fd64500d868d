"""Configs saved by attnlab before the schema had one class per family, data kind, task, positional
encoding and optimiser (format 1: flat classes, every key of every family, an untagged optimiser) still
read: the run and checkpoint configs below were written by attnlab-train at commit 7dc7986."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.schema.checks import validate_saved
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import (
    from_format_1,
    is_format_1,
    read_model_config,
    read_optim_config,
    read_task_config,
    upgrade_group,
)

DATA = Path(__file__).parent / "data"


def saved(family: str) -> dict:
    return json.loads((DATA / f"format_1_{family}.json").read_text())


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_a_format_1_run_config_reads_with_the_values_it_was_trained_with(family: str) -> None:
    old = saved(family)["run"]
    assert is_format_1(old)
    run = validate_saved(old)
    assert str(run.model.family) == family and str(run.optim.name) == "adamw"
    assert run.model.d_model == old["model"]["d_model"] and run.optim.lr == old["optim"]["lr"]
    assert str(run.data.kind) == old["data"]["kind"] and run.seed == old["seed"]
    assert not is_format_1(from_format_1(old))


def test_keys_of_other_families_are_dropped_and_unknown_keys_still_refused() -> None:
    old = saved("vit")["checkpoint"]
    assert old["format"] == 1 and "n_decoder_layers" in old["model"]
    model = read_model_config(upgrade_group("model", old["model"]))
    assert (model.image_size, model.patch_size) == (old["model"]["image_size"], old["model"]["patch_size"])
    assert not hasattr(model, "n_decoder_layers")
    assert read_task_config(upgrade_group("task", old["task"])).monitor == old["task"]["monitor"]
    assert read_optim_config(upgrade_group("optim", old["optim"])).betas == old["optim"]["betas"]
    with pytest.raises(ConfigError, match=r"model\.n_experts=8: not a known key"):
        read_model_config(upgrade_group("model", {**old["model"], "n_experts": 8}))


def test_loggers_by_name_and_a_list_of_callbacks_read_as_target_configs() -> None:
    """Formats 1 and 2 (before loggers and callbacks were _target_ configs) named loggers in ``logger.names`` and listed callbacks."""
    old = saved("bert")["run"]
    old = {
        **old,
        "logger": {**old["logger"], "names": ["wandb", "tensorboard"], "run_name": "r", "tags": ["t"]},
        "callbacks": [{"_target_": "pytorch_lightning.callbacks.EarlyStopping", "monitor": "val/loss"}],
    }
    run = validate_saved(old)
    assert run.logger.csv is None and run.logger.tensorboard is not None and run.logger.tags == ["t"]
    assert (run.logger.wandb.name, run.logger.wandb.project) == ("r", old["logger"]["project"])
    assert run.callbacks == {"callback_0": old["callbacks"][0]}
