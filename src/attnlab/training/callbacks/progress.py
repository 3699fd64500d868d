"""The progress bar of a run bounded by optimizer steps."""

from __future__ import annotations

from pytorch_lightning.callbacks import RichProgressBar


class StepProgressBar(RichProgressBar):
    """Rich progress bar that shows the optimizer step out of ``max_steps``.

    Runs here are bounded by steps, so Lightning's "Epoch 3/-2" (max_epochs=-1) says nothing useful.
    """

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = self.trainer
        description = f"Epoch {current_epoch}"
        if trainer.max_steps > 0:
            description += f" · step {trainer.global_step}/{trainer.max_steps}"
        elif trainer.max_epochs is not None and trainer.max_epochs > 0:
            description += f"/{trainer.max_epochs - 1}"
        return f"{description:{len(self.validation_description)}}"
