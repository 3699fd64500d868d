"""The gradient norm at logging steps: the first sign of a run about to diverge."""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from attnlab.tasks.nonfinite import gradient_norm
from attnlab.tasks.step_log import log_step_value


class GradNormLogger(pl.Callback):
    """Logs ``train/grad_norm``, the 2-norm of all gradients before clipping, at the steps whose values
    reach the loggers (every ``trainer.log_every_n_steps``, and the last). Computed only there: it
    reads every gradient once. Lightning calls the hook after mixed precision unscaled the gradients
    and DDP averaged them, so it is the norm of the global batch's gradient (under FSDP, of this
    rank's shard)."""

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        step, every = trainer.global_step + 1, trainer.log_every_n_steps  # the step this one completes
        if not (every > 0 and step % every == 0) and step != trainer.max_steps:
            return
        norm = gradient_norm(pl_module.parameters())  # as clip_grad_norm_ computes it
        if norm is not None:
            log_step_value(pl_module, "train/grad_norm", norm)
