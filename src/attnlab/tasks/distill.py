"""Knowledge distillation (Hinton et al. 2015): a student learns from a trained teacher's softened
predictions as well as from the labels of its own objective.

``Distillation`` wraps one objective's task module (causal LM, masked LM, seq2seq, classification, any
registered one; ``distilled``):
its training loss is ``alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * objective loss`` over
exactly the logits the objective scores (``TaskModule.scored_logits``: every next token, the masked
tokens, the target tokens, the class logits), so no family or objective is treated apart. Validation,
test metrics and the checkpoint are the objective's own: the module saves the objective's config as
its hyperparameters, and the teacher is no submodule (not in the state dict, not trained, not synced
by DDP), so a student's checkpoint loads like any other (``CausalLMTask.load_from_checkpoint``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.tasks.base import TaskModule, Work


def distillation_loss(
    student: Tensor,
    teacher: Tensor,
    labels: Tensor,
    *,
    alpha: float,
    temperature: float,
    label_smoothing: float = 0.0,
) -> Tensor:
    """``alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) * CE(student, labels)``
    for logits (N, C) and labels (N,), both terms averaged over the N rows. The ``T^2`` keeps the
    gradient of the soft term on the scale of the hard one as ``T`` grows (Hinton et al. 2015, sec. 2)."""
    if labels.numel() == 0:  # nothing scored in this batch (MLM): a zero loss that keeps the graph
        return student.sum()
    t = temperature
    soft = F.kl_div(
        F.log_softmax(student.float() / t, dim=-1),
        F.log_softmax(teacher.float() / t, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    hard = F.cross_entropy(student, labels, label_smoothing=label_smoothing)
    return alpha * t * t * soft + (1.0 - alpha) * hard


class Distillation:
    """Mixin before a ``TaskModule`` class: its training loss learns from ``teacher`` (a task module of
    the same objective, e.g. from ``attnlab.checkpoint.load_task_from_checkpoint``), which is kept
    in eval mode without gradients; everything else is the objective's."""

    def __init__(
        self, *args: Any, teacher: TaskModule, alpha: float, temperature: float, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        teacher.eval().requires_grad_(False)
        # Not a submodule: kept out of the state dict, the optimiser, .train() and DDP.
        object.__setattr__(self, "teacher", teacher)
        self.alpha, self.temperature = alpha, temperature

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self.teacher.to(self.device).eval()

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        logits, labels = self.scored_logits(batch)
        with torch.no_grad():
            teacher_logits, _ = self.teacher.scored_logits(batch)
        return distillation_loss(
            logits,
            teacher_logits,
            labels,
            alpha=self.alpha,
            temperature=self.temperature,
            label_smoothing=self.task_cfg.label_smoothing,
        )

    def batch_work(self, batch: dict[str, Tensor]) -> Work:
        """The student's training work plus the teacher's forward pass: a third of the FLOPs that its
        training (forward + backward, 2 + 4 per parameter and token) would cost."""
        work = super().batch_work(batch)
        return Work(work.tokens, work.samples, work.flops + self.teacher.batch_work(batch).flops / 3)


@functools.cache
def distilled(objective: type[TaskModule]) -> type[TaskModule]:
    """The student's class of an objective's task module: ``Distillation`` before it, so that any
    registered task distills without a class of its own (``DistilledCausalLM``, ...)."""
    name = f"Distilled{objective.__name__}"
    doc = f"A {objective.__name__} student: the logits its objective scores, distilled."
    cls = type(name, (Distillation, objective), {"__doc__": doc, "__module__": __name__})
    globals()[name] = cls  # found by name, so that pickling a student (spawned processes) works
    return cls
