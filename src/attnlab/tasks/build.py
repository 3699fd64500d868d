"""Build a task module from its configs and a model."""

from __future__ import annotations

import pytorch_lightning as pl
from torch import nn

from attnlab.schema.checks import check_trains
from attnlab.schema.optim import OptimConfig
from attnlab.schema.task import TaskConfig
from attnlab.tasks import causal_lm, classification, mlm, seq2seq  # noqa: F401  (they register)
from attnlab.tasks.base import TASK_CLASSES, TaskModule
from attnlab.tasks.distill import distilled


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
    cls = TASK_CLASSES.of(objective)
    cls.check_model(model.cfg, num_classes)
    args = (model, objective, optim, max_steps)
    if objective is cfg:
        return cls(*args, tokenizer=tokenizer)
    return distilled(cls)(
        *args, tokenizer=tokenizer, teacher=teacher, alpha=cfg.alpha, temperature=cfg.temperature
    )
