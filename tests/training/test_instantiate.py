"""The Trainer, the loggers and the callbacks of a run, instantiated from their ``_target_`` configs as
``attnlab-train`` composes them (no fit: building them is what is checked)."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from pytorch_lightning.callbacks import EarlyStopping
from pytorch_lightning.callbacks import ModelSummary as LightningModelSummary
from pytorch_lightning.demos.boring_classes import BoringModel
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from pytorch_lightning.profilers import SimpleProfiler

from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import to_object
from attnlab.tasks.lightning_shims import STEP_HOOKS, NoProfiler, without_idle_step_hooks
from attnlab.training.callbacks import ModelSummary, build_callbacks
from attnlab.training.loggers import build_loggers
from attnlab.training.targets import check_targets
from attnlab.training.trainer import build_trainer


def composed(*overrides: str) -> DictConfig:
    """``attnlab-train``'s config with ``overrides``, as Hydra composes it."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides))


LOGGERS = {
    "wandb": [WandbLogger],
    "csv": [CSVLogger],
    "tensorboard": [TensorBoardLogger],
    "many": [WandbLogger, CSVLogger, TensorBoardLogger],
    "none": [],
}


@pytest.mark.parametrize("option", sorted(LOGGERS))
def test_each_logger_option_builds_its_loggers_in_the_run_directory(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    run = to_object(composed(f"logger={option}", "+logger.tags=[sweep]"))
    config = {"seed": 1, "trainer": {"_target_": "pytorch_lightning.Trainer", "val_every_n_steps": 3}}
    loggers = build_loggers(run.logger, tmp_path, name="job", group="g", wandb_id="abc", config=config)
    assert [type(logger) for logger in loggers] == LOGGERS[option]
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            assert logger._wandb_init["tags"] == ["sweep"] and logger._wandb_init["id"] == "abc"
            assert logger._wandb_init["name"] == "job" and logger._wandb_init["mode"] == "offline"
            assert logger._wandb_init["config"] == config  # recorded as data, not instantiated
        else:
            assert Path(logger.log_dir).parent == tmp_path


def test_the_trainer_gets_its_arguments_and_attnlabs_settings_translated(tmp_path: Path) -> None:
    run = to_object(composed("trainer.val_every_n_steps=7", "trainer.accumulate_grad_batches=2"))
    trainer = build_trainer(run, tmp_path, [], [])
    assert trainer.max_steps == run.trainer.max_steps and trainer.accumulate_grad_batches == 2
    assert trainer.val_check_interval == 14  # micro-batches between validations
    assert trainer.gradient_clip_val == run.trainer.gradient_clip_val
    assert type(trainer.strategy.checkpoint_io).__name__ == "BackgroundCheckpointIO"  # checkpoint.async_save


@pytest.mark.parametrize("profiler", [None, "simple"])
def test_the_trainer_profiles_only_when_asked(profiler: str | None, tmp_path: Path) -> None:
    run = to_object(composed(f"trainer.profiler={profiler or 'null'}"))
    trainer = build_trainer(run, tmp_path, [], [])
    if profiler:
        assert isinstance(trainer.profiler, SimpleProfiler)
        return
    assert type(trainer.profiler) is NoProfiler  # records nothing, one shared empty context
    with trainer.profiler.profile("outer") as outer, trainer.profiler.profile("inner") as inner:
        assert outer is inner is None


class CountsBatchEnds(pl.Callback):
    def __init__(self) -> None:
        self.batch_ends = 0

    def on_train_batch_end(self, *args: object) -> None:
        self.batch_ends += 1


def test_lightning_calls_only_the_step_hooks_a_callback_defines(tmp_path: Path) -> None:
    counter = without_idle_step_hooks(CountsBatchEnds())
    assert [hook for hook in STEP_HOOKS if getattr(counter, hook) is None] == [
        hook for hook in STEP_HOOKS if hook != "on_train_batch_end"
    ]
    assert counter.on_fit_start is not None  # hooks outside the step are left as they are
    trainer = pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[counter],
        default_root_dir=tmp_path,
    )
    trainer.fit(BoringModel())  # a None hook is passed by, not called
    assert counter.batch_ends == 3
    run = to_object(composed())
    for callback in build_callbacks(run, tmp_path, {}, "abc"):
        for hook in STEP_HOOKS:  # attnlab's callbacks: only the hooks their classes define are called
            defined = getattr(type(callback), hook) is not getattr(pl.Callback, hook)
            assert (getattr(callback, hook) is not None) == defined, (type(callback).__name__, hook)


@pytest.mark.parametrize("display", [True, False])
def test_the_only_model_summary_is_attnlabs_and_it_comes_with_the_display(
    display: bool, tmp_path: Path
) -> None:
    run = to_object(composed(f"trainer.enable_progress_bar={display}"))
    trainer = build_trainer(run, tmp_path, [], build_callbacks(run, tmp_path, {}, "abc"))
    summaries = [type(c) for c in trainer.callbacks if isinstance(c, LightningModelSummary)]
    assert summaries == ([ModelSummary] if display else [])  # never Lightning's "Total FLOPs: 0"


def test_early_stopping_is_an_option_of_the_callbacks_group(tmp_path: Path) -> None:
    run = to_object(composed("model=vit", "callbacks=early_stopping", "callbacks.early_stopping.patience=5"))
    (stopping,) = [c for c in build_callbacks(run, tmp_path, {}, "abc") if isinstance(c, EarlyStopping)]
    assert (stopping.monitor, stopping.mode, stopping.patience) == ("val/acc", "max", 5)  # vit's task.monitor
    assert to_object(composed()).callbacks == {}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "+callbacks.x={_target_:nonexistent.Cls}",
            "callbacks.x._target_=nonexistent.Cls: the import path of",
        ),
        ("+callbacks.x={_target_:torch.nn.Linear}", "Linear is not one"),
        ("trainer._target_=pytorch_lightning.Callback", "trainer._target_=pytorch_lightning.Callback: "),
    ],
)
def test_a_target_that_is_not_an_importable_class_of_its_kind_is_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_targets(to_object(composed(override)))


def test_float32_matmul_precision_is_set_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer.float32_matmul_precision`` (high by default: TF32) reaches torch when the Trainer runs on CUDA."""
    import torch
    from pytorch_lightning.accelerators import CPUAccelerator, CUDAAccelerator

    from attnlab.schema.run import TrainerConfig
    from attnlab.training.trainer import set_matmul_precision

    monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda value: calls.append(value))
    calls: list[str] = []
    set_matmul_precision(TrainerConfig(), CPUAccelerator())
    set_matmul_precision(TrainerConfig(), CUDAAccelerator())
    set_matmul_precision(TrainerConfig(float32_matmul_precision="medium"), CUDAAccelerator())
    assert calls == ["high", "medium"]
