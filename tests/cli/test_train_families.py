"""Every family trains a few steps end to end through ``attnlab-train -m`` (one 4-job multirun) with
wandb, CSV and TensorBoard at once; ``attnlab-eval`` (its ``main``, in this process: its own
subprocess cases are in test_eval_overrides.py) reproduces the test metrics of the runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from train_cli import (
    TEST_PRESETS,
    TINY,
    check,
    command_here,
    csv_series,
    job_dirs,
    run_command,
    wandb_history,
    wandb_run,
)

pytestmark = pytest.mark.slow
FAMILIES = ["gpt", "bert", "seq2seq", "vit"]


@pytest.fixture(scope="module")
def jobs(built_once: Callable[..., Path]) -> list[Path]:
    experiments = ",".join(f"tiny_{f}" for f in FAMILIES)
    args = ["-m", TEST_PRESETS, f"experiment={experiments}", "logger=many", *TINY]
    return job_dirs(built_once("families", lambda cwd: check(command_here(args, cwd))))


def test_each_family_writes_one_complete_run_directory(jobs: list[Path]) -> None:
    assert len(jobs) == 4
    for family, job in zip(FAMILIES, jobs):
        assert (job / "config.yaml").read_text().startswith(f"model:\n  family: {family}\n")
        assert (job / ".hydra" / "overrides.yaml").is_file()
        assert (job / "train.log").stat().st_size > 0
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert len(list((job / "checkpoints").glob("best-step*.ckpt"))) == 1
        assert (job / "csv" / "metrics.csv").is_file()
        assert list((job / "tensorboard").glob("events.out.tfevents.*"))
        assert len(list((job / "wandb").glob("offline-run-*/run-*.wandb"))) == 1
        assert (job / "tokenizer.json").is_file() == (family != "vit")


def test_config_yaml_holds_only_the_keys_its_family_and_data_use(jobs: list[Path]) -> None:
    """Each group is saved as the schema class of its tag: a GPT run on text has no image or ListOps
    keys, a ViT run no token keys."""
    configs = {
        family: yaml.safe_load((job / "config.yaml").read_text()) for family, job in zip(FAMILIES, jobs)
    }
    gpt, vit = configs["gpt"], configs["vit"]
    assert not {"image_size", "patch_size", "channels", "num_classes", "pooling"} & set(gpt["model"])
    assert not {"listops_max_depth", "image_size", "num_train", "torchvision"} & set(gpt["data"])
    assert gpt["model"]["pos"] == {"name": "learned"}
    assert not {"vocab_size", "max_seq_len", "tie_embeddings"} & set(vit["model"])
    assert not {"tokenizer", "seq_len", "path"} & set(vit["data"])
    assert set(configs["bert"]["data"]) >= {"listops_max_depth", "num_train"}


def test_last_checkpoint_holds_the_final_step_and_the_run(jobs: list[Path]) -> None:
    for job in jobs:
        ckpt = torch.load(job / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        assert ckpt["global_step"] == 6
        assert ckpt["attnlab_run"]["wandb_id"] == wandb_run(job)["run_id"]
        assert ckpt["attnlab_run"]["config"]["trainer"]["max_steps"] == 6


def test_wandb_offline_files_hold_the_logged_metrics(jobs: list[Path]) -> None:
    for job in jobs:
        from_csv = csv_series(job, "train/loss")
        assert sorted(from_csv) == list(range(6))
        assert wandb_history(job, "train/loss") == pytest.approx(from_csv, rel=1e-6)
        test_metrics = json.loads((job / "test_metrics.json").read_text())["metrics"]
        step = best_step(job)
        assert wandb_history(job, "test/loss") == pytest.approx({step: test_metrics["test/loss"]}, rel=1e-6)


def best_step(job: Path) -> int:
    """The optimizer step of the best checkpoint, which the test metrics are of."""
    ckpt_path = json.loads((job / "test_metrics.json").read_text())["ckpt_path"]
    return int(Path(ckpt_path).stem.removeprefix("best-step"))


def test_evaluations_are_logged_at_the_step_they_evaluate(jobs: list[Path]) -> None:
    """Validation after optimizer steps 3 and 6 is logged at 3 and 6 (the steps of its checkpoints, not 2
    and 5) by every logger; the test metrics at the step of the checkpoint they evaluate."""
    for job in jobs:
        assert sorted(csv_series(job, "val/loss")) == [3, 6]
        assert sorted(wandb_history(job, "val/loss")) == [3, 6]
        assert best_step(job) in (3, 6)
        assert sorted(csv_series(job, "test/loss")) == [best_step(job)]
        assert torch.load(job / "checkpoints" / f"best-step{best_step(job):06d}.ckpt", weights_only=True)[
            "global_step"
        ] == best_step(job)


def test_the_jobs_of_a_multirun_share_one_wandb_group(jobs: list[Path]) -> None:
    runs = [wandb_run(job) for job in jobs]
    assert len({r["run_group"] for r in runs}) == 1
    assert runs[0]["run_group"].startswith("multirun_")
    assert len({r["run_id"] for r in runs}) == 4


@pytest.mark.parametrize("family", FAMILIES)
def test_eval_reproduces_the_test_metrics_of_training(
    jobs: list[Path], family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from attnlab.cli.eval import main

    job = jobs[FAMILIES.index(family)]
    trained = json.loads((job / "test_metrics.json").read_text())
    args = [f"ckpt_path={trained['ckpt_path']}", "logger=csv", "trainer.enable_progress_bar=false"]
    before = set((job / "eval").glob("*"))
    monkeypatch.chdir(tmp_path)
    assert run_command(main, args, monkeypatch, capsys) == 0, capsys.readouterr().err
    (out,) = set((job / "eval").glob("*")) - before  # inside the checkpoint's run, for attnlab-report
    evaluated = json.loads((out / "metrics.json").read_text())
    assert evaluated["metrics"] == pytest.approx(trained["metrics"], rel=1e-6)
    assert evaluated["overrides"] == {}  # the run's own split, data and batches
    step = int(Path(trained["ckpt_path"]).stem.removeprefix("best-step"))  # logged at the step it evaluates
    assert csv_series(out, "test/loss") == pytest.approx({step: trained["metrics"]["test/loss"]}, rel=1e-6)
