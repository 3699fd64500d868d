"""A run is checked once and its data built once: validation, before the run directory exists, hands
the job what it checked and built (``cli.hydra.app.checked_by_validation``); a multirun's jobs, checked
up front without their data, are each prepared once in the job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import TEXT, TINY, run_command

from attnlab.cli import train
from attnlab.run import fit, prepared

GPT = [*TINY, *TEXT, "model=gpt-tiny", "trainer.max_steps=2", "sample.max_new_tokens=0", "logger=none"]


def counted(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[object]:
    """Calls of ``module.name`` from here on, each recorded by its first argument."""
    calls: list[object] = []
    real: Callable = getattr(module, name)

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args[0] if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_a_run_is_checked_once_and_its_data_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = counted(monkeypatch, train, "check_job")
    built_in_fit = counted(monkeypatch, fit, "build_datamodule_for")
    built = counted(monkeypatch, prepared, "build_datamodule_for")
    monkeypatch.chdir(tmp_path)
    assert run_command(train.main, [*GPT, f"run_dir={tmp_path / 'run'}"], monkeypatch) == 0
    assert len(checks) == 1 and len(built) == 1 and built_in_fit == []
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()


def test_each_job_of_a_multirun_is_prepared_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked up front without its data (``run_dir`` None), then checked and built in its job."""
    checks = counted(monkeypatch, train, "check_job")
    built = counted(monkeypatch, prepared, "build_datamodule_for")
    built_in_fit = counted(monkeypatch, fit, "build_datamodule_for")
    monkeypatch.chdir(tmp_path)
    assert run_command(train.main, ["-m", "seed=1,2", *GPT], monkeypatch) == 0
    assert len(checks) == 1 + 2 + 2  # the base config, each job up front, each job in its job
    assert len(built) == 2 and built_in_fit == []
