"""``trainer.timeout``: the bound on every collective of the DDP/FSDP strategies, by backend unless set."""

from __future__ import annotations

from datetime import timedelta

import pytest

from attnlab.schema.errors import ConfigError
from attnlab.schema.run import TrainerConfig
from attnlab.training.trainer import strategy


@pytest.mark.parametrize(
    ("settings", "seconds"),
    [
        ({"accelerator": "cpu"}, 120),  # gloo: a dead peer shows within two minutes
        ({"accelerator": "gpu"}, 1800),  # NCCL: PyTorch's own default
        ({"accelerator": "gpu", "timeout": 45}, 45),  # trainer.timeout wins over the backend's
    ],
)
@pytest.mark.parametrize("name", ["ddp", "fsdp", "fsdp2"])
def test_the_strategies_bound_their_collectives(name: str, settings: dict, seconds: int) -> None:
    built = strategy(TrainerConfig(strategy=name, **settings))
    assert built._timeout == timedelta(seconds=seconds)


@pytest.mark.parametrize("value", [0, -5])
def test_a_timeout_that_is_not_positive_is_one_error_line(value: int) -> None:
    with pytest.raises(ConfigError, match=f"trainer.timeout={value}: must be positive"):
        TrainerConfig(timeout=value).check()
