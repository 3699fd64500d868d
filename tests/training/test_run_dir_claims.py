"""Which run may write a run directory: a new run into a folder that holds another run is refused unless
it continues that run or asks to overwrite it; a folder inside a live sweep's is the sweep's; a moved or
copied run directory keeps its best checkpoints, recognised by what they record, not where they lie."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
import torch

from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import LOCK_FILE
from attnlab.training.callbacks.checkpoints import state_moved_here
from attnlab.training.lock import lock_run_dir, unlock_run_dirs
from attnlab.training.resume import RUN_KEY
from attnlab.training.rundir import check_run_dir_free


def finished_run(run_dir: Path) -> Path:
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 1337\n")
    (run_dir / "summary.json").write_text('{"status": "completed"}\n')
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"state")
    return run_dir


def test_a_new_run_into_another_runs_folder_is_refused(tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path / "run")
    with pytest.raises(ConfigError) as refused:
        check_run_dir_free(run_dir, None)
    assert str(refused.value) == (
        f"run_dir={run_dir}: holds another run (config.yaml, summary.json, metrics.jsonl, checkpoints/): "
        "continue it with ckpt_path=last, name another folder, or add run_dir_exists=overwrite to replace it"
    )


def test_a_resume_from_another_folder_into_a_run_is_refused(tmp_path: Path) -> None:
    run_dir, other = finished_run(tmp_path / "run"), finished_run(tmp_path / "other")
    with pytest.raises(ConfigError, match="holds another run"):
        check_run_dir_free(run_dir, str(other / "checkpoints" / "last.ckpt"))


@pytest.mark.parametrize("ckpt_path", ["last", "auto", "run/checkpoints/last.ckpt"])
def test_a_run_that_continues_the_folders_run_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ckpt_path: str
) -> None:
    monkeypatch.chdir(tmp_path)
    check_run_dir_free(finished_run(tmp_path / "run"), ckpt_path)


def test_overwrite_is_asked_for_by_name(tmp_path: Path) -> None:
    check_run_dir_free(finished_run(tmp_path / "run"), None, "overwrite")


def test_a_folder_with_only_a_lock_or_hydras_files_is_free(tmp_path: Path) -> None:
    """What a run refused at validation, or killed before it wrote anything, leaves: no run."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("[]\n")
    (tmp_path / "checkpoints").mkdir()  # empty
    (tmp_path / "train.log").write_text("")
    check_run_dir_free(tmp_path, None)


def test_a_job_folder_of_a_live_sweep_is_refused(tmp_path: Path) -> None:
    """The sweep holds its folder's lock (here another open file description, as another process's);
    a run into one of its job folders is refused, naming the sweep's folder and its owner."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / LOCK_FILE).write_text(json.dumps({"pid": 4242, "host": "node7", "started": "then"}))
    fd = os.open(sweep / LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(ConfigError) as refused:
            lock_run_dir(sweep / "0_seed=1")
        assert str(refused.value).startswith(
            f"run_dir={sweep / '0_seed=1'}: is inside {sweep}, which another run holds (pid 4242 on node7 "
        )
        assert not (sweep / "0_seed=1").exists()
    finally:
        os.close(fd)
    lock_run_dir(sweep / "0_seed=1")  # the sweep ended: its lock is stale, the folder free
    unlock_run_dirs()


def test_the_sweeps_own_process_may_write_its_job_folders(tmp_path: Path) -> None:
    lock_run_dir(tmp_path / "sweep", "hydra.sweep.dir")
    try:
        lock_run_dir(tmp_path / "sweep" / "0")
    finally:
        unlock_run_dirs()


def best_checkpoint(path: Path, wandb_id: str, step: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "global_step": step, RUN_KEY: {"wandb_id": wandb_id}}, path)


def saved_state(old: Path) -> dict:
    best = str(old / "best-step000004.ckpt")
    return {
        "dirpath": str(old),
        "best_model_path": best,
        "best_model_score": torch.tensor(1.5),
        "kth_best_model_path": best,
        "kth_value": torch.tensor(1.5),
        "best_k_models": {best: torch.tensor(1.5)},
        "last_model_path": "",
    }


def test_a_copied_run_keeps_its_best_checkpoint(tmp_path: Path) -> None:
    here = tmp_path / "copy" / "checkpoints"
    best_checkpoint(here / "best-step000004.ckpt", "abc", 4)
    state = state_moved_here(saved_state(tmp_path / "run" / "checkpoints"), here, "abc")
    assert state is not None
    assert state["dirpath"] == str(here)
    assert state["best_model_path"] == str(here / "best-step000004.ckpt")
    assert list(state["best_k_models"]) == [str(here / "best-step000004.ckpt")]


@pytest.mark.parametrize(
    ("wandb_id", "step"), [("another run", 4), ("abc", 2)], ids=["another run's", "another step's"]
)
def test_a_best_checkpoint_of_another_run_or_step_is_not_taken(
    tmp_path: Path, wandb_id: str, step: int
) -> None:
    here = tmp_path / "copy" / "checkpoints"
    best_checkpoint(here / "best-step000004.ckpt", wandb_id, step)
    assert state_moved_here(saved_state(tmp_path / "run" / "checkpoints"), here, "abc") is None


def test_a_resume_into_a_new_folder_chooses_its_own_best(tmp_path: Path) -> None:
    """The old run's best checkpoint is not in the new folder: nothing is carried over."""
    here = tmp_path / "new" / "checkpoints"
    here.mkdir(parents=True)
    assert state_moved_here(saved_state(tmp_path / "run" / "checkpoints"), here, "abc") is None
