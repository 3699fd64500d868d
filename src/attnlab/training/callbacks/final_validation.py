"""Every run ends with a validation at its last step, however short it is.

Lightning validates every ``val_check_interval`` batches only, so a run whose ``max_steps`` is not a
multiple of ``trainer.val_every_n_steps`` (or is below it) ended without ``val/*`` metrics for its
final weights, and without a best checkpoint at all when it was shorter than one interval (an Optuna
trial then had no value to report). Lightning validates when a run is asked to stop
(``trainer.should_stop``, as early stopping does), so this callback asks at the last step.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl


def is_final_step(trainer: pl.Trainer) -> bool:
    """Whether the optimizer step just done is the run's last (``max_steps`` reached)."""
    return trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps


class FinalValidation(pl.Callback):
    """Stop at ``max_steps`` through ``trainer.should_stop``, which makes Lightning validate (and so
    write the best checkpoint and ``last.ckpt``) right after the last step, whether or not that step
    is a multiple of the validation interval. A step that validates anyway validates once."""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if is_final_step(trainer) and trainer.enable_validation and not trainer.fast_dev_run:
            trainer.should_stop = True
