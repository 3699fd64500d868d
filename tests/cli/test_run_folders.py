"""Run folders named by their labels, as Hydra makes them: ``hydra.run.dir`` and a
multirun's ``hydra.sweep.subdir`` resolved in-process from composed configs (no training)."""

from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.training.names import record_swept_keys

TIME = r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d"


def hydra_config(*overrides: str) -> DictConfig:
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


def test_a_run_folder_is_its_time_then_its_overrides() -> None:
    run_dir = hydra_config("model.n_heads=2", "pos=rope", "logger=none").hydra.run.dir
    assert re.fullmatch(f"{TIME}_model.n_heads-2\\+pos-rope", run_dir), run_dir


def test_run_name_names_the_folder() -> None:
    run_dir = hydra_config("run_name=baseline", "model.n_heads=2").hydra.run.dir
    assert re.fullmatch(f"{TIME}_baseline", run_dir), run_dir


def test_the_defaults_run_folder_is_its_time_alone() -> None:
    assert re.fullmatch(TIME, hydra_config("logger=none").hydra.run.dir)


def test_a_given_run_dir_is_kept_as_given() -> None:
    """Resumes (``ckpt_path=last|auto``) and torchrun/SLURM ranks name their run by ``run_dir=``."""
    assert hydra_config("run_dir=runs/a", "model.n_heads=2").hydra.run.dir == "runs/a"


def test_the_run_config_names_the_same_folder_as_hydra() -> None:
    """Without its ``hydra`` node (the task's config), ``run_dir`` follows the running job's command line."""
    config = hydra_config("model.n_heads=2")
    task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
    saved = HydraConfig.instance().cfg
    try:
        HydraConfig.instance().set_config(config)  # as Hydra's run_job does before the task runs
        label = task.run_dir.partition("_")[2]  # the time may differ: each root config has its own ${now:}
        assert label == config.hydra.run.dir.partition("_")[2] == "model.n_heads-2"
    finally:
        HydraConfig.instance().cfg = saved


def test_a_job_folder_is_its_number_then_its_swept_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNLAB_SWEPT_KEYS", raising=False)
    record_swept_keys({"model.n_heads"})  # as ValidateOnStart does before the first job
    config = hydra_config("model=gpt-tiny", "model.n_heads=4")  # job 1 of -m model.n_heads=2,4 model=gpt-tiny
    with open_dict(config):
        config.hydra.mode = RunMode.MULTIRUN
        config.hydra.job.num = 1
    assert config.hydra.sweep.subdir == "1_model.n_heads-4"
