"""``trainer.target_metric``: the run stops at the first validation at or past the target and
records the steps, tokens, FLOPs and wall time to it; a resumed run's time counts the time before
its kill; a bad target is refused before the run in one line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnlab.schema.errors import ConfigError
from attnlab.training.callbacks.target import StopAtTarget
from attnlab.training.metrics_file import MetricsFileLogger


def fake_trainer(step: int, loss: float, loggers: list) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=step,
        callback_metrics={"val/loss": torch.tensor(loss)},
        sanity_checking=False,
        should_stop=False,
        loggers=loggers,
    )


def test_stops_at_the_first_validation_at_or_below_the_target(tmp_path: Path) -> None:
    logger = MetricsFileLogger(tmp_path)
    callback = StopAtTarget("val/loss", 2.0, "min")
    for step, loss in ((2, 2.5), (4, 2.0), (6, 1.5)):
        trainer = fake_trainer(step, loss, [logger])
        logger.trainer = trainer
        logger.log_metrics({"val/loss": loss})
        callback.on_validation_end(trainer, None)
        if step == 4:
            assert trainer.should_stop  # at the target counts: "at or below"
    assert callback.reached["step"] == 4 and callback.reached["metric_value"] == 2.0
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert callback.reached["wall_time_s"] == lines[1]["time_s"]  # the step-4 line's clock


def test_max_mode_stops_at_or_above() -> None:
    callback = StopAtTarget("val/acc", 0.9, "max")
    trainer = fake_trainer(3, 0.0, [])
    trainer.callback_metrics = {"val/acc": torch.tensor(0.95)}
    callback.on_validation_end(trainer, None)
    assert trainer.should_stop and callback.reached["step"] == 3


def test_a_resumed_run_counts_the_time_and_tokens_before_its_kill(tmp_path: Path) -> None:
    """Killed after step 4 (logged at 100 s of fit) and resumed from its step-4 checkpoint: the clock
    of metrics.jsonl goes on from 100 s, and the tokens from the checkpoint's count."""
    lines = [{"step": 2, "time_s": 50.0, "val/loss": 3.0}, {"step": 4, "time_s": 100.0, "val/loss": 2.5}]
    lines.append({"step": 5, "time_s": 120.0, "train/loss": 2.4})  # after the checkpoint: dropped
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    before = StopAtTarget("val/loss", 2.0)
    before.tokens = 4 * 256.0
    state = before.state_dict()

    logger = MetricsFileLogger(tmp_path, resume_step=4)
    resumed = StopAtTarget("val/loss", 2.0)
    resumed.load_state_dict(state)
    trainer = fake_trainer(6, 1.9, [logger])
    trainer.world_size = 1
    logger.trainer = trainer
    module = SimpleNamespace(batch_work=lambda batch: SimpleNamespace(tokens=256), device_mesh=None)
    for _ in range(2):  # steps 5 and 6
        resumed.on_train_batch_end(trainer, module, None, None, 0)
    logger.log_metrics({"val/loss": 1.9})
    resumed.on_validation_end(trainer, None)
    assert resumed.reached["tokens"] == 6 * 256
    assert 100.0 <= resumed.reached["wall_time_s"] < 110.0
    record = resumed.record(flops_per_token=1000.0)
    assert record["flops"] == 6 * 256 * 1000.0 and record["reached"] is True


def test_a_run_resumed_after_its_target_stops_at_once() -> None:
    callback = StopAtTarget("val/loss", 2.0)
    callback.load_state_dict({"tokens": 10.0, "reached": {"step": 4, "tokens": 10}})
    trainer = fake_trainer(4, 1.0, [])
    callback.on_train_start(trainer, None)
    assert trainer.should_stop


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.target_metric=val/acc", "trainer.target_value=0.5"],
            "trainer.target_metric=val/acc: choose one of val/loss, val/ppl, val/bpb, val/exact_match (what "
            "task=causal_lm logs at validation)",
        ),
        (
            ["trainer.target_metric=val/loss"],
            "trainer.target_value=null: give it with trainer.target_metric=val/loss",
        ),
        (["trainer.target_value=2.0"], "trainer.target_metric=null: give it with trainer.target_value=2.0"),
    ],
)
def test_a_bad_target_is_one_line(overrides: list[str], message: str) -> None:
    from hydra import compose, initialize_config_dir

    from attnlab.run.configs import register_schemas
    from attnlab.run.presets import config_dir
    from attnlab.schema.checks import validate

    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_the_direction_follows_the_metric_unless_given() -> None:
    from attnlab.schema.run import TrainerConfig

    assert TrainerConfig(target_metric="val/bpb", target_value=1.0).target_direction() == "min"
    assert TrainerConfig(target_metric="val/acc", target_value=1.0).target_direction() == "max"
    assert (
        TrainerConfig(target_metric="val/loss", target_value=1.0, target_mode="max").target_direction()
        == "max"
    )
