"""What makes a run exact and consistent: per-step seeds, the run's state in every checkpoint, equal
weights on every DDP rank."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from attnlab.data.sampling import mixed_seed
from attnlab.tasks.lightning_shims import logging_step, retire_hook, set_logging_step
from attnlab.training.resume import RUN_KEY

log = logging.getLogger("attnlab")


class StepSeeder(Callback):
    """Seeds torch's global generator from (seed, epoch, batch, rank) before every training batch.

    Dropout is then a function of the position in training alone, whatever ran before (validation,
    checkpointing, a restart), so a resumed run draws exactly what the uninterrupted one drew. The data
    order and per-sample randomness are seeded the same way by the data modules' ResumableSampler.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        ranks = trainer.distributed_sampler_kwargs  # tensor-parallel processes draw the same dropout
        rank = ranks["rank"] if ranks else trainer.global_rank
        seed = mixed_seed(self.seed, trainer.current_epoch, batch_idx, rank)
        torch.default_generator.manual_seed(
            seed
        )  # torch.manual_seed costs ~100x more (it probes every backend)
        if torch.cuda.is_initialized():  # false without CUDA, and cheaper to ask than is_available()
            torch.cuda.manual_seed_all(seed)


class RunState(Callback):
    """Stores the run's validated config, wandb run id, number of processes and ``continuations`` (its
    resumes with changed optimiser settings, ``training.resume.continuations``) in every checkpoint
    (``checkpoint[RUN_KEY]``), so a resume can check it continues the same run, keep logging to the same
    wandb run and carry the run's history on; and at a
    resume's first step, continues the loggers' step from the checkpoint's (``continue_logging_step``)."""

    def __init__(self, config: dict, wandb_id: str, history: list[dict] | None = None) -> None:
        self.config = config
        self.wandb_id = wandb_id
        self.history = history or []
        self.continued = False  # the logging step made even with the restored step

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict
    ) -> None:
        checkpoint[RUN_KEY] = {
            "config": self.config,
            "wandb_id": self.wandb_id,
            # processes that draw batches of their own (not the tensor-parallel ones): data.batch_size is
            # per process, so a resume on another number keeps their product
            "processes": (trainer.distributed_sampler_kwargs or {"num_replicas": 1})["num_replicas"],
        }
        if self.history:  # plain data: read back with weights_only=True
            checkpoint[RUN_KEY]["continuations"] = self.history

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        """Once, before the first step (the loops are restored by then); no cost at the later steps."""
        if not self.continued:
            continue_logging_step(trainer)
            self.continued = True
        retire_hook(self, "on_train_batch_start")


def continue_logging_step(trainer: pl.Trainer) -> None:
    """Make Lightning's logging step (``_batches_that_stepped``) equal the optimizer steps done, as it is
    before every step of an uninterrupted run.

    Lightning adds one to the restored count on a restart, assuming the checkpoint was written inside
    the loop, one behind; ``last.ckpt`` of a finished run is written after fit (``LastCheckpoint.save_final``),
    where the count is already even with the step. Left one ahead, the logging steps
    (``log_every_n_steps``) are missed by one: a run extended from a finished one wrote none of its
    training lines to the loggers and ``metrics.jsonl`` until its last step."""
    step = logging_step(trainer)
    if step != trainer.global_step and set_logging_step(trainer, trainer.global_step):
        log.debug("logging step %d -> %d after the restore", step, trainer.global_step)


class RankConsistency(Callback):
    """Under DDP, every rank must start training from the same step (each resolves ``ckpt_path=auto``
    itself: a rank that resumed another checkpoint, or none, would train on other data positions), and
    a digest of the weights of every rank after fit must be identical."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.world_size < 2 or not torch.distributed.is_initialized():
            return
        steps: list[int | None] = [None] * trainer.world_size
        torch.distributed.all_gather_object(steps, trainer.global_step)
        if len(set(steps)) != 1:
            raise RuntimeError(
                f"the DDP ranks start from different checkpoints: optimizer steps by rank {steps}; "
                "give every rank the same run_dir and ckpt_path"
            )

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.world_size < 2 or not torch.distributed.is_initialized():
            return
        digests: list[str | None] = [None] * trainer.world_size
        torch.distributed.all_gather_object(digests, weights_digest(pl_module))
        if trainer.is_global_zero:
            log.info("weights sha256 by rank after fit: %s", " ".join(digests))
        if len(set(digests)) != 1:
            raise RuntimeError(f"the DDP ranks ended with different weights: sha256 by rank {digests}")


def weights_digest(module: torch.nn.Module) -> str:
    """A digest of ``module``'s whole weights; where each process holds shards of them (FSDP2's
    DTensors), of the gathered tensors (a collective: every process calls it, in the same order)."""
    from torch.distributed.tensor import DTensor

    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]
