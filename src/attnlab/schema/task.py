"""The schemas of the ``task`` group (one class per objective, ``name`` is the tag) and of the ``optim``
group (one class per optimiser, ``name`` is the tag; today AdamW), with their rules (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from attnlab.schema.choice import Choice, TaggedUnion
from attnlab.schema.errors import ConfigError, fraction, not_negative, positive


class TaskName(Choice):
    causal_lm = "causal_lm"
    mlm = "mlm"
    seq2seq = "seq2seq"
    classification = "classification"


class MonitorMode(Choice):
    min = "min"
    max = "max"


@dataclass
class TaskConfig:
    """What every task reads; ``name`` is the tag, chosen with ``task=<name>``."""

    name: TaskName = MISSING
    label_smoothing: float = 0.0  # applied to the training loss; val/test losses are plain NLL
    monitor: str = "val/loss"  # metric for the best checkpoint and for sweeps
    monitor_mode: MonitorMode = MonitorMode.min
    log_attention_every_n_epochs: int = 0  # 0: off; else attention heat maps to the logger

    def check(self) -> None:
        TASKS.check_tag(self)
        fraction("task.label_smoothing", self.label_smoothing)
        not_negative("task.log_attention_every_n_epochs", self.log_attention_every_n_epochs)


@dataclass
class CausalLMTask(TaskConfig):
    """Next-token prediction (GPT): loss and perplexity."""

    name: TaskName = TaskName.causal_lm


@dataclass
class MaskedLMTask(TaskConfig):
    """Masked language modelling (BERT's 80/10/10 masking, in the data collator)."""

    name: TaskName = TaskName.mlm


@dataclass
class Seq2SeqTask(TaskConfig):
    """Teacher-forced sequence-to-sequence; greedy decoding of val/test batches."""

    name: TaskName = TaskName.seq2seq
    label_smoothing: float = 0.1
    eval_decode: bool = True  # greedy-decode val/test batches for exact match, BLEU, chrF


@dataclass
class ClassificationTask(TaskConfig):
    """Classification of text (encoder) or images (ViT): loss, accuracy, macro F1."""

    name: TaskName = TaskName.classification
    monitor: str = "val/acc"
    monitor_mode: MonitorMode = MonitorMode.max


TASKS = TaggedUnion(
    "task",
    "name",
    {
        TaskName.causal_lm: CausalLMTask,
        TaskName.mlm: MaskedLMTask,
        TaskName.seq2seq: Seq2SeqTask,
        TaskName.classification: ClassificationTask,
    },
    "task={}",
)


def task_config(name: str, **settings: object) -> TaskConfig:
    """The task called ``name`` with ``settings`` (its other fields at the task's defaults)."""
    return TASKS.schema_of({"name": name})(**settings)


class OptimName(Choice):
    adamw = "adamw"


class Schedule(Choice):
    """Learning rate over the steps; all but noam warm up linearly first (``attnlab.tasks.optim``)."""

    constant = "constant"
    cosine = "cosine"
    linear = "linear"
    noam = "noam"


class Decay(Choice):
    """Which parameters weight decay shrinks (``attnlab.tasks.optim.param_groups``)."""

    matrices = "matrices"  # weights of linear and convolution layers; never embeddings, norms, biases
    matrices_and_embeddings = "matrices_and_embeddings"  # every tensor of 2+ dimensions (nanoGPT)
    all = "all"  # every parameter


@dataclass
class OptimConfig:
    """What every optimiser reads: the learning rate, its schedule, weight decay; ``name`` is the tag."""

    name: OptimName = MISSING
    lr: float = 1e-3  # peak learning rate; for ``noam`` a multiplier of the paper's formula
    weight_decay: float = 0.1
    decay: Decay = Decay.matrices  # which parameters weight_decay applies to; the rest get none
    schedule: Schedule = Schedule.cosine
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine floor as a fraction of lr
    max_steps: int | None = None  # None: the trainer's max_steps

    def check(self) -> None:
        OPTIMIZERS.check_tag(self)
        positive("optim.lr", self.lr)
        not_negative("optim.weight_decay", self.weight_decay)
        not_negative("optim.warmup_steps", self.warmup_steps)
        if self.schedule == Schedule.noam and self.warmup_steps == 0:
            raise ConfigError("optim.warmup_steps", 0, "the noam schedule needs warmup_steps > 0")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("optim.min_lr_ratio", self.min_lr_ratio, "must be in [0, 1]")
        positive("optim.max_steps", self.max_steps, allow_none=True)


@dataclass
class AdamWConfig(OptimConfig):
    """AdamW (Loshchilov & Hutter 2019), with weight decay on the weight matrices only."""

    name: OptimName = OptimName.adamw
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    eps: float = 1e-8

    def check(self) -> None:
        super().check()
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError("optim.betas", list(self.betas), "must be two numbers in [0, 1)")
        positive("optim.eps", self.eps)


OPTIMIZERS = TaggedUnion("optim", "name", {OptimName.adamw: AdamWConfig}, "optim={}")
