"""The progress bar counts optimizer steps over the whole run, not the batches of one epoch."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from rich.console import Console
from torch.utils.data import DataLoader

from attnlab.training.callbacks import StepProgressBar


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch).pow(2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize(("accumulate", "max_steps"), [(1, 7), (2, 5)])
def test_the_bar_ends_at_max_steps_over_several_epochs(
    tmp_path: Path, accumulate: int, max_steps: int
) -> None:
    """3 batches an epoch: the run crosses epochs (and accumulates), the bar still ends at max_steps/max_steps."""
    out = io.StringIO()
    bar = StepProgressBar(console=Console(file=out, width=120, force_terminal=False))
    trainer = pl.Trainer(
        max_steps=max_steps,
        accumulate_grad_batches=accumulate,
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    data = DataLoader(torch.randn(6, 2), batch_size=2)
    trainer.fit(Regression(), data)
    assert trainer.current_epoch > 0
    assert bar.shown == (max_steps, max_steps)
    assert f"step {max_steps}/{max_steps}" in out.getvalue()
    assert "train/loss=" in out.getvalue()
