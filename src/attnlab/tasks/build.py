"""Build a task module from its configs and a model."""

from __future__ import annotations

import pytorch_lightning as pl
from torch import nn

from attnlab.schema.checks import check_trains
from attnlab.schema.load import plain
from attnlab.schema.optim import OptimConfig
from attnlab.schema.task import TaskConfig
from attnlab.tasks.base import TaskModule
from attnlab.tasks.causal_lm import CausalLMTask
from attnlab.tasks.classification import ClassificationTask
from attnlab.tasks.distill import DISTILLED
from attnlab.tasks.mlm import MaskedLMTask
from attnlab.tasks.seq2seq import Seq2SeqTask

TASK_CLASSES: dict[str, type[TaskModule]] = {
    "causal_lm": CausalLMTask,
    "mlm": MaskedLMTask,
    "seq2seq": Seq2SeqTask,
    "classification": ClassificationTask,
}


def build_task(
    cfg: TaskConfig,
    optim: OptimConfig,
    model: nn.Module,
    *,
    tokenizer: object = None,
    num_classes: int = 0,
    max_steps: int,
    teacher: TaskModule | None = None,
) -> pl.LightningModule:
    """The task module ``cfg.name`` around ``model``.

    ``num_classes`` is the data's class count (0: not known); for classification it must match
    the classifier the model was built with. ``max_steps`` is the trainer's step budget, which
    the ``cosine`` and ``linear`` schedules decay over unless ``optim.max_steps`` is set. ``cfg`` and
    ``optim`` are checked by their schemas (``attnlab.schema.check_run``), not again here.
    ``task=distill`` builds its objective's module learning from ``teacher`` (``attnlab.tasks.distill``).
    """
    objective = cfg.inner()  # the task itself, or the objective that task=distill wraps
    if objective is not cfg and teacher is None:
        raise ValueError(f"task.name={cfg.name}: needs the teacher's task module")
    check_trains(model.cfg.family, objective.name)
    if objective.name == "classification" and model.cfg.num_classes < 2:
        raise ValueError(
            f"model.num_classes={model.cfg.num_classes}: classification needs at least 2 classes"
        )
    if objective.name == "classification" and num_classes and num_classes != model.cfg.num_classes:
        raise ValueError(
            f"model.num_classes={model.cfg.num_classes} does not match the data's {num_classes} classes"
        )
    if objective.name == "mlm" and not model.cfg.mlm_head:
        raise ValueError("model.mlm_head=false: task.name='mlm' needs the encoder's masked-LM head")
    args = (model, plain(objective), plain(optim), max_steps)
    if objective is cfg:
        return TASK_CLASSES[cfg.name](*args, tokenizer=tokenizer)
    return DISTILLED[objective.name](
        *args, tokenizer=tokenizer, teacher=teacher, alpha=cfg.alpha, temperature=cfg.temperature
    )
