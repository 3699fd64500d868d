"""Causal language modelling: predict every next token; loss, perplexity and bits per byte."""

from __future__ import annotations

import math

from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric

from attnlab.schema import task
from attnlab.schema.data import IGNORE_INDEX
from attnlab.tasks.base import TASK_CLASSES, TaskModule
from attnlab.tasks.losses import count_labels, labelled


@TASK_CLASSES.builds(task.CausalLMTask)
class CausalLMTask(TaskModule):
    """Batches hold ``input_ids`` (B, T) and ``labels`` (B, T), the next tokens (IGNORE_INDEX: ignored), and
    packed documents their ``document_ids`` (B, T) (``data.packing=documents``). Evaluation batches may
    hold ``label_bytes`` (B, T), the UTF-8 bytes of the text each label covers (0 where ignored): then
    ``bpb`` (bits per byte) is logged beside the loss, comparable across tokenizers. Evaluation batches
    of a synthetic task hold ``answer_rows`` (B,): each row's labels are one whole answer, and
    ``exact_match`` is the share of rows whose every answer token is the argmax of its teacher-forced
    logits (what greedy decoding would produce, as long as every earlier answer token is right)."""

    reports_perplexity = True

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Every position with a next token (padding, labelled IGNORE_INDEX, is not scored)."""
        return labelled(self.logits(batch), batch["labels"])

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return self.cross_entropy(self.logits(batch), batch["labels"], self.task_cfg.label_smoothing)

    def build_metrics(self) -> dict[str, Metric]:
        return {"loss": MeanMetric(), "bpb": MeanMetric(), "exact_match": MeanMetric()}

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        logits, labels = self.logits(batch), batch["labels"]
        loss, count = self.cross_entropy(logits, labels), count_labels(labels)
        metrics["loss"].update(loss, weight=count)
        if "answer_rows" in batch:
            metrics["exact_match"].update(exact_answers(logits, labels).float())
        if "label_bytes" in batch:
            update_bits_per_byte(metrics["bpb"], loss, count, batch["label_bytes"].sum())


def exact_answers(logits: Tensor, labels: Tensor) -> Tensor:
    """(B,) bool: whether the argmax of ``logits`` (B, T, V) is right at every labelled position of a row."""
    return ((logits.argmax(-1) == labels) | (labels == IGNORE_INDEX)).all(dim=-1)


def update_bits_per_byte(metric: MeanMetric, loss: Tensor, count: Tensor, n_bytes: Tensor) -> None:
    """Add a batch to ``metric``, the bits per byte of all batches so far: sum(nats) / ln 2 / sum(bytes).
    The batch's bits per byte (``loss`` is its mean over ``count`` tokens) weighted by its bytes makes
    the weighted mean exactly that ratio; a batch without bytes adds nothing (weight 0)."""
    value = loss.float() * count / n_bytes.clamp(min=1) / math.log(2)
    metric.update(value, weight=n_bytes)
