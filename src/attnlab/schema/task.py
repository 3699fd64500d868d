"""The schemas of the ``task`` group (one class per objective, ``name`` is the tag), with their rules
(torch-free). The ``optim`` group's are in ``attnlab.schema.optim``."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from omegaconf import MISSING

from attnlab.schema.choice import Choice, TaggedUnion
from attnlab.schema.data import DataNeeds
from attnlab.schema.errors import ConfigError, fraction, not_negative


class TaskName(Choice):
    causal_lm = "causal_lm"
    mlm = "mlm"
    seq2seq = "seq2seq"
    classification = "classification"
    distill = "distill"


class MonitorMode(Choice):
    min = "min"
    max = "max"


TASKS = TaggedUnion("task", "name", "task={}")


@dataclass
class TaskConfig:
    """What every task reads; ``name`` is the tag, chosen with ``task=<name>``."""

    name: str = MISSING  # a str, not the TaskName enum: a task registered outside attnlab has its own
    label_smoothing: float = 0.0  # applied to the training loss; val/test losses are plain NLL
    monitor: str = "val/loss"  # metric for the best checkpoint and for sweeps
    monitor_mode: MonitorMode = MonitorMode.min
    log_attention_every_n_epochs: int = 0  # 0: off; else attention heat maps to the logger

    data_needs: ClassVar[DataNeeds] = DataNeeds()  # what the task's batches carry, for the data module

    def check(self) -> None:
        TASKS.check_tag(self)
        fraction("task.label_smoothing", self.label_smoothing)
        not_negative("task.log_attention_every_n_epochs", self.log_attention_every_n_epochs)
        monitors = [f"val/{name}" for name in self.val_metrics()]
        if self.monitor not in monitors:
            raise ConfigError(
                "task.monitor",
                self.monitor,
                f"choose one of {', '.join(monitors)} (what task={self.name} logs at validation)",
            )

    def val_metrics(self) -> tuple[str, ...]:
        """The metrics the task module logs at each validation, as ``val/<name>``: what ``monitor``
        may name (``attnlab.tasks`` logs exactly these; a test holds the two together)."""
        return ("loss",)

    def inner(self) -> TaskConfig:
        """The objective the model is trained and scored on: the task itself (``DistillTask``: the
        student's own task, which it wraps). Data, heads and metrics follow this one."""
        return self


@TASKS.register
@dataclass
class CausalLMTask(TaskConfig):
    """Next-token prediction (GPT): loss, perplexity and bits per byte (``bpb``: where the tokenizer
    gives each token's bytes exactly, ``attnlab.data.tokenizers.Tokenizer.token_bytes``)."""

    name: TaskName = TaskName.causal_lm
    data_needs: ClassVar[DataNeeds] = DataNeeds()  # reads the corpus as it is

    def val_metrics(self) -> tuple[str, ...]:
        return ("loss", "ppl", "bpb", "exact_match")  # exact_match: synthetic tasks (data.kind=copy, ...)


@TASKS.register
@dataclass
class MaskedLMTask(TaskConfig):
    """Masked language modelling (BERT's 80/10/10 masking, in the data collator)."""

    name: TaskName = TaskName.mlm
    data_needs: ClassVar[DataNeeds] = DataNeeds(specials=("mask",), masking=True)  # masks tokens

    def val_metrics(self) -> tuple[str, ...]:
        return ("loss", "acc", "ppl")


@TASKS.register
@dataclass
class Seq2SeqTask(TaskConfig):
    """Teacher-forced sequence-to-sequence; greedy decoding of val/test batches."""

    name: TaskName = TaskName.seq2seq
    data_needs: ClassVar[DataNeeds] = DataNeeds(specials=("pad", "bos", "eos"))  # pads and brackets targets
    label_smoothing: float = 0.1
    eval_decode: bool = True  # greedy-decode val/test batches for exact match, BLEU, chrF

    def val_metrics(self) -> tuple[str, ...]:
        decoded = ("exact_match", "bleu", "chrf") if self.eval_decode else ()
        return ("loss", "acc", "ppl", *decoded)


@TASKS.register
@dataclass
class ClassificationTask(TaskConfig):
    """Classification of text (encoder) or images (ViT): loss, accuracy, macro F1."""

    name: TaskName = TaskName.classification
    data_needs: ClassVar[DataNeeds] = DataNeeds(
        specials=("pad", "cls"), classes=True
    )  # pads, reads <cls> and labels
    monitor: str = "val/acc"
    monitor_mode: MonitorMode = MonitorMode.max

    def val_metrics(self) -> tuple[str, ...]:
        return ("loss", "acc", "f1")


@TASKS.register
@dataclass
class DistillTask(TaskConfig):
    """Knowledge distillation (Hinton et al. 2015) from a trained checkpoint of the same family:
    ``alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * objective's loss``, over the logits that
    the objective scores. The student's objective (``objective``) is the teacher's task; attnlab-train
    fills it in from ``task.teacher`` (and the model and data from the teacher's run, under the
    command line's overrides). The settings of that objective (``label_smoothing``, ``eval_decode``,
    ``monitor``) are given here; ``label_smoothing`` smooths the objective's term only."""

    name: TaskName = TaskName.distill
    teacher: str | None = None  # a checkpoint of attnlab-train: task.teacher=<run>/checkpoints/last.ckpt
    alpha: float = 0.5  # the weight of the distillation term; 1 - alpha weighs the objective's loss
    temperature: float = 2.0  # both distributions softened by it; the KL term is scaled by its square
    objective: TaskName | None = None  # the teacher's task (filled in by attnlab-train)
    eval_decode: bool = True  # an objective=seq2seq student greedy-decodes val/test batches

    def check(self) -> None:
        if self.teacher is None:
            raise ConfigError(
                "task.teacher", None, "name the teacher: task.teacher=<checkpoint of attnlab-train>"
            )
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError("task.alpha", self.alpha, "must be in [0, 1]")
        if not self.temperature > 0.0:
            raise ConfigError("task.temperature", self.temperature, "must be > 0")
        if self.objective is None or self.objective == TaskName.distill:
            allowed = [str(n) for n in TASKS.schemas if n != TaskName.distill]
            raise ConfigError(
                "task.objective",
                self.objective,
                f"the teacher's task, one of {', '.join(allowed)} (attnlab-train sets it from task.teacher)",
            )
        super().check()

    def val_metrics(self) -> tuple[str, ...]:
        return self.inner().val_metrics()

    def inner(self) -> TaskConfig:
        cls = TASKS.schema_of({"name": self.objective})
        shared = {f.name for f in fields(cls)} & {f.name for f in fields(self)}
        return cls(**{name: getattr(self, name) for name in shared - {"name"}})


def task_config(name: str, **settings: object) -> TaskConfig:
    """The task called ``name`` with ``settings`` (its other fields at the task's defaults)."""
    return TASKS.schema_of({"name": name})(**settings)
