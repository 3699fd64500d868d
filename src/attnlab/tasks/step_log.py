"""The scalars of a training step (loss, learning rate, gradient norm, throughput) for the loggers,
without Lightning's ``self.log``.

``self.log`` costs about a millisecond of Python per value on a CPU (Lightning moves the metric it
stores with ``.to(device)``, deep-copying its settings), and every value it stores is turned into
three dictionaries at every later step, logging or not: at the default ``log_every_n_steps=10`` that
was most of attnlab-train's own cost per step over a bare Trainer. The values are logged
only at the steps whose values reach the loggers, so nothing is computed or synchronised at the others.

A ``StepLog`` keeps the step's values as ``self.log(name, value, on_step=True, on_epoch=False)`` would
(float tensors, Python numbers as float32 on the module's device), shows each at once in
``trainer.callback_metrics`` (and the progress bar's metrics when ``prog_bar``), and hands them to
the loggers together at the end of the step, with Lightning's step and epoch, as Lightning hands
over what ``self.log`` collected: the same keys, values and steps in every logger. It reaches into
Lightning's logger connector (``tasks.lightning_shims``): under another Lightning version than the one
checked, the values go through ``self.log`` again.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import Tensor

from attnlab.tasks.lightning_shims import accumulating, logs_step_values_itself, write_step_values


def as_logged(value: Tensor | float, device: torch.device) -> Tensor:
    """``value`` as ``self.log`` stores it: a detached scalar tensor, floating point (float32 unless it
    is float64 already); a Python number becomes a float32 tensor on ``device``."""
    tensor = value.detach().clone() if isinstance(value, Tensor) else torch.tensor(value, device=device)
    if tensor.dtype not in (torch.float32, torch.float64):
        tensor = tensor.to(torch.get_default_dtype())
    return tensor.squeeze()


class StepLog:
    """This training step's values, written to the loggers at once by ``write``."""

    def __init__(self) -> None:
        self.values: dict[str, Tensor] = {}

    def add(self, trainer: pl.Trainer, name: str, value: Tensor, prog_bar: bool = False) -> None:
        self.values[name] = value
        trainer.callback_metrics[name] = value  # Lightning's dict, read by callbacks and checkpoints
        if prog_bar:
            trainer.progress_bar_metrics[name] = value.item()

    def write(self, trainer: pl.Trainer) -> None:
        """The step's values to every logger at the steps Lightning writes ``self.log``'s values (not
        mid-accumulation; every ``log_every_n_steps``), in one call as Lightning makes (its connector
        adds the epoch and picks the step). Values of other steps stay in ``callback_metrics`` only."""
        if not self.values or accumulating(trainer):
            return
        values, self.values = self.values, {}
        write_step_values(trainer, values)


def log_step_value(
    module: pl.LightningModule, name: str, value: Tensor | float, prog_bar: bool = False
) -> None:
    """Log a training step's ``value`` through the module's ``StepLog`` (``self.log`` for a module without
    one, or where the Lightning version is not the one checked)."""
    step_log = getattr(module, "step_log", None)
    if isinstance(step_log, StepLog) and logs_step_values_itself():
        step_log.add(module.trainer, name, as_logged(value, module.device), prog_bar)
    else:
        module.log(name, value, on_step=True, on_epoch=False, prog_bar=prog_bar)
