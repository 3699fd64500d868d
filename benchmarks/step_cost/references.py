"""The references for attnlab-train's own cost per step: a bare ``pl.Trainer`` and a plain PyTorch loop.

    python -m benchmarks.step_cost.references trainer --steps 2400 model.n_layers=1 model.d_model=32 ...
    python -m benchmarks.step_cost.references loop --steps 2400 <the same overrides>

Both train what ``attnlab-train <overrides>`` trains: the config composed from conf/ (so the same
model, data module and training batches, AdamW with its schedule, gradient clipping), built with
attnlab's own builders. ``trainer`` fits it with a ``pl.Trainer`` that has no logger, checkpoint
callback, progress bar or model summary, through a LightningModule that only computes the loss;
``loop`` runs forward, cross-entropy, backward, clipping, AdamW and the schedule in a ``for`` loop.
Neither validates: the step-cost section keeps validation out of the difference it measures
(``benchmarks.step_cost``, which runs them through ``benchmarks.step_cost.rounds``). Run alone, the caller
times the whole process; this script prints nothing of its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.data import build_datamodule
from attnlab.models import build_model
from attnlab.run import run_config
from attnlab.schema.run import RunConfig
from attnlab.tasks.optim import configure_optimizers

StepHook = Callable[[int], None]  # called at the start of each step with the number of steps done


def lm_loss(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)


class BareLM(pl.LightningModule):
    """The least a LightningModule needs: the loss, and the run's optimizer and schedule."""

    def __init__(self, model: nn.Module, run: RunConfig) -> None:
        super().__init__()
        self.model, self.run = model, run

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return lm_loss(self.model, batch)

    def configure_optimizers(self) -> dict:
        return configure_optimizers(self.model, self.run.optim, self.run.trainer.max_steps)


def compose_run(overrides: list[str]) -> RunConfig:
    return run_config(overrides)


def prepare(overrides: list[str]) -> tuple[RunConfig, nn.Module, pl.LightningDataModule]:
    """What ``attnlab-train <overrides>`` would train: the run, its model and its data module (set up)."""
    run = compose_run(overrides)
    pl.seed_everything(run.seed, verbose=False)
    data = build_datamodule(run.data, needs=run.task.data_needs, seed=run.seed, model_cfg=run.model)
    data.setup("fit")
    return run, build_model(replace(run.model, vocab_size=data.vocab_size)), data


def fit_trainer(
    run: RunConfig, model: nn.Module, data: pl.LightningDataModule, callbacks: list[pl.Callback] | None = None
) -> None:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=run.trainer.max_steps,
        gradient_clip_val=run.trainer.gradient_clip_val,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        callbacks=callbacks,
    )
    trainer.fit(BareLM(model, run), train_dataloaders=data.train_dataloader())


def plain_steps(run: RunConfig, model: nn.Module, data: pl.LightningDataModule) -> Iterator[None]:
    """The plain loop, one step per ``next``: forward, cross-entropy, backward, clipping, AdamW and the
    schedule, ``run.trainer.max_steps`` steps over as many epochs as that takes (Lightning's
    ``max_epochs=-1``)."""
    steps, clip = run.trainer.max_steps, run.trainer.gradient_clip_val
    setup = configure_optimizers(model, run.optim, steps)
    optimizer, scheduler = setup["optimizer"], setup["lr_scheduler"]["scheduler"]
    model.train()
    step = 0
    while step < steps:
        for batch in data.train_dataloader():
            lm_loss(model, batch).backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            yield
            if step == steps:
                return


def fit_loop(
    run: RunConfig, model: nn.Module, data: pl.LightningDataModule, at_step: StepHook | None = None
) -> None:
    """``plain_steps`` to the end, calling ``at_step`` before each step."""
    steps = plain_steps(run, model, data)
    for step in range(run.trainer.max_steps):
        if at_step:
            at_step(step)
        next(steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.step_cost.references", description=__doc__.splitlines()[0]
    )
    parser.add_argument("kind", choices=("trainer", "loop"))
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("overrides", nargs="*", help="attnlab-train overrides (model, data, optim)")
    args = parser.parse_intermixed_args(argv)
    run, model, data = prepare([*args.overrides, f"trainer.max_steps={args.steps}"])
    (fit_trainer if args.kind == "trainer" else fit_loop)(run, model, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
