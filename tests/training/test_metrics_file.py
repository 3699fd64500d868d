"""metrics.jsonl: what a run logs, step by step, in a file of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from attnlab.training.callbacks.run_state import RunState
from attnlab.training.metrics_file import MetricsFileLogger


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("train/loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("test/loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader:
    x = torch.randn(64, 4)
    return DataLoader(TensorDataset(x, x.sum(-1, keepdim=True)), batch_size=8)


def fit(run_dir: Path, max_steps: int, resume_step: int | None = None) -> MetricsFileLogger:
    logger = MetricsFileLogger(run_dir, resume_step=resume_step)
    trainer = pl.Trainer(
        max_steps=max_steps,
        val_check_interval=3,
        check_val_every_n_epoch=None,
        limit_val_batches=2,
        log_every_n_steps=1,
        logger=[logger],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    logger.trainer = trainer
    model = Regression()
    trainer.fit(model, loader(), loader())
    trainer.test(model, loader(), verbose=False)
    return logger


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_every_logged_value_with_its_optimizer_step(tmp_path: Path) -> None:
    fit(tmp_path, max_steps=6)
    lines = records(tmp_path)
    train = [r["step"] for r in lines if "train/loss" in r]
    val = [r["step"] for r in lines if "val/loss" in r]
    test = [r["step"] for r in lines if "test/loss" in r]
    assert train == [1, 2, 3, 4, 5, 6]  # as in checkpoint names: the steps done when it was logged
    assert val == [3, 6]
    assert test == [6]
    assert all(set(r) - {"step", "time_s"} for r in lines)
    times = [r["time_s"] for r in lines]
    assert times == sorted(times)
    assert all(isinstance(r["train/loss"], float) for r in lines if "train/loss" in r)


def test_resume_in_place_keeps_the_lines_up_to_the_checkpoint(tmp_path: Path) -> None:
    """A run killed after step 8 and resumed from its step-6 checkpoint: no step is there twice."""
    old = [{"step": s, "time_s": 10.0 + s, "train/loss": 1.0} for s in range(1, 9)]
    text = "".join(json.dumps(r) + "\n" for r in old) + '{"step": 9, "tr'  # the kill cut a line short
    (tmp_path / "metrics.jsonl").write_text(text)
    logger = MetricsFileLogger(tmp_path, resume_step=6)
    logger.log_metrics({"train/loss": 0.5, "epoch": 0}, step=6)
    logger.finalize("success")
    lines = records(tmp_path)
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5, 6, 6]  # no trainer attached: Lightning's step
    assert lines[-1]["time_s"] >= 16.0  # the clock goes on from the kept lines
    assert "epoch" not in lines[-1]


def test_a_fresh_run_replaces_the_file(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 100, "time_s": 1.0, "train/loss": 9.0}\n')
    fit(tmp_path, max_steps=3)
    assert [r["step"] for r in records(tmp_path) if "train/loss" in r] == [1, 2, 3]


def test_non_finite_values_are_null(tmp_path: Path) -> None:
    logger = MetricsFileLogger(tmp_path)
    logger.log_metrics({"train/loss": float("nan"), "lr": float("inf"), "val/acc": 1.0}, step=1)
    logger.finalize("success")
    assert records(tmp_path) == [
        {"step": 1, "time_s": records(tmp_path)[0]["time_s"], "train/loss": None, "lr": None, "val/acc": 1.0}
    ]


def fit_logging_every_2(
    run_dir: Path, max_steps: int, ckpt: Path | None = None, previous: Path | None = None
) -> None:
    """Fit (or resume from ``ckpt``, a checkpoint of a run in ``previous``) logging every 2 steps, with
    attnlab's RunState callback; the finished run's state is saved after fit, as ``last.ckpt`` is."""
    run_dir.mkdir(exist_ok=True)
    logger = MetricsFileLogger(run_dir, resume_step=6 if ckpt else None, previous=previous)
    trainer = pl.Trainer(
        max_steps=max_steps,
        val_check_interval=3,  # the last step validates: Lightning's restart then adds one to its count
        check_val_every_n_epoch=None,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        log_every_n_steps=2,
        logger=[logger],
        callbacks=[RunState({}, "id")],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    logger.trainer = trainer
    trainer.fit(Regression(), loader(), loader(), ckpt_path=ckpt, weights_only=True)
    trainer.save_checkpoint(run_dir / "last.ckpt", weights_only=False)


def test_a_run_extended_from_a_finished_one_logs_every_step_once_from_the_first(tmp_path: Path) -> None:
    """Resumed from the state a finished run saved after fit, into a new directory and in place: the
    logging steps go on (Lightning's count, one ahead after such a restore, would skip them until the
    last step), and the new file starts with the earlier run's lines."""
    first, extended = tmp_path / "first", tmp_path / "extended"
    fit_logging_every_2(first, max_steps=6)
    fit_logging_every_2(extended, max_steps=10, ckpt=first / "last.ckpt", previous=first)
    assert [r["step"] for r in records(extended) if "train/loss" in r] == [2, 4, 6, 8, 10]
    fit_logging_every_2(first, max_steps=10, ckpt=first / "last.ckpt")  # in place
    assert [r["step"] for r in records(first) if "train/loss" in r] == [2, 4, 6, 8, 10]


def test_a_resumed_run_drops_the_test_results_of_the_run_it_continues(tmp_path: Path) -> None:
    """A finished run's test line is not part of the run that goes on from its checkpoint (it tests again)."""
    old = [{"step": 6, "time_s": 1.0, "val/loss": 1.0}, {"step": 6, "time_s": 2.0, "test/loss": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    (tmp_path / "new").mkdir()
    logger = MetricsFileLogger(tmp_path / "new", resume_step=6, previous=tmp_path)
    logger.log_metrics({"train/loss": 0.5}, step=7)
    logger.finalize("success")
    assert [set(r) - {"step", "time_s"} for r in records(tmp_path / "new")] == [{"val/loss"}, {"train/loss"}]
    assert len(records(tmp_path)) == 2  # the run it continues is left as it was
