"""Plain progress lines: one per logging step and at the last step, one per
validation, in the log files always and on the console when it is not a terminal."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnlab.schema.run import TrainerConfig
from attnlab.training.callbacks import ProgressLines
from attnlab.training.trainer import lightning_settings


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch).pow(2).mean()
        self.log("train/loss", loss)
        self.log("lr", 0.1)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self.layer(batch).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture
def log_file(tmp_path: Path):
    """A file handler on the root logger, as Hydra's job logging sets up for train.log."""
    path = tmp_path / "train.log"
    handler = logging.FileHandler(path)
    logging.getLogger().addHandler(handler)
    yield path
    logging.getLogger().removeHandler(handler)
    handler.close()


def fit(tmp_path: Path, lines: ProgressLines, accumulate: int = 1) -> None:
    trainer = pl.Trainer(
        max_steps=5,
        log_every_n_steps=2,
        val_check_interval=4 * accumulate,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        accumulate_grad_batches=accumulate,
        callbacks=[lines],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    data = DataLoader(torch.randn(8, 2), batch_size=2)  # 4 batches an epoch: the run crosses epochs
    trainer.fit(Regression(), data, data)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_line_per_logging_step_and_validation(
    tmp_path: Path, log_file: Path, capsys, accumulate: int
) -> None:
    fit(tmp_path, ProgressLines(to_console=True), accumulate)
    printed = capsys.readouterr().out.splitlines()
    train = r"step {}/5 \| loss \d+\.\d{{4}} \| lr 1\.00e-01 \| elapsed 0:00:\d\d"
    expected = [train.format(2), train.format(4), r"step 4/5 \| val/loss \d\.\d+ \| elapsed", train.format(5)]
    assert len(printed) == len(expected), printed
    for line, pattern in zip(printed, expected):
        assert re.match(pattern, line), line
    assert [line for line in log_file.read_text().splitlines() if line.startswith("step")] == printed


def test_no_console_lines_on_a_terminal(tmp_path: Path, log_file: Path, capsys) -> None:
    fit(tmp_path, ProgressLines(to_console=False))
    assert capsys.readouterr().out == ""
    assert len([line for line in log_file.read_text().splitlines() if line.startswith("step ")]) == 4


def test_no_progress_bar_when_the_console_is_not_a_terminal(tmp_path: Path, monkeypatch) -> None:
    """stdout a file: no bar (ProgressLines print instead); FORCE_COLOR makes rich (and so us) see a terminal."""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert lightning_settings(TrainerConfig(), tmp_path)["enable_progress_bar"] is False
    assert ProgressLines().to_console is True
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert lightning_settings(TrainerConfig(), tmp_path)["enable_progress_bar"] is True
    assert ProgressLines().to_console is False
