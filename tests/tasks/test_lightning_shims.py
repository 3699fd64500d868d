"""The speed shims on Lightning's internals (``tasks.lightning_shims``): one contract per shim, which
fails when the internal it relies on changes, the version guard, and training with every shim off."""

from __future__ import annotations

import csv
import inspect
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.profilers import PassThroughProfiler
from pytorch_lightning.trainer import call
from torch.utils.data import DataLoader

from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task, lightning_shims
from attnlab.tasks.lightning_shims import (
    CHECKED_LIGHTNING,
    HOOK_NAME,
    STEP_HOOKS,
    NoProfiler,
    lightning_checked,
    quiet_profiler,
    without_idle_step_hooks,
)
from attnlab.training.callbacks import ThroughputLogger


def bare_trainer(**kw: object) -> pl.Trainer:
    settings = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return pl.Trainer(**{**settings, "enable_model_summary": False, **kw})


# -- the version guard ----------------------------------------------------------------------


def test_the_installed_lightning_is_the_one_the_shims_were_checked_against() -> None:
    """Fails after an upgrade: re-read the contracts below, then move ``CHECKED_LIGHTNING``."""
    assert lightning_checked(), (pl.__version__, CHECKED_LIGHTNING)
    assert lightning_shims.SHIMS_ON


@pytest.mark.parametrize(
    ("version", "checked"),
    [
        ("2.6.6", True),
        ("2.6.0rc1", True),
        ("2.6", True),
        ("2.7.0", False),
        ("2.5.9", False),
        ("3.6.0", False),
    ],
)
def test_only_the_checked_minor_version_switches_the_shims_on(version: str, checked: bool) -> None:
    assert lightning_checked(version) is checked


def test_outside_the_checked_version_every_shim_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lightning_shims, "SHIMS_ON", False)
    callback = without_idle_step_hooks(pl.Callback())
    assert all(callable(getattr(callback, hook)) for hook in STEP_HOOKS)
    assert quiet_profiler() is None  # Lightning's own default
    assert not lightning_shims.logs_step_values_itself()
    module = pl.LightningModule()
    assert not lightning_shims.sets_hook_name(module, HOOK_NAME, "training_step")


def logged_rows(tmp_path: Path, tiny_model) -> list[dict[str, str]]:
    torch.manual_seed(0)
    task = build_task(
        task_config("causal_lm"),
        AdamWConfig(schedule="constant", lr=1e-3, warmup_steps=0),
        tiny_model("gpt", n_heads=2, d_ff=32),
        max_steps=12,
    )
    trainer = bare_trainer(
        max_steps=12,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=5,
        limit_val_batches=0,
        callbacks=[without_idle_step_hooks(ThroughputLogger())],
        profiler=quiet_profiler(),
    )
    ids = torch.randint(0, 16, (64, 9), generator=torch.Generator().manual_seed(0))
    trainer.fit(task, DataLoader([{"input_ids": s[:-1], "labels": s[1:]} for s in ids], batch_size=8))
    with open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_with_every_shim_off_training_logs_the_same_steps_keys_and_values(
    tmp_path: Path, tiny_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    shimmed = logged_rows(tmp_path / "on", tiny_model)
    monkeypatch.setattr(lightning_shims, "SHIMS_ON", False)
    plain = logged_rows(tmp_path / "off", tiny_model)
    assert [r["step"] for r in plain] == [r["step"] for r in shimmed] == ["4", "9"]
    assert [set(r) for r in plain] == [set(r) for r in shimmed]
    for ours, theirs in zip(shimmed, plain):
        assert float(ours["train/loss"]) == pytest.approx(float(theirs["train/loss"]), rel=1e-6)
        assert float(ours["lr"]) == pytest.approx(float(theirs["lr"]))


# -- one contract per shim ------------------------------------------------------------------


def test_lightning_names_the_running_hook_on_the_module_as_a_plain_attribute() -> None:
    """``sets_hook_name``: the attribute exists from the start and the hook callers assign it."""
    assert pl.LightningModule()._current_fx_name is None
    for caller in (call._call_lightning_module_hook, call._call_callback_hooks):
        assert f"pl_module.{HOOK_NAME} = hook_name" in inspect.getsource(caller)


def test_a_task_modules_hook_name_is_neither_parameter_buffer_nor_submodule(tiny_model) -> None:
    task = build_task(task_config("causal_lm"), AdamWConfig(), tiny_model("gpt"), max_steps=1)
    task._current_fx_name = "training_step"
    assert task.__dict__[HOOK_NAME] == "training_step"
    assert HOOK_NAME not in task._modules and HOOK_NAME not in task._parameters


def test_lightning_skips_a_callbacks_hook_that_is_not_callable() -> None:
    """``without_idle_step_hooks`` and ``retire_hook``: a None hook is passed by, not called."""
    source = inspect.getsource(call._call_callback_hooks)
    assert "fn = getattr(callback, hook_name)" in source and "if callable(fn):" in source
    assert all(inspect.isfunction(getattr(pl.Callback, hook)) for hook in STEP_HOOKS)


def test_lightning_wraps_each_hook_in_the_profilers_profile_context() -> None:
    """``NoProfiler``: ``profile(action_name)`` is the one method each hook call enters."""
    assert list(inspect.signature(PassThroughProfiler.profile).parameters) == ["self", "action_name"]
    for caller in (call._call_lightning_module_hook, call._call_callback_hooks):
        assert "with trainer.profiler.profile(" in inspect.getsource(caller)
    profiler = NoProfiler()
    assert bare_trainer(profiler=profiler).profiler is profiler


def test_the_logger_connector_writes_a_steps_values_as_step_log_calls_it() -> None:
    """``write_step_values`` and ``accumulating``: the connector's members and the fit loop's."""
    trainer = bare_trainer(max_steps=1)
    connector = trainer._logger_connector
    assert isinstance(type(connector).__dict__["should_update_logs"], property)
    assert list(inspect.signature(connector.log_metrics).parameters) == ["metrics", "step"]
    assert list(inspect.signature(trainer.fit_loop._should_accumulate).parameters) == []


def test_lightnings_logging_step_is_the_epoch_loops_count_of_optimizer_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``logging_step`` and ``set_logging_step``: the loggers' step (``should_update_logs``) is the epoch
    loop's ``_batches_that_stepped``, a plain int that its state_dict saves and restores; off outside
    the checked version."""
    trainer = bare_trainer(max_steps=1)
    loop = trainer.fit_loop.epoch_loop
    assert "_batches_that_stepped" in inspect.getsource(
        type(trainer._logger_connector).should_update_logs.fget
    )
    assert "_batches_that_stepped" in loop.state_dict()["state_dict"]
    assert lightning_shims.logging_step(trainer) == 0
    assert lightning_shims.set_logging_step(trainer, 7) and lightning_shims.logging_step(trainer) == 7
    monkeypatch.setattr(lightning_shims, "SHIMS_ON", False)
    assert not lightning_shims.set_logging_step(trainer, 9) and lightning_shims.logging_step(trainer) == 7
