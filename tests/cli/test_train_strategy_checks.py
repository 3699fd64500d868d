"""``trainer=fsdp``: its clipping default passes validation; FSDP on the CPU (which Lightning cannot run)
is refused in one line before the run directory exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_train_config import composed, run_config

from attnlab.cli.train import check_job
from attnlab.run.devices import check_strategy
from attnlab.schema.errors import ConfigError

REFUSED = "trainer.strategy=fsdp: shards over GPUs (trainer.accelerator=gpu); on the CPU use trainer=cpu"


def test_fsdp_with_gradient_clipping_passes_the_config_rules() -> None:
    run = run_config("trainer=fsdp")
    assert (run.trainer.strategy, run.trainer.accelerator, run.trainer.gradient_clip_val) == (
        "fsdp",
        "gpu",
        1.0,
    )
    check_strategy(run.trainer)


def test_fsdp_on_the_cpu_is_refused_before_the_run_directory(tmp_path: Path) -> None:
    config = composed("trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2")
    with pytest.raises(ConfigError) as refused:
        check_job(config, tmp_path / "run", [])
    assert str(refused.value).startswith(REFUSED) and not (tmp_path / "run").exists()


def test_fsdp_with_accelerator_auto_is_refused_on_a_machine_without_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = run_config("trainer=fsdp", "trainer.accelerator=auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"trainer\.strategy=fsdp: shards over GPUs"):
        check_strategy(run.trainer)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_strategy(run.trainer)
