"""What every task module shares: configs saved for rebuilding, optimiser + schedule, val/test metrics.

A task module wraps one model and knows the batch layout of its objective; it never branches on
the model's family beyond the forward signature. Subclasses implement ``training_loss`` (one
batch, one scalar), ``build_metrics`` and ``evaluate`` (update the val/test metrics).

It takes its configs as the schema's dataclasses and saves them as plain data (the model, task and
optimiser configs, the step budget) into its hyperparameters, from which ``__init__`` rebuilds the
model, so that ``CausalLMTask.load_from_checkpoint(path, weights_only=True)`` (Lightning's own
loader) rebuilds a trained task from its checkpoint: there the configs come back as plain data.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import Precision
from torch import Tensor, nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torchmetrics import MeanMetric, Metric

from attnlab.blocks.qk_clip import check_clippable, clip_qk, recording
from attnlab.models import build_model
from attnlab.models.common import eval_mode
from attnlab.models.flops import flops_per_token, matmul_params
from attnlab.models.parallel import average_replicated_gradients, is_sharded, shard_layers, tensor_parallel
from attnlab.schema.builders import Builders
from attnlab.schema.load import plain, read_model_config, read_optim_config, read_task_config
from attnlab.schema.model import ModelConfig
from attnlab.schema.optim import OnExtend, OptimConfig
from attnlab.schema.task import TASKS, TaskConfig
from attnlab.tasks.lightning_shims import sets_hook_name
from attnlab.tasks.lockstep import metrics_for
from attnlab.tasks.losses import count_labels, cross_entropy, is_compiled
from attnlab.tasks.nonfinite import NonFiniteGuard, check_finite_weights, clip_gradients, gradient_norm
from attnlab.tasks.optim import (
    Schedule,
    apply_settings,
    configure_optimizers,
    group_values,
    schedule_steps,
    stretch_schedule,
)
from attnlab.tasks.step_log import StepLog, log_step_value

STAGES = ("val", "test")
# Checkpoint entries beside Lightning's: the files of the tokenizer (plain text), restored by the
# commands (``attnlab.checkpoint``), and the format of the saved configs. Format 3: the configs
# are the module's hyperparameters only; 2 and 1 (before the tagged groups) also had an "attnlab" entry.
TOKENIZER_KEY = "attnlab_tokenizer"
FORMAT_KEY = "attnlab_format"
NONFINITE_KEY = "attnlab_nonfinite"  # the skip counts of trainer.on_nonfinite=skip, for an exact resume
CHECKPOINT_FORMAT = 3
LOG_AXES = ("step", "epoch")  # logged with the val/test metrics to label them; not metrics themselves


@dataclass
class Work:
    """What one batch costs: tokens and samples processed, and training FLOPs (forward + backward)."""

    tokens: int
    samples: int
    flops: float


def tokenizer_files(tokenizer: object) -> dict[str, str] | None:
    """The files ``tokenizer.save(dir)`` writes, as {name: text}, to embed in a checkpoint."""
    if tokenizer is None or not hasattr(tokenizer, "save"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(tmp)
        files = {}
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), encoding="utf-8") as f:
                files[name] = f.read()
    return files


# The task module of each task's config (``TASK_CLASSES.of(cfg)``), registered by each module.
TASK_CLASSES: Builders[type[TaskModule]] = Builders(TASKS, "task module")


class TaskModule(pl.LightningModule):
    """Base of the task modules; each registers as its config's: ``@TASK_CLASSES.builds(CausalLMTask)``.

    ``model`` is a model built already (any attnlab model: it has ``.cfg``, e.g. with pretrained
    weights) or its config, ``task`` and ``optim`` are their configs: each a dataclass of the schema,
    or the plain data a checkpoint holds (``attnlab.schema.load.plain``; Lightning's loader passes that).
    """

    reports_perplexity = False  # language-model tasks log ``ppl = exp(loss)`` at epoch end

    @classmethod
    def check_model(cls, model: ModelConfig, num_classes: int) -> None:
        """ValueError unless a model of config ``model`` has what this task trains (its heads);
        ``num_classes`` is the data's class count (0: not known)."""

    def __init__(
        self,
        model: nn.Module | ModelConfig | Mapping,
        task: TaskConfig | Mapping,
        optim: OptimConfig | Mapping,
        max_steps: int,
        tokenizer: object = None,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            model = build_model(read_model_config(model) if isinstance(model, Mapping) else model)
        self.model = model
        self.task_cfg = read_task_config(task) if isinstance(task, Mapping) else task
        self.optim_cfg = read_optim_config(optim) if isinstance(optim, Mapping) else optim
        self.max_steps = max_steps
        self.tokenizer = tokenizer
        # Counted now, on the whole model: a strategy may shard it (FSDP) before the first batch.
        self.n_matmul_params = matmul_params(self.model)
        if self.optim_cfg.qk_clip is not None:
            check_clippable(self.model)
        # Plain data only: the checkpoint rebuilds the model from its config, not from a pickle.
        self.save_hyperparameters(
            {
                "model": plain(self.model.cfg),
                "task": plain(self.task_cfg),
                "optim": plain(self.optim_cfg),
                "max_steps": max_steps,
            }
        )
        self.metrics = nn.ModuleDict({stage: nn.ModuleDict(self.build_metrics()) for stage in STAGES})
        self.loaded_step: int | None = None  # the optimizer step of the checkpoint loaded to test
        # What a step whose loss or gradient is not finite does; training sets trainer.on_nonfinite.
        self.nonfinite = NonFiniteGuard()
        self.step_loss: Tensor | None = None  # this step's loss, checked before the optimizer step
        self.step_log = StepLog()  # the values a logging step hands to the loggers (not self.log: cost)
        # The optim.* keys a resume under optim.on_resume=apply changes (training sets them), and the
        # values this run's settings give the optimizer and schedule, kept before the restore.
        self.optim_changes: set[str] = set()
        self.configured: list[tuple[list[dict], Schedule]] = []

    def __setattr__(self, name: str, value: object) -> None:
        """The running hook's name, which Lightning sets some fifty times a step, is set directly
        (``lightning_shims.sets_hook_name``); everything else as ``nn.Module`` sets it."""
        if not sets_hook_name(self, name, value):
            super().__setattr__(name, value)

    # -- what a task defines --------------------------------------------------------------------

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """The model's output for ``batch``: which keys of a batch feed which arguments is written once,
        in the family's ``FamilyModel.logits`` (an in-place ``compile()`` still compiles the call)."""
        return self.model.logits(batch)

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The logits (N, C) of the N predictions the objective scores in ``batch`` and their labels
        (N,): what distillation (``attnlab.tasks.distill``) matches to a teacher's."""
        raise NotImplementedError

    def build_metrics(self) -> dict[str, Metric]:
        """Fresh metrics for one stage; ``loss`` is averaged over tokens (or samples)."""
        return {"loss": MeanMetric()}

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        raise NotImplementedError

    def batch_work(self, batch: dict[str, Tensor]) -> Work:
        """Tokens, samples and FLOPs of a batch whose B examples each run T positions through one stack."""
        b, t = self.model.batch_shape(batch)
        cfg = self.model.cfg
        return Work(b * t, b, b * t * flops_per_token(self.n_matmul_params, cfg.n_layers, t, cfg.d_model))

    # -- shared pieces --------------------------------------------------------------------------

    def configure_model(self) -> None:
        """Split the model's layers over the tensor-parallel processes, then shard it over the
        data-parallel ones, when the strategy gives the module a device mesh (``trainer.strategy=fsdp2``:
        Lightning's ``ModelParallelStrategy``), by the models' own plan (``attnlab.models.parallel``),
        sequence-parallel and async where the strategy says so; under any other strategy nothing. Lightning calls the hook
        again for each stage (fit, then test), so a sharded model is left as it is."""
        mesh = self._device_mesh
        if mesh is not None and not is_sharded(self.model):
            if mesh["tensor_parallel"].size() > 1:
                strategy = self.trainer.strategy  # attnlab's FullyShardedStrategy carries the TP options
                sequence = getattr(strategy, "sequence_parallel", False)
                asynchronous = getattr(strategy, "async_tensor_parallel", False)
                tensor_parallel(self.model, mesh["tensor_parallel"], sequence, asynchronous)
            shard_layers(self.model, mesh["data_parallel"])

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Under tensor parallel, the same gradients of the unsplit parameters on every process of a
        tensor-parallel group (``average_replicated_gradients``), so their copies stay equal."""
        mesh = self._device_mesh
        if mesh is not None and mesh["tensor_parallel"].size() > 1:
            average_replicated_gradients(self.model, mesh["tensor_parallel"])

    def cross_entropy(self, logits: Tensor, labels: Tensor, smoothing: float = 0.0) -> Tensor:
        """Mean cross-entropy over positions whose label is not IGNORE_INDEX; compiled where the model is."""
        return cross_entropy(logits, labels, smoothing, compiled=is_compiled(self.model))

    def configure_optimizers(self) -> dict:
        """The optimiser of ``optim`` (``attnlab.tasks.optim``) + schedule over ``max_steps``; without one (``max_steps <= 0``, a run bounded by
        epochs), over the step count Lightning estimates from the epochs, data and devices."""
        clips_mixed = False  # gradients clipped under mixed precision (the fused kernel cannot be)
        if self._trainer is not None:
            clips_mixed = "mixed" in str(self.trainer.precision) and bool(self.trainer.gradient_clip_val)
        built = configure_optimizers(
            self.model, self.optim_cfg, self.trained_steps(), clips_mixed_precision=clips_mixed
        )
        scheduler = built["lr_scheduler"]["scheduler"]
        # a copy: a restore writes the checkpoint's fields into the scheduler's own schedule
        self.configured = [(group_values(built["optimizer"]), copy.copy(scheduler.lr_lambdas[0]))]
        return built

    def trained_steps(self) -> int:
        """``max_steps``, or for a run bounded by epochs (``max_steps <= 0``) the step count Lightning
        estimates from the epochs, data and devices."""
        if self.max_steps > 0 or self._trainer is None:
            return self.max_steps
        estimated = self.trainer.estimated_stepping_batches
        return int(estimated) if math.isfinite(estimated) else self.max_steps

    def on_train_start(self) -> None:
        """A resumed checkpoint's optimizer and schedule are restored by now. ``optim.on_resume=apply``:
        the changed settings replace theirs. ``optim.on_extend=stretch``: the schedule is stretched
        to end at this run's step budget (``keep`` leaves it as the checkpoint has it; a run that
        starts afresh has its own budget already)."""
        if self.optim_changes:
            for config, (groups, schedule) in zip(
                self.trainer.lr_scheduler_configs, self.configured, strict=True
            ):
                apply_settings(config.scheduler, groups, schedule, self.optim_changes)
        if self.optim_cfg.on_extend == OnExtend.stretch:
            for scheduler in self.trainer.lr_scheduler_configs:
                stretch_schedule(scheduler.scheduler, schedule_steps(self.optim_cfg, self.trained_steps()))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if self.optim_cfg.log_max_logits:
            with recording(self.model) as found:
                loss = self.training_loss(batch)
            self.log_max_logits(found)
        else:
            loss = self.training_loss(batch)
        self.step_loss = loss.detach()
        if self._trainer is not None and self._logs_this_step():
            log_step_value(self, "train/loss", self.global_loss(loss, batch), prog_bar=True)
            log_step_value(self, "lr", self.lr_schedulers().get_last_lr()[0])
            if self.nonfinite.skipped:  # only once a step was skipped: no new column in a healthy run
                log_step_value(self, "train/skipped_steps", float(self.nonfinite.skipped))
        return loss

    def on_train_batch_end(self, outputs: object, batch: dict[str, Tensor], batch_idx: int) -> None:
        """QK-clip after the step (``optim.qk_clip``: the step's batch measured again with the updated
        weights, dropout off); then the step's logged values to the loggers, after every callback
        added its own (``tasks.step_log``)."""
        if self.optim_cfg.qk_clip is not None:
            with eval_mode(self.model):
                clip_qk(self.model, self.optim_cfg.qk_clip, lambda: self.logits(batch))
        self.step_log.write(self.trainer)

    def log_max_logits(self, found: dict[str, Tensor]) -> None:
        """Each self-attention's largest logit of the step (over its heads) as ``train/max_logit/<layer>``."""
        if self._trainer is None or not self._logs_this_step():
            return
        for name, largest in found.items():
            layer = name.removesuffix(".self_attn.fn")
            log_step_value(self, f"train/max_logit/{layer}", largest.max())

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip as Lightning does, then check the step before the optimizer changes the weights
        (``attnlab.tasks.nonfinite``). Clipping by norm is Lightning's own call of ``clip_grad_norm_``
        over the optimizer's parameters, made here to keep the norm it computes: the one checked.
        Under FSDP each rank holds a shard of every gradient, so the norm is FSDP's own, over all
        ranks' shards (``FullyShardedDataParallel.clip_grad_norm_``), which Lightning's FSDP
        precision plugin refuses to call."""
        trainer = self.trainer
        plugin = trainer.precision_plugin
        scaler = getattr(plugin, "scaler", None)  # 16-mixed: the GradScaler skips inf gradients itself
        params = [p for group in optimizer.param_groups for p in group["params"]]
        sharded = (
            trainer.strategy.model if isinstance(trainer.strategy.model, FullyShardedDataParallel) else None
        )
        # None is Lightning's default (by norm); its str enum compares equal to its value, not its str()
        by_norm = bool(gradient_clip_val) and (gradient_clip_algorithm or "norm") == "norm"
        if by_norm and sharded is not None:  # gradients unscaled already (Lightning's FSDPPrecision)
            norm = sharded.clip_grad_norm_(gradient_clip_val)
            norm = norm if scaler is None else None
        elif by_norm and scaler is None and type(plugin).clip_grad_by_norm is Precision.clip_grad_by_norm:
            norm = clip_gradients(params, gradient_clip_val)  # FSDP2, tensor parallel: all shards
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            norm = gradient_norm(params) if scaler is None else None
        agree = trainer.strategy.reduce_boolean_decision if trainer.world_size > 1 else None
        self.nonfinite.check(self.global_step + 1, self.step_loss, norm, optimizer, agree)

    def global_loss(self, loss: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The loss of the global batch (all ranks' shards): each rank's mean weighted by the labels it
        averaged over (tokens, or samples), so it equals one process's loss of the whole batch. One
        all-reduce of two numbers; called on logged steps only, so ranks stay in step."""
        if self.trainer.world_size == 1:
            return loss
        count = count_labels(batch["labels"]).float()  # exact to 2**24 labels, also under bf16 weights
        total = torch.stack([loss.detach().float() * count, count])
        total = self.trainer.strategy.reduce(total, reduce_op="sum")
        return total[0] / total[1].clamp(min=1)

    def _logs_this_step(self) -> bool:
        """Whether this step's values reach the logger: Lightning passes them on when
        ``(global_step + 1) % log_every_n_steps == 0``. The last step is logged too, so that the
        progress bar and ``trainer.callback_metrics`` end with the final values.

        The training loss and learning rate are only logged when they are written out, and not
        with ``self.log`` (``attnlab.tasks.step_log``: its cost at a small model's size).
        """
        trainer = self.trainer
        step, every = self.global_step + 1, trainer.log_every_n_steps
        return bool(trainer.fast_dev_run) or (every > 0 and step % every == 0) or step == trainer.max_steps

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.evaluate(batch, metrics_for(batch, self.metrics["val"], self.build_metrics))

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.evaluate(batch, metrics_for(batch, self.metrics["test"], self.build_metrics))

    def on_validation_epoch_end(self) -> None:
        self.log_epoch_metrics("val")

    def on_test_epoch_end(self) -> None:
        self.log_epoch_metrics("test")

    def log_epoch_metrics(self, stage: str) -> None:
        """Compute, log as ``stage/name``, reset. Each metric's states (sums of losses, counts,
        n-gram statistics) are summed over the processes by torchmetrics before it is computed, so
        the values are those of one process that scored every sample; ``sync_dist`` then averages
        equal numbers."""
        metrics = self.metrics[stage]
        values = {name: metrics[name].compute() for name in self.updated_metrics(metrics)}
        if "loss" in values and self.reports_perplexity:
            values["ppl"] = values["loss"].exp()
        for name, value in values.items():
            self.log(f"{stage}/{name}", value, sync_dist=True, prog_bar=name in ("loss", "acc"))
        if values and self._trainer is not None:
            # Lightning labels these with the count of batches that stepped, one less than the step they
            # evaluate until the loop ends; a logged "step" is the label (equal on every process).
            self.log("step", float(self.evaluated_step(stage)), sync_dist=True)
            self.log("epoch", float(self.current_epoch), sync_dist=True)  # as Lightning adds with a step
        for metric in self.metrics[stage].values():
            metric.reset()

    def updated_metrics(self, metrics: nn.ModuleDict) -> list[str]:
        """The metrics updated on any process. Every process must compute the same ones (computing
        synchronises them), also one whose shard was empty or held nothing to score (MLM batches
        without masked tokens): one all-reduce of a flag per metric."""
        names = list(metrics.keys())
        if self._trainer is None or self.trainer.world_size == 1:
            return [name for name in names if metrics[name].update_called]
        called = torch.tensor([float(metrics[name].update_called) for name in names], device=self.device)
        called = self.trainer.strategy.reduce(called, reduce_op="sum")
        return [name for name, n in zip(names, called.tolist()) if n > 0]

    def evaluated_step(self, stage: str) -> int:
        """The optimizer step of the weights being evaluated: the checkpoint's when one was loaded to test."""
        if stage == "test" and self.loaded_step is not None:
            return self.loaded_step
        return self.global_step

    # -- checkpoints ----------------------------------------------------------------------------

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.loaded_step = checkpoint.get("global_step")
        if NONFINITE_KEY in checkpoint:
            self.nonfinite.load_state_dict(checkpoint[NONFINITE_KEY])

    def on_fit_end(self) -> None:
        self.loaded_step = None  # the weights are the fitted ones until a test loads a checkpoint

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        check_finite_weights(checkpoint["state_dict"], checkpoint["global_step"])
        checkpoint[FORMAT_KEY] = CHECKPOINT_FORMAT
        checkpoint[NONFINITE_KEY] = self.nonfinite.state_dict()
        checkpoint[TOKENIZER_KEY] = self.saved_tokenizer()

    def saved_tokenizer(self) -> dict[str, str] | None:
        """``tokenizer_files`` of the task's tokenizer, made once per tokenizer (it is written into a
        temporary directory and read back: half a millisecond at every checkpoint otherwise)."""
        cached = getattr(self, "_saved_tokenizer", None)
        if cached is None or cached[0] is not self.tokenizer:
            self._saved_tokenizer = cached = (self.tokenizer, tokenizer_files(self.tokenizer))
        return None if cached[1] is None else dict(cached[1])  # each checkpoint its own dict
